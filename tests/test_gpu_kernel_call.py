"""``ferrax_triton_kernel_call`` on a CUDA device: jax-triton's lowering of Triton's
``scaled_add`` (real Triton 3.9 PTX for sm_90, ``tests/data``) run through ferrax's target after
install() and through jaxlib's without, against NumPy. Skips without a GPU (CI)."""

import jax
import numpy as np

import ferrax
from helpers import triton_like_call, triton_payloads


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
