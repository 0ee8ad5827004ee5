"""Explicit linear-algebra functions on ferrax kernels (whether or not ``install()`` ran).

They accept leading batch dimensions and work under ``jit`` and ``vmap``; for automatic
differentiation use jax's own functions after ``ferrax.install()``, which keep jax's rules
(``cholesky`` has them too: it is what ``install()`` makes of jax's ``cholesky``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ferrax._primitives import (cholesky_p, cholesky_update_p, getrf_p,
                                lu_pivots_to_permutation_p, qr_p)
from ferrax._registry import register

__all__ = ["cholesky", "cholesky_update", "getrf", "lu", "lu_pivots_to_permutation", "qr"]


def cholesky(x, *, symmetrize_input: bool = True):
    """:func:`jax.lax.linalg.cholesky`, same signature and results: the lower factor ``L``
    (``A = L·Lᴴ``) of ``(x + xᴴ)/2``, or of ``x``'s lower triangle when ``symmetrize_input``
    is false; NaN below a zero upper triangle where ``A`` is not positive definite. On CPU
    one ferrax call per batch (up to 128×128), on CUDA after ``install()`` as well (up to
    48×48, within the measured thresholds); elsewhere jax's own steps."""
    register()
    x = jnp.asarray(x)
    if symmetrize_input:  # jax's symmetrize divides by 2, which makes integers floats
        x = x.astype(jax.eval_shape(lambda x: x / 2, x).dtype)
    return cholesky_p.bind(x, symmetrize_input=bool(symmetrize_input))


def cholesky_update(r, w):
    """Rank-1 update of upper Cholesky factors, as :func:`jax.lax.linalg.cholesky_update`:
    ``R'`` upper with ``R'ᴴR' = RᴴR + wwᴴ``, for batches ``[..., n, n]`` / ``[..., n]`` and
    float32, float64, complex64 or complex128 (jax's own takes one real matrix)."""
    register()
    r, w = jnp.asarray(r), jnp.asarray(w)
    dtype = jnp.result_type(r, w)
    return cholesky_update_p.bind(r.astype(dtype), w.astype(dtype))[0]


def getrf(a):
    """LAPACK ``?getrf`` on a batch ``[..., m, n]``: ``(lu, ipiv, info)`` with LAPACK's
    conventions (1-based ``ipiv``, ``info > 0`` for an exactly singular U)."""
    register()
    return tuple(getrf_p.bind(jnp.asarray(a)))


def lu_pivots_to_permutation(pivots, permutation_size: int):
    """0-based row swaps ``[..., k]`` to permutations ``[..., permutation_size]``, as
    :func:`jax.lax.linalg.lu_pivots_to_permutation`."""
    register()
    return lu_pivots_to_permutation_p.bind(jnp.asarray(pivots), permutation_size=int(permutation_size))


def lu(a):
    """LU with partial pivoting, as :func:`jax.lax.linalg.lu`: ``(lu, pivots, permutation)``
    with 0-based pivots; matrices where LAPACK reports an illegal argument become NaN."""
    a = jnp.asarray(a)
    packed, ipiv, info = getrf(a)
    return lu_from_getrf(packed, ipiv, info, a.shape[-2])


def lu_from_getrf(packed, ipiv, info, m):
    """jaxlib's post-processing of getrf: 0-based pivots, NaN where ``info < 0``, and the
    row permutation."""
    pivots = ipiv - 1
    packed = jnp.where((info >= 0)[..., None, None], packed, jnp.nan)
    return packed, pivots, lu_pivots_to_permutation(pivots, m)


def qr(a, *, full_matrices: bool = False):
    """QR without pivoting, as :func:`jax.lax.linalg.qr`: ``(q, r)`` with ``q`` of shape
    ``[..., m, m]`` (``full_matrices``) or ``[..., m, min(m, n)]`` and ``r`` upper triangular,
    in one ferrax call on CPU and CUDA (jax's steps take four passes over the batch around
    theirs)."""
    register()
    return tuple(qr_p.bind(jnp.asarray(a), full_matrices=bool(full_matrices)))
