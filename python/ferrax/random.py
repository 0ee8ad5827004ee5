"""Explicit Threefry-2x32 functions on ferrax kernels, bit-exact with ``jax.random``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import dtypes as jax_dtypes

from ferrax._primitives import threefry2x32_bits_p, threefry2x32_p
from ferrax._registry import register

__all__ = ["bits", "threefry2x32", "threefry_2x32"]


def bits(key, shape=(), dtype=None):
    """Random bits exactly as :func:`jax.random.bits` with threefry keys and
    ``jax_threefry_partitionable`` (jax's default): ``key`` is a typed threefry key array or
    raw ``uint32[..., 2]`` key data; the result has shape ``key.shape + shape`` and by default
    jax's dtype (uint64 under ``jax_enable_x64``, else uint32). On GPU the
    counters are made inside ferrax's kernel rather than materialized."""
    register()
    if jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
        if jax.random.key_impl(key) != "threefry2x32":
            raise TypeError(f"ferrax.random.bits needs threefry keys, got {jax.random.key_impl(key)}")
        key = jax.random.key_data(key)
    dtype = np.dtype(dtype if dtype is not None else jax_dtypes.default_uint_dtype())
    if dtype.kind != "u":
        raise TypeError(f"ferrax.random.bits: dtype must be an unsigned integer type, got {dtype}")
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    return threefry2x32_bits_p.bind(jnp.asarray(key, dtype=jnp.uint32), bit_width=dtype.itemsize * 8,
                                    shape=shape)


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
