"""ferrax.random.bits on the host (jax's partitionable threefry bits on ferrax's threefry) and
the CUDA lowering of jax.random after install(); the GPU kernel is tested in
test_gpu_kernels.py."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src import config as jax_config

import ferrax


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("shape", [(), (1,), (6,), (3, 5), (0, 2)], ids=str)
def test_matches_stock(dtype, shape, rng):
    key = jax.random.key(int(rng.integers(2**31)))
    got = np.asarray(ferrax.random.bits(key, shape, dtype))
    want = np.asarray(jax.random.bits(key, shape, dtype))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_raw_and_batched_keys(rng):
    keys = jax.random.split(jax.random.key(int(rng.integers(2**31))), (2, 3))
    want = jax.vmap(jax.vmap(lambda k: jax.random.bits(k, (4, 5))))(keys)
    np.testing.assert_array_equal(ferrax.random.bits(keys, (4, 5)), want)
    np.testing.assert_array_equal(ferrax.random.bits(jax.random.key_data(keys), (4, 5)), want)
    np.testing.assert_array_equal(jax.jit(jax.vmap(lambda k: ferrax.random.bits(k, 7)))(keys[0]),
                                  jax.vmap(lambda k: jax.random.bits(k, 7))(keys[0]))


def test_bad_arguments():
    with pytest.raises(TypeError, match="unsigned"):
        ferrax.random.bits(jax.random.key(0), (3,), np.int32)
    with pytest.raises(TypeError, match="ferrax_threefry2x32_bits"):
        ferrax.random.bits(np.ones(3, np.uint32), (3,))


def _cuda_targets(fn, *args):
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return {t for t in ("ferrax_threefry2x32_bits", "ferrax_threefry2x32", "cu_threefry2x32_ffi")
            if f"@{t}(" in text or f'"{t}"' in text}


def test_installed_cuda_lowering(installed):
    """XLA's fused threefry stays unless the kernel lowering is asked for (it measured faster
    than both kernels); then the kernel is ferrax's, not jaxlib's."""
    key = jax.random.key(3)
    for fn in (lambda k: jax.random.normal(k, (10,)), lambda k: jax.random.split(k, 3)):
        assert _cuda_targets(fn, key) == set()
        with jax_config.threefry_gpu_kernel_lowering(True):
            assert _cuda_targets(fn, key) == {"ferrax_threefry2x32"}


def test_explicit_bits_lower_to_the_counter_kernel_on_cuda():
    assert _cuda_targets(lambda k: ferrax.random.bits(k, (10,)), jax.random.key(3)) == \
        {"ferrax_threefry2x32_bits"}
