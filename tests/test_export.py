"""jax.export of code that runs on ferrax.

After ``install()``, an unchanged ``jax.export.export`` lowers as stock jax (jaxlib's
export-stable targets): its artifact runs in a fresh process where ferrax cannot be imported.
``ferrax.export`` is the opt-in to ferrax's targets: its artifact runs where ferrax is
imported, and elsewhere fails to deserialize with a message that says to install ferrax.
Results are checked against numpy with tolerances from error bounds; shape polymorphism,
vmap and grad under export; lowering from abstract values.
"""

import collections
import importlib.util
import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import sparse
from jax._src.lax import linalg as lax_linalg

import ferrax

EPS = np.finfo(np.float64).eps
N = 5

#: The ferrax targets the program below lowers to after install() (CPU, x64).
TARGETS = {"ferrax_getrf_row_major", "ferrax_lu_pivots_to_permutation", "ferrax_threefry2x32",
           "ferrax_cholesky", "ferrax_qr", "ferrax_syevd", "ferrax_trsm", "ferrax_lu_solve"}

# Exported.serialize() needs the optional 'flatbuffers' package (not a jax dependency).
needs_flatbuffers = pytest.mark.skipif(importlib.util.find_spec("flatbuffers") is None,
                                       reason="jax.export serialization needs flatbuffers")


def custom_calls(exp) -> collections.Counter:
    """The artifact's custom-call targets, with their counts (not its locations, whose names
    may be ferrax primitives' names)."""
    text = exp.mlir_module()
    return collections.Counter(re.findall(r'custom_call @"?([\w.$]+)', text)
                               + re.findall(r'call_target_name = "([^"]+)"', text))


def ferrax_targets(exp) -> set:
    return {t for t in custom_calls(exp) if t.startswith("ferrax")}


def _program(a, b, key_data):
    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    spd = a @ a.T
    q, r = jnp.linalg.qr(a)
    return {
        "det": jnp.linalg.det(a),
        "solve": jnp.linalg.solve(a, b),
        "cho_solve": jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(spd), b),
        "triangular": jax.scipy.linalg.solve_triangular(jnp.tril(a), b, lower=True),
        "eigvalsh": jnp.linalg.eigvalsh(spd),
        "q": q, "r": r,
        "bits": jax.random.bits(key, (33,)),
        "normal": jax.random.normal(key, (2, 5)),
    }


def _residual_ok(m, x, rhs, err_msg):
    # Backward stable solvers: ||m x - rhs|| <= c n eps ||m|| ||x|| (c = 10: slack over the
    # bound's constant, far below an error of any consequence).
    residual = np.linalg.norm(m @ x - rhs)
    bound = 10 * N * EPS * np.linalg.norm(m) * np.linalg.norm(x)
    assert residual <= bound, (err_msg, residual, bound)


def check_program(got, inputs, random):
    """``got``: the program's outputs on ``inputs``; checked against numpy (linear algebra)
    and against ``random`` (jax.random's stream computed without ferrax: integer hashing that
    defines the stream, no kernel of jaxlib's)."""
    a, b, _ = inputs
    got = {name: np.asarray(value) for name, value in got.items()}
    spd = a @ a.T
    cond = np.linalg.cond(a)
    np.testing.assert_allclose(got["det"], np.linalg.det(a), rtol=10 * N * EPS * cond)
    _residual_ok(a, got["solve"], b, "solve")
    _residual_ok(spd, got["cho_solve"], b, "cho_solve")
    _residual_ok(np.tril(a), got["triangular"], b, "triangular")
    # Weyl: each eigenvalue within ~n eps ||A||.
    np.testing.assert_allclose(got["eigvalsh"], np.linalg.eigvalsh(spd), rtol=0,
                               atol=10 * N * EPS * np.linalg.norm(spd, 2))
    q, r = got["q"], got["r"]
    assert np.allclose(np.triu(r), r, rtol=0, atol=0)
    np.testing.assert_allclose(q.T @ q, np.eye(N), rtol=0, atol=10 * N * EPS)
    np.testing.assert_allclose(q @ r, a, rtol=0, atol=10 * N * EPS * np.linalg.norm(a))
    np.testing.assert_array_equal(got["bits"], random["bits"])
    np.testing.assert_allclose(got["normal"], random["normal"], rtol=4 * EPS, atol=4 * EPS)


@pytest.fixture(scope="module")
def program_inputs(tmp_path_factory):
    """The program's inputs, and its random outputs on jax without ferrax installed, saved in
    a folder for the child processes."""
    rng = np.random.default_rng(20240611)
    a = rng.standard_normal((N, N)) + N * np.eye(N)
    b = rng.standard_normal((N, 2))
    key_data = rng.integers(0, 2**32, size=2, dtype=np.uint32)
    ferrax.uninstall()
    stock = jax.jit(_program)(a, b, key_data)
    random = {name: np.asarray(stock[name]) for name in ("bits", "normal")}
    folder = tmp_path_factory.mktemp("export")
    for name, value in {"a": a, "b": b, "key": key_data}.items():
        np.save(folder / f"in_{name}.npy", value)
    return (a, b, key_data), random, folder


def _specs(inputs):
    return [jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in inputs]


def _export_installed(exporter, inputs):
    ferrax.install()
    try:
        return exporter(jax.jit(_program))(*_specs(inputs))
    finally:
        ferrax.uninstall()


@pytest.fixture(scope="module")
def plain_artifact(program_inputs):
    """The program exported after install() by unchanged code: no disabled_checks."""
    return _export_installed(export.export, program_inputs[0])


@pytest.fixture(scope="module")
def ferrax_artifact(program_inputs):
    """The program exported after install() with the opt-in."""
    return _export_installed(ferrax.export, program_inputs[0])


# ------------------------------------------------------------------ unchanged export: stock jax

def test_plain_export_after_install_is_stock_jax(plain_artifact, program_inputs):
    inputs, _, _ = program_inputs
    assert not ferrax_targets(plain_artifact), custom_calls(plain_artifact)
    assert plain_artifact.disabled_safety_checks == ()
    assert ferrax.NeedsFerrax() not in plain_artifact.unordered_effects
    # The same calls, as many, as stock jax's export of the same code.
    stock = export.export(jax.jit(_program))(*_specs(inputs))
    assert custom_calls(plain_artifact) == custom_calls(stock)
    assert custom_calls(plain_artifact)  # LAPACK calls there are (not all folded away)


def test_jit_after_install_still_lowers_to_ferrax(program_inputs):
    inputs, _, _ = program_inputs
    ferrax.install()
    text = jax.jit(_program).lower(*_specs(inputs)).as_text()
    for target in TARGETS:
        assert f"@{target}(" in text or f'"{target}"' in text, target


def test_plain_artifact_runs_here(plain_artifact, program_inputs):
    inputs, random, _ = program_inputs
    check_program(plain_artifact.call(*inputs), inputs, random)
    ferrax.install()  # installed in the calling process too: the artifact has no ferrax call
    check_program(plain_artifact.call(*inputs), inputs, random)


_CHILD = """
    import pathlib, sys
    folder = pathlib.Path(sys.argv[1])
    if sys.argv[2] == "without-ferrax":
        # As if it were not installed (it is, in the venv scripts/test makes): importing it
        # raises ImportError.
        sys.modules["ferrax"] = None
    else:
        import ferrax
    import numpy as np
    import jax
    from jax import export
    exp = export.deserialize(bytearray((folder / "program.bin").read_bytes()))
    got = exp.call(*(np.load(folder / f"in_{n}.npy") for n in ("a", "b", "key")))
    for name, value in got.items():
        np.save(folder / f"got_{name}.npy", np.asarray(value))
    if sys.argv[2] == "without-ferrax":
        assert not [m for m, v in sys.modules.items() if m.startswith("ferrax") and v], "imported"
    print("CHILD-OK", sorted(got))
"""

#: What makes the checkout's ferrax importable in a child (a venv's installed one the child
#: blocks itself).
_NO_FERRAX = {"PYTHONPATH": "", "FERRAX_LIBRARY": ""}


def _run_child(run_python, exp, folder, mode, **kwargs):
    (folder / "program.bin").write_bytes(exp.serialize())
    for old in folder.glob("got_*.npy"):
        old.unlink()
    env = _NO_FERRAX if mode == "without-ferrax" else None
    return run_python(_CHILD, str(folder), mode, env=env, **kwargs)


def _assert_runs_in_child(run_python, artifact, program_inputs, mode):
    """The child runs ``artifact`` (``mode``: with or without ferrax) and its results check."""
    inputs, random, folder = program_inputs
    proc = _run_child(run_python, artifact, folder, mode)
    assert "CHILD-OK" in proc.stdout
    got = {name: np.load(folder / f"got_{name}.npy") for name in _program_names()}
    check_program(got, inputs, random)


@needs_flatbuffers
def test_plain_artifact_runs_in_process_without_ferrax(plain_artifact, program_inputs, run_python):
    _assert_runs_in_child(run_python, plain_artifact, program_inputs, "without-ferrax")


def _program_names():
    return jax.eval_shape(_program, *_specs((np.zeros((N, N)), np.zeros((N, 2)),
                                              np.zeros(2, np.uint32)))).keys()


# --------------------------------------------------------------------------- opt-in: ferrax.export

def test_ferrax_export_has_ferrax_targets(ferrax_artifact, program_inputs):
    inputs, random, _ = program_inputs
    assert ferrax_targets(ferrax_artifact) == TARGETS
    assert ferrax.NeedsFerrax() in ferrax_artifact.unordered_effects
    # jax's custom-call check was satisfied without the caller passing disabled_checks.
    assert {str(c) for c in ferrax_artifact.disabled_safety_checks} >= {
        str(export.DisabledSafetyCheck.custom_call(t)) for t in TARGETS}
    check_program(ferrax_artifact.call(*inputs), inputs, random)


@needs_flatbuffers
def test_ferrax_artifact_runs_in_process_with_ferrax(ferrax_artifact, program_inputs, run_python):
    _assert_runs_in_child(run_python, ferrax_artifact, program_inputs, "with-ferrax")


@needs_flatbuffers
def test_ferrax_artifact_without_ferrax_says_to_install_it(ferrax_artifact, program_inputs,
                                                           run_python):
    _, _, folder = program_inputs
    proc = _run_child(run_python, ferrax_artifact, folder, "without-ferrax", check=False)
    assert proc.returncode != 0 and "CHILD-OK" not in proc.stdout
    # At deserialization, before any compilation.
    assert "cannot deserialize effect type ferrax.NeedsFerrax" in proc.stderr, proc.stderr[-2000:]
    assert "install ferrax" in proc.stderr and "import ferrax" in proc.stderr


def test_ferrax_export_of_uninstalled_code_is_stock():
    # The opt-in lowers as jit does: without install(), jax's own targets and no mark.
    exp = ferrax.export(jax.jit(jnp.linalg.det))(jax.ShapeDtypeStruct((4, 4), jnp.float64))
    assert not ferrax_targets(exp) and ferrax.NeedsFerrax() not in exp.unordered_effects


def test_plain_and_ferrax_exports_do_not_share_caches():
    ferrax.install()
    f = jax.jit(lambda a: jnp.linalg.solve(a, a[:, 0]))
    spec = jax.ShapeDtypeStruct((4, 4), jnp.float64)
    for _ in range(2):
        assert not ferrax_targets(export.export(f)(spec))
        assert ferrax_targets(ferrax.export(f)(spec)) == {
            "ferrax_getrf_row_major", "ferrax_lu_pivots_to_permutation", "ferrax_lu_solve"}
    assert "ferrax_getrf_row_major" in f.lower(spec).as_text()


# ----------------------------------------------------- explicit ferrax functions and disabled_checks

def test_explicit_ferrax_functions_need_the_opt_in():
    spec = jax.ShapeDtypeStruct((4, 4), jnp.float32)
    with pytest.raises(ValueError, match="ferrax_getrf"):
        export.export(jax.jit(ferrax.linalg.getrf))(spec)
    assert ferrax_targets(ferrax.export(jax.jit(ferrax.linalg.getrf))(spec)) == {"ferrax_getrf"}
    # jax's own way still works: disabled_checks (an artifact without the mark).
    checks = ferrax.export_disabled_checks()
    assert {str(c) for c in checks} >= {str(export.DisabledSafetyCheck.custom_call(t))
                                        for t in TARGETS | {"ferrax_getrf"}}
    exp = export.export(jax.jit(ferrax.linalg.getrf), disabled_checks=checks)(spec)
    assert ferrax_targets(exp) == {"ferrax_getrf"}
    assert ferrax.NeedsFerrax() not in exp.unordered_effects


@needs_flatbuffers
def test_unmarked_artifact_without_ferrax_names_the_target(run_python, tmp_path):
    # An artifact exported with disabled_checks only has XLA's message where ferrax is missing.
    exp = export.export(jax.jit(lambda a, b, k: {"lu": ferrax.linalg.getrf(a)[0]}),
                        disabled_checks=ferrax.export_disabled_checks())(
        *_specs((np.eye(3), np.zeros((3, 2)), np.zeros(2, np.uint32))))
    for name, value in {"a": np.eye(3), "b": np.zeros((3, 2)), "key": np.zeros(2, np.uint32)}.items():
        np.save(tmp_path / f"in_{name}.npy", value)
    proc = _run_child(run_python, exp, tmp_path, "without-ferrax", check=False)
    assert proc.returncode != 0 and "CHILD-OK" not in proc.stdout
    assert "No FFI handler registered for ferrax_getrf" in proc.stderr, proc.stderr[-2000:]


# --------------------------------------------------------------------------- shape polymorphism

def _poly_spec(dtype):
    return jax.ShapeDtypeStruct(export.symbolic_shape("b, 4, 4"), dtype)


def _round_trips(exp):
    out = [exp]
    if importlib.util.find_spec("flatbuffers"):
        out.append(export.deserialize(exp.serialize()))
    return out


def _check_det(got, a):
    got = np.asarray(got)
    assert got.shape == a.shape[:1]
    cond = max(np.linalg.cond(m) for m in a)
    np.testing.assert_allclose(got, np.linalg.det(a), rtol=10 * 4 * EPS * cond)


@pytest.mark.parametrize("opt_in", [False, True], ids=["plain", "ferrax"])
def test_shape_polymorphic_installed_det(opt_in, random_matrix):
    ferrax.install()
    exporter = ferrax.export if opt_in else export.export
    exp = exporter(jax.jit(jnp.linalg.det))(_poly_spec(np.float64))
    ferrax.uninstall()
    assert "?x4x4" in exp.mlir_module()  # really polymorphic, not specialized
    # With a symbolic batch the lu route is jax's rule, on ferrax's LAPACK-contract getrf.
    assert ferrax_targets(exp) == ({"ferrax_getrf"} if opt_in else set())
    for e in _round_trips(exp):
        for batch in (1, 3, 6):
            a = random_matrix((batch, 4, 4), np.float64)
            _check_det(e.call(a), a)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
def test_shape_polymorphic_explicit_lu(dtype, random_matrix, assert_close):
    exp = ferrax.export(jax.jit(ferrax.linalg.lu))(_poly_spec(dtype))
    assert "ferrax_getrf" in ferrax_targets(exp)
    assert "?x4x4" in exp.mlir_module()
    for e in _round_trips(exp):
        for batch in (2, 5):
            a = random_matrix((batch, 4, 4), dtype)
            lu, pivots, perm = map(np.asarray, e.call(a))
            assert lu.shape == (batch, 4, 4)
            l = np.tril(lu, -1) + np.eye(4, dtype=dtype)
            u = np.triu(lu)
            assert_close(a[np.arange(batch)[:, None], perm], l @ u, dtype, kind="reconstruct")
            np.testing.assert_array_equal(np.sort(perm, axis=-1), np.broadcast_to(np.arange(4), perm.shape))
            assert pivots.shape == (batch, 4)


def test_shape_polymorphic_rejects_wrong_shape(random_matrix):
    exp = ferrax.export(jax.jit(ferrax.linalg.lu))(_poly_spec(np.float32))
    with pytest.raises((ValueError, TypeError)):
        exp.call(random_matrix((2, 5, 5), np.float32))


# ------------------------------------------------------------------------ vmap and grad, exported

def _logdet_grads(a):
    # d log|det A| / dA = A^-T, and the derivative of a Cholesky.
    g = jax.vmap(jax.grad(lambda m: jnp.linalg.slogdet(m)[1]))(a)
    h = jax.vmap(jax.grad(lambda m: jnp.sum(jnp.log(jnp.diagonal(
        jnp.linalg.cholesky(m @ m.T + 4 * jnp.eye(4)))))))(a)
    return g, h


@pytest.mark.parametrize("opt_in", [False, True], ids=["plain", "ferrax"])
def test_vmap_and_grad_export(opt_in, random_matrix):
    ferrax.install()
    exporter = ferrax.export if opt_in else export.export
    exp = exporter(jax.jit(_logdet_grads))(jax.ShapeDtypeStruct((3, 4, 4), jnp.float64))
    ferrax.uninstall()
    if opt_in:
        # (cholesky's derivative is jax's steps, on ferrax's LAPACK-contract potrf)
        assert {"ferrax_getrf_row_major", "ferrax_potrf"} <= ferrax_targets(exp)
    else:
        assert not ferrax_targets(exp), custom_calls(exp)
    a = random_matrix((3, 4, 4), np.float64) + 4 * np.eye(4)
    for e in _round_trips(exp):
        g, h = map(np.asarray, e.call(a))
        inv_t = np.linalg.inv(a).transpose(0, 2, 1)
        np.testing.assert_allclose(g, inv_t, rtol=0,
                                   atol=100 * EPS * max(np.linalg.cond(m) for m in a) * np.abs(inv_t).max())
        # d/dM sum log diag chol(M M^T + 4I) = d/dM (1/2) log det(M M^T + 4I) = (S^-1) M.
        s = a @ a.transpose(0, 2, 1) + 4 * np.eye(4)
        want = np.linalg.solve(s, a)
        np.testing.assert_allclose(h, want, rtol=0, atol=1e3 * EPS * np.abs(want).max())


# ------------------------------------------------------------------- lowering from abstract values

ABSTRACT = {
    "getrf": (ferrax.linalg.getrf, [jax.ShapeDtypeStruct((3, 6, 6), jnp.complex64)],
              ["ferrax_getrf"], False),
    "pivots": (lambda p: ferrax.linalg.lu_pivots_to_permutation(p, 8),
               [jax.ShapeDtypeStruct((2, 5), jnp.int32)], ["ferrax_lu_pivots_to_permutation"],
               False),
    "threefry": (ferrax.random.threefry_2x32, [jax.ShapeDtypeStruct((2,), jnp.uint32),
                                               jax.ShapeDtypeStruct((1001,), jnp.uint32)],
                 ["ferrax_threefry2x32"], False),
    "installed_solve": (jnp.linalg.solve, [jax.ShapeDtypeStruct((4, 4), jnp.float64),
                                           jax.ShapeDtypeStruct((4,), jnp.float64)],
                        ["ferrax_getrf_row_major", "ferrax_lu_pivots_to_permutation"], True),
    "installed_uniform": (lambda k: jax.random.uniform(jax.random.wrap_key_data(k), (7,)),
                          [jax.ShapeDtypeStruct((2,), jnp.uint32)], ["ferrax_threefry2x32"], True),
}


@pytest.mark.parametrize("name", ABSTRACT)
def test_lowering_and_export_from_abstract_values(name):
    f, specs, targets, install = ABSTRACT[name]
    if install:
        ferrax.install()
    text = jax.jit(f).lower(*specs).as_text()
    exp = ferrax.export(jax.jit(f), platforms=["cpu"])(*specs)
    assert exp.platforms == ("cpu",)
    assert [a.shape for a in exp.in_avals] == [s.shape for s in specs]
    for target in targets:
        assert target in text
        assert target in ferrax_targets(exp)
    if install:  # and unchanged export code gives stock jax's
        assert not ferrax_targets(export.export(jax.jit(f), platforms=["cpu"])(*specs))


# ------------------------------------------------------------------ CUDA rows (lowered, not run)

def _gpu_program(a):
    # (Not cholesky_update: stock jax's CUDA target for it is not export-stable.)
    spd = a @ a.mT + 8 * jnp.eye(8)
    tridiagonal = jax.lax.linalg.tridiagonal_solve(a[:, 0], a[:, 1] + 8, a[:, 2], a[..., :2])
    product = sparse.BCOO.fromdense(a[0], nse=64) @ a[1]
    return (jax.lax.linalg.lu(a)[0], jnp.linalg.qr(a)[1], jnp.linalg.cholesky(spd),
            lax_linalg.geqrf(a)[0], tridiagonal, product)


def test_plain_multiplatform_export_is_stock_on_cuda_too():
    """The CUDA rows of the routing table (lowering for CUDA needs no GPU), at every size:
    a plain export calls what stock jax's calls; ferrax.export calls ferrax's kernels."""
    specs = (jax.ShapeDtypeStruct((6, 8, 8), jnp.float32), jax.ShapeDtypeStruct((8, 8), jnp.float32),
             jax.ShapeDtypeStruct((8,), jnp.float32))
    stock = export.export(jax.jit(_gpu_program), platforms=["cpu", "cuda"])(specs[0])
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        plain = export.export(jax.jit(_gpu_program), platforms=["cpu", "cuda"])(specs[0])
        opted = ferrax.export(jax.jit(_gpu_program), platforms=["cpu", "cuda"])(specs[0])
        # install()'s batched cholesky_update (jax has no batching rule) exports as jax ops.
        batched = export.export(jax.jit(jax.vmap(jax.lax.linalg.cholesky_update)),
                                platforms=["cuda"])(*(jax.ShapeDtypeStruct((3, *s.shape), s.dtype)
                                                      for s in specs[1:]))
    # jax's export-stable targets only (jax's check passed), stock's and one more: where
    # install() gives a primitive a rule per platform that stock jax lowers once for all, jax
    # puts each platform's lowering in a branch of its own, where the Q that the program drops
    # is not pruned away (qr's orgqr, dead code).
    assert not ferrax_targets(plain)
    assert set(custom_calls(stock)) <= set(custom_calls(plain))
    assert set(custom_calls(plain)) - set(custom_calls(stock)) <= {"lapack_sorgqr_ffi",
                                                                   "cusolver_orgqr_ffi"}
    assert not ferrax_targets(batched), custom_calls(batched)
    assert {"ferrax_getrf_row_major", "ferrax_qr", "ferrax_cholesky",
            "ferrax_geqrf", "ferrax_tridiagonal_solve", "ferrax_coo_sparse_dense"
            } <= ferrax_targets(opted)
