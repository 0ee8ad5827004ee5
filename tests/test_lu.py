"""ferrax.linalg.lu / getrf: valid partial-pivoting factorizations (P A = L U within the
backward-error bound, |L| <= 1), pivots of regular matrices as SciPy's LAPACK chooses them, the
packed factors near stock jax.lax.linalg.lu's (ferrax not installed)."""

import json

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import ferrax
from helpers import assert_valid_lu, gamma, lapack_pivots, permutation_of_pivots

MATRIX_SHAPES = {"square": (5, 5), "tall": (6, 4), "wide": (4, 6)}
BATCHES = [(), (3,), (2, 3)]


def _stock_lu(a):
    assert not ferrax.installed()
    return [np.asarray(x) for x in jax.lax.linalg.lu(a)]


def _check_against_stock(a, got, stock, dtype):
    """``got`` (lu, pivots, permutation) is a valid partial-pivoting LU of ``a`` whose
    permutation is its pivots'; on every regular matrix (per LAPACK's info) its pivots are
    LAPACK's own (SciPy's, called directly) and its factors stock jax's, to a tolerance."""
    lu, pivots, perm = map(np.asarray, got)
    m = a.shape[-2]
    for name, x, y in (("pivots", pivots, stock[1]), ("permutation", perm, stock[2])):
        assert x.dtype == y.dtype == np.int32 and x.shape == y.shape, (name, x.dtype, y.dtype)
    np.testing.assert_array_equal(perm, permutation_of_pivots(pivots, m))
    assert_valid_lu(a, lu, perm)
    want, info = lapack_pivots(a)
    regular = info == 0
    np.testing.assert_array_equal(pivots[regular], want[regular], err_msg="pivots")
    # With the same pivots, L and U move by at most about kappa times the backward error
    # gamma_k (Higham's Theorem 9.15), kappa that of P A's leading k x k block (L11 U11); x4
    # for both sides and the bound's own slack; relative to each matrix's largest entry of
    # L\U (O(1) here).
    assert lu.shape == stock[0].shape and lu.dtype == stock[0].dtype
    k = min(a.shape[-2:])
    permuted = np.take_along_axis(a, perm[..., :, None], axis=-2)[..., :k, :k]
    wide = np.result_type(a.dtype, np.float64)
    for index in np.ndindex(regular.shape):
        if not regular[index]:
            continue
        cond = np.linalg.cond(permuted[index].astype(wide)) if k else 1.0
        tol = 4 * gamma(max(k, 1), dtype) * max(cond, 1)
        scale = max(1.0, float(np.abs(stock[0][index]).max(initial=0)))
        np.testing.assert_allclose(lu[index], stock[0][index], rtol=0, atol=tol * scale,
                                   err_msg=f"packed LU {index}")


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("kind", MATRIX_SHAPES)
def test_lu_matches_stock(kind, batch, dtype, random_matrix):
    a = random_matrix(batch + MATRIX_SHAPES[kind], dtype)
    _check_against_stock(a, ferrax.linalg.lu(a), _stock_lu(a), dtype)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("kind", MATRIX_SHAPES)
def test_getrf_matches_stock(kind, batch, dtype, random_matrix, assert_close):
    m, n = MATRIX_SHAPES[kind]
    a = random_matrix(batch + (m, n), dtype)
    stock = _stock_lu(a)
    lu, ipiv, info = map(np.asarray, ferrax.linalg.getrf(a))
    assert ipiv.shape == batch + (min(m, n),) and ipiv.dtype == np.int32
    assert info.shape == batch and info.dtype == np.int32
    assert_close(lu, stock[0], dtype)
    np.testing.assert_array_equal(ipiv - 1, lapack_pivots(a)[0])  # LAPACK's 1-based pivots
    assert ipiv.min() >= 1 and ipiv.max() <= m
    np.testing.assert_array_equal(info, np.zeros(batch, np.int32))


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("kind", MATRIX_SHAPES)
def test_lu_reconstructs_input(kind, batch, dtype, random_matrix, assert_close):
    m, n = MATRIX_SHAPES[kind]
    k = min(m, n)
    a = random_matrix(batch + (m, n), dtype)
    lu, _, perm = map(np.asarray, ferrax.linalg.lu(a))
    lower = np.tril(lu[..., :, :k], -1) + np.eye(m, k, dtype=lu.dtype)
    upper = np.triu(lu[..., :k, :])
    np.testing.assert_array_equal(np.sort(perm, axis=-1), np.broadcast_to(np.arange(m), perm.shape))
    permuted = np.take_along_axis(a, perm[..., :, None], axis=-2)
    assert_close((lower @ upper).astype(dtype), permuted, dtype, kind="reconstruct")
    # Partial pivoting: |L| <= 1 (complex LAPACK pivots on |re| + |im|, so |L| <= sqrt(2)).
    bound = np.sqrt(2) if np.dtype(dtype).kind == "c" else 1.0
    assert np.abs(lower).max() <= bound * (1 + 1e-6)


@pytest.mark.parametrize("defect", ["zero_column", "zero_row"])
def test_singular_matrix(defect, dtype, random_matrix):
    a = random_matrix((2, 5, 5), dtype)
    if defect == "zero_column":
        a[0, :, 2] = 0
        a[1, :, 0] = 0
    else:
        a[0, 3] = 0
        a[1, 0] = 0
    stock = _stock_lu(a)
    lu, ipiv, info = map(np.asarray, ferrax.linalg.getrf(a))
    assert (info > 0).all(), info
    # A zero column j makes U[j, j] the first exact zero; a zero row is never chosen as pivot
    # while another row is left, so only the last U[n-1, n-1] is zero.
    np.testing.assert_array_equal(info, [3, 1] if defect == "zero_column" else [5, 5])
    # Which row a singular matrix pivots on past its defect is the arithmetic's choice among
    # rounding-level leftovers: the pivots are checked for validity, not against a reference.
    assert ((ipiv - 1 >= np.arange(5)) & (ipiv - 1 < 5)).all(), ipiv
    assert_valid_lu(a, lu, permutation_of_pivots(ipiv - 1, 5))
    got = ferrax.linalg.lu(a)
    _check_against_stock(a, got, stock, dtype)
    np.testing.assert_array_equal(np.asarray(got[1]), ipiv - 1)
    assert not np.isnan(np.asarray(got[0])).any()  # info > 0 is not an error
    for b in range(2):
        assert np.min(np.abs(np.diagonal(np.asarray(got[0])[b]))) == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_input_matches_stock(bad, dtype, random_matrix):
    a = random_matrix((3, 5, 5), dtype)
    a[0, 1, 2] = bad
    a[1, 4, 4] = bad
    stock = _stock_lu(a)
    got = [np.asarray(x) for x in ferrax.linalg.lu(a)]
    assert np.isnan(stock[0]).any() or np.isinf(stock[0]).any()
    # Small matrices are factored by ferrax's right-looking xGETF2, OpenBLAS's getf2 is
    # left-looking: where an Inf spreads into NaN depends on that order, so the matrix that
    # turns non-finite must do so in both, with the same pivots; the finite one matches.
    # Which row a NaN column pivots on is the arithmetic's (and memory alignment's) choice:
    # those pivots need only be valid swaps, and the permutation theirs.
    for b in range(3):
        assert np.isfinite(got[0][b]).all() == np.isfinite(stock[0][b]).all(), b
    assert ((got[1] >= np.arange(5)) & (got[1] < 5)).all(), got[1]
    np.testing.assert_array_equal(got[2], permutation_of_pivots(got[1], 5))
    _check_against_stock(a[2:], [x[2:] for x in got], [x[2:] for x in stock], dtype)
    # The untouched matrix is unaffected.
    assert np.isfinite(got[0][2]).all()


_EMPTY_SCRIPT = """
    import json, sys
    import numpy as np, jax
    import ferrax
    shape, fn, mode = tuple(json.loads(sys.argv[1])), sys.argv[2], sys.argv[3]
    a = np.ones(shape, np.float64)
    f = {"lu": ferrax.linalg.lu, "getrf": ferrax.linalg.getrf}[fn]
    out = (jax.jit(f) if mode == "jit" else f)(a)
    print("RESULT" + json.dumps([[list(np.shape(x)), str(np.asarray(x).dtype),
                                  np.asarray(x).tolist()] for x in out]))  # as _describe
"""

# Zero-element getrf results kill the process (SIGFPE in XLA's CPU emitter) where stock jax
# returns; jit(ferrax.linalg.lu) happens to avoid it (its jnp.where consumes the column-major
# result inside the same computation).


def _run_empty(run_python, shape, fn, mode):
    proc = run_python(_EMPTY_SCRIPT, json.dumps(shape), fn, mode, check=False, timeout=120)
    assert proc.returncode == 0, f"{fn}/{mode}: exit status {proc.returncode}: {proc.stderr[-2000:]}"
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


EMPTY_SHAPES = [(3, 0, 0), (0, 4, 4), (2, 0, 3), (2, 3, 0)]


def _describe(outputs):
    return [[list(np.shape(x)), str(np.asarray(x).dtype), np.asarray(x).tolist()] for x in outputs]


@pytest.mark.parametrize("fn, mode", [("lu", "jit"), ("lu", "eager"), ("getrf", "jit")])
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_empty_matrices(shape, fn, mode, run_python):
    *batch, m, n = shape
    k = min(m, n)
    stock = _describe(_stock_lu(np.ones(shape)))
    assert [x[:2] for x in stock] == [[list(shape), "float64"], [batch + [k], "int32"],
                                      [batch + [m], "int32"]]
    result = _run_empty(run_python, shape, fn, mode)
    if fn == "lu":
        assert result == stock
    else:
        lu, ipiv, info = result
        assert lu == stock[0]
        assert ipiv[:2] == [batch + [k], "int32"]
        assert info[:2] == [batch, "int32"]
        assert np.all(np.asarray(info[2]) == 0)


def test_jit_matches_stock(dtype, random_matrix, assert_close):
    a = random_matrix((2, 6, 6), dtype)
    stock = [np.asarray(x) for x in jax.jit(jax.lax.linalg.lu)(a)]
    _check_against_stock(a, jax.jit(ferrax.linalg.lu)(a), stock, dtype)
    lu, ipiv, info = jax.jit(ferrax.linalg.getrf)(a)
    assert_close(lu, stock[0], dtype)
    np.testing.assert_array_equal(np.asarray(ipiv) - 1, lapack_pivots(a)[0])
    np.testing.assert_array_equal(info, [0, 0])


def test_jit_inside_larger_function(dtype, random_matrix, assert_close):
    a = random_matrix((5, 5), dtype)

    def f(lu_fn, x):
        lu, _, perm = lu_fn(2 * x + 1)
        return jnp.sum(jnp.abs(jnp.diagonal(lu))), perm

    got, stock = jax.jit(lambda x: f(ferrax.linalg.lu, x))(a), jax.jit(lambda x: f(jax.lax.linalg.lu, x))(a)
    assert_close(got[0], stock[0], dtype)
    np.testing.assert_array_equal(got[1], permutation_of_pivots(lapack_pivots(2 * a + 1)[0], 5))


@pytest.mark.parametrize("in_axes", [0, 1, 2])
def test_vmap_matches_stock(in_axes, dtype, random_matrix, assert_close):
    a = random_matrix((4, 3, 4) if in_axes == 1 else (3, 4, 4) if in_axes == 0 else (4, 4, 3), dtype)
    stock = [np.asarray(x) for x in jax.vmap(jax.lax.linalg.lu, in_axes=in_axes)(a)]
    slices = np.moveaxis(a, in_axes, 0)
    _check_against_stock(slices, jax.vmap(ferrax.linalg.lu, in_axes=in_axes)(a), stock, dtype)
    _check_against_stock(slices, jax.jit(jax.vmap(ferrax.linalg.lu, in_axes=in_axes))(a), stock,
                         dtype)
    # And per matrix, outside vmap.
    perms = permutation_of_pivots(lapack_pivots(slices)[0], slices.shape[-2])
    for i, s in enumerate(slices):
        single = ferrax.linalg.lu(s)
        assert_close(single[0], stock[0][i], dtype)
        np.testing.assert_array_equal(single[2], perms[i])


def test_nested_vmap_of_getrf(dtype, random_matrix, assert_close):
    a = random_matrix((2, 5, 3, 5), dtype)  # matrices are a[i, :, j, :]
    f = jax.vmap(jax.vmap(ferrax.linalg.getrf, in_axes=1), in_axes=0)
    lu, ipiv, info = map(np.asarray, f(a))
    stock = [np.asarray(x) for x in jax.vmap(jax.vmap(jax.lax.linalg.lu, in_axes=1))(a)]
    assert lu.shape == (2, 3, 5, 5) and ipiv.shape == (2, 3, 5) and info.shape == (2, 3)
    assert_close(lu, stock[0], dtype)
    np.testing.assert_array_equal(ipiv - 1, lapack_pivots(np.moveaxis(a, 2, 1))[0])
    np.testing.assert_array_equal(info, np.zeros((2, 3)))


GETRF_OUTS = lambda a: (jax.ShapeDtypeStruct(a.shape, a.dtype),
                        jax.ShapeDtypeStruct(a.shape[:-2] + (min(a.shape[-2:]),), np.int32),
                        jax.ShapeDtypeStruct(a.shape[:-2], np.int32))


@pytest.mark.parametrize("shape", [(9, 5, 5), (3, 4, 7), (3, 7, 4), (2, 16, 16), (11, 15, 15)],
                         ids=str)
def test_row_major_getrf_is_getrf_transposed(shape, dtype, random_matrix):
    """Up to the Rust lanes' sizes, ferrax_getrf_row_major on row-major matrices gives, bit for
    bit, the row-major image of ferrax_getrf's column-major result (Rust lanes, one-matrix
    tail and LAPACK paths), with a singular matrix in the batch, and a NaN where Rust factors
    (OpenBLAS's pivot search over a column with a NaN depends on the column's memory
    alignment). Past them the layouts take different algorithms (row-major matrices where
    they lie, column-major ones by faer), each checked against LAPACK below."""
    *batch, m, n = shape
    a = random_matrix(shape, dtype)
    a.reshape(-1, m, n)[0, :, 1] = 0  # an exactly zero column: info > 0
    if max(m, n) <= 16:
        a.reshape(-1, m, n)[-1, -1, 0] = np.nan
    # ferrax_getrf reads its buffer as column-major [..., m, n]: the transposes' C-order bytes.
    column_major = np.swapaxes(a, -1, -2).copy().reshape(shape)
    col = jax.ffi.ffi_call("ferrax_getrf", GETRF_OUTS(a))(column_major)
    row = jax.ffi.ffi_call("ferrax_getrf_row_major", GETRF_OUTS(a))(a)
    col_lu = np.swapaxes(np.asarray(col[0]).reshape(*batch, n, m), -1, -2)
    np.testing.assert_array_equal(np.asarray(row[0]), col_lu)
    for x, y in zip(row[1:], col[1:]):
        np.testing.assert_array_equal(x, y)
    assert np.asarray(row[2]).reshape(-1)[0] > 0


def _getrf_in_layout(target, a):
    """``target`` on the row-major matrices ``a``: ferrax_getrf reads its buffer column-major,
    so it gets the transposes' C-order bytes. The packed LU (row-major), 0-based pivots, info."""
    *batch, m, n = a.shape
    if target == "ferrax_getrf":
        operand = np.swapaxes(a, -1, -2).copy().reshape(a.shape)
        got = jax.ffi.ffi_call(target, GETRF_OUTS(a))(operand)
        lu = np.swapaxes(np.array(got[0]).reshape(*batch, n, m), -1, -2)
    else:
        got = jax.ffi.ffi_call(target, GETRF_OUTS(a))(a)
        lu = np.array(got[0])
    return lu, np.asarray(got[1]) - 1, np.asarray(got[2])


# (4, 300, 20): tall, 300 rows but 20 pivots, a batch: a task per matrix.
@pytest.mark.parametrize("shape", [(9, 17, 17), (6, 25, 25), (5, 33, 33), (4, 40, 33), (4, 33, 40),
                                   (5, 100, 100), (4, 256, 256), (4, 300, 20)], ids=str)
@pytest.mark.parametrize("target", ["ferrax_getrf", "ferrax_getrf_row_major"])
def test_mid_sizes_against_lapack(shape, target, dtype, random_matrix):
    """Past the Rust lanes and up to 256: row-major matrices where they lie (LAPACK's recursive
    getrf2, faer's products, an unblocked base on whole rows), column-major ones by faer's
    recursive LU with LAPACK's pivots made from its row order; neither blocking, so neither
    rounding, is OpenBLAS's. A matrix with a zero or NaN pivot, in the first panel or deep in
    the recursion, is factored by LAPACK instead (both multiply by the pivot's reciprocal).
    (Complex ones failed here on XLA's threads, which flush subnormals, until faer ran
    without.) Against SciPy's getrf called directly and by reconstruction, in both layouts,
    with zero columns, a repeated row and a NaN in the batch. (Subnormal pivots, LAPACK's
    other case, read as zero on XLA's threads, which flush denormals.)"""
    m, n = shape[-2:]
    k = min(m, n)
    a = random_matrix(shape, dtype)
    a[0, :, 3] = 0  # U[3, 3] exactly zero: info 4, L's column 3 left unscaled (zero)
    a[1, m - 1, :] = a[1, 0, :]  # singular by a rounding-level last pivot (square)
    a[2, 4, 5] = np.nan
    a[3, :, k - 2] = 0  # the same, in the recursion's last panel
    lu, pivots, info = _getrf_in_layout(target, a)
    want, want_info = lapack_pivots(a)
    assert info[0] == want_info[0] == 4
    assert (lu[0, 4:, 3] == 0).all() and lu[0, 3, 3] == 0
    assert info[3] == want_info[3] == k - 1
    assert (lu[3, k - 1:, k - 2] == 0).all() and lu[3, k - 2, k - 2] == 0
    np.testing.assert_array_equal(info[4:], 0)
    assert ((pivots >= np.arange(k)) & (pivots < m)).all(), pivots
    perm = permutation_of_pivots(pivots, m)
    finite = [b for b in range(shape[0]) if b != 2]
    assert np.isfinite(lu[finite]).all()
    assert np.isnan(lu[2]).any()
    assert_valid_lu(a[finite], lu[finite], perm[finite])
    # Regular matrices' pivots are LAPACK's. In single precision a near tie between two
    # candidates can fall either way with another blocking's rounding: validity only there.
    regular = [0, 3, *range(4, shape[0])]
    if np.finfo(dtype).eps < 1e-10:
        np.testing.assert_array_equal(pivots[regular], want[regular])


@pytest.mark.parametrize("defect", [None, 3, 130, "nan"], ids=str)
@pytest.mark.parametrize("shape", [(2, 300, 300), (1, 290, 270), (1, 270, 290), (1, 160, 160)],
                         ids=str)
@pytest.mark.parametrize("target", ["ferrax_getrf", "ferrax_getrf_row_major"])
def test_one_matrix_over_the_threads(shape, target, defect, dtype, random_matrix):
    """From 128 with fewer matrices than threads (past 2048 pivots with any), each matrix in
    place over the pool (2×300×300: a task each where the pool has two threads), by panels of 64 columns: faer's LU of a panel, then the other columns' swaps, solve
    and update in column blocks. A zero column (U's pivot exactly zero there: info, the column
    of L unscaled) in the first or third panel, or a NaN, hands the trailing matrix from that
    panel on to LAPACK. Against SciPy's getrf called directly and by reconstruction, square,
    tall and wide, in both layouts."""
    m, n = shape[-2:]
    a = random_matrix(shape, dtype)
    if defect == "nan":
        a[0, 4, 5] = np.nan
    elif defect is not None:
        a[0, :, defect] = 0
    lu, pivots, info = _getrf_in_layout(target, a)
    want, want_info = lapack_pivots(a)
    if defect == "nan":
        assert np.isnan(lu[0]).any()
        finite = list(range(1, shape[0]))
    else:
        np.testing.assert_array_equal(info, want_info)
        if defect is not None:
            assert info[0] == defect + 1
            assert (lu[0, defect:, defect] == 0).all()
        finite = list(range(shape[0]))
    assert np.isfinite(lu[finite]).all()
    assert ((pivots >= np.arange(min(m, n))) & (pivots < m)).all(), pivots
    assert_valid_lu(a[finite], lu[finite], permutation_of_pivots(pivots, m)[finite])
    if np.finfo(dtype).eps < 1e-10:  # single precision: near ties may fall either way
        np.testing.assert_array_equal(pivots[finite], want[finite])


@pytest.mark.parametrize("n", [1, 5, 16, 17, 64, 128, 129])
def test_installed_lu_matches_stock(n, dtype, random_matrix, installed):
    """jax.lax.linalg.lu under install(): the row-major getrf at every order, square, tall and
    wide, two batch dimensions, a singular member."""
    for m in {n, n + 3, max(n - 2, 1)}:
        a = random_matrix((2, 3, m, n), dtype)
        a[1, 2, :, 0] = 0
        text = jax.jit(jax.lax.linalg.lu).lower(a).as_text()
        assert "ferrax_getrf_row_major" in text, (m, n)
        got = [np.asarray(x) for x in jax.lax.linalg.lu(a)]
        ferrax.uninstall()
        try:
            stock = [np.asarray(x) for x in jax.lax.linalg.lu(a)]
        finally:
            ferrax.install()
        _check_against_stock(a, got, stock, dtype)
