"""``ferrax.sparse.spsolve`` on a CUDA device, where ferrax has no target yet: its primitive
runs jaxlib's ``cusolver_csrlsvqr_ffi`` once per system (batches, vmap of jax's spsolve after
install()), checked against scipy. Skips without a GPU (CI)."""

import jax
import numpy as np
import scipy.sparse as sps
import scipy.sparse.linalg as spl
from jax.experimental.sparse import linalg as jax_sparse_linalg

import ferrax


def test_batches_run_one_system_at_a_time(gpu, rng, installed):
    n = 64
    a = (sps.random(n, n, density=0.1, random_state=rng, format="csr") + 4 * sps.eye(n)).tocsr()
    a.sort_indices()
    data = np.stack([a.data, 2 * a.data]).astype(np.float32)
    b = rng.standard_normal((2, n)).astype(np.float32)
    put = lambda x: jax.device_put(x, gpu)
    indices, indptr = put(a.indices.astype(np.int32)), put(a.indptr.astype(np.int32))
    x = ferrax.sparse.spsolve(put(data), indices, indptr, put(b))
    vmapped = jax.vmap(lambda d, b: jax_sparse_linalg.spsolve(d, indices, indptr, b))
    for got in (x, vmapped(put(data), put(b))):
        for k in range(2):
            expected = spl.spsolve(sps.csr_matrix((data[k], a.indices, a.indptr)), b[k])
            np.testing.assert_allclose(np.asarray(got)[k], expected, rtol=1e-4, atol=1e-4)
