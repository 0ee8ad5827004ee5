"""ferrax_lu_solve: jax's lu_solve (and so jnp.linalg.solve after its lu) as one call on the CPU
after ferrax.install(), at every order.

Results are checked by the backward error bound of LU with partial pivoting
(‖op(A)·x − b‖ ≤ c·n·ε·‖A‖·‖x‖), against numpy's solve in double precision (forward error within
the condition number's bound), and against stock jax where jax's semantics decide the answer
(a permutation that is not one, singular factors, gradients).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.lax import linalg as lax_linalg

import ferrax

jax.config.update("jax_enable_x64", True)

TARGET = "ferrax_lu_solve"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def op(a, trans):
    return {0: a, 1: np.swapaxes(a, -1, -2), 2: np.conj(np.swapaxes(a, -1, -2))}[trans]


def assert_backward_stable(a, x, b, dtype, trans=0):
    """‖op(A)·x − b‖ ≤ 10·n·ε·‖A‖·‖x‖ per system (∞-norms), in double precision."""
    wide = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
    a, x, b = (np.asarray(v).astype(wide) for v in (a, x, b))
    if x.ndim == a.ndim - 1:
        x, b = x[..., None], b[..., None]
    n = a.shape[-1]
    residual = np.abs(op(a, trans) @ x - b).max(axis=(-2, -1))
    bound = (10 * n * np.finfo(dtype).eps * np.abs(a).sum(-1).max(-1)
             * np.abs(x).sum(-2).max(-1))
    assert np.all(residual <= bound), (residual, bound)


def assert_forward_close(x, a, b, dtype):
    """x against numpy's solve in double precision, within κ(A)·(the backward bound)."""
    wide = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
    a64, b64 = a.astype(wide), b.astype(wide)
    want = np.linalg.solve(a64, b64[..., None])[..., 0] if b.ndim == a.ndim - 1 \
        else np.linalg.solve(a64, b64)
    n = a.shape[-1]
    scale = 30 * n * np.finfo(dtype).eps * np.linalg.cond(a64).max()
    assert np.abs(np.asarray(x) - want).max() <= scale * np.abs(want).max()


def lowered(fn, *args):
    return jax.jit(fn).lower(*args).as_text()


@pytest.fixture(autouse=True)
def installed():
    ferrax.install()
    yield
    ferrax.uninstall()


@pytest.mark.parametrize("dtype", DTYPES)
# Orders on both sides of where ferrax's substitution loops give way to faer's solves (8) and,
# with one right-hand side (a vector or one column), where its row-wise substitution solves
# 8 real systems side by side (16) and where it gives way (64), and past 256, where getrf
# factors each matrix over all the threads.
@pytest.mark.parametrize("n", [1, 4, 7, 8, 16, 17, 33, 64, 65, 256, 300])
# jnp.linalg.solve takes a vector b with a single matrix only.
@pytest.mark.parametrize("batch,rhs", [((), "vector"), ((), "matrix"), ((5,), "matrix"),
                                       ((2, 3), "matrix"), ((9,), "column"),
                                       ((2, 3), "column")])
def test_solve_is_one_call_and_accurate(dtype, n, batch, rhs):
    rng = np.random.default_rng()
    a = rand(rng, batch + (n, n), dtype)
    b = rand(rng, batch + {"vector": (n,), "matrix": (n, 3), "column": (n, 1)}[rhs], dtype)
    text = lowered(jnp.linalg.solve, a, b)
    assert TARGET in text and "ferrax_trsm" not in text
    x = jax.jit(jnp.linalg.solve)(a, b)
    assert x.shape == b.shape and x.dtype == dtype
    assert_backward_stable(a, x, b, dtype)
    assert_forward_close(x, a, b, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("n", [7, 40])
def test_lu_solve_each_transpose(dtype, trans, n):
    rng = np.random.default_rng()
    a = rand(rng, (4, n, n), dtype)
    b = rand(rng, (4, n, 5), dtype)
    lu, _, perm = jax.lax.linalg.lu(a)
    solve = jax.jit(lambda lu, perm, b: lax_linalg.lu_solve(lu, perm, b, trans=trans))
    assert TARGET in solve.lower(lu, perm, b).as_text()
    x = solve(lu, perm, b)
    assert_backward_stable(a, x, b, dtype, trans)
    ferrax.uninstall()
    stock = solve(lu, perm, b)
    tol = 50 * n * np.finfo(dtype).eps * np.linalg.cond(a.astype(np.complex128)).max()
    np.testing.assert_allclose(np.asarray(x), np.asarray(stock), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_one_system_many_right_hand_sides(dtype, trans):
    # Fewer systems than threads: each one's right-hand sides split in column blocks over the
    # threads (50 columns: uneven blocks); jnp.linalg.inv is such a solve.
    rng = np.random.default_rng()
    a = rand(rng, (64, 64), dtype)
    b = rand(rng, (64, 50), dtype)
    lu, _, perm = jax.lax.linalg.lu(a)
    x = jax.jit(lambda lu, perm, b: lax_linalg.lu_solve(lu, perm, b, trans=trans))(lu, perm, b)
    assert_backward_stable(a, x, b, dtype, trans)
    inverse = jax.jit(jnp.linalg.inv)(a)
    assert TARGET in jax.jit(jnp.linalg.inv).lower(a).as_text()
    assert_backward_stable(a, inverse, np.eye(64, dtype=dtype), dtype)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("trans", [0, 1])
def test_a_permutation_that_is_none_gives_jax_result(trans, k):
    # jax gathers rows (trans 0) or puts them back by a stable argsort (trans 1): repeated
    # entries give what jax's steps give.
    rng = np.random.default_rng()
    lu = np.triu(rand(rng, (3, 4, 4), np.float64)) + 4 * np.eye(4) \
        + np.tril(rand(rng, (3, 4, 4), np.float64), -1) * 0.1
    perm = np.array([[1, 1, 0, 2], [3, 3, 3, 3], [2, 0, 1, 3]], np.int32)
    b = rand(rng, (3, 4, k), np.float64)
    solve = jax.jit(lambda lu, perm, b: lax_linalg.lu_solve(lu, perm, b, trans=trans))
    x = solve(lu, perm, b)
    ferrax.uninstall()
    np.testing.assert_allclose(np.asarray(x), np.asarray(solve(lu, perm, b)), rtol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [3, 8, 16, 17, 40])
def test_a_system_rounds_alike_anywhere_in_the_batch(dtype, n):
    # With one right-hand side, real systems up to order 16 are solved 8 at a time, one per
    # lane, and the batch's rest one at a time (as is the rest of each thread's part of a
    # larger batch): each is solved the same way wherever it lies, as alone.
    rng = np.random.default_rng()
    a = rand(rng, (1, n, n), dtype)
    b = rand(rng, (1, n, 1), dtype)
    lu, _, perm = jax.lax.linalg.lu(a)
    solve = jax.jit(lambda lu, perm, b: lax_linalg.lu_solve(lu, perm, b, trans=0))
    assert TARGET in solve.lower(lu, perm, b).as_text()
    alone = np.asarray(solve(lu, perm, b))[0]
    batch = 19  # two groups of 8 and 3 more
    others = rand(rng, (batch, n, n), dtype)
    many_lu, _, many_perm = (np.array(v) for v in jax.lax.linalg.lu(others))
    many_b = rand(rng, (batch, n, 1), dtype)
    places = [0, 5, 8, 17]
    many_lu[places], many_perm[places], many_b[places] = lu[0], perm[0], b[0]
    x = np.asarray(solve(many_lu, many_perm, many_b))
    for place in places:
        np.testing.assert_array_equal(x[place], alone)
    assert_backward_stable(a, alone[None], b, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("n", [5, 24])
def test_singular_factor_spreads_non_finite_as_jax(n, dtype):
    # 10 systems: at n = 5 the first 8 real ones are solved side by side, one lane each.
    rng = np.random.default_rng()
    a = rand(rng, (10, n, n), dtype)
    singular = [1, 9]
    a[singular, :, 2] = 0  # U has a zero on its diagonal
    b = rand(rng, (10, n, 1), dtype)
    x = np.asarray(jax.jit(jnp.linalg.solve)(a, b))
    ferrax.uninstall()
    stock = np.asarray(jax.jit(jnp.linalg.solve)(a, b))
    np.testing.assert_array_equal(np.isfinite(x), np.isfinite(stock))
    regular = np.setdiff1d(np.arange(10), singular)
    assert not np.isfinite(x[singular]).all(axis=(1, 2)).any()
    assert np.isfinite(x[regular]).all()
    assert_backward_stable(a[regular], x[regular], b[regular], dtype)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_pivots_of_parts_below_one(dtype, k):
    # faer's complex reciprocal of a pivot whose parts are both below one and modulus above one
    # (0.86 + 0.65i) goes through a subnormal, which XLA's threads flush to zero unless ferrax keeps gradual underflow.
    # With one right-hand side (k = 1) the row-wise substitution divides instead (Smith's).
    # A batch large enough to reach the pool's threads (the flushing ones).
    rng = np.random.default_rng()
    batch, n = 1024, 16
    u = np.triu(rand(rng, (batch, n, n), dtype)) * 0.1
    u[:, np.arange(n), np.arange(n)] = 0.86 + 0.65j
    perm = np.broadcast_to(np.arange(n, dtype=np.int32), (batch, n))
    b = rand(rng, (batch, n, k), dtype)
    x = jax.jit(lax_linalg.lu_solve)(u, perm, b)
    assert_backward_stable(u, x, b, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_grad_jacfwd_and_vmap_as_stock(dtype):
    rng = np.random.default_rng()
    a = rand(rng, (3, 6, 6), dtype) + 6 * np.eye(6)
    b = rand(rng, (3, 6, 2), dtype)
    loss = lambda a, b: jnp.sum(jnp.abs(jnp.linalg.solve(a, b)) ** 2)
    programs = {
        "grad": lambda a, b: jax.grad(loss, argnums=(0, 1))(a, b),
        "jacfwd": lambda a, b: jax.jacfwd(lambda b: jnp.linalg.solve(a, b),
                                          holomorphic=np.iscomplexobj(b))(b),
        # One matrix for every instance (the instances become right-hand sides), and both
        # mapped.
        "vmap b": lambda a, b: jax.vmap(jnp.linalg.solve, in_axes=(None, 0))(a[0], b),
        "vmap both": lambda a, b: jax.vmap(jax.vmap(jnp.linalg.solve))(a[None], b[None]),
    }
    ours = {name: jax.jit(f)(a, b) for name, f in programs.items()}
    for name, f in programs.items():
        assert TARGET in jax.jit(f).lower(a, b).as_text(), name
    ferrax.uninstall()
    for name, f in programs.items():
        for got, want in zip(jax.tree.leaves(ours[name]), jax.tree.leaves(jax.jit(f)(a, b))):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10,
                                       atol=1e-12, err_msg=name)


@pytest.mark.parametrize("shapes", [((0, 3, 3), (0, 3, 1)), ((2, 0, 0), (2, 0, 1)),
                                    ((2, 3, 3), (2, 3, 0))])
def test_empty_operands(shapes):
    a_shape, b_shape = shapes
    a = np.broadcast_to(np.eye(a_shape[-1]), a_shape).copy()
    b = np.ones(b_shape)
    x = jax.jit(jnp.linalg.solve)(a, b)
    assert x.shape == b.shape


@pytest.mark.parametrize("bad", [4, -1])
def test_permutation_out_of_range_is_an_error(bad):
    lu, b = np.eye(4)[None], np.ones((1, 4, 1))
    perm = np.array([[0, 1, 2, bad]], np.int32)
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(b.shape, b.dtype))
    with pytest.raises(Exception, match=f"{TARGET}.*permutation.*0..4"):
        jax.block_until_ready(jax.jit(lambda *x: call(*x, trans=np.int32(0)))(lu, perm, b))
