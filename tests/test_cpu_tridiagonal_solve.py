"""ferrax_gtsv (jaxlib's lapack_?gtsv_ffi contract) and ferrax_tridiagonal_solve_perturbed
(tridiagonal_solve_perturbed_ffi) through ferrax.install(): jax.lax.linalg.tridiagonal_solve
with and without perturb_singular, and jax.scipy.linalg.eigh_tridiagonal (inverse iteration with
the perturbed solve): residuals within the solves' backward-error bound, and stock jax's results
within that bound times each system's condition number; plus the raw targets' error messages.
(jax 0.10.2 has no jax.scipy.linalg.solve_banded.)"""

import jax
import numpy as np
import pytest

import ferrax
from helpers import assert_matches_stock, extended, tridiagonal_matrix

GTSV, PERTURBED = "ferrax_gtsv", "ferrax_tridiagonal_solve_perturbed"
TARGETS = {False: GTSV, True: PERTURBED}
# (batch, (m, nrhs)): every batch rank with square, tall and wide right-hand sides, and 1 x 1
# systems.
CASES = [((), (4, 4)), ((), (6, 2)), ((3,), (3, 5)), ((3,), (1, 2)), ((2, 2), (6, 2)),
         ((2, 2), (4, 4))]


def solve(perturb):
    return lambda dl, d, du, b: jax.lax.linalg.tridiagonal_solve(dl, d, du, b,
                                                                 perturb_singular=perturb)


def both(dl, d, du, b):
    return solve(False)(dl, d, du, b), solve(True)(dl, d, du, b)


@pytest.fixture
def stock_vs_ferrax():
    """``run(fn, *args, targets)``: jitted ``fn``'s outputs on stock jax, then with ferrax
    installed, checking that only the installed lowering calls ``targets``."""

    def run(fn, *args, targets):
        lowered = jax.jit(fn).lower(*args)
        assert not any(t in lowered.as_text() for t in targets)
        expected = jax.tree.map(np.asarray, lowered.compile()(*args))
        ferrax.install()
        lowered = jax.jit(fn).lower(*args)
        assert all(t in lowered.as_text() for t in targets), lowered.as_text()
        return expected, jax.tree.map(np.asarray, lowered.compile()(*args))

    yield run
    ferrax.uninstall()


def system(random_matrix, batch, m, nrhs, dtype, dominant=0.0):
    """Random diagonals and right-hand sides; ``dominant`` is added to the diagonal."""
    dl, d, du = (random_matrix(batch + (m,), dtype) for _ in range(3))
    return dl, (d + dominant).astype(dtype), du, random_matrix(batch + (m, nrhs), dtype)


def product(dl, d, du, x):
    """A @ x for the tridiagonal A (dl[..., 0] and du[..., -1] lie outside A)."""
    y = d[..., None] * x
    y[..., 1:, :] += dl[..., 1:, None] * x[..., :-1, :]
    y[..., :-1, :] += du[..., :-1, None] * x[..., 1:, :]
    return y


# Backward error of either solve, normwise per system: ||b - A x|| <= C eps (||A|| ||x|| + ||b||)
# (infinity norms). Gaussian elimination with partial pivoting on a tridiagonal matrix has
# |dA| <= gamma_c |L| |U| with c a small constant and |L| |U| <= 3 |A| row by row (growth at most
# 2; Higham, "Accuracy and Stability of Numerical Algorithms", 9.5 and 9.6); the perturbed solve
# moves a tiny pivot by at most about eps ||A||, within the same bound. Independent of m.
BACKWARD = 16


def norm(x):
    """Infinity norm of every matrix in the batch (of every system's right-hand sides)."""
    return np.abs(x).sum(axis=-1).max(axis=-1, initial=0)


def backward_errors(dl, d, du, b, x):
    """||b - A x|| / (||A|| ||x|| + ||b||) per system, in extended precision."""
    dl, d, du, b, x = map(extended, (dl, d, du, b, x))
    residual = product(dl, d, du, x) - b
    scale = norm(tridiagonal_matrix(dl, d, du)) * norm(x) + norm(b)
    return norm(residual) / np.where(scale > 0, scale, 1)


def assert_solves(dl, d, du, b, x, dtype, err_msg=""):
    """Every system's solution is finite and within the backward-error bound."""
    assert np.isfinite(x).all(), err_msg
    eta = backward_errors(dl, d, du, b, x)
    assert (eta <= BACKWARD * np.finfo(dtype).eps).all(), (err_msg, eta.max())


def condition(dl, d, du):
    """kappa_inf(A) per system (inf for singular ones)."""
    a = tridiagonal_matrix(dl, d, du).astype(np.result_type(d.dtype, np.float64))
    with np.errstate(all="ignore"):
        return np.nan_to_num(np.linalg.cond(a.reshape((-1,) + a.shape[-2:]), np.inf),
                             nan=np.inf).reshape(d.shape[:-1])


def assert_near_stock(expected, got, dl, d, du, dtype, err_msg=""):
    """``got`` and stock's ``expected`` solutions of the same finite systems differ by at most
    the two backward errors' effect: ||x - x'|| / ||x'|| <= 2 C eps kappa(A) / (1 - C eps kappa)
    per system (Higham 7.1); systems too ill-conditioned for that to mean anything are only
    checked by residual, elsewhere."""
    assert got.shape == expected.shape and got.dtype == expected.dtype, err_msg
    scaled = BACKWARD * np.finfo(dtype).eps * condition(dl, d, du)
    for i in np.ndindex(scaled.shape):
        if scaled[i] < 0.5 and np.isfinite(expected[i]).all():
            bound = 2 * scaled[i] / (1 - scaled[i]) * norm(expected[i])
            assert norm(extended(got[i]) - expected[i]) <= bound, (err_msg, i)


def test_matches_stock_and_solves(stock_vs_ferrax, random_matrix, assert_close, dtype):
    # Every batch and shape in one jitted function: one compilation per side.
    cases = {f"{batch}{shape}": system(random_matrix, batch, *shape, dtype, dominant=4.0)
             for batch, shape in CASES}
    all_cases = lambda cases: {key: both(*args) for key, args in cases.items()}  # noqa: E731
    expected, got = stock_vs_ferrax(all_cases, cases, targets=[GTSV, PERTURBED])
    for key, args in cases.items():
        for e, g in zip(expected[key], got[key]):
            assert g.shape == args[3].shape and g.dtype == dtype, key
            assert_solves(*args, g, dtype, err_msg=key)
            assert_near_stock(e, g, *args[:3], dtype, err_msg=key)
            assert_close(product(*args[:3], g), args[3], dtype, kind="reconstruct", err_msg=key)


def test_outer_corners_are_ignored(installed, random_matrix, dtype):
    dl, d, du, b = system(random_matrix, (2,), 5, 3, dtype, dominant=4.0)
    fn = jax.jit(both)
    clean = fn(dl, d, du, b)
    dl[..., 0] = du[..., -1] = np.nan
    for x, y in zip(clean, fn(dl, d, du, b)):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


def special_systems(random_matrix, dtype, m=6):
    """A batch of singular, badly scaled, subnormal and NaN systems."""
    dl, d, du, b = system(random_matrix, (9,), m, 2, dtype)
    d[0], dl[0, 1:], du[0] = 0, 0, 0  # a zero matrix
    dl[1], d[1], du[1] = 1, 1, 1  # rank one
    d[2] = 0  # zero diagonal: row interchanges; singular for odd m, here m is even
    d[3, 2] = 0  # an exactly zero pivot unless rows are interchanged
    # The second-difference matrix shifted by its smallest eigenvalue: singular up to rounding
    # (inverse iteration's system).
    dl[4], du[4], d[4] = -1, -1, 2 - (2 - 2 * np.cos(np.pi / (m + 1)))
    d[5] = d[5] * (1e-310 if np.finfo(dtype).bits == 64 else 1e-40)  # subnormal pivots
    for diagonal in (dl, d, du):
        diagonal[6, m // 2:] *= 1e-10  # rows scaled down: condition number ~1e10
    d[7, 3] = np.nan
    b[8, 1, 0] = np.nan
    return dl, d, du, b


def test_singular_ill_conditioned_and_nan_match_stock(stock_vs_ferrax, random_matrix,
                                                       assert_close, dtype):
    args = special_systems(random_matrix, dtype)
    expected, got = stock_vs_ferrax(both, *args, targets=[GTSV, PERTURBED])
    dl, d, du, b = args
    regular = slice(1, 7)  # the nonsingular ones, nearly singular and badly scaled included
    for e, x in zip(expected, got):
        assert_solves(dl[regular], d[regular], du[regular], b[regular], x[regular], dtype)
        assert_solves(dl[8], d[8], du[8], b[8, :, 1:], x[8, :, 1:], dtype)
        assert_near_stock(e, x, dl, d, du, dtype)
    plain, perturbed = got
    # NaN input spoils its system (a NaN in b only its column) ...
    for x in (plain, perturbed):
        assert np.isnan(x[7]).all() and np.isnan(x[8, :, 0]).all()
        assert np.isfinite(x[1:7]).all() and np.isfinite(x[8, :, 1]).all()
    # ... LAPACK reports the zero matrix's zero pivot and jax turns it into NaN, while the
    # perturbed solve gives a finite answer.
    assert np.isnan(plain[0]).all() and np.isfinite(perturbed[0]).all()


@pytest.mark.parametrize("m", [1, 2, 7])
def test_perturbed_inverse_iteration_finds_the_eigenvector(installed, rng, m):
    # (T - lambda I) x = b with lambda an eigenvalue of T = tridiag(-1, 2, -1): x is dominated
    # by the eigenvector sin(k pi / (m + 1)).
    lam = 2 - 2 * np.cos(np.pi / (m + 1))
    ones = np.ones(m)
    b = rng.standard_normal((m, 1))
    x = np.asarray(jax.jit(solve(True))(-ones, (2 - lam) * ones, -ones, b))[:, 0]
    v = np.sin(np.arange(1, m + 1) * np.pi / (m + 1))
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x / np.abs(x).max() * np.sign(x[0]), v / v.max(), atol=1e-8)


def test_vmap_jit_and_grad_match_stock(stock_vs_ferrax, random_matrix, assert_close, dtype):
    dl, d, du, b = system(random_matrix, (3, 2), 5, 2, dtype, dominant=4.0)

    def fn(dl, d, du, b):
        out = []
        for perturb in (False, True):
            # Only b batched: jax folds the batch into the right-hand sides.
            b_only = jax.vmap(solve(perturb), in_axes=(None, None, None, 0))
            everything = jax.vmap(jax.vmap(solve(perturb)), in_axes=(1, 1, 1, 1))
            out += [b_only(dl[0, 0], d[0, 0], du[0, 0], b[:, 0]), everything(dl, d, du, b)]
            if dl.dtype.kind == "f":  # (jax.grad wants real outputs)
                grad = jax.grad(lambda *args: (solve(perturb)(*args) ** 2).sum(), argnums=(1, 3))
                out.append(grad(dl[0, 0], d[0, 0], du[0, 0], b[0, 0]))
        return out

    expected, got = stock_vs_ferrax(fn, dl, d, du, b, targets=[GTSV, PERTURBED])
    # Solutions and gradients (d/db = A^-T 2x, d/dd = -x d/db: two solves) against stock's,
    # relative to each output's largest value: twice the backward errors' effect, twice over.
    rtol = 4 * 2 * BACKWARD * np.finfo(dtype).eps * condition(dl, d, du).max()
    assert_matches_stock(got, expected, rtol)


def test_eigh_tridiagonal_routes_to_perturbed_solve(installed, random_matrix):
    # Eigenvectors by inverse iteration: (T - w I) x = v with the perturbed solve. (Installed
    # only: its graph is large, and the solve itself is compared with stock jax above.)
    d, e = random_matrix((8,), np.float64), random_matrix((7,), np.float64)
    lowered = jax.jit(jax.scipy.linalg.eigh_tridiagonal).lower(d, e)
    assert PERTURBED in lowered.as_text()
    w, v = map(np.asarray, lowered.compile()(d, e))
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(t), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t @ v, v * w, atol=1e-10)
    np.testing.assert_allclose(v.T @ v, np.eye(8), atol=1e-10)


@pytest.mark.parametrize("perturb", [False, True])
def test_zero_size_matches_stock(stock_vs_ferrax, perturb):
    shapes = [((0,), 4, 2), ((2, 0), 3, 3), ((3,), 0, 2), ((), 0, 1), ((2,), 4, 0)]
    # No entries, or none that affect the (empty) result.
    cases = [(np.full(batch + (m,), 1.5), np.full(batch + (m, nrhs), 2.5))
             for batch, m, nrhs in shapes]
    fn = lambda cases: [solve(perturb)(diag, diag, diag, b) for diag, b in cases]  # noqa: E731
    expected, got = stock_vs_ferrax(fn, cases, targets=[TARGETS[perturb]])
    for (_, b), e, g in zip(cases, expected, got):
        assert g.shape == e.shape == b.shape and g.dtype == e.dtype


def test_batch_split_across_threads_matches_stock(stock_vs_ferrax, random_matrix, assert_close,
                                                  dtype):
    # 256 systems of 100 equations cost more than one task's minimum: several chunks.
    args = system(random_matrix, (256,), 100, 3, dtype, dominant=4.0)
    expected, got = stock_vs_ferrax(both, *args, targets=[GTSV, PERTURBED])
    for e, x in zip(expected, got):
        assert_solves(*args, x, dtype)
        assert_near_stock(e, x, *args[:3], dtype)


# --- the raw targets ---------------------------------------------------------------------


def raw(target, dl, d, du, b, x_dtype=None, info=None, **attrs):
    """The target called directly with jaxlib's operands (row-major b: fine for nrhs = 1);
    ``x_dtype`` and ``info`` override the perturbed solve's result and gtsv's ``info``."""
    S = jax.ShapeDtypeStruct
    if target == GTSV:
        results = [S(x.shape, x.dtype) for x in (dl, d, du, b)]
        results.append(info or S(b.shape[:-2], np.int32))
        call = jax.ffi.ffi_call(target, results, input_output_aliases={0: 0, 1: 1, 2: 2, 3: 3})
    else:
        call = jax.ffi.ffi_call(target, S(b.shape, x_dtype or b.dtype))
    return jax.block_until_ready(call(dl, d, du, b, **attrs))


def raw_error(*args, **kwargs):
    ferrax.register()
    with pytest.raises(Exception) as failure:
        raw(*args, **kwargs)
    message = str(failure.value)
    assert args[0] in message, message
    return message


def diagonals(rng, shape=(2, 5), dtype=np.float64):
    return [(rng.standard_normal(shape) + 4 * (i == 1)).astype(dtype) for i in range(3)]


@pytest.mark.parametrize("target", [GTSV, PERTURBED])
def test_raw_wrong_dtype_names_operand(rng, target):
    dl, d, du = diagonals(rng)
    ints = rng.integers(1, 9, (2, 5, 1), dtype=np.int32)
    message = raw_error(target, dl.astype(np.int32), d.astype(np.int32), du.astype(np.int32),
                        ints)
    assert "operand 3 'b': expected dtype f32, f64, c64 or c128, got s32" in message
    b = rng.standard_normal((2, 5, 1))
    message = raw_error(target, dl, d.astype(np.float32), du, b)
    assert "operand 1 'd': expected dtype f64, got f32" in message
    if target == GTSV:
        message = raw_error(target, dl, d, du, b, info=jax.ShapeDtypeStruct((2,), np.float32))
        assert "result 4 'info': expected dtype s32, got f32" in message
    else:
        message = raw_error(target, dl, d, du, b, x_dtype=np.float32)
        assert "result 0 'x': expected dtype f64, got f32" in message


@pytest.mark.parametrize("target", [GTSV, PERTURBED])
def test_raw_wrong_shape_names_operand(rng, target):
    dl, d, du = diagonals(rng)
    message = raw_error(target, dl, d[:, :4], du, rng.standard_normal((2, 5, 1)))
    assert "operand 1 'd': expected shape [2, 5], got shape [2, 4]" in message
    message = raw_error(target, dl, d, du, rng.standard_normal(5))
    assert "operand 3 'b': expected rank >= 2, got shape [5]" in message


def test_raw_gtsv_info_shape_names_result(rng):
    dl, d, du = diagonals(rng)
    message = raw_error(GTSV, dl, d, du, rng.standard_normal((2, 5, 1)),
                        info=jax.ShapeDtypeStruct((3,), np.int32))
    assert "result 4 'info': expected shape [2], got shape [3]" in message


@pytest.mark.parametrize("target", [GTSV, PERTURBED])
@pytest.mark.parametrize("value", [np.uint8(ord("N")), "N", np.float32(1.0)], ids=str)
def test_raw_attribute_names_attribute(rng, target, value):
    # Neither target takes attributes: any is refused by name, whatever its type.
    dl, d, du = diagonals(rng)
    message = raw_error(target, dl, d, du, rng.standard_normal((2, 5, 1)), trans=value)
    assert "unexpected attribute 'trans' (expected attributes: [])" in message


def test_raw_gtsv_keeps_lapack_info_and_corners(rng):
    ferrax.register()
    dl, d, du = diagonals(rng, (3, 4))
    d[1] = 0
    dl[1], du[1] = 0, 0  # zero matrix: U(1, 1) = 0, info 1
    d[2, 3] = 0
    dl[2, 3] = 0  # last pivot exactly zero: info 4
    b = rng.standard_normal((3, 4, 1))
    dl_out, d_out, du_out, x, info = map(np.asarray, raw(GTSV, dl, d, du, b))
    np.testing.assert_array_equal(info, [0, 1, 4])
    np.testing.assert_array_equal(dl_out[:, 0], dl[:, 0])  # outside A: left as they were
    np.testing.assert_array_equal(du_out[:, -1], du[:, -1])
    np.testing.assert_allclose(product(dl[0], d[0], du[0], x[0]), b[0], atol=1e-12)
