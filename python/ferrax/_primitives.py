"""One JAX primitive per ferrax FFI target, lowered to that target.

These are what the explicit functions (``ferrax.linalg``, ``ferrax.random``) bind and what
``ferrax.install()`` lowers jax's own primitives to. Operands carry arbitrary leading batch
dimensions, so ``vmap`` only moves the mapped axis to the front.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from jax._src import core, dispatch, dtypes
from jax._src.interpreters import batching, mlir

from ferrax._lowering import batched_ffi_lowering

GETRF = "ferrax_getrf"
LU_PIVOTS_TO_PERMUTATION = "ferrax_lu_pivots_to_permutation"
THREEFRY2X32 = "ferrax_threefry2x32"

_LAPACK_DTYPES = tuple(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def _batch_at_front(prim, args, dims, **params):
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    args = [batching.bdim_at_front(x, d, size) for x, d in zip(args, dims)]
    out = prim.bind(*args, **params)
    return out, ((0,) * len(out) if prim.multiple_results else 0)


def _primitive(name, abstract_eval, cpu_lowering, multiple_results=True):
    prim = core.Primitive(name)
    prim.multiple_results = multiple_results
    prim.def_impl(partial(dispatch.apply_primitive, prim))
    prim.def_abstract_eval(abstract_eval)
    batching.primitive_batchers[prim] = partial(_batch_at_front, prim)
    mlir.register_lowering(prim, cpu_lowering, platform="cpu")
    return prim


def _getrf_abstract_eval(a):
    if a.ndim < 2:
        raise TypeError(f"{GETRF}: expected a matrix or a batch of matrices, got shape {a.shape}")
    if dtypes.dtype(a.dtype) not in _LAPACK_DTYPES:
        raise TypeError(f"{GETRF}: expected float32, float64, complex64 or complex128, got {a.dtype}")
    *batch, m, n = a.shape
    i32 = np.dtype(np.int32)
    return (core.ShapedArray(a.shape, a.dtype),
            core.ShapedArray((*batch, core.min_dim(m, n)), i32),
            core.ShapedArray(tuple(batch), i32))


#: LAPACK getrf: ``a -> (packed LU, 1-based pivots, info)``.
getrf_p = _primitive(GETRF, _getrf_abstract_eval, batched_ffi_lowering(
    GETRF, num_non_batch_dims=2, column_major=True, operand_output_aliases={0: 0}))


def _pivots_abstract_eval(pivots, *, permutation_size):
    if pivots.ndim < 1 or dtypes.dtype(pivots.dtype) != np.int32:
        raise TypeError(f"{LU_PIVOTS_TO_PERMUTATION}: expected int32 pivots of rank >= 1, "
                        f"got {pivots.dtype} {pivots.shape}")
    return core.ShapedArray((*pivots.shape[:-1], permutation_size), pivots.dtype)


_pivots_lowering = batched_ffi_lowering(
    LU_PIVOTS_TO_PERMUTATION, num_non_batch_dims=1, column_major=False)

#: 0-based row swaps ``[..., k]`` to permutations ``[..., permutation_size]``.
lu_pivots_to_permutation_p = _primitive(
    LU_PIVOTS_TO_PERMUTATION, _pivots_abstract_eval,
    # permutation_size is implied by the result shape; it is not an FFI attribute.
    lambda ctx, pivots, *, permutation_size: _pivots_lowering(ctx, pivots),
    multiple_results=False)


def _threefry_abstract_eval(*args):
    shape = args[0].shape
    if (not shape or shape[-1] != 1
            or any(x.shape != shape or dtypes.dtype(x.dtype) != np.uint32 for x in args)):
        raise TypeError(f"{THREEFRY2X32}: expected four uint32 arrays of one shape [..., 1], "
                        "got " + ", ".join(f"{x.dtype}{list(x.shape)}" for x in args))
    out = core.ShapedArray(shape, np.dtype(np.uint32))
    return out, out


#: Threefry-2x32 of ``(key0, key1)`` over counters ``(x0, x1)``, all uint32 of one shape
#: ending in a unit dimension: XLA's batch partitioner only splits custom calls with at least
#: one non-batch dimension, so the wrappers add one and every other dimension is a batch.
threefry2x32_p = _primitive(THREEFRY2X32, _threefry_abstract_eval, batched_ffi_lowering(
    THREEFRY2X32, num_non_batch_dims=1, column_major=False))
