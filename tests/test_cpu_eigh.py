"""ferrax_syevd (CPU) through ferrax.install(): jax's own eigh lowering calls it with jaxlib's
lapack_?syevd_ffi / lapack_?heevd_ffi contract; results must match stock jax."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.linalg  # noqa: E402

import ferrax  # noqa: E402
from helpers import aligned_columns  # noqa: E402

TARGET = "ferrax_syevd"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
BATCHES = [(), (3,), (2, 2)]

# Every jax entry point that lowers to syevd/heevd on CPU, each giving (eigenvalues,) or
# (eigenvalues, eigenvectors). jax.lax.linalg.eigh without symmetrization reads only the
# `lower` triangle, so it checks that `uplo` reaches LAPACK.
FUNCTIONS = {
    "jnp.linalg.eigh-L": lambda a: tuple(jnp.linalg.eigh(a, UPLO="L")),
    "jnp.linalg.eigh-U": lambda a: tuple(jnp.linalg.eigh(a, UPLO="U")),
    "jnp.linalg.eigvalsh-L": lambda a: (jnp.linalg.eigvalsh(a, UPLO="L"),),
    "jnp.linalg.eigvalsh-U": lambda a: (jnp.linalg.eigvalsh(a, UPLO="U"),),
    "jsl.eigh-lower": lambda a: tuple(jsl.eigh(a, lower=True)),
    "jsl.eigh-upper": lambda a: tuple(jsl.eigh(a, lower=False)),
    "lax.eigh-lower": lambda a: jax.lax.linalg.eigh(a, lower=True, symmetrize_input=False)[::-1],
    "lax.eigh-upper": lambda a: jax.lax.linalg.eigh(a, lower=False, symmetrize_input=False)[::-1],
}


@pytest.fixture
def install():
    """Call after computing the stock reference; undone at teardown."""
    yield ferrax.install
    ferrax.uninstall()


def random_matrix(shape, dtype, rng):
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def hermitian(shape, dtype, rng):
    a = random_matrix(shape, dtype, rng)
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dtype)


def tolerance(dtype, n=8):
    return 50 * n * np.finfo(dtype).eps


def assert_matches(got, ref, dtype):
    """(eigenvalues,) or (eigenvalues, eigenvectors) against stock's: the vectors up to phase
    and to a tolerance that grows as an eigenvalue's gap to its neighbours shrinks (so do
    eigenvectors' rounding errors; ferrax solves small matrices in Rust: LAPACK's steps, other
    rounding)."""
    got, ref = [np.asarray(g) for g in got], [np.asarray(r) for r in ref]
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
    np.testing.assert_allclose(got[0], ref[0], rtol=tolerance(dtype), atol=tolerance(dtype))
    if len(ref) == 2:
        w = ref[0]
        scale = np.maximum(np.abs(w).max(axis=-1, keepdims=True), np.finfo(w.dtype).tiny)
        spacing = np.diff(w, axis=-1) / scale
        inf = np.full(w.shape[:-1] + (1,), np.inf)
        gap = np.minimum(np.concatenate([inf, spacing], -1), np.concatenate([spacing, inf], -1))
        allowed = tolerance(dtype) / np.clip(gap, 1e-3, 1)
        error = np.abs(aligned_columns(got[1], ref[1]) - ref[1]).max(axis=-2)
        assert (error <= allowed).all(), (error, allowed)


# All entry points in one jitted function: one compilation per case keeps the file fast.
all_functions = jax.jit(lambda a: {name: fn(a) for name, fn in FUNCTIONS.items()})


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_matches_stock_jax(install, dtype, batch):
    a = random_matrix(batch + (5, 5), dtype, np.random.default_rng())  # only one triangle counts
    ref = all_functions(a)
    install()
    hlo = all_functions.lower(a).as_text()
    assert hlo.count(TARGET) >= len(FUNCTIONS) and "lapack_" not in hlo
    got = all_functions(a)
    for name in FUNCTIONS:
        assert_matches(got[name], ref[name], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_above_the_rust_solver_matches_lapack(install, dtype):
    # Past ferrax's own solver for tiny matrices (tests/test_cpu_small_batches.py): LAPACK's
    # syevd / heevd, backward stable, so (Weyl) its eigenvalues lie within c n eps ||A||_2 of
    # the exact ones, as SciPy's LAPACK's (called directly, not through jaxlib) do; A V = V L
    # and V^H V = I to c n eps; and the vectors match stock jax's up to phase and gap.
    n = 40
    a = hermitian((3, n, n), dtype, np.random.default_rng())
    fn = jax.jit(jnp.linalg.eigh)
    ref = fn(a)
    install()
    assert TARGET in fn.lower(a).as_text()
    w, v = map(np.asarray, fn(a))
    norm = np.linalg.norm(a.astype(np.complex128), 2, axis=(-2, -1))
    tol = tolerance(dtype, n)
    for b in range(a.shape[0]):
        np.testing.assert_allclose(w[b], scipy.linalg.eigvalsh(a[b]), rtol=0, atol=tol * norm[b])
        np.testing.assert_allclose(a[b] @ v[b] / norm[b], v[b] * (w[b] / norm[b]), rtol=0,
                                   atol=tol)
        np.testing.assert_allclose(np.conj(v[b].T) @ v[b], np.eye(n), rtol=0, atol=tol)
    assert_matches((w, v), ref, dtype)


# The orders of ferrax's paths: its Rust solver; LAPACK for real matrices and faer for
# complex ones (from order 64 around LAPACK's tridiagonal solver); faer for every dtype in a
# batch of at least as many matrices as threads (up to 4), LAPACK where faer cannot take a
# matrix (not finite, or past LAPACK's scaling thresholds).
ORDERS = {"rust-solver": 7, "mid": 40, "large": 300}


@pytest.mark.parametrize("n", ORDERS.values(), ids=ORDERS.keys())
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_reconstruction(install, dtype, lower, n):
    check_reconstruction(install, random_matrix((2, 2, n, n), dtype, np.random.default_rng()),
                         lower)


@pytest.mark.parametrize("structure", ["dense", "block-diagonal", "rank-one", "graded"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_one_matrix_reconstruction(install, dtype, lower, structure):
    # One matrix: a complex one's tridiagonalization is split by column slabs over the pool
    # (order 520, past 2 MiB in complex64 too: its first 455 steps) and its
    # back-transformation by columns (several column blocks per thread), on a pool of two or
    # more threads. Two diagonal blocks leave a zero in the tridiagonal's off-diagonal (a
    # reflector with nothing to reflect), whose phase the split path keeps. After a rank-one
    # matrix's first step the slabs reduce a trailing matrix of rounding errors; a graded one
    # (eigenvalues over 30 orders of magnitude in double, 10 in single precision) has
    # reflectors of every scale.
    n, rng = 520, np.random.default_rng()
    a = random_matrix((n, n), dtype, rng)
    if structure == "block-diagonal":
        a[:230, 230:] = a[230:, :230] = 0
    elif structure == "rank-one":
        v = random_matrix((n, 1), dtype, rng)
        a = v @ np.conj(v.T)
    elif structure == "graded":
        q, _ = np.linalg.qr(a)
        decades = 15 if np.finfo(dtype).bits >= 64 else 5
        a = ((q * np.logspace(-decades, decades, n)) @ np.conj(q.T)).astype(dtype)
    check_reconstruction(install, a, lower)


def check_reconstruction(install, a, lower):
    install()
    dtype, n = a.dtype.type, a.shape[-1]
    v, w = jax.lax.linalg.eigh(a, lower=lower, symmetrize_input=False)
    v, w = np.asarray(v), np.asarray(w)
    # The matrix LAPACK saw: the chosen triangle, mirrored.
    tri = np.tril(a) if lower else np.triu(a)
    diag = np.diagonal(a, axis1=-2, axis2=-1).real.astype(dtype)
    h = tri + np.conj(np.swapaxes(tri, -1, -2))
    h[..., np.arange(n), np.arange(n)] = diag
    vh = np.conj(np.swapaxes(v, -1, -2))
    scale = np.linalg.norm(h, axis=(-2, -1), keepdims=True)
    tol = tolerance(dtype, n)
    assert w.dtype == np.finfo(dtype).dtype
    assert np.all(np.diff(w, axis=-1) >= 0)
    np.testing.assert_allclose((v * w[..., None, :]) @ vh / scale, h / scale, atol=tol)
    np.testing.assert_allclose(vh @ v, np.broadcast_to(np.eye(n), v.shape), atol=tol)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(h), atol=tol * np.max(scale))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_vmap_and_jit(install, dtype):
    a = hermitian((4, 2, 6, 6), dtype, np.random.default_rng())
    fn = jax.jit(lambda x: (tuple(jax.vmap(jax.vmap(jnp.linalg.eigh))(x)),
                            (jax.vmap(jnp.linalg.eigvalsh, in_axes=1)(x),)))
    ref = fn(a)
    install()
    assert TARGET in fn.lower(a).as_text()
    for got, want in zip(fn(a), ref):
        assert_matches(got, want, dtype)


def difficult_matrices(dtype, rng, n=6):
    """Singular, ill-conditioned, NaN and Inf inputs, one per batch entry."""
    v = random_matrix((n, 1), dtype, rng)
    rank_one = v @ np.conj(v.T)
    q, _ = np.linalg.qr(random_matrix((n, n), dtype, rng))
    graded = (q * np.logspace(-15, 15, n)) @ np.conj(q.T)
    with_nan = hermitian((n, n), dtype, rng)
    with_nan[2, 1] = np.nan
    with_inf = hermitian((n, n), dtype, rng)
    with_inf[0, 0] = np.inf
    # Below xSYEVD's scaling threshold, yet normal numbers: XLA runs with denormals flushed.
    tiny = hermitian((n, n), dtype, rng) * (np.finfo(dtype).tiny / np.finfo(dtype).eps)
    # Above xSYEVD's other scaling threshold, yet far from overflow.
    huge = hermitian((n, n), dtype, rng) * np.sqrt(np.finfo(dtype).max) / n
    return np.stack([rank_one, graded, with_nan, with_inf, tiny, huge]).astype(dtype)


@pytest.mark.parametrize("n", ORDERS.values(), ids=ORDERS.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_difficult_inputs_match_stock(install, dtype, n):
    a = difficult_matrices(dtype, np.random.default_rng(), n)
    fn = jax.jit(lambda x: jax.lax.linalg.eigh(x, symmetrize_input=False))
    ref = [np.asarray(r) for r in fn(a)]
    install()
    got = [np.asarray(g) for g in fn(a)]
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        assert np.isfinite(g[[0, 1, 4, 5]]).all()  # the finite inputs; NaN and Inf ones below
    # NaN: jax marks the matrix failed, or LAPACK propagates NaN; the infinite element makes
    # LAPACK scale by zero, so every eigenvalue is NaN.
    assert np.isnan(got[1][2]).any() and np.isnan(got[1][3]).all()
    # The finite ones (rank one, graded over 30 orders of magnitude, tiny, huge), to a tolerance
    # relative to each matrix's norm: their eigenvectors are not unique or not well determined,
    # so these are checked by reconstruction rather than against stock's.
    v, w = got
    for b in (0, 1, 4, 5):
        h = np.tril(a[b]) + np.conj(np.tril(a[b], -1).T)
        norm = np.abs(h).max()  # divided out first: the tiny matrix's products underflow
        tol = tolerance(dtype, n)
        np.testing.assert_allclose(w[b] / norm, ref[1][b] / norm, rtol=0, atol=tol)
        np.testing.assert_allclose((v[b] * (w[b] / norm)) @ np.conj(v[b].T), h / norm, rtol=0,
                                   atol=tol)
        np.testing.assert_allclose(np.conj(v[b].T) @ v[b], np.eye(n), atol=tolerance(dtype, n))


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0), (0, 4, 4), (2, 0, 5, 5)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_zero_size(install, dtype, shape):
    a = np.ones(shape, dtype)
    fn = jax.jit(lambda x: (jnp.linalg.eigh(x), jnp.linalg.eigvalsh(x)))
    ref = fn(a)
    install()
    assert TARGET in fn.lower(a).as_text()
    got = fn(a)
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        assert g.shape == r.shape and g.dtype == r.dtype


def raw_call(x, w_dtype=None, **attrs):
    """Calls the target directly with jaxlib's operand list."""
    w_dtype = w_dtype or np.finfo(x.dtype).dtype
    results = (
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(x.shape[:-1], w_dtype),
        jax.ShapeDtypeStruct(x.shape[:-2], np.int32),
    )
    attrs = {"uplo": np.uint8(ord("L")), "mode": np.uint8(ord("V")), **attrs}
    return jax.ffi.ffi_call(TARGET, results)(x, **attrs)


@pytest.mark.parametrize("n", ORDERS.values(), ids=ORDERS.keys())
@pytest.mark.parametrize("uplo", "LU")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_raw_call_mode_n_gives_eigenvalues(dtype, uplo, n):
    # Only the `uplo` triangle counts: the other is noise. (The target reads the row-major
    # array column-major, as jax's lowering lays it out: its lower triangle is our upper one,
    # that of conj(h), whose eigenvalues are h's.)
    h = hermitian((4, n, n), dtype, np.random.default_rng())
    noise = random_matrix(h.shape, dtype, np.random.default_rng())
    keep = np.triu if uplo == "L" else np.tril
    a = keep(h) + (noise - keep(noise))
    _, w, info = raw_call(a, uplo=np.uint8(ord(uplo)), mode=np.uint8(ord("N")))
    np.testing.assert_array_equal(info, 0)
    # Backward stable: within c n eps ||A||_2 of the exact eigenvalues (Weyl), as LAPACK's.
    norm = np.linalg.norm(h.astype(np.complex128), 2, axis=(-2, -1))[:, None]
    want = np.stack([scipy.linalg.eigvalsh(m) for m in h])
    error = np.abs(np.asarray(w, np.float64) - want)
    assert (error <= tolerance(dtype, n) * norm).all(), (error.max(axis=-1), norm)


@pytest.mark.parametrize(
    "make_call, message",
    [
        (lambda a: raw_call(a.astype(np.int32), w_dtype=np.float64),
         r"operand 0 'x': expected dtype f32, f64"),
        (lambda a: raw_call(a[..., :4]), r"operand 0 'x': expected square matrices"),
        (lambda a: raw_call(a, w_dtype=np.float32), r"result 1 'w': expected dtype f64"),
        (lambda a: raw_call(a, mode=np.uint8(ord("X"))), r"attribute 'mode': expected one of"),
        (lambda a: raw_call(a, uplo=np.int32(ord("L"))),
         r"attribute 'uplo': expected u8 scalar, got s32"),
    ],
    ids=["int32-input", "non-square", "w-dtype", "mode-value", "uplo-type"],
)
def test_raw_call_errors_name_target_and_operand(make_call, message):
    a = hermitian((2, 5, 5), np.float64, np.random.default_rng())
    with pytest.raises(Exception, match=f"{TARGET}.*{message}"):
        jax.block_until_ready(make_call(a))
