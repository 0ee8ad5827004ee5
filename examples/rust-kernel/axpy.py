"""A GPU kernel written in Rust (``src/lib.rs``, compiled to ``axpy.ptx``) called from JAX:
``a·x + y`` under ``jit`` and ``vmap``, checked against NumPy.

    python examples/rust-kernel/axpy.py      (on a machine with an NVIDIA GPU and ferrax)
"""

import pathlib

import jax
import numpy as np

import ferrax

PTX = pathlib.Path(__file__).with_name("axpy.ptx")
ENTRIES = {np.dtype(np.float32): "axpy_f32", np.dtype(np.float64): "axpy_f64"}
#: Threads per block; one element per thread.
BLOCK = 256


def axpy(a, x, y, *, ptx=PTX):
    """``a·x + y`` for 1-D float32 or float64 ``x`` and ``y`` (vmap for more dimensions): the
    entry's parameters are ``x, y, a, n, out``, as ``kernel_call`` passes them."""
    n = x.shape[-1]
    dtype = np.dtype(x.dtype)
    return ferrax.kernel_call(
        x, y, dtype.type(a), np.uint32(n), ptx=ptx, name=ENTRIES[dtype],
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=-(-n // BLOCK), block=BLOCK)


def main():
    rng = np.random.default_rng()
    for dtype in ENTRIES:
        x, y = (rng.standard_normal((8, 10_000)).astype(dtype) for _ in range(2))
        got = jax.jit(jax.vmap(lambda x, y: axpy(2.5, x, y)))(x, y)
        np.testing.assert_allclose(np.asarray(got), dtype.type(2.5) * x + y, rtol=1e-6)
        print(f"axpy ({dtype}, a batch of 8 × 10000 under vmap): matches NumPy")


if __name__ == "__main__":
    main()
