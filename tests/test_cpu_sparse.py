"""ferrax_csr_sparse_dense (jaxlib's cpu_csr_sparse_dense_ffi contract) through ferrax.install():
BCSR @ dense against the exact product over the stored entries (extended precision) within the
inner products' rounding-error bound (integers: exactly, wrapping), the dense product, HLO,
jit / vmap / grad, special values, zero sizes, products large enough to split across the thread
pool, and the raw target (shaped as jaxlib's) and its error messages."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from jax._src.interpreters import mlir
from jax.experimental import sparse
from jax.experimental.sparse import _lowerings

import ferrax
from helpers import (assert_within_bound, extended, gamma, sparse_product_bound,
                     sparse_product_reference)

TARGET = "ferrax_csr_sparse_dense"
STOCK_TARGET = "cpu_csr_sparse_dense_ffi"
DATA_DTYPES = [np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128]
INDEX_DTYPES = [np.int32, np.int64]
SHAPES = [(5, 5), (9, 4), (3, 7)]  # square, tall, wide
name = lambda d: np.dtype(d).name  # noqa: E731


@pytest.fixture
def random_sparse(rng, random_matrix):
    """``random_sparse(shape, dtype, density=0.4)``: a dense array with about ``1 - density``
    structural zeros; the other entries are random and never zero."""

    def make(shape, dtype, density=0.4):
        dtype = np.dtype(dtype)
        if dtype.kind == "i":
            values = rng.integers(1, 10, shape) * rng.choice([-1, 1], shape)
        else:
            values = random_matrix(shape, dtype)
        return np.where(rng.random(shape) < density, values, 0).astype(dtype)

    return make


@pytest.fixture
def random_dense(rng, random_matrix):
    """``random_dense(shape, dtype)``: never zero, integers included."""

    def make(shape, dtype):
        if np.dtype(dtype).kind == "i":
            return (rng.integers(1, 10, shape) * rng.choice([-1, 1], shape)).astype(dtype)
        return random_matrix(shape, dtype)

    return make


def csr_arrays(a, index_dtype=np.int32, nse=None):
    """(data, indices, indptr) of dense ``a``, padded to ``nse`` entries as jax pads BCSR."""
    csr = scipy.sparse.csr_matrix(a)
    pad = (nse or csr.nnz) - csr.nnz
    data = np.concatenate([csr.data, np.zeros(pad, a.dtype)])
    indices = np.concatenate([csr.indices, np.full(pad, a.shape[1])]).astype(index_dtype)
    return data, indices, csr.indptr.astype(index_dtype)


def bcsr(a, index_dtype=np.int32, nse=None):
    # Not BCSR.fromdense: eager, it compiles dozens of ops (seconds after each install).
    return sparse.BCSR(csr_arrays(a, index_dtype, nse), shape=a.shape)


def stock_then_ferrax(fn, *args):
    """``fn(*args)`` on stock jax, then with ferrax installed (left installed)."""
    ferrax.uninstall()
    expected = jax.tree.map(np.asarray, fn(*args))
    ferrax.install()
    got = jax.tree.map(np.asarray, fn(*args))
    return expected, got


def assert_identical(expected, got):
    """Same shapes and dtypes, and the same values bit for bit (NaN where stock has NaN): only
    for results both sides compute with the same XLA ops, no sparse target involved."""
    for e, g in zip(jax.tree.leaves(expected), jax.tree.leaves(got), strict=True):
        assert e.shape == g.shape and e.dtype == g.dtype
        np.testing.assert_array_equal(g, e)


def assert_product(got, a, v, err_msg=""):
    """``got`` is ``a @ v`` summed over ``a``'s stored (nonzero, NaN included) entries: within
    the rounding-error bound of inner products of the longest row's length of the exact sum
    (integers: exact, wrapping like the machine's), and non-finite exactly where it is."""
    got, a, v = np.asarray(got), np.asarray(a), np.asarray(v)
    assert got.dtype == a.dtype and got.shape == a.shape[:1] + v.shape[1:], err_msg
    rows, cols = np.nonzero(a)
    exact, magnitude = sparse_product_reference(a[rows, cols], rows, cols, v, a.shape[0])
    if a.dtype.kind == "i":
        bound = np.zeros(magnitude.shape)
    else:
        per_row = np.bincount(rows, minlength=a.shape[0]).max(initial=0)
        bound = sparse_product_bound(a.dtype, per_row) * magnitude
    assert_within_bound(got, exact, bound, err_msg)


def assert_stock_shaped_product(expected, got, a, v):
    """``got`` has stock's shape and dtype and is ``a @ v`` within the bound (assert_product)."""
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert_product(got, a, v)


def hlo(fn, *args):
    return jax.jit(fn).lower(*args).as_text()


def matmul(m, v):
    return m @ v


@pytest.mark.parametrize("rhs_cols", [None, 4], ids=["vector", "matrix"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=name)
@pytest.mark.parametrize("data_dtype", DATA_DTYPES, ids=name)
def test_bcsr_matmul_matches_stock(random_sparse, random_dense, assert_close, data_dtype,
                                   index_dtype, shape, rhs_cols):
    a = random_sparse(shape, data_dtype)
    m = bcsr(a, index_dtype)
    v = random_dense((shape[1],) if rhs_cols is None else (shape[1], rhs_cols), data_dtype)
    assert STOCK_TARGET in hlo(matmul, m, v) and TARGET not in hlo(matmul, m, v)
    expected, got = stock_then_ferrax(jax.jit(matmul), m, v)
    assert TARGET in hlo(matmul, m, v) and STOCK_TARGET not in hlo(matmul, m, v)
    assert_stock_shaped_product(expected, got, a, v)
    if np.dtype(data_dtype).kind == "i":  # small integers: the dense product is exact
        np.testing.assert_array_equal(got, a @ v)
    else:
        assert_close(got, a @ v, data_dtype, kind="reconstruct")


def test_csr_class_and_csr_matvec_matmat_unchanged(dtype, random_sparse, random_dense):
    # On CPU jax lowers CSR products with plain XLA ops, not the sparse target: install()
    # leaves them alone.
    a = random_sparse((6, 5), dtype)
    c = sparse.CSR(csr_arrays(a), shape=a.shape)

    def products(v, b):
        return c @ v, c @ b, sparse.csr_matvec(c, v), sparse.csr_matmat(c, b)

    v, b = random_dense((5,), dtype), random_dense((5, 3), dtype)
    expected, got = stock_then_ferrax(jax.jit(products), v, b)
    assert TARGET not in hlo(products, v, b)
    assert_identical(expected, got)  # the same XLA ops on both sides, no kernel of jaxlib's


def test_jit_vmap_and_grad(dtype, random_sparse, random_dense):
    a = random_sparse((7, 5), dtype)
    m = bcsr(a)
    vs = random_dense((3, 5), dtype)

    def loss(data, v):
        out = sparse.BCSR((data, m.indices, m.indptr), shape=m.shape) @ v
        return jnp.sum(jnp.abs(out) ** 2)

    def transformed(data, vs):
        return (jax.vmap(lambda v: m @ v)(vs), jax.vmap(lambda v: m @ v, in_axes=1)(vs.T),
                jax.value_and_grad(loss, argnums=(0, 1))(data, vs[0]))

    expected, got = stock_then_ferrax(jax.jit(transformed), m.data, vs)
    assert jax.tree.structure(expected) == jax.tree.structure(got)
    for e, g in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
        assert e.shape == g.shape and e.dtype == g.dtype
    assert_product(got[0].T, a, vs.T, "vmap")
    assert_product(got[1].T, a, vs.T, "vmap in_axes=1")
    # value_and_grad against stock's: y = A v is within beta |A| |v| of exact on either side
    # (beta: sparse_product_bound for the longest row or column, transposed products included),
    # and each output is linear or quadratic in y: the loss sum |y|^2 differs by at most
    # 2 beta sum |y| |A| |v| per side plus its own sum's rounding; d/dv = 2 A^H y by at most
    # 2 beta |A|^H (|A| |v|) per side, d/dA_ij = 2 y_i v_j by 2 beta (|A| |v|)_i |v_j|.
    rows, cols = np.nonzero(a)
    v = vs[0]
    beta = sparse_product_bound(dtype, max(a.shape) + 2)
    y = np.abs(a) @ np.abs(v) * (1 + beta)  # bounds |A v| as well
    (value, (grad_data, grad_v)), (stock_value, (stock_data, stock_v)) = got[2], expected[2]
    np.testing.assert_allclose(value, stock_value, rtol=2 * gamma(a.shape[0] + 4, dtype),
                               atol=8 * beta * np.sum(y * y))
    assert_within_bound(grad_v, extended(stock_v), 8 * beta * np.abs(a).T @ y, "d/dv")
    assert_within_bound(grad_data, extended(stock_data),
                        8 * beta * y[rows] * np.abs(v)[cols], "d/ddata")
    # vmap batches the sparse matrix, which jax lowers without the target; the forward product
    # of value_and_grad is unbatched: ferrax's.
    assert TARGET in hlo(transformed, m.data, vs)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_match_stock(dtype, random_sparse, random_dense, bad):
    a = random_sparse((6, 5), dtype, density=0.6)
    a[1, 2] = bad  # in the data
    v = random_dense((5, 3), dtype)
    v[4, 1] = bad  # and in the rhs
    if np.dtype(dtype).kind == "c":
        a[3, 0] = complex(1.0, bad)  # an infinite imaginary part: 0 * inf = NaN in the product
    expected, got = stock_then_ferrax(jax.jit(matmul), bcsr(a), v)
    assert_stock_shaped_product(expected, got, a, v)
    assert np.isnan(got).any() or np.isinf(got).any()


def test_overflow_and_cancellation_match_stock(dtype, random_dense):
    big = np.finfo(dtype).max / 4
    a = np.zeros((4, 3), dtype)
    a[0] = [big, big, big]  # overflows to inf
    a[1] = [big, -big, 1]  # exact cancellation, then 1 * v
    a[2] = [1, np.finfo(dtype).tiny, -1]  # products at the edge of the subnormal range
    a[3, 1] = 1
    v = random_dense((3, 2), dtype)
    v[:, 0] = [3, 3, 3]
    expected, got = stock_then_ferrax(jax.jit(matmul), bcsr(a), v)
    assert_stock_shaped_product(expected, got, a, v)
    assert np.isinf(got[0, 0])


@pytest.mark.parametrize("data_dtype", [np.int32, np.float64, np.complex64], ids=name)
def test_structure_edge_cases_match_stock(random_sparse, random_dense, data_dtype):
    a = random_sparse((8, 6), data_dtype)
    a[[0, 3, 7]] = 0  # empty rows, first and last included
    a[5] = random_dense((6,), data_dtype)  # one full row
    v = random_dense((6, 2), data_dtype)
    for m in [bcsr(a), bcsr(a, nse=40)]:  # nse: padding
        expected, got = stock_then_ferrax(jax.jit(matmul), m, v)
        assert_stock_shaped_product(expected, got, a, v)
        np.testing.assert_array_equal(got[[0, 3, 7]], 0)
    # No stored entries at all.
    empty = sparse.BCSR((np.zeros(0, data_dtype), np.zeros(0, np.int32), np.zeros(9, np.int32)),
                        shape=(8, 6))
    expected, got = stock_then_ferrax(jax.jit(matmul), empty, v)
    assert_stock_shaped_product(expected, got, np.zeros((8, 6), data_dtype), v)
    np.testing.assert_array_equal(got, 0)


def test_integer_overflow_wraps_like_stock():
    a = np.array([[2**62, 2**62, 1]], np.int64)
    v = np.array([2, 3, 5], np.int64)
    expected, got = stock_then_ferrax(jax.jit(matmul), bcsr(a), v)
    assert_stock_shaped_product(expected, got, a, v)  # exact modulo 2**64


@pytest.mark.parametrize(
    "shape, rhs_shape",
    [((0, 4), (4,)), ((0, 4), (4, 3)), ((4, 0), (0,)), ((4, 0), (0, 3)), ((0, 0), (0, 2)),
     ((3, 4), (4, 0))],
)
def test_zero_size_matches_stock(shape, rhs_shape):
    m = bcsr(np.full(shape, 1.5))
    v = np.full(rhs_shape, 2.5)
    expected, got = stock_then_ferrax(jax.jit(matmul), m, v)
    assert TARGET in hlo(matmul, m, v)
    assert_stock_shaped_product(expected, got, np.full(shape, 1.5), v)


@pytest.mark.parametrize(
    "data_dtype, rhs_cols",
    [(np.complex128, None), (np.int64, None), (np.float32, 16), (np.complex64, 16)],
    ids=["c128-vector", "s64-vector", "f32-matrix", "c64-matrix"])
def test_large_products_split_across_threads_match_stock(random_sparse, random_dense,
                                                         data_dtype, rhs_cols):
    # A few hundred thousand flops per task: the rows run in several thread-pool tasks. Row 0
    # is full and rows 100-199 are empty, so tasks differ in rows, not in entries.
    shape = (4000, 400) if rhs_cols is None else (1500, 400)
    a = random_sparse(shape, data_dtype, density=0.1 if rhs_cols is None else 0.03)
    a[0] = random_dense((400,), data_dtype)
    a[100:200] = 0
    m = bcsr(a, np.int32 if rhs_cols is None else np.int64)
    v = random_dense((400,) if rhs_cols is None else (400, rhs_cols), data_dtype)
    expected, got = stock_then_ferrax(jax.jit(matmul), m, v)
    assert_stock_shaped_product(expected, got, a, v)


def test_install_routes_and_uninstall_restores():
    cpu_rules = mlir._platform_specific_lowerings["cpu"]
    prims = [_lowerings.csr_spmv_p, _lowerings.csr_spmm_p]
    stock_rule = _lowerings._csr_spmm_cpu_lowering
    assert all(cpu_rules[p].rule is stock_rule for p in prims)
    m = bcsr(np.eye(3))
    ferrax.install()
    # Every way jax reaches the CPU rule (the primitives' entries, the module attribute the
    # BCSR lowering calls) is replaced, and lowers to ferrax's target.
    assert _lowerings._csr_spmm_cpu_lowering is not stock_rule
    assert all(cpu_rules[p].rule is not stock_rule for p in prims)
    assert "ferrax_csr_sparse_dense" in hlo(matmul, m, np.ones(3))
    assert STOCK_TARGET not in hlo(matmul, m, np.ones((3, 2)))
    ferrax.uninstall()
    assert _lowerings._csr_spmm_cpu_lowering is stock_rule
    assert all(cpu_rules[p].rule is stock_rule for p in prims)
    assert STOCK_TARGET in hlo(matmul, m, np.ones(3)) and "ferrax" not in hlo(matmul, m, np.ones(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("rhs_cols", [None, 3])
def test_internal_product_primitives_lower_with_ferrax(dtype, rhs_cols, random_sparse,
                                                       random_dense):
    # jax's CPU rule for csr_spmv_p / csr_spmm_p takes none of their parameters and coo_spmv_p /
    # coo_spmm_p have none on the CPU: stock jax cannot lower them there; ferrax's rules can.
    a = random_sparse((6, 5), dtype)
    data, indices, indptr = csr_arrays(a)
    rows, cols = np.nonzero(a)
    csr_p, coo_p = ((_lowerings.csr_spmv_p, _lowerings.coo_spmv_p) if rhs_cols is None
                    else (_lowerings.csr_spmm_p, _lowerings.coo_spmm_p))
    csr = lambda v: csr_p.bind(data, indices, indptr, v, transpose=False, shape=a.shape)
    coo = lambda v, t: coo_p.bind(a[rows, cols], rows.astype(np.int32), cols.astype(np.int32),
                                  v, transpose=t, shape=a.shape)
    tail = () if rhs_cols is None else (rhs_cols,)
    v, w = random_dense((5,) + tail, dtype), random_dense((6,) + tail, dtype)
    ferrax.uninstall()
    with pytest.raises((TypeError, NotImplementedError)):
        jax.jit(csr).lower(v)
    with pytest.raises(NotImplementedError):
        jax.jit(coo, static_argnums=1).lower(v, False)
    ferrax.install()
    try:
        assert_product(jax.jit(csr)(v), a, v)
        assert_product(jax.jit(coo, static_argnums=1)(v, False), a, v)
        assert_product(jax.jit(coo, static_argnums=1)(w, True), a.T, w)
    finally:
        ferrax.uninstall()


# --- the raw target ----------------------------------------------------------------------


def raw(target, data, outer, inner, rhs, out_shape=None, out_dtype=None, **attrs):
    rows = len(outer) - 1
    out_shape = out_shape or ((rows,) if np.ndim(rhs) == 1 else (rows, np.shape(rhs)[1]))
    out = jax.ShapeDtypeStruct(out_shape, out_dtype or np.asarray(data).dtype)
    call = jax.ffi.ffi_call(target, out)
    return np.asarray(jax.block_until_ready(call(data, outer, inner, rhs, **attrs)))


def csr_operands(random_sparse, dtype=np.float64, index_dtype=np.int32, shape=(5, 4)):
    a = random_sparse(shape, dtype, density=0.6)
    rows, cols = np.nonzero(a)
    outer = np.searchsorted(rows, np.arange(shape[0] + 1)).astype(index_dtype)
    return a, [a[rows, cols], outer, cols.astype(index_dtype)]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=name)
@pytest.mark.parametrize("data_dtype", DATA_DTYPES, ids=name)
def test_raw_matches_jaxlib_target(random_sparse, random_dense, data_dtype, index_dtype):
    a, (data, outer, inner) = csr_operands(random_sparse, data_dtype, index_dtype, (6, 5))
    # Offsets need not start at 0, and entries outside outer[0]..outer[rows] are never read.
    data = np.concatenate([random_dense((2,), data_dtype), data, random_dense((3,), data_dtype)])
    inner = np.concatenate([np.array([99, -1], index_dtype), inner, np.array([-5, 77, 4], index_dtype)])
    outer = outer + index_dtype(2)
    for rhs in [random_dense((5,), data_dtype), random_dense((5, 3), data_dtype)]:
        got = raw(TARGET, data, outer, inner, rhs)
        stock = raw(STOCK_TARGET, data, outer, inner, rhs)
        assert got.shape == stock.shape and got.dtype == stock.dtype
        assert_product(got, a, rhs)
        if np.dtype(data_dtype).kind == "i":
            np.testing.assert_array_equal(got, a @ rhs)


def raw_error(*operands, **kwargs):
    with pytest.raises(Exception) as failure:
        raw(TARGET, *operands, **kwargs)
    message = str(failure.value)
    assert TARGET in message
    return message


def test_raw_wrong_dtypes_name_the_operand(random_sparse):
    _, (data, outer, inner) = csr_operands(random_sparse)
    rhs = np.ones(4)
    for bad, part in [(np.int8, "got s8"), (np.float16, "got f16"), (np.uint32, "got u32")]:
        message = raw_error(data.astype(bad), outer, inner, rhs.astype(bad))
        assert "operand 0 'lhs_data'" in message
        assert "expected dtype s32, s64, f32, f64, c64 or c128" in message and part in message
    message = raw_error(data, outer.astype(np.int16), inner.astype(np.int16), rhs)
    assert "operand 1 'lhs_outer_indices': expected dtype s32 or s64, got s16" in message
    message = raw_error(data, outer, inner.astype(np.int64), rhs)
    assert "operand 2 'lhs_inner_indices': expected dtype s32, got s64" in message
    message = raw_error(data, outer, inner, rhs.astype(np.float32))
    assert "operand 3 'rhs': expected dtype f64, got f32" in message
    message = raw_error(data, outer, inner, rhs, out_dtype=np.complex128)
    assert "result 0 'out': expected dtype f64, got c128" in message


def test_raw_wrong_shapes_name_the_operand(random_sparse):
    _, (data, outer, inner) = csr_operands(random_sparse)
    nnz = len(data)
    cases = [
        ((data.reshape(1, -1), outer, inner, np.ones(4)), {},
         f"operand 0 'lhs_data': expected shape [nnz], got shape [1, {nnz}]"),
        ((data, outer[:0], inner, np.ones(4)), {"out_shape": (1,)},
         "operand 1 'lhs_outer_indices': expected shape [rows + 1], got shape [0]"),
        ((data, outer, inner[:-1], np.ones(4)), {},
         f"operand 2 'lhs_inner_indices': expected shape [{nnz}], got shape [{nnz - 1}]"),
        ((data, outer, inner, np.ones((4, 2, 1))), {"out_shape": (5, 2, 1)},
         "operand 3 'rhs': expected shape [k] or [k, n], got shape [4, 2, 1]"),
        ((data, outer, inner, np.ones((4, 2))), {"out_shape": (5, 3)},
         "result 0 'out': expected shape [5, 2], got shape [5, 3]"),
        ((data, outer, inner, np.ones(4)), {"out_shape": (4,)},
         "result 0 'out': expected shape [5], got shape [4]"),
    ]
    for operands, kwargs, expected in cases:
        assert expected in raw_error(*operands, **kwargs)


def test_raw_bad_indices_name_the_operand(random_sparse):
    _, (data, outer, inner) = csr_operands(random_sparse)
    nnz = len(data)
    rhs = np.ones(4)

    def with_value(array, index, value):
        array = array.copy()
        array[index] = value
        return array

    decreasing = with_value(outer, 2, outer[1] - 1) if outer[1] > 0 else with_value(outer, 1, -1)
    message = raw_error(data, decreasing, inner, rhs)
    assert "operand 1 'lhs_outer_indices'" in message
    message = raw_error(data, with_value(outer, 5, nnz + 1), inner, rhs)
    assert f"operand 1 'lhs_outer_indices': expected row offsets within 0..={nnz}" in message
    assert f"got {nnz + 1} at index 5" in message
    message = raw_error(data, with_value(outer, 0, -3), inner, rhs)
    assert "got -3 at index 0" in message
    for column in [4, -1]:
        message = raw_error(data, outer, with_value(inner, nnz - 1, column), rhs)
        assert "operand 2 'lhs_inner_indices': expected column indices within 0..4" in message
        assert f"got {column} at index {nnz - 1} (row 4)" in message


@pytest.mark.parametrize("value", [np.uint8(ord("N")), 1, "N", np.float32(1.0)],
                         ids=["u8", "s64", "string", "f32"])
def test_raw_unexpected_attribute_names_it(random_sparse, value):
    _, operands = csr_operands(random_sparse)
    message = raw_error(*operands, np.ones(4), transpose=value)
    assert "unexpected attribute 'transpose' (expected attributes: [])" in message


def test_raw_errors_leave_the_target_usable(random_sparse):
    a, operands = csr_operands(random_sparse)
    for _ in range(3):
        raw_error(*operands, np.ones(4), out_shape=(3,))
    v = np.arange(1.0, 5.0)
    np.testing.assert_allclose(raw(TARGET, *operands, v), a @ v, rtol=1e-14)


@pytest.fixture(autouse=True)
def _no_sparse_efficiency_warnings():
    # BCSR warns when it falls back to its generic lowering; none of the cases above should.
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparse.SparseEfficiencyWarning)
        yield
