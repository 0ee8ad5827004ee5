"""ferrax.install(): unmodified jnp.linalg / jax.scipy.linalg / jax.random code on ferrax."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax._src.interpreters import mlir

import ferrax
from helpers import lapack_pivots

GETRF, PIVOTS, THREEFRY = "ferrax_getrf", "ferrax_lu_pivots_to_permutation", "ferrax_threefry2x32"


def _hlo(f, *args):
    return jax.jit(f).lower(*args).as_text()


def _stock_then_ferrax(f, *args, expect_targets):
    """``jax.jit(f)(*args)`` on stock jax, then with ferrax installed (checking that the
    installed lowering really calls ``expect_targets`` and the stock one does not); ferrax is
    uninstalled again on return."""
    assert not ferrax.installed()
    lowered = jax.jit(f).lower(*args)
    for target in expect_targets:
        assert target not in lowered.as_text()
    stock = jax.tree.map(np.asarray, lowered.compile()(*args))
    ferrax.install()
    try:
        lowered = jax.jit(f).lower(*args)
        for target in expect_targets:
            assert target in lowered.as_text(), f"{target} missing from the installed lowering"
        got = jax.tree.map(np.asarray, lowered.compile()(*args))
    finally:
        ferrax.uninstall()
    return stock, got


def _well_conditioned(random_matrix, shape, dtype):
    a = random_matrix(shape, dtype)
    return (a + shape[-1] * np.eye(shape[-1], dtype=dtype)).astype(dtype)


LINALG = {
    # jax.scipy.linalg.lu is 2-D only; batches go through jax's own vmap rule for lu_p.
    "scipy_lu": (lambda a, b: jsl.lu(a) if a.ndim == 2 else jax.vmap(jsl.lu)(a), [GETRF, PIVOTS]),
    "scipy_lu_factor": (lambda a, b: jsl.lu_factor(a), [GETRF]),
    "solve": (lambda a, b: jnp.linalg.solve(a, b), [GETRF, PIVOTS]),
    "det": (lambda a, b: jnp.linalg.det(a), [GETRF]),
    "slogdet": (lambda a, b: tuple(jnp.linalg.slogdet(a)), [GETRF]),
    "inv": (lambda a, b: jnp.linalg.inv(a), [GETRF, PIVOTS]),
}


@pytest.mark.parametrize("batch", [(), (3,)], ids=str)
def test_linalg_matches_stock(batch, dtype, random_matrix, assert_close):
    a = random_matrix(batch + (6, 6), dtype)
    b = random_matrix(batch + (6, 2), dtype)
    all_linalg = lambda a, b: {name: f(a, b) for name, (f, _) in LINALG.items()}
    stock, got = _stock_then_ferrax(all_linalg, a, b, expect_targets=[GETRF, PIVOTS])
    for name in LINALG:
        leaves_stock, leaves_got = jax.tree.leaves(stock[name]), jax.tree.leaves(got[name])
        assert len(leaves_stock) == len(leaves_got), name
        for x, y in zip(leaves_got, leaves_stock):
            if np.issubdtype(y.dtype, np.integer):  # lu_factor's pivots: LAPACK's (SciPy's)
                assert name == "scipy_lu_factor", name
                np.testing.assert_array_equal(x, lapack_pivots(a)[0], err_msg=name)
                assert x.shape == y.shape and x.dtype == y.dtype
            else:
                assert_close(x, y, dtype, err_msg=name)


def test_linalg_results_are_right(dtype, random_matrix, assert_close, installed):
    """Not only equal to stock jax: correct (against numpy) while installed."""
    a = _well_conditioned(random_matrix, (2, 5, 5), dtype)
    b = random_matrix((2, 5, 3), dtype)
    assert_close(jnp.linalg.det(a), np.linalg.det(a).astype(dtype), dtype, kind="reconstruct")
    assert_close(np.asarray(jnp.linalg.solve(a, b)) , np.linalg.solve(a, b), dtype,
                 kind="reconstruct")
    p, l, u = map(np.asarray, jax.vmap(jsl.lu)(a))
    assert_close(p @ l @ u, a, dtype, kind="reconstruct")
    assert GETRF in _hlo(jnp.linalg.det, a)


RANDOM = {
    "normal": lambda k: jax.random.normal(k, (3, 1001)),
    "normal_f32": lambda k: jax.random.normal(k, (1001,), jnp.float32),
    "uniform": lambda k: jax.random.uniform(k, (7, 33), jnp.float32, -2.0, 3.0),
    "uniform_f64": lambda k: jax.random.uniform(k, (5,)),
    "bits": lambda k: jax.random.bits(k, (4, 257)),
    "bits_u8": lambda k: jax.random.bits(k, (999,), jnp.uint8),
    "bits_u64": lambda k: jax.random.bits(k, (3, 5), jnp.uint64),
    "bits_scalar": lambda k: jax.random.bits(k),
    "split": lambda k: jax.random.key_data(jax.random.split(k, 5)),
    "split_fold_in": lambda k: jax.random.key_data(jax.random.fold_in(jax.random.split(k)[1], 7)),
    "randint": lambda k: jax.random.randint(k, (1000,), -50, 50),
    "permutation": lambda k: jax.random.permutation(k, 100),
}
KEYS = {"key": jax.random.key, "PRNGKey": jax.random.PRNGKey}


# Both key styles, and both counter layouts (jax_threefry_partitionable on and off).
@pytest.mark.parametrize("key_kind, partitionable", [("key", True), ("PRNGKey", False)],
                         ids=["key-partitionable", "PRNGKey-classic"])
def test_random_bit_exact(key_kind, partitionable, rng):
    seed = int(rng.integers(0, 2**31))
    all_random = lambda k: {name: f(k) for name, f in RANDOM.items()}
    with jax.threefry_partitionable(partitionable):
        key = KEYS[key_kind](seed)
        stock, got = _stock_then_ferrax(all_random, key, expect_targets=[THREEFRY])
    for name in RANDOM:
        x, y = got[name], stock[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
        if y.size > 4:  # not degenerate
            assert len(np.unique(y)) > 1, name


def test_random_eager_bit_exact(rng):
    """Outside jit too (op-by-op dispatch recompiles after install)."""
    key = jax.random.key(int(rng.integers(0, 2**31)))
    stock = [np.asarray(jax.random.normal(key, (101,))), np.asarray(jax.random.bits(key, (3, 7)))]
    ferrax.install()
    got = [np.asarray(jax.random.normal(key, (101,))), np.asarray(jax.random.bits(key, (3, 7)))]
    for x, y in zip(got, stock):
        np.testing.assert_array_equal(x, y)


def test_random_differs_between_keys(installed):
    a = jax.random.bits(jax.random.key(1), (64,))
    b = jax.random.bits(jax.random.key(2), (64,))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("name", LINALG)
def test_each_linalg_function_lowers_to_ferrax(name):
    f, targets = LINALG[name]
    args = (jax.ShapeDtypeStruct((2, 4, 4), jnp.float32), jax.ShapeDtypeStruct((2, 4, 1), jnp.float32))
    assert not any(t in _hlo(f, *args) for t in targets)
    ferrax.install()
    text = _hlo(f, *args)
    for target in targets:
        assert target in text


@pytest.mark.parametrize("f, args, targets", [
    (jnp.linalg.det, (jax.ShapeDtypeStruct((4, 4), jnp.float32),), [GETRF]),
    (jnp.linalg.solve, (jax.ShapeDtypeStruct((2, 4, 4), jnp.complex128),
                        jax.ShapeDtypeStruct((2, 4, 1), jnp.complex128)), [GETRF, PIVOTS]),
    (lambda x: jsl.lu(x)[0], (jax.ShapeDtypeStruct((3, 3), jnp.float64),), [GETRF, PIVOTS]),
    (lambda k: jax.random.normal(k, (10,)), (jax.random.key(0),), [THREEFRY]),
], ids=["det", "solve", "lu", "normal"])
def test_hlo_contains_targets_only_while_installed(f, args, targets):
    before = _hlo(f, *args)
    ferrax.install()
    during = _hlo(f, *args)
    ferrax.uninstall()
    after = _hlo(f, *args)
    for target in targets:
        assert target not in before
        assert target in during
        assert target not in after
    # Stock jax's own kernels are back (CPU LAPACK getrf or the pure-HLO threefry).
    assert before == after
    assert "ferrax" not in after


def test_install_uninstall_idempotent(random_matrix):
    cpu_rules = mlir._platform_specific_lowerings["cpu"]
    original = dict(cpu_rules)
    a = random_matrix((4, 4), np.float64)
    stock = np.asarray(jnp.linalg.det(a))
    stock_hlo = _hlo(jnp.linalg.det, a)
    assert not ferrax.installed()
    ferrax.uninstall()  # uninstall without install is a no-op
    assert not ferrax.installed() and dict(cpu_rules) == original

    ferrax.install()
    ferrax.install()
    assert ferrax.installed()
    installed_rules, installed_hlo = dict(cpu_rules), _hlo(jnp.linalg.det, a)
    assert GETRF in installed_hlo
    ferrax.install()  # a third install changes nothing
    assert dict(cpu_rules) == installed_rules and _hlo(jnp.linalg.det, a) == installed_hlo
    np.testing.assert_allclose(jnp.linalg.det(a), stock, rtol=1e-12)

    ferrax.uninstall()
    assert not ferrax.installed()
    ferrax.uninstall()
    assert not ferrax.installed()
    assert dict(cpu_rules) == original  # jax's own rules are back, not copies
    assert _hlo(jnp.linalg.det, a) == stock_hlo
    np.testing.assert_allclose(jnp.linalg.det(a), stock, rtol=1e-12)

    # And again after a full cycle.
    ferrax.install()
    assert ferrax.installed() and _hlo(jnp.linalg.det, a) == installed_hlo


def test_uninstall_restores_every_patch():
    """Each of install()'s patches (lowering rules on every platform, module attributes, the
    batching rule, prepare_lapack_call) reads back what it read before install()."""
    from ferrax import _install

    assert not ferrax.installed()
    before = [patch.get() for patch in _install._PATCHES]
    ferrax.install()
    try:
        assert all(patch.get() is patch.new for patch in _install._PATCHES)
    finally:
        ferrax.uninstall()
    after = [patch.get() for patch in _install._PATCHES]
    assert all(a is b for a, b in zip(after, before))


def test_target_names_and_limits_are_the_library_s():
    """Python's target names are checked against libferrax's table and its kernel limits come
    from the library: a name or limit the library lacks fails loudly."""
    from ferrax import _library, _targets

    table = {(name, platform.lower()) for name, platform, _ in _library.targets()}
    assert (_targets.POTRF, "cuda") in table and (_targets.TRSM, "cpu") in table
    assert _targets.FUSED_CHOLESKY_BLOCK_MAX == _library.limits()["FUSED_CHOLESKY_BLOCK_MAX"]
    with pytest.raises(ImportError, match="ferrax_no_such_target"):
        _targets._target("ferrax_no_such_target", "cpu")
    with pytest.raises(ImportError, match="ferrax_trsm target for cuda"):
        _targets._target("ferrax_trsm", "cpu", "cuda")
    with pytest.raises(ImportError, match="NO_SUCH_LIMIT"):
        _targets._limit("NO_SUCH_LIMIT")


def test_install_recompiles_cached_functions(random_matrix):
    """A function jitted (and cached) before install runs on ferrax afterwards."""
    f = jax.jit(jnp.linalg.det)
    a = random_matrix((5, 5), np.float64)
    stock = np.asarray(f(a))
    ferrax.install()
    assert GETRF in f.lower(a).as_text()
    np.testing.assert_allclose(f(a), stock, rtol=1e-12)
    ferrax.uninstall()
    assert GETRF not in f.lower(a).as_text()


def _grads(a, b):
    det = jax.grad(lambda x: jnp.real(jnp.linalg.det(x)))(a)
    solve_a, solve_b = jax.grad(
        lambda x, y: jnp.sum(jnp.abs(jnp.linalg.solve(x, y)) ** 2), argnums=(0, 1))(a, b)
    logdet = jax.grad(lambda x: jnp.linalg.slogdet(x)[1])(a)
    return det, solve_a, solve_b, logdet


def _check_grads(got, stock, dtype, assert_close):
    for x, y, name in zip(got, stock, ["det", "solve_a", "solve_b", "slogdet"]):
        assert np.abs(y).max() > 0, name
        assert_close(x, y, dtype, kind="reconstruct", err_msg=name)


def test_grad_matches_stock(dtype, random_matrix, assert_close):
    a = _well_conditioned(random_matrix, (5, 5), dtype)
    b = random_matrix((5, 2), dtype)
    stock, got = _stock_then_ferrax(_grads, a, b, expect_targets=[GETRF, PIVOTS])
    _check_grads(got, stock, dtype, assert_close)


def test_grad_eager_matches_stock(random_matrix, assert_close):
    """Op by op (slow to compile, so one dtype)."""
    a = _well_conditioned(random_matrix, (5, 5), np.float64)
    b = random_matrix((5, 2), np.float64)
    stock = _grads(a, b)
    ferrax.install()
    _check_grads(_grads(a, b), stock, np.float64, assert_close)


def test_grad_of_det_is_right(random_matrix, installed):
    a = _well_conditioned(random_matrix, (4, 4), np.float64)
    grad = jax.grad(jnp.linalg.det)(a)
    np.testing.assert_allclose(grad, np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-10)
    jac = jax.jacfwd(lambda x: jnp.linalg.solve(x, jnp.ones(4)))(a)
    x = np.linalg.solve(a, np.ones(4))
    # d(A^-1 b)/dA_jk = -A^-1 e_j x_k
    expected = -np.einsum("ij,k->ijk", np.linalg.inv(a), x)
    np.testing.assert_allclose(jac, expected, rtol=1e-9, atol=1e-12)
    assert GETRF in _hlo(jax.grad(jnp.linalg.det), a)
