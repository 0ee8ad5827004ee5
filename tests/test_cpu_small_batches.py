"""Batches of tiny matrices on the CPU: ferrax factors them in Rust, eight at a time (one per
SIMD lane, ``ferrax_kernels::small::lanes``) and the rest of a thread's chunk one by one. The
batches here are long enough for both, and mix failing matrices (singular, non-finite,
indefinite) into different lanes; results are checked against stock jax (LAPACK) and by
reconstruction.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.lax import linalg as lax_linalg

import ferrax
from helpers import (aligned_columns, assert_valid_lu, lapack_pivots, permutation_of_pivots,
                     reflector_product)

BATCH = 37  # several full groups of eight per thread's chunk, and a partial one


def _stock_and_ferrax(fn, *args, target):
    ferrax.uninstall()
    stock = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    ferrax.install()
    try:
        lowered = jax.jit(fn).lower(*args)
        assert target in lowered.as_text()
        got = jax.tree.map(np.asarray, lowered.compile()(*args))
    finally:
        ferrax.uninstall()
    return stock, got


@pytest.mark.parametrize("n", [1, 3, 8, 16])
def test_lu_batches_match_stock(n, dtype, random_matrix, assert_close):
    a = random_matrix((BATCH, n, n), dtype)
    a[5, :, 0] = 0  # singular: zero first column
    a[12, n - 1, :] = a[12, 0, :]  # singular: repeated row (for n > 1)
    a[20, 0, n - 1] = np.nan
    a[33] *= 1e-30  # tiny but regular
    stock, got = _stock_and_ferrax(jax.lax.linalg.lu, a, target="ferrax_getrf")
    lu, pivots, permutation = got
    # Which row becomes a pivot among the rounding-level leftovers of a singular matrix, or
    # among NaNs, depends on the LAPACK build's arithmetic: those are checked for validity, the
    # regular ones (unambiguous pivots) against LAPACK's (SciPy's, called directly), their
    # factors against stock jax's to a tolerance.
    ambiguous = {12, 20} if n > 1 else {20}
    regular = [b for b in range(BATCH) if b not in ambiguous | {5}]
    np.testing.assert_array_equal(pivots[regular], lapack_pivots(a[regular])[0])
    assert_close(lu[regular], stock[0][regular], dtype)
    # Every pivot sequence is one partial pivoting can make, and the permutation is its own.
    assert ((pivots >= np.arange(n)) & (pivots < n)).all(), pivots
    np.testing.assert_array_equal(permutation, permutation_of_pivots(pivots, n))
    # A zero first column: its pivot is the first row, U[0, 0] an exact zero, L's column zero.
    assert pivots[5, 0] == 0 and lu[5, 0, 0] == 0 and (lu[5, 1:, 0] == 0).all()
    assert np.isnan(lu[20]).any()
    finite = [b for b in range(BATCH) if b != 20]
    assert np.isfinite(lu[finite]).all()
    # P·A = L·U with |L| bounded by partial pivoting, singular matrices included.
    assert_valid_lu(a[finite], lu[finite], permutation[finite])
    if n > 1:  # a repeated row leaves a rounding-level last pivot
        eps = np.finfo(dtype).eps
        assert np.abs(lu[12, n - 1, n - 1]) <= 100 * n * eps * np.abs(a[12]).max()


def _hermitian_positive_definite(random_matrix, shape, dtype):
    x = random_matrix(shape, dtype)
    n = shape[-1]
    return (x @ np.conj(np.swapaxes(x, -1, -2)) + n * np.eye(n)).astype(dtype)


#: jax's cholesky without symmetrization, as ferrax.install() lowers it (one ferrax_cholesky
#: call, row-major, LAPACK's upper factor) and its primitive alone (ferrax_potrf).
_CHOLESKY_ROUTES = {
    "ferrax_cholesky": lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=False),
    "ferrax_potrf": lambda a: jnp.tril(lax_linalg.cholesky_p.bind(a)),
}


@pytest.mark.parametrize("target", _CHOLESKY_ROUTES)
@pytest.mark.parametrize("n", [1, 4, 8, 16])
def test_cholesky_batches_match_stock(n, target, dtype, random_matrix, assert_close):
    a = _hermitian_positive_definite(random_matrix, (BATCH, n, n), dtype)
    failing = {3: 0, 9: n // 2, 10: n - 1, 26: n - 1}  # matrix -> first non-positive pivot
    for b, j in failing.items():
        a[b, j, j] = -1
    a[30, n - 1, 0] = np.nan
    stock, got = _stock_and_ferrax(_CHOLESKY_ROUTES[target], a, target=target)
    # A NaN reaching a pivot stops LAPACK's reference xPOTF2, and ferrax, with info > 0, so jax
    # returns NaN for the whole factor; OpenBLAS's potrf does not test for NaN and returns the
    # rows it reaches as NaN. Both NaN wherever stock is.
    assert np.isnan(got[30][np.isnan(stock[30])]).all()
    lower = np.tril_indices(n)
    assert np.isnan(got[30][lower]).all()
    others = [b for b in range(BATCH) if b != 30]
    assert_close(got[others], stock[others], dtype)  # NaN where stock has NaN
    for b in others:
        assert np.isnan(got[b][lower]).all() == (b in failing), b
    failing[30] = n - 1
    good = [b for b in range(BATCH) if b not in failing]
    l = got[good]
    assert_close(l @ np.conj(np.swapaxes(l, -1, -2)), a[good], dtype, kind="reconstruct")


def _hermitian_from_triangle(a, lower):
    """The Hermitian matrices whose `lower` (else upper) triangle `a` holds."""
    if lower:
        return np.tril(a) + np.conj(np.swapaxes(np.tril(a, -1), -1, -2))
    return np.triu(a) + np.conj(np.swapaxes(np.triu(a, 1), -1, -2))


def _raw_potrf(a, uplo):
    call = jax.ffi.ffi_call(
        "ferrax_potrf",
        (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(a.shape[:-2], np.int32)),
        input_output_aliases={0: 0})
    # ferrax's contract is column-major: pass the transpose, so that the callee sees `a`.
    factor, info = jax.jit(lambda a: call(jnp.swapaxes(a, -1, -2), uplo=np.uint8(ord(uplo))))(a)
    return np.swapaxes(np.asarray(factor), -1, -2), np.asarray(info)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_raw_potrf_batches_leave_the_other_triangle(uplo, dtype, random_matrix, assert_close):
    ferrax.install()  # registers the targets
    n = 6
    a = _hermitian_positive_definite(random_matrix, (BATCH, n, n), dtype)
    other = np.triu_indices(n, 1) if uplo == "L" else np.tril_indices(n, -1)
    a[:, other[0], other[1]] = 1000 + random_matrix((BATCH, len(other[0])), dtype)  # not read
    a[7, 2, 2] = 0  # indefinite at column 3
    factor, info = _raw_potrf(a, uplo)
    np.testing.assert_array_equal(info, [3 if b == 7 else 0 for b in range(BATCH)])
    np.testing.assert_array_equal(factor[:, other[0], other[1]], a[:, other[0], other[1]])
    t = np.tril(factor) if uplo == "L" else np.conj(np.swapaxes(np.triu(factor), -1, -2))
    good = [b for b in range(BATCH) if b != 7]
    hermitian = _hermitian_from_triangle(a, uplo == "L")
    assert_close((t @ np.conj(np.swapaxes(t, -1, -2)))[good], hermitian[good], dtype,
                 kind="reconstruct")


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 16, 25, 26])
def test_eigh_batches_match_stock(n, lower, dtype, random_matrix, assert_close):
    # ferrax solves up to 25×25 in Rust (LAPACK's xSYEVD steps for these sizes: tridiagonal
    # reduction, xSTEQR's QL/QR) and calls LAPACK (faer for complex matrices) above; 26 checks
    # the hand-over.
    a = random_matrix((BATCH, n, n), dtype)
    a = ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dtype)
    a[4] = np.diag(np.arange(n, 0, -1)).astype(dtype)  # already diagonal: sorted, exact
    a[11] = 0  # every eigenvalue zero
    v = random_matrix((n, 1), dtype)
    a[17] = v @ np.conj(v.T)  # rank one
    a[25] *= 1e-30  # tiny: scaled as LAPACK scales it
    a[29, n - 1, n - 1] = np.inf  # LAPACK scales by 0: all eigenvalues NaN
    fn = lambda x: (jax.lax.linalg.eigh(x, lower=lower, symmetrize_input=False),
                    jnp.linalg.eigvalsh(x, UPLO="L" if lower else "U"))
    stock, got = _stock_and_ferrax(fn, a, target="ferrax_syevd")
    (v, w), w_only = got
    (stock_v, stock_w), stock_w_only = stock
    for ours, theirs in [(v, stock_v), (w, stock_w), (w_only, stock_w_only)]:
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    finite = [b for b in range(BATCH) if b != 29]
    scale = np.abs(a[finite]).max(axis=(-2, -1))[:, None]
    scale = np.where(scale > 0, scale, 1).astype(np.finfo(dtype).dtype)  # relative to ‖A‖
    assert_close(w[finite] / scale, stock_w[finite] / scale, dtype)
    assert_close(w_only[finite] / scale, w[finite] / scale, dtype)
    # The diagonal one: its known eigenvalues, sorted, to rounding (LAPACK's are exact there;
    # faer's divide and conquer, ferrax's for complex matrices past 25, scales the matrix).
    np.testing.assert_allclose(w[4], np.arange(1, n + 1), rtol=4 * np.finfo(dtype).eps, atol=0)
    # Eigenvectors of the random matrices (distinct eigenvalues) against stock's, up to phase.
    generic = [b for b in finite if b not in (4, 11, 17)]
    tol = {"float32": 2e-3, "float64": 1e-9}[np.finfo(dtype).dtype.name]
    np.testing.assert_allclose(aligned_columns(v[generic], stock_v[generic]), stock_v[generic],
                               rtol=0, atol=tol)
    # Every finite one: A·V = V·diag(w), Vᴴ·V = I.
    vh = np.conj(np.swapaxes(v[finite], -1, -2))
    hermitian = _hermitian_from_triangle(a, lower)
    h = hermitian[finite] / scale[..., None]
    assert_close(v[finite] * (w[finite] / scale)[:, None, :] @ vh, h, dtype, kind="reconstruct")
    assert_close(vh @ v[finite], np.broadcast_to(np.eye(n, dtype=dtype), v[finite].shape), dtype,
                 kind="reconstruct")
    # The infinite one, as LAPACK: eigenvectors the identity.
    np.testing.assert_array_equal(v[29], np.eye(n, dtype=dtype))


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("n", [33, 64, 65, 128, 129])
def test_tridiagonal_mid_sizes_match_stock(n, lower, dtype, random_matrix, assert_close):
    # Above ferrax's Rust reduction (up to 32), through LAPACK's blocked ?sytrd (n > 32, its
    # crossover) with ferrax's batch split: d, e and taus as stock's, to rounding.
    a = random_matrix((3, n, n), dtype)
    a = ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dtype)
    a[1] = np.diag(np.arange(n, 0, -1)).astype(dtype)  # already tridiagonal: no reflection
    fn = lambda x: jax.lax.linalg.tridiagonal(x, lower=lower)
    stock, (x, d, e, taus) = _stock_and_ferrax(fn, a, target="ferrax_sytrd")
    scale = np.abs(a).max()
    tol = {"float32": 5e-5, "float64": 1e-13}[np.finfo(dtype).dtype.name] * n
    for ours, theirs in zip((d, e, taus), stock[1:]):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=tol * max(scale, 1))
    np.testing.assert_array_equal(d[1], np.arange(n, 0, -1))
    np.testing.assert_array_equal(taus[1], 0)
    t = (np.apply_along_axis(np.diag, -1, d)
         + np.apply_along_axis(lambda e: np.diag(e, -1) + np.diag(e, 1), -1, e)).astype(dtype)
    hermitian = _hermitian_from_triangle(a, lower)
    for b in range(3):
        q = reflector_product(x[b], taus[b], lower)
        assert_close(q @ t[b] @ np.conj(q.T), hermitian[b], dtype, kind="reconstruct")
