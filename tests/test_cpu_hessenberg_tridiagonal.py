"""ferrax_gehrd (jaxlib's lapack_?gehrd_ffi contract) and ferrax_sytrd (lapack_?sytrd_ffi /
lapack_?hetrd_ffi) through ferrax.install(): jax's Hessenberg and tridiagonal reductions against
stock jax computed first (the same LAPACK for gehrd; sytrd reduces matrices up to 32×32 in
Rust, LAPACK's algorithm, so to rounding), the reductions' identities, edge cases, and the raw
targets' error messages.

No jnp.linalg function and not jax.scipy.linalg.eigh_tridiagonal (pure jax) lower to these
targets; eigh_tridiagonal still checks the tridiagonal form ferrax computes."""

import jax
import numpy as np
import pytest
import scipy.linalg
from jax import lax

import ferrax
from helpers import assert_matches_stock, assert_same, reflector_product, run  # noqa: E402

TARGETS = ("ferrax_gehrd", "ferrax_sytrd")
TOL = {np.float32: 1e-4, np.complex64: 1e-4, np.float64: 1e-12, np.complex128: 1e-12}
BATCHES = [(), (3,), (2, 2)]
# (batch, n) cases: every batch, and n = 1 (no reflectors: tau and e empty).
CASES = [(b, 5) for b in BATCHES] + [((2, 2), 1)]


def every_reduction(a, h):
    """Every jax function that lowers to gehrd (general `a`) or sytrd/hetrd (Hermitian `h`)."""
    return {
        "lax_hessenberg": lax.linalg.hessenberg(a),
        "scipy_hessenberg": jax.scipy.linalg.hessenberg(a),
        "scipy_hessenberg_q": jax.scipy.linalg.hessenberg(a, calc_q=True),
        "tridiagonal_lower": lax.linalg.tridiagonal(h, lower=True),
        "tridiagonal_upper": lax.linalg.tridiagonal(h, lower=False),
    }



def stock_then_ferrax(fn, *args):
    """``fn``'s outputs with stock jax, then with ferrax installed (the autouse fixture of
    conftest uninstalls it at teardown)."""
    stock = run(fn, *args)
    ferrax.install()
    return stock, run(fn, *args)



def hermitian(random_matrix, shape, dtype):
    a = random_matrix(shape, dtype)
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dtype)


def adjoint(x):
    return np.conj(np.swapaxes(x, -1, -2))


def check_identities(a, h, out, dtype, assert_close):
    n = a.shape[-1]
    eye = np.broadcast_to(np.eye(n, dtype=dtype), a.shape)
    # Hessenberg: A = Q H Q^H with Q unitary, H zero below the first subdiagonal, and
    # jax.scipy's H the upper part of lax's packed result.
    hh, q = out["scipy_hessenberg_q"]
    assert_close(q @ hh @ adjoint(q), a, dtype, "reconstruct")
    assert_close(adjoint(q) @ q, eye, dtype, "reconstruct")
    np.testing.assert_array_equal(np.tril(hh, -2), 0)
    np.testing.assert_array_equal(hh, np.triu(out["lax_hessenberg"][0], -1))
    np.testing.assert_array_equal(out["scipy_hessenberg"], hh)
    # Tridiagonal: A = Q T Q^H with T real tridiagonal from d and e, which the packed result
    # also holds on its diagonal and first sub- (lower) or super- (upper) diagonal.
    for name, lower in (("tridiagonal_lower", True), ("tridiagonal_upper", False)):
        x, d, e, taus = out[name]
        real = np.finfo(dtype).dtype
        assert d.dtype == e.dtype == real and taus.dtype == dtype
        np.testing.assert_array_equal(d, np.diagonal(x, 0, -2, -1).real)
        np.testing.assert_array_equal(e, np.diagonal(x, -1 if lower else 1, -2, -1).real)
        t = (np.apply_along_axis(np.diag, -1, d)
             + np.apply_along_axis(lambda e: np.diag(e, -1) + np.diag(e, 1), -1, e)).astype(dtype)
        for i in np.ndindex(a.shape[:-2]):
            q = reflector_product(x[i], taus[i], lower)
            assert_close(q @ t[i] @ adjoint(q), h[i], dtype, "reconstruct", err_msg=name)


def test_matches_stock_jax_and_identities(dtype, random_matrix, assert_close):
    # Every case in one jitted function: one compilation per dtype and side (compilation is
    # most of this file's runtime).
    a = {k: random_matrix(k[0] + (k[1], k[1]), dtype) for k in CASES}
    h = {k: hermitian(random_matrix, k[0] + (k[1], k[1]), dtype) for k in CASES}
    fn = lambda a, h: {k: every_reduction(a[k], h[k]) for k in CASES}  # noqa: E731
    stock, ours = stock_then_ferrax(fn, a, h)
    assert_matches_stock(ours, stock, TOL[dtype])
    for k in CASES:
        check_identities(a[k], h[k], ours[k], dtype, assert_close)


def test_orders_where_rust_passes_to_lapack(installed, dtype, random_matrix, assert_close):
    # Ferrax reduces to tridiagonal form in Rust up to order 32, and up to 64 for a batch split
    # over several threads; by LAPACK otherwise. Checked by the identities only: past a few
    # dozen rows the reflectors of two correct reductions differ by more than a fixed
    # tolerance (f32 at 64: 2e-3 relative).
    for batch, n in (((8,), 40), ((2,), 64), ((2,), 65), ((), 40)):
        a = random_matrix(batch + (n, n), dtype)
        h = hermitian(random_matrix, batch + (n, n), dtype)
        check_identities(a, h, run(every_reduction, a, h), dtype, assert_close)


def test_eigh_tridiagonal_of_the_reduction(installed, random_matrix):
    # T = Q^H A Q has A's eigenvalues (hetrd: real d and e from a complex matrix).
    h = hermitian(random_matrix, (6, 6), np.complex128)
    _, d, e, _ = lax.linalg.tridiagonal(h)
    values = jax.scipy.linalg.eigh_tridiagonal(d, e, eigvals_only=True)
    np.testing.assert_allclose(values, np.linalg.eigvalsh(h), rtol=1e-10, atol=1e-10)


def test_hlo_names_ferrax_targets(random_matrix):
    for dtype in (np.float32, np.complex128):  # ?sytrd and ?hetrd
        a = random_matrix((2, 4, 4), dtype)
        fn = jax.jit(every_reduction)
        assert not any(t in fn.lower(a, a).as_text() for t in TARGETS)
        ferrax.install()
        hlo = fn.lower(a, a).as_text()
        assert all(t in hlo for t in TARGETS), hlo
        assert "lapack_" not in hlo
        ferrax.uninstall()


def test_vmap_and_jit(random_matrix):
    a = random_matrix((4, 3, 5, 5), np.complex128)
    fn = jax.jit(jax.vmap(jax.vmap(lambda m: every_reduction(m, m)), in_axes=1))
    stock, ours = stock_then_ferrax(fn, a)
    assert_matches_stock(ours, stock, TOL[np.complex128])
    assert all(t in fn.lower(a).as_text() for t in TARGETS)


def test_large_batch_split_across_threads(random_matrix, stock_per_output):
    """Enough matrices for several thread-pool chunks, each with its own workspace."""
    a = random_matrix((256, 16, 16), np.float64)
    stock = stock_per_output(every_reduction, a, a)
    ferrax.install()
    ours = run(every_reduction, a, a)
    assert_matches_stock(ours, stock, TOL[np.float64])


def special_inputs(dtype, random_matrix, rng):
    """Rank-one, ill-conditioned, NaN and Inf matrices."""
    a = random_matrix((4, 5, 5), dtype)
    a[0] = np.outer(random_matrix((5,), dtype), random_matrix((5,), dtype))
    a[1] = a[1] * np.logspace(0, -30, 5)
    a[2, rng.integers(5), rng.integers(5)] = np.nan
    a[3, rng.integers(5), rng.integers(5)] = np.inf
    return a


def test_singular_ill_conditioned_and_nan_inputs(dtype, random_matrix, rng, assert_close):
    a = special_inputs(dtype, random_matrix, rng)
    with np.errstate(invalid="ignore"):  # complex Inf arithmetic
        h = ((a + adjoint(a)) / 2).astype(dtype)
    stock, ours = stock_then_ferrax(every_reduction, a, h)
    # Where the reduction is ill-determined, its reflectors differ between implementations by
    # more than rounding (ferrax reduces small matrices in Rust): past two steps the rank-one
    # matrix (rank two, symmetrized) leaves only rounding noise to reduce, and the graded one
    # mixes entries 30 orders of magnitude apart. Those two are checked by the reduction's
    # identity instead of against stock; the non-finite ones by where their results are finite.
    tri = ("tridiagonal_lower", "tridiagonal_upper")
    hess = [k for k in ours if k not in tri]
    assert_matches_stock({k: ours[k] for k in hess}, {k: stock[k] for k in hess}, TOL[dtype],
                         nonfinite_inputs=(2, 3))
    nonfinite = lambda out: {k: jax.tree.map(lambda x: x[2:], out[k]) for k in tri}  # noqa: E731
    assert_matches_stock(nonfinite(ours), nonfinite(stock), TOL[dtype], nonfinite_inputs=(0, 1))
    for name, lower in zip(tri, (True, False)):
        for b in (0, 1):
            x, d, e, taus = (leaf[b] for leaf in ours[name])
            t = (np.diag(d) + np.diag(e, -1) + np.diag(e, 1)).astype(dtype)
            q = reflector_product(x, taus, lower)
            assert_close(q @ t @ adjoint(q), h[b], dtype, "reconstruct", err_msg=name)
    for leaf in jax.tree.leaves(ours):
        assert np.isfinite(leaf[:2]).all()  # the finite inputs stay finite


@pytest.mark.parametrize("batch", [(0,), (2, 0)], ids=str)
def test_zero_size_batch(random_matrix, batch):
    a = random_matrix(batch + (4, 4), np.float32)
    stock, ours = stock_then_ferrax(every_reduction, a, a)
    assert_same(ours, stock)
    assert all(t in jax.jit(every_reduction).lower(a, a).as_text() for t in TARGETS)


def lowering_error(fn, a):
    with pytest.raises(Exception) as failure:
        jax.jit(fn)(a)
    return type(failure.value)


def test_zero_order(random_matrix):
    # jax.scipy.linalg.hessenberg answers n = 0 itself; the lax primitives fail before any
    # target is called (tau would be [..., -1]; tridiagonal rejects n = 0), with or without
    # ferrax.
    a = random_matrix((2, 0, 0), np.complex64)
    primitives = (lax.linalg.hessenberg, lax.linalg.tridiagonal)
    stock_errors = [lowering_error(p, a) for p in primitives]
    stock, ours = stock_then_ferrax(
        lambda a: (jax.scipy.linalg.hessenberg(a), jax.scipy.linalg.hessenberg(a, calc_q=True)), a
    )
    assert_same(ours, stock)
    assert [lowering_error(p, a) for p in primitives] == stock_errors


# --- the raw targets ---------------------------------------------------------------------------


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def raw_gehrd(x, low=None, high=None, tau_shape=None, **attrs):
    """The target with jaxlib's operands. ffi_call's layouts are row-major: `x` holds the
    column-major matrices, transposed."""
    *batch, n, _ = x.shape
    results = [sds(x.shape, x.dtype), sds(tau_shape or (*batch, max(n - 1, 0)), x.dtype),
               sds(tuple(batch), np.int32)]
    call = jax.ffi.ffi_call("ferrax_gehrd", results, input_output_aliases={0: 0})
    low = np.int32(1) if low is None else low
    high = np.int32(n) if high is None else high
    return jax.block_until_ready(call(x, low=low, high=high, **attrs))


def raw_sytrd(x, uplo=np.uint8(ord("L")), d_dtype=None):
    *batch, n, _ = x.shape
    real = d_dtype or (np.finfo(x.dtype).dtype if x.dtype.kind in "fc" else np.float32)
    off = (*batch, max(n - 1, 0))
    results = [sds(x.shape, x.dtype), sds((*batch, n), real), sds(off, real),
               sds(off, x.dtype), sds(tuple(batch), np.int32)]
    call = jax.ffi.ffi_call("ferrax_sytrd", results, input_output_aliases={0: 0})
    return jax.block_until_ready(call(x, uplo=uplo))


def raw_error(call, *args, **kwargs):
    ferrax.register()
    # jax caches compiled calls by attribute values, and 1 == np.int32(1): without this a
    # call with an s64 attribute could reuse one compiled with an s32 attribute, or vice versa.
    jax.clear_caches()
    with pytest.raises(Exception) as failure:
        call(*args, **kwargs)
    return str(failure.value)


def test_raw_gehrd_with_ilo_ihi_matches_scipy(random_matrix):
    ferrax.register()
    a = np.triu(random_matrix((6, 6), np.float64))
    a[2:5, 1:4] = random_matrix((3, 3), np.float64)  # already triangular outside rows 2..4
    x_out, tau, info = raw_gehrd(np.ascontiguousarray(a.T), low=np.int32(2), high=np.int32(5))
    hess, expected_tau, expected_info = scipy.linalg.lapack.dgehrd(a, lo=1, hi=4)
    assert info == 0 == expected_info
    np.testing.assert_allclose(np.asarray(x_out).T, hess, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tau, expected_tau[:5], rtol=1e-12, atol=1e-12)
    assert tau[0] == 0 and tau[4] == 0  # LAPACK zeroes the taus outside ilo..ihi-1


def test_raw_zero_order_and_empty_reflectors():
    ferrax.register()
    for n in (0, 1):
        x = np.full((2, n, n), 2.5)
        x_out, tau, info = raw_gehrd(x, low=np.int32(1), high=np.int32(n))
        assert tau.shape == (2, 0) and (info == 0).all()
        np.testing.assert_array_equal(x_out, x)
        x_out, d, e, tau, info = raw_sytrd(x.astype(np.complex64))
        assert d.shape == (2, n) and e.shape == tau.shape == (2, 0) and (info == 0).all()
        np.testing.assert_array_equal(d, np.full((2, n), 2.5, np.float32))


def test_raw_wrong_dtype_names_target_and_operand(rng):
    ints = rng.integers(1, 9, (3, 3), dtype=np.int32)
    for call, target in ((raw_gehrd, "ferrax_gehrd"), (raw_sytrd, "ferrax_sytrd")):
        message = raw_error(call, ints)
        assert f"{target}: operand 0 'x': expected dtype f32, f64, c64 or c128, got s32" in message


def test_raw_wrong_results_name_result(random_matrix):
    a = random_matrix((2, 4, 4), np.complex64)
    assert ("ferrax_gehrd: result 1 'tau': expected shape [2, 3], got shape [2, 4]"
            in raw_error(raw_gehrd, a, tau_shape=(2, 4)))
    assert ("ferrax_sytrd: result 1 'd': expected dtype f32, got c64"
            in raw_error(raw_sytrd, a, d_dtype=np.complex64))
    assert ("ferrax_gehrd: operand 0 'x': expected square matrices, got shape [4, 3]"
            in raw_error(raw_gehrd, random_matrix((4, 3), np.float32), tau_shape=(3,)))


@pytest.mark.parametrize(
    "attrs, expected",
    [
        ({"low": np.int32(0)}, "attribute 'low': expected 1 <= low <= max(1, n) = 4, got 0"),
        ({"high": np.int32(5)}, "attribute 'high': expected min(low, n) = 1 <= high <= n = 4, got 5"),
        ({"low": np.int32(3), "high": np.int32(2)}, "attribute 'high': expected min(low, n) = 3"),
        ({"low": 1}, "attribute 'low': expected s32 scalar, got s64 scalar"),
        ({"high": np.uint8(4)}, "attribute 'high': expected s32 scalar, got u8 scalar"),
        ({"uplo": np.uint8(ord("L"))}, "unexpected attribute 'uplo'"),
    ],
)
def test_raw_gehrd_wrong_attributes_name_attribute(random_matrix, attrs, expected):
    message = raw_error(raw_gehrd, random_matrix((4, 4), np.float64), **attrs)
    assert "ferrax_gehrd: " + expected in message


@pytest.mark.parametrize(
    "uplo, expected",
    [
        (np.uint8(ord("X")), "attribute 'uplo': expected one of 'L', 'U', got 88"),
        (ord("L"), "attribute 'uplo': expected u8 scalar, got s64 scalar"),
        (True, "attribute 'uplo': expected u8 scalar, got pred scalar"),
    ],
)
def test_raw_sytrd_wrong_attribute_names_attribute(random_matrix, uplo, expected):
    message = raw_error(raw_sytrd, random_matrix((4, 4), np.complex128), uplo=uplo)
    assert "ferrax_sytrd: " + expected in message
