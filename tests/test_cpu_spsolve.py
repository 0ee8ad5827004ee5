"""Sparse direct solves on the CPU (``ferrax_spsolve``): ``ferrax.sparse.spsolve`` and, after
``install()``, jax's ``jax.experimental.sparse.linalg.spsolve`` (a Python callback into scipy in
stock jax, without a batching rule), against scipy's ``spsolve`` (SuperLU) called directly and
the residual, with tolerances from LU's error bound: every dtype, both index dtypes,
duplicates (summed, as scipy does), unsorted columns, padding past ``indptr[n]``, batches of
values and right-hand sides, vmap, grad, singular and non-finite input, and bad indices.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sps
import scipy.sparse.linalg as spl
from jax.experimental.sparse import linalg as jax_sparse_linalg
from jax.test_util import check_grads

import ferrax

JAX_SPSOLVE = jax_sparse_linalg.spsolve


def random_csr(rng, n, dtype, index_dtype=np.int32, density=0.15, padding=0):
    """A diagonally dominant (well conditioned) n×n CSR matrix with every row's columns
    shuffled, some entries duplicated (their sum is the matrix's entry) and `padding` junk
    entries past indptr[n]. Returns (data, indices, indptr, the dense matrix in float64 or
    complex128)."""
    dtype = np.dtype(dtype)
    wide = np.complex128 if dtype.kind == "c" else np.float64
    rows, columns = [], []
    for r in range(n):
        cols = rng.choice(n, size=max(1, int(density * n)), replace=False)
        cols = np.concatenate([cols, [r], rng.choice(cols, size=min(2, len(cols)))])
        rng.shuffle(cols)
        rows += [r] * len(cols)
        columns += list(cols)
    values = rng.standard_normal(len(rows))
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(len(rows))
    # Dominant diagonal: add to each row's first diagonal entry.
    for r in range(n):
        mine = [k for k in range(len(rows)) if rows[k] == r]
        k = next(k for k in mine if columns[k] == r)
        values[k] += 2 * np.abs(values[mine]).sum() + 1
    values = values.astype(dtype)
    dense = np.zeros((n, n), wide)
    np.add.at(dense, (rows, columns), values.astype(wide))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(index_dtype)
    data = np.concatenate([values, np.full(padding, 7, dtype)])
    indices = np.concatenate([columns, np.full(padding, n + 5)]).astype(index_dtype)
    return data, indices, indptr, dense


def random_vector(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def assert_solves(x, dense, b, dtype):
    """x solves dense · x = b to LU's bound: a small residual (backward error) and close to
    the float64 solution (forward error, at most cond(A) times the backward error)."""
    x, b = np.asarray(x), np.asarray(b)
    assert x.dtype == np.dtype(dtype) and x.shape == b.shape
    eps, n = np.finfo(dtype).eps, dense.shape[0]
    exact = np.linalg.solve(dense, np.moveaxis(b, -1, 0).reshape(n, -1))
    exact = np.moveaxis(exact.reshape(n, *b.shape[:-1]), 0, -1)
    bound = 30 * n * eps * np.linalg.norm(dense, np.inf) * np.abs(exact).max(initial=1)
    residual = np.einsum("ij,...j->...i", dense, x) - b
    assert np.abs(residual).max(initial=0) <= bound
    cond = np.linalg.cond(dense, np.inf)
    np.testing.assert_allclose(x, exact, atol=cond * bound, rtol=0)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_against_scipy(dtype, index_dtype, rng, installed):
    """One system, directly and through jax's spsolve after install(); scipy's SuperLU on the
    same arrays (padding left off) agrees."""
    n = 60
    data, indices, indptr, dense = random_csr(rng, n, dtype, index_dtype, padding=3)
    b = random_vector(rng, n, dtype)
    x = ferrax.sparse.spsolve(data, indices, indptr, b)
    assert_solves(x, dense, b, dtype)
    used = indptr[-1]
    # Copies: scipy sums the duplicates in place.
    reference = spl.spsolve(sps.csr_matrix((data[:used].copy(), indices[:used].copy(),
                                            indptr.copy()), shape=(n, n)), b.astype(dense.dtype))
    assert_solves(reference.astype(dtype), dense, b, dtype)
    solve = jax.jit(lambda d, b: JAX_SPSOLVE(d, indices, indptr, b))
    assert "ferrax_spsolve" in solve.lower(data, b).as_text()
    np.testing.assert_array_equal(solve(data, b), x)


def test_pivots_of_parts_below_one(dtype, rng):
    """Pivots whose real and imaginary parts are below one (0.86 + 0.65i): faer's complex
    reciprocal of such a number passes through a subnormal, which XLA's threads flush to zero
    unless ferrax keeps subnormals around faer (it did not: residuals of order one)."""
    n = 30
    pivot = 0.86 + 0.65j if np.dtype(dtype).kind == "c" else 0.86
    off = sps.random(n, n, density=0.1, rng=rng, format="csr")
    a = sps.csr_matrix(0.1 * off * (1 + 1j if np.dtype(dtype).kind == "c" else 1)
                       + pivot * sps.eye(n)).astype(dtype)
    values, indices, indptr = a.data, a.indices.astype(np.int32), a.indptr.astype(np.int32)
    dense = a.toarray().astype(np.result_type(dtype, np.float64))
    b = random_vector(rng, (3, n), dtype)
    # A batch of three: the pool's threads (the flushing ones) factor them.
    x = jax.jit(ferrax.sparse.spsolve)(np.stack([values] * 3), indices, indptr, b)
    for k in range(3):
        assert_solves(x[k], dense, b[k], dtype)


def test_hermitian(dtype, rng):
    """A Hermitian matrix with a positive diagonal: positive definite (ferrax factors it by
    Cholesky) and indefinite (Cholesky fails, LU follows), one batch."""
    n = 50
    data, indices, indptr, dense = random_csr(rng, n, dtype)
    # Aᴴ + A in CSR: both patterns' entries, the transpose's conjugated.
    rows = np.repeat(np.arange(n), np.diff(indptr))
    both = sps.csr_matrix((np.concatenate([data, data.conj()]),
                           (np.concatenate([rows, indices]), np.concatenate([indices, rows]))),
                          shape=(n, n))
    both.sum_duplicates()
    definite = both.data.astype(dtype)
    # Row and column 7's off-diagonal entries scaled up: the diagonal stays positive.
    rows = np.repeat(np.arange(n), np.diff(both.indptr))
    indefinite = np.where((rows == 7) ^ (both.indices == 7), 100 * definite, definite)
    b = random_vector(rng, (2, n), dtype)
    x = ferrax.sparse.spsolve(np.stack([definite, indefinite]), both.indices.astype(np.int32),
                              both.indptr.astype(np.int32), b)
    for k, values in enumerate((definite, indefinite)):
        full = sps.csr_matrix((values, both.indices, both.indptr), shape=(n, n)).toarray()
        eigenvalues = np.linalg.eigvalsh(full.astype(dense.dtype))
        assert (eigenvalues.min() > 0) == (k == 0)
        assert_solves(x[k], full.astype(dense.dtype), b[k], dtype)


def test_batches(dtype, rng):
    """data [..., nnz] with b [..., n] (a matrix per system) and data [nnz] (one matrix
    factored once for every system)."""
    n = 40
    data, indices, indptr, dense = random_csr(rng, n, dtype)
    b = random_vector(rng, (2, 3, n), dtype)
    assert_solves(ferrax.sparse.spsolve(data, indices, indptr, b), dense, b, dtype)
    scales = np.arange(1, 7, dtype=dtype).reshape(2, 3, 1)
    x = ferrax.sparse.spsolve(data * scales, indices, indptr, b)
    assert_solves(x * scales[..., 0:1], dense, b, dtype)


def test_vmap_of_jax_spsolve(rng, installed):
    """jax's spsolve has no batching rule; after install() vmap over values, right-hand sides
    or both binds ferrax's primitive, and over patterns runs one pattern at a time."""
    n, dtype = 30, np.float64
    data, indices, indptr, dense = random_csr(rng, n, dtype)
    b = random_vector(rng, (4, n), dtype)
    scales = np.arange(1.0, 5.0)[:, None]
    solve = lambda d, i, p, b: JAX_SPSOLVE(d, i, p, b)
    x = jax.jit(jax.vmap(solve, (None, None, None, 0)))(data, indices, indptr, b)
    assert_solves(x, dense, b, dtype)
    x = jax.vmap(solve, (0, None, None, 0))(data * scales, indices, indptr, b)
    assert_solves(x * scales, dense, b, dtype)
    x = jax.vmap(solve, (0, None, None, None))(data * scales, indices, indptr, b[0])
    assert_solves(x * scales, dense, np.broadcast_to(b[0], b.shape), dtype)
    nested = jax.vmap(jax.vmap(solve, (None, None, None, 0)), (0, None, None, None))
    x = nested(data * scales[:2], indices, indptr, b[:3])
    assert_solves(x * scales[:2, None], dense, np.broadcast_to(b[:3], (2, 3, n)), dtype)
    # Two patterns (of one size: the same count per row).
    other, other_indices, other_indptr, other_dense = random_csr(rng, n, dtype)
    x = jax.vmap(solve)(np.stack([data, other]), np.stack([indices, other_indices]),
                        np.stack([indptr, other_indptr]), b[:2])
    assert_solves(x[0], dense, b[0], dtype)
    assert_solves(x[1], other_dense, b[1], dtype)


def test_grad(rng, installed):
    """jax's rules (d/db = A⁻¹, d/dA = -A⁻¹ dA x; the transpose through Aᵀ), checked
    numerically, on jax's spsolve after install() and on a batch of ferrax's."""
    n = 12
    data, indices, indptr, _ = random_csr(rng, n, np.float64, density=0.3)
    b = random_vector(rng, n, np.float64)
    check_grads(lambda d, b: JAX_SPSOLVE(d, indices, indptr, b), (data, b), order=1,
                modes=("fwd", "rev"))
    batch = np.stack([data, 2 * data])
    check_grads(lambda d, b: ferrax.sparse.spsolve(d, indices, indptr, b),
                (batch, random_vector(rng, (2, n), np.float64)), order=1, modes=("fwd", "rev"))


def test_singular_and_non_finite(dtype, rng):
    """A structurally singular matrix (an empty row), numerically singular ones (a row of
    stored zeros; a column of them) and a NaN entry each give a NaN solution for their own
    systems only."""
    n = 8
    data, indices, indptr, dense = random_csr(rng, n, dtype, density=0.5)
    batch = np.stack([data] * 4)
    row = slice(indptr[2], indptr[3])
    batch[0, row] = 0  # row 2 all zero
    batch[2, indptr[0]] = np.nan
    zero_column = dense.copy()
    zero_column[:, 3] = 0
    full_indices = np.tile(np.arange(n), n).astype(np.int32)
    full_indptr = np.arange(0, n * n + 1, n).astype(np.int32)
    b = random_vector(rng, (4, n), dtype)
    x = np.asarray(ferrax.sparse.spsolve(batch, indices, indptr, b))
    assert np.isnan(x[0]).all() and np.isnan(x[2]).all()
    assert_solves(x[1], dense, b[1], dtype)
    assert_solves(x[3], dense, b[3], dtype)
    x = ferrax.sparse.spsolve(zero_column.reshape(-1).astype(dtype), full_indices, full_indptr,
                              b[0])
    assert np.isnan(np.asarray(x)).all()
    # Row 2 without entries: no pivot for it at all.
    counts = np.where(np.arange(n) == 2, 0, n)
    without = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    kept = np.delete(np.arange(n * n), np.s_[2 * n:3 * n])
    x = ferrax.sparse.spsolve(dense.reshape(-1)[kept].astype(dtype), full_indices[kept], without,
                              b[0])
    assert np.isnan(np.asarray(x)).all()


def test_empty(dtype):
    """n = 0 and an empty batch return empty results."""
    nothing = np.zeros(0, dtype)
    assert ferrax.sparse.spsolve(nothing, np.zeros(0, np.int32), np.zeros(1, np.int32),
                                 nothing).shape == (0,)
    x = ferrax.sparse.spsolve(np.ones(1, dtype), np.zeros(1, np.int32), np.array([0, 1], np.int32),
                              np.zeros((0, 1), dtype))
    assert x.shape == (0, 1)


@pytest.mark.parametrize("case, message", [
    ("column", "operand 1 'indices': expected columns within 0..4, got 4 at index 1"),
    ("negative column", "operand 1 'indices': expected columns within 0..4, got -1 at index 1"),
    ("decreasing", "operand 2 'indptr': expected non-decreasing row offsets within 0..=5, "
                   "got 1 at index 2"),
    ("past nnz", "operand 2 'indptr': expected non-decreasing row offsets within 0..=5, "
                 "got 6 at index 4"),
    ("start", "operand 2 'indptr': expected 0 at index 0, got 1"),
])
def test_bad_indices_are_errors(case, message):
    data = np.ones(5)
    indices = np.array([0, 1, 2, 3, 0], np.int32)
    indptr = np.array([0, 2, 3, 4, 5], np.int32)
    if case == "column":
        indices[1] = 4
    elif case == "negative column":
        indices[1] = -1
    elif case == "decreasing":
        indptr[2] = 1
    elif case == "past nnz":
        indptr[4] = 6
    else:
        indptr[0] = 1
    with pytest.raises(Exception, match="ferrax_spsolve") as error:
        jax.block_until_ready(ferrax.sparse.spsolve(data, indices, indptr, np.ones(4)))
    assert message in str(error.value)


def test_shape_errors():
    with pytest.raises(ValueError, match=r"expected data \[..., nnz\] or \[nnz\]"):
        ferrax.sparse.spsolve(np.ones(3), np.zeros(3, np.int32), np.zeros(4, np.int32),
                              np.ones(4))
    with pytest.raises(TypeError, match="one dtype of float32"):
        ferrax.sparse.spsolve(np.ones(3, np.float32), np.zeros(3, np.int32),
                              np.zeros(4, np.int32), np.ones(3))


def test_export(rng, installed):
    """A plain jax.export of installed code lowers as stock jax (whose spsolve is a host
    callback, which jax cannot serialize); ferrax.export serializes ferrax_spsolve."""
    n = 20
    data, indices, indptr, dense = random_csr(rng, n, np.float64)
    b = random_vector(rng, n, np.float64)
    solve = jax.jit(lambda d, b: JAX_SPSOLVE(d, indices, indptr, b))
    with pytest.raises(NotImplementedError, match="host_callbacks"):
        jax.export.export(solve)(data, b)
    exported = ferrax.export(solve)(data, b)
    assert "ferrax_spsolve" in exported.mlir_module()
    assert_solves(exported.call(data, b), dense, b, np.float64)


def test_lowering_for_cuda(rng):
    """On CUDA (lowered here without a GPU) a batch is one ferrax_spsolve call, not jaxlib's
    csrlsvqr once per system."""
    n = 10
    data, indices, indptr, _ = random_csr(rng, n, np.float32)
    solve = jax.jit(lambda d, b: ferrax.sparse.spsolve(d, indices, indptr, b))
    args = (np.stack([data] * 3), random_vector(rng, (3, n), np.float32))
    text = solve.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("ferrax_spsolve") == 1 and "cusolver_csrlsvqr_ffi" not in text
