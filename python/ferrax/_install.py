"""``ferrax.install()``: route jax's own primitives to ferrax targets, per platform.

Only lowering rules change: jax's abstract evaluation, batching and differentiation rules stay,
so unmodified ``jnp.linalg`` / ``jax.scipy.linalg`` / ``jax.random`` / ``jax.experimental.sparse``
code runs on ferrax.

jax's CPU linalg lowerings all name their LAPACK target through one function,
``jaxlib.lapack.prepare_lapack_call``; ferrax's CPU targets keep jaxlib's contract (operands,
attributes, layouts, ``info``), so redirecting that name is all it takes, and jax's own
post-processing (pivot offsets, NaN where ``info`` fails) stays exactly as it is. Three rules
are ferrax's own, all to spare XLA's passes over the batch around the calls (serial or
memory-bound code next to the parallel kernels): triangular_solve calls jax's with transposed
operands (see ``_triangular_solve_cpu``), lu calls a row-major getrf (``_lu_row_major``), and
qr one call for all of jax's steps (``_qr_cpu``); on the GPU lu and qr take the same two
targets (``_lu_cuda``, ``_qr_cuda``), whose kernels read jax's layout themselves. jax's
``cholesky`` symmetrizes and takes ``tril`` outside its primitive, so the function itself is
replaced (in ``jax._src.lax.linalg``, through which jnp.linalg and jax.scipy.linalg call it,
and in ``jax.lax.linalg``) by ``ferrax.linalg.cholesky``, one call for all of it (on the GPU
too for small orders: ``_cholesky_fused_cuda``).

jax's CPU sparse lowering names its target itself: ``_csr_spmm_cpu_lowering`` in
``jax.experimental.sparse._lowerings``, registered for ``csr_spmv_p``/``csr_spmm_p`` and looked up
through the module by the BCSR ``dot_general`` lowering; ferrax swaps in the same rule with its
own target name, in both places.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
import threading
import types

import jax
import jaxlib.lapack as jaxlib_lapack
import numpy as np
from jax._src import config
from jax._src import core
from jax._src import ffi as jax_ffi
from jax._src.interpreters import batching, mlir
from jax._src.lib.mlir.dialects import hlo
from jax._src.lax import linalg as lax_linalg
from jax._src.random import threefry2x32 as jax_threefry
# Imported here rather than on install: importing it registers jax's own sparse lowering rules,
# which must already be in place when install() saves the rules it replaces.
from jax.experimental.sparse import _lowerings as sparse_lowerings

from ferrax import _primitives, _targets as T, linalg, random
from ferrax._lowering import batched_ffi_lowering
from ferrax._registry import register

_lock = threading.Lock()
_saved: dict | None = None

#: jaxlib's LAPACK function base name -> the ferrax target with the same contract (jax names
#: the real and complex routines apart; one ferrax target takes all dtypes).
_LAPACK_TARGETS = {
    "getrf_ffi": T.GETRF, "potrf_ffi": T.POTRF, "trsm_ffi": T.TRSM, "geqrf_ffi": T.GEQRF,
    "orgqr_ffi": T.ORGQR, "ungqr_ffi": T.ORGQR, "ormqr_ffi": T.ORMQR, "unmqr_ffi": T.ORMQR,
    "geqp3_ffi": T.GEQP3, "syevd_ffi": T.SYEVD, "heevd_ffi": T.SYEVD, "gesdd_ffi": T.GESDD,
    "gesvd_ffi": T.GESVD, "gehrd_ffi": T.GEHRD, "sytrd_ffi": T.SYTRD, "hetrd_ffi": T.SYTRD,
    "geev_ffi": T.GEEV, "gees_ffi": T.GEES, "gtsv_ffi": T.GTSV,
}
_jaxlib_prepare_lapack_call = jaxlib_lapack.prepare_lapack_call


def _prepare_lapack_call(fn_base, dtype):
    # jaxlib's version validates the dtype (and initializes its own LAPACK table).
    jaxlib_target = _jaxlib_prepare_lapack_call(fn_base, dtype)
    return _LAPACK_TARGETS.get(fn_base, jaxlib_target)


def _lu_pivots_to_permutation(pivots, *, permutation_size):
    return linalg.lu_pivots_to_permutation(pivots, permutation_size)


def _threefry2x32(key0, key1, x0, x1):
    return list(random.threefry2x32(key0, key1, x0, x1))


_threefry2x32_kernel = mlir.lower_fun(_threefry2x32, multiple_results=True)


def _threefry2x32_cuda(ctx, *args):
    # As jax's GPU rule: a kernel only when asked for, else XLA's fused arithmetic, which is
    # faster than any kernel reading materialized counters. (jax.random.bits also stays fused:
    # on an H200 it beat ferrax's in-kernel-counter bits, 0.87 vs 0.99 ms for 2^28 words.)
    if config.threefry_gpu_kernel_lowering.value:
        return _threefry2x32_kernel(ctx, *args)
    return jax_threefry._threefry2x32_lowering_rule(ctx, *args)


_GPU_THRESHOLDS = json.loads((pathlib.Path(__file__).parent / "gpu_thresholds.json").read_text())


def _ferrax_on_gpu(op, aval):
    """Whether ferrax's GPU target takes ``aval`` (static shape, matrices up to the order
    measured faster than jaxlib: ``gpu_thresholds.json``). The target takes every order, with
    its PTX kernels for small matrices and cuSOLVER/cuBLAS (by other rules than jaxlib's) past
    them; above the threshold jaxlib's own lowering stays."""
    limit = _GPU_THRESHOLDS[op].get(np.dtype(aval.dtype).name, 0)
    return core.is_constant_shape(aval.shape) and _small_lapack_matrices(aval, limit)


@contextlib.contextmanager
def ferrax_on_gpu_everywhere():
    """While active, install() lowers every matrix size of the GPU linear-algebra ops to
    ferrax's targets, past the measured thresholds too (benchmarks and tests of those
    targets)."""
    every = {op: {dtype.name: sys.maxsize for dtype in _primitives.LAPACK_DTYPES}
             for op, limits in _GPU_THRESHOLDS.items() if isinstance(limits, dict)}
    saved = dict(_GPU_THRESHOLDS)
    _GPU_THRESHOLDS.update(every)
    jax.clear_caches()  # lowerings made before would be reused
    try:
        yield
    finally:
        _GPU_THRESHOLDS.clear()
        _GPU_THRESHOLDS.update(saved)
        jax.clear_caches()


def _lu_rule(row_major, jax_prefix):
    """A lowering rule for jax's lu: ferrax_getrf_row_major (``_lu_row_major``) where
    ``row_major(aval)`` holds for the operand, else jax's rule naming its targets with
    ``jax_prefix``."""

    def rule(ctx, operand):
        if row_major(ctx.avals_in[0]):
            return _lu_row_major(ctx, operand)
        return lax_linalg._lu_cpu_gpu_lowering(ctx, operand, target_name_prefix=jax_prefix)

    return rule


_lu_cuda = _lu_rule(lambda aval: _ferrax_on_gpu("getrf", aval), "cu")

#: Up to this order jax's whole cholesky on the GPU is one ferrax_cholesky call (its kernels,
#: which fit every device's default shared memory in every dtype: the library's limit);
#: larger orders take jax's steps.
_GPU_FUSED_CHOLESKY_MAX = T.FUSED_CHOLESKY_BLOCK_MAX

# ferrax's cholesky_p (what install() makes of jax's cholesky): one call in place of jax's
# symmetrize, transposes, NaN select and tril, where ferrax takes potrf at all.
_cholesky_fused_cuda = _primitives.cholesky_rule(
    lambda aval: _ferrax_on_gpu("potrf", aval) and aval.shape[-1] <= _GPU_FUSED_CHOLESKY_MAX)


def _cholesky_cuda(ctx, operand):
    if _ferrax_on_gpu("potrf", ctx.avals_in[0]):
        return lax_linalg._cholesky_cpu_lowering(ctx, operand)  # -> ferrax_potrf, uplo 'L'
    return lax_linalg._cholesky_gpu_lowering(ctx, operand, target_name_prefix="cu")


def _qr_rule(fused):
    """A lowering rule for jax's qr: one ferrax_qr call where ``fused(aval)`` holds for the
    operand (without pivoting), else jax's steps, each lowered by its own rule."""

    def rule(ctx, operand, *, pivoting, full_matrices, use_magma):
        if pivoting or not fused(ctx.avals_in[0]):
            return _jax_qr_lowering(ctx, operand, pivoting=pivoting,
                                    full_matrices=full_matrices, use_magma=use_magma)
        return _qr_fused(ctx, operand, full_matrices=full_matrices)

    return rule


# Sized as jax's steps would be: ferrax_qr replaces ferrax's geqrf and orgqr together.
_qr_cuda = _qr_rule(lambda aval: _ferrax_on_gpu("geqrf", aval) and _ferrax_on_gpu("orgqr", aval))


def _geqrf_cuda(ctx, operand):
    prefix = "cpu" if _ferrax_on_gpu("geqrf", ctx.avals_in[0]) else "cu"
    return lax_linalg._geqrf_cpu_gpu_lowering(ctx, operand, target_name_prefix=prefix)


def _householder_product_cuda(ctx, a, taus):
    prefix = "cpu" if _ferrax_on_gpu("orgqr", ctx.avals_in[0]) else "cu"
    return lax_linalg._householder_product_cpu_gpu_lowering(ctx, a, taus,
                                                            target_name_prefix=prefix)


def _ormqr_cuda(ctx, a, taus, c, *, left, transpose):
    # Sized by c, as jaxlib's choice between its batched kernel and cuSOLVER's loop.
    prefix = "cpu" if _ferrax_on_gpu("ormqr", ctx.avals_in[2]) else "cu"
    return lax_linalg._ormqr_cpu_gpu_lowering(ctx, a, taus, c, left=left, transpose=transpose,
                                              target_name_prefix=prefix)


def _small_lapack_matrices(aval, limit):
    """Whether ``aval`` holds matrices of static orders up to ``limit`` in a LAPACK dtype: what
    ferrax's one-call CPU rules take (jax's rules take the rest)."""
    rows, cols = aval.shape[-2:]
    return (core.is_constant_dim(rows) and core.is_constant_dim(cols) and max(rows, cols) <= limit
            and np.dtype(aval.dtype) in _primitives.LAPACK_DTYPES)


_getrf_row_major = batched_ffi_lowering(T.GETRF_ROW_MAJOR, num_non_batch_dims=2,
                                        column_major=False)

#: Up to this order the CPU lu takes ferrax_getrf_row_major: each task moves its matrices to
#: LAPACK's order and back in cache, where jax's rule has XLA transpose the whole batch before
#: and after the call, apart from the parallel work (jax.lax.linalg.lu, 2 cores, ~4 MB
#: batches: 15% faster at n = 16, 2-12% at 24-128; at 512, matrices past the L2 cache,
#: XLA's transposes are faster: f64 5.1 vs 5.9 ms).
_ROW_MAJOR_LU_MAX = 128


_lu_cpu = _lu_rule(lambda aval: core.is_constant_shape(aval.shape)
                  and _small_lapack_matrices(aval, _ROW_MAJOR_LU_MAX), "cpu")


def _lu_row_major(ctx, operand):
    # jax's rule with ferrax_getrf_row_major, which factors the matrices where jax keeps them
    # (on the GPU too: its kernels stage row-major matrices themselves). jax's NaN for
    # info < 0 is left out: info < 0 means an illegal LAPACK argument, which the handler rules
    # out (it reports a bad shape as an error instead).
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


_qr_fused = _primitives.qr_lowering
_jax_qr_lowering = mlir.lower_fun(lax_linalg._qr_lowering)

#: Up to this order the CPU qr (without pivoting) is one ferrax_qr call, which does per matrix
#: in cache what jax's steps do in four XLA passes over the batch (jnp.linalg.qr, 2 cores,
#: ~4 MB batches: 8.0-8.9 -> ~5 ms at n = 16-64).
_FUSED_QR_MAX = 128


_qr_cpu = _qr_rule(lambda aval: _small_lapack_matrices(aval, _FUSED_QR_MAX))


def _cholesky_update(r, w):
    return linalg.cholesky_update(r, w)


def _cholesky_update_batched(args, dims):
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    r, w = (batching.bdim_at_front(x, d, size) for x, d in zip(args, dims))
    return linalg.cholesky_update(r, w), 0


def _transposed(x, aval):
    """``x`` with its last two dimensions swapped (and ``aval``'s shape to match). A row-major
    array is, byte for byte, the column-major layout of its transpose, so XLA makes this no
    copy where a column-major custom call takes the result."""
    perm = list(range(aval.ndim))
    perm[-2:] = perm[-1], perm[-2]
    shape = aval.shape[:-2] + aval.shape[-2:][::-1]
    return hlo.transpose(x, mlir.dense_int_array(perm)), aval.update(shape=shape)


_jax_triangular_solve_cpu_lowering = lax_linalg._triangular_solve_cpu_lower


def _triangular_solve_cpu(ctx, a, b, *, left_side, lower, transpose_a, conjugate_a,
                          unit_diagonal):
    # jax's rule hands ?trsm column-major copies of a and b and transposes the solution back.
    # On the transposes instead (free, see _transposed): op(A)·X = B is Xᵀ·op(A)ᵀ = Bᵀ and
    # op(A)ᵀ = op(Aᵀ), so the same solve with the side and the triangle swapped (1.2-1.4x
    # faster end to end in benches/cpu_linalg.py; for Cholesky the same trick measured no gain).
    (a_t, a_aval_t), (b_t, b_aval_t) = (_transposed(x, aval) for x, aval in zip((a, b), ctx.avals_in))
    out_aval, = ctx.avals_out
    ctx_t = ctx.replace(avals_in=[a_aval_t, b_aval_t], avals_out=[b_aval_t])
    out_t, = _jax_triangular_solve_cpu_lowering(
        ctx_t, a_t, b_t, left_side=not left_side, lower=not lower, transpose_a=transpose_a,
        conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
    return [_transposed(out_t, b_aval_t)[0]]


_jax_tridiagonal_solve_cpu_lowering = lax_linalg._tridiagonal_solve_cpu_lowering


def _tridiagonal_solve(ctx, dl, d, du, b, *, perturb_singular):
    if not perturb_singular:  # jax's rule, which names ?gtsv through prepare_lapack_call
        return _jax_tridiagonal_solve_cpu_lowering(ctx, dl, d, du, b, perturb_singular=False)
    # jax names this target outright; same operands, layouts and result as jax's rule.
    rule = lax_linalg._linalg_ffi_lowering(T.TRIDIAGONAL_SOLVE_PERTURBED,
                                           avals_out=[ctx.avals_in[-1]])
    return rule(ctx, dl, d, du, b)


def _csr_spmm_cpu_lowering(ctx, data, outer_indices, inner_indices, rhs):
    # jax's rule with ferrax's target: same operands, layouts and (no) attributes.
    return jax_ffi.ffi_lowering(T.CSR_SPARSE_DENSE)(ctx, data, outer_indices, inner_indices, rhs)


def _routes():
    """(platform, jax primitive, lowering rule) for every primitive ferrax takes over."""
    pivots = mlir.lower_fun(_lu_pivots_to_permutation, multiple_results=False)
    return [
        ("cpu", lax_linalg.lu_pivots_to_permutation_p, pivots),
        ("cuda", lax_linalg.lu_pivots_to_permutation_p, pivots),
        ("cuda", jax_threefry.threefry2x32_p, _threefry2x32_cuda),
        ("cuda", lax_linalg.lu_p, _lu_cuda),
        ("cuda", lax_linalg.qr_p, _qr_cuda),
        ("cuda", lax_linalg.cholesky_p, _cholesky_cuda),
        ("cuda", _primitives.cholesky_p, _cholesky_fused_cuda),
        ("cuda", lax_linalg.geqrf_p, _geqrf_cuda),
        ("cuda", lax_linalg.householder_product_p, _householder_product_cuda),
        ("cuda", lax_linalg.ormqr_p, _ormqr_cuda),
        ("cuda", lax_linalg.cholesky_update_p,
         mlir.lower_fun(_cholesky_update, multiple_results=False)),
        ("cpu", lax_linalg.lu_p, _lu_cpu),
        ("cpu", lax_linalg.qr_p, _qr_cpu),
        ("cpu", lax_linalg.triangular_solve_p, _triangular_solve_cpu),
        ("cpu", jax_threefry.threefry2x32_p, _threefry2x32_kernel),
        ("cpu", lax_linalg.tridiagonal_solve_p, _tridiagonal_solve),
        ("cpu", sparse_lowerings.csr_spmv_p, _csr_spmm_cpu_lowering),
        ("cpu", sparse_lowerings.csr_spmm_p, _csr_spmm_cpu_lowering),
    ]


def _module_routes():
    """(module, attribute, replacement) for lowering rules that jax calls through a module."""
    return [(sparse_lowerings, "_csr_spmm_cpu_lowering", _csr_spmm_cpu_lowering),
            # jnp.linalg / jax.scipy.linalg call jax's cholesky through its module; its
            # symmetrize and tril are XLA passes outside cholesky_p, which ferrax's does in
            # the call (see ferrax.linalg.cholesky).
            (lax_linalg, "cholesky", linalg.cholesky),
            (jax.lax.linalg, "cholesky", linalg.cholesky)]


def install() -> None:
    """Lowers jax's primitives that have a ferrax target to ferrax (idempotent). Compiled
    functions are dropped from jax's caches so that the next call recompiles."""
    global _saved
    register()
    with _lock:
        if _saved is not None:
            return
        _saved = {}
        jaxlib_lapack.prepare_lapack_call = _prepare_lapack_call
        for platform, prim, rule in _routes():
            _saved[(platform, prim)] = mlir._platform_specific_lowerings[platform].get(prim)
            mlir.register_lowering(prim, rule, platform=platform)
        for module, name, replacement in _module_routes():
            _saved[(module, name)] = getattr(module, name)
            setattr(module, name, replacement)
        # jax's cholesky_update has no batching rule; ferrax's primitive takes batches.
        _saved[(batching, lax_linalg.cholesky_update_p)] = \
            batching.fancy_primitive_batchers.get(lax_linalg.cholesky_update_p)
        batching.primitive_batchers[lax_linalg.cholesky_update_p] = _cholesky_update_batched
    jax.clear_caches()


def uninstall() -> None:
    """Restores jax's own lowering rules (idempotent)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        jaxlib_lapack.prepare_lapack_call = _jaxlib_prepare_lapack_call
        for (owner, key), entry in _saved.items():
            if owner is batching and entry is None:
                batching.fancy_primitive_batchers.pop(key, None)
            elif owner is batching:
                batching.fancy_primitive_batchers[key] = entry
            elif isinstance(owner, types.ModuleType):  # a _module_routes() attribute
                setattr(owner, key, entry)
            elif entry is None:
                mlir._platform_specific_lowerings[owner].pop(key, None)
            else:
                mlir._platform_specific_lowerings[owner][key] = entry
        _saved = None
    jax.clear_caches()


def installed() -> bool:
    return _saved is not None
