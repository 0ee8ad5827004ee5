"""Sparse direct solves: ``spsolve`` for square CSR matrices, batched.

Stock jax's ``jax.experimental.sparse.linalg.spsolve`` runs on the CPU as a Python callback
into scipy and has no batching rule. ``ferrax.sparse.spsolve`` takes the same operands with
leading batch dimensions: ``data`` ``[..., nnz]`` (or ``[nnz]``: one matrix for every
right-hand side, factored once), ``indices`` ``[nnz]`` and ``indptr`` ``[n + 1]`` (one
sparsity pattern, analysed once), ``b`` ``[..., n]``. On the CPU it is the ``ferrax_spsolve``
target (faer's sparse Cholesky for Hermitian positive definite matrices, else its LU; the
batch across XLA's thread pool); on CUDA the same target copies the operands to the host,
solves them there as on the CPU and copies the solutions back (the stream waits, as it does
for jaxlib's ``csrlsvqr``, a sparse QR on the GPU); elsewhere one call of jax's primitive per
system. Differentiable in ``data`` and ``b`` (jax's rules, batched). A singular matrix gives a
NaN solution, as scipy's (jaxlib's CUDA target fails with an error).

After ``ferrax.install()``, jax's own ``spsolve`` lowers to the same target on the CPU and
CUDA, and ``vmap`` of it binds this primitive.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax._src import core, dispatch
from jax._src.interpreters import ad, batching, mlir
from jax.experimental.sparse import linalg as jax_sparse_linalg

from ferrax import _targets

__all__ = ["spsolve"]


def spsolve(data, indices, indptr, b):
    """Solves ``A x = b`` for the CSR matrix ``A = (data, indices, indptr)`` of order
    ``n = indptr.size - 1``; leading dimensions of ``data`` and ``b`` are a batch (``data``'s
    may be absent: one matrix for all)."""
    return spsolve_p.bind(data, indices, indptr, b)


def _abstract_eval(data, indices, indptr, b):
    if data.dtype != b.dtype or b.dtype not in _DTYPES:
        raise TypeError(f"ferrax.sparse.spsolve: data and b must have one dtype of float32, "
                        f"float64, complex64 or complex128; got {data.dtype} and {b.dtype}")
    if indices.dtype != indptr.dtype or indptr.dtype not in (jnp.int32, jnp.int64):
        raise TypeError(f"ferrax.sparse.spsolve: indices and indptr must be int32 or int64, "
                        f"the same; got {indices.dtype} and {indptr.dtype}")
    if (indices.ndim != 1 or indptr.ndim != 1 or b.ndim < 1 or data.ndim < 1
            or data.shape[-1:] != indices.shape or b.shape[-1] != indptr.shape[0] - 1
            or data.ndim not in (1, b.ndim) or (data.ndim > 1 and data.shape[:-1] != b.shape[:-1])):
        raise ValueError(f"ferrax.sparse.spsolve: expected data [..., nnz] or [nnz], indices "
                         f"[nnz], indptr [n + 1], b [..., n]; got data {data.shape}, indices "
                         f"{indices.shape}, indptr {indptr.shape}, b {b.shape}")
    return core.ShapedArray(b.shape, b.dtype)


_DTYPES = (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128)


def lowering(ctx, data, indices, indptr, b, **_ignored):
    """``ferrax_spsolve`` (CPU and CUDA); also jax's ``spsolve_p`` (whose ``tol`` and
    ``reorder`` are cuSOLVER's) after install()."""
    return jax.ffi.ffi_lowering(_targets.SPSOLVE)(ctx, data, indices, indptr, b)


def _one_by_one(data, indices, indptr, b):
    """Elsewhere: jax's primitive once per system."""
    batch = b.shape[:-1]
    data = jnp.broadcast_to(data, (*batch, data.shape[-1]))
    solve = lambda args: jax_sparse_linalg.spsolve(args[0], indices, indptr, args[1])
    flat = lambda x: x.reshape(-1, x.shape[-1])
    return lax.map(solve, (flat(data), flat(b))).reshape(b.shape)


def batcher(axis_data, args, dims, **_params):
    """Batch dims to the front of ``data`` and ``b``; a batch of patterns runs one pattern at
    a time. Also vmap of jax's ``spsolve_p`` (which has no batching rule) after install()."""
    data, indices, indptr, b = args
    data_dim, indices_dim, indptr_dim, b_dim = dims
    size = axis_data.size
    if indices_dim is not None or indptr_dim is not None:
        args = [batching.bdim_at_front(x, d, size) for x, d in zip(args, dims)]
        return lax.map(lambda a: spsolve(*a), tuple(args)), 0
    b = batching.bdim_at_front(b, b_dim, size)
    if data_dim is None:
        data = data if data.ndim == 1 else jnp.broadcast_to(data, (size, *data.shape))
    else:
        data = batching.bdim_at_front(data, data_dim, size)
        if data.ndim < b.ndim:  # data batched by this vmap only, b by outer ones too
            data = jnp.broadcast_to(data.reshape(size, *(1,) * (b.ndim - data.ndim),
                                                 data.shape[-1]), (*b.shape[:-1], data.shape[-1]))
    return spsolve(data, indices, indptr, b), 0


def _matvec(data, indices, indptr, x):
    """``A x`` for the batched CSR matrices (entries past ``indptr[n]`` are padding)."""
    n, nnz = indptr.shape[0] - 1, indices.shape[0]
    row = jnp.searchsorted(indptr, jnp.arange(nnz, dtype=indptr.dtype), side="right") - 1
    products = data * jnp.take(x, indices, axis=-1)
    return jnp.zeros(x.shape, x.dtype).at[..., row].add(products, mode="drop")


def _transposed(data, indices, indptr):
    """``Aᵀ`` in CSR: the pattern's permutation applied to each matrix's entries."""
    nnz = indices.shape[0]
    order, indices_t, indptr_t = jax_sparse_linalg._csr_transpose(
        jnp.arange(nnz, dtype=indices.dtype), indices, indptr)
    return jnp.take(data, order, axis=-1), indices_t, indptr_t


def _jvp_data(data_dot, data, indices, indptr, b):
    x = spsolve(data, indices, indptr, b)
    return -spsolve(data, indices, indptr, _matvec(data_dot, indices, indptr, x))


def _jvp_b(b_dot, data, indices, indptr, b):
    return spsolve(data, indices, indptr, b_dot)


def _transpose(ct, data, indices, indptr, b):
    if not ad.is_undefined_primal(b) or ad.is_undefined_primal(data):
        raise NotImplementedError("ferrax.sparse.spsolve: transpose with respect to data")
    if type(ct) is ad.Zero:
        return None, None, None, ad.Zero(b.aval)
    data_t, indices_t, indptr_t = _transposed(data, indices, indptr)
    return None, None, None, spsolve(data_t, indices_t, indptr_t, ct)


spsolve_p = core.Primitive("ferrax_spsolve")
spsolve_p.def_impl(partial(dispatch.apply_primitive, spsolve_p))
spsolve_p.def_abstract_eval(_abstract_eval)
batching.fancy_primitive_batchers[spsolve_p] = batcher
ad.defjvp(spsolve_p, _jvp_data, None, None, _jvp_b)
ad.primitive_transposes[spsolve_p] = _transpose
mlir.register_lowering(spsolve_p, mlir.lower_fun(_one_by_one, multiple_results=False))
for _platform in ("cpu", "cuda"):
    mlir.register_lowering(spsolve_p, lowering, platform=_platform)
del _platform

