"""Compiled-kernel calls on a CUDA device: ``ferrax_triton_kernel_call`` (jax-triton's lowering
of Triton's ``scaled_add`` and of an autotuned add, real Triton 3.9 PTX for sm_90 in
``tests/data``, run through ferrax's target after install() and through jaxlib's without) and
``ferrax_kernel_call`` (the example Rust kernel, ``examples/rust-kernel``), against NumPy. Skips
without a GPU (CI)."""

import jax
import numpy as np
import pytest

import ferrax
from helpers import rust_kernel_example, triton_like_call, triton_payloads


def test_scaled_add_on_ferrax_and_on_jaxlib(gpu, rng):
    # The payload's call: n = 1000, scale 2.5, shift -0.75, negate 2 (true), out zeroed first.
    n = 1000
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    expected = -(x + y * np.float32(2.5) + np.float32(-0.75))
    f = triton_like_call(triton_payloads()["plain"])
    xd, yd = jax.device_put(x, gpu), jax.device_put(y, gpu)
    for install in (True, False):
        (ferrax.install if install else ferrax.uninstall)()
        try:
            text = f.lower(xd, yd).as_text()
            assert ("ferrax_triton_kernel_call" in text) == install
            np.testing.assert_allclose(np.asarray(f(xd, yd)), expected, rtol=1e-6, atol=1e-6)
        finally:
            ferrax.uninstall()


def test_autotuned_add_on_ferrax_and_on_jaxlib(gpu, rng):
    # jax-triton's autotuned `tuned_add` (BLOCK 64 with 2 warps, 256 with 8) for n = 1000:
    # out = x + 1. ferrax's target times both configurations on the first call, then launches
    # the faster one.
    x = rng.standard_normal(1000).astype(np.float32)
    f = triton_like_call(triton_payloads()["tuned"])
    xd = jax.device_put(x, gpu)
    for install in (True, False):
        (ferrax.install if install else ferrax.uninstall)()
        try:
            assert ("ferrax_triton_kernel_call" in f.lower(xd).as_text()) == install
            for _ in range(2):  # tuned, then the chosen configuration alone
                np.testing.assert_array_equal(np.asarray(f(xd)), x + np.float32(1))
        finally:
            ferrax.uninstall()


def test_the_rust_example_kernel_matches_numpy(gpu, rng):
    example = rust_kernel_example()
    for dtype in (np.float32, np.float64):
        # One rounded multiply and one rounded add per element, as NumPy's.
        a = dtype(rng.standard_normal())
        for shape in [(int(rng.integers(1, 5000)),), (3, int(rng.integers(1, 2000))), (0, 7)]:
            x, y = (jax.device_put(rng.standard_normal(shape).astype(dtype), gpu)
                    for _ in range(2))
            f = lambda x, y: example.axpy(a, x, y)
            for _ in range(len(shape) - 1):
                f = jax.vmap(f)
            got = np.asarray(jax.jit(f)(x, y))
            np.testing.assert_array_equal(got, a * np.asarray(x) + np.asarray(y))
        # An argument that is not mapped is broadcast to the batch.
        x = jax.device_put(rng.standard_normal((4, 300)).astype(dtype), gpu)
        y = jax.device_put(rng.standard_normal(300).astype(dtype), gpu)
        got = jax.vmap(lambda x, y: example.axpy(a, x, y), in_axes=(0, None))(x, y)
        np.testing.assert_array_equal(np.asarray(got), a * np.asarray(x) + np.asarray(y))
    example.main()


def test_kernel_call_refusals_on_the_gpu(gpu):
    example = rust_kernel_example()
    x = jax.device_put(np.ones(64, np.float32), gpu)
    # The f64 entry with f32 scalars: the target reads the .param list and refuses.
    call = lambda: ferrax.kernel_call(x, x, np.float32(1.0), np.uint32(64), ptx=example.PTX,
                                      name="axpy_f64", out_shape=x, grid=1, block=64)
    with pytest.raises(Exception, match="kernel axpy_f64: the call's parameters"):
        jax.block_until_ready(call())
    bad_grid = lambda: ferrax.kernel_call(x, x, np.float32(1.0), np.uint32(64), ptx=example.PTX,
                                          name="axpy_f32", out_shape=x, grid=(1, 70000), block=64)
    with pytest.raises(Exception, match=r"kernel axpy_f32: grid \[1, 70000, 1\]"):
        jax.block_until_ready(bad_grid())
