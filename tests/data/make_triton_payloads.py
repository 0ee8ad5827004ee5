"""Writes triton_payloads.npz: the `opaque` attributes that jax-triton's `triton_call` lowers
to for CUDA (real Triton PTX, jaxlib's serializer), for test_kernel_call.py. Needs jax-triton,
triton and jax's CUDA plugin, no GPU (Triton compiles for sm_90 on the host):

    python -m venv /tmp/tv && /tmp/tv/bin/pip install jax==0.11.2 jaxlib==0.11.2 \
        jax-cuda13-plugin==0.11.2 triton==3.9.0 jax-triton==0.4.1 numpy
    /tmp/tv/bin/python tests/data/make_triton_payloads.py
"""

import pathlib
import re

import jax
import jax.numpy as jnp
import jax_triton as jt
import numpy as np
import triton
import triton.language as tl


@triton.jit
def scaled_add(x_ptr, y_ptr, n, scale, shift, negate, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    r = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask) * scale
    r = r + shift
    if negate:
        r = -r
    tl.store(out_ptr + offsets, r, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                          triton.Config({"BLOCK": 256}, num_warps=8)], key=["n"])
@triton.jit
def tuned_add(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def plain(x, y):
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jt.triton_call(x, y, x.size, 2.5, np.float64(-0.75), 2, kernel=scaled_add,
                          out_shape=out, grid=(triton.cdiv(x.size, 128),), BLOCK=128,
                          num_warps=4, compute_capability=90, zeroed_outputs=(0,))


def tuned(x):
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jt.triton_call(x, x.size, kernel=tuned_add, out_shape=out,
                          grid=lambda meta: (triton.cdiv(x.size, meta["BLOCK"]),),
                          compute_capability=90)


def mlir_bytes(s: str) -> bytes:
    """An MLIR string literal's bytes (escapes: \\\\, \\", \\n, \\t, \\XX)."""
    out, i = bytearray(), 0
    while i < len(s):
        if s[i] != "\\":
            out += s[i].encode()
            i += 1
        elif s[i + 1] in '\\"nt':
            out.append({"n": 10, "t": 9}.get(s[i + 1], ord(s[i + 1])))
            i += 2
        else:
            out.append(int(s[i + 1:i + 3], 16))
            i += 3
    return bytes(out)


def opaque(f, *args) -> np.ndarray:
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    (literal,) = re.findall(r'opaque = "((?:[^"\\]|\\.)*)"', text)
    return np.frombuffer(mlir_bytes(literal), np.uint8)


x = jnp.ones(1000, jnp.float32)
np.savez(pathlib.Path(__file__).with_name("triton_payloads.npz"),
         plain=opaque(plain, x, x), tuned=opaque(tuned, x),
         versions=np.array([jax.__version__, triton.__version__, jt.__version__]))
