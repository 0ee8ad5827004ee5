"""ferrax_gesdd (jaxlib's lapack_?gesdd_ffi contract) through ferrax.install(): jax's SVD-based
functions against stock jax computed first, plus the raw target's error messages."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

import ferrax  # noqa: E402  (after x64, so that float64 inputs stay float64)
from helpers import raw_svd  # noqa: E402

TARGET = "ferrax_gesdd"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
BATCHES = [(), (3,), (2, 2)]
SHAPES = [(4, 4), (6, 3), (3, 5)]

rng = np.random.default_rng()


def random_matrix(shape, dtype):
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def tolerance(dtype):
    return 50 * np.finfo(dtype).eps


@pytest.fixture
def stock_vs_ferrax():
    """``run(fn, *args)``: ``fn``'s outputs with stock jax, then with ferrax installed."""

    def run(fn, *args):
        ferrax.uninstall()
        expected = jax.tree.map(np.asarray, fn(*args))
        ferrax.install()
        got = jax.tree.map(np.asarray, fn(*args))
        return expected, got

    yield run
    ferrax.uninstall()


def assert_same(expected, got, dtype):
    """Same shapes, dtypes and NaN pattern; values equal up to a few ulps (in practice
    bit-identical: both sides call the same LAPACK routine)."""
    for e, g in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
        assert e.shape == g.shape and e.dtype == g.dtype
        np.testing.assert_array_equal(np.isnan(e), np.isnan(g))
        scale = max(1.0, float(np.nanmax(np.abs(e), initial=0.0)))
        np.testing.assert_allclose(g, e, rtol=0, atol=tolerance(dtype) * scale)


def all_modes(a):
    full = jnp.linalg.svd(a, full_matrices=True)
    reduced = jnp.linalg.svd(a, full_matrices=False)
    values = jnp.linalg.svd(a, compute_uv=False)
    return full, reduced, values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("shape", SHAPES)
def test_svd_matches_stock_and_reconstructs(stock_vs_ferrax, dtype, batch, shape):
    a = random_matrix(batch + shape, dtype)
    expected, got = stock_vs_ferrax(jax.jit(all_modes), a)
    assert_same(expected, got, dtype)

    (u, s, vt), (ur, sr, vtr), values = got
    m, n = shape
    k = min(m, n)
    assert u.shape == batch + (m, m) and vt.shape == batch + (n, n)
    assert ur.shape == batch + (m, k) and vtr.shape == batch + (k, n)
    assert s.dtype == values.dtype == np.finfo(dtype).dtype
    atol = 10 * tolerance(dtype) * max(1.0, np.abs(a).max() * k)
    np.testing.assert_allclose((ur * sr[..., None, :]) @ vtr, a, rtol=0, atol=atol)
    np.testing.assert_allclose((u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :], a, rtol=0, atol=atol)
    eye = lambda size: np.broadcast_to(np.eye(size), batch + (size, size))  # noqa: E731
    np.testing.assert_allclose(np.conj(np.swapaxes(u, -1, -2)) @ u, eye(m), rtol=0, atol=atol)
    np.testing.assert_allclose(vt @ np.conj(np.swapaxes(vt, -1, -2)), eye(n), rtol=0, atol=atol)
    np.testing.assert_allclose(values, s, rtol=0, atol=atol)
    assert np.all(np.diff(s, axis=-1) <= 0) and np.all(s >= 0)


def lax_svd(a):
    return jax.lax.linalg.svd(a, full_matrices=False)


SVD_USERS = {
    "jnp.linalg.svd": jnp.linalg.svd,
    "jnp.linalg.pinv": jnp.linalg.pinv,
    "jnp.linalg.matrix_rank": jnp.linalg.matrix_rank,
    "jnp.linalg.norm(ord=2)": lambda a: jnp.linalg.norm(a, ord=2, axis=(-2, -1)),
    "jax.scipy.linalg.svd": lambda a: jax.scipy.linalg.svd(a[0]),
    "jax.lax.linalg.svd": lax_svd,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SVD_USERS)
def test_jax_functions_route_to_ferrax(stock_vs_ferrax, dtype, name):
    fn = jax.jit(SVD_USERS[name])
    a = random_matrix((2, 5, 3), dtype)
    assert TARGET not in fn.lower(a).as_text()
    expected, got = stock_vs_ferrax(fn, a)
    assert TARGET in fn.lower(a).as_text()
    assert_same(expected, got, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vmap_and_jit(stock_vs_ferrax, dtype):
    a = random_matrix((3, 2, 4, 5), dtype)
    fn = jax.jit(jax.vmap(jax.vmap(lambda x: jnp.linalg.svd(x, full_matrices=False)), in_axes=1))
    expected, got = stock_vs_ferrax(fn, a)
    assert_same(expected, got, dtype)
    assert TARGET in fn.lower(a).as_text()


def special_inputs(dtype):
    """A batch of rank-deficient, ill-conditioned and NaN matrices."""
    a = random_matrix((5, 5, 4), dtype)
    a[0] = random_matrix((5, 2), dtype) @ random_matrix((2, 4), dtype)  # rank 2
    a[1] = a[1] * np.logspace(0, -30 if np.finfo(dtype).bits >= 64 else -12, 4)  # cond huge
    a[2, :, 1] = a[2, :, 0]  # two equal columns
    a[3, 1, 2] = np.nan
    a[4] = np.outer(random_matrix((5,), dtype), random_matrix((4,), dtype))  # rank 1
    return a


@pytest.mark.parametrize("dtype", DTYPES)
def test_singular_ill_conditioned_and_nan_match_stock(stock_vs_ferrax, dtype):
    a = special_inputs(dtype)
    expected, got = stock_vs_ferrax(jax.jit(all_modes), a)
    assert_same(expected, got, dtype)
    s = got[0][1]
    assert np.isnan(s[3]).all() and not np.isnan(s[[0, 1, 2, 4]]).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_inf_singular_values_match_stock(stock_vs_ferrax, dtype):
    a = random_matrix((2, 5, 4), dtype)
    a[1, 0, 0] = np.inf
    expected, got = stock_vs_ferrax(jax.jit(lambda x: jnp.linalg.svd(x, compute_uv=False)), a)
    assert_same(expected, got, dtype)
    assert np.isnan(got[1]).all() and not np.isnan(got[0]).any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_input_with_vectors_returns_nan(installed, dtype, bad):
    # OpenBLAS's ?gesdd never returns here (stock jax hangs), so ferrax does not call it:
    # the matrix reports info = -4 and jax fills its outputs with NaN.
    a = random_matrix((3, 5, 4), dtype)
    a[1, 2, 3] = bad
    u, s, vt = map(np.asarray, jax.jit(jnp.linalg.svd)(a))
    for x in (u, s, vt):
        assert np.isnan(x[1]).all() and not np.isnan(x[[0, 2]]).any()
    np.testing.assert_allclose(s[[0, 2]], np.linalg.svd(a[[0, 2]], compute_uv=False),
                               rtol=1e-4 if np.finfo(dtype).bits == 32 else 1e-10)


@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 0, 3, 5), (3, 0), (4, 0), (0, 3), (2, 0, 4), (2, 4, 0)])
def test_zero_size_matches_stock(stock_vs_ferrax, shape):
    a = np.full(shape, 1.5)  # no entries or none read; the value is irrelevant
    expected, got = stock_vs_ferrax(jax.jit(all_modes), a)
    assert_same(expected, got, np.float64)
    if 0 in shape[:-2]:  # batch 0 reaches the target; m = 0 or n = 0 jax lowers itself
        assert TARGET in jax.jit(all_modes).lower(a).as_text()


# --- the raw target ----------------------------------------------------------------------


#: Both SVD targets share jaxlib's contract; a non-finite matrix reports LAPACK's index of `a`.
RAW_TARGETS = [("ferrax_gesdd", -4), ("ferrax_gesvd", -5)]
TARGET_NAMES = [target for target, _ in RAW_TARGETS]


def raw_error(target, *args, **kwargs):
    with pytest.raises(Exception) as failure:
        raw_svd(target, *args, **kwargs)
    message = str(failure.value)
    assert target in message
    return message


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_raw_wrong_dtype_names_operand(target):
    message = raw_error(target, rng.integers(1, 9, (3, 3), dtype=np.int32))
    assert "operand 0 'x'" in message and "s32" in message


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_raw_wrong_result_names_result(target):
    a = random_matrix((2, 4, 3), np.complex64)
    assert "result 1 's'" in raw_error(target, a, s_dtype=np.complex64)
    assert "result 2 'u'" in raw_error(target, a, u_cols=2)


@pytest.mark.parametrize("target", TARGET_NAMES)
@pytest.mark.parametrize(
    "mode, expected",
    [
        (np.uint8(ord("Q")), "attribute 'mode': expected one of 'A', 'S', 'N', 'O', got 81"),
        (ord("A"), "attribute 'mode': expected u8 scalar, got s64 scalar"),
        ("A", "attribute 'mode': expected u8 scalar, got string"),
        (np.uint8(ord("O")), "attribute 'mode': 'O'"),
    ],
)
def test_raw_wrong_attribute_names_attribute(target, mode, expected):
    assert expected in raw_error(target, random_matrix((4, 4), np.float64), mode=mode)


@pytest.mark.parametrize("target, inf_info", RAW_TARGETS)
@pytest.mark.parametrize("mode", ["A", "S", "N"])
def test_raw_modes_info_and_empty_matrices(target, inf_info, dtype, assert_close, mode):
    mode = np.uint8(ord(mode))
    a = random_matrix((3, 4, 4), dtype)  # square: the row-major layout only transposes
    a[1, 2, 0] = np.inf  # never handed to LAPACK
    x_out, s, _, _, info = raw_svd(target, a, mode=mode)
    np.testing.assert_array_equal(info, [0, inf_info, 0])
    assert x_out.shape == a.shape
    real = np.finfo(dtype).dtype
    assert_close(s[[0, 2]], np.linalg.svd(a[[0, 2]], compute_uv=False).astype(real), dtype,
                 kind="reconstruct")
    for shape in [(2, 3, 0), (2, 0, 3)]:
        _, s, u, vt, info = raw_svd(target, random_matrix(shape, dtype), mode=mode)
        assert s.shape == (2, 0) and (info == 0).all()
        if mode == ord("A"):  # jax's own empty SVD: identity U and V^T
            np.testing.assert_array_equal(u, np.broadcast_to(np.eye(u.shape[-1]), u.shape))
            np.testing.assert_array_equal(vt, np.broadcast_to(np.eye(vt.shape[-1]), vt.shape))


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_split_across_threads_matches_stock(stock_per_output, dtype):
    # 48 x 40 matrices cost more than one task's minimum, so the batch runs in several chunks.
    a = random_matrix((16, 48, 40), dtype)
    expected = stock_per_output(all_modes, a)
    ferrax.install()
    got = jax.tree.map(np.asarray, jax.jit(all_modes)(a))
    assert_same(expected, got, dtype)


# --- batches of small matrices: one-sided Jacobi in SIMD lanes --------------------------------

#: The largest order each dtype decomposes by Jacobi (`Svd::JACOBI_MAX` in src/linalg/svd.rs,
#: from the library's limits table).
JACOBI_MAX = {dtype: ferrax._library.limits()[f"SVD_JACOBI_MAX_{name}"]
              for dtype, name in [(np.float32, "F32"), (np.float64, "F64"),
                                  (np.complex64, "C64"), (np.complex128, "C128")]}


def jacobi_shapes(dtype):
    top = JACOBI_MAX[dtype]
    return [(1, 1), (2, 2), (8, 8), (top, top), (top, top - 5), (top - 7, top), (9, 4), (3, 7)]


def assert_valid_svd(a, u, s, vt, dtype, reference_s, err_msg=""):
    """``a = U·diag(s)·Vᴴ``, ``U`` and ``V`` with orthonormal columns, ``s`` descending and equal
    to LAPACK's (numpy's) to ``30·k·ε·‖A‖``, the accuracy the issue asks of every path."""
    k = s.shape[-1]
    eps = np.finfo(dtype).eps
    norm = np.linalg.norm(a.astype(np.complex128), axis=(-2, -1))[..., None]
    bound = 30 * max(k, 1) * eps * np.maximum(norm, np.finfo(dtype).tiny)
    assert np.all(np.diff(s, axis=-1) <= 0) and np.all(s >= 0), err_msg
    assert np.all(np.abs(s - reference_s) <= bound), (err_msg, np.abs(s - reference_s).max())
    if u is None:
        return
    rebuilt = (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]
    assert np.all(np.abs(rebuilt - a).max(axis=(-2, -1)) <= bound[..., 0]), err_msg
    for q in (u, np.conj(np.swapaxes(vt, -1, -2))):
        eye = np.eye(q.shape[-1])
        gram = np.conj(np.swapaxes(q, -1, -2)) @ q
        assert np.abs(gram - eye).max() <= 30 * max(k, 1) * eps, err_msg


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_batches_take_jacobi_and_match_lapack(installed, dtype):
    # 19 matrices: two groups of 8 lanes (split across threads where the work allows) and 3
    # left to ?gesdd.
    for shape in jacobi_shapes(dtype):
        assert_all_modes_valid(random_matrix((19,) + shape, dtype), dtype)


def assert_all_modes_valid(a, dtype):
    """``all_modes`` of the batch ``a``: factors of the job's shapes, each a valid SVD."""
    reference = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    (u, s, vt), (ur, sr, vtr), values = jax.tree.map(np.asarray, jax.jit(all_modes)(a))
    (m, n), k = a.shape[-2:], min(a.shape[-2:])
    assert u.shape[-2:] == (m, m) and vt.shape[-2:] == (n, n)
    assert ur.shape[-2:] == (m, k) and vtr.shape[-2:] == (k, n)
    where = f"{a.shape} {np.dtype(dtype).name}"
    assert_valid_svd(a, u, s, vt, dtype, reference, where + " full")
    assert_valid_svd(a, ur, sr, vtr, dtype, reference, where + " reduced")
    assert_valid_svd(a, None, values, None, dtype, reference, where + " values")


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_batch_vectors_match_lapack_up_to_phase(installed, dtype):
    # Distinct singular values (random matrices, almost surely well separated): each singular
    # vector is LAPACK's up to a unit factor: u_j = phase_j·ru_j, and then vᴴ_j = conj(phase_j)·rvᴴ_j.
    n = min(8, JACOBI_MAX[dtype])
    assert_vectors_match_lapack_up_to_phase(random_matrix((8, n, n), dtype), dtype, min_gap=1e-2)


def assert_vectors_match_lapack_up_to_phase(a, dtype, min_gap):
    """The reduced SVD's vectors against NumPy's, u_j = phase_j·ru_j and vᴴ_j = conj(phase_j)·rvᴴ_j,
    for each singular value at least ``min_gap`` (relative to the largest) from its neighbours:
    vectors of close values are ill-conditioned."""
    u, s, vt = map(np.asarray, jax.jit(lambda x: jnp.linalg.svd(x, full_matrices=False))(a))
    ru, rs, rvt = np.linalg.svd(a, full_matrices=False)
    gaps = -np.diff(rs, axis=-1) / rs[..., :1]
    edge = np.full(rs.shape[:-1] + (1,), np.inf)
    keep = np.minimum(np.concatenate([edge, gaps], -1), np.concatenate([gaps, edge], -1)) > min_gap
    assert keep.any()
    phase = np.sum(np.conj(ru) * u, axis=-2)
    tol = 1e3 * np.finfo(dtype).eps * max(a.shape[-2:])
    np.testing.assert_allclose(np.abs(phase[keep]), 1, atol=tol)
    u_error = np.abs(u - ru * phase[..., None, :]).max(axis=-2)
    vt_error = np.abs(vt - rvt * np.conj(phase)[..., :, None]).max(axis=-1)
    assert u_error[keep].max() <= tol and vt_error[keep].max() <= tol, (u_error, vt_error)


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_batch_special_inputs(installed, dtype):
    # special_inputs' rank-deficient, ill-conditioned, equal-column and NaN matrices plus Inf,
    # zero, tiny and huge ones, in one batch of 16 (two groups of lanes).
    a = np.concatenate([special_inputs(dtype), random_matrix((11, 5, 4), dtype)])
    a[5, 0, 3] = np.inf
    a[6] = 0
    a[7] = tiny(a[7])
    a[8] *= np.finfo(dtype).max / 16
    a[9] = a[9] * np.logspace(0, -6 if np.finfo(dtype).bits < 64 else -12, 4)  # graded columns
    assert_special_batch(a, dtype, bad=[3, 5], zero=6)


def tiny(x):
    """``x`` scaled to entries about 2^20 times the smallest normal number, whose squares underflow,
    with no subnormal part: XLA's CPU reads those as zero (under LAPACK's ``?gesdd`` too, stock's
    as ours), which moves the matrix by up to 2^-20 of its size. A part under 2^-10 (of a standard
    normal: 1 in 1000) is raised to 2^-10 first."""
    finfo = np.finfo(x.dtype)
    parts = x.copy().view(finfo.dtype)  # the real and imaginary parts
    small = np.abs(parts) < 2.0**-10
    parts[small] = np.copysign(2.0**-10, parts[small])
    return parts.view(x.dtype) * (finfo.tiny * 2**20)


def assert_special_batch(a, dtype, bad, zero):
    """``all_modes`` of a batch of special matrices: those in ``bad`` (non-finite) all NaN, the
    others valid SVDs, each checked scaled to a largest element of 1 (in c128: NumPy's
    reference would overflow or underflow for huge and tiny matrices); matrix ``zero``'s
    singular values zero."""
    (u, s, vt), (ur, sr, vtr), values = jax.tree.map(np.asarray, jax.jit(all_modes)(a))
    for x in (u, s, vt, ur, sr, vtr, values):
        assert np.isnan(x[bad]).all()
        assert not np.isnan(np.delete(x, bad, axis=0)).any()
    good = [i for i in range(len(a)) if i not in bad]
    scale = np.abs(a[good]).astype(np.float64).max(axis=(-2, -1), keepdims=True)
    scale[scale == 0] = 1
    unit = a[good].astype(np.complex128) / scale
    reference = np.linalg.svd(unit, compute_uv=False)
    for u, s, vt in ((u, s, vt), (ur, sr, vtr)):
        assert_valid_svd(unit, u[good], s[good] / scale[..., 0], vt[good], dtype, reference)
    np.testing.assert_array_equal(s[zero], 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("path", ["jacobi", "faer", "split"])
def test_vmap_grad_and_svd_users_match_stock(stock_vs_ferrax, dtype, path):
    # Functions of the SVD that do not depend on the vectors' signs or phases, under vmap, by
    # Jacobi lanes (3 × 4 matrices: 12 ≥ one group of lanes), by faer and split over the pool
    # (one matrix): pinv, the nuclear norm and its gradient U·Vᴴ (jax's SVD rule), the rank,
    # the singular values.
    n, batch = {
        "jacobi": (min(6, JACOBI_MAX[dtype]), (3, 4)),
        "faer": (FAER_MIN, (2, 1)),
        "split": (split_order(dtype), (1, 1)),
    }[path]
    a = random_matrix(batch + (n, n), dtype) + (2 * n * np.eye(n)).astype(dtype)  # well conditioned
    nuclear = lambda x: jnp.sum(jnp.linalg.svd(x, compute_uv=False))  # noqa: E731
    real = lambda x: jnp.real(x) if np.iscomplexobj(x) else x  # noqa: E731
    fn = jax.jit(jax.vmap(lambda x: (
        jnp.linalg.pinv(x),
        jax.vmap(jax.grad(lambda y: nuclear(real(y))))(real(x)),
        jnp.linalg.matrix_rank(x),
        jnp.linalg.svd(x, compute_uv=False),
    )))
    expected, got = stock_vs_ferrax(fn, a)
    assert TARGET in fn.lower(a).as_text()
    for e, g in zip(expected, got):
        scale = max(1.0, float(np.abs(e).max()))
        np.testing.assert_allclose(g, e, rtol=0, atol=1e3 * np.finfo(dtype).eps * scale)


# --- larger matrices with vectors: faer's SVD --------------------------------------------------

#: The order (`max(m, n)`) from which the SVD with vectors is faer's (`SVD_FAER_MIN` in
#: src/linalg/svd.rs); below it, and without vectors, LAPACK's ?gesdd.
FAER_MIN = ferrax._library.limits()["SVD_FAER_MIN"]


def faer_shapes():
    f = FAER_MIN
    # The last is LAPACK's, next to the boundary.
    return [(f, f), (f + 9, f), (f, f + 9), (2 * f + 3, f // 4), (f // 4, 2 * f + 3), (f - 1, f - 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [(1,), (3,)])
def test_faer_sizes_are_valid_svds(installed, dtype, batch):
    for shape in faer_shapes():
        assert_all_modes_valid(random_matrix(batch + shape, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_faer_vectors_match_lapack_up_to_phase(installed, dtype):
    for shape in [(FAER_MIN + 9, FAER_MIN), (FAER_MIN, FAER_MIN)]:
        assert_vectors_match_lapack_up_to_phase(random_matrix((2,) + shape, dtype), dtype, 1e-3)


def special_matrices(m, n, dtype):
    """Ten ``m × n`` matrices: rank-deficient, graded, NaN (2), Inf (3), zero (4), tiny, huge,
    just above LAPACK's lower scaling bound, with two equal columns, random."""
    finfo = np.finfo(dtype)
    a = random_matrix((10, m, n), dtype)
    a[0] = random_matrix((m, 3), dtype) @ random_matrix((3, n), dtype)  # rank 3
    a[1] = a[1] * np.logspace(0, -12 if finfo.bits >= 64 else -5, n)  # graded columns
    a[2, 5, 7] = np.nan
    a[3, 0, 1] = np.inf
    a[4] = 0
    a[5] = tiny(a[5])
    a[6] *= finfo.max / 64
    a[7] /= np.abs(a[7]).max()  # largest modulus 1, then just above sqrt(safmin) / eps
    a[7] *= 4 * np.sqrt(finfo.tiny) / finfo.eps
    a[8, :, 1] = a[8, :, 0]  # two equal columns
    return a


@pytest.mark.parametrize("dtype", DTYPES)
def test_faer_special_inputs(installed, dtype):
    # The zero, tiny and huge matrices (which ?gesdd scales first; faer does not) go to LAPACK,
    # the one just above LAPACK's lower scaling bound stays with faer.
    assert_special_batch(special_matrices(FAER_MIN, FAER_MIN - 4, dtype), dtype, bad=[2, 3], zero=4)


# --- one large matrix with vectors: split over the pool ----------------------------------------

#: From this size of one matrix (bytes) the SVD with vectors is split over the pool (faer's
#: bidiagonalization with each step over the threads, ?bdsdc, the back-transformations split by
#: columns: `SVD_SPLIT_MIN_BYTES` in src/linalg/svd.rs), where the pool has several threads;
#: below it, and for batches of more than one matrix, the paths above.
SPLIT_MIN_BYTES = ferrax._library.limits()["SVD_SPLIT_MIN_BYTES"]


def split_order(dtype):
    """The smallest order of a square matrix of ``dtype`` that the split path takes."""
    return int(np.ceil(np.sqrt(SPLIT_MIN_BYTES / np.dtype(dtype).itemsize)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_sizes_are_valid_svds(installed, dtype):
    # Square, tall and wide, each alone (a batch of one).
    n = split_order(dtype)
    for shape in [(n, n), (n + n // 3, n), (n, n + n // 3)]:
        assert_all_modes_valid(random_matrix((1,) + shape, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_vectors_match_lapack_up_to_phase(installed, dtype):
    n = split_order(dtype)
    for shape in [(n + 7, n), (n, n + 7)]:
        assert_vectors_match_lapack_up_to_phase(random_matrix((1,) + shape, dtype), dtype, 1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_special_inputs(installed, dtype):
    # Each matrix alone: the finite ones valid SVDs (the zero, tiny and huge ones by LAPACK, the
    # rest split), the NaN and Inf ones all NaN.
    n = split_order(dtype)
    a = special_matrices(n, n, dtype)
    for i in range(len(a)):
        if i in (2, 3):
            outputs = jax.tree.map(np.asarray, jax.jit(all_modes)(a[i:i + 1]))
            assert all(np.isnan(x).all() for x in jax.tree.leaves(outputs))
        else:
            assert_special_batch(a[i:i + 1], dtype, bad=[], zero=[0] if i == 4 else [])
