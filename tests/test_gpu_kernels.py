"""ferrax's CUDA targets (threefry, random bits, pivots to permutation, Cholesky update,
tridiagonal solves, the factorizations) against stock jax on the same GPU. Every test skips
where jax has no CUDA device."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src import config as jax_config
from jax._src.lax import linalg as lax_linalg  # geqrf: not exported by jax.lax.linalg

import ferrax
from helpers import (assert_same, assert_within_bound, permutation_of_pivots,
                     sparse_product_bound, sparse_product_reference, tridiagonal_matrix)

from test_pivots_threefry import _random_pivots


def on(device, fn, *args):
    """``jit(fn)`` run on ``device`` with NumPy results, and the lowered HLO text."""
    args = [jax.device_put(a, device) for a in args]
    f = jax.jit(fn)
    return jax.tree.map(np.asarray, f(*args)), f.lower(*args).as_text()


# --- threefry2x32 (element-wise, the cu_threefry2x32_ffi contract) ---------------------------

@pytest.mark.parametrize("n", [1, 3, 4, 5, 1000, 2**20 + 3])
def test_threefry_elementwise_matches_cpu(gpu, n, rng):
    words = [rng.integers(0, 2**32, n, dtype=np.uint32) for _ in range(4)]
    got, hlo = on(gpu, ferrax.random.threefry2x32, *words)
    assert "ferrax_threefry2x32" in hlo
    want = ferrax.random.threefry2x32(*words)  # CPU handler, Random123-checked
    assert_same(tuple(got), tuple(np.asarray(w) for w in want))


def test_threefry_kernel_lowering_installed_matches_stock(gpu, installed):
    key = jax.device_put(jax.random.key(7), gpu)
    with jax_config.threefry_gpu_kernel_lowering(True):
        f = jax.jit(lambda k: (jax.random.split(k, 1001), jax.random.uniform(k, (513, 3))))
        assert "ferrax_threefry2x32" in f.lower(key).as_text()
        ours = jax.tree.map(np.asarray, jax.random.key_data(f(key)[0])), np.asarray(f(key)[1])
    ferrax.uninstall()
    stock = jax.jit(lambda k: (jax.random.split(k, 1001), jax.random.uniform(k, (513, 3))))(key)
    assert_same(ours, (np.asarray(jax.random.key_data(stock[0])), np.asarray(stock[1])))


# --- random bits with in-kernel counters ------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2**16 + 1,), (64, 1024)], ids=str)
def test_bits_match_stock(gpu, dtype, shape, rng):
    key = jax.device_put(jax.random.key(int(rng.integers(2**31))), gpu)
    got, hlo = on(gpu, lambda k: ferrax.random.bits(k, shape, dtype), key)
    assert "ferrax_threefry2x32_bits" in hlo
    want, _ = on(gpu, lambda k: jax.random.bits(k, shape, dtype), key)
    assert_same(got, want)


def test_bits_batched_keys_match_vmapped_stock(gpu, rng):
    keys = jax.random.split(jax.random.key(int(rng.integers(2**31))), (3, 4))
    got, _ = on(gpu, lambda k: ferrax.random.bits(k, (33,)), keys)
    want, _ = on(gpu, jax.vmap(jax.vmap(lambda k: jax.random.bits(k, (33,)))), keys)
    assert got.shape == (3, 4, 33)
    assert_same(got, want)


def test_installed_random_functions_match_stock(gpu, rng):
    key = jax.device_put(jax.random.key(int(rng.integers(2**31))), gpu)
    fns = lambda k: (jax.random.bits(k, (1000,), jnp.uint64), jax.random.normal(k, (257, 3)),
                     jax.random.uniform(k, (4096,), jnp.float32), jax.random.randint(k, (99,), 0, 7))
    stock, _ = on(gpu, fns, key)
    ferrax.install()
    with jax_config.threefry_gpu_kernel_lowering(True):
        ours, hlo = on(gpu, fns, key)
    assert "ferrax_threefry2x32" in hlo
    assert_same(ours, stock)


# --- lu_pivots_to_permutation ----------------------------------------------------------------

@pytest.mark.parametrize("batch, k, p", [((), 1, 1), ((5,), 7, 9), ((2, 3), 32, 32), ((1000,), 32, 32),
                                         ((7,), 128, 130), ((), 16384, 16384), ((3,), 300, 2000),
                                         ((4,), 0, 5), ((0,), 3, 3)], ids=str)
def test_pivots_match_reference(gpu, batch, k, p, rng):
    pivots = _random_pivots(rng, batch, k, p)
    got, hlo = on(gpu, lambda x: ferrax.linalg.lu_pivots_to_permutation(x, p), pivots)
    assert "ferrax_lu_pivots_to_permutation" in hlo
    want = (np.asarray(ferrax.linalg.lu_pivots_to_permutation(pivots, p)) if k > 64
            else permutation_of_pivots(pivots, p))  # CPU handler where the Python loop is slow
    assert_same(got, want)


def test_pivots_out_of_range_are_ignored(gpu):
    pivots = np.array([[-1, 7, 1], [2, 2, 2]], np.int32)
    got, _ = on(gpu, lambda x: ferrax.linalg.lu_pivots_to_permutation(x, 3), pivots)
    np.testing.assert_array_equal(got, [[0, 2, 1], [2, 0, 1]])


def test_installed_lu_matches_stock(gpu, rng):
    # Above the small-kernel sizes: jaxlib's cuSOLVER getrf on both sides (the same call, in
    # the same process: its factors and pivots are compared with themselves), ferrax's
    # permutation, which the pivots determine: the swaps' own (tests/helpers.py).
    a = rng.standard_normal((8, 96, 96)).astype(np.float32)
    stock, _ = on(gpu, jax.lax.linalg.lu, a)
    ferrax.install()
    ours, hlo = on(gpu, jax.lax.linalg.lu, a)
    assert "ferrax_lu_pivots_to_permutation" in hlo and "cusolver_getrf_ffi" in hlo
    np.testing.assert_array_equal(ours[2], permutation_of_pivots(ours[1], 96))
    assert_same(ours, stock)


# --- cholesky_update --------------------------------------------------------------------------

def _factor_and_vector(rng, batch, n, dtype):
    dtype = np.dtype(dtype)
    a = _spd(rng, batch, n, np.complex128 if dtype.kind == "c" else np.float64)
    w = rng.standard_normal(batch + (n,))
    if dtype.kind == "c":
        w = w + 1j * rng.standard_normal(w.shape)
    r = np.conj(np.swapaxes(np.linalg.cholesky(a), -1, -2))
    # Noise below the diagonal: the kernel must leave it alone.
    r = r + np.tril(rng.standard_normal(r.shape), -1)
    return r.astype(dtype), w.astype(dtype), a


def _check_update(r0, w, a, got, rtol):
    upper = np.triu(got)
    want = a + w[..., :, None] * np.conj(w[..., None, :])
    rebuilt = np.conj(np.swapaxes(upper, -1, -2)) @ upper
    scale = np.abs(want).max()
    assert np.abs(rebuilt - want).max() <= rtol * scale
    np.testing.assert_array_equal(np.tril(got, -1), np.tril(r0, -1))
    assert (np.real(np.diagonal(got, axis1=-2, axis2=-1)) > 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, n", [((), 1), ((), 5), ((), 33), ((), 300), ((), 1000),
                                      ((7,), 16), ((3, 2), 40), ((1024,), 32), ((0,), 4)], ids=str)
def test_cholesky_update_identity(gpu, dtype, batch, n, rng):
    r, w, a = _factor_and_vector(rng, batch, n, dtype)
    got, hlo = on(gpu, ferrax.linalg.cholesky_update, r, w)
    assert "ferrax_cholesky_update" in hlo
    rtol = 20 * max(n, 4) * np.finfo(dtype).eps  # Givens updates: backward error ~ n eps
    if 0 not in batch:
        _check_update(r, w, a, got, rtol)
    # Same rotations as the CPU path (jax's algorithm), to rounding.
    cpu = np.asarray(ferrax.linalg.cholesky_update(r, w))
    np.testing.assert_allclose(got, cpu, rtol=rtol, atol=rtol * np.abs(cpu).max(initial=1.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [8, 100, 512])
def test_installed_cholesky_update_matches_stock(gpu, dtype, n, rng):
    r, w, _ = _factor_and_vector(rng, (), n, dtype)
    r = np.triu(r)  # jaxlib's kernel may touch the lower triangle
    stock, _ = on(gpu, jax.lax.linalg.cholesky_update, r, w)
    ferrax.install()
    ours, hlo = on(gpu, jax.lax.linalg.cholesky_update, r, w)
    assert "ferrax_cholesky_update" in hlo
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(np.triu(ours), np.triu(stock), rtol=tol, atol=tol * n)


def test_installed_cholesky_update_vmaps(gpu, rng):
    """jax's own primitive has no batching rule on GPU; after install() vmap works."""
    r, w, a = _factor_and_vector(rng, (6,), 20, np.float64)
    ferrax.install()
    got, _ = on(gpu, jax.vmap(jax.lax.linalg.cholesky_update), r, w)
    _check_update(r, w, a, got, 20 * 20 * np.finfo(np.float64).eps)


# --- tridiagonal solves (ferrax's kernel for cuSPARSE's gtsv2 and the perturbed solve) --------

def _tridiagonal_system(rng, batch, m, nrhs, dtype):
    draw = lambda *shape: (rng.standard_normal(shape) + (1j * rng.standard_normal(shape)
                           if np.iscomplexobj(np.zeros((), dtype)) else 0)).astype(dtype)
    dl, d, du = draw(*batch, m), draw(*batch, m) + 3, draw(*batch, m)
    d[..., ::5] -= 3  # pivots that need row interchanges
    return dl, d, du, draw(*batch, m, nrhs)


@pytest.mark.parametrize("batch, m, nrhs", [((4096,), 8, 1), ((3, 7), 2, 2), ((5,), 1, 3),
                                            ((2,), 300, 4)])
@pytest.mark.parametrize("perturb", [False, True])
def test_installed_tridiagonal_solve_residual(gpu, dtype, batch, m, nrhs, perturb, rng):
    dl, d, du, b = _tridiagonal_system(rng, batch, m, nrhs, dtype)
    solve = lambda *a: jax.lax.linalg.tridiagonal_solve(*a, perturb_singular=perturb)
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        x, hlo = on(gpu, solve, dl, d, du, b)
    assert "ferrax_tridiagonal_solve" in hlo
    a = tridiagonal_matrix(dl, d, du).astype(np.complex128)
    residual = np.abs(a @ x - b).max(axis=(-2, -1))
    eps = np.finfo(dtype).eps
    bound = 30 * m * eps * (np.abs(a).sum(-1).max(-1) * np.abs(x).max(axis=(-2, -1)) + 1)
    assert (residual <= bound).all(), float((residual - bound).max())


def test_installed_tridiagonal_solve_singular(gpu, rng):
    """NaN where LAPACK's gtsv fails (as jax on the CPU); finite when perturbed."""
    dl, d, du, b = _tridiagonal_system(rng, (3,), 6, 2, np.float64)
    dl[1], d[1], du[1] = 0, 0, 0
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        x, _ = on(gpu, jax.lax.linalg.tridiagonal_solve, dl, d, du, b)
        finite, _ = on(gpu, lambda *a: jax.lax.linalg.tridiagonal_solve(
            *a, perturb_singular=True), dl, d, du, b)
    assert np.isnan(x[1]).all() and np.isfinite(x[[0, 2]]).all()
    assert np.isfinite(finite).all()
    cpu, _ = on(jax.devices("cpu")[0], jax.lax.linalg.tridiagonal_solve, dl, d, du, b)
    np.testing.assert_allclose(x, cpu, rtol=1e-12, atol=1e-12)


# --- sparse products (ferrax's kernels for cuSPARSE's SpMV/SpMM and XLA's scatter-add) -------

@pytest.mark.parametrize("rhs_cols", [None, 1, 5, 64])
@pytest.mark.parametrize("shape, per_row", [((300, 200), 3), ((64, 5000), 900)])
def test_installed_sparse_products_within_the_bound(gpu, dtype, rhs_cols, shape, per_row,
                                                    random_matrix, rng):
    """BCSR and BCOO products (both orientations) against the exact sum of the stored
    entries, within the rounding bound of the longest row: short rows (one lane per row) and
    long ones (a warp per row), vectors and matrices."""
    from jax.experimental import sparse
    rows, cols = shape
    mask = np.zeros(shape, bool)
    for r in range(rows):
        mask[r, rng.choice(cols, rng.integers(0, per_row + 1), replace=False)] = True
    a = np.where(mask, random_matrix(shape, dtype), 0).astype(dtype)
    tail = () if rhs_cols is None else (rhs_cols,)
    v, w = random_matrix((cols,) + tail, dtype), random_matrix((rows,) + tail, dtype)
    ferrax.install()
    with jax_config.bcoo_cusparse_lowering(True):
        bcsr, bcoo = sparse.BCSR.fromdense(a), sparse.BCOO.fromdense(a)
        (x, y, z), hlo = on(gpu, lambda v, w: (bcsr @ v, bcoo @ v, w.T @ bcoo), v, w)
    assert "ferrax_csr_sparse_dense" in hlo and "ferrax_coo_sparse_dense" in hlo
    r, c = np.nonzero(a)
    for got, (data, rows_, cols_, rhs, out_rows) in [
            (x, (a[r, c], r, c, v, rows)), (y, (a[r, c], r, c, v, rows)),
            (z.T, (a[r, c], c, r, w, cols))]:
        exact, magnitude = sparse_product_reference(data, rows_, cols_, rhs, out_rows)
        longest = max(np.bincount(rows_, minlength=out_rows).max(initial=0), 1)
        assert_within_bound(got, exact, sparse_product_bound(dtype, longest) * magnitude)


# --- bad input through the raw targets: an error naming the target, not a crash --------------

def test_threefry_shape_mismatch_is_an_error(gpu):
    x = jax.device_put(np.ones(8, np.uint32), gpu)
    y = jax.device_put(np.ones(9, np.uint32), gpu)
    out = jax.ShapeDtypeStruct((8,), np.uint32)
    call = jax.ffi.ffi_call("ferrax_threefry2x32", (out, out))
    with pytest.raises(Exception, match="ferrax_threefry2x32"):
        jax.block_until_ready(jax.jit(call)(x, x, y, x))


def test_cholesky_update_wrong_dtype_is_an_error(gpu):
    r = jax.device_put(np.eye(4, dtype=np.int32), gpu)
    w = jax.device_put(np.ones(4, np.int32), gpu)
    call = jax.ffi.ffi_call("ferrax_cholesky_update",
                            (jax.ShapeDtypeStruct((4, 4), np.int32), jax.ShapeDtypeStruct((4,), np.int32)))
    with pytest.raises(Exception, match="ferrax_cholesky_update"):
        jax.block_until_ready(jax.jit(call)(r, w))


def test_bits_wrong_key_shape_is_an_error(gpu):
    keys = jax.device_put(np.ones((4, 3), np.uint32), gpu)
    call = jax.ffi.ffi_call("ferrax_threefry2x32_bits", jax.ShapeDtypeStruct((4, 10), np.uint32))
    with pytest.raises(Exception, match="ferrax_threefry2x32_bits"):
        jax.block_until_ready(jax.jit(call)(keys))


# --- batched small getrf / potrf (ferrax_getrf, ferrax_potrf on CUDA) --------------------------

def _spd(rng, batch, n, dtype):
    x = rng.standard_normal(batch + (n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(x.shape)
    return (x @ np.conj(np.swapaxes(x, -1, -2)) + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, m, n", [((), 1, 1), ((9,), 4, 4), ((300,), 8, 8), ((2, 50), 16, 16),
                                         ((1000,), 32, 32), ((40,), 64, 64), ((33,), 20, 13),
                                         ((33,), 13, 20), ((0,), 8, 8), ((5,), 0, 0)], ids=str)
def test_getrf_matches_cpu_and_reconstructs(gpu, dtype, batch, m, n, rng, random_matrix,
                                           assert_close):
    a = random_matrix(batch + (m, n), dtype)
    (lu, ipiv, info), hlo = on(gpu, ferrax.linalg.getrf, a)
    assert "ferrax_getrf" in hlo
    cpu = ferrax.linalg.getrf(a)  # LAPACK: the same unblocked algorithm, pivots identical
    np.testing.assert_array_equal(ipiv, cpu[1])
    np.testing.assert_array_equal(info, cpu[2])
    assert_close(lu, np.asarray(cpu[0]), dtype, "reconstruct")


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_getrf_singular_reports_info(gpu, dtype, random_matrix):
    a = random_matrix((3, 6, 6), dtype)
    a[0, :, 2] = 0
    a[1, :, :] = 0
    (_, _, info), _ = on(gpu, ferrax.linalg.getrf, a)
    np.testing.assert_array_equal(info, np.asarray(ferrax.linalg.getrf(a)[2]))
    assert info[0] > 0 and info[1] == 1 and info[2] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, n", [((512,), 4), ((100,), 8), ((64,), 16), ((300,), 32), ((3,), 1)],
                         ids=str)
def test_installed_lu_cholesky_solve_match_stock(gpu, dtype, batch, n, rng, random_matrix,
                                                 assert_close):
    a = random_matrix(batch + (n, n), dtype)
    spd = _spd(rng, batch, n, dtype)
    b = random_matrix(batch + (n, 2), dtype)
    fns = lambda a, spd, b: (jax.lax.linalg.lu(a), jnp.linalg.cholesky(spd), jnp.linalg.solve(a, b),
                             jnp.linalg.det(a))
    stock, _ = on(gpu, fns, a, spd, b)
    ferrax.install()
    ours, hlo = on(gpu, fns, a, spd, b)
    limit = lambda op: ferrax._install._GPU_THRESHOLDS[op][np.dtype(dtype).name]
    assert ("ferrax_getrf_row_major" in hlo) == (n <= limit("getrf"))
    assert ("ferrax_cholesky" in hlo) == (n <= limit("potrf"))
    (lu, piv, perm), chol, x, det = ours
    # The H200 run showed jaxlib's GPU getrf choosing other pivots than LAPACK for complex
    # input (ferrax's kernels pick LAPACK's), and ill-conditioned single-precision solves
    # differing by more than rounding; so: LAPACK's pivots, and each result's own identity.
    (cpu_lu, cpu_piv, cpu_perm), _ = on(jax.devices("cpu")[0], jax.lax.linalg.lu, a)
    np.testing.assert_array_equal(piv, cpu_piv)
    np.testing.assert_array_equal(perm, cpu_perm)
    assert_close(lu, cpu_lu, dtype, "reconstruct")
    lower = np.tril(chol)
    assert_close(lower @ np.conj(np.swapaxes(lower, -1, -2)), spd, dtype, "reconstruct")
    residual = np.abs(a @ x - b).max() / (np.abs(a).max() * np.abs(x).max() * n)
    assert residual < 50 * np.finfo(dtype).eps
    assert_close(det, stock[3], dtype, "reconstruct")


def test_installed_cholesky_not_positive_definite_is_nan(gpu, rng):
    a = _spd(rng, (4,), 8, np.float32)
    a[2] = -np.eye(8)
    ferrax.install()
    ours, hlo = on(gpu, jnp.linalg.cholesky, a)
    assert "ferrax_cholesky" in hlo
    assert np.isnan(np.tril(ours[2])).all() and (np.triu(ours[2], 1) == 0).all()
    np.testing.assert_allclose(ours[[0, 1, 3]], np.linalg.cholesky(a[[0, 1, 3]]), rtol=1e-4,
                               atol=1e-4)


# jax's whole cholesky in one ferrax_cholesky call (n <= 48: lanes kernels, then the block
# kernel): symmetrized or from the lower triangle alone (the upper one garbage), against stock
# jax on the same GPU.
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, n", [((1000,), 4), ((300,), 8), ((3, 40), 16), ((257,), 32),
                                      ((5,), 1), ((0,), 8), ((70,), 33), ((2, 9), 48)],
                         ids=str)
def test_installed_fused_cholesky_matches_stock(gpu, dtype, batch, n, rng, random_matrix,
                                                assert_close):
    a = _spd(rng, batch, n, dtype)
    noisy = a + np.triu(random_matrix(batch + (n, n), dtype), 1)  # not Hermitian
    if batch[0] > 2:
        a[1] = -np.eye(n, dtype=dtype)  # fails: NaN below, zeros above
    fns = lambda a, noisy: (jnp.linalg.cholesky(a), jax.lax.linalg.cholesky(noisy),
                            jax.lax.linalg.cholesky(noisy, symmetrize_input=False))
    stock, _ = on(gpu, fns, a, noisy)
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        ours, hlo = on(gpu, fns, a, noisy)
    assert "ferrax_cholesky" in hlo and "potrf" not in hlo
    for got, want in zip(ours, stock):
        assert_close(got, want, dtype, "reconstruct")  # NaN exactly where stock has NaN


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, m, n", [((200,), 8, 8), ((64,), 32, 32), ((3, 5), 20, 13),
                                         ((7,), 13, 20), ((4,), 16, 16), ((2,), 1, 1)], ids=str)
def test_installed_qr_matches_stock(gpu, dtype, batch, m, n, random_matrix, assert_close):
    a = random_matrix(batch + (m, n), dtype)
    fns = lambda a: (jnp.linalg.qr(a), jnp.linalg.qr(a, mode="r"),
                     jnp.linalg.qr(a, mode="complete"))
    stock, _ = on(gpu, fns, a)
    ferrax.install()
    ours, hlo = on(gpu, fns, a)
    limit = lambda op: ferrax._install._GPU_THRESHOLDS[op][np.dtype(dtype).name]
    # One ferrax_qr call where ferrax takes both of jax's steps; else jax's steps, each
    # ferrax's up to its own threshold (Q from the first min(m, n) columns: m×min(m, n)).
    fused = max(m, n) <= min(limit("geqrf"), limit("orgqr"))
    assert ("ferrax_qr" in hlo) == fused
    if not fused:
        assert ("ferrax_geqrf" in hlo) == (max(m, n) <= limit("geqrf"))
        assert ("ferrax_orgqr" in hlo) == (m <= limit("orgqr"))
    (q, r), r_only, (q_full, r_full) = ours
    assert_close(q, stock[0][0], dtype, "reconstruct")
    assert_close(r, stock[0][1], dtype, "reconstruct")
    assert_close(r_only, stock[1], dtype, "reconstruct")
    assert_close(q @ r, a, dtype, "reconstruct")
    assert_close(q_full, stock[2][0], dtype, "reconstruct")
    assert_close(r_full, stock[2][1], dtype, "reconstruct")
    assert_close(q_full @ r_full, a, dtype, "reconstruct")


def test_geqrf_raw_call_matches_cpu(gpu, random_matrix, assert_close):
    a = random_matrix((50, 12, 9), np.float64)
    call = lambda x: jax.ffi.ffi_call(
        "ferrax_geqrf", (jax.ShapeDtypeStruct(x.shape, x.dtype),
                         jax.ShapeDtypeStruct((50, 9), x.dtype)),
        input_output_aliases={0: 0})(x)
    # Row-major operands here: the target sees the transposes, the same on both platforms.
    got, _ = on(gpu, call, a)
    want = jax.jit(call)(a)
    assert_close(got[0], np.asarray(want[0]), np.float64, "reconstruct")
    assert_close(got[1], np.asarray(want[1]), np.float64, "reconstruct")


# --- past the lanes kernels: the block kernels (up to 128), then cuSOLVER and cuBLAS ----------

def _relative_residual(got, want):
    """max |got - want| over max |want| and the order: rounding-level for a backward-stable
    factorization whatever the size."""
    got, want = np.asarray(got), np.asarray(want)
    return np.abs(got - want).max() / (np.abs(want).max() * max(want.shape[-2:]))


def _small_residual(got, want, dtype):
    assert _relative_residual(got, want) < 50 * np.finfo(dtype).eps


def _lu_product(lu, ipiv):
    """P·L·U from LAPACK's packed LU and 1-based row swaps, per matrix."""
    lu, ipiv = np.asarray(lu), np.asarray(ipiv)
    m, n = lu.shape[-2:]
    k = min(m, n)
    out = np.empty_like(lu)
    for index in np.ndindex(lu.shape[:-2]):
        packed = lu[index]
        lower = np.tril(packed[:, :k], -1) + np.eye(m, k, dtype=lu.dtype)
        product = lower @ np.triu(packed[:k, :])
        for i in reversed(range(k)):
            j = ipiv[index][i] - 1
            product[[i, j]] = product[[j, i]]
        out[index] = product
    return out


# (batch, m, n): the block kernel (to 128; c128 128×128 does not fit), then cuBLAS
# getrfBatched (many square), cuSOLVER getrf (one, or rectangular).
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, m, n", [((8,), 100, 100), ((3,), 128, 70), ((2,), 70, 128),
                                         ((64,), 128, 128), ((3,), 160, 160), ((1,), 200, 200),
                                         ((4,), 150, 130)], ids=str)
def test_getrf_past_the_lanes_reconstructs(gpu, dtype, batch, m, n, random_matrix):
    a = random_matrix(batch + (m, n), dtype)
    (lu, ipiv, info), hlo = on(gpu, ferrax.linalg.getrf, a)
    assert "ferrax_getrf" in hlo
    np.testing.assert_array_equal(info, 0)
    assert ((ipiv >= 1) & (ipiv <= m)).all()
    _small_residual(_lu_product(lu, ipiv), a, dtype)


# jax's lu on ferrax_getrf_row_major: the kernels read row-major matrices themselves (to
# 128), the libraries get a column-major copy (past them).
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, m, n", [((8,), 100, 100), ((3,), 128, 70), ((2,), 70, 128),
                                         ((64,), 128, 128), ((3,), 160, 160), ((4,), 150, 130),
                                         ((33,), 32, 32)], ids=str)
def test_installed_lu_row_major_reconstructs(gpu, dtype, batch, m, n, random_matrix):
    a = random_matrix(batch + (m, n), dtype)
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        (lu, pivots, perm), hlo = on(gpu, jax.lax.linalg.lu, a)
    assert "ferrax_getrf_row_major" in hlo
    k = min(m, n)
    assert ((pivots >= 0) & (pivots < m)).all()
    lower = np.tril(lu[..., :, :k], -1) + np.eye(m, k, dtype=dtype)
    upper = np.triu(lu[..., :k, :])
    permuted = np.take_along_axis(a, perm[..., :, None], axis=-2)
    _small_residual(lower @ upper, permuted, dtype)
    # The permutation is the pivots' (lu_pivots_to_permutation on the CPU).
    want_perm = jax.lax.linalg.lu_pivots_to_permutation(jax.device_put(pivots, jax.devices("cpu")[0]), m)
    np.testing.assert_array_equal(perm, np.asarray(want_perm))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("batch, n", [((3,), 80), ((3,), 160), ((1,), 160)], ids=str)
def test_getrf_past_the_lanes_singular_reports_info(gpu, dtype, batch, n, random_matrix):
    a = random_matrix(batch + (n, n), dtype)
    a[0, :, 5] = 0
    if batch[0] > 1:
        a[1] = 0
    (_, _, info), _ = on(gpu, ferrax.linalg.getrf, a)
    np.testing.assert_array_equal(info, np.asarray(ferrax.linalg.getrf(a)[2]))


# (batch, n): the block kernel, cuSOLVER potrf (one matrix), potrfBatched.
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, n", [((5,), 80), ((2, 3), 128), ((1,), 150), ((4,), 140)],
                         ids=str)
def test_cholesky_past_the_lanes_reconstructs(gpu, dtype, batch, n, rng):
    a = _spd(rng, batch, n, dtype)
    a[(0,) * len(batch)] = -np.eye(n)  # not positive definite: NaN, as jax's
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        lower, hlo = on(gpu, jnp.linalg.cholesky, a)
    assert "ferrax_potrf" in hlo
    assert np.isnan(lower[(0,) * len(batch)]).all()
    ok = np.ones(batch, bool)
    ok[(0,) * len(batch)] = False
    lower, a = lower[ok], a[ok]
    _small_residual(lower @ np.conj(np.swapaxes(lower, -1, -2)), a, dtype)
    np.testing.assert_array_equal(lower, np.tril(lower))


# ferrax.linalg.qr on the GPU (no thresholds: the fused kernels, lanes and block, then the
# libraries on a column-major copy) against the CPU's ferrax_qr.
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, m, n", [((500,), 8, 8), ((100,), 32, 20), ((7,), 20, 32),
                                         ((9,), 100, 60), ((3,), 200, 150), ((2,), 150, 200),
                                         ((4,), 5, 0)], ids=str)
@pytest.mark.parametrize("full_matrices", [False, True], ids=["reduced", "full"])
def test_explicit_qr_matches_cpu(gpu, dtype, batch, m, n, full_matrices, random_matrix):
    a = random_matrix(batch + (m, n), dtype)
    fn = lambda a: ferrax.linalg.qr(a, full_matrices=full_matrices)
    (q, r), hlo = on(gpu, fn, a)
    assert "ferrax_qr" in hlo
    cpu_q, cpu_r = (np.asarray(x) for x in fn(a))
    if min(m, n) == 0:  # jax's result for empty matrices: the identity's columns, R empty
        np.testing.assert_array_equal(q, cpu_q)
        return
    _small_residual(q @ r, a, dtype)
    np.testing.assert_array_equal(np.tril(r, -1), 0)
    assert _relative_residual(r, cpu_r) < 1e3 * np.finfo(dtype).eps
    assert _relative_residual(q, cpu_q) < 1e3 * np.finfo(dtype).eps


def _qr_by_steps(a):
    """jnp.linalg.qr's reduced mode through jax's separate primitives (ferrax_geqrf and
    ferrax_orgqr when installed, rather than the one-call ferrax_qr)."""
    k = min(a.shape[-2:])
    reflectors, taus = lax_linalg.geqrf(a)
    q = jax.lax.linalg.householder_product(reflectors[..., :k], taus)
    return q, jnp.triu(reflectors[..., :k, :])


# (batch, m, n): the block kernels (to 128), then cuSOLVER geqrf (few matrices, or more than
# 256 rows) or cuBLAS geqrfBatched, and cuSOLVER orgqr; one ferrax_qr call or jax's steps.
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, m, n", [((4,), 100, 80), ((20,), 128, 128), ((9,), 70, 100),
                                         ((2,), 300, 200), ((24,), 200, 150)], ids=str)
@pytest.mark.parametrize("steps", [False, True], ids=["ferrax_qr", "geqrf+orgqr"])
def test_qr_past_the_lanes_matches_stock(gpu, dtype, batch, m, n, steps, random_matrix,
                                         assert_close):
    a = random_matrix(batch + (m, n), dtype)
    stock, _ = on(gpu, jnp.linalg.qr, a)
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        (q, r), hlo = on(gpu, _qr_by_steps if steps else jnp.linalg.qr, a)
    if steps:
        assert "ferrax_geqrf" in hlo and "ferrax_orgqr" in hlo
    else:
        assert "ferrax_qr" in hlo
    _small_residual(q @ r, a, dtype)
    k = min(m, n)
    eye = np.broadcast_to(np.eye(k, dtype=dtype), batch + (k, k))
    _small_residual(np.conj(np.swapaxes(q, -1, -2)) @ q, eye, dtype)
    # The same Householder convention as jaxlib's cuSOLVER: the same Q and R up to rounding.
    assert _relative_residual(r, stock[1]) < 1e3 * np.finfo(dtype).eps
    assert _relative_residual(q, stock[0]) < 1e3 * np.finfo(dtype).eps


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("batch, rows, cols, vectors", [
    ((300,), 8, 8, 5),  # the kernel, many matrices per block
    ((3,), 40, 30, 20),  # the kernel, fewer reflectors than Q's order
    ((2, 3), 12, 20, 7),  # the kernel, a wider than its 12 reflectors
    ((2,), 160, 60, 9),  # past the kernel: cuSOLVER
], ids=str)
def test_ormqr_matches_q(gpu, dtype, left, transpose, batch, rows, cols, vectors,
                         random_matrix):
    a = random_matrix(batch + (rows, cols), dtype)
    c = random_matrix(batch + ((rows, vectors) if left else (vectors, rows)), dtype)
    reflectors, taus = lax_linalg.geqrf(a)
    reflectors, taus = np.asarray(reflectors), np.asarray(taus)
    multiply = lambda r, t, c: jax.lax.linalg.ormqr(r, t, c, left=left, transpose=transpose)
    ferrax.install()
    with ferrax._install.ferrax_on_gpu_everywhere():
        got, hlo = on(gpu, multiply, reflectors, taus, c)
    assert "ferrax_ormqr" in hlo
    # Q (rows×rows) in full from the same reflectors, on the CPU.
    k = taus.shape[-1]
    padded = np.zeros(batch + (rows, rows), dtype)
    padded[..., :k] = reflectors[..., :k]
    q = np.asarray(jax.lax.linalg.householder_product(padded, taus))
    if transpose:
        q = np.conj(np.swapaxes(q, -1, -2))
    _small_residual(got, q @ c if left else c @ q, dtype)


def _ill_conditioned(rng, batch, n, dtype, condition):
    """U·diag(σ)·Vᴴ with singular values from 1 down to 1/condition, U and V random unitary."""
    def unitary():
        x = rng.standard_normal(batch + (n, n))
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(x.shape)
        return np.linalg.qr(x)[0]
    sigma = np.logspace(0, -np.log10(condition), n)
    return ((unitary() * sigma[..., None, :]) @ np.conj(np.swapaxes(unitary(), -1, -2))).astype(dtype)


# Every path (lanes and block kernels, cuBLAS, cuSOLVER) is backward stable: the residual of
# the factorization stays at rounding level however ill-conditioned the matrix.
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("batch, n", [((64,), 8), ((16,), 32), ((8,), 100), ((4,), 200),
                                      ((1,), 160)], ids=str)
def test_ill_conditioned_factorizations_are_backward_stable(gpu, dtype, batch, n, rng):
    condition = 1e3 if np.finfo(dtype).bits <= 32 else 1e10
    a = _ill_conditioned(rng, batch, n, dtype, condition)
    spd = a @ np.conj(np.swapaxes(a, -1, -2)) + np.eye(n, dtype=dtype) / condition
    ferrax.install()
    fns = lambda a, spd: (ferrax.linalg.getrf(a), jnp.linalg.qr(a), jnp.linalg.cholesky(spd))
    with ferrax._install.ferrax_on_gpu_everywhere():
        ((lu, ipiv, info), (q, r), lower), hlo = on(gpu, fns, a, spd)
    for target in ("ferrax_getrf", "ferrax_qr", "ferrax_cholesky" if n <= 32 else "ferrax_potrf"):
        assert target in hlo, target
    np.testing.assert_array_equal(info, 0)
    _small_residual(_lu_product(lu, ipiv), a, dtype)
    _small_residual(q @ r, a, dtype)
    _small_residual(lower @ np.conj(np.swapaxes(lower, -1, -2)), spd, dtype)
