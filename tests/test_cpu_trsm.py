"""ferrax_trsm (jaxlib's lapack_?trsm_ffi contract) through ferrax.install(), against stock jax.

ferrax solves small systems (up to ferrax's CPU_SMALL_MAX) in Rust and larger ones with the
BLAS stock jax calls (SciPy's OpenBLAS), so results are compared with stock to a dtype-dependent
tolerance with the same NaN/inf positions; the identity op(A) X = B (or X op(A) = B) is checked
too.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.lax.linalg import triangular_solve
from jax.scipy.linalg import cho_factor, cho_solve, solve_triangular

import ferrax
from helpers import assert_matches_stock

jax.config.update("jax_enable_x64", True)

TARGET = "ferrax_trsm"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
BATCHES = [(), (3,), (2, 2)]
TOL = {np.float32: 1e-4, np.float64: 1e-11, np.complex64: 1e-4, np.complex128: 1e-11}


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def triangular(rng, batch, k, dtype):
    """Well-conditioned in both triangles, with or without the stored diagonal: small
    off-diagonal entries and a dominant diagonal."""
    return (0.3 * rand(rng, batch + (k, k), dtype) + k * np.eye(k)).astype(dtype)


@pytest.fixture
def compare():
    """`compare(fn, *args)` -> (stock, ferrax) results of `jax.jit(fn)`: stock jax first, then
    with ferrax installed, checking that only the latter lowers to ferrax_trsm."""
    ferrax.uninstall()

    def run(fn, *args):
        def lowered_and_run(expect_target):
            lowered = jax.jit(fn).lower(*args)
            assert (TARGET in lowered.as_text()) == expect_target
            return jax.device_get(lowered.compile()(*args))

        stock = lowered_and_run(False)
        ferrax.install()
        try:
            ours = lowered_and_run(True)
        finally:
            ferrax.uninstall()
        return stock, ours

    yield run
    ferrax.uninstall()


def assert_same(stock, ours):
    assert_matches_stock(ours, stock, TOL[np.asarray(jax.tree.leaves(stock)[0]).dtype.type])


def op(a, lower, trans, unit):
    """The matrix trsm applies: the `lower` triangle of `a` (unit diagonal if asked),
    transposed (trans 1) or conjugate-transposed (trans 2)."""
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t = t - t * np.eye(a.shape[-1]) + np.eye(a.shape[-1])
    if trans:
        t = np.swapaxes(t, -1, -2)
    return t.conj() if trans == 2 else t


def assert_solves(lhs, rhs, dtype):
    tol = TOL[dtype]
    scale = max(1.0, np.abs(rhs).max()) if rhs.size else 1.0
    np.testing.assert_allclose(lhs, rhs, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_solve_triangular(compare, dtype, batch):
    rng = np.random.default_rng()
    k = 5
    a = triangular(rng, batch, k, dtype)
    # Tall and wide right-hand sides, and a vector one (unbatched: jax deprecates batched
    # vectors).
    bs = [rand(rng, batch + (k, 2), dtype), rand(rng, batch + (k, 7), dtype)]
    if not batch:
        bs.append(rand(rng, (k,), dtype))
    variants = list(itertools.product([True, False], [0, 1, 2], [False, True]))

    def fn(a, *bs):
        return [solve_triangular(a, b, lower=lower, trans=trans, unit_diagonal=unit)
                for lower, trans, unit in variants for b in bs]

    stock, ours = compare(fn, a, *bs)
    assert_same(stock, ours)
    xs = iter(ours)
    for lower, trans, unit in variants:
        for b in bs:
            x = next(xs)
            t = op(a, lower, trans, unit)
            if b.ndim == a.ndim - 1:
                assert_solves(np.einsum("...ij,...j->...i", t, x), b, dtype)
            else:
                assert_solves(t @ x, b, dtype)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_lax_triangular_solve(compare, dtype, batch):
    rng = np.random.default_rng()
    k = 4
    a = triangular(rng, batch, k, dtype)
    # For each side: a tall and a wide B.
    b_left = [rand(rng, batch + (k, 2), dtype), rand(rng, batch + (k, 6), dtype)]
    b_right = [rand(rng, batch + (6, k), dtype), rand(rng, batch + (2, k), dtype)]
    variants = list(itertools.product([True, False], repeat=5))

    def fn(a, *bs):
        out = []
        for left, lower, transpose, conj, unit in variants:
            for b in bs[:2] if left else bs[2:]:
                out.append(triangular_solve(a, b, left_side=left, lower=lower,
                                            transpose_a=transpose, conjugate_a=conj,
                                            unit_diagonal=unit))
        return out

    stock, ours = compare(fn, a, *b_left, *b_right)
    assert_same(stock, ours)
    xs = iter(ours)
    for left, lower, transpose, conj, unit in variants:
        t = op(a, lower, int(transpose), unit)
        t = t.conj() if conj else t
        for b in b_left if left else b_right:
            x = next(xs)
            assert_solves(t @ x if left else x @ t, b, dtype)


# The slowest to compile; batch (3,) is covered by the tests above.
@pytest.mark.parametrize("batch", [(), (2, 2)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_solve_and_cho_solve(compare, dtype, batch, assert_close):
    rng = np.random.default_rng()
    k = 6
    a = rand(rng, batch + (k, k), dtype) + k * np.eye(k, dtype=dtype)
    spd = (a @ np.swapaxes(a, -1, -2).conj()).astype(dtype)
    b = rand(rng, batch + (k, 3), dtype)

    def fn(a, spd, b):
        return (jnp.linalg.solve(a, b),
                cho_solve(cho_factor(spd, lower=True), b),
                cho_solve(cho_factor(spd, lower=False), b))

    stock, ours = compare(fn, a, spd, b)
    # Not bit-identical: ferrax factors matrices this small in Rust (LAPACK's unblocked
    # order), OpenBLAS's getrf/potrf round differently; the solves' residuals are checked below.
    for s, o in zip(stock, ours, strict=True):
        assert_close(o, s, dtype, kind="reconstruct")
    x, y, z = ours
    assert_solves(a @ x, b, dtype)
    assert_solves(spd @ y, b, dtype)
    assert_solves(spd @ z, b, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_vmap_and_jit(compare, dtype):
    rng = np.random.default_rng()
    a = triangular(rng, (3,), 4, dtype)
    b = rand(rng, (3, 4, 2), dtype)
    solve = lambda a, b: solve_triangular(a, b, lower=True, trans=1)

    def fn(a, b):
        return (jax.vmap(solve)(a, b),
                jax.vmap(solve, in_axes=(None, 0))(a[0], b),
                jax.vmap(solve, in_axes=(0, None))(a, b[0]),
                jax.vmap(jax.vmap(solve, in_axes=(None, 2), out_axes=2))(a, b[..., None]))

    stock, ours = compare(fn, a, b)
    assert_same(stock, ours)
    per_item = np.stack([solve(a[i], b[i]) for i in range(3)])
    np.testing.assert_allclose(ours[0], per_item, rtol=TOL[dtype])
    np.testing.assert_allclose(ours[3][..., 0], per_item, rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_singular_ill_conditioned_and_nan(compare, dtype):
    rng = np.random.default_rng()
    k = 5
    a = triangular(rng, (5,), k, dtype)
    a[0, 2, 2] = 0  # singular: inf/nan from the division by zero
    a[1, 3, 1] = np.nan  # NaN in the lower triangle only
    a[2] = np.tril(1e4 * rand(rng, (k, k), dtype)) + 1e-6 * np.eye(k)  # ill-conditioned
    b = rand(rng, (5, k, 3), dtype)
    b[3, 1, 0] = np.nan  # NaN right-hand side
    b[4, 0, 1] = np.inf

    def fn(a, b):
        return [solve_triangular(a, b, lower=lower, trans=trans)
                for lower in (True, False) for trans in (0, 2)]

    stock, ours = compare(fn, a, b)
    assert_same(stock, ours)
    for x in ours:
        assert not np.isfinite(x[0]).all() and not np.isfinite(x[3]).all()


@pytest.mark.parametrize("k", [9, 16, 24, 25])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_single_right_hand_side(compare, dtype, k):
    """One right-hand side, either side, every triangle/transpose/diagonal: ferrax solves it
    in Rust up to order 24 (SINGLE_RHS_MAX), with BLAS above; a singular and a NaN matrix."""
    rng = np.random.default_rng()
    a = triangular(rng, (4,), k, dtype)
    a[0, k // 2, k // 2] = 0
    a[1, k - 1, 0] = np.nan
    column, row = rand(rng, (4, k, 1), dtype), rand(rng, (4, 1, k), dtype)
    variants = list(itertools.product([True, False], repeat=4))

    def fn(a, column, row):
        return [triangular_solve(a, column if left else row, left_side=left, lower=lower,
                                 transpose_a=transpose, unit_diagonal=unit)
                for left, lower, transpose, unit in variants]

    stock, ours = compare(fn, a, column, row)
    assert_same(stock, ours)
    for (left, lower, transpose, unit), x in zip(variants, ours):
        t = op(a[2:], lower, int(transpose), unit)
        b = (column if left else row)[2:]
        assert_solves(t @ x[2:] if left else x[2:] @ t, b, dtype)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize(
    "batch,k,other",
    [((0,), 4, 2), ((3,), 0, 2), ((3,), 4, 0), ((0,), 0, 0), ((2, 0), 3, 3)],
    ids=str)
def test_zero_size(compare, left, batch, k, other):
    rng = np.random.default_rng()
    a = triangular(rng, batch, k, np.float64)
    b = rand(rng, batch + ((k, other) if left else (other, k)), np.float64)
    fn = lambda a, b: triangular_solve(a, b, left_side=left, lower=True)
    stock, ours = compare(fn, a, b)
    assert ours.shape == b.shape
    assert_same(stock, ours)


def raw_trsm(x, y, **attrs):
    attrs = {"side": np.uint8(ord("L")), "uplo": np.uint8(ord("L")),
             "trans_x": np.uint8(ord("N")), "diag": np.uint8(ord("N")), **attrs}
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(y.shape, y.dtype),
                            input_output_aliases={1: 0})
    return jax.block_until_ready(jax.jit(lambda x, y: call(x, y, **attrs))(x, y))


def test_raw_ffi_call_errors():
    rng = np.random.default_rng()
    a = triangular(rng, (), 3, np.float32)
    b = rand(rng, (3, 2), np.float32)
    assert np.isfinite(raw_trsm(a, b)).all()  # the baseline call is valid
    cases = [
        ((a.astype(np.int32), b), {}, r"operand 0 'x': expected dtype f32, f64, c64 or c128, got s32"),
        ((a, b.astype(np.float64)), {}, r"operand 1 'y': expected dtype f32, got f64"),
        ((a[:2, :2], b), {}, r"operand 0 'x': expected shape \[3, 3\], got shape \[2, 2\]"),
        ((a, b), {"side": np.uint8(ord("R"))}, r"operand 0 'x': expected shape \[2, 2\]"),
        ((a, b), {"side": np.uint8(ord("X"))}, r"attribute 'side': expected one of 'L', 'R', got 88"),
        ((a, b), {"trans_x": np.uint8(ord("n"))}, r"attribute 'trans_x': expected one of 'N', 'T', 'C'"),
        ((a, b), {"diag": 85}, r"attribute 'diag': expected u8 scalar, got s64 scalar"),
    ]
    for args, attrs, message in cases:
        with pytest.raises(jax.errors.JaxRuntimeError, match=f"{TARGET}: {message}"):
            raw_trsm(*args, **attrs)
