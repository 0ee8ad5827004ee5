"""``ferrax.install()``: route jax's own primitives to ferrax targets, per platform.

Only lowering rules change: jax's abstract evaluation, batching and differentiation rules stay,
so unmodified ``jnp.linalg`` / ``jax.scipy.linalg`` / ``jax.random`` / ``jax.experimental.sparse``
code runs on ferrax. Three tables say everything install() does:

- ``_LAPACK_TARGETS``: jax's CPU linalg rules name their LAPACK target through one function,
  ``jaxlib.lapack.prepare_lapack_call``; ferrax's CPU targets keep jaxlib's contract
  (operands, attributes, layouts, ``info``), so redirecting that name is all it takes for
  every jax CPU rule not in the routing table, and jax's own post-processing (pivot offsets,
  NaN where ``info`` fails) stays exactly as it is.
- ``ROUTES``, the routing table: per (platform, primitive), the condition under which ferrax's
  rule (``_rules``) lowers it, and else jax's own rule. The CPU rows spare XLA's passes over
  the batch around the calls (serial or memory-bound code next to the parallel kernels); the
  CUDA rows take ferrax's kernels up to the orders measured faster than jaxlib's
  (``gpu_thresholds.json``).
- ``_PATCHES``: everything install() replaces and uninstall() restores, each a ``Patch`` that
  saves and restores itself: the LAPACK names, the table's lowering rules, module attributes
  (jax's ``cholesky`` becomes ``ferrax.linalg.cholesky``, one call where jax symmetrizes and
  takes ``tril`` outside its primitive; the sparse rule the BCSR lowering looks up), batching
  rules, the shapes of jax's RNN (sized by ferrax, where jax's ask a GPU), and
  ``jax.ffi.ffi_lowering``, through which jax-triton's calls reach ferrax's kernel-call target.

Every rule install() places lowers by jax's own rule when lowering for a plain
``jax.export.export`` (``_export``): the rows' rules, jax's other CPU linalg rules (wrapped so
that ``prepare_lapack_call`` keeps jaxlib's names for them), the sparse rule; the module
attributes bind ferrax primitives whose rules do the same (ferrax's ``cholesky_p``: jax's
steps). ``ferrax.export`` is the opt-in to ferrax's rules in an export.

Target names and the kernels' own limits come from libferrax (``_targets``).
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
import threading
from typing import Any, Callable, NamedTuple

import jax
import jaxlib.lapack as jaxlib_lapack
import numpy as np
from jax._src import config
from jax._src import core
from jax._src.interpreters import batching, mlir
from jax._src.lax import linalg as lax_linalg
from jax._src.random import threefry2x32 as jax_threefry
from jax.experimental import rnn as jax_rnn
from jax.experimental.sparse import bcoo as jax_bcoo
from jax.experimental.sparse import coo as jax_coo
from jax.experimental.sparse import csr as jax_csr
from jax.experimental.sparse import linalg as jax_sparse_linalg
# Imported here rather than on install: importing it registers jax's own sparse lowering rules,
# which must already be in place when install() saves the rules it replaces.
from jax.experimental.sparse import _lowerings as sparse_lowerings

from ferrax import _export, _kernel_call, _primitives, _rules, _targets as T, linalg, rnn, sparse
from ferrax._registry import register

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
    if _export.lapack_names_stock():  # a plain export: jaxlib's (export-stable) name
        return jaxlib_target
    return _LAPACK_TARGETS.get(fn_base, jaxlib_target)


# ---- The routing table's conditions: (ctx, **params) -> whether ferrax's rule lowers. ----

def _matrices(aval, limit):
    """Whether ``aval`` holds matrices of static orders up to ``limit`` in a LAPACK dtype."""
    rows, cols = aval.shape[-2:]
    return (core.is_constant_dim(rows) and core.is_constant_dim(cols) and max(rows, cols) <= limit
            and np.dtype(aval.dtype) in _primitives.LAPACK_DTYPES)


def _cpu(limit, *, static_shapes=False):
    """Where the (first) operand's matrices have orders up to ``limit`` (and, with
    ``static_shapes``, every operand's whole shape is static)."""
    return lambda ctx, **_: ((not static_shapes
                              or all(core.is_constant_shape(a.shape) for a in ctx.avals_in))
                             and _matrices(ctx.avals_in[0], limit))


_GPU_THRESHOLDS = json.loads((pathlib.Path(__file__).parent / "gpu_thresholds.json").read_text())


def _gpu(*ops, operand=0, cap=sys.maxsize):
    """Where operand ``operand`` has a static shape and matrices up to the order at which
    ferrax's GPU target of each of ``ops`` was measured faster than jaxlib's
    (``gpu_thresholds.json``, per dtype), and up to ``cap``. The targets take every order,
    with PTX kernels for small matrices and cuSOLVER/cuBLAS (by other rules than jaxlib's)
    past them."""

    def when(ctx, **_):
        aval = ctx.avals_in[operand]
        limit = min(cap, *(_GPU_THRESHOLDS[op].get(np.dtype(aval.dtype).name, 0) for op in ops))
        return core.is_constant_shape(aval.shape) and _matrices(aval, limit)

    return when


def _unpivoted(when):
    return lambda ctx, *, pivoting, **params: not pivoting and when(ctx, **params)


def _perturb_singular(ctx, *, perturb_singular):
    return perturb_singular


#: Systems from which ferrax's CUDA tridiagonal solve (one thread per system) takes jax's
#: tridiagonal_solve with one right-hand side, where jaxlib's is cuSPARSE's gtsv2StridedBatch
#: (parallel within a system too). With several right-hand sides jaxlib launches gtsv2 once
#: per system, and ferrax takes any batch of two or more. Not measured yet: chosen by the
#: kernels' design, no GPU in the session that wrote it (scripts/gpu-check times both).
GPU_TRIDIAGONAL_MIN_BATCH = 1024
#: Set by ferrax_on_gpu_everywhere: ferrax's GPU targets past every threshold and condition of
#: choice (not of ability).
_GPU_EVERYWHERE = False


def _tridiagonal_solve_gpu(ctx, *, perturb_singular):
    """The perturbed solve always (jaxlib's is one thread per system too); the plain one where
    the batch keeps the GPU's threads busy or jaxlib would loop over it."""
    if perturb_singular:
        return True
    b = ctx.avals_in[3]
    if not core.is_constant_shape(b.shape):
        return False
    batch, nrhs = int(np.prod(b.shape[:-2], dtype=np.int64)), b.shape[-1]
    return batch >= GPU_TRIDIAGONAL_MIN_BATCH or (nrhs > 1 and batch > 1)


def _without_dropout(ctx, *, dropout, **_):
    # Dropout needs cuDNN's masks: jaxlib's target on GPUs (and an error on the CPU).
    return float(dropout) == 0.0


#: The element dtypes of ferrax_coo_sparse_dense and the index dtypes of the sparse targets.
_COO_DTYPES = {np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128,
                                     np.int32, np.int64)}
_SPARSE_INDEX_DTYPES = {np.dtype(np.int32), np.dtype(np.int64)}


def _plain_bcoo(ctx, *, dimension_numbers, lhs_spinfo, **_):
    """A BCOO dot_general that ferrax_coo_sparse_dense computes: a static 2-D sparse matrix
    without batch or dense dimensions, one contracted dimension, a vector or matrix rhs, one
    dtype throughout."""
    (lhs_contract, _), (lhs_batch, _) = dimension_numbers
    data, indices, rhs = ctx.avals_in
    out, = ctx.avals_out
    return (data.ndim == 1 and indices.shape[1:] == (2,) and len(lhs_spinfo.shape) == 2
            and not lhs_batch and len(lhs_contract) == 1 and rhs.ndim in (1, 2)
            and all(core.is_constant_shape(s) for s in (data.shape, indices.shape, rhs.shape,
                                                       lhs_spinfo.shape))
            and data.dtype == rhs.dtype == out.dtype and np.dtype(data.dtype) in _COO_DTYPES
            and np.dtype(indices.dtype) in _SPARSE_INDEX_DTYPES)


def _sparse_indices(ctx, **_):
    """The two index operands (CSR's columns and offsets, COO's rows and columns, spsolve's
    indices and indptr: operands 1 and 2) share a dtype the sparse targets take."""
    first, second = ctx.avals_in[1:3]
    return first.dtype == second.dtype and np.dtype(first.dtype) in _SPARSE_INDEX_DTYPES


def _sparse_product(*, csr, gpu):
    """jax's CSR and COO product primitives (``csr_spmv_p``, ``coo_spmm_p``, ...) that
    ferrax's targets compute: static shapes, a 2-D matrix (not jax's batched COO), CSR
    untransposed, int32 or int64 indices; on the GPU, float dtypes."""

    def when(ctx, *, transpose, shape, **_):
        data = ctx.avals_in[0]
        return (len(shape) == 2 and not (csr and transpose) and _sparse_indices(ctx)
                and all(core.is_constant_shape(a.shape) for a in ctx.avals_in)
                and (not gpu or np.dtype(data.dtype) in _primitives.LAPACK_DTYPES))

    return when


def _sparse_product_routes(platform):
    """jax's four CSR and COO product primitives on ``platform``."""
    S, gpu = sparse_lowerings, platform != "cpu"
    return [Route(platform, primitive, _sparse_product(csr=csr, gpu=gpu), rule)
            for csr, rule, primitives in ((True, _rules.csr_product, (S.csr_spmv_p, S.csr_spmm_p)),
                                          (False, _rules.coo_product, (S.coo_spmv_p, S.coo_spmm_p)))
            for primitive in primitives]


def _transposed_product(ctx, *, transpose, **_):
    return transpose


def _plain_bcoo_gpu(ctx, **params):
    """A BCOO dot_general on CUDA that ferrax takes: float dtypes, where the user asked jax for
    a sparse library's product (``jax_bcoo_cusparse_lowering``; jax's default is XLA's gather
    and scatter-add, which ferrax's kernel matches in its work until gpu-check measures them)
    or ferrax_on_gpu_everywhere is on."""
    return ((config.bcoo_cusparse_lowering.value or _GPU_EVERYWHERE)
            and np.dtype(ctx.avals_in[0].dtype) in _primitives.LAPACK_DTYPES
            and _plain_bcoo(ctx, **params))


def _threefry_kernel_asked(ctx):
    # As jax's GPU rule: a kernel only when asked for, else XLA's fused arithmetic, which is
    # faster than any kernel reading materialized counters. (jax.random.bits also stays fused:
    # on an H200 it beat ferrax's in-kernel-counter bits, 0.87 vs 0.99 ms for 2^28 words.)
    return config.threefry_gpu_kernel_lowering.value


# ---- The routing table. ----


class Route(NamedTuple):
    """On ``platform``, ``primitive`` lowers by ``ferrax`` where ``when(ctx, **params)`` holds
    (always where ``when`` is None), else by jax's own rule: the one registered for it (for the
    platform, else its default; for ferrax's cholesky_p, jax's steps) when ferrax is imported.
    ``on_import``: the row holds from ``import ferrax`` on (ferrax's own primitive); every
    other row only while installed."""
    platform: str
    primitive: core.Primitive
    when: Callable[..., bool] | None
    ferrax: Callable
    on_import: bool = False


ALWAYS = None
L, P, R, S = lax_linalg, _primitives, _rules, sparse_lowerings

ROUTES = [  # Route(platform, primitive, ferrax where (else jax's rule), ferrax's rule)
    # ferrax_getrf_row_major at every order: each task interleaves its small matrices in cache
    # or factors larger ones where they are, and from order 128 with fewer matrices than
    # threads (from 257 always) each matrix is factored where it is, over all the threads,
    # where jax's rule has XLA transpose the whole batch before and after the call, apart from
    # the parallel work (jax's lu, 2 cores, ~2 MB batches, stock -> ferrax: f64 2048x16 2.8 ->
    # 0.55 ms, 128x64 2.5 -> 0.64 ms; one 512x512 f64 matrix: 5.9 -> 3.2 ms).
    Route("cpu", L.lu_p, _cpu(sys.maxsize, static_shapes=True), R.lu_row_major),
    # One ferrax_qr call at every order (without pivoting), where jax's rule makes geqrf,
    # householder_product and XLA passes (jnp.linalg.qr, 2 cores, ~4 MB batches: 8.0-8.9 ->
    # ~5 ms at n = 16-64, 8x256 f64 12.8 -> 10.9 ms); from order 128 with fewer matrices than
    # threads (from 257 always) each matrix is factored over all the threads (one 512x512:
    # f64 ~16 -> ~11 ms, c128 ~30 -> ~21 ms).
    Route("cpu", L.qr_p, _unpivoted(_cpu(sys.maxsize)), R.qr),
    # ferrax's cholesky_p: what install() makes of jax's cholesky, and ferrax.linalg.cholesky:
    # one ferrax_cholesky call at every order, where jax's rule makes an XLA pass over the batch
    # for each step (symmetrize, factor, NaN where it fails, tril), and from order 128 with
    # fewer matrices than threads (from 257 always) each matrix is factored over all the
    # threads (jnp.linalg.cholesky, 2 cores, one 512x512 matrix: f64 5.1 -> 1.7 ms, c128 5.9 ->
    # 4.2 ms; 8x512 f64 14.0 -> 12.1 ms, 2x256 0.87 -> 0.73 ms).
    Route("cpu", P.cholesky_p, _cpu(sys.maxsize), R.cholesky, on_import=True),
    # ferrax's lu_solve_p: what install() makes of jax's lu_solve (jnp.linalg.solve's too), one
    # ferrax_lu_solve call at every order where jax's rule makes an XLA gather and two
    # triangular solves, each a pass over the batch (jnp.linalg.solve, 2 cores, ~4 MB batches,
    # 1 or n right-hand sides: 1.1-3.3x faster at n = 32-256; one 1024x1024 system, 1 or 1024
    # right-hand sides, getrf being ferrax's over all the threads: f64 17.2 -> 12.9 and
    # 54 -> 32 ms, c128 50 -> 33 and 140 -> 113 ms).
    Route("cpu", P.lu_solve_p, _cpu(sys.maxsize, static_shapes=True), R.lu_solve,
          on_import=True),
    Route("cpu", L.triangular_solve_p, ALWAYS, R.triangular_solve_transposed),
    Route("cpu", L.tridiagonal_solve_p, _perturb_singular, R.tridiagonal_solve_perturbed),
    Route("cpu", L.lu_pivots_to_permutation_p, ALWAYS, R.lu_pivots_to_permutation),
    Route("cpu", jax_threefry.threefry2x32_p, ALWAYS, R.threefry2x32),
    *_sparse_product_routes("cpu"),
    # BCOO products: XLA's gather and scatter-add in jax's rule, one serial pass.
    Route("cpu", jax_bcoo.bcoo_dot_general_p, _plain_bcoo, R.bcoo_dot_general),
    # jax's spsolve: a Python callback into scipy on the CPU.
    Route("cpu", jax_sparse_linalg.spsolve_p, _sparse_indices, sparse.lowering),
    # jax.experimental.rnn's LSTM, which jaxlib lowers on GPUs only, and ferrax.rnn's cells.
    Route("cpu", jax_rnn.rnn_fwd_p, ALWAYS, R.rnn_fwd),
    Route("cpu", jax_rnn.rnn_bwd_p, ALWAYS, R.rnn_bwd),
    Route("cpu", rnn.rnn_fwd_p, ALWAYS, rnn.fwd_lowering, on_import=True),
    Route("cpu", rnn.rnn_bwd_p, ALWAYS, rnn.bwd_lowering, on_import=True),
    Route("cuda", L.lu_p, _gpu("getrf"), R.lu_row_major),
    # Sized as jax's steps would be: ferrax_qr replaces ferrax's geqrf and orgqr together.
    Route("cuda", L.qr_p, _unpivoted(_gpu("geqrf", "orgqr")), R.qr),
    Route("cuda", L.cholesky_p, _gpu("potrf"), R.potrf),
    # ferrax_cholesky's CUDA kernels take orders up to the library's limit.
    Route("cuda", P.cholesky_p, _gpu("potrf", cap=T.FUSED_CHOLESKY_BLOCK_MAX), R.cholesky),
    Route("cuda", L.geqrf_p, _gpu("geqrf"), R.geqrf),
    Route("cuda", L.householder_product_p, _gpu("orgqr"), R.orgqr),
    # Sized by c, as jaxlib's choice between its batched kernel and cuSOLVER's loop.
    Route("cuda", L.ormqr_p, _gpu("ormqr", operand=2), R.ormqr),
    Route("cuda", L.lu_pivots_to_permutation_p, ALWAYS, R.lu_pivots_to_permutation),
    Route("cuda", jax_threefry.threefry2x32_p, _threefry_kernel_asked, R.threefry2x32),
    Route("cuda", L.cholesky_update_p, ALWAYS, R.cholesky_update),
    Route("cuda", L.tridiagonal_solve_p, _tridiagonal_solve_gpu, R.tridiagonal_solve_cuda),
    # jaxlib's cuSPARSE rules ask the GPU for descriptors while lowering; ferrax's need none.
    # BCSR's and BCOO's products reach these under jax_bcoo_cusparse_lowering.
    *_sparse_product_routes("cuda"),
    Route("cuda", jax_bcoo.bcoo_dot_general_p, _plain_bcoo_gpu, R.bcoo_dot_general),
    # The legacy CSR and COO classes' dense conversions and CSR's transposed products, which
    # jaxlib's cuSPARSE rules lower on a GPU only: jax's own XLA rules (its CPU path).
    Route("cuda", jax_coo.coo_todense_p, ALWAYS, jax_coo._coo_todense_lowering),
    Route("cuda", jax_coo.coo_fromdense_p, ALWAYS, jax_coo._coo_fromdense_lowering),
    Route("cuda", jax_csr.csr_todense_p, ALWAYS, jax_csr._csr_todense_lowering),
    Route("cuda", jax_csr.csr_fromdense_p, ALWAYS, jax_csr._csr_fromdense_lowering),
    Route("cuda", jax_csr.csr_matvec_p, _transposed_product, jax_csr._csr_matvec_lowering),
    Route("cuda", jax_csr.csr_matmat_p, _transposed_product, jax_csr._csr_matmat_lowering),
    # jax's spsolve: jaxlib's csrlsvqr, a sparse QR on the GPU that waits for the stream and
    # fails on a singular matrix; ferrax's solves on the host from the device's buffers.
    Route("cuda", jax_sparse_linalg.spsolve_p, _sparse_indices, sparse.lowering),
    # ferrax's RNN takes every shape; the lengths stay on the device (jaxlib's cuDNN target
    # copies them to the host and waits for it).
    Route("cuda", jax_rnn.rnn_fwd_p, _without_dropout, R.rnn_fwd_cuda),
    Route("cuda", jax_rnn.rnn_bwd_p, _without_dropout, R.rnn_bwd_cuda),
    Route("cuda", rnn.rnn_fwd_p, _without_dropout, rnn.cuda_fwd_lowering, on_import=True),
    Route("cuda", rnn.rnn_bwd_p, _without_dropout, rnn.cuda_bwd_lowering, on_import=True),
]
del L, P, R, S


def _no_rule(route):
    """What jax does where it has no rule for the platform (its RNN on the CPU)."""

    def rule(ctx, *args, **params):
        raise NotImplementedError(f"MLIR translation rule for primitive '{route.primitive.name}' "
                                  f"not found for platform {route.platform}")

    return rule


def _rule(route):
    """``route``'s lowering rule: its ferrax rule where its condition holds, else jax's; jax's
    too when lowering for a plain ``jax.export`` (``_export``)."""
    entry = (mlir._platform_specific_lowerings[route.platform].get(route.primitive)
             or mlir._lowerings.get(route.primitive))
    jax_rule = entry.rule if entry else _no_rule(route)

    def rule(ctx, *args, **params):
        with _export.lowering(ctx) as stock:
            ferrax = not stock and (route.when is ALWAYS or route.when(ctx, **params))
            return (route.ferrax if ferrax else jax_rule)(ctx, *args, **params)

    return rule


_RULES = [(route, _rule(route)) for route in ROUTES]  # jax's rules, before any row replaces them
for _route, _routed in _RULES:
    if _route.on_import:
        mlir.register_lowering(_route.primitive, _routed, platform=_route.platform)
del _route, _routed


@contextlib.contextmanager
def ferrax_on_gpu_everywhere():
    """While active, install() lowers every matrix size of the GPU linear-algebra ops to
    ferrax's targets, past the measured thresholds too (benchmarks and tests of those
    targets)."""
    global GPU_TRIDIAGONAL_MIN_BATCH, _GPU_EVERYWHERE
    every = {op: {dtype.name: sys.maxsize for dtype in _primitives.LAPACK_DTYPES}
             for op, limits in _GPU_THRESHOLDS.items() if isinstance(limits, dict)}
    saved_thresholds, saved_min_batch = dict(_GPU_THRESHOLDS), GPU_TRIDIAGONAL_MIN_BATCH
    _GPU_THRESHOLDS.update(every)
    GPU_TRIDIAGONAL_MIN_BATCH, _GPU_EVERYWHERE = 1, True
    jax.clear_caches()  # lowerings made before would be reused
    try:
        yield
    finally:
        _GPU_THRESHOLDS.clear()
        _GPU_THRESHOLDS.update(saved_thresholds)
        GPU_TRIDIAGONAL_MIN_BATCH, _GPU_EVERYWHERE = saved_min_batch, False
        jax.clear_caches()


# ---- What install() replaces. ----

_ABSENT = object()  # what a Patch reads where there is nothing, and writes to remove it


class Patch(NamedTuple):
    """One thing install() replaces by ``new`` and uninstall() restores: ``get()`` reads it,
    ``set(value)`` writes it."""
    get: Callable[[], Any]
    set: Callable[[Any], None]
    new: Any


def _item(table: dict, key, new) -> Patch:
    def set_(value):
        if value is _ABSENT:
            table.pop(key, None)
        else:
            table[key] = value

    return Patch(lambda: table.get(key, _ABSENT), set_, new)


def _attribute(owner, name: str, new) -> Patch:
    def set_(value):
        if value is not _ABSENT:
            setattr(owner, name, value)
        elif hasattr(owner, name):
            delattr(owner, name)

    return Patch(lambda: getattr(owner, name, _ABSENT), set_, new)


def _lapack_names_rules() -> list[Patch]:
    """jax's other CPU linalg rules, each as it is, but telling ``_prepare_lapack_call``
    whether it lowers for a plain export (which keeps jaxlib's names). Every jax rule that
    names a LAPACK target is a CPU rule of a ``jax._src.lax.linalg`` primitive."""
    routed = {route.primitive for route in ROUTES if route.platform == "cpu"}
    cpu = mlir._platform_specific_lowerings["cpu"]
    primitives = [p for p in vars(lax_linalg).values()
                  if isinstance(p, core.Primitive) and p in cpu and p not in routed]
    return [_item(cpu, p, mlir.LoweringRuleEntry(
        _export.stock_when_exporting(cpu[p].rule, cpu[p].rule), cpu[p].inline))
        for p in primitives]


_jax_csr_spmm_cpu = sparse_lowerings._csr_spmm_cpu_lowering


def _cusparse_rule(name: str, when: Callable[..., bool], ferrax: Callable) -> Patch:
    """Replaces jax's cuSPARSE rule ``name`` in its module, which BCSR's product (under
    jax_bcoo_cusparse_lowering) and the legacy CSR and COO classes call outright: ferrax's rule
    on CUDA where ``when`` holds, else jax's."""
    jax_rule = getattr(sparse_lowerings, name)

    def rule(ctx, *args, target_name_prefix, **params):
        if target_name_prefix == "cu" and when(ctx, **params):
            return ferrax(ctx, *args, **params)
        return jax_rule(ctx, *args, target_name_prefix=target_name_prefix, **params)

    return _attribute(sparse_lowerings, name, _export.stock_when_exporting(rule, jax_rule))

_PATCHES = [
    _attribute(jaxlib_lapack, "prepare_lapack_call", _prepare_lapack_call),
    *_lapack_names_rules(),
    # The routing table's rows (but ferrax's own primitive's, in place since import).
    *(_item(mlir._platform_specific_lowerings[route.platform], route.primitive,
            mlir.LoweringRuleEntry(rule, True))
      for route, rule in _RULES if not route.on_import),
    # The BCSR dot_general lowering looks jax's CPU sparse rule up through its module.
    _attribute(sparse_lowerings, "_csr_spmm_cpu_lowering",
               _export.stock_when_exporting(_rules.csr_spmm, _jax_csr_spmm_cpu)),
    *(_cusparse_rule(f"_csr_{op}_gpu_lowering", _sparse_product(csr=True, gpu=True),
                     _rules.csr_product) for op in ("spmv", "spmm")),
    *(_cusparse_rule(f"_coo_{op}_gpu_lowering", _sparse_product(csr=False, gpu=True),
                     _rules.coo_product) for op in ("spmv", "spmm")),
    # jnp.linalg / jax.scipy.linalg call jax's cholesky through its module; its symmetrize
    # and tril are XLA passes outside cholesky_p, which ferrax's does in the call.
    _attribute(lax_linalg, "cholesky", linalg.cholesky),
    _attribute(jax.lax.linalg, "cholesky", linalg.cholesky),
    # jax's lu_solve (jnp.linalg.solve, jax.scipy.linalg.lu_solve) vmaps this over the batch:
    # ferrax's binds one primitive, where jax's makes three XLA passes over the batch.
    _attribute(lax_linalg, "_lu_solve_core", _primitives.lu_solve_core),
    # jax's cholesky_update has no batching rule; ferrax's primitive takes batches.
    _item(batching.fancy_primitive_batchers, lax_linalg.cholesky_update_p,
          _rules.cholesky_update_batcher),
    # jax's RNN asks cuDNN for its reserve's size at trace time, and has no batching rules;
    # its lstm writes the reserve outside gradients too, where ferrax's writes none.
    _attribute(jax_rnn.rnn_fwd_p, "abstract_eval", _rules.rnn_fwd_abstract_eval),
    _attribute(jax_rnn, "lstm", rnn.lstm),
    _item(batching.fancy_primitive_batchers, jax_rnn.rnn_fwd_p, _rules.rnn_fwd_batcher),
    _item(batching.fancy_primitive_batchers, jax_rnn.rnn_bwd_p, _rules.rnn_bwd_batcher),
    # jax's spsolve has no batching rule; ferrax's primitive takes batches.
    _item(batching.fancy_primitive_batchers, jax_sparse_linalg.spsolve_p, sparse.batcher),
    # jax-triton's calls (its lowering calls jax.ffi.ffi_lowering with jaxlib's Triton target).
    _attribute(jax.ffi, "ffi_lowering",
               _kernel_call.ffi_lowering_taking_triton_calls(jax.ffi.ffi_lowering)),
]

_lock = threading.Lock()
_saved: list | None = None  # each patch's value before install(), while installed


def install() -> None:
    """Lowers jax's primitives that have a ferrax target to ferrax (idempotent). Compiled
    functions are dropped from jax's caches so that the next call recompiles."""
    global _saved
    register()
    with _lock:
        if _saved is not None:
            return
        _saved = [patch.get() for patch in _PATCHES]
        for patch in _PATCHES:
            patch.set(patch.new)
    jax.clear_caches()


def uninstall() -> None:
    """Restores jax's own lowering rules (idempotent)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        for patch, value in reversed(list(zip(_PATCHES, _saved))):
            patch.set(value)
        _saved = None
    jax.clear_caches()


def installed() -> bool:
    return _saved is not None
