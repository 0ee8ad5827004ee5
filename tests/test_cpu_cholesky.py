"""jax's ``cholesky`` on the CPU as one ``ferrax_cholesky`` call (``ferrax.linalg.cholesky``,
what ``ferrax.install()`` makes of ``jax.lax.linalg.cholesky``): symmetrization, the factor
and jax's NaN-below-zeros result for failures, against stock jax on both sides of the
Rust / faer / LAPACK hand-overs (16, 96) and of the one to a matrix over all the threads;
differentiation, vmap, jax.scipy and export through it.
"""

import importlib.util

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import export

import ferrax
from helpers import assert_matches_stock

FUSED = "ferrax_cholesky"
TOL = {np.float32: 1e-4, np.float64: 1e-11, np.complex64: 1e-4, np.complex128: 1e-11}


def _positive_definite(random_matrix, shape, dtype):
    """Hermitian positive definite, plus a perturbation that symmetrization removes (and that
    the lower triangle alone does not see)."""
    x = random_matrix(shape, dtype)
    n = shape[-1]
    h = x @ np.conj(np.swapaxes(x, -1, -2)) + n * np.eye(n)
    return (h + 0.3 * np.triu(random_matrix(shape, dtype), 1)).astype(dtype)


def _stock_then_installed(fn, *args, fused, target=FUSED):
    """``jax.jit(fn)`` on stock jax, then installed, checking whether the latter calls
    ``target`` (``fused``: whether it calls ferrax_cholesky)."""
    ferrax.uninstall()
    stock = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    ferrax.install()
    try:
        lowered = jax.jit(fn).lower(*args)
        assert (FUSED in lowered.as_text()) == fused
        assert target in lowered.as_text()
        ours = jax.tree.map(np.asarray, lowered.compile()(*args))
    finally:
        ferrax.uninstall()
    return stock, ours


@pytest.mark.parametrize("symmetrize", [True, False])
@pytest.mark.parametrize("n", [1, 5, 16, 17, 40, 96, 97, 128, 129])
def test_matches_stock(n, symmetrize, dtype, random_matrix, assert_close):
    batch = 11 if n <= 40 else 3
    a = _positive_definite(random_matrix, (batch, n, n), dtype)
    a[1, n // 2, n // 2] = -1  # fails at or before pivot n // 2
    a[2, n - 1, n - 1] = -n * 1e3  # fails at the last pivot
    fn = lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=symmetrize)
    stock, ours = _stock_then_installed(fn, a, fused=True)
    # jax's failure result: NaN on and below the diagonal, zeros above.
    lower = np.tril(np.ones((n, n), bool))
    for b in (1, 2):
        assert np.isnan(ours[b][lower]).all() and (ours[b][~lower] == 0).all(), b
    assert_matches_stock(ours, stock, TOL[dtype])
    if symmetrize:
        h = (a + np.conj(np.swapaxes(a, -1, -2))) / 2
    else:
        h = np.tril(a) + np.conj(np.swapaxes(np.tril(a, -1), -1, -2))
    l = ours[3:]
    assert_close(l @ np.conj(np.swapaxes(l, -1, -2)), h[3:].astype(dtype), dtype,
                 kind="reconstruct")


@pytest.mark.parametrize("case", ["regular", "fails", "nan", "inf_last"])
@pytest.mark.parametrize("batch, n", [(1, 128), (1, 200), (2, 300)], ids=str)
def test_one_matrix_over_the_threads(batch, n, case, dtype, random_matrix, assert_close):
    """From 128 with fewer matrices than threads (past 2048 with any; 2×300: a task each where
    the pool has two threads), each matrix over the pool by steps of 64 columns (faer's Cholesky of the diagonal block, then the solve below it
    and the update right of it in blocks, one task each). A pivot that is not positive in the
    third step, a NaN, or an infinite last pivot (faer stops, LAPACK factors on from the start)
    give stock jax's result (OpenBLAS's potrf does not test for NaN: NaN in the rows it
    reaches, ferrax's wherever stock's)."""
    a = _positive_definite(random_matrix, (batch, n, n), dtype)
    if case == "fails":
        a[0, 150 % n, 150 % n] = -n * 1e3
    elif case == "nan":
        a[0, 100, 70] = np.nan
    elif case == "inf_last":
        a[0, n - 1, n - 1] = np.inf
    stock, ours = _stock_then_installed(jnp.linalg.cholesky, a, fused=True)
    lower = np.tril(np.ones((n, n), bool))
    if case == "fails":
        assert np.isnan(ours[0][lower]).all() and (ours[0][~lower] == 0).all()
        assert np.isnan(stock[0][lower]).all()
    if case == "nan":
        assert np.isnan(ours[0][np.isnan(stock[0])]).all() and np.isnan(stock[0]).any()
    if case == "inf_last":
        assert np.isinf(ours[0, n - 1, n - 1]) and np.isfinite(ours[0, :n - 1]).all()
    compared = slice(1 if case == "nan" else 0, batch)
    assert_matches_stock(ours[compared], stock[compared], TOL[dtype])
    good = slice(0 if case == "regular" else 1, batch)
    h = (a[good] + np.conj(np.swapaxes(a[good], -1, -2))) / 2
    l = ours[good]
    assert (np.triu(l, 1) == 0).all()
    assert_close(l @ np.conj(np.swapaxes(l, -1, -2)), h.astype(dtype), dtype,
                 kind="reconstruct")


def test_non_finite_inputs_fail_as_stock(dtype, random_matrix):
    n = 24
    a = _positive_definite(random_matrix, (6, n, n), dtype)
    a[0, 5, 3] = np.nan  # below the diagonal: reaches the factorization
    a[1, 3, 5] = np.inf  # above: symmetrization carries it below
    a[2, 0, 0] = np.nan
    # An infinite last pivot: LAPACK factors on (faer, which ferrax runs first at this order,
    # stops there), so jax's result is the factor with an infinite last diagonal, not NaN.
    a[3, n - 1, n - 1] = np.inf
    fn = jnp.linalg.cholesky
    stock, ours = _stock_then_installed(fn, a, fused=True)
    for b in (0, 1, 2):
        assert not np.isfinite(ours[b]).all() and not np.isfinite(stock[b]).all(), b
    assert np.isinf(stock[3, n - 1, n - 1]) and np.isfinite(stock[3, :n - 1]).all()
    assert_matches_stock(ours[3:], stock[3:], TOL[dtype])


@pytest.mark.parametrize("shape", [(0, 4, 4), (3, 0, 0), (0, 0, 0), (2, 0, 3, 3), (1, 1)],
                         ids=str)
def test_empty_and_degenerate(shape, dtype, random_matrix):
    a = np.abs(random_matrix(shape, dtype)) + 1  # 1×1: positive
    stock, ours = _stock_then_installed(jnp.linalg.cholesky, a, fused=True)
    assert ours.shape == stock.shape == shape
    np.testing.assert_allclose(ours, stock, rtol=TOL[dtype])


def test_routes_of_jax_scipy_and_numpy(random_matrix, assert_close):
    dtype = np.complex128
    a = _positive_definite(random_matrix, (4, 9, 9), dtype)
    b = random_matrix((4, 9, 2), dtype)
    fns = {
        "jnp": jnp.linalg.cholesky,
        "jnp_upper": lambda a: jnp.linalg.cholesky(a, upper=True),
        "jsl_lower": lambda a: jsl.cholesky(a, lower=True),
        "jsl_upper": lambda a: jsl.cholesky(a, lower=False),
        "cho_solve": lambda a: jax.vmap(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b))(a, b),
        "lax": lambda a: jax.lax.linalg.cholesky(a),  # looked up after install()
    }
    for name, fn in fns.items():
        stock, ours = _stock_then_installed(fn, a, fused=True)
        assert_close(ours, stock, dtype, err_msg=name)


def test_explicit_function_without_install(random_matrix, assert_close):
    a = _positive_definite(random_matrix, (3, 2, 6, 6), np.float32)
    assert not ferrax.installed()
    lowered = jax.jit(ferrax.linalg.cholesky).lower(a)
    assert FUSED in lowered.as_text()
    assert_close(lowered.compile()(a), jax.lax.linalg.cholesky(a), np.float32)
    # vmap moves the mapped axis to the front of the batch.
    got = jax.vmap(ferrax.linalg.cholesky, in_axes=2, out_axes=2)(np.moveaxis(a, 1, 2))
    assert_close(got, np.moveaxis(np.asarray(jax.lax.linalg.cholesky(a)), 1, 2), np.float32)


@pytest.mark.parametrize("symmetrize", [True, False])
def test_derivatives_match_stock(symmetrize, random_matrix, assert_close):
    dtype = np.float64
    a = _positive_definite(random_matrix, (3, 7, 7), dtype)
    t = random_matrix((3, 7, 7), dtype)
    w = random_matrix((3, 7, 7), dtype)
    fn = lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=symmetrize)
    derivatives = lambda a: (jax.jvp(fn, (a,), (t,)),
                             jax.grad(lambda a: jnp.sum(w * fn(a)))(a),
                             jax.jacfwd(lambda a: fn(a)[0, 2, 1])(a))
    # Derivatives take jax's rule, whose factor comes from jax's steps (on ferrax_potrf).
    stock, ours = _stock_then_installed(derivatives, a, fused=False, target="ferrax_potrf")
    for o, s in zip(jax.tree.leaves(ours), jax.tree.leaves(stock)):
        assert_close(o, s, dtype)


@pytest.mark.parametrize("shape", [(2, 3, 4), (3,)], ids=str)
def test_non_square_is_refused(shape, random_matrix):
    with pytest.raises(ValueError, match="ferrax_cholesky.*square"):
        ferrax.linalg.cholesky(random_matrix(shape, np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.float16, jnp.bfloat16], ids=str)
def test_dtypes_without_lapack_are_refused(dtype):
    a = (2 * np.eye(3)).astype(dtype)
    with pytest.raises(TypeError, match="ferrax_cholesky.*float32"):
        ferrax.linalg.cholesky(a, symmetrize_input=False)
    # Stock jax refuses them too: jax 0.11 when tracing, 0.10 when lowering.
    with pytest.raises((TypeError, NotImplementedError)):
        jax.jit(lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=False))(a)


def test_integers_are_symmetrized_into_floats():
    a = np.array([[4, 2], [2, 3]], np.int32)
    stock, ours = _stock_then_installed(lambda a: jax.lax.linalg.cholesky(a), a, fused=True)
    assert ours.dtype == stock.dtype and ours.dtype.kind == "f"
    np.testing.assert_allclose(ours, stock, rtol=1e-6)


def test_shape_polymorphic_export(random_matrix, assert_close):
    ferrax.install()
    spec = jax.ShapeDtypeStruct(export.symbolic_shape("b, 6, 6"), np.float64)
    exp = ferrax.export(jax.jit(jnp.linalg.cholesky))(spec)
    ferrax.uninstall()
    assert FUSED in exp.mlir_module() and "?x6x6" in exp.mlir_module()
    round_tripped = [exp]
    if importlib.util.find_spec("flatbuffers"):
        round_tripped.append(export.deserialize(exp.serialize()))
    for batch in (1, 4):
        a = _positive_definite(random_matrix, (batch, 6, 6), np.float64)
        for e in round_tripped:
            assert_close(e.call(a), jnp.linalg.cholesky(a), np.float64)
