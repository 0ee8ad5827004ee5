"""ferrax_gesvd (jaxlib's lapack_?gesvd_ffi contract) through ferrax.install():
jax.lax.linalg.svd(..., algorithm=SvdAlgorithm.QR) against stock jax computed first, plus the raw
target's error messages and info."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ferrax

TARGET = "ferrax_gesvd"
QR = jax.lax.linalg.SvdAlgorithm.QR
BATCHES = [(), (3,), (2, 2)]
MODES = [(full, uv) for full in (True, False) for uv in (True, False)]  # (full, compute_uv)


def qr_svd(a, full_matrices=True, compute_uv=True):
    return jax.lax.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv,
                              algorithm=QR)


def all_modes(*arrays, modes=MODES):
    """Each of `modes` for each array, in one compilation."""
    return [{mode: qr_svd(a, *mode) for mode in modes} for a in arrays]


def stock_then_ferrax(fn, *args):
    """``fn``'s outputs with stock jax, then with ferrax installed (the autouse fixture
    uninstalls it after the test)."""
    assert not ferrax.installed()
    expected = jax.tree.map(np.asarray, fn(*args))
    ferrax.install()
    return expected, jax.tree.map(np.asarray, fn(*args))


def assert_tree_close(assert_close, expected, got, dtype):
    """Same structure, shapes and dtypes; values within the dtype's tolerance; NaN exactly
    where stock jax has NaN."""
    assert jax.tree.structure(expected) == jax.tree.structure(got)
    for e, g in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
        assert_close(g, e, dtype)


def adjoint(x):
    return np.conj(np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 5)], ids=lambda s: "x".join(map(str, s)))
def test_matches_stock_and_reconstructs(dtype, shape, random_matrix, assert_close):
    arrays = [random_matrix(batch + shape, dtype) for batch in BATCHES]
    # Without (False, False), to save compile time: mode 'N' again, only with k-sized u and vt,
    # which the other tests cover.
    fn = jax.jit(lambda *x: all_modes(*x, modes=MODES[:3]))
    expected, got = stock_then_ferrax(fn, *arrays)
    hlo = fn.lower(*arrays).as_text()
    assert TARGET in hlo and "ferrax_gesdd" not in hlo
    assert_tree_close(assert_close, expected, got, dtype)

    m, n = shape
    k = min(m, n)
    real = np.finfo(dtype).dtype
    for a, batch, results in zip(arrays, BATCHES, got):
        u, s, vt = results[True, True]
        ur, sr, vtr = results[False, True]
        assert u.shape == batch + (m, m) and vt.shape == batch + (n, n)
        assert ur.shape == batch + (m, k) and vtr.shape == batch + (k, n)
        assert s.dtype == sr.dtype == real and s.shape == batch + (k,)
        assert_close((ur * sr[..., None, :]) @ vtr, a, dtype, kind="reconstruct")
        assert_close((u[..., :k] * s[..., None, :]) @ vt[..., :k, :], a, dtype, kind="reconstruct")
        for q, size in [(adjoint(u) @ u, m), (vt @ adjoint(vt), n), (adjoint(ur) @ ur, k),
                        (vtr @ adjoint(vtr), k)]:
            eye = np.broadcast_to(np.eye(size, dtype=dtype), batch + (size, size))
            assert_close(q, eye, dtype, kind="reconstruct")
        assert_close(results[True, False], s, dtype, kind="reconstruct")
        assert np.all(np.diff(s, axis=-1) <= 0) and np.all(s >= 0)
        assert_close(s, np.linalg.svd(a, compute_uv=False).astype(real), dtype, kind="reconstruct")


def test_default_algorithm_still_uses_gesdd(installed, random_matrix):
    for dtype in (np.float32, np.float64, np.complex64, np.complex128):
        a = random_matrix((2, 5, 3), dtype)
        for fn in (jnp.linalg.svd, jax.lax.linalg.svd,
                   lambda x: jax.lax.linalg.svd(x, compute_uv=False)):
            hlo = jax.jit(fn).lower(a).as_text()
            assert "ferrax_gesdd" in hlo and TARGET not in hlo
        assert TARGET in jax.jit(qr_svd).lower(a).as_text()


def test_vmap_and_jit(dtype, random_matrix, assert_close):
    a = random_matrix((3, 2, 4, 5), dtype)
    fn = jax.jit(jax.vmap(jax.vmap(lambda x: qr_svd(x, full_matrices=False)), in_axes=1))
    assert TARGET not in fn.lower(a).as_text()
    expected, got = stock_then_ferrax(fn, a)
    assert TARGET in fn.lower(a).as_text()
    assert_tree_close(assert_close, expected, got, dtype)
    u, s, vt = got
    assert u.shape == (2, 3, 4, 4) and s.shape == (2, 3, 4) and vt.shape == (2, 3, 4, 5)
    assert_close((u * s[..., None, :]) @ vt, np.swapaxes(a, 0, 1), dtype, kind="reconstruct")


def special_inputs(dtype, random_matrix):
    """A batch of rank-deficient, ill-conditioned and NaN matrices."""
    a = random_matrix((5, 5, 4), dtype)
    a[0] = random_matrix((5, 2), dtype) @ random_matrix((2, 4), dtype)  # rank 2
    a[1] = a[1] * np.logspace(0, -30 if np.finfo(dtype).bits >= 64 else -12, 4)  # cond huge
    a[2, :, 1] = a[2, :, 0]  # two equal columns
    a[3, 1, 2] = np.nan
    a[4] = np.outer(random_matrix((5,), dtype), random_matrix((4,), dtype))  # rank 1
    return a


def test_singular_ill_conditioned_and_nan_match_stock(dtype, random_matrix, assert_close):
    a = special_inputs(dtype, random_matrix)
    expected, got = stock_then_ferrax(jax.jit(all_modes), a)
    assert_tree_close(assert_close, expected, got, dtype)
    for x in jax.tree.leaves(got):
        assert np.isnan(x[3]).all() and not np.isnan(x[[0, 1, 2, 4]]).any()


def test_inf_without_vectors_matches_stock(dtype, random_matrix, assert_close):
    a = random_matrix((3, 5, 4), dtype)
    a[1, 0, 0], a[2, 3, 1] = np.inf, -np.inf
    fn = jax.jit(lambda x: [qr_svd(x, full, compute_uv=False) for full in (True, False)])
    expected, got = stock_then_ferrax(fn, a)
    assert_tree_close(assert_close, expected, got, dtype)
    for s in got:
        assert np.isnan(s[1:]).all() and not np.isnan(s[0]).any()


@pytest.mark.parametrize("full_matrices", [True, False])
def test_inf_with_vectors_returns_nan(installed, dtype, random_matrix, assert_close, full_matrices):
    # OpenBLAS's ?gesvd never returns here (stock jax hangs), so ferrax does not call it: the
    # matrix reports info = -5 and jax fills its outputs with NaN, as for NaN input.
    a = random_matrix((4, 5, 4), dtype)
    a[1, 2, 3], a[2, 0, 0], a[3, 4, 1] = np.inf, -np.inf, np.nan
    u, s, vt = map(np.asarray, jax.jit(lambda x: qr_svd(x, full_matrices))(a))
    for x in (u, s, vt):
        assert np.isnan(x[1:]).all() and not np.isnan(x[0]).any()
    real = np.finfo(dtype).dtype
    assert_close(s[0], np.linalg.svd(a[0], compute_uv=False).astype(real), dtype,
                 kind="reconstruct")


@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 0, 3, 5), (0, 3, 0), (3, 0), (0, 3), (2, 4, 0)],
                         ids=str)
def test_zero_size_matches_stock(shape, random_matrix, assert_close):
    a = random_matrix(shape, np.complex64)  # no entries: there is nothing random to draw
    fn = jax.jit(all_modes)
    expected, got = stock_then_ferrax(fn, a)
    assert_tree_close(assert_close, expected, got, np.complex64)
    # batch 0 reaches the target; m = 0 or n = 0 jax lowers itself.
    assert (TARGET in fn.lower(a).as_text()) == (0 in shape[:-2] and 0 not in shape[-2:])


def test_batch_split_across_threads_matches_stock(dtype, random_matrix, assert_close,
                                                  stock_per_output):
    # 24 x 20 matrices: chunks of at least 6 (the minimum work per task), so the batch of 16
    # runs in several chunks whenever the pool has more than one thread.
    a = random_matrix((16, 24, 20), dtype)
    fn = lambda x: [qr_svd(x, full_matrices=False), qr_svd(x, compute_uv=False)]  # noqa: E731
    expected = stock_per_output(fn, a)
    ferrax.install()
    got = jax.tree.map(np.asarray, jax.jit(fn)(a))
    assert_tree_close(assert_close, expected, got, dtype)
