"""One JAX primitive per ferrax FFI target, lowered to that target.

These are what the explicit functions (``ferrax.linalg``, ``ferrax.random``) bind and what
``ferrax.install()`` lowers jax's own primitives to. Operands carry arbitrary leading batch
dimensions, so ``vmap`` only moves the mapped axis to the front.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core, dispatch, dtypes
from jax._src.lax import linalg as lax_linalg
from jax._src.random import threefry2x32 as jax_threefry
from jax._src.interpreters import ad, batching, mlir

from ferrax._export import stock_when_exporting
from ferrax._lowering import batched_ffi_lowering
from ferrax._targets import (CHOLESKY, CHOLESKY_UPDATE, GETRF, LU_PIVOTS_TO_PERMUTATION, LU_SOLVE,
                             QR, THREEFRY2X32, THREEFRY2X32_BITS)

LAPACK_DTYPES = tuple(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def _batch_at_front(prim, args, dims, **params):
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    args = [batching.bdim_at_front(x, d, size) for x, d in zip(args, dims)]
    out = prim.bind(*args, **params)
    return out, ((0,) * len(out) if prim.multiple_results else 0)


def _primitive(name, abstract_eval, lowerings, multiple_results=True):
    """A primitive lowered per platform by ``lowerings`` (platform -> rule); a platform
    without a rule has no ferrax target for it."""
    prim = core.Primitive(name)
    prim.multiple_results = multiple_results
    prim.def_impl(partial(dispatch.apply_primitive, prim))
    prim.def_abstract_eval(abstract_eval)
    batching.primitive_batchers[prim] = partial(_batch_at_front, prim)
    for platform, rule in lowerings.items():
        mlir.register_lowering(prim, rule, platform=platform)
    return prim


def _on(*platforms):
    """The same rule for each platform: the target name is one, each platform's handler is
    registered under it."""
    return lambda rule: dict.fromkeys(platforms, rule)


def _getrf_abstract_eval(a):
    if a.ndim < 2:
        raise TypeError(f"{GETRF}: expected a matrix or a batch of matrices, got shape {a.shape}")
    if dtypes.dtype(a.dtype) not in LAPACK_DTYPES:
        raise TypeError(f"{GETRF}: expected float32, float64, complex64 or complex128, got {a.dtype}")
    *batch, m, n = a.shape
    i32 = np.dtype(np.int32)
    return (core.ShapedArray(a.shape, a.dtype),
            core.ShapedArray((*batch, core.min_dim(m, n)), i32),
            core.ShapedArray(tuple(batch), i32))


#: LAPACK getrf: ``a -> (packed LU, 1-based pivots, info)``.
getrf_p = _primitive(GETRF, _getrf_abstract_eval, _on("cpu", "cuda")(batched_ffi_lowering(
    GETRF, num_non_batch_dims=2, column_major=True, operand_output_aliases={0: 0})))


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
    _on("cpu", "cuda")(lambda ctx, pivots, *, permutation_size: _pivots_lowering(ctx, pivots)),
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
threefry2x32_p = _primitive(THREEFRY2X32, _threefry_abstract_eval, _on("cpu", "cuda")(
    batched_ffi_lowering(THREEFRY2X32, num_non_batch_dims=1, column_major=False)))


def _bits_abstract_eval(keys, *, bit_width, shape):
    if keys.ndim < 1 or keys.shape[-1] != 2 or dtypes.dtype(keys.dtype) != np.uint32:
        raise TypeError(f"{THREEFRY2X32_BITS}: expected uint32 keys of shape [..., 2], "
                        f"got {keys.dtype}{list(keys.shape)}")
    if bit_width not in (8, 16, 32, 64):
        raise TypeError(f"{THREEFRY2X32_BITS}: bit_width must be 8, 16, 32 or 64, got {bit_width}")
    return core.ShapedArray((*keys.shape[:-1], *shape), np.dtype(f"uint{bit_width}"))


def _bits_reference(keys, *, bit_width, shape):
    # jax's own partitionable algorithm, one key at a time; its threefry2x32_p lowers to
    # ferrax's threefry when ferrax is installed.
    bits = lambda key: jax_threefry._threefry_random_bits_partitionable(key, bit_width, shape)
    for _ in range(keys.ndim - 1):
        bits = jax.vmap(bits)
    return bits(keys)


_bits_lowering = batched_ffi_lowering(THREEFRY2X32_BITS, num_non_batch_dims=1, column_major=False)

#: ``jax.random.bits`` for raw threefry keys ``uint32[..., 2]`` under
#: ``jax_threefry_partitionable`` semantics: ``uint{bit_width}[..., *shape]``. On GPU the
#: counters are made inside the kernel; elsewhere it is jax's algorithm.
threefry2x32_bits_p = _primitive(
    THREEFRY2X32_BITS, _bits_abstract_eval,
    {"cpu": mlir.lower_fun(_bits_reference, multiple_results=False),
     "cuda": lambda ctx, keys, *, bit_width, shape: _bits_lowering(ctx, keys)},
    multiple_results=False)


def _cholesky_update_abstract_eval(r, w):
    if (r.ndim < 2 or r.shape[-1] != r.shape[-2] or w.shape != r.shape[:-1]
            or r.dtype != w.dtype or dtypes.dtype(r.dtype) not in LAPACK_DTYPES):
        raise TypeError(f"{CHOLESKY_UPDATE}: expected R [..., n, n] and w [..., n] of one dtype "
                        f"(float32, float64, complex64 or complex128), got "
                        f"{r.dtype}{list(r.shape)} and {w.dtype}{list(w.shape)}")
    return core.ShapedArray(r.shape, r.dtype), core.ShapedArray(w.shape, w.dtype)


def _cholesky_update_reference(r, w):
    """Givens rotations row by row (jax's algorithm, extended to complex): row k of
    ``[R; conj(w)]`` is rotated so that w's entry k vanishes and R's diagonal stays real."""
    n = r.shape[-1]

    def step(k, carry):
        r, v = carry  # v = conj(w), a row appended under R
        a, b = r[..., k, k], v[..., k]
        radius = jnp.sqrt(jnp.abs(a) ** 2 + jnp.abs(b) ** 2)
        # Rotate rows (R_k, v) so that v_k vanishes, then scale R_k by a unit factor so the
        # diagonal is real and positive; (0, 0) is left as it is.
        c = jnp.where(radius == 0, 1, jnp.abs(a) / jnp.where(radius == 0, 1, radius))
        phase = jnp.where(a == 0, 1, a / jnp.where(a == 0, 1, jnp.abs(a)))
        s = jnp.where(radius == 0, 0, jnp.conj(phase) * b / jnp.where(radius == 0, 1, radius))
        c, phase, s = (x.astype(r.dtype)[..., None] for x in (c, phase, s))
        row = r[..., k, :]
        columns = jnp.arange(n) >= k
        new_row = jnp.where(columns, jnp.conj(phase) * (c * row + jnp.conj(s) * v), row)
        new_v = jnp.where(columns, c * v - s * row, v)
        return r.at[..., k, :].set(new_row), new_v

    r, v = jax.lax.fori_loop(0, n, step, (r, jnp.conj(w)))
    return r, jnp.conj(v)


_cholesky_update_rotations = mlir.lower_fun(_cholesky_update_reference, multiple_results=True)

#: Rank-1 update of upper Cholesky factors (row-major, as jaxlib's GPU target):
#: ``(R [..., n, n], w [..., n]) -> (R', w')`` with ``R'ᴴR' = RᴴR + wwᴴ``; ``w'`` is scratch.
#: The GPU kernel is ferrax's; elsewhere the same rotations in jax, and on GPU too for a plain
#: ``jax.export`` (install() batches jax's cholesky_update with this primitive, and jax has
#: no batched rule whose export-stable target it could take instead).
cholesky_update_p = _primitive(
    CHOLESKY_UPDATE, _cholesky_update_abstract_eval,
    {"cpu": _cholesky_update_rotations,
     "cuda": stock_when_exporting(
         batched_ffi_lowering(CHOLESKY_UPDATE, num_non_batch_dims=2, column_major=False,
                              operand_output_aliases={0: 0, 1: 1}),
         _cholesky_update_rotations)})


def _qr_abstract_eval(a, *, full_matrices):
    if a.ndim < 2:
        raise ValueError(f"{QR}: expected a matrix or a batch of matrices, got shape {a.shape}")
    if dtypes.dtype(a.dtype) not in LAPACK_DTYPES:
        raise TypeError(f"{QR}: expected float32, float64, complex64 or complex128, got {a.dtype}")
    *batch, m, n = a.shape
    q_cols = m if full_matrices else min(m, n)
    return (core.ShapedArray((*batch, m, q_cols), a.dtype),
            core.ShapedArray((*batch, q_cols, n), a.dtype))


#: jax's whole ``qr`` without pivoting as one call on jax's row-major arrays (Q and R, R with
#: zeros below the diagonal), CPU and CUDA; ``full_matrices`` is the call's attribute.
qr_lowering = batched_ffi_lowering(QR, num_non_batch_dims=2, column_major=False)
qr_p = _primitive(QR, _qr_abstract_eval, _on("cpu", "cuda")(qr_lowering))


#: jax's own ``cholesky`` (symmetrize, ``cholesky_p``, ``tril``), kept before ``install()``
#: points jax's name at ferrax's.
_jax_cholesky = lax_linalg.cholesky


def _cholesky_abstract_eval(a, *, symmetrize_input):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{CHOLESKY}: expected a batch of square matrices [..., n, n], "
                         f"got shape {a.shape}")
    if dtypes.dtype(a.dtype) not in LAPACK_DTYPES:  # as jax's cholesky_p
        raise TypeError(f"{CHOLESKY}: expected float32, float64, complex64 or complex128, "
                        f"got {a.dtype}")
    return core.ShapedArray(a.shape, a.dtype)


#: jax's steps, and one ``ferrax_cholesky`` call: the rules ``_install``'s routing table chooses
#: between, per platform and order (jax's steps alone where it has no row).
cholesky_reference_lowering = mlir.lower_fun(_jax_cholesky, multiple_results=False)
cholesky_fused_lowering = batched_ffi_lowering(CHOLESKY, num_non_batch_dims=2,
                                                column_major=False)


def _cholesky_jvp(primals, tangents, *, symmetrize_input):
    # jax's rule, through jax's own function (it differs between jax versions).
    tangent = ad.instantiate_zeros(tangents[0])
    return jax.jvp(partial(_jax_cholesky, symmetrize_input=symmetrize_input), primals, (tangent,))


#: jax's ``cholesky(a, symmetrize_input=...)`` as one primitive: the lower factor of
#: ``(a + aᴴ)/2`` (or of ``a``'s lower triangle) with zeros above, NaN below where the
#: factorization fails. On CPU one ``ferrax_cholesky`` call for small orders; on CUDA the same
#: after ``install()``; elsewhere jax's steps (``_install``'s routing table).
cholesky_p = _primitive(CHOLESKY, _cholesky_abstract_eval, {}, multiple_results=False)
mlir.register_lowering(cholesky_p, cholesky_reference_lowering)
ad.primitive_jvps[cholesky_p] = _cholesky_jvp


#: jax's own solve with one LU factorization (``lu [n, n]``, ``permutation [n]``,
#: ``b [n, ...]``), kept before ``install()`` points jax's name at ferrax's.
_jax_lu_solve_core = lax_linalg._lu_solve_core


def _lu_solve_abstract_eval(lu, permutation, b, *, trans):
    *batch, n, _ = lu.shape if lu.ndim >= 2 else (None, None)
    if (lu.ndim < 2 or lu.shape[-1] != n or permutation.shape != (*batch, n)
            or b.ndim != lu.ndim or b.shape[:-1] != (*batch, n)):
        raise ValueError(f"{LU_SOLVE}: expected lu [..., n, n], permutation [..., n] and "
                         f"b [..., n, k], got {lu.shape}, {permutation.shape} and {b.shape}")
    if (dtypes.dtype(lu.dtype) not in LAPACK_DTYPES or b.dtype != lu.dtype
            or dtypes.dtype(permutation.dtype) != np.int32):
        raise TypeError(f"{LU_SOLVE}: expected lu and b of one of float32, float64, complex64 or "
                        f"complex128 and an int32 permutation, got {lu.dtype}, "
                        f"{permutation.dtype} and {b.dtype}")
    if trans not in (0, 1, 2):
        raise ValueError(f"{LU_SOLVE}: trans must be 0, 1 or 2, got {trans}")
    return core.ShapedArray(b.shape, b.dtype)


def _lu_solve_reference(lu, permutation, b, *, trans):
    solve = _jax_lu_solve_core
    for _ in range(lu.ndim - 2):
        solve = jax.vmap(solve, in_axes=(0, 0, 0, None))
    return solve(lu, permutation, b, trans)


_lu_solve_ffi = batched_ffi_lowering(LU_SOLVE, num_non_batch_dims=2, column_major=False)


def lu_solve_fused_lowering(ctx, lu, permutation, b, *, trans):
    """One ``ferrax_lu_solve`` call (``_install``'s routing table says where)."""
    return _lu_solve_ffi(ctx, lu, permutation, b, trans=np.int32(trans))


def _lu_solve_jvp(primals, tangents, *, trans):
    # jax's rule, through jax's own steps (the permutation has no tangent).
    lu, permutation, b = primals
    dlu, _, db = map(ad.instantiate_zeros, tangents)
    return jax.jvp(lambda lu, b: _lu_solve_reference(lu, permutation, b, trans=trans),
                   (lu, b), (dlu, db))


def _lu_solve_batcher(args, dims, *, trans):
    lu, permutation, b = args
    lu_dim, permutation_dim, b_dim = dims
    if lu_dim is not None or permutation_dim is not None:
        return _batch_at_front(lu_solve_p, args, dims, trans=trans)
    # One factorization for every instance (jnp.linalg.solve vmaps over b's columns): the
    # instances become more right-hand sides, where moving the batch to the front would copy
    # the factorization once per instance.
    b = jnp.moveaxis(b, b_dim, -1)
    *batch, n, k, instances = b.shape
    x = lu_solve_p.bind(lu, permutation, b.reshape(*batch, n, k * instances), trans=trans)
    return x.reshape(b.shape), b.ndim - 1


#: jax's LU solve of ``b [..., n, k]`` with the factorization ``lu [..., n, n]``,
#: ``permutation [..., n]`` that jax's ``lu`` returns (its ``_lu_solve_core`` under vmap, which
#: ``install()`` makes bind this primitive): on the CPU one ``ferrax_lu_solve`` call for small
#: orders; elsewhere jax's steps (``_install``'s routing table).
lu_solve_p = _primitive(LU_SOLVE, _lu_solve_abstract_eval, {}, multiple_results=False)
mlir.register_lowering(lu_solve_p, mlir.lower_fun(_lu_solve_reference, multiple_results=False))
ad.primitive_jvps[lu_solve_p] = _lu_solve_jvp
batching.primitive_batchers[lu_solve_p] = _lu_solve_batcher


def lu_solve_core(lu, permutation, b, trans):
    """What ``install()`` makes of jax's ``_lu_solve_core`` (one system; jax's ``lu_solve``
    vmaps it over the batch): ``lu_solve_p`` where its operands fit it, else jax's steps."""
    fits = (lu.ndim == 2 and b.ndim >= 1 and permutation.shape == lu.shape[:1]
            and lu.dtype == b.dtype and dtypes.dtype(lu.dtype) in LAPACK_DTYPES
            and dtypes.dtype(permutation.dtype) == np.int32 and trans in (0, 1, 2))
    if not fits:
        return _jax_lu_solve_core(lu, permutation, b, trans)
    x = jax.lax.reshape(b, (b.shape[0], math.prod(b.shape[1:])))
    return jax.lax.reshape(lu_solve_p.bind(lu, permutation, x, trans=int(trans)), b.shape)
