"""jax.export of code that runs on ferrax: serialization into a fresh process, shape
polymorphism, and lowering from abstract values only."""

import importlib.util

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import export

import ferrax

TARGETS = ("ferrax_getrf", "ferrax_lu_pivots_to_permutation", "ferrax_threefry2x32",
           "ferrax_cholesky")

# Exported.serialize() needs the optional 'flatbuffers' package (not a jax dependency).
needs_flatbuffers = pytest.mark.skipif(importlib.util.find_spec("flatbuffers") is None,
                                       reason="jax.export serialization needs flatbuffers")


def _program(a, b, key_data):
    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    return {
        "det": jnp.linalg.det(a),
        "solve": jnp.linalg.solve(a, b),
        "cho_solve": jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a @ a.T), b),
        "bits": jax.random.bits(key, (33,)),
        "normal": jax.random.normal(key, (2, 5)),
    }


@pytest.fixture(scope="module")
def exported_program(tmp_path_factory):
    """The program exported with ferrax installed, its inputs, and its outputs on stock jax."""
    rng = np.random.default_rng(20240611)
    a = rng.standard_normal((5, 5)) + 5 * np.eye(5)
    b = rng.standard_normal((5, 2))
    key_data = rng.integers(0, 2**32, size=2, dtype=np.uint32)
    ferrax.uninstall()
    expected = jax.tree.map(np.asarray, jax.jit(_program)(a, b, key_data))
    ferrax.install()
    try:
        exp = export.export(jax.jit(_program),
                            disabled_checks=ferrax.export_disabled_checks())(a, b, key_data)
    finally:
        ferrax.uninstall()
    folder = tmp_path_factory.mktemp("export")
    for name, value in {"a": a, "b": b, "key": key_data}.items():
        np.save(folder / f"in_{name}.npy", value)
    for name, value in expected.items():
        np.save(folder / f"expected_{name}.npy", value)
    return exp, folder, (a, b, key_data), expected


def test_exported_module_calls_ferrax(exported_program):
    exp, _, args, expected = exported_program
    text = exp.mlir_module()
    for target in TARGETS:
        assert target in text
    # Calling it in this process (ferrax imported, not installed) gives stock jax's values.
    got = exp.call(*args)
    for name in expected:
        if expected[name].dtype.kind == "u":
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-12, err_msg=name)


_CHILD = """
    import sys, pathlib
    import numpy as np
    import jax
    {import_ferrax}
    from jax import export
    folder = pathlib.Path(sys.argv[1])
    exp = export.deserialize(bytearray((folder / "program.bin").read_bytes()))
    got = exp.call(*(np.load(folder / f"in_{{n}}.npy") for n in ("a", "b", "key")))
    for name, value in got.items():
        value = np.asarray(value)
        np.save(folder / f"got_{{name}}.npy", value)
        expected = np.load(folder / f"expected_{{name}}.npy")
        if expected.dtype.kind == "u":
            np.testing.assert_array_equal(value, expected, err_msg=name)
        else:
            np.testing.assert_allclose(value, expected, rtol=1e-12, err_msg=name)
    print("CHILD-OK", sorted(got))
"""


@needs_flatbuffers
def test_serialized_module_runs_in_fresh_process(exported_program, run_python):
    exp, folder, _, expected = exported_program
    (folder / "program.bin").write_bytes(exp.serialize())
    proc = run_python(_CHILD.format(import_ferrax="import ferrax"), str(folder))
    assert "CHILD-OK" in proc.stdout
    for name in expected:  # and check here too what the child computed
        got = np.load(folder / f"got_{name}.npy")
        assert got.dtype == expected[name].dtype and got.shape == expected[name].shape
        np.testing.assert_allclose(got, expected[name], rtol=1e-12, err_msg=name)


@needs_flatbuffers
def test_serialized_module_needs_import_ferrax(exported_program, run_python):
    exp, folder, _, _ = exported_program
    (folder / "program.bin").write_bytes(exp.serialize())
    proc = run_python(_CHILD.format(import_ferrax=""), str(folder), check=False)
    assert proc.returncode != 0 and "CHILD-OK" not in proc.stdout
    assert "No FFI handler registered for ferrax_" in proc.stderr, proc.stderr[-2000:]


def test_export_without_disabled_checks_is_refused():
    ferrax.install()
    with pytest.raises(ValueError, match="ferrax_getrf"):
        export.export(jax.jit(jnp.linalg.det))(jax.ShapeDtypeStruct((4, 4), jnp.float32))
    checks = ferrax.export_disabled_checks()
    assert len(checks) >= 3
    assert {str(c) for c in checks} >= {str(export.DisabledSafetyCheck.custom_call(t))
                                        for t in TARGETS}


# --------------------------------------------------------------------------- shape polymorphism

def _poly_spec(dtype):
    return jax.ShapeDtypeStruct(export.symbolic_shape("b, 4, 4"), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
def test_shape_polymorphic_explicit_lu(dtype, random_matrix, assert_close):
    exp = export.export(jax.jit(ferrax.linalg.lu),
                        disabled_checks=ferrax.export_disabled_checks())(_poly_spec(dtype))
    assert "ferrax_getrf" in exp.mlir_module()
    assert "?x4x4" in exp.mlir_module()  # really polymorphic, not specialized
    round_tripped = [exp]
    if importlib.util.find_spec("flatbuffers"):
        round_tripped.append(export.deserialize(exp.serialize()))
    for batch in (2, 5):
        a = random_matrix((batch, 4, 4), dtype)
        stock = [np.asarray(x) for x in jax.lax.linalg.lu(a)]
        for e in round_tripped:
            lu, pivots, perm = map(np.asarray, e.call(a))
            assert lu.shape == (batch, 4, 4)
            assert_close(lu, stock[0], dtype)
            np.testing.assert_array_equal(pivots, stock[1])
            np.testing.assert_array_equal(perm, stock[2])


def test_shape_polymorphic_installed_det(random_matrix, assert_close):
    ferrax.install()
    exp = export.export(jax.jit(jnp.linalg.det),
                        disabled_checks=ferrax.export_disabled_checks())(_poly_spec(np.float64))
    ferrax.uninstall()
    assert "ferrax_getrf" in exp.mlir_module()
    for batch in (1, 3, 6):
        a = random_matrix((batch, 4, 4), np.float64)
        got = np.asarray(exp.call(a))
        assert got.shape == (batch,)
        assert_close(got, np.asarray(jnp.linalg.det(a)), np.float64)
        assert_close(got, np.linalg.det(a), np.float64, kind="reconstruct")


def test_shape_polymorphic_rejects_wrong_shape(random_matrix):
    exp = export.export(jax.jit(ferrax.linalg.lu),
                        disabled_checks=ferrax.export_disabled_checks())(_poly_spec(np.float32))
    with pytest.raises((ValueError, TypeError)):
        exp.call(random_matrix((2, 5, 5), np.float32))


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
                        ["ferrax_getrf", "ferrax_lu_pivots_to_permutation"], True),
    "installed_uniform": (lambda k: jax.random.uniform(jax.random.wrap_key_data(k), (7,)),
                          [jax.ShapeDtypeStruct((2,), jnp.uint32)], ["ferrax_threefry2x32"], True),
}


@pytest.mark.parametrize("name", ABSTRACT)
def test_lowering_and_export_from_abstract_values(name):
    f, specs, targets, install = ABSTRACT[name]
    if install:
        ferrax.install()
    text = jax.jit(f).lower(*specs).as_text()
    exp = export.export(jax.jit(f), platforms=["cpu"],
                        disabled_checks=ferrax.export_disabled_checks())(*specs)
    assert exp.platforms == ("cpu",)
    assert [a.shape for a in exp.in_avals] == [s.shape for s in specs]
    for target in targets:
        assert target in text
        assert target in exp.mlir_module()
