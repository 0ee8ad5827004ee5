"""ferrax's lowering rules for jax's own primitives: the ``ferrax`` column of ``_install``'s
routing table. Each takes jax's operands and parameters and names its ferrax target itself
(``_targets``); where it reuses one of jax's rules, it passes it ferrax's target name.
"""

from __future__ import annotations

import numpy as np
from jax._src import core
from jax._src import ffi as jax_ffi
from jax._src.interpreters import batching, mlir
from jax._src.lax import linalg as lax_linalg
from jax._src.lib.mlir.dialects import hlo
from jax.experimental import rnn as jax_rnn

from ferrax import _primitives, _targets, linalg, random, rnn
from ferrax._lowering import batched_ffi_lowering

_getrf_row_major = batched_ffi_lowering(_targets.GETRF_ROW_MAJOR, num_non_batch_dims=2,
                                        column_major=False)


def lu_row_major(ctx, operand):
    """jax's lu (CPU and CUDA) on ferrax_getrf_row_major, which factors the matrices where jax
    keeps them (the GPU kernels stage row-major matrices themselves), where jax's rule has XLA
    transpose the whole batch before and after the call. Otherwise as jax's rule; its NaN for
    info < 0 is left out: info < 0 means an illegal LAPACK argument, which the handler rules
    out (it reports a bad shape as an error instead)."""
    operand_aval, = ctx.avals_in
    out_aval, pivot_aval, perm_aval = ctx.avals_out
    info_aval = core.ShapedArray(operand_aval.shape[:-2], np.dtype(np.int32))
    lu, ipiv, _ = _getrf_row_major(ctx.replace(avals_out=[out_aval, pivot_aval, info_aval]),
                                   operand)
    pivots = hlo.subtract(ipiv, mlir.full_like_aval(ctx, 1, pivot_aval))
    m = operand_aval.shape[-2]
    permutation = mlir.lower_fun(
        lambda p: lax_linalg.lu_pivots_to_permutation(p, m), multiple_results=False)
    perm, = permutation(ctx.replace(primitive=None, avals_in=[pivot_aval], avals_out=[perm_aval]),
                        pivots)
    return [lu, pivots, perm]


def qr(ctx, operand, *, full_matrices, **_):
    """jax's qr (without pivoting: the routing table's condition) as one ferrax_qr call, which
    does per matrix in cache what jax's steps do in four XLA passes over the batch."""
    return _primitives.qr_lowering(ctx, operand, full_matrices=full_matrices)


#: ferrax's lu_solve_p (jax's lu_solve: permute, two triangular solves) as one ferrax_lu_solve
#: call.
lu_solve = _primitives.lu_solve_fused_lowering

#: ferrax's cholesky_p (jax's whole cholesky: symmetrize, factor, NaN where it fails, tril) as
#: one ferrax_cholesky call.
cholesky = _primitives.cholesky_fused_lowering


def potrf(ctx, operand):
    """jax's cholesky_p on ferrax_potrf with jaxlib's LAPACK contract (uplo 'L', NaN where info
    fails): jax's CPU rule, ``_cholesky_cpu_lowering``, naming ferrax's target."""
    operand_aval, = ctx.avals_in
    out_aval, = ctx.avals_out
    batch_dims = operand_aval.shape[:-2]
    info_aval = core.ShapedArray(batch_dims, np.dtype(np.int32))
    rule = lax_linalg._linalg_ffi_lowering(_targets.POTRF, avals_out=[operand_aval, info_aval],
                                           operand_output_aliases={0: 0})
    result, info = rule(ctx, operand, uplo=lax_linalg._matrix_uplo_attr(True))
    ok = mlir.compare_hlo(info, mlir.full_like_aval(ctx, 0, info_aval), "EQ", "SIGNED")
    return [lax_linalg._replace_not_ok_with_nan(ctx, batch_dims, ok, result, out_aval)]


# jax's geqrf, householder_product and ormqr rules, with ferrax's (LAPACK-contract) targets
# in place of the names they build.
def geqrf(ctx, a):
    return lax_linalg._linalg_ffi_lowering(_targets.GEQRF, operand_output_aliases={0: 0})(ctx, a)


def orgqr(ctx, a, taus):
    return lax_linalg._linalg_ffi_lowering(_targets.ORGQR, operand_output_aliases={0: 0})(
        ctx, a, taus)


def ormqr(ctx, a, taus, c, *, left, transpose):
    return lax_linalg._linalg_ffi_lowering(_targets.ORMQR, operand_output_aliases={2: 0})(
        ctx, a, taus, c, left=left, transpose=transpose)


def _transposed(x, aval):
    """``x`` with its last two dimensions swapped (and ``aval``'s shape to match). A row-major
    array is, byte for byte, the column-major layout of its transpose, so XLA makes this no
    copy where a column-major custom call takes the result."""
    perm = list(range(aval.ndim))
    perm[-2:] = perm[-1], perm[-2]
    shape = aval.shape[:-2] + aval.shape[-2:][::-1]
    return hlo.transpose(x, mlir.dense_int_array(perm)), aval.update(shape=shape)


_jax_triangular_solve_cpu = lax_linalg._triangular_solve_cpu_lower


def triangular_solve_transposed(ctx, a, b, *, left_side, lower, transpose_a, conjugate_a,
                                unit_diagonal):
    """jax's CPU rule (ferrax_trsm through prepare_lapack_call) on the transposes. jax's rule
    hands ?trsm column-major copies of a and b and transposes the solution back; on the
    transposes instead (free, see _transposed): op(A)·X = B is Xᵀ·op(A)ᵀ = Bᵀ and
    op(A)ᵀ = op(Aᵀ), so the same solve with the side and the triangle swapped (1.2-1.4x faster
    end to end in benches/cpu_linalg.py; for Cholesky the same trick measured no gain)."""
    (a_t, a_aval_t), (b_t, b_aval_t) = (_transposed(x, aval) for x, aval in zip((a, b), ctx.avals_in))
    ctx_t = ctx.replace(avals_in=[a_aval_t, b_aval_t], avals_out=[b_aval_t])
    out_t, = _jax_triangular_solve_cpu(
        ctx_t, a_t, b_t, left_side=not left_side, lower=not lower, transpose_a=transpose_a,
        conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
    return [_transposed(out_t, b_aval_t)[0]]


def tridiagonal_solve_perturbed(ctx, dl, d, du, b, *, perturb_singular):
    """jax's rule for perturb_singular, which names its target outright, with ferrax's: same
    operands, layouts and result (CPU and CUDA)."""
    rule = lax_linalg._linalg_ffi_lowering(_targets.TRIDIAGONAL_SOLVE_PERTURBED,
                                           avals_out=[ctx.avals_in[-1]])
    return rule(ctx, dl, d, du, b)


def tridiagonal_solve_cuda(ctx, dl, d, du, b, *, perturb_singular):
    """jax's GPU rule with ferrax's kernel in place of cuSPARSE's gtsv2 (same operands, x
    aliasing b, every order where jax decomposes m <= 2 in XLA ops) and of jaxlib's perturbed
    kernel."""
    if perturb_singular:
        return tridiagonal_solve_perturbed(ctx, dl, d, du, b, perturb_singular=True)
    rule = lax_linalg._linalg_ffi_lowering(_targets.TRIDIAGONAL_SOLVE,
                                           operand_output_aliases={3: 0})
    return rule(ctx, dl, d, du, b)


def csr_spmm(ctx, data, outer_indices, inner_indices, rhs):
    """jax's CPU sparse rule (``_csr_spmm_cpu_lowering``) with ferrax's target: same operands,
    layouts and (no) attributes."""
    return jax_ffi.ffi_lowering(_targets.CSR_SPARSE_DENSE)(ctx, data, outer_indices,
                                                          inner_indices, rhs)


def csr_product(ctx, data, indices, indptr, x, **_):
    """jax's ``csr_spmv_p`` and ``csr_spmm_p`` (operands data, indices, indptr, x; the CUDA
    rule's too) untransposed (the routing condition): ferrax_csr_sparse_dense, which takes the
    offsets before the columns. jax's own CPU rule fails on these primitives' parameters."""
    data_aval, indices_aval, indptr_aval, x_aval = ctx.avals_in
    sub_ctx = ctx.replace(avals_in=[data_aval, indptr_aval, indices_aval, x_aval])
    return jax_ffi.ffi_lowering(_targets.CSR_SPARSE_DENSE)(sub_ctx, data, indptr, indices, x)


def coo_product(ctx, data, row, col, x, *, transpose, shape, **_):
    """jax's ``coo_spmv_p`` and ``coo_spmm_p`` of a 2-D matrix (operands data, row, col, x;
    the CUDA rule's too): ferrax_coo_sparse_dense, the indices stacked into its ``[nnz, 2]``
    (a pass over them, far smaller than the product's)."""
    data_aval, row_aval, _, x_aval = ctx.avals_in
    nnz, = row_aval.shape
    column = mlir.aval_to_ir_type(ctx.module_context, row_aval.update(shape=(nnz, 1)))
    indices = hlo.concatenate([hlo.reshape(column, row), hlo.reshape(column, col)],
                              mlir.i64_attr(1))
    indices_aval = row_aval.update(shape=(nnz, 2))
    rows, cols = shape
    rule = jax_ffi.ffi_lowering(_targets.COO_SPARSE_DENSE)
    return rule(ctx.replace(avals_in=[data_aval, indices_aval, x_aval]), data, indices, x,
                rows=np.int64(rows), cols=np.int64(cols), transpose=bool(transpose))


def bcoo_dot_general(ctx, data, indices, rhs, *, dimension_numbers, lhs_spinfo, **_):
    """jax's BCOO dot_general of a plain sparse matrix (the routing table's condition) as one
    ferrax_coo_sparse_dense call, where jax's rule has XLA gather rhs's rows, multiply and
    scatter-add them, one serial pass. A rhs contracted on its second dimension is handed over
    transposed, as jax's GPU rule does."""
    (lhs_contract, rhs_contract), _ = dimension_numbers
    data_aval, indices_aval, rhs_aval = ctx.avals_in
    if rhs_aval.ndim == 2 and rhs_contract[0] == 1:
        rhs, rhs_aval = _transposed(rhs, rhs_aval)
    rows, cols = lhs_spinfo.shape
    rule = jax_ffi.ffi_lowering(_targets.COO_SPARSE_DENSE)
    return rule(ctx.replace(avals_in=[data_aval, indices_aval, rhs_aval]), data, indices, rhs,
                rows=np.int64(rows), cols=np.int64(cols), transpose=lhs_contract[0] == 0)


def _threefry2x32(key0, key1, x0, x1):
    return list(random.threefry2x32(key0, key1, x0, x1))


def _lu_pivots_to_permutation(pivots, *, permutation_size):
    return linalg.lu_pivots_to_permutation(pivots, permutation_size)


def _cholesky_update(r, w):
    return linalg.cholesky_update(r, w)


# jax's primitives as ferrax's, which lower to ferrax's targets.
threefry2x32 = mlir.lower_fun(_threefry2x32, multiple_results=True)
lu_pivots_to_permutation = mlir.lower_fun(_lu_pivots_to_permutation, multiple_results=False)
cholesky_update = mlir.lower_fun(_cholesky_update, multiple_results=False)


def cholesky_update_batcher(axis_data, args, dims):
    """A batching rule for jax's cholesky_update, which has none: ferrax's primitive takes
    batches (jax's ``primitive_batchers`` wrapper, unbatched operands binding jax's)."""
    if all(d is None for d in dims):
        return lax_linalg.cholesky_update_p.bind(*args), None
    r, w = (batching.bdim_at_front(x, d, axis_data.size) for x, d in zip(args, dims))
    return linalg.cholesky_update(r, w), 0


# jax.experimental.rnn's LSTM primitives (jaxlib lowers them on GPUs only) on ferrax's RNN
# targets: its parameters are ferrax's with the cell fixed and `allow_tf32` named for cuDNN.
def rnn_fwd(ctx, *args, cudnn_allow_tf32, **params):
    return rnn.fwd_lowering(ctx, *args, mode=rnn.MODES["lstm"], allow_tf32=cudnn_allow_tf32,
                            **params)


def rnn_fwd_cuda(ctx, *args, cudnn_allow_tf32, **params):
    return rnn.cuda_fwd_lowering(ctx, *args, mode=rnn.MODES["lstm"],
                                 allow_tf32=cudnn_allow_tf32, training=True, **params)


def _rnn_bwd_by(lowering):
    def rule(ctx, *args, cudnn_allow_tf32, **params):
        """jax's backward primitive (one weight gradient, shaped as the weights) as one
        ``ferrax_rnn_bwd`` call with one weight group."""
        dw_aval = ctx.avals_out[3]
        grouped = core.ShapedArray((1, *dw_aval.shape), dw_aval.dtype)
        *grads, dw = lowering(ctx.replace(avals_out=[*ctx.avals_out[:3], grouped]), *args,
                              groups=1, mode=rnn.MODES["lstm"], allow_tf32=cudnn_allow_tf32,
                              **params)
        return [*grads, mlir.reshape(ctx, dw, dw_aval)]

    return rule


rnn_bwd = _rnn_bwd_by(rnn.bwd_lowering)
rnn_bwd_cuda = _rnn_bwd_by(rnn.cuda_bwd_lowering)


def rnn_fwd_abstract_eval(x, h_0, c_0, w, seq_lengths, *, cudnn_allow_tf32, **params):
    """jax's forward primitive's shapes without a GPU (jax's asks cuDNN for its reserve's size
    at trace time): ferrax's LSTM's (at least cuDNN's where a GPU can tell)."""
    avals = rnn.rnn_fwd_p.abstract_eval(x, h_0, c_0, w, seq_lengths, mode=rnn.MODES["lstm"],
                                        allow_tf32=cudnn_allow_tf32, training=True, **params)
    return avals


def rnn_fwd_batcher(axis_data, args, dims, **params):
    return rnn.fwd_batcher(jax_rnn.rnn_fwd_p, axis_data, args, dims, **params)


def rnn_bwd_batcher(axis_data, args, dims, *, cudnn_allow_tf32, **params):
    """vmap of jax's backward primitive by ferrax's (whose weight gradient per instance jax's
    has no place for); one jax call per instance where dropout sends it to jaxlib."""
    if params["dropout"]:
        return rnn.map_instances(jax_rnn.rnn_bwd_p, axis_data.size, args, dims,
                                 dict(params, cudnn_allow_tf32=cudnn_allow_tf32))
    outs, out_dims = rnn.bwd_batcher(rnn.rnn_bwd_p, axis_data, args, dims, groups=1,
                                     mode=rnn.MODES["lstm"], allow_tf32=cudnn_allow_tf32,
                                     **params)
    *grads, dw = outs
    return [*grads, dw.reshape(dw.shape[0], *dw.shape[2:])], out_dims
