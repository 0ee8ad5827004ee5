"""ferrax_coo_sparse_dense through ferrax.install(): BCOO @ dense (and dense @ BCOO, and a
matrix contracted on its second dimension) against the exact product over the stored entries
(extended precision) within the inner products' rounding-error bound (integers: exactly), with
jax's index rules (negative indices count from the end, indices outside drop their entry,
duplicates add up) checked against stock jax; sorted, unsorted and padded entries, products
large enough to split across the thread pool (including the orders that make the kernel start
over), the BCOOs it leaves to jax (batched, mixed dtypes), jit / vmap / grad, export, zero sizes
and the raw target's errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse

import ferrax
from helpers import assert_within_bound, sparse_product_bound, sparse_product_reference

TARGET = "ferrax_coo_sparse_dense"
DATA_DTYPES = [np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128]
INDEX_DTYPES = [np.int32, np.int64]
name = lambda d: np.dtype(d).name  # noqa: E731


def random_values(rng, shape, dtype):
    """Never zero, integers included."""
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        return (rng.integers(1, 10, shape) * rng.choice([-1, 1], shape)).astype(dtype)
    values = rng.standard_normal(shape)
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def random_bcoo(rng, shape, nse, dtype, index_dtype=np.int32, order="sorted"):
    """A BCOO of ``nse`` entries at random positions (duplicates likely): ``order`` "sorted"
    (by row, then column, as jax's sort_indices) or "unsorted"."""
    rows, cols = rng.integers(0, shape[0], nse), rng.integers(0, shape[1], nse)
    if order == "sorted":
        rows, cols = rows[np.lexsort((cols, rows))], cols[np.lexsort((cols, rows))]
    indices = np.stack([rows, cols], axis=1).astype(index_dtype)
    return sparse.BCOO((random_values(rng, nse, dtype), indices), shape=shape,
                       indices_sorted=order != "unsorted")


def kept(m):
    """(data, rows, cols) of ``m``'s entries by jax's rules: negative indices count from the
    end, those still outside drop."""
    data, (rows, cols) = np.asarray(m.data), np.asarray(m.indices, np.int64).T
    rows = np.where(rows < 0, rows + m.shape[0], rows)
    cols = np.where(cols < 0, cols + m.shape[1], cols)
    keep = (rows >= 0) & (rows < m.shape[0]) & (cols >= 0) & (cols < m.shape[1])
    return data[keep], rows[keep], cols[keep]


def assert_product(got, m, v, transpose=False):
    """``got`` is ``m @ v`` (``mᵀ @ v`` with ``transpose``) over ``m``'s kept entries, within
    the bound for inner products of the busiest output row's length (integers: exactly)."""
    data, rows, cols = kept(m)
    if transpose:
        rows, cols = cols, rows
    out_rows = m.shape[1] if transpose else m.shape[0]
    exact, magnitude = sparse_product_reference(data, rows, cols, np.asarray(v), out_rows)
    got = np.asarray(got)
    assert got.dtype == m.dtype
    if got.dtype.kind == "i":
        bound = np.zeros(magnitude.shape)
    else:
        per_row = np.bincount(rows, minlength=out_rows).max(initial=0)
        bound = sparse_product_bound(got.dtype, per_row) * magnitude
    assert_within_bound(got, exact, bound)


def hlo(fn, *args):
    return jax.jit(fn).lower(*args).as_text()


# The three products jax's BCOO dot_general takes for a plain matrix: contract its columns
# (A @ v), its rows (v @ A: transpose), or its columns with a matrix's second dimension.
PRODUCTS = {
    "A@v": (lambda m, v: m @ v, False, lambda v: v),
    "v@A": (lambda m, v: (v.T @ m).T, True, lambda v: v),
    "A@Bt": (lambda m, v: m @ v.T, False, lambda v: v),
}


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("rhs_cols", [None, 3], ids=["vector", "matrix"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=name)
@pytest.mark.parametrize("data_dtype", DATA_DTYPES, ids=name)
def test_bcoo_products_route_and_match_the_exact_product(rng, installed, data_dtype, index_dtype,
                                                         rhs_cols, product):
    if product == "A@Bt" and rhs_cols is None:
        pytest.skip("a vector has no second dimension")
    fn, transpose, _ = PRODUCTS[product]
    shape = (7, 5)
    m = random_bcoo(rng, shape, 20, data_dtype, index_dtype, order="unsorted")
    k = shape[0] if transpose else shape[1]
    v = random_values(rng, (k,) if rhs_cols is None else (k, rhs_cols), data_dtype)
    if product == "A@Bt":
        v = np.ascontiguousarray(v.T)
    assert TARGET in hlo(fn, m, v)
    got = jax.jit(fn)(m, v)
    assert_product(got, m, v.T if product == "A@Bt" else v, transpose=transpose)


@pytest.mark.parametrize("product", ["A@v", "v@A"])
def test_index_rules_match_stock(rng, product):
    # Negative indices, indices past the end (both ways), duplicates: as stock jax.
    fn, transpose, _ = PRODUCTS[product]
    shape = (6, 4)
    indices = np.array([[0, 1], [-1, 0], [0, -1], [2, 2], [2, 2], [6, 0], [0, 4], [-7, 0],
                        [0, -5], [5, 3], [-6, -4]], np.int32)
    m = sparse.BCOO((random_values(rng, len(indices), np.float64), indices), shape=shape)
    v = random_values(rng, (shape[0] if transpose else shape[1], 2), np.float64)
    expected = np.asarray(jax.jit(fn)(m, v))
    ferrax.install()
    assert TARGET in hlo(fn, m, v)
    got = np.asarray(jax.jit(fn)(m, v))
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-14)
    assert_product(got, m, v, transpose=transpose)


@pytest.mark.parametrize("product", ["A@v", "v@A"])
@pytest.mark.parametrize("order", ["sorted", "unsorted", "padded", "stray", "banded"])
@pytest.mark.parametrize("dtype, rhs_cols", [(np.float64, None), (np.complex64, 4),
                                             (np.int64, None)], ids=["f64", "c64-matrix", "s64"])
def test_large_products_split_across_threads(rng, installed, dtype, rhs_cols, order, product):
    # Enough entries for several thread-pool tasks, in the order `order` of the product's
    # output rows (the matrix's rows for A@v, its columns for v@A). "stray": sorted but for
    # one entry in the first half whose output row is the last, so that the tasks' first and
    # last rows look ordered and a task meets a row outside its range (the kernel starts
    # over). "banded": a band about the diagonal, sorted by output row.
    fn, transpose, _ = PRODUCTS[product]
    (out_rows, k), nse = (3000, 2000), 300_000
    if order == "banded":
        out = np.repeat(np.arange(out_rows), nse // out_rows)
        inner = np.clip(out * k // out_rows + rng.integers(-40, 41, len(out)), 0, k - 1)
    else:
        out, inner = rng.integers(0, out_rows, nse), rng.integers(0, k, nse)
        if order != "unsorted":
            out, inner = out[np.lexsort((inner, out))], inner[np.lexsort((inner, out))]
        if order == "padded":
            out[-nse // 4:], inner[-nse // 4:] = out_rows, k
        if order == "stray":
            out[nse // 4] = out_rows - 1
    pairs = (inner, out) if transpose else (out, inner)
    shape = (k, out_rows) if transpose else (out_rows, k)
    m = sparse.BCOO((random_values(rng, len(out), dtype),
                     np.stack(pairs, axis=1).astype(np.int32)), shape=shape)
    v = random_values(rng, (k,) if rhs_cols is None else (k, rhs_cols), dtype)
    assert TARGET in hlo(fn, m, v)
    assert_product(jax.jit(fn)(m, v), m, v, transpose=transpose)


def test_bcoos_left_to_jax_stay_correct(rng, installed):
    # A batched BCOO (what vmap makes), a sparse vector, and mixed dtypes lower
    # by jax's own rule, with stock's results.
    m = random_bcoo(rng, (6, 5), 12, np.float32)
    v = random_values(rng, (4, 5), np.float32)
    batched = jax.vmap(lambda v: m @ v)
    assert TARGET not in hlo(batched, v)
    for i in range(4):
        assert_product(batched(v)[i], m, v[i])
    vector = sparse.BCOO.fromdense(random_values(rng, 5, np.float32) * (np.arange(5) % 2))
    assert TARGET not in hlo(lambda v: vector @ v, v.T)
    np.testing.assert_allclose(jax.jit(lambda v: vector @ v)(v.T), vector.todense() @ v.T,
                               rtol=1e-5)
    mixed = lambda v: sparse.bcoo_dot_general(m, v, dimension_numbers=(([1], [0]), ([], [])),
                                              preferred_element_type=np.float64)
    assert TARGET not in hlo(mixed, v[0])  # x64 is on (conftest)
    assert_product(jax.jit(mixed)(v[0]).astype(np.float32), m, v[0])


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=name)
def test_jit_vmap_and_grad_match_stock(rng, dtype):
    m = random_bcoo(rng, (8, 6), 20, dtype, order="unsorted")
    v = random_values(rng, (6, 3), dtype)
    loss = lambda data, v: jnp.sum(jnp.abs(sparse.BCOO((data, m.indices), shape=m.shape) @ v) ** 2)
    fns = {
        "grad": jax.jit(jax.grad(loss, argnums=(0, 1))),
        "vmap_rhs": jax.jit(jax.vmap(lambda v: m @ v, in_axes=1, out_axes=1)),
        "rdot": jax.jit(lambda v: v.T @ m),
    }
    args = {"grad": (m.data, v), "vmap_rhs": (v,), "rdot": (random_values(rng, (8, 2), dtype),)}
    expected = {k: jax.tree.map(np.asarray, f(*args[k])) for k, f in fns.items()}
    ferrax.install()
    jax.clear_caches()
    assert TARGET in hlo(jax.grad(loss, argnums=(0, 1)), m.data, v)
    for k, f in fns.items():
        for e, g in zip(jax.tree.leaves(expected[k]), jax.tree.leaves(f(*args[k])), strict=True):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5, err_msg=k)


def test_export_plain_is_stock_and_ferrax_export_serializes_the_target(rng, installed):
    m = random_bcoo(rng, (5, 4), 9, np.float32)
    v = random_values(rng, (4,), np.float32)
    fn = jax.jit(lambda data, v: sparse.BCOO((data, m.indices), shape=m.shape) @ v)
    assert TARGET not in jax.export.export(fn)(m.data, v).mlir_module()
    exported = ferrax.export(fn)(m.data, v)
    assert TARGET in exported.mlir_module()
    assert_product(exported.call(m.data, v), m, v)


@pytest.mark.parametrize("shape, nse, k_cols", [((0, 4), 3, None), ((4, 0), 3, 2), ((3, 4), 0, 2),
                                                ((3, 4), 5, 0)])
def test_zero_sizes(rng, installed, shape, nse, k_cols):
    indices = np.zeros((nse, 2), np.int32)  # row 0, column 0: outside an empty matrix
    m = sparse.BCOO((random_values(rng, nse, np.float64), indices), shape=shape)
    v = random_values(rng, (shape[1],) if k_cols is None else (shape[1], k_cols), np.float64)
    got = jax.jit(lambda m, v: m @ v)(m, v)
    assert got.shape == (shape[0],) + v.shape[1:]
    assert_product(got, m, v)


def raw(data, indices, rhs, out_shape, **attrs):
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(out_shape, np.asarray(data).dtype))
    return np.asarray(jax.block_until_ready(call(data, indices, rhs, **attrs)))


def raw_error(*args, **attrs):
    with pytest.raises(Exception) as failure:
        raw(*args, **attrs)
    assert TARGET in str(failure.value)
    return str(failure.value)


def test_raw_errors_name_the_operand_and_leave_the_target_usable():
    data, indices = np.ones(3, np.float32), np.array([[0, 0], [1, 2], [2, 1]], np.int32)
    shape = dict(rows=np.int64(3), cols=np.int64(3), transpose=False)
    assert "rhs" in raw_error(data, indices, np.ones(4, np.float32), (3,), **shape)
    assert "out" in raw_error(data, indices, np.ones(3, np.float32), (4,), **shape)
    assert "indices" in raw_error(data, indices[:2], np.ones(3, np.float32), (3,), **shape)
    assert "indices" in raw_error(data, indices.astype(np.int16), np.ones(3, np.float32), (3,), **shape)
    assert "data" in raw_error(data.astype(np.float16), indices, np.ones(3, np.float16), (3,),
                               **shape)
    assert "rows" in raw_error(data, indices, np.ones(3, np.float32), (3,), rows=np.int64(-1),
                               cols=np.int64(3), transpose=False)
    assert "transpose" in raw_error(data, indices, np.ones(3, np.float32), (3,), rows=np.int64(3),
                                    cols=np.int64(3))
    np.testing.assert_array_equal(raw(data, indices, np.arange(3, dtype=np.float32), (3,), **shape), [0, 2, 1])
    transposed = dict(shape, transpose=True)
    np.testing.assert_array_equal(raw(data, indices, np.arange(3, dtype=np.float32), (3,), **transposed),
                                  [0, 2, 1])
