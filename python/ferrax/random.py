"""Explicit Threefry-2x32 functions on ferrax kernels, bit-exact with ``jax.random``."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ferrax._primitives import threefry2x32_p
from ferrax._registry import register

__all__ = ["threefry2x32", "threefry_2x32"]


def threefry2x32(key0, key1, x0, x1):
    """Element-wise Threefry-2x32 hash (20 rounds) of counters ``(x0, x1)`` under keys
    ``(key0, key1)``; the four uint32 operands broadcast together."""
    register()
    args = [jnp.asarray(v, dtype=jnp.uint32) for v in (key0, key1, x0, x1)]
    shape = jnp.broadcast_shapes(*(v.shape for v in args))
    # The primitive takes a trailing unit dimension (see threefry2x32_p).
    out = threefry2x32_p.bind(*(jnp.broadcast_to(v, shape)[..., None] for v in args))
    return tuple(y[..., 0] for y in out)


def threefry_2x32(key, count):
    """Hashes the uint32 array ``count`` under ``key`` (``uint32[2]``) exactly as jax's
    ``jax._src.prng.threefry_2x32`` does: the flattened counters, padded to even length, are
    split in two halves that form the counter pairs."""
    key = jnp.asarray(key, dtype=jnp.uint32)
    count = jnp.asarray(count, dtype=jnp.uint32)
    flat = count.ravel()
    odd = flat.size % 2
    if odd:
        flat = jnp.concatenate([flat, jnp.zeros(1, np.uint32)])
    x0, x1 = jnp.split(flat, 2)
    y0, y1 = threefry2x32(key[0], key[1], x0, x1)
    out = jnp.concatenate([y0, y1])
    return (out[:-1] if odd else out).reshape(count.shape)
