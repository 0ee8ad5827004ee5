"""Every CPU target survives malformed calls: starting from a valid call (jaxlib's contract), each
operand's dtype, rank and shape, each result's shape and dtype, the operand and result counts and
each attribute (missing, of another type, out of range) are changed one at a time, and inputs
get NaN, Inf, extreme integers and zero or unit sizes. Each call must either succeed or fail
with an error that names the target; the process must survive all of them (a crash fails the
whole run). The valid calls' results are checked in each op's own test module."""

import numpy as np
import pytest

import jax

import ferrax  # noqa: F401  (registers the targets)

S = jax.ShapeDtypeStruct
U8 = np.uint8
I32 = np.int32


def _matrix(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _calls(rng, dtype, b, m, n):
    """(target, operands, results, attributes): one valid call per CPU target, `b` matrices of
    m×n where the op takes any shape, n×n where it needs a square one."""
    k, r = min(m, n), np.finfo(dtype).dtype
    mat = lambda *shape: _matrix(rng, shape, dtype)
    eigvecs = np.result_type(dtype, np.complex64)
    char = lambda c: U8(ord(c))
    calls = [
        ("ferrax_getrf", [mat(b, m, n)], [S((b, m, n), dtype), S((b, k), I32), S((b,), I32)], {}),
        ("ferrax_getrf_row_major", [mat(b, m, n)],
         [S((b, m, n), dtype), S((b, k), I32), S((b,), I32)], {}),
        ("ferrax_potrf", [mat(b, n, n)], [S((b, n, n), dtype), S((b,), I32)], {"uplo": char("L")}),
        ("ferrax_cholesky", [mat(b, n, n)], [S((b, n, n), dtype)], {"symmetrize_input": True}),
        ("ferrax_trsm", [mat(b, n, n), mat(b, n, 3)], [S((b, n, 3), dtype)],
         {"side": char("L"), "uplo": char("L"), "trans_x": char("N"), "diag": char("N")}),
        ("ferrax_lu_solve", [mat(b, n, n), np.tile(np.arange(n, dtype=I32), (b, 1)), mat(b, n, 2)],
         [S((b, n, 2), dtype)], {"trans": I32(1)}),
        ("ferrax_geqrf", [mat(b, m, n)], [S((b, m, n), dtype), S((b, k), dtype)], {}),
        ("ferrax_qr", [mat(b, m, n)], [S((b, m, m), dtype), S((b, m, n), dtype)],
         {"full_matrices": True}),
        ("ferrax_orgqr", [mat(b, m, n), mat(b, k)], [S((b, m, n), dtype)], {}),
        ("ferrax_ormqr", [mat(b, m, k), mat(b, k), mat(b, m, 3)], [S((b, m, 3), dtype)],
         {"left": True, "transpose": False}),
        ("ferrax_geqp3", [mat(b, m, n), np.zeros((b, n), I32)],
         [S((b, m, n), dtype), S((b, n), I32), S((b, k), dtype)], {}),
        ("ferrax_syevd", [mat(b, n, n)], [S((b, n, n), dtype), S((b, n), r), S((b,), I32)],
         {"uplo": char("L"), "mode": char("V")}),
        ("ferrax_gehrd", [mat(b, n, n)], [S((b, n, n), dtype), S((b, max(n - 1, 0)), dtype),
                                          S((b,), I32)], {"low": I32(1), "high": I32(n)}),
        ("ferrax_sytrd", [mat(b, n, n)],
         [S((b, n, n), dtype), S((b, n), r), S((b, max(n - 1, 0)), r),
          S((b, max(n - 1, 0)), dtype), S((b,), I32)], {"uplo": char("L")}),
        ("ferrax_gtsv", [mat(b, n), mat(b, n) + 4, mat(b, n), mat(b, n, 2)],
         [S((b, n), dtype)] * 3 + [S((b, n, 2), dtype), S((b,), I32)], {}),
        ("ferrax_tridiagonal_solve_perturbed", [mat(b, n), mat(b, n) + 4, mat(b, n), mat(b, n, 2)],
         [S((b, n, 2), dtype)], {}),
        ("ferrax_csr_sparse_dense",
         [mat(6), np.array([0, 2, 4, 6], I32), np.array([0, 1, 1, 2, 0, 2], I32), mat(3, 2)],
         [S((3, 2), dtype)], {}),
        ("ferrax_coo_sparse_dense",
         [mat(6), np.array([[0, 1], [1, 1], [2, 0], [-1, 2], [3, 0], [0, -4]], I32), mat(3, 2)],
         [S((3, 2), dtype)], {"rows": np.int64(3), "cols": np.int64(3), "transpose": False}),
        ("ferrax_spsolve",
         [mat(b, 6), np.array([0, 1, 1, 2, 0, 2], I32), np.array([0, 2, 4, 6], I32), mat(b, 3)],
         [S((b, 3), dtype)], {}),
    ]
    for target in ("ferrax_gesdd", "ferrax_gesvd"):
        calls.append((target, [mat(b, m, n)],
                      [S((b, m, n), dtype), S((b, k), r), S((b, m, m), dtype), S((b, n, n), dtype),
                       S((b,), I32)], {"mode": char("A")}))
    if np.dtype(dtype).kind == "c":
        eig = [S((b, n), dtype)]
        schur_eigvals = [S((b, n), dtype)]
    else:
        eig = [S((b, n), dtype)] * 2
        schur_eigvals = [S((b, n), dtype)] * 2
    calls.append(("ferrax_geev", [mat(b, n, n)],
                  eig + [S((b, n, n), eigvecs)] * 2 + [S((b,), I32)],
                  {"compute_left": char("V"), "compute_right": char("V")}))
    calls.append(("ferrax_gees", [mat(b, n, n)],
                  [S((b, n, n), dtype)] * 2 + schur_eigvals + [S((b,), I32)] * 2,
                  {"mode": char("V"), "sort": char("N")}))
    return calls


def _integer_calls(rng):
    words = [rng.integers(0, 2**32, 8, dtype=np.uint64).astype(np.uint32) for _ in range(4)]
    return [
        ("ferrax_threefry2x32", words, [S((8,), np.uint32)] * 2, {}),
        ("ferrax_lu_pivots_to_permutation", [np.array([[2, 3, 3, 3]], I32)], [S((1, 5), I32)], {}),
    ]


def _replace(items, i, item):
    return items[:i] + [item] + items[i + 1:]


def _variants(operands, results, attrs):
    """(what, operands, results, attributes), each one change away from the valid call."""
    for i, x in enumerate(operands):
        for dtype in (np.int32, np.float16, np.complex128 if x.dtype != np.complex128 else np.float32):
            cast = x.real if x.dtype.kind == "c" and np.dtype(dtype).kind != "c" else x
            yield f"operand {i} as {np.dtype(dtype).name}", _replace(operands, i, cast.astype(dtype)), results, attrs
        yield f"operand {i} one rank less", _replace(operands, i, x[0] if x.ndim > 1 else x.reshape(-1)[0]), results, attrs
        yield f"operand {i} scalar", _replace(operands, i, x.reshape(-1)[:1].reshape(())), results, attrs
        for axis in (0, -1):
            shape = list(x.shape)
            shape[axis] += 1
            yield f"operand {i} axis {axis} + 1", _replace(operands, i, np.resize(x, shape)), results, attrs
        if x.ndim:
            yield f"operand {i} empty", _replace(operands, i, x[:0]), results, attrs
        if x.dtype.kind in "fc":
            for bad in (np.nan, np.inf, -np.inf):
                y = x.copy()
                y.reshape(-1)[y.size // 2] = bad
                yield f"operand {i} with {bad}", _replace(operands, i, y), results, attrs
        if x.dtype.kind == "i":
            for bad in (-7, 10**6, np.iinfo(I32).max, np.iinfo(I32).min):
                y = x.copy()
                y.reshape(-1)[-1] = bad
                yield f"operand {i} with {bad}", _replace(operands, i, y), results, attrs
    for j, s in enumerate(results):
        for axis in (0, -1):
            if s.shape:
                shape = list(s.shape)
                shape[axis] += 1
                yield f"result {j} axis {axis} + 1", operands, _replace(results, j, S(tuple(shape), s.dtype)), attrs
        yield f"result {j} scalar", operands, _replace(results, j, S((), s.dtype)), attrs
        yield f"result {j} as int8", operands, _replace(results, j, S(s.shape, np.int8)), attrs
    if len(results) > 1:
        yield "one result fewer", operands, results[:-1], attrs
    yield "one result more", operands, results + results[-1:], attrs
    yield "one operand fewer", operands[:-1], results, attrs
    yield "one operand more", operands + operands[-1:], results, attrs
    yield "unknown attribute", operands, results, {**attrs, "unknown": I32(1)}
    for name in attrs:
        others = {k: v for k, v in attrs.items() if k != name}
        yield f"attribute {name} missing", operands, results, others
        for value in (np.int64(1), np.float32(1), U8(0), U8(255), True, I32(-5), I32(1 << 20), "L"):
            yield f"attribute {name} = {value!r}", operands, results, {**others, name: value}


def _run(target, operands, results, attrs):
    # A fresh jitted function per call: jax's eager ffi_call cache would treat attributes that
    # compare equal (1, 1.0, True) as the same call.
    call = jax.jit(lambda *xs: jax.ffi.ffi_call(target, results)(*xs, **attrs))
    return jax.block_until_ready(call(*operands))


def _check(target, what, operands, results, attrs):
    """None when the call succeeds or fails naming the target; else what went wrong."""
    try:
        _run(target, operands, results, attrs)
    except Exception as error:  # noqa: BLE001  (any error type is fine if it names the target)
        if target not in str(error):
            return f"{what}: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return None


TARGETS = [call[0] for call in _calls(np.random.default_rng(0), np.float64, 1, 2, 2)]


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["f32", "c128"])
@pytest.mark.parametrize("target", TARGETS)
def test_malformed_calls_fail_cleanly(target, dtype, rng):
    (_, operands, results, attrs), = [c for c in _calls(rng, dtype, 3, 5, 4) if c[0] == target]
    _run(target, operands, results, attrs)
    problems = [p for v in _variants(operands, results, attrs) if (p := _check(target, *v))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["f64", "c64"])
@pytest.mark.parametrize("b, m, n", [(0, 5, 4), (3, 0, 0), (3, 0, 4), (3, 5, 0), (1, 1, 1),
                                      (2, 1, 3), (2, 6, 1)])
def test_degenerate_sizes(b, m, n, dtype, rng):
    """Empty batches, empty and unit matrices: every target succeeds or names itself."""
    problems = [p for target, *call in _calls(rng, dtype, b, m, n)
                if (p := _check(target, f"{target} {b}x{m}x{n}", *call))]
    assert not problems, "\n".join(problems)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize("index", [0, 1])
def test_malformed_integer_target_calls(index, rng):
    target, operands, results, attrs = _integer_calls(rng)[index]
    _run(target, operands, results, attrs)
    problems = [p for v in _variants(operands, results, attrs) if (p := _check(target, *v))]
    assert not problems, "\n".join(problems)
