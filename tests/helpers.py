"""Plain helpers shared by several test modules (fixtures live in conftest.py)."""

import jax
import numpy as np


def run(fn, *args):
    """``jax.jit(fn)(*args)`` with every output as a NumPy array."""
    return jax.tree.map(np.asarray, jax.jit(fn)(*args))


def assert_same(ours, stock):
    """Same tree, shapes and dtypes, and bit-identical values (NaN where stock has NaN)."""
    assert jax.tree.structure(ours) == jax.tree.structure(stock)
    for (path, o), s in zip(jax.tree_util.tree_flatten_with_path(ours)[0], jax.tree.leaves(stock)):
        where = jax.tree_util.keystr(path)
        assert (o.shape, o.dtype) == (s.shape, s.dtype), where
        np.testing.assert_array_equal(o, s, err_msg=where)


def assert_matches_stock(ours, stock, rtol, nonfinite_inputs=()):
    """Same tree, shapes, dtypes and NaN/inf positions as ``stock``, and finite values within
    ``rtol`` times each output's largest finite stock value: for results ferrax computes in
    another order of operations than jaxlib's LAPACK (its Rust small-matrix paths).
    ``nonfinite_inputs``: indices along every output's first axis of matrices whose input holds
    NaN or inf; how far those spread depends on the order of operations, so there the two need
    only agree on whether the result is all finite."""
    assert jax.tree.structure(ours) == jax.tree.structure(stock)
    for (path, o), s in zip(jax.tree_util.tree_flatten_with_path(ours)[0], jax.tree.leaves(stock)):
        where = jax.tree_util.keystr(path)
        assert (o.shape, o.dtype) == (s.shape, s.dtype), where
        for i in nonfinite_inputs:
            assert np.isfinite(o[i]).all() == np.isfinite(s[i]).all(), (where, i)
        if nonfinite_inputs:
            keep = [i for i in range(o.shape[0]) if i not in nonfinite_inputs]
            o, s = o[keep], s[keep]
        finite = np.isfinite(s)
        np.testing.assert_array_equal(np.isfinite(o), finite, err_msg=where)
        o, s = np.where(finite, o, 0), np.where(finite, s, 0)
        scale = max(1.0, float(np.abs(s).max(initial=0)))
        np.testing.assert_allclose(o, s, rtol=0, atol=rtol * scale, err_msg=where)



def aligned_columns(v, reference):
    """``v``'s columns times the unit factors that best align them with ``reference``'s:
    eigenvectors are defined up to such a factor (a sign for real matrices), and which one
    LAPACK's rotations produce can flip with rounding (for f32, in a few percent of random
    16×16 matrices; stock LAPACK's own f32 and f64 results disagree on a third of them)."""
    overlap = np.sum(np.conj(v) * reference, axis=-2, keepdims=True)
    magnitude = np.abs(overlap)
    return v * np.where(magnitude > 0, overlap / np.where(magnitude > 0, magnitude, 1), 1)


def raw_svd(target, a, mode=np.uint8(ord("A")), s_dtype=None, u_cols=None):
    """An SVD target (ferrax_gesdd, ferrax_gesvd) called directly with jaxlib's operands
    (row-major layouts: fine for errors, info and the singular values of square matrices)."""
    *batch, m, n = a.shape
    k = min(m, n)
    full = mode == np.uint8(ord("A"))
    if s_dtype is None:
        s_dtype = np.finfo(a.dtype).dtype if a.dtype.kind in "fc" else np.float32
    results = [
        jax.ShapeDtypeStruct(a.shape, a.dtype),
        jax.ShapeDtypeStruct((*batch, k), s_dtype),
        jax.ShapeDtypeStruct((*batch, m, u_cols or (m if full else k)), a.dtype),
        jax.ShapeDtypeStruct((*batch, n if full else k, n), a.dtype),
        jax.ShapeDtypeStruct(tuple(batch), np.int32),
    ]
    call = jax.ffi.ffi_call(target, results, input_output_aliases={0: 0})
    return jax.tree.map(np.asarray, call(a, mode=mode))


def reflector_product(x, taus, lower):
    """LAPACK's Q from ?sytrd's reflectors in the `lower` or upper triangle of `x`, one matrix:
    Q = H(1)...H(n-1) (lower) or H(n-1)...H(1) (upper), H(i) = I - tau v v^H."""
    n = x.shape[-1]
    q = np.eye(n, dtype=x.dtype)
    for j in range(n - 1):
        v = np.zeros(n, x.dtype)
        if lower:
            v[j + 1], v[j + 2:] = 1, x[j + 2:, j]
        else:
            v[j], v[:j] = 1, x[:j, j + 1]
        h = np.eye(n, dtype=x.dtype) - taus[j] * np.outer(v, v.conj())
        q = q @ h if lower else h @ q
    return q
