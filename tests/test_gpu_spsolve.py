"""``ferrax.sparse.spsolve`` and jax's ``spsolve`` after install() on a CUDA device: the
``ferrax_spsolve`` target, which solves on the host from the device's buffers (batches of
matrices with one pattern, one matrix for many right-hand sides, vmap, singular matrices),
checked against scipy. Skips without a GPU (CI)."""

import jax
import numpy as np
import pytest
import scipy.sparse as sps
import scipy.sparse.linalg as spl
from jax.experimental.sparse import linalg as jax_sparse_linalg

import ferrax


def _system(rng, n, dtype):
    a = (sps.random(n, n, density=0.1, random_state=rng, format="csr") + 4 * sps.eye(n)).tocsr()
    a.sort_indices()
    return a.astype(dtype)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_batches_and_vmap_match_scipy(gpu, rng, installed, dtype, index_dtype):
    n = 64
    a = _system(rng, n, dtype)
    data = np.stack([a.data, 2 * a.data, 0.5 * a.data])
    b = (rng.standard_normal((3, n)) + (1j * rng.standard_normal((3, n))
                                        if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    put = lambda x: jax.device_put(x, gpu)
    indices, indptr = put(a.indices.astype(index_dtype)), put(a.indptr.astype(index_dtype))
    solve = jax.jit(lambda d, b: ferrax.sparse.spsolve(d, indices, indptr, b))
    assert "ferrax_spsolve" in solve.lower(put(data), put(b)).as_text()
    vmapped = jax.jit(jax.vmap(lambda d, b: jax_sparse_linalg.spsolve(d, indices, indptr, b)))
    shared = jax.jit(lambda b: ferrax.sparse.spsolve(put(a.data), indices, indptr, b))
    rtol = 1e-4 if np.finfo(dtype).eps > 1e-10 else 1e-10
    for got in (solve(put(data), put(b)), vmapped(put(data), put(b))):
        for k in range(3):
            expected = spl.spsolve(sps.csr_matrix((data[k], a.indices, a.indptr)), b[k])
            np.testing.assert_allclose(np.asarray(got)[k], expected, rtol=rtol, atol=rtol)
    got = shared(put(b))
    for k in range(3):
        np.testing.assert_allclose(np.asarray(got)[k], spl.spsolve(a, b[k]), rtol=rtol, atol=rtol)


def test_singular_matrix_is_nan(gpu, rng, installed):
    a = _system(rng, 16, np.float64).tolil()
    a[3, :] = 0
    a = a.tocsr()
    a.sort_indices()
    put = lambda x: jax.device_put(x, gpu)
    x = jax.jit(jax_sparse_linalg.spsolve)(put(a.data), put(a.indices.astype(np.int32)),
                                           put(a.indptr.astype(np.int32)), put(np.ones(16)))
    assert np.isnan(np.asarray(x)).all()
