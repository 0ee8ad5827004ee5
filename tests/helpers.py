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


# --- error bounds ----------------------------------------------------------------------------
# References independent of jaxlib's kernels (whose arithmetic changes between releases) and
# tolerances from the algorithms' rounding-error bounds (Higham, "Accuracy and Stability of
# Numerical Algorithms", 2nd ed.): u = eps / 2, gamma_k = k u / (1 - k u).


def gamma(k, dtype):
    """gamma_k = k u / (1 - k u) for ``dtype``'s unit roundoff u (complex: its real type's)."""
    u = float(np.finfo(np.dtype(dtype)).eps) / 2
    assert k * u < 1
    return k * u / (1 - k * u)


def extended(x):
    """``x`` in extended precision (x87 long double: 11 bits beyond f64), for references
    whose own rounding is negligible next to f32's and f64's error bounds."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return x.astype(np.clongdouble)
    return x.astype(np.longdouble) if x.dtype.kind == "f" else x


def sparse_product_bound(dtype, row_entries):
    """Elementwise bound factor on |fl(A v) - A v| / (|A| |v|) for rows of at most
    ``row_entries`` stored entries, summed in any order: gamma_k for real inner products
    (Higham (3.5)), sqrt(2) gamma_{k+2} for complex ones (Higham (3.13)), one more rounding
    for the result's own, and x2 for the reference's f64 or long double product of |A| |v|."""
    k = max(int(row_entries), 1)
    bound = np.sqrt(2) * gamma(k + 2, dtype) if np.dtype(dtype).kind == "c" else gamma(k, dtype)
    return 2 * bound + gamma(1, dtype)


def assert_within_bound(got, exact, bound, err_msg=""):
    """|got - exact| <= bound elementwise (``exact`` in extended precision, ``bound`` >= 0; a
    zero bound demands exactness), where ``exact`` rounds to a finite value; where it does
    not, ``got`` must be non-finite at the same places; real: NaN where ``exact`` is NaN and
    the same infinity where it is infinite (complex products of infinities are NaN or infinite
    depending on the formula, the textbook one or C99's Annex G: only finiteness counts)."""
    got = np.asarray(got)
    with np.errstate(over="ignore"):  # past the dtype's range: infinite, as it should be
        rounded = np.asarray(exact).astype(got.dtype)
    assert got.shape == rounded.shape, (got.shape, rounded.shape, err_msg)
    finite = np.isfinite(rounded)
    if got.dtype.kind != "c":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(rounded), err_msg=f"NaN {err_msg}")
        inf = np.isinf(rounded)
        np.testing.assert_array_equal(got[inf], rounded[inf], err_msg=f"inf {err_msg}")
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=f"finite {err_msg}")
    error = np.abs(extended(got[finite]) - exact[finite])
    excess = error - np.asarray(bound, dtype=error.real.dtype)[finite]
    if excess.size and excess.max() > 0:
        worst = np.argmax(excess)
        raise AssertionError(f"{err_msg}: {np.sum(excess > 0)} of {excess.size} entries past "
                             f"the bound; worst error {float(error[worst]):.3e} with bound "
                             f"{float(np.asarray(bound)[finite][worst]):.3e}")


def sparse_product_reference(data, rows, cols, rhs, out_rows):
    """(exact, magnitude): the sum over stored entries of data * rhs[col] into each row, in
    extended precision (only stored entries: IEEE 0 * inf = NaN stays out of structural
    zeros), and the same sum of |data| |rhs[col]| for the bound."""
    data, rhs = extended(data), extended(rhs)
    shape = (out_rows,) + rhs.shape[1:]
    rhs = rhs.reshape(rhs.shape[0], int(np.prod(rhs.shape[1:])))
    terms = data[:, None] * rhs[cols]
    sizes = abs(data[:, None]) * abs(rhs)[cols]
    exact = np.zeros((out_rows, terms.shape[1]), terms.dtype)
    magnitude = np.zeros((out_rows, terms.shape[1]), sizes.dtype)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, as it should be
        np.add.at(exact, rows, terms)
    np.add.at(magnitude, rows, sizes)
    return exact.reshape(shape), magnitude.reshape(shape)


def permutation_of_pivots(pivots, m):
    """The row permutation (0-based, of m rows) that LAPACK's swaps give: row j with
    pivots[j] (0-based), in order; one per batch entry."""
    pivots = np.asarray(pivots)
    perm = np.broadcast_to(np.arange(m, dtype=np.int32), pivots.shape[:-1] + (m,)).copy()
    for index in np.ndindex(*pivots.shape[:-1]):
        for i, j in enumerate(pivots[index]):
            perm[index][[i, j]] = perm[index][[j, i]]
    return perm


def lapack_pivots(a):
    """0-based pivots and info of SciPy's LAPACK ?getrf (called directly, not through jaxlib)
    on every matrix of the batch: partial pivoting's pivots, unambiguous for a regular matrix
    with distinct candidates."""
    import scipy.linalg.lapack as lapack

    a = np.asarray(a)
    getrf = lapack.get_lapack_funcs("getrf", dtype=a.dtype)
    *batch, m, n = a.shape
    pivots = np.zeros((*batch, min(m, n)), np.int32)
    info = np.zeros(tuple(batch), np.int32)
    for index in np.ndindex(*batch):
        _, pivots[index], info[index] = getrf(a[index])
    return pivots, info


def assert_valid_lu(a, lu, perm, err_msg=""):
    """``lu`` (packed L\\U) and ``perm`` are a partial-pivoting LU of ``a``, one per batch
    entry: ``perm`` is a permutation; |L| <= 1 (complex: sqrt 2, LAPACK pivots on |re| + |im|);
    and P A = L U within Higham's Theorem 9.3, |P A - L U| <= gamma_n |L| |U| for any order of
    the inner products (complex: sqrt(2) gamma_{n+2}), with L U in extended precision and x2 for
    the bound's own rounding. Holds for singular matrices too, whichever valid pivots."""
    a, lu, perm = np.asarray(a), np.asarray(lu), np.asarray(perm)
    *batch, m, n = a.shape
    k = min(m, n)
    assert lu.shape == a.shape and perm.shape == (*batch, m), err_msg
    np.testing.assert_array_equal(np.sort(perm, axis=-1),
                                  np.broadcast_to(np.arange(m), perm.shape), err_msg=err_msg)
    lower = extended(np.tril(lu[..., :, :k], -1) + np.eye(m, k, dtype=lu.dtype))
    upper = extended(np.triu(lu[..., :k, :]))
    limit = np.sqrt(2) if a.dtype.kind == "c" else 1.0
    assert np.abs(lower).max(initial=0) <= limit * (1 + 4 * np.finfo(a.dtype).eps), err_msg
    permuted = extended(np.take_along_axis(a, perm[..., :, None], axis=-2))
    factor = np.sqrt(2) * gamma(k + 2, a.dtype) if a.dtype.kind == "c" else gamma(k, a.dtype)
    bound = 2 * factor * (np.abs(lower) @ np.abs(upper))
    residual = np.abs(permuted - lower @ upper)
    excess = residual - bound
    assert excess.max(initial=0) <= 0, (err_msg, float(residual.max(initial=0)),
                                        float(bound.max(initial=0)))


def assert_valid_cholesky(a, lower, slack=0, err_msg=""):
    """``lower`` is the Cholesky factor of ``a``, one per batch entry: lower triangular and
    L L^H = A within Higham's Theorem 10.3, |A - L L^H| <= gamma_{n+1} |L| |L^H| (complex:
    sqrt(2) gamma_{n+3}), products in extended precision, x2 for the bound's own rounding;
    plus ``slack`` (elementwise: how far the A the factorization saw may be from ``a``)."""
    a, lower = np.asarray(a), np.asarray(lower)
    n = a.shape[-1]
    np.testing.assert_array_equal(np.triu(lower, 1), 0, err_msg=err_msg)
    l = extended(lower)
    lh = np.conj(np.swapaxes(l, -1, -2))
    factor = np.sqrt(2) * gamma(n + 3, lower.dtype) if lower.dtype.kind == "c" else gamma(
        n + 1, lower.dtype)
    bound = 2 * factor * (np.abs(l) @ np.abs(lh)) + slack
    residual = np.abs(extended(a) - l @ lh)
    assert (residual <= bound).all(), (err_msg, float((residual - bound).max()))


def assert_valid_qr_r(a, r, err_msg=""):
    """``r`` is the R of a Householder QR of ``a`` (m x n, R's k = min(m, n) rows), one per
    batch entry: upper triangular and R^H R = A^H A + dA with |dA_ij| <= (2 g + g^2)
    ||a_i|| ||a_j|| (columns), where A + dA = Q R with ||da_j|| <= g ||a_j||, g = gamma~_{mn}
    = c m n u (Higham's Theorem 19.4; c = 4 here), Q unitary."""
    a, r = np.asarray(a), np.asarray(r)
    *_, m, n = a.shape
    np.testing.assert_array_equal(np.tril(r, -1), 0, err_msg=err_msg)
    g = 4 * gamma(m * n, a.dtype)
    a, r = extended(a), extended(r)
    columns = np.sqrt(np.sum(np.abs(a) ** 2, axis=-2))
    bound = (2 * g + g * g) * columns[..., :, None] * columns[..., None, :]
    ah = np.conj(np.swapaxes(a, -1, -2))
    rh = np.conj(np.swapaxes(r, -1, -2))
    residual = np.abs(rh @ r - ah @ a)
    assert (residual <= bound).all(), (err_msg, float((residual - bound).max()))


def tridiagonal_matrix(dl, d, du):
    """The n x n matrices of gtsv's diagonals, in JAX's convention (dl[0], du[n-1] unused)."""
    n = d.shape[-1]
    m = np.zeros(d.shape + (n,), d.dtype)
    i = np.arange(n)
    m[..., i, i] = d
    m[..., i[1:], i[:-1]] = dl[..., 1:]
    m[..., i[:-1], i[1:]] = du[..., :-1]
    return m


def triton_like_call(opaque: bytes, **attributes):
    """A jitted ``f(x, *more) -> out`` (``out`` shaped as ``x``) that lowers for CUDA as
    jax-triton's ``triton_call`` does: its rule calls ``jax.ffi.ffi_lowering`` with jaxlib's
    Triton target, the payload and ``attributes``."""
    from jax.interpreters import mlir

    try:
        from jax.extend.core import Primitive
    except ImportError:  # jax 0.10
        from jax.core import Primitive

    primitive = Primitive("triton_like_call")
    primitive.def_abstract_eval(lambda x, *more: jax.core.ShapedArray(x.shape, x.dtype))

    def lowering(ctx, *operands):
        rule = jax.ffi.ffi_lowering("triton_kernel_call", api_version=4)
        return rule(ctx, *operands, opaque=opaque, **attributes)

    mlir.register_lowering(primitive, lowering, platform="cuda")
    return jax.jit(primitive.bind)


def triton_payloads() -> dict:
    """``tests/data/triton_payloads.npz``: jax-triton's payloads of Triton's ``scaled_add``
    (``plain``) and an autotuned add (``tuned``), as bytes."""
    import pathlib

    with np.load(pathlib.Path(__file__).parent / "data" / "triton_payloads.npz") as saved:
        return {key: saved[key].tobytes() for key in ("plain", "tuned")}


def rust_kernel_example():
    """``examples/rust-kernel/axpy.py`` (the example Rust kernel called from JAX), imported
    from its file."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "examples" / "rust-kernel" / "axpy.py"
    spec = importlib.util.spec_from_file_location("ferrax_example_axpy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
