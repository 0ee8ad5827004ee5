"""Bad calls of the raw targets (via jax.ffi.ffi_call) come back as errors that name the target,
the operand and what was expected; the process survives them. Plus the wrappers' TypeErrors."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src.random import threefry2x32 as jax_threefry

import ferrax
from helpers import lapack_pivots

S = jax.ShapeDtypeStruct
GETRF_OK = (S((4, 4), jnp.float32), S((4,), jnp.int32), S((), jnp.int32))
U32 = lambda n=4: np.arange(1, n + 1, dtype=np.uint32)
THREEFRY_OUT = (S((4,), jnp.uint32), S((4,), jnp.uint32))


def _matrix():
    return np.random.default_rng(7).standard_normal((4, 4)).astype(np.float32)


# (id, target, result shapes, operands, attributes, expected message parts)
CASES = [
    ("getrf_int32", "ferrax_getrf",
     (S((4, 4), jnp.int32), S((4,), jnp.int32), S((), jnp.int32)),
     lambda: [np.arange(16, dtype=np.int32).reshape(4, 4)], {},
     ["ferrax_getrf", "operand 0 'a'", "expected dtype f32, f64, c64 or c128", "got s32"]),
    ("getrf_f16", "ferrax_getrf",
     (S((4, 4), jnp.float16), S((4,), jnp.int32), S((), jnp.int32)),
     lambda: [_matrix().astype(np.float16)], {},
     ["ferrax_getrf", "operand 0 'a'", "expected dtype f32, f64, c64 or c128", "got f16"]),
    ("getrf_rank1", "ferrax_getrf",
     (S((3,), jnp.float32), S((3,), jnp.int32), S((), jnp.int32)),
     lambda: [np.arange(1, 4, dtype=np.float32)], {},
     ["ferrax_getrf", "operand 0 'a'", "expected rank >= 2", "got shape [3]"]),
    ("getrf_two_operands", "ferrax_getrf", GETRF_OK,
     lambda: [_matrix(), _matrix()], {},
     ["ferrax_getrf", "expected 1 operands (a), got 2"]),
    ("getrf_two_results", "ferrax_getrf", GETRF_OK[:2],
     lambda: [_matrix()], {},
     ["ferrax_getrf", "expected 3 results (lu, ipiv, info), got 2"]),
    ("getrf_ipiv_shape", "ferrax_getrf",
     (S((4, 4), jnp.float32), S((3,), jnp.int32), S((), jnp.int32)),
     lambda: [_matrix()], {},
     ["ferrax_getrf", "result 1 'ipiv'", "expected shape [4]", "got shape [3]"]),
    ("getrf_info_shape", "ferrax_getrf",
     (S((4, 4), jnp.float32), S((4,), jnp.int32), S((2,), jnp.int32)),
     lambda: [_matrix()], {},
     ["ferrax_getrf", "result 2 'info'", "expected shape []", "got shape [2]"]),
    ("getrf_info_dtype", "ferrax_getrf",
     (S((4, 4), jnp.float32), S((4,), jnp.int32), S((), jnp.float32)),
     lambda: [_matrix()], {},
     ["ferrax_getrf", "result 2 'info'", "expected dtype s32", "got f32"]),
    ("getrf_attribute", "ferrax_getrf", GETRF_OK,
     lambda: [_matrix()], {"foo": np.int32(1)},
     ["ferrax_getrf", "unexpected attribute 'foo'", "(expected attributes: [])"]),
    ("threefry_f32", "ferrax_threefry2x32", THREEFRY_OUT,
     lambda: [U32(), U32(), np.ones(4, np.float32), U32()], {},
     ["ferrax_threefry2x32", "operand 2 'x0'", "expected dtype u32", "got f32"]),
    ("threefry_three_operands", "ferrax_threefry2x32", THREEFRY_OUT,
     lambda: [U32(), U32(), U32()], {},
     ["ferrax_threefry2x32", "expected 4 operands (key0, key1, x0, x1), got 3"]),
    ("threefry_shape", "ferrax_threefry2x32", THREEFRY_OUT,
     lambda: [U32(), U32(), U32(), U32(5)], {},
     ["ferrax_threefry2x32", "operand 3 'x1'", "expected shape [4]", "got shape [5]"]),
    ("pivots_size_below_k", "ferrax_lu_pivots_to_permutation", S((3, 2), jnp.int32),
     lambda: [np.tile(np.arange(4, dtype=np.int32), (3, 1))], {},
     ["ferrax_lu_pivots_to_permutation", "result 0 'permutation'", "permutation_size >= 4",
      "got 2"]),
    ("pivots_f32", "ferrax_lu_pivots_to_permutation", S((3, 4), jnp.int32),
     lambda: [np.ones((3, 4), np.float32)], {},
     ["ferrax_lu_pivots_to_permutation", "operand 0 'pivots'", "expected dtype s32", "got f32"]),
]


def _check_valid_call_works():
    a = _matrix()
    lu, ipiv, info = ferrax.linalg.getrf(a)
    stock_lu = jax.lax.linalg.lu(a)[0]
    np.testing.assert_allclose(lu, stock_lu, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(ipiv) - 1, lapack_pivots(a)[0])  # SciPy's LAPACK
    assert int(info) == 0
    raw = jax.ffi.ffi_call("ferrax_threefry2x32", THREEFRY_OUT)(U32(), 2 * U32(), U32(), U32())
    stock = jax_threefry.threefry2x32_p.bind(*map(jnp.asarray, (U32(), 2 * U32(), U32(), U32())))
    for x, y in zip(raw, stock):  # a known-answer hash, as jax's own: bit for bit
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_raw_target_errors(case, mode):
    _, target, out, operands, attrs, parts = case
    call = jax.ffi.ffi_call(target, out)
    f = (lambda *xs: call(*xs, **attrs))
    if mode == "jit":
        f = jax.jit(f)
    with pytest.raises(jax.errors.JaxRuntimeError) as error:
        jax.block_until_ready(f(*operands()))
    message = str(error.value)
    assert "INVALID_ARGUMENT" in message
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    _check_valid_call_works()


def test_many_errors_then_valid_calls():
    """Errors leave nothing behind: a burst of failing calls, then correct results."""
    call = jax.ffi.ffi_call("ferrax_getrf", (S((4, 4), jnp.int32), S((4,), jnp.int32),
                                             S((), jnp.int32)))
    for _ in range(20):
        with pytest.raises(jax.errors.JaxRuntimeError, match="ferrax_getrf"):
            jax.block_until_ready(call(np.arange(16, dtype=np.int32).reshape(4, 4)))
    _check_valid_call_works()


@pytest.mark.parametrize("bad, parts", [
    (np.arange(9, dtype=np.int32).reshape(3, 3), ["ferrax_getrf", "int32"]),
    (np.arange(9, dtype=np.float16).reshape(3, 3), ["ferrax_getrf", "float16"]),
    (np.arange(1, 4, dtype=np.float32), ["ferrax_getrf", "expected a matrix", "(3,)"]),
    (np.float32(2.0), ["ferrax_getrf", "expected a matrix", "()"]),
], ids=["int32", "float16", "rank1", "rank0"])
def test_python_wrapper_type_errors(bad, parts):
    for fn in (ferrax.linalg.getrf, ferrax.linalg.lu, jax.jit(ferrax.linalg.getrf)):
        with pytest.raises(TypeError) as error:
            fn(bad)
        for part in parts:
            assert part in str(error.value), (part, str(error.value))


def test_python_wrapper_pivot_and_threefry_type_errors():
    with pytest.raises(TypeError, match="ferrax_lu_pivots_to_permutation.*int32"):
        ferrax.linalg.lu_pivots_to_permutation(np.zeros((2, 3), np.float32), 3)
    with pytest.raises(TypeError, match="ferrax_lu_pivots_to_permutation"):
        ferrax.linalg.lu_pivots_to_permutation(np.zeros((2, 3), np.int64), 3)  # x64 is on
    with pytest.raises(TypeError, match="ferrax_lu_pivots_to_permutation.*rank >= 1"):
        ferrax.linalg.lu_pivots_to_permutation(np.int32(0), 3)
    from ferrax._primitives import threefry2x32_p
    with pytest.raises(TypeError, match="ferrax_threefry2x32.*four uint32 arrays of one shape"):
        threefry2x32_p.bind(*(jnp.asarray(U32()),) * 3, jnp.asarray(U32(5)))
