"""ferrax_geqrf / ferrax_orgqr against stock jax on CPU: every QR entry point of jax, routed to
ferrax by ``ferrax.install()``, gives what jaxlib's LAPACK targets give (to rounding: ferrax
factors matrices up to 16×16 in Rust, larger ones with the same LAPACK; NaN and inf in the same
places), plus QR's identities, edge cases and the handlers' errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.lax import linalg as lax_linalg
from jax._src.lax.linalg import geqrf  # jax.lax.linalg does not export it

jax.config.update("jax_enable_x64", True)

import ferrax  # noqa: E402
from helpers import assert_matches_stock, assert_same, run  # noqa: E402

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
BATCHES = [(), (3,), (2, 2)]
SHAPES = [(4, 4), (6, 3), (3, 6)]  # square, tall, wide
TARGETS = ("ferrax_geqrf", "ferrax_orgqr", "ferrax_qr")


@pytest.fixture
def install():
    """Call it after computing the stock results; jax's own lowerings come back at teardown."""
    yield ferrax.install
    ferrax.uninstall()


def random_matrix(shape, dtype):
    rng = np.random.default_rng()
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def tolerance(dtype):
    return 1e-4 if np.finfo(dtype).dtype == np.float32 else 1e-12


def every_qr(a):
    """Every jax function that lowers to geqrf and orgqr/ungqr on CPU."""
    k = min(a.shape[-2:])
    x, taus = geqrf(a)
    return {
        "jnp_reduced": jnp.linalg.qr(a, mode="reduced"),
        "jnp_complete": jnp.linalg.qr(a, mode="complete"),
        "jnp_r": jnp.linalg.qr(a, mode="r"),
        "jnp_raw": jnp.linalg.qr(a, mode="raw"),
        "scipy_full": jax.scipy.linalg.qr(a),
        "scipy_economic": jax.scipy.linalg.qr(a, mode="economic"),
        "lax_full": lax.linalg.qr(a, full_matrices=True),
        "lax_reduced": lax.linalg.qr(a, full_matrices=False),
        "geqrf": (x, taus),
        "householder_product": lax.linalg.householder_product(x[..., :k], taus),
    }




def check_identities(a, out):
    """Q R = A, Q^H Q = I and R upper triangular, for the factorizations ferrax computed."""
    tol = tolerance(a.dtype)
    for name in ("jnp_reduced", "jnp_complete", "scipy_full", "lax_full", "lax_reduced"):
        q, r = out[name]
        np.testing.assert_allclose(q @ r, a, rtol=tol, atol=tol, err_msg=name)
        eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + 2 * q.shape[-1:])
        np.testing.assert_allclose(q.conj().mT @ q, eye, rtol=tol, atol=tol, err_msg=name)
        np.testing.assert_array_equal(np.tril(r, -1), 0, err_msg=name)
    # geqrf's upper triangle is R; householder_product forms Q's first k columns.
    x, _ = out["geqrf"]
    k = min(a.shape[-2:])
    np.testing.assert_array_equal(np.triu(x)[..., :k, :], out["jnp_reduced"][1])
    np.testing.assert_array_equal(out["householder_product"], out["jnp_reduced"][0][..., :k])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_matches_stock_jax(install, dtype):
    # Each dtype gets every batch and every matrix shape, paired differently per dtype so that
    # the dtypes together cover all pairs; one jitted function keeps it to one compilation per
    # dtype and side (compilation is most of this file's runtime).
    d = DTYPES.index(dtype)
    pairs = [(b, SHAPES[(i + d) % len(SHAPES)]) for i, b in enumerate(BATCHES)]
    inputs = {(b, s): random_matrix(b + s, dtype) for b, s in pairs}
    fn = lambda inputs: {key: every_qr(a) for key, a in inputs.items()}
    stock = run(fn, inputs)
    install()
    ours = run(fn, inputs)
    assert_matches_stock(ours, stock, tolerance(dtype))
    for key, a in inputs.items():
        check_identities(a, ours[key])


@pytest.mark.parametrize("full_matrices", [True, False], ids=["full", "reduced"])
@pytest.mark.parametrize("shape", [(17, 17), (40, 23), (23, 40), (8, 33), (33, 8), (128, 128),
                                   (129, 7)], ids=lambda s: "x".join(map(str, s)))
def test_one_call_qr_is_the_separate_targets_bit_for_bit(install, shape, full_matrices, dtype):
    """ferrax_qr (jax's qr in one call, on the Rust/LAPACK hand-over's both sides)
    against jax's steps on ferrax_geqrf and ferrax_orgqr, and against stock jax. The two make
    the same LAPACK calls, yet OpenBLAS's results vary in the last bits from one run to the
    next (seen for complex128 at 128×128: the first call of a process differs from later ones
    on the same input), so they agree to rounding, not bit for bit."""
    a = random_matrix((3,) + shape, dtype)
    a[1] *= 1e-20  # tiny, regular
    a[2, :, 0] = 0  # rank-deficient
    fn = lambda a: lax.linalg.qr(a, full_matrices=full_matrices)
    steps = lambda a: lax_linalg._qr_lowering(a, pivoting=False, full_matrices=full_matrices,
                                              use_magma=None)
    stock = run(fn, a)
    install()
    assert "ferrax_qr" in jax.jit(fn).lower(a).as_text()
    assert "ferrax_qr" not in jax.jit(steps).lower(a).as_text()
    ours, separate = run(fn, a), run(steps, a)
    assert_matches_stock(ours, separate, 100 * np.finfo(dtype).eps)
    q, r = ours
    assert_matches_stock(r, stock[1], tolerance(dtype))
    tol = tolerance(dtype)
    scale = np.abs(a).max(axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose(q @ r / scale, a / scale, rtol=tol, atol=tol * max(shape))
    np.testing.assert_array_equal(np.tril(r, -1), 0)


@pytest.mark.parametrize("full_matrices", [True, False], ids=["full", "reduced"])
# (4, 300, 20): 300 rows but 20 reflectors, a batch: a task per matrix.
@pytest.mark.parametrize("shape", [(1, 200, 200), (1, 300, 130), (1, 130, 300), (2, 300, 300),
                                   (4, 300, 20)], ids=lambda s: "x".join(map(str, s)))
def test_one_matrix_over_the_threads(install, shape, full_matrices, dtype):
    """From 128 with fewer matrices than threads (past 2048 reflectors with any; 2×300×300: a
    task each where the pool has two threads), each matrix of ferrax_qr over the pool: LAPACK's geqrf per block of 64 columns, the block's triangular factor (as
    ?larft), Qᴴ applied to the columns right of it in column blocks while the next block is
    factored, then Q formed in column blocks. The Householder convention is LAPACK's, so R and
    Q are stock jax's to rounding; with a zero column in the third block (rank-deficient) too.
    QR's identities besides."""
    a = random_matrix(shape, dtype)
    a[-1, :, min(shape[1:]) // 2] = 0
    fn = lambda a: lax.linalg.qr(a, full_matrices=full_matrices)
    stock = run(fn, a)
    install()
    assert "ferrax_qr" in jax.jit(fn).lower(a).as_text()
    ours = run(fn, a)
    assert_matches_stock(ours, stock, tolerance(dtype))
    q, r = ours
    tol = tolerance(dtype)
    scale = np.abs(a).max(axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose(q @ r / scale, a / scale, rtol=tol, atol=tol * max(shape))
    eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + 2 * q.shape[-1:])
    np.testing.assert_allclose(q.conj().mT @ q, eye, rtol=tol, atol=tol * max(shape))
    np.testing.assert_array_equal(np.tril(r, -1), 0)


def test_one_matrix_over_the_threads_spreads_nan(install):
    a = random_matrix((1, 300, 300), np.float64)
    a[0, 200, 100] = np.nan
    stock = run(jnp.linalg.qr, a)
    install()
    ours = run(jnp.linalg.qr, a)
    for x in (ours, stock):
        assert not np.isfinite(x[0]).all() and not np.isfinite(x[1]).all()
    # R's rows above the NaN's column's reach stay finite in both.
    np.testing.assert_allclose(ours[1][0, :100, :100], stock[1][0, :100, :100], rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("full_matrices", [True, False], ids=["full", "reduced"])
@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (40, 23), (23, 40), (130, 9)],
                         ids=lambda s: "x".join(map(str, s)))
def test_explicit_qr(install, shape, full_matrices, dtype):
    """ferrax.linalg.qr without install(): close to stock jax's results, under vmap too, and
    the installed jax qr's (the same ferrax_qr call) bit for bit."""
    a = random_matrix((2, 3) + shape, dtype)
    stock = run(lambda a: lax.linalg.qr(a, full_matrices=full_matrices), a)
    ours = run(lambda a: ferrax.linalg.qr(a, full_matrices=full_matrices), a)
    mapped = run(jax.vmap(lambda a: ferrax.linalg.qr(a, full_matrices=full_matrices)), a)
    assert "ferrax_qr" in jax.jit(lambda a: ferrax.linalg.qr(a)).lower(a).as_text()
    # Not bit for bit: OpenBLAS's kernels can round differently with the buffers' alignment.
    assert_matches_stock(mapped, ours, tolerance(dtype))
    for got, want in zip(ours, stock):
        assert got.shape == want.shape
        assert_matches_stock(got, want, tolerance(dtype))
    if max(shape) <= 16:  # the Rust path (deterministic), the one ferrax_qr call either way
        install()
        assert_same(ours, run(lambda a: lax.linalg.qr(a, full_matrices=full_matrices), a))


def test_explicit_qr_rejects_bad_input():
    with pytest.raises(ValueError, match="ferrax_qr: expected a matrix"):
        ferrax.linalg.qr(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="ferrax_qr: expected float32"):
        ferrax.linalg.qr(np.ones((3, 3), np.int32))


def test_hlo_names_ferrax_targets(install):
    a = random_matrix((5, 3), np.float64)
    c = random_matrix((5, 3), np.complex64)
    assert not any(t in jax.jit(every_qr).lower(a).as_text() for t in TARGETS)
    install()
    for x in (a, c):
        hlo = jax.jit(every_qr).lower(x).as_text()
        assert all(t in hlo for t in TARGETS), hlo
        assert "lapack_" not in hlo


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_vmap_and_jit(install, dtype):
    a = random_matrix((3, 2, 5, 4), dtype)
    fn = jax.jit(jax.vmap(jax.vmap(lambda m: jnp.linalg.qr(m, mode="complete"))))
    hh = jax.jit(jax.vmap(lambda m: lax.linalg.householder_product(*geqrf(m))))
    stock = (run(fn, a), run(hh, a))
    install()
    ours = (run(fn, a), run(hh, a))
    assert_matches_stock(ours, stock, tolerance(dtype))
    assert "ferrax_qr" in fn.lower(a).as_text()
    assert "ferrax_orgqr" in hh.lower(a).as_text()


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=lambda d: np.dtype(d).name)
def test_large_batch_split_across_threads(install, dtype, stock_per_output):
    """Enough matrices for several chunks, each with its own workspace."""
    a = random_matrix((1024, 10, 6), dtype)
    stock = stock_per_output(every_qr, a)
    install()
    ours = run(every_qr, a)
    assert_matches_stock(ours, stock, tolerance(dtype))


def special_inputs(dtype):
    rng = np.random.default_rng()
    u, v = random_matrix((2, 5, 1), dtype), random_matrix((2, 1, 4), dtype)
    rank_one = u @ v  # singular
    ill = random_matrix((2, 5, 4), dtype) * np.logspace(0, -30, 4).astype(dtype)
    nan = random_matrix((2, 5, 4), dtype)
    nan[0, rng.integers(5), rng.integers(4)] = np.nan
    inf = random_matrix((2, 5, 4), dtype)
    inf[1, rng.integers(5), rng.integers(4)] = np.inf
    return np.concatenate([rank_one, ill, nan, inf])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_singular_ill_conditioned_and_nan_inputs(install, dtype):
    a = special_inputs(dtype)
    fn = lambda a: (jnp.linalg.qr(a, mode="complete"), geqrf(a))
    stock = run(fn, a)
    install()
    ours = run(fn, a)
    # Past a singular matrix's rank, Q's columns and the reflectors are rounding noise in any
    # implementation: R (whose trailing part is noise on the scale of |A|) against stock, Q by
    # QR's identities.
    (q, r), _ = ours
    assert_matches_stock(r, stock[0][1], tolerance(dtype), nonfinite_inputs=(4, 7))
    for leaf in jax.tree.leaves(ours):
        assert np.isfinite(leaf[[0, 1, 2, 3, 5, 6]]).all()  # the finite inputs stay finite
    for x in (ours, stock):
        # LAPACK's own NaN propagation (no info to act on), how far it spreads aside.
        assert not np.isfinite(x[1][0][4]).all() and not np.isfinite(x[1][0][7]).all()
    tol = tolerance(dtype)
    scale = np.abs(a[:4]).max(axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose(q[:4] @ r[:4] / scale, a[:4] / scale, rtol=tol, atol=tol)
    np.testing.assert_allclose(q[:4].conj().mT @ q[:4], np.broadcast_to(np.eye(5), (4, 5, 5)),
                               rtol=tol, atol=tol)


ZERO_SIZE = [(0, 0), (3, 0), (0, 3), (0, 4, 3), (2, 3, 0), (0, 3, 3)]


@pytest.mark.parametrize("shape", ZERO_SIZE, ids=lambda s: "x".join(map(str, s)))
def test_zero_size(install, shape):
    a = random_matrix(shape, np.float64)
    # Tall or square reflectors for householder_product, with no taus (Q = I's first columns).
    m = max(shape[-2:])
    x = random_matrix(shape[:-2] + (m, shape[-1]), np.float64)
    taus = random_matrix(shape[:-2] + (0,), np.float64)
    fn = lambda a, x, taus: (every_qr(a), lax.linalg.householder_product(x, taus))
    stock = run(fn, a, x, taus)
    install()
    ours = run(fn, a, x, taus)
    assert_same(ours, stock)


def test_householder_product_without_taus(install):
    """k = 0 still calls LAPACK: Q is the first n columns of the identity."""
    x = random_matrix((2, 5, 3), np.complex64)
    taus = np.zeros((2, 0), np.complex64)
    fn = lax.linalg.householder_product
    stock = run(fn, x, taus)
    install()
    ours = run(fn, x, taus)
    assert_same(ours, stock)
    np.testing.assert_array_equal(ours, np.broadcast_to(np.eye(5, 3), (2, 5, 3)))


def raw_call(target, result_shapes, *args, **attrs):
    ferrax.register()
    call = jax.ffi.ffi_call(target, result_shapes)
    return jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs))(*args))


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def test_raw_call_errors_name_target_and_operand():
    ints = np.random.default_rng().integers(1, 9, (4, 3), dtype=np.int32)
    a = random_matrix((4, 3), np.float32)
    taus = random_matrix((3,), np.float32)
    cases = [
        ("ferrax_geqrf", [sds((4, 3), np.int32), sds((3,), np.int32)], (ints,), {},
         r"ferrax_geqrf: operand 0 'x': expected dtype f32, f64, c64 or c128, got s32"),
        ("ferrax_orgqr", [sds((4, 3), np.int32)], (ints, taus), {},
         r"ferrax_orgqr: operand 0 'x': expected dtype f32, f64, c64 or c128, got s32"),
        ("ferrax_geqrf", [sds((4, 3), np.float32), sds((3,), np.float32)], (a,),
         {"uplo": np.uint8(ord("L"))},
         r"ferrax_geqrf: unexpected attribute 'uplo'"),
        ("ferrax_orgqr", [sds((4, 3), np.float32)], (a, taus), {"mode": np.int32(1)},
         r"ferrax_orgqr: unexpected attribute 'mode'"),
        ("ferrax_geqrf", [sds((4, 3), np.float32), sds((4,), np.float32)], (a,), {},
         r"ferrax_geqrf: result 1 'tau': expected shape \[3\], got shape \[4\]"),
        ("ferrax_geqrf", [sds((4, 3), np.float32), sds((3,), np.float64)], (a,), {},
         r"ferrax_geqrf: result 1 'tau': expected dtype f32, got f64"),
        ("ferrax_orgqr", [sds((4, 3), np.float32)], (a, taus.astype(np.float64)), {},
         r"ferrax_orgqr: operand 1 'tau': expected dtype f32, got f64"),
        ("ferrax_orgqr", [sds((4, 3), np.float32)], (a, random_matrix((4,), np.float32)), {},
         r"ferrax_orgqr: operand 1 'tau': expected shape \[\] \+ \[k\] with k <= 3, "
         r"got shape \[4\]"),
        ("ferrax_orgqr", [sds((3, 4), np.float32)], (a.T.copy(), taus), {},
         r"ferrax_orgqr: operand 0 'x': expected matrices with at least as many rows as columns"),
        ("ferrax_orgqr", [sds((4, 4), np.float32)], (a, taus), {},
         r"ferrax_orgqr: result 0 'x_out': expected shape \[4, 3\]"),
    ]
    for target, results, args, attrs, message in cases:
        with pytest.raises(Exception, match=message):
            raw_call(target, results, *args, **attrs)
