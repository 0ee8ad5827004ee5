"""ferrax.linalg.cholesky_update on the host (jax's rotations, extended to batches and complex)
and its lowering for CUDA; the GPU kernel itself is tested in test_gpu_kernels.py."""

import numpy as np
import pytest

import jax

import ferrax
from test_gpu_kernels import _check_update, _factor_and_vector


@pytest.mark.parametrize("batch, n", [((), 1), ((), 6), ((4,), 9), ((2, 3), 5)], ids=str)
def test_identity(dtype, batch, n, rng):
    r, w, a = _factor_and_vector(rng, batch, n, dtype)
    got = np.asarray(jax.jit(ferrax.linalg.cholesky_update)(r, w))
    assert got.dtype == np.dtype(dtype) and got.shape == r.shape
    _check_update(r, w, a, got, 50 * n * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_stock_jax(dtype, rng):
    r, w, _ = _factor_and_vector(rng, (), 12, dtype)
    r = np.triu(r)
    stock = np.asarray(jax.lax.linalg.cholesky_update(r, w))
    got = np.asarray(ferrax.linalg.cholesky_update(r, w))
    np.testing.assert_allclose(got, stock, rtol=1e-5 if dtype == np.float32 else 1e-13, atol=1e-5)


def test_vmap_matches_batch(rng):
    r, w, _ = _factor_and_vector(rng, (5,), 7, np.float64)
    np.testing.assert_allclose(jax.vmap(ferrax.linalg.cholesky_update)(r, w),
                               ferrax.linalg.cholesky_update(r, w), rtol=1e-14)


def test_zero_vector_leaves_factor(rng):
    r, _, _ = _factor_and_vector(rng, (), 5, np.float64)
    np.testing.assert_allclose(ferrax.linalg.cholesky_update(r, np.zeros(5)), r, rtol=1e-15)


def test_bad_shapes_are_type_errors():
    with pytest.raises(TypeError, match="ferrax_cholesky_update"):
        ferrax.linalg.cholesky_update(np.eye(3), np.ones(4))
    with pytest.raises(TypeError, match="ferrax_cholesky_update"):
        ferrax.linalg.cholesky_update(np.eye(3, dtype=np.int32), np.ones(3, np.int32))


def test_installed_lowers_to_ferrax_on_cuda(installed):
    lowered = jax.jit(jax.lax.linalg.cholesky_update).trace(np.eye(4), np.ones(4)).lower(
        lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert "ferrax_cholesky_update" in text and "cu_cholesky_update" not in text


def test_installed_jax_primitive_vmaps(installed, rng):
    """jax's own cholesky_update has no batching rule; install() gives it ferrax's."""
    r, w, a = _factor_and_vector(rng, (3,), 6, np.float64)
    got = np.asarray(jax.vmap(jax.lax.linalg.cholesky_update)(r, w))
    _check_update(r, w, a, got, 1e-12)
    ferrax.uninstall()
    with pytest.raises(NotImplementedError):
        jax.vmap(jax.lax.linalg.cholesky_update)(r, w)
