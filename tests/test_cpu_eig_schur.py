"""ferrax_geev and ferrax_gees (jaxlib's lapack_?geev_ffi / lapack_?gees_ffi contracts) through
ferrax.install(): jax's eig and Schur functions against stock jax computed first, the
decompositions' identities, special and empty inputs, and the raw targets' error messages."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import ferrax

GEEV, GEES = "ferrax_geev", "ferrax_gees"
# (batch dims, n): eig and Schur take square matrices only.
CASES = [((), 5), ((3,), 1), ((3,), 2), ((2, 2), 5)]
REAL = (np.float32, np.float64)


def stock_then_ferrax(fn, *args):
    """``fn``'s outputs with stock jax, then with ferrax installed (the autouse fixture of
    conftest uninstalls it after the test)."""
    ferrax.uninstall()
    expected = jax.tree.map(np.asarray, fn(*args))
    ferrax.install()
    got = jax.tree.map(np.asarray, fn(*args))
    return expected, got


def hlo(fn, *args):
    return fn.lower(*args).as_text()


def conj_t(x):
    return np.conj(np.swapaxes(x, -1, -2))


def eig_both(a):
    return jax.lax.linalg.eig(a, compute_left_eigenvectors=True, compute_right_eigenvectors=True)


def schur_vectors(a):
    return jax.lax.linalg.schur(a, compute_schur_vectors=True)


@pytest.fixture
def assert_same(assert_close):
    """``assert_same(expected, got, dtype)``: every leaf within the dtype's tolerance, with
    the same shape, dtype and NaN pattern (both sides call the same LAPACK routine)."""

    def check(expected, got, dtype):
        leaves = jax.tree.leaves(expected), jax.tree.leaves(got)
        assert len(leaves[0]) == len(leaves[1])
        for i, (e, g) in enumerate(zip(*leaves)):
            assert_close(g, e, dtype, err_msg=f"output {i}")

    return check


@pytest.mark.parametrize("batch, n", CASES, ids=str)
def test_matches_stock_and_decomposes(random_matrix, assert_close, assert_same, dtype, batch, n):
    a = random_matrix(batch + (n, n), dtype)
    fn = jax.jit(lambda x: (eig_both(x), schur_vectors(x)))
    expected, got = stock_then_ferrax(fn, a)
    assert_same(expected, got, dtype)
    text = hlo(fn, a)
    assert GEEV in text and GEES in text

    (w, vl, vr), (t, z) = got
    assert w.shape == batch + (n,) and vl.shape == vr.shape == a.shape
    assert w.dtype == vl.dtype == vr.dtype == np.result_type(dtype, np.complex64)
    # A v = w v and u^H A = w u^H, with unit-norm vectors.
    assert_close(a @ vr, vr * w[..., None, :], dtype, kind="reconstruct")
    assert_close(conj_t(vl) @ a, w[..., :, None] * conj_t(vl), dtype, kind="reconstruct")
    for v in (vl, vr):
        assert_close(np.linalg.norm(v, axis=-2), np.ones(batch + (n,), v.real.dtype), dtype,
                     kind="reconstruct")

    # A = Z T Z^H with Z unitary and T (quasi) upper triangular.
    assert t.dtype == z.dtype == np.dtype(dtype) and t.shape == z.shape == a.shape
    assert_close(z @ t @ conj_t(z), a, dtype, kind="reconstruct")
    eye = np.broadcast_to(np.eye(n, dtype=dtype), a.shape)
    assert_close(conj_t(z) @ z, eye, dtype, kind="reconstruct")
    if np.dtype(dtype).kind == "c":
        assert not np.tril(t, -1).any()
    else:  # 2x2 blocks on the diagonal for conjugate pairs, never two in a row
        assert not np.tril(t, -2).any()
        sub = np.diagonal(t, -1, -2, -1) != 0
        assert not (sub[..., 1:] & sub[..., :-1]).any()


def real_with_conjugate_pairs(rng, dtype, batch):
    """Real matrices similar to blockdiag([[a, b], [-b, a]], [[c, d], [-d, c]], e): two
    conjugate pairs of eigenvalues a ± ib, c ± id and one real eigenvalue e."""
    blocks = np.zeros(batch + (5, 5))
    for k in (0, 2):
        re, im = rng.standard_normal(batch), 0.5 + rng.random(batch)
        blocks[..., k, k] = blocks[..., k + 1, k + 1] = re
        blocks[..., k, k + 1], blocks[..., k + 1, k] = im, -im
    blocks[..., 4, 4] = rng.standard_normal(batch)
    s = rng.standard_normal(batch + (5, 5)) + 3 * np.eye(5)
    return (s @ blocks @ np.linalg.inv(s)).astype(dtype)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_real_input_conjugate_pairs_unpacked(rng, assert_close, assert_same, dtype):
    a = real_with_conjugate_pairs(rng, dtype, (4,))
    fn = jax.jit(eig_both)
    expected, got = stock_then_ferrax(fn, a)
    assert_same(expected, got, dtype)
    w, vl, vr = got
    assert (w.imag != 0).sum(axis=-1).tolist() == [4] * 4
    # LAPACK orders each pair with the positive imaginary part first; the pair's vectors are
    # each other's conjugates exactly (one packed real/imaginary pair, unpacked).
    for b in range(4):
        j = [i for i in range(5) if w[b, i].imag > 0]
        np.testing.assert_array_equal(w[b, [i + 1 for i in j]], np.conj(w[b, j]))
        for v in (vl, vr):
            np.testing.assert_array_equal(v[b][:, [i + 1 for i in j]], np.conj(v[b][:, j]))
            real = [i for i in range(5) if w[b, i].imag == 0]
            assert not v[b][:, real].imag.any()
    assert_close(a @ vr, vr * w[..., None, :], dtype, kind="reconstruct")
    assert_close(conj_t(vl) @ a, w[..., :, None] * conj_t(vl), dtype, kind="reconstruct")


def lax_eig(left, right):
    return lambda a: jax.lax.linalg.eig(a, compute_left_eigenvectors=left,
                                        compute_right_eigenvectors=right)


# Every jax entry point that lowers to geev or gees on CPU, with the target it must reach.
USERS = {
    "jnp.linalg.eig": (jnp.linalg.eig, GEEV),
    "jnp.linalg.eigvals": (jnp.linalg.eigvals, GEEV),
    "lax.eig(left, right)": (lax_eig(True, True), GEEV),
    "lax.eig(left)": (lax_eig(True, False), GEEV),
    "lax.eig(right)": (lax_eig(False, True), GEEV),
    "lax.eig(values)": (lax_eig(False, False), GEEV),
    "jsl.schur(real)": (lambda a: jsl.schur(a, output="real"), GEES),
    "jsl.schur(complex)": (lambda a: jsl.schur(a, output="complex"), GEES),
    "lax.schur(vectors)": (schur_vectors, GEES),
    "lax.schur(form only)": (lambda a: jax.lax.linalg.schur(a, compute_schur_vectors=False), GEES),
}
# Schur-based matrix functions of one matrix, slow to compile: float64 input only, which
# reaches both gees paths (sqrtm asks for the complex Schur form, funm for the real one).
MATRIX_FUNCTIONS = {
    "jsl.sqrtm": jsl.sqrtm,
    "jsl.funm(exp)": lambda a: jsl.funm(a, jnp.exp),
}


def test_jax_functions_route_to_ferrax(random_matrix, assert_same, dtype):
    a = random_matrix((2, 4, 4), dtype)
    for name, (fn, target) in USERS.items():
        assert target not in hlo(jax.jit(fn), a), name
    # One compilation for all of them.
    everything = jax.jit(lambda x: {name: fn(x) for name, (fn, _) in USERS.items()})
    expected, got = stock_then_ferrax(everything, a)
    for name, (fn, target) in USERS.items():
        assert target in hlo(jax.jit(fn), a), name
        assert_same(expected[name], got[name], dtype)


@pytest.mark.parametrize("name", MATRIX_FUNCTIONS)
def test_matrix_functions_route_to_ferrax(random_matrix, assert_same, name):
    dtype = np.float64
    fn = jax.jit(MATRIX_FUNCTIONS[name])
    a = random_matrix((4, 4), dtype)
    assert GEES not in hlo(fn, a)
    expected, got = stock_then_ferrax(fn, a)
    assert GEES in hlo(fn, a)
    assert_same(expected, got, dtype)


def test_vmap_and_jit(random_matrix, assert_same, dtype):
    a = random_matrix((3, 2, 4, 4), dtype)
    fn = jax.jit(jax.vmap(jax.vmap(lambda x: (eig_both(x), schur_vectors(x))), in_axes=1))
    expected, got = stock_then_ferrax(fn, a)
    assert_same(expected, got, dtype)
    text = hlo(fn, a)
    assert GEEV in text and GEES in text


def special_inputs(random_matrix, dtype):
    """Singular, ill-conditioned, defective and non-finite matrices, by batch index."""
    big = 1e30 if np.finfo(dtype).bits >= 64 else 1e12
    a = random_matrix((7, 4, 4), dtype)
    a[0] = random_matrix((4, 2), dtype) @ random_matrix((2, 4), dtype)  # rank 2
    a[1] = a[1] * np.logspace(0, np.log10(big), 4)  # columns scaled over many decades
    s = random_matrix((4, 4), dtype) + 3 * np.eye(4, dtype=dtype)
    a[2] = s @ np.triu(np.full((4, 4), 1.5, dtype)) @ np.linalg.inv(s)  # defective: one Jordan block
    a[3, 1, 2] = np.nan
    a[4, 0, 3] = np.inf
    a[5, 2, 2] = -np.inf
    a[6] = np.outer(random_matrix((4,), dtype), random_matrix((4,), dtype))  # rank 1
    return a


NON_FINITE = [3, 4, 5]


def test_special_inputs_match_stock(random_matrix, assert_same, dtype):
    a = special_inputs(random_matrix, dtype)
    fn = jax.jit(lambda x: (eig_both(x), schur_vectors(x)))
    expected, got = stock_then_ferrax(fn, a)
    assert_same(expected, got, dtype)
    finite = [i for i in range(len(a)) if i not in NON_FINITE]
    # geev never sees a non-finite matrix (info -4): jax makes every output NaN.
    for x in got[0]:
        assert np.isnan(x[NON_FINITE]).all() and not np.isnan(x[finite]).any()
    # gees does: NaN makes its QR iteration fail (info > 0, NaN outputs).
    for x in got[1]:
        assert np.isnan(x[3]).all() and not np.isnan(x[finite]).any()


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0), (0, 4, 4), (2, 0, 3, 3)], ids=str)
def test_zero_size_matches_stock(assert_same, dtype, shape):
    a = np.full(shape, 1.5, dtype)  # no entries, or none read
    fn = jax.jit(lambda x: (eig_both(x), schur_vectors(x), jnp.linalg.eigvals(x)))
    expected, got = stock_then_ferrax(fn, a)
    assert_same(expected, got, dtype)
    text = hlo(fn, a)
    assert GEEV in text and GEES in text


def test_batch_split_across_threads_matches_stock(random_matrix, assert_same, dtype,
                                                  stock_per_output):
    # Two 24 x 24 matrices cost more than one task's minimum, so the batch runs in chunks.
    a = random_matrix((4, 24, 24), dtype)
    fn = lambda x: (eig_both(x), schur_vectors(x))  # noqa: E731
    expected = stock_per_output(fn, a)
    ferrax.install()
    got = jax.tree.map(np.asarray, jax.jit(fn)(a))
    assert_same(expected, got, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_large_matrices_match_stock(random_matrix, assert_same, dtype):
    # n > 75 takes LAPACK's multishift QR path, whose workspace query goes deeper (one real
    # and one complex routine: the s/d and c/z sources are the same). Slow with OpenBLAS
    # threads on few cores, hence two dtypes only.
    a = random_matrix((2, 80, 80), dtype)
    fn = jax.jit(lambda x: (eig_both(x), schur_vectors(x)))
    expected, got = stock_then_ferrax(fn, a)
    assert_same(expected, got, dtype)


# --- the raw targets ---------------------------------------------------------------------
# ffi_call gives row-major layouts: the targets then see each matrix transposed, which has the
# same eigenvalues; enough for `info`, eigenvalues and errors.

V, N = np.uint8(ord("V")), np.uint8(ord("N"))


def raw_geev(a, left=V, right=N, real_results=None, vector_dtype=None):
    *batch, n, _ = a.shape
    real = a.dtype.kind != "c" if real_results is None else real_results
    vector_dtype = vector_dtype or np.result_type(a.dtype, np.complex64)
    results = (
        [jax.ShapeDtypeStruct((*batch, n), a.dtype)] * (2 if real else 1)
        + [jax.ShapeDtypeStruct(a.shape, vector_dtype)] * 2
        + [jax.ShapeDtypeStruct(tuple(batch), np.int32)]
    )
    call = jax.ffi.ffi_call(GEEV, results)
    return [np.asarray(r) for r in call(a, compute_left=left, compute_right=right)]


def raw_gees(a, mode=V, sort=N):
    *batch, n, _ = a.shape
    results = (
        [jax.ShapeDtypeStruct(a.shape, a.dtype)] * 2
        + [jax.ShapeDtypeStruct((*batch, n), a.dtype)] * (2 if a.dtype.kind != "c" else 1)
        + [jax.ShapeDtypeStruct(tuple(batch), np.int32)] * 2
    )
    call = jax.ffi.ffi_call(GEES, results, input_output_aliases={0: 0})
    return [np.asarray(r) for r in call(a, mode=mode, sort=sort)]


def raw_error(call, *args, **kwargs):
    with pytest.raises(Exception) as failure:
        call(*args, **kwargs)
    return str(failure.value)


def test_raw_results_info_and_unrequested_vectors(random_matrix, dtype):
    a = random_matrix((3, 4, 4), dtype)
    a[1, 2, 0] = np.nan
    *w, vl, vr, info = raw_geev(a, left=N, right=V)
    assert info.tolist() == [0, -4, 0]
    w = w[0] if len(w) == 1 else w[0] + 1j * w[1]
    expected = np.linalg.eigvals(a[[0, 2]].astype(np.complex128))

    def assert_eigvals(w):  # the same set, in whatever order
        distance = np.abs(w[[0, 2], :, None] - expected[:, None, :]).min(axis=-1)
        assert distance.max() < (1e-4 if np.finfo(dtype).bits == 32 else 1e-10)

    assert_eigvals(w)
    assert not vl.any() and vr[[0, 2]].any()  # vectors not asked for are zero

    _, z, *w, sdim, info = raw_gees(a, mode=N)
    assert info[[0, 2]].tolist() == [0, 0] and info[1] > 0 and not sdim.any()
    assert not z.any()
    assert_eigvals(w[0] if len(w) == 1 else w[0] + 1j * w[1])


def test_raw_wrong_dtype_names_target_and_operand(rng):
    a = rng.integers(1, 9, (3, 3), dtype=np.int32)
    for call in (raw_geev, raw_gees):
        message = raw_error(call, a)
        target = GEEV if call is raw_geev else GEES
        assert f"{target}: operand 0 'x': expected dtype f32, f64, c64 or c128, got s32" in message


def test_raw_wrong_results_name_the_result(random_matrix):
    a = random_matrix((2, 3, 3), np.float64)
    message = raw_error(raw_geev, a, vector_dtype=np.float64)
    assert GEEV in message and "result 2 'vl': expected dtype c128, got f64" in message
    message = raw_error(raw_geev, a, real_results=False)
    assert "operand 0 'x': dtype f64 takes the results (wr, wi, vl, vr, info)" in message
    message = raw_error(raw_geev, a.astype(np.complex64), real_results=True)
    assert "operand 0 'x': dtype c64 takes the results (w, vl, vr, info)" in message
    message = raw_error(raw_gees, random_matrix((2, 3, 4), np.float32))
    assert GEES in message and "operand 0 'x': expected square matrices" in message


@pytest.mark.parametrize(
    "call, attrs, expected",
    [
        (raw_geev, {"left": np.uint8(ord("X"))},
         "attribute 'compute_left': expected one of 'V', 'N', got 88"),
        (raw_geev, {"right": ord("V")}, "attribute 'compute_right': expected u8 scalar, got s64"),
        (raw_geev, {"right": "V"}, "attribute 'compute_right': expected u8 scalar, got string"),
        (raw_gees, {"mode": np.uint8(ord("A"))},
         "attribute 'mode': expected one of 'V', 'N', got 65"),
        (raw_gees, {"sort": True}, "attribute 'sort': expected u8 scalar, got pred"),
        (raw_gees, {"sort": np.uint8(ord("S"))},
         "UNIMPLEMENTED: ferrax_gees: attribute 'sort': 'S' (sorted eigenvalues) is not supported"),
    ],
    ids=["geev-left-letter", "geev-right-int", "geev-right-string", "gees-mode-letter",
         "gees-sort-bool", "gees-sort-S"],
)
def test_raw_wrong_attribute_names_target_and_attribute(random_matrix, call, attrs, expected):
    message = raw_error(call, random_matrix((4, 4), np.float32), **attrs)
    assert (GEEV if call is raw_geev else GEES) in message
    assert expected in message
