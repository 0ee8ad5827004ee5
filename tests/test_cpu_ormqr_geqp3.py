"""ferrax_ormqr / ferrax_geqp3 against stock jax on CPU: jax's pivoted-QR and Q-multiply entry
points, routed to ferrax by ``ferrax.install()``, give what jaxlib's LAPACK targets give (both
call the same LAPACK, so bit for bit, except where geqrf or householder_product is involved,
which ferrax computes in Rust for matrices up to 16×16: compared to tolerance), plus the
identities, edge cases and the handlers' errors.

Stock results are computed before installing ferrax, and with at most one reader of each ormqr
reflector buffer per executable: jaxlib's ormqr target hands its reflector operand to LAPACK,
whose ?orm2r writes 1 over each diagonal element while it applies that reflector, so any other
op reading the buffer at the same time (R, another ormqr) can see the 1. ferrax gives LAPACK a
copy, so the ferrax side runs everything in one executable where several calls share buffers.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from jax import lax
from jax._src.lax.linalg import geqp3, geqrf  # jax.lax.linalg does not export them

jax.config.update("jax_enable_x64", True)

import ferrax  # noqa: E402  (after x64, so that float64 inputs stay float64)
from helpers import assert_matches_stock, assert_same, run  # noqa: E402

TARGETS = ("ferrax_geqp3", "ferrax_ormqr")
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
TOL = {np.float32: 1e-4, np.complex64: 1e-4, np.float64: 1e-12, np.complex128: 1e-12}
BATCHES = [(), (3,), (2, 2)]
SHAPES = [(4, 4), (6, 3), (3, 5)]  # square, tall, wide
P = 2  # the other dimension of the matrices multiplied by Q
SIDES = [(left, transpose) for left in (True, False) for transpose in (False, True)]
# jax.scipy.linalg.qr_multiply variants: name -> (mode, conjugate, pivoting)
QR_MULTIPLY = {
    "left_pivoting": ("left", False, True),
    "right": ("right", False, False),
    "right_conjugate_pivoting": ("right", True, True),
}




def free_columns(a):
    return jnp.zeros(a.shape[:-2] + a.shape[-1:], jnp.int32)


def factorizations(a, jpvt):
    """Every pivoted QR of jax that lowers to geqp3 on CPU (no ormqr)."""
    return {
        "geqp3": geqp3(a, free_columns(a)),
        "geqp3_fixed_columns": geqp3(a, jpvt),
        "scipy_full": jax.scipy.linalg.qr(a, pivoting=True),
        "scipy_economic": jax.scipy.linalg.qr(a, pivoting=True, mode="economic"),
        "lax_full": lax.linalg.qr(a, pivoting=True, full_matrices=True),
        "lax_reduced": lax.linalg.qr(a, pivoting=True, full_matrices=False),
    }


def q_products(reflectors, taus, c_left, c_right):
    """ormqr for each (left, transpose), the i-th with ``reflectors[i]``."""
    return {f"left{left}_transpose{transpose}": lax.linalg.ormqr(
        r, taus, c_left if left else c_right, left=left, transpose=transpose)
        for r, (left, transpose) in zip(reflectors, SIDES)}


def qr_multiplies(matrices, c_k, c_right):
    """The QR_MULTIPLY variants, the i-th of ``matrices[i]``: (c Q or Q c, R[, p])."""
    return {name: jax.scipy.linalg.qr_multiply(
        a, c_k if mode == "left" else c_right, mode=mode, conjugate=conjugate, pivoting=pivoting)
        for a, (name, (mode, conjugate, pivoting)) in zip(matrices, QR_MULTIPLY.items())}


def operands(random_matrix, rng, batch, shape, dtype):
    """a, jpvt (some columns fixed), c_left [m, P], c_right [P, m], c_k [min(m, n), P]."""
    m, n = shape
    jpvt = (rng.random(batch + (n,)) < 0.3).astype(np.int32)
    return (random_matrix(batch + shape, dtype), jpvt, random_matrix(batch + (m, P), dtype),
            random_matrix(batch + (P, m), dtype), random_matrix(batch + (min(m, n), P), dtype))


def everything(a, jpvt, c_left, c_right, c_k):
    """ferrax's side: all in one executable, the reflectors shared by every ormqr."""
    out = factorizations(a, jpvt)
    r, _, taus = out["geqp3"]
    out["ormqr"] = q_products([r] * len(SIDES), taus, c_left, c_right)
    out["qr_multiply"] = qr_multiplies([a] * len(QR_MULTIPLY), c_k, c_right)
    return out


def stock_everything(inputs):
    """Stock jax's side, race-free: three executables, each over all ``inputs`` (a dict of
    ``everything``'s arguments), in which each reflector buffer has one reader."""
    each = lambda fn: lambda inputs: {key: fn(*args) for key, args in inputs.items()}  # noqa: E731
    out = run(each(factorizations), {key: args[:2] for key, args in inputs.items()})
    ormqr_args, multiply_args = {}, {}
    for key, (a, _, c_left, c_right, c_k) in inputs.items():
        r, _, taus = out[key]["geqp3"]
        # Copies are distinct parameters: one per ormqr, or per factorization in qr_multiply.
        ormqr_args[key] = ([r.copy() for _ in SIDES], taus, c_left, c_right)
        multiply_args[key] = ([a.copy() for _ in QR_MULTIPLY], c_k, c_right)
    products = run(each(q_products), ormqr_args)
    # Only qr_multiply's products: its R, read alongside its ormqr, could see the unit diagonal.
    multiplied = run(each(lambda *args: {k: v[0] for k, v in qr_multiplies(*args).items()}),
                     multiply_args)
    for key in inputs:
        out[key]["ormqr"], out[key]["qr_multiply"] = products[key], multiplied[key]
    return out


def check_against_stock(ours, stock, m, n, dtype):
    k = min(m, n)
    products = stock.pop("qr_multiply")
    ours = dict(ours)
    multiplies = ours.pop("qr_multiply")
    assert_matches_stock(ours, stock, TOL[dtype])
    for name, result in multiplies.items():
        assert_matches_stock(result[0], products[name], TOL[dtype])
        if QR_MULTIPLY[name][2]:  # pivoting: R and p are the pivoted QR's
            _, r, p = stock["scipy_economic"]
            assert_matches_stock(result[1:], (r[..., :k, :], p), TOL[dtype])


def check_identities(a, jpvt, c_left, c_right, out, dtype, assert_close):
    """A[:, p] = Q R with Q unitary and R upper triangular (|diag R| non-increasing, fixed
    columns first), and each ormqr equal to the product with the Q that householder_product
    forms from the same reflectors."""
    m, n = a.shape[-2:]
    eye = np.broadcast_to(np.eye(m, dtype=dtype), a.shape[:-2] + (m, m))
    q, r, p = out["lax_full"]
    assert_close(q @ r, np.take_along_axis(a, p[..., None, :], axis=-1), dtype, kind="reconstruct")
    assert_close(q.conj().mT @ q, eye, dtype, kind="reconstruct")
    np.testing.assert_array_equal(np.tril(r, -1), 0)
    diag = np.abs(np.diagonal(r, axis1=-2, axis2=-1))
    assert (np.diff(diag, axis=-1) <= 1e-5 * diag[..., :1]).all()
    np.testing.assert_array_equal(np.sort(p, axis=-1), np.broadcast_to(np.arange(n), p.shape))
    np.testing.assert_array_equal(out["geqp3"][1] - 1, p)
    fixed = out["geqp3_fixed_columns"][1].reshape(-1, n)
    for pivots, flags in zip(fixed, jpvt.reshape(-1, n)):
        np.testing.assert_array_equal(pivots[:flags.sum()], np.flatnonzero(flags) + 1)
    qh = q.conj().mT
    expected = {(True, False): q @ c_left, (True, True): qh @ c_left,
                (False, False): c_right @ q, (False, True): c_right @ qh}
    for (left, transpose), value in expected.items():
        assert_close(out["ormqr"][f"left{left}_transpose{transpose}"], value, dtype,
                     kind="reconstruct", err_msg=f"left={left} transpose={transpose}")


def test_matches_stock_jax(dtype, random_matrix, rng, assert_close):
    # Each dtype gets every batch and every matrix shape, paired differently per dtype so that
    # the dtypes together cover all pairs; one function over the pairs keeps compilations
    # (most of this file's runtime) few.
    d = DTYPES.index(dtype)
    pairs = [(b, SHAPES[(i + d) % len(SHAPES)]) for i, b in enumerate(BATCHES)]
    inputs = {f"{b}-{s}": operands(random_matrix, rng, b, s, dtype) for b, s in pairs}
    stock = stock_everything(inputs)
    ferrax.install()
    ours = run(lambda inputs: {key: everything(*args) for key, args in inputs.items()}, inputs)
    for key, (a, jpvt, c_left, c_right, _) in inputs.items():
        check_against_stock(ours[key], stock[key], *a.shape[-2:], dtype)
        check_identities(a, jpvt, c_left, c_right, ours[key], dtype, assert_close)


def test_hlo_names_ferrax_targets():
    a, c = np.ones((5, 3)), np.ones((5, 2))
    fn = jax.jit(lambda a, c: jax.scipy.linalg.qr_multiply(a, c.T, pivoting=True))
    for x, y in ((a, c), (a.astype(np.complex64), c.astype(np.complex64))):
        assert not any(t in fn.lower(x, y).as_text() for t in TARGETS)
    ferrax.install()
    for x, y in ((a, c), (a.astype(np.complex64), c.astype(np.complex64))):
        hlo = fn.lower(x, y).as_text()
        assert all(t in hlo for t in TARGETS), hlo
        assert "lapack_" not in hlo
    # jnp.linalg.qr has no pivoting and multiplies by no Q: unaffected.
    assert not any(t in jax.jit(jnp.linalg.qr).lower(a).as_text() for t in TARGETS)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_vmap_and_jit(dtype, random_matrix):
    a = random_matrix((3, 2, 5, 4), dtype)
    c = random_matrix((3, 2, 5, 3), dtype)
    twice = lambda f: jax.jit(jax.vmap(jax.vmap(f), in_axes=1, out_axes=1))  # noqa: E731
    pivoted_qr = twice(lambda a: jax.scipy.linalg.qr(a, pivoting=True))

    @twice
    def q_transpose_c(a, c):
        x, _, taus = geqp3(a, free_columns(a))
        return lax.linalg.ormqr(x, taus, c, left=True, transpose=True)

    stock = (run(pivoted_qr, a), run(q_transpose_c, a, c))
    ferrax.install()
    ours = (run(pivoted_qr, a), run(q_transpose_c, a, c))
    assert_matches_stock(ours, stock, TOL[dtype])
    assert "ferrax_geqp3" in pivoted_qr.lower(a).as_text()
    assert all(t in q_transpose_c.lower(a, c).as_text() for t in TARGETS)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=lambda d: np.dtype(d).name)
def test_large_batch_split_across_threads(dtype, random_matrix):
    """Enough matrices for several thread-pool chunks, each with its own workspace."""
    a, c = random_matrix((400, 12, 8), dtype), random_matrix((400, 3, 12), dtype)
    fn = lambda a: geqp3(a, free_columns(a))  # noqa: E731
    multiply = lambda r, taus, c: lax.linalg.ormqr(r, taus, c, left=False)  # noqa: E731
    stock = run(fn, a)
    stock += (run(multiply, stock[0], stock[2], c),)
    ferrax.install()
    ours = run(fn, a)
    ours += (run(multiply, ours[0], ours[2], c),)
    # Random columns have distinct norms: the pivots are LAPACK's (SciPy's ?geqp3, called
    # directly), the rest within tolerance of stock's (ferrax's Rust geqp3 and OpenBLAS's
    # round differently; jaxlib's own arithmetic is no fixed reference).
    want = np.stack([scipy.linalg.qr(x, pivoting=True, mode="r")[1] for x in a]) + 1
    np.testing.assert_array_equal(ours[1], want)
    assert_matches_stock([ours[0], ours[2], ours[3]], [stock[0], stock[2], stock[3]], TOL[dtype])


def special_inputs(random_matrix, rng, dtype):
    """Rank one, ill-conditioned, two equal columns, NaN and Inf matrices (5 x 4 each)."""
    a = random_matrix((6, 5, 4), dtype)
    a[0] = random_matrix((5, 1), dtype) @ random_matrix((1, 4), dtype)
    a[1] = a[1] * np.logspace(0, -30, 4)
    a[2, :, 3] = a[2, :, 0]
    a[3, rng.integers(5), rng.integers(4)] = np.nan
    a[4, rng.integers(5), rng.integers(4)] = np.inf
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_singular_ill_conditioned_and_nan_inputs(dtype, random_matrix, rng, assert_close):
    a = special_inputs(random_matrix, rng, dtype)
    c = random_matrix((6, 5, P), dtype)
    fn = lambda a: (geqp3(a, free_columns(a)), jax.scipy.linalg.qr(a, pivoting=True))  # noqa: E731
    multiply = lambda r, taus, c: lax.linalg.ormqr(r, taus, c)  # noqa: E731
    stock = run(fn, a)
    stock += (run(multiply, stock[0][0], stock[0][2], c),)
    ferrax.install()
    ours = run(fn, a)
    ours += (run(multiply, ours[0][0], ours[0][2], c),)
    # Which column a rank-deficient matrix pivots on among rounding-level leftovers is the
    # arithmetic's choice: the rank-one and equal-column matrices (0, 2) are checked for a
    # valid pivoted QR, the others (distinct column norms) against stock, pivots included.
    pick = lambda out, rows: jax.tree.map(lambda x: x[rows], out)  # noqa: E731
    others = [1, 3, 4, 5]
    assert_matches_stock(pick(ours, others), pick(stock, others), TOL[dtype],
                         nonfinite_inputs=(1, 2))
    q, r, p = ours[1]
    for b in (0, 2):
        assert_close(q[b] @ r[b], a[b][:, p[b]], dtype, kind="reconstruct")
        assert_close(q[b].conj().T @ q[b], np.eye(5, dtype=dtype), dtype, kind="reconstruct")
        diag = np.abs(np.diagonal(r[b]))
        assert (np.diff(diag) <= 1e-5 * diag[0]).all(), diag
        np.testing.assert_array_equal(ours[0][1][b] - 1, p[b])  # geqp3's pivots, 1-based
    for leaf in jax.tree.leaves(ours):
        assert np.isfinite(leaf[:3]).all() and np.isfinite(leaf[5]).all()
    r, p, _ = ours[0]
    np.testing.assert_array_equal(np.sort(p, axis=-1), np.broadcast_to(np.arange(1, 5), p.shape))
    assert abs(r[0, 1, 1]) < 1e-5 * abs(r[0, 0, 0])  # rank one: R's second pivot vanishes
    assert np.isnan(r[3]).any()  # LAPACK's own NaN propagation, no info to act on


# Shapes that reach the targets without an element (jax.lax.linalg.qr lowers m = 0 or n = 0
# itself). m = 0 with n > 0 is left out: XLA's CPU compiler dies with SIGFPE on such a geqp3
# (EmitTiledFusionKernel), stock jax as much as ferrax; see test_raw_geqp3_without_rows.
GEQP3_ZERO = [(3, 0), (0, 0), (0, 3, 2), (2, 0, 4, 3)]
ORMQR_ZERO = [  # (a, k, c, left)
    ((3, 2), 2, (3, 0), True),  # c without columns
    ((3, 2), 2, (0, 3), False),  # c without rows
    ((3, 0), 0, (3, 2), True),  # no reflectors: Q = I
    ((4, 3), 0, (2, 4), False),  # no taus: Q = I
    ((0, 3, 2), 2, (0, 3, 4), True),  # batch 0
]


def test_zero_size(random_matrix):
    matrices = [random_matrix(shape, np.float64) for shape in GEQP3_ZERO]
    products = [(random_matrix(a, np.complex64), random_matrix(a[:-2] + (k,), np.complex64),
                 random_matrix(c, np.complex64)) for a, k, c, _ in ORMQR_ZERO]

    def fn(matrices, products):
        return ([geqp3(a, free_columns(a)) for a in matrices],
                [lax.linalg.ormqr(*args, left=case[3], transpose=True)
                 for args, case in zip(products, ORMQR_ZERO)])

    stock = run(fn, matrices, products)
    ferrax.install()
    hlo = jax.jit(fn).lower(matrices, products).as_text()
    assert hlo.count("ferrax_geqp3") >= len(GEQP3_ZERO) and "ferrax_ormqr" in hlo
    ours = run(fn, matrices, products)
    assert_same(ours, stock)
    for result, (_, _, c) in zip(ours[1], products):
        np.testing.assert_array_equal(result, c)  # nothing to apply


# --- the raw targets ---------------------------------------------------------------------


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def raw_call(target, results, *args, aliases=None, **attrs):
    ferrax.register()
    call = jax.ffi.ffi_call(target, results, input_output_aliases=aliases)
    return jax.tree.map(np.asarray, jax.jit(lambda *a: call(*a, **attrs))(*args))


def test_raw_geqp3_without_rows():
    """m = 0 (row-major here, so XLA needs no relayout): LAPACK only numbers the columns,
    fixed ones first, called with lda = 1 and a workspace large enough for that."""
    a = np.ones((2, 0, 4), np.complex128)
    jpvt = np.array([[0, 0, 0, 0], [0, 1, 0, 1]], np.int32)
    results = [sds(a.shape, a.dtype), sds(jpvt.shape, np.int32), sds((2, 0), a.dtype)]
    x, p, taus = raw_call("ferrax_geqp3", results, a, jpvt, aliases={0: 0, 1: 1})
    assert x.shape == a.shape and taus.shape == (2, 0)
    np.testing.assert_array_equal(p, [[1, 2, 3, 4], [2, 4, 3, 1]])


def error_cases(random_matrix):
    a = random_matrix((4, 3), np.float32)
    taus = random_matrix((3,), np.float32)
    c = random_matrix((4, 2), np.float32)
    jpvt = np.zeros(3, np.int32)
    ints = np.ones((4, 3), np.int32)
    geqp3_out = [sds((4, 3), np.float32), sds((3,), np.int32), sds((3,), np.float32)]
    ormqr_out = [sds((4, 2), np.float32)]
    ok = {"left": True, "transpose": False}
    return [
        ("ferrax_geqp3", [sds((4, 3), np.int32), sds((3,), np.int32), sds((3,), np.int32)],
         (ints, jpvt), {},
         r"ferrax_geqp3: operand 0 'x': expected dtype f32, f64, c64 or c128, got s32"),
        ("ferrax_geqp3", geqp3_out, (a, jpvt.astype(np.int64)), {},
         r"ferrax_geqp3: operand 1 'jpvt': expected dtype s32, got s64"),
        ("ferrax_geqp3", geqp3_out, (a, np.zeros(4, np.int32)), {},
         r"ferrax_geqp3: operand 1 'jpvt': expected shape \[3\], got shape \[4\]"),
        ("ferrax_geqp3", geqp3_out[:2] + [sds((4,), np.float32)], (a, jpvt), {},
         r"ferrax_geqp3: result 2 'tau': expected shape \[3\], got shape \[4\]"),
        ("ferrax_geqp3", geqp3_out, (a, jpvt), {"left": True},
         r"ferrax_geqp3: unexpected attribute 'left'"),
        ("ferrax_ormqr", ormqr_out, (ints, taus, c), ok,
         r"ferrax_ormqr: operand 0 'a': expected dtype f32, f64, c64 or c128, got s32"),
        ("ferrax_ormqr", ormqr_out, (a, taus, c.astype(np.float64)), ok,
         r"ferrax_ormqr: operand 2 'c': expected dtype f32, got f64"),
        ("ferrax_ormqr", ormqr_out, (a, taus.astype(np.complex64), c), ok,
         r"ferrax_ormqr: operand 1 'tau': expected dtype f32, got c64"),
        ("ferrax_ormqr", ormqr_out, (a, taus, c), {"left": np.uint8(1), "transpose": False},
         r"ferrax_ormqr: attribute 'left': expected pred scalar, got u8 scalar"),
        ("ferrax_ormqr", ormqr_out, (a, taus, c), {"left": True, "transpose": "T"},
         r"ferrax_ormqr: attribute 'transpose': expected pred scalar, got string"),
        ("ferrax_ormqr", ormqr_out, (a, taus, c), {"left": True},
         r"ferrax_ormqr: missing attribute 'transpose' \(expected pred scalar\)"),
        ("ferrax_ormqr", ormqr_out, (a, taus, c), {"left": False, "transpose": False},
         r"ferrax_ormqr: operand 2 'c': expected shape \[\] \+ \[m, 4\] \(left = false"),
        ("ferrax_ormqr", ormqr_out, (a, random_matrix((4,), np.float32), c), ok,
         r"ferrax_ormqr: operand 1 'tau': expected shape \[\] \+ \[k\] with k <= 3, "
         r"got shape \[4\]"),
        ("ferrax_ormqr", [sds((4, 3), np.float32)], (a, taus, c), ok,
         r"ferrax_ormqr: result 0 'c_out': expected shape \[4, 2\]"),
    ]


def test_raw_call_errors_name_target_and_operand(random_matrix):
    for target, results, args, attrs, message in error_cases(random_matrix):
        with pytest.raises(Exception, match=message):
            raw_call(target, results, *args, **attrs)


@pytest.mark.parametrize("m", [40, 70], ids=["unblocked-orm2r", "blocked"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_ormqr_mid_sizes_match_stock(dtype, m, random_matrix):
    # Up to 64 rows ferrax gives ?ormqr the minimum workspace (?orm2r, one reflector at a
    # time); above, the optimal one (blocks of reflectors). Both against stock's blocked path.
    a = random_matrix((2, m, m), dtype)
    c_left, c_right = random_matrix((2, m, P), dtype), random_matrix((2, P, m), dtype)
    r, taus = run(geqrf, a)  # one factorization for both sides
    args = ([r.copy() for _ in SIDES], taus, c_left, c_right)
    stock = run(q_products, *args)
    ferrax.install()
    ours = run(q_products, *args)
    assert "ferrax_ormqr" in jax.jit(q_products).lower(*args).as_text()
    assert_matches_stock(ours, stock, 10 * TOL[dtype])
