"""The C ABI (include/ferrax.h) as a program in another language sees it.

- tests/c/capi_check.c, compiled here with the header, dlopens libferrax.so, loads LAPACK from
  scipy-openblas32 and runs double and complex-double ops in both layouts with padded leading
  dimensions; the inputs and outputs it saves are checked here against SciPy and NumPy.
- ctypes calls cover every exported op in all four dtypes, empty calls, invalid arguments and
  LAPACK's info. They run in a fresh interpreter that imports neither jax nor ferrax, so the
  library's LAPACK table starts empty there, as in any non-Python program.

That the library exports nothing but the header's functions is checked by tests/c_header.rs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse
import scipy_openblas32

from ferrax import _library
from helpers import assert_valid_lu, permutation_of_pivots, tridiagonal_matrix

REPO = pathlib.Path(__file__).resolve().parent.parent
ROW, COL = 101, 102  # FERRAX_ROW_MAJOR, FERRAX_COL_MAJOR
SENTINEL = -12345.0  # capi_check.c's: fills padding and outputs not yet written
PAD = 2  # how much the ctypes tests' leading dimensions exceed the minimum


def sentinel(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.array(SENTINEL * (1 + 1j) if dtype.kind == "c" else SENTINEL).astype(dtype)


# Set by scripts/asan: the C ABI's calls then run under AddressSanitizer on a library built with
# it, in the processes this module starts (the C drivers, and the ctypes interpreters, which load
# neither jax nor ferrax's package); pytest's own process keeps the plain library.
SANITIZED_LIBRARY = os.environ.get("FERRAX_SANITIZED_LIBRARY")
SANITIZER_ENV = {"LD_PRELOAD": os.environ["FERRAX_SANITIZER_RUNTIME"],
                 "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1"} if SANITIZED_LIBRARY else {}


def ferrax_path() -> str:
    return SANITIZED_LIBRARY or _library.library()._name


def openblas_path() -> str:
    return os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")


class Strided:
    """A batch of matrices in a C ABI layout over a flat buffer `raw` whose leading dimension
    `ld` may exceed the minimum: `matrices` is the logical (batch, rows, cols) view, `padding`
    the rest of the buffer."""

    def __init__(self, raw: np.ndarray, layout: int, batch: int, rows: int, cols: int, ld: int):
        self.raw, self.layout, self.ld = raw, layout, ld
        major, minor = (rows, cols) if layout == ROW else (cols, rows)
        grid = raw.reshape(batch, major, ld)
        self.matrices = grid[..., :minor] if layout == ROW else grid[..., :minor].swapaxes(1, 2)
        self.padding = grid[..., minor:]

    @classmethod
    def of(cls, matrices: np.ndarray, layout: int) -> Strided:
        """A copy of `matrices` in `layout`, ld PAD larger than needed, the padding SENTINEL."""
        batch, rows, cols = matrices.shape
        major, minor = (rows, cols) if layout == ROW else (cols, rows)
        raw = np.full(batch * major * (minor + PAD), sentinel(matrices.dtype))
        strided = cls(raw, layout, batch, rows, cols, minor + PAD)
        strided.matrices[...] = matrices
        return strided


def assert_padding_untouched(*buffers: Strided):
    for buffer in buffers:
        np.testing.assert_array_equal(buffer.padding, sentinel(buffer.raw.dtype))


# ---- Expectations shared by the C program's and the ctypes tests' results. ----

def check_getrf(a, lu, ipiv, close):
    """Packed LU and 1-based pivots as LAPACK's getrf (scipy.linalg.lu_factor)."""
    expected = [scipy.linalg.lu_factor(x) for x in a]
    close(lu, np.stack([e[0] for e in expected]), a.dtype)
    np.testing.assert_array_equal(ipiv, np.stack([e[1] for e in expected]) + 1)


def check_geqrf(a, qr, tau, close):
    """Reflectors, R and tau as LAPACK's geqrf (scipy.linalg.qr's raw mode)."""
    expected = [scipy.linalg.qr(x, mode="raw")[0] for x in a]
    close(qr, np.stack([e[0] for e in expected]), a.dtype)
    close(tau, np.stack([e[1] for e in expected]), a.dtype)


def check_orgqr(qr, tau, q, close):
    """Q from the reflectors `qr` and the first tau.shape[-1] scales, as LAPACK's orgqr/ungqr."""
    orgqr = scipy.linalg.get_lapack_funcs("orgqr", dtype=qr.dtype)
    close(q, np.stack([orgqr(x, t)[0] for x, t in zip(qr, tau)]), qr.dtype)


def check_potrf(a, out, uplo, close):
    """The `uplo` triangle holds scipy's Cholesky factor; the other one is left as it was."""
    lower = uplo == "L"
    factor = np.stack([scipy.linalg.cholesky(x, lower=lower) for x in a])
    close(np.tril(out) if lower else np.triu(out), factor, a.dtype)
    other = (lambda x: np.triu(x, 1)) if lower else (lambda x: np.tril(x, -1))
    np.testing.assert_array_equal(other(out), other(a))


def transposed(x):
    return x.swapaxes(-1, -2)


def check_trsm(a, b, x, flags, close):
    """X solves op(A) X = B (side 'L') or X op(A) = B ('R') for the triangle of A that
    `flags` = side, uplo, trans, diag selects."""
    side, uplo, trans, diag = flags
    t = np.tril(a) if uplo == "L" else np.triu(a)
    if diag == "U":
        t[..., range(t.shape[-1]), range(t.shape[-1])] = 1
    op = {"N": t, "T": transposed(t), "C": transposed(t.conj())}[trans]
    expected = (np.linalg.solve(op, b) if side == "L"
                else transposed(np.linalg.solve(transposed(op), transposed(b))))
    close(x, expected, a.dtype, kind="reconstruct")


def assert_orthonormal(q, close, columns=True):
    gram = transposed(q.conj()) @ q if columns else q @ transposed(q.conj())
    close(gram, np.broadcast_to(np.eye(gram.shape[-1], dtype=q.dtype), gram.shape), q.dtype,
          kind="reconstruct")


def check_gesdd(a, s, u, vt, close):
    """Singular values as NumPy's; U and V^T (None for jobz 'N') orthonormal and giving A."""
    close(s, np.linalg.svd(a, compute_uv=False), a.dtype)
    if u is None:
        return
    k = s.shape[-1]
    close(u[..., :k] * s[..., None, :] @ vt[..., :k, :], a, a.dtype, kind="reconstruct")
    assert_orthonormal(u, close)
    assert_orthonormal(vt, close, columns=False)


def hermitian(a, uplo):
    """The symmetric (Hermitian) matrix LAPACK reads from the `uplo` triangle of `a`."""
    strict = np.tril(a, -1) if uplo == "L" else np.triu(a, 1)
    h = strict + transposed(strict.conj())
    diagonal = range(a.shape[-1])
    h[..., diagonal, diagonal] = a[..., diagonal, diagonal].real
    return h


def check_syevd(a, w, v, uplo, close):
    """Eigenvalues of the `uplo` triangle as NumPy's; the eigenvectors `v` (None for jobz 'N')
    orthonormal and giving the matrix back."""
    close(w, np.linalg.eigvalsh(a, UPLO=uplo), a.dtype)
    if v is None:
        return
    close(v * w[..., None, :] @ transposed(v.conj()), hermitian(a, uplo), a.dtype,
          kind="reconstruct")
    assert_orthonormal(v, close)


def householder_product(v, tau, reverse=False):
    """Q = H_1 H_2 ... H_k (H_k ... H_1 if `reverse`), H_i = I - tau_i v_i v_i^H, for the
    explicit reflector columns `v` (batch, n, k) and scales `tau` (batch, k)."""
    n = v.shape[-2]
    q = np.broadcast_to(np.eye(n, dtype=v.dtype), v.shape[:-2] + (n, n)).copy()
    order = range(v.shape[-1])
    for i in reversed(order) if reverse else order:
        vi = v[..., :, i:i + 1]
        q = q - (q @ vi) * tau[..., None, None, i] @ transposed(vi.conj())
    return q


def qr_reflectors(qr, k):
    """The first k reflector columns that geqrf (geqp3) stores below the diagonal of `qr`."""
    m = qr.shape[-2]
    return np.tril(qr[..., :k], -1) + np.eye(m, k, dtype=qr.dtype)


def lapack(name, dtype):
    return scipy.linalg.get_lapack_funcs(name, dtype=np.dtype(dtype))


def check_geqp3(a, qr, jpvt, tau, close, fixed=()):
    """1-based pivots with the `fixed` (0-based) columns first in order; without fixed columns,
    reflectors, R, tau and pivots as LAPACK's geqp3 (scipy.linalg.qr(pivoting=True)). Either
    way Q R = A P."""
    for x, out, p, t in zip(a, qr, jpvt, tau):
        assert sorted(p) == list(range(1, x.shape[1] + 1)), p
        if fixed:
            np.testing.assert_array_equal(p[:len(fixed)], np.array(fixed) + 1)
        else:
            (expected, expected_tau), _, pivots = scipy.linalg.qr(x, pivoting=True, mode="raw")
            np.testing.assert_array_equal(p, pivots + 1)
            close(out, expected, a.dtype)
            close(t, expected_tau, a.dtype)
    k = tau.shape[-1]
    q = householder_product(qr_reflectors(qr, k), tau)
    close(q @ np.triu(qr), np.take_along_axis(a, jpvt[:, None, :] - 1, axis=-1), a.dtype,
          kind="reconstruct")


def check_ormqr(qr, tau, c, out, side, trans, close):
    """`out` is op(Q) C (side 'L') or C op(Q) ('R') for Q from the geqrf reflectors `qr` and
    `tau`; op is Q^H for 'C' and (real input) 'T'."""
    q = householder_product(qr_reflectors(qr, tau.shape[-1]), tau)
    op = q if trans == "N" else transposed(q.conj())
    close(out, op @ c if side == "L" else c @ op, c.dtype, kind="reconstruct")


def check_gehrd(a, out, tau, ilo, ihi, close):
    """Reflectors, H and tau as LAPACK's gehrd (scipy's, ilo and ihi 0-based there); for the
    whole range H is scipy.linalg.hessenberg's and Q^H A Q with Q from the reflectors."""
    gehrd = lapack("gehrd", a.dtype)
    expected = [gehrd(x, lo=ilo - 1, hi=ihi - 1)[:2] for x in a]
    close(out, np.stack([e[0] for e in expected]), a.dtype)
    close(tau, np.stack([e[1] for e in expected]), a.dtype)
    n = a.shape[-1]
    if (ilo, ihi) != (1, n):
        return
    h = np.triu(out, -1)
    close(h, np.stack([scipy.linalg.hessenberg(x) for x in a]), a.dtype)
    q = householder_product(np.tril(out[..., :-1], -2) + np.eye(n, n - 1, -1, dtype=a.dtype),
                            tau)
    close(transposed(q.conj()) @ a @ q, h, a.dtype, kind="reconstruct")


def check_sytrd(a, out, d, e, tau, uplo, close):
    """The `uplo` triangle of `out`, d, e and tau as LAPACK's sytrd/hetrd (scipy's); the other
    triangle untouched; Q^H A Q, Q from the reflectors, the real tridiagonal of d and e."""
    sytrd = lapack("hetrd" if a.dtype.kind == "c" else "sytrd", a.dtype)
    expected = [sytrd(x, lower=int(uplo == "L"))[:4] for x in a]
    for i, part in enumerate((out, d, e, tau)):
        close(part, np.stack([x[i] for x in expected]), part.dtype)
    other = (lambda x: np.triu(x, 1)) if uplo == "L" else (lambda x: np.tril(x, -1))
    np.testing.assert_array_equal(other(out), other(a))
    n = a.shape[-1]
    if uplo == "L":
        v = np.tril(out[..., :-1], -2) + np.eye(n, n - 1, -1, dtype=a.dtype)
    else:
        v = np.triu(out[..., 1:], 1) + np.eye(n, n - 1, dtype=a.dtype)
    q = householder_product(v, tau, reverse=uplo == "U")
    zero = np.zeros(e.shape[:-1] + (1,), e.dtype)
    tridiagonal = tridiagonal_matrix(np.concatenate([zero, e], -1), d,
                                     np.concatenate([e, zero], -1))
    close(transposed(q.conj()) @ hermitian(a, uplo) @ q, tridiagonal.astype(a.dtype), a.dtype,
          kind="reconstruct")


def complex_of(dtype) -> np.dtype:
    return np.result_type(np.dtype(dtype), np.complex64)


def check_geev(a, w, vl, vr, close):
    """Eigenvalues as NumPy's (as a set); right (left) eigenvectors, None unless computed, of
    unit norm with A vr = vr diag(w) (vl^H A = diag(w) vl^H)."""
    cdtype = complex_of(a.dtype)
    close(np.sort_complex(w), np.sort_complex(np.linalg.eigvals(a)).astype(cdtype), cdtype,
          kind="reconstruct")
    for v, product, expected in ((vr, lambda v: a @ v, lambda v: v * w[..., None, :]),
                                 (vl, lambda v: transposed(v.conj()) @ a,
                                  lambda v: w[..., :, None] * transposed(v.conj()))):
        if v is None:
            continue
        close(product(v), expected(v), cdtype, kind="reconstruct")
        close(np.linalg.norm(v, axis=-2), np.ones(w.shape, np.finfo(cdtype).dtype), cdtype,
              kind="reconstruct")


def check_gees(a, t, w, vs, close):
    """T (quasi-)upper triangular with the eigenvalues' real parts on its diagonal (complex:
    the eigenvalues), w as NumPy's eigenvalues (as a set); with Schur vectors Z (None unless
    computed) orthonormal and A = Z T Z^H."""
    cdtype = complex_of(a.dtype)
    close(np.sort_complex(w), np.sort_complex(np.linalg.eigvals(a)).astype(cdtype), cdtype,
          kind="reconstruct")
    diagonal = np.diagonal(t, axis1=-2, axis2=-1)
    if a.dtype.kind == "c":
        close(np.tril(t, -1), np.zeros_like(t), a.dtype, kind="reconstruct")
        close(diagonal, w, a.dtype)
    else:
        close(np.tril(t, -2), np.zeros_like(t), a.dtype, kind="reconstruct")
        close(diagonal, w.real, a.dtype)
        sub = np.diagonal(t, -1, axis1=-2, axis2=-1)
        assert not np.any((sub[..., 1:] != 0) & (sub[..., :-1] != 0)), sub  # 1x1, 2x2 blocks
    if vs is not None:
        assert_orthonormal(vs, close)
        close(vs @ t @ transposed(vs.conj()), a, a.dtype, kind="reconstruct")


# ---- The C program. ----

@dataclasses.dataclass
class CRun:
    """capi_check's output: every saved buffer, by "<case>.<row|col>.<role>"."""

    arrays: dict[str, np.ndarray]  # logical contents: (batch, rows, cols) or (batch, len)
    matrices: dict[str, Strided]  # the matrix buffers, padding included
    errors: dict[str, tuple[int, str]]  # error case: (return code, ferrax_last_error())

    def __call__(self, case: str, layout: str, role: str) -> np.ndarray:
        return self.arrays[f"{case}.{layout}.{role}"]


def run_checked(command, **kwargs):
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)
    assert proc.returncode == 0, (
        f"{command} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")


def compile_c(source: str, program: pathlib.Path, *libraries: str) -> None:
    """Compiles a driver of tests/c/ with the header, every warning an error (and under
    AddressSanitizer for scripts/asan)."""
    flags = ["-fsanitize=address", "-fno-omit-frame-pointer", "-g"] if SANITIZED_LIBRARY else []
    run_checked(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", *flags, "-I", "include", source,
                 "-ldl", *libraries, "-o", str(program)], cwd=REPO)


@pytest.fixture(scope="module")
def c_run(tmp_path_factory) -> CRun:
    tmp = tmp_path_factory.mktemp("capi_check")
    program, out = tmp / "capi_check", tmp / "out"
    out.mkdir()
    compile_c("tests/c/capi_check.c", program)
    run_checked([str(program), ferrax_path(), openblas_path(), str(out)],
                env={**os.environ, **SANITIZER_ENV})
    run = CRun({}, {}, {})
    for line in (out / "manifest.txt").read_text().splitlines():
        name, dtype, shape, layout, ld = line.split()
        raw = np.fromfile(out / f"{name}.bin", dtype="<" + dtype)
        shape = tuple(map(int, shape.split(",")))
        if layout == "vec":
            run.arrays[name] = raw.reshape(shape)
        else:
            matrices = Strided(raw, ROW if layout == "row" else COL, *shape, int(ld))
            run.matrices[name] = matrices
            run.arrays[name] = matrices.matrices
    for line in (out / "errors.txt").read_text().splitlines():
        name, rc, message = line.split(" ", 2)
        run.errors[name] = (int(rc), message)
    return run


C_LAYOUTS = pytest.mark.parametrize("layout", ["row", "col"])


@C_LAYOUTS
def test_c_getrf(c_run, layout, assert_close):
    for case in ("getrf_5x4", "getrf_4x5", "zgetrf_5x4"):
        check_getrf(c_run(case, layout, "a_in"), c_run(case, layout, "a_out"),
                    c_run(case, layout, "ipiv"), assert_close)


@C_LAYOUTS
def test_c_geqrf_orgqr(c_run, layout, assert_close):
    for case in ("qr_5x4", "qr_4x5"):
        check_geqrf(c_run(case, layout, "a_in"), c_run(case, layout, "a_out"),
                    c_run(case, layout, "tau"), assert_close)
    check_orgqr(c_run("qr_5x4", layout, "a_out"), c_run("qr_5x4", layout, "tau"),
                c_run("qr_5x4", layout, "q"), assert_close)


@C_LAYOUTS
def test_c_potrf(c_run, layout, assert_close):
    for uplo in "LU":
        case = f"potrf_{uplo}"
        check_potrf(c_run(case, layout, "a_in"), c_run(case, layout, "a_out"), uplo, assert_close)


@C_LAYOUTS
def test_c_trsm(c_run, layout, assert_close):
    for flags in ("LLNN", "LUTU", "RUNN", "RLTU", "LUCN"):
        case = f"trsm_{flags}"
        a = c_run(case, layout, "a_in")
        check_trsm(a, c_run(case, layout, "b_in"), c_run(case, layout, "b_out"), flags,
                   assert_close)
        np.testing.assert_array_equal(c_run(case, layout, "a_out"), a)


@C_LAYOUTS
def test_c_gesdd(c_run, layout, assert_close):
    for case in ("gesdd_A_5x4", "gesdd_S_4x5", "gesdd_N_5x4"):
        a = c_run(case, layout, "a_in")
        u, vt = (None, None) if "_N_" in case else (c_run(case, layout, "u"),
                                                      c_run(case, layout, "vt"))
        check_gesdd(a, c_run(case, layout, "s"), u, vt, assert_close)
        np.testing.assert_array_equal(c_run(case, layout, "a_out"), a)


@C_LAYOUTS
def test_c_syevd_heevd(c_run, layout, assert_close):
    for case in ("syevd_VL", "syevd_NU", "zheevd_VU", "zheevd_NL"):
        jobz, uplo = case[-2:]
        v = c_run(case, layout, "a_out") if jobz == "V" else None
        check_syevd(c_run(case, layout, "a_in"), c_run(case, layout, "w"), v, uplo, assert_close)


_C_GEEV = [f"{t}geev_{l}{r}" for t in "dz" for l in "VN" for r in "VN"]
_C_GEES = [f"{t}gees_{j}" for t in "dz" for j in "VN"]


@C_LAYOUTS
def test_c_geev(c_run, layout, assert_close):
    for case in _C_GEEV:
        a = c_run(case, layout, "a_in")
        vl, vr = (c_run(case, layout, role) if job == "V" else None
                  for job, role in zip(case[-2:], ("vl", "vr")))
        check_geev(a, c_run(case, layout, "w"), vl, vr, assert_close)
        np.testing.assert_array_equal(c_run(case, layout, "a_out"), a)


@C_LAYOUTS
def test_c_gees(c_run, layout, assert_close):
    for case in _C_GEES:
        vs = c_run(case, layout, "vs") if case.endswith("V") else None
        check_gees(c_run(case, layout, "a_in"), c_run(case, layout, "a_out"),
                   c_run(case, layout, "w"), vs, assert_close)


def test_c_layouts_agree(c_run):
    """Row- and column-major runs on the same logical input give identical logical results."""
    rows = sorted(name for name in c_run.arrays if ".row." in name)
    assert rows == sorted(name.replace(".col.", ".row.") for name in c_run.arrays
                          if ".col." in name)
    for name in rows:
        col = name.replace(".row.", ".col.")
        np.testing.assert_array_equal(c_run.arrays[name], c_run.arrays[col], err_msg=name)


def test_c_padding_untouched(c_run):
    for name, matrices in c_run.matrices.items():
        np.testing.assert_array_equal(matrices.padding, sentinel(matrices.raw.dtype), err_msg=name)


def test_c_error_paths(c_run):
    assert c_run.errors.keys() == {"bad_layout", "small_lda_col", "small_lda_row"}
    assert all(rc == -1 for rc, _ in c_run.errors.values())
    assert "layout = 100" in c_run.errors["bad_layout"][1]
    assert "leading dimension of a = 4: expected >= 5" in c_run.errors["small_lda_col"][1]
    assert "leading dimension of a = 3: expected >= 4" in c_run.errors["small_lda_row"][1]


# ---- ctypes, in a fresh interpreter without jax or ferrax. ----

# Each op's C prototype as in ferrax.h, T being the scalar type and R its real type.
PROTOTYPES = {
    "getrf": "int layout, i64 batch, i32 m, i32 n, T* a, i32 lda, i32* ipiv, i32* info",
    "potrf": "int layout, i64 batch, char uplo, i32 n, T* a, i32 lda, i32* info",
    "geqrf": "int layout, i64 batch, i32 m, i32 n, T* a, i32 lda, T* tau",
    "orgqr": "int layout, i64 batch, i32 m, i32 n, i32 k, T* a, i32 lda, const T* tau",
    "trsm": "int layout, i64 batch, char side, char uplo, char trans, char diag, i32 m, i32 n, "
            "const T* a, i32 lda, T* b, i32 ldb",
    "gesdd": "int layout, i64 batch, char jobz, i32 m, i32 n, T* a, i32 lda, R* s, T* u, "
             "i32 ldu, T* vt, i32 ldvt, i32* info",
    "syevd": "int layout, i64 batch, char jobz, char uplo, i32 n, T* a, i32 lda, R* w, "
             "i32* info",
    "gehrd": "int layout, i64 batch, i32 n, i32 ilo, i32 ihi, T* a, i32 lda, T* tau, i32* info",
    "sytrd": "int layout, i64 batch, char uplo, i32 n, T* a, i32 lda, R* d, R* e, T* tau, "
             "i32* info",
    "gesvd": "int layout, i64 batch, char jobz, i32 m, i32 n, T* a, i32 lda, R* s, T* u, "
             "i32 ldu, T* vt, i32 ldvt, i32* info",
    "geev": "int layout, i64 batch, char jobvl, char jobvr, i32 n, T* a, i32 lda, C* w, C* vl, "
            "i32 ldvl, C* vr, i32 ldvr, i32* info",
    "gees": "int layout, i64 batch, char jobvs, i32 n, T* a, i32 lda, C* w, T* vs, i32 ldvs, "
            "i32* info",
    "ormqr": "int layout, i64 batch, char side, char trans, i32 m, i32 n, i32 k, const T* a, "
             "i32 lda, const T* tau, T* c, i32 ldc",
    "geqp3": "int layout, i64 batch, i32 m, i32 n, T* a, i32 lda, i32* jpvt, T* tau",
    "gtsv": "int layout, i64 batch, i32 n, i32 nrhs, T* dl, T* d, T* du, T* b, i32 ldb, "
            "i32* info",
    "gtsv_perturbed": "int layout, i64 batch, i32 n, i32 nrhs, const T* dl, const T* d, "
                      "const T* du, T* b, i32 ldb",
    "csrmm": "i64 rows, i64 cols, i64 nnz, const T* data, const i32* indptr, "
             "const i32* indices, i64 n, const T* rhs, T* out",
}
_TYPE_LETTER = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
                np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
_COMPLEX_NAME = {"orgqr": "ungqr", "syevd": "heevd", "sytrd": "hetrd", "ormqr": "unmqr"}


def parameters(op: str) -> list[tuple[str, str]]:
    """(C type, name) of each parameter of `op`."""
    return [tuple(p.rsplit(" ", 1)) for p in PROTOTYPES[op].split(", ")]


def pointee(ctype: str, dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    base = ctype.removeprefix("const ").removesuffix("*")
    return {"T": dtype, "R": np.finfo(dtype).dtype, "C": complex_of(dtype),
            "i32": np.dtype(np.int32)}[base]


def c_name(op: str, dtype) -> str:
    dtype = np.dtype(dtype)
    name = _COMPLEX_NAME.get(op, op) if dtype.kind == "c" else op
    return f"ferrax_{_TYPE_LETTER[dtype]}{name}"


def c_call(op: str, dtype, **args) -> tuple[str, list[str], list]:
    """A call of ferrax_<t><op> with its arguments by parameter name, checked against the
    prototype: (function name, C parameter types, arguments in order)."""
    dtype = np.dtype(dtype)
    params = parameters(op)
    assert sorted(args) == sorted(name for _, name in params), (op, sorted(args))
    for ctype, name in params:
        value = args[name]
        if ctype.endswith("*") and value is not None:
            assert value.dtype == pointee(ctype, dtype) and value.flags.c_contiguous, (op, name)
    return c_name(op, dtype), [ctype for ctype, _ in params], [args[name] for _, name in params]


_C_SCALAR = {"s": ("float", "float", "ferrax_complex_float"),
             "d": ("double", "double", "ferrax_complex_double"),
             "c": ("ferrax_complex_float", "float", "ferrax_complex_float"),
             "z": ("ferrax_complex_double", "double", "ferrax_complex_double")}


def test_prototypes_match_header():
    """PROTOTYPES, from which the ctypes calls take their argument types, is the header's."""
    header = (REPO / "include" / "ferrax.h").read_text()
    for op, dtype in itertools.product(PROTOTYPES, _TYPE_LETTER):
        scalar, real, complex_ = _C_SCALAR[_TYPE_LETTER[dtype]]
        c_types = {"int": "int", "i64": "int64_t", "i32": "int32_t", "char": "char", "T": scalar,
                   "R": real, "C": complex_}
        params = []
        for ctype, param in parameters(op):
            const = "const " if ctype.startswith("const ") else ""
            base = ctype.removeprefix("const ").removesuffix("*")
            pointer = " *" if ctype.endswith("*") else " "
            params.append(f"{const}{c_types[base]}{pointer}{param}")
        assert f"int {c_name(op, dtype)}({', '.join(params)});" in header


# The header's functions that are not batched ops: the LAPACK table's, the RNN targets' sizes
# (tested with the RNN) and the kernel-call payload reader (test_kernel_call).
_NOT_OPS = {"ferrax_lapack_load_library", "ferrax_lapack_register", "ferrax_rnn_sizes",
            "ferrax_kernel_call_describe"}


def test_prototypes_cover_header():
    """Every op the header declares has its prototype in PROTOTYPES, so that the generic
    tests below (empty calls, invalid arguments) reach every function."""
    header = (REPO / "include" / "ferrax.h").read_text()
    declared = set(re.findall(r"^int (ferrax_\w+)\(", header, re.M)) - _NOT_OPS
    assert declared == {c_name(op, dtype) for op, dtype in itertools.product(PROTOTYPES,
                                                                           _TYPE_LETTER)}


# Runs in the fresh interpreter: loads LAPACK, makes the calls in order on the saved arrays
# (pointer parameters as void *; the types were checked by c_call) and saves them back. With
# THREADS > 0 it then makes the same calls again from THREADS threads at once, ROUNDS times
# each, every thread on its own copy of the inputs and in its own order (so each call's arrays
# must be its own), and records every call whose code, message or arrays differ from the
# call made alone.
_WORKER = r"""
import ctypes, json, sys, threading
import numpy as np

library, lapack, work, threads, rounds = sys.argv[1:6]
threads, rounds = int(threads), int(rounds)
lib = ctypes.CDLL(library)
lib.ferrax_last_error.restype = ctypes.c_char_p
lib.ferrax_lapack_load_library.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
error = ctypes.create_string_buffer(512)
assert lib.ferrax_lapack_load_library(lapack.encode(), error, len(error)) > 0, error.value

SCALARS = {"int": ctypes.c_int, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "char": ctypes.c_char}
with np.load(f"{work}/arrays.npz") as saved:
    arrays = {key: saved[key] for key in saved.files}
with open(f"{work}/calls.json") as calls:
    calls = json.load(calls)
functions = []
for name, types, args in calls:
    function = getattr(lib, name)
    function.argtypes = [SCALARS.get(ctype, ctypes.c_void_p) for ctype in types]
    function.restype = ctypes.c_int
    functions.append(function)


def call(i, arrays):
    _, types, args = calls[i]
    rc = functions[i](*(arrays[arg["array"]].ctypes.data if isinstance(arg, dict)
                        else arg.encode() if ctype == "char" else arg
                        for ctype, arg in zip(types, args)))
    # ferrax_last_error is the calling thread's own.
    return [rc, lib.ferrax_last_error().decode() if rc else ""]


inputs = {key: value.copy() for key, value in arrays.items()}
results = [call(i, arrays) for i in range(len(calls))]
np.savez(f"{work}/arrays_out.npz", **arrays)
with open(f"{work}/results.json", "w") as out:
    json.dump(results, out)

differences, made = [], []


def concurrently(thread):
    for round in range(rounds):
        mine = {key: value.copy() for key, value in inputs.items()}
        shift = thread * len(calls) // threads + round
        for i in ((j + shift) % len(calls) for j in range(len(calls))):
            got = call(i, mine)
            made.append(i)
            _, _, args = calls[i]
            changed = [arg["array"] for arg in args if isinstance(arg, dict)
                       and mine[arg["array"]].tobytes() != arrays[arg["array"]].tobytes()]
            if got != results[i] or changed:
                differences.append([thread, round, calls[i][0], got, results[i], changed])


workers = [threading.Thread(target=concurrently, args=(t,)) for t in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
with open(f"{work}/concurrency.json", "w") as out:
    json.dump({"calls": len(made), "differences": differences[:20]}, out)
assert not {"jax", "ferrax"} & sys.modules.keys()  # the C ABI alone
"""


@pytest.fixture
def capi(run_python, tmp_path):
    """``capi(calls)``: makes the calls (from c_call) in one fresh interpreter, updates the
    arrays passed in place and returns each call's (return code, message; "" on success).
    ``capi(calls, threads=T, rounds=R)`` also makes them from T threads at once, R times each,
    and returns (results, the number of concurrent calls, those that differed)."""

    def run(calls, threads=0, rounds=0):
        arrays, keys, spec = {}, {}, []
        for function, types, args in calls:
            encoded = []
            for arg in args:
                if isinstance(arg, np.ndarray):
                    key = keys.setdefault(id(arg), f"a{len(keys)}")
                    arrays[key] = arg
                    arg = {"array": key}
                encoded.append(arg)
            spec.append([function, types, encoded])
        np.savez(tmp_path / "arrays.npz", **arrays)
        (tmp_path / "calls.json").write_text(json.dumps(spec))
        run_python(_WORKER, ferrax_path(), openblas_path(), str(tmp_path), str(threads),
                   str(rounds), env=SANITIZER_ENV, timeout=600)
        with np.load(tmp_path / "arrays_out.npz") as out:
            for key, array in arrays.items():
                np.copyto(array, out[key])
        results = [tuple(r) for r in json.loads((tmp_path / "results.json").read_text())]
        if not threads:
            return results
        concurrency = json.loads((tmp_path / "concurrency.json").read_text())
        return results, concurrency["calls"], concurrency["differences"]

    return run


LAYOUTS = (ROW, COL)
BATCH = 2


def output(shape, dtype) -> np.ndarray:
    """A vector output, filled with SENTINEL so that entries left unwritten show."""
    return np.full(shape, sentinel(dtype))


def assert_success(results, *infos):
    assert all(result == (0, "") for result in results), results
    for info in infos:
        np.testing.assert_array_equal(info, 0)


def test_getrf(dtype, random_matrix, assert_close, capi):
    cases = []
    # Past the Rust lanes (40×33, 33×40) row-major matrices are factored where they lie,
    # with the padding of a leading dimension past the row.
    for layout, (m, n) in itertools.product(LAYOUTS, ((4, 3), (3, 4), (40, 33), (33, 40))):
        a = random_matrix((BATCH, m, n), dtype)
        cases.append((a, Strided.of(a, layout), output((BATCH, min(m, n)), np.int32),
                      output(BATCH, np.int32)))
    results = capi([c_call("getrf", dtype, layout=buf.layout, batch=BATCH, m=a.shape[1],
                           n=a.shape[2], a=buf.raw, lda=buf.ld, ipiv=ipiv, info=info)
                    for a, buf, ipiv, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for a, buf, ipiv, _ in cases:
        if min(a.shape[1:]) > 4 and np.finfo(dtype).eps > 1e-10:
            # Single precision: a near tie between two pivot candidates may fall either way
            # with another blocking's rounding, so validity only.
            perm = permutation_of_pivots(ipiv - 1, a.shape[1])
            assert_valid_lu(a, buf.matrices, perm)
        else:
            check_getrf(a, buf.matrices, ipiv, assert_close)
        assert_padding_untouched(buf)


def spd(random_matrix, shape, dtype) -> np.ndarray:
    """Symmetric (Hermitian) positive definite: M M^H + n I."""
    m = random_matrix(shape, dtype)
    return m @ transposed(m.conj()) + shape[-1] * np.eye(shape[-1], dtype=dtype)


def test_potrf(dtype, random_matrix, assert_close, capi):
    cases = []
    for layout, uplo in itertools.product(LAYOUTS, "LU"):
        a = spd(random_matrix, (BATCH, 4, 4), dtype)
        cases.append((uplo, a, Strided.of(a, layout), output(BATCH, np.int32)))
    results = capi([c_call("potrf", dtype, layout=buf.layout, batch=BATCH, uplo=uplo, n=4,
                           a=buf.raw, lda=buf.ld, info=info)
                    for uplo, _, buf, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for uplo, a, buf, _ in cases:
        check_potrf(a, buf.matrices, uplo, assert_close)
        assert_padding_untouched(buf)


def test_geqrf(dtype, random_matrix, assert_close, capi):
    cases = []
    for layout, (m, n) in itertools.product(LAYOUTS, ((4, 3), (3, 4))):
        a = random_matrix((BATCH, m, n), dtype)
        cases.append((a, Strided.of(a, layout), output((BATCH, min(m, n)), dtype)))
    results = capi([c_call("geqrf", dtype, layout=buf.layout, batch=BATCH, m=a.shape[1],
                           n=a.shape[2], a=buf.raw, lda=buf.ld, tau=tau)
                    for a, buf, tau in cases])
    assert_success(results)
    for a, buf, tau in cases:
        check_geqrf(a, buf.matrices, tau, assert_close)
        assert_padding_untouched(buf)


def test_orgqr(dtype, random_matrix, assert_close, capi):
    """Q from scipy's reflectors, with all n of them and with k < n."""
    cases = []
    for layout, k in itertools.product(LAYOUTS, (3, 2)):
        raw = [scipy.linalg.qr(x, mode="raw")[0] for x in random_matrix((BATCH, 4, 3), dtype)]
        qr, tau = np.stack([r[0] for r in raw]), np.stack([r[1][:k] for r in raw])
        cases.append((qr, tau, tau.copy(), Strided.of(qr, layout)))
    results = capi([c_call("orgqr", dtype, layout=buf.layout, batch=BATCH, m=4, n=3,
                           k=tau.shape[1], a=buf.raw, lda=buf.ld, tau=tau)
                    for _, tau, _, buf in cases])
    assert_success(results)
    for qr, tau, tau_before, buf in cases:
        check_orgqr(qr, tau, buf.matrices, assert_close)
        np.testing.assert_array_equal(tau, tau_before)
        assert_padding_untouched(buf)


def test_trsm(dtype, random_matrix, assert_close, capi):
    """Every side, uplo, trans and diag; A's ignored triangle (and diagonal) hold noise."""
    m, n = 3, 2
    cases = []
    for layout, flags in itertools.product(LAYOUTS, itertools.product("LR", "LU", "NTC", "NU")):
        k = m if flags[0] == "L" else n
        a = random_matrix((BATCH, k, k), dtype) + 3 * np.eye(k, dtype=dtype)
        b = random_matrix((BATCH, m, n), dtype)
        cases.append((flags, a, b, Strided.of(a, layout), Strided.of(b, layout)))
    results = capi([c_call("trsm", dtype, layout=a_buf.layout, batch=BATCH, side=side, uplo=uplo,
                           trans=trans, diag=diag, m=m, n=n, a=a_buf.raw, lda=a_buf.ld,
                           b=b_buf.raw, ldb=b_buf.ld)
                    for (side, uplo, trans, diag), _, _, a_buf, b_buf in cases])
    assert_success(results)
    for flags, a, b, a_buf, b_buf in cases:
        check_trsm(a, b, b_buf.matrices, flags, assert_close)
        np.testing.assert_array_equal(a_buf.matrices, a)
        assert_padding_untouched(a_buf, b_buf)


@pytest.mark.parametrize("op", ["gesdd", "gesvd"])
def test_gesdd(op, dtype, random_matrix, assert_close, capi):
    """gesdd and gesvd: jobz 'A', 'S' and 'N' (u and vt null); `a` is left as it was. The
    larger shapes take faer's SVD in gesdd with vectors (`SVD_FAER_MIN`)."""
    real = np.finfo(dtype).dtype
    cases = []
    f = _library.limits()["SVD_FAER_MIN"]
    shapes = ((4, 3), (3, 4), (f + 3, f), (f - 9, f + 1))
    for layout, (m, n), jobz in itertools.product(LAYOUTS, shapes, "ASN"):
        a, k = random_matrix((BATCH, m, n), dtype), min(m, n)
        u_cols, vt_rows = (m, n) if jobz == "A" else (k, k)
        u, vt = (None, None) if jobz == "N" else (
            Strided.of(output((BATCH, m, u_cols), dtype), layout),
            Strided.of(output((BATCH, vt_rows, n), dtype), layout))
        cases.append((jobz, a, Strided.of(a, layout), output((BATCH, k), real), u, vt,
                      output(BATCH, np.int32)))
    results = capi([c_call(op, dtype, layout=buf.layout, batch=BATCH, jobz=jobz,
                           m=a.shape[1], n=a.shape[2], a=buf.raw, lda=buf.ld, s=s,
                           u=u and u.raw, ldu=u.ld if u else 1, vt=vt and vt.raw,
                           ldvt=vt.ld if vt else 1, info=info)
                    for jobz, a, buf, s, u, vt, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for jobz, a, buf, s, u, vt, _ in cases:
        check_gesdd(a, s, u and u.matrices, vt and vt.matrices, assert_close)
        np.testing.assert_array_equal(buf.matrices, a)
        assert_padding_untouched(buf, *(x for x in (u, vt) if x))


@pytest.mark.parametrize("op", ["gesdd", "gesvd"])
def test_gesdd_of_empty_matrices(op, dtype, assert_close, capi):
    """m or n = 0 with jobz 'A': the empty factor may be null (a fuzz finding: a slice was made
    from it), the other is a unitary matrix."""
    cases = []
    for layout, (m, n) in itertools.product(LAYOUTS, ((0, 3), (3, 0))):
        u = Strided.of(output((BATCH, m, m), dtype), layout) if m else None
        vt = Strided.of(output((BATCH, n, n), dtype), layout) if n else None
        cases.append((layout, m, n, u, vt, output(BATCH, np.int32)))
    results = capi([c_call(op, dtype, layout=layout, batch=BATCH, jobz="A", m=m, n=n, a=None,
                           lda=max(n if layout == ROW else m, 1),
                           s=None, u=u and u.raw, ldu=u.ld if u else 1, vt=vt and vt.raw,
                           ldvt=vt.ld if vt else 1, info=info)
                    for layout, m, n, u, vt, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for *_, u, vt, _ in cases:
        assert_orthonormal((u or vt).matrices, assert_close)


def test_syevd(dtype, random_matrix, assert_close, capi):
    """jobz 'V' and 'N', uplo 'L' and 'U', on non-symmetric input (one triangle is read)."""
    real = np.finfo(dtype).dtype
    cases = []
    for layout, jobz, uplo in itertools.product(LAYOUTS, "VN", "LU"):
        a = random_matrix((BATCH, 4, 4), dtype)
        cases.append((jobz, uplo, a, Strided.of(a, layout), output((BATCH, 4), real),
                      output(BATCH, np.int32)))
    results = capi([c_call("syevd", dtype, layout=buf.layout, batch=BATCH, jobz=jobz, uplo=uplo,
                           n=4, a=buf.raw, lda=buf.ld, w=w, info=info)
                    for jobz, uplo, _, buf, w, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for jobz, uplo, a, buf, w, _ in cases:
        check_syevd(a, w, buf.matrices if jobz == "V" else None, uplo, assert_close)
        assert_padding_untouched(buf)


def test_gehrd(dtype, random_matrix, assert_close, capi):
    """The whole matrix (ilo 1, ihi n) and a middle range."""
    n = 5
    cases = []
    for layout, (ilo, ihi) in itertools.product(LAYOUTS, ((1, n), (2, 4))):
        a = random_matrix((BATCH, n, n), dtype)
        cases.append((ilo, ihi, a, Strided.of(a, layout), output((BATCH, n - 1), dtype),
                      output(BATCH, np.int32)))
    results = capi([c_call("gehrd", dtype, layout=buf.layout, batch=BATCH, n=n, ilo=ilo, ihi=ihi,
                           a=buf.raw, lda=buf.ld, tau=tau, info=info)
                    for ilo, ihi, _, buf, tau, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for ilo, ihi, a, buf, tau, _ in cases:
        check_gehrd(a, buf.matrices, tau, ilo, ihi, assert_close)
        assert_padding_untouched(buf)


def test_sytrd(dtype, random_matrix, assert_close, capi):
    """uplo 'L' and 'U', on non-symmetric input (one triangle is read)."""
    n, real = 4, np.finfo(dtype).dtype
    cases = []
    for layout, uplo in itertools.product(LAYOUTS, "LU"):
        a = random_matrix((BATCH, n, n), dtype)
        cases.append((uplo, a, Strided.of(a, layout), output((BATCH, n), real),
                      output((BATCH, n - 1), real), output((BATCH, n - 1), dtype),
                      output(BATCH, np.int32)))
    results = capi([c_call("sytrd", dtype, layout=buf.layout, batch=BATCH, uplo=uplo, n=n,
                           a=buf.raw, lda=buf.ld, d=d, e=e, tau=tau, info=info)
                    for uplo, _, buf, d, e, tau, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for uplo, a, buf, d, e, tau, _ in cases:
        check_sytrd(a, buf.matrices, d, e, tau, uplo, assert_close)
        assert_padding_untouched(buf)


def test_geev(dtype, random_matrix, assert_close, capi):
    """Every jobvl and jobvr ('N': the vectors' pointer null); `a` is left as it was."""
    n, cdtype = 4, complex_of(dtype)
    cases = []
    for layout, jobvl, jobvr in itertools.product(LAYOUTS, "VN", "VN"):
        a = random_matrix((BATCH, n, n), dtype)
        vl, vr = (Strided.of(output((BATCH, n, n), cdtype), layout) if job == "V" else None
                  for job in (jobvl, jobvr))
        cases.append((jobvl, jobvr, a, Strided.of(a, layout), output((BATCH, n), cdtype), vl, vr,
                      output(BATCH, np.int32)))
    results = capi([c_call("geev", dtype, layout=buf.layout, batch=BATCH, jobvl=jobvl,
                           jobvr=jobvr, n=n, a=buf.raw, lda=buf.ld, w=w, vl=vl and vl.raw,
                           ldvl=vl.ld if vl else 1, vr=vr and vr.raw, ldvr=vr.ld if vr else 1,
                           info=info)
                    for jobvl, jobvr, _, buf, w, vl, vr, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for _, _, a, buf, w, vl, vr, _ in cases:
        check_geev(a, w, vl and vl.matrices, vr and vr.matrices, assert_close)
        np.testing.assert_array_equal(buf.matrices, a)
        assert_padding_untouched(buf, *(x for x in (vl, vr) if x))


def test_gees(dtype, random_matrix, assert_close, capi):
    """jobvs 'V' and 'N' (vs null); T overwrites `a`."""
    n = 4
    cases = []
    for layout, jobvs in itertools.product(LAYOUTS, "VN"):
        a = random_matrix((BATCH, n, n), dtype)
        vs = Strided.of(output((BATCH, n, n), dtype), layout) if jobvs == "V" else None
        cases.append((jobvs, a, Strided.of(a, layout), output((BATCH, n), complex_of(dtype)), vs,
                      output(BATCH, np.int32)))
    results = capi([c_call("gees", dtype, layout=buf.layout, batch=BATCH, jobvs=jobvs, n=n,
                           a=buf.raw, lda=buf.ld, w=w, vs=vs and vs.raw, ldvs=vs.ld if vs else 1,
                           info=info)
                    for jobvs, _, buf, w, vs, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for _, a, buf, w, vs, _ in cases:
        check_gees(a, buf.matrices, w, vs and vs.matrices, assert_close)
        assert_padding_untouched(buf, *(x for x in (vs,) if x))


def test_ormqr(dtype, random_matrix, assert_close, capi):
    """Every side and trans LAPACK accepts for the dtype ('T' for real, 'C' for both), with
    k = 2 reflectors of scipy's geqrf (fewer than Q's order); `a` and `tau` are left as they
    were."""
    m, n, k = 4, 3, 2
    cases = []
    transposes = "NC" if np.dtype(dtype).kind == "c" else "NTC"
    for layout, side, trans in itertools.product(LAYOUTS, "LR", transposes):
        raw = [scipy.linalg.qr(x, mode="raw")[0]
               for x in random_matrix((BATCH, m if side == "L" else n, k), dtype)]
        qr, tau = np.stack([r[0] for r in raw]), np.stack([r[1] for r in raw])
        c = random_matrix((BATCH, m, n), dtype)
        cases.append((side, trans, qr, tau, tau.copy(), c, Strided.of(qr, layout),
                      Strided.of(c, layout)))
    results = capi([c_call("ormqr", dtype, layout=a_buf.layout, batch=BATCH, side=side,
                           trans=trans, m=m, n=n, k=k, a=a_buf.raw, lda=a_buf.ld, tau=tau,
                           c=c_buf.raw, ldc=c_buf.ld)
                    for side, trans, _, tau, _, _, a_buf, c_buf in cases])
    assert_success(results)
    for side, trans, qr, tau, tau_before, c, a_buf, c_buf in cases:
        check_ormqr(qr, tau, c, c_buf.matrices, side, trans, assert_close)
        np.testing.assert_array_equal(a_buf.matrices, qr)
        np.testing.assert_array_equal(tau, tau_before)
        assert_padding_untouched(a_buf, c_buf)


def test_geqp3(dtype, random_matrix, assert_close, capi):
    """Free columns (as LAPACK and scipy pivot them) in tall and wide matrices, and columns
    kept in front by nonzero jpvt entries."""
    cases = []
    for layout, ((m, n), fixed) in itertools.product(
            LAYOUTS, (((4, 3), ()), ((3, 4), ()), ((5, 4), (2,)), ((4, 4), (3, 1)))):
        a = random_matrix((BATCH, m, n), dtype)
        jpvt = np.zeros((BATCH, n), np.int32)
        jpvt[:, list(fixed)] = 1
        cases.append((fixed, a, Strided.of(a, layout), jpvt, output((BATCH, min(m, n)), dtype)))
    results = capi([c_call("geqp3", dtype, layout=buf.layout, batch=BATCH, m=a.shape[1],
                           n=a.shape[2], a=buf.raw, lda=buf.ld, jpvt=jpvt, tau=tau)
                    for _, a, buf, jpvt, tau in cases])
    assert_success(results)
    for fixed, a, buf, jpvt, tau in cases:
        check_geqp3(a, buf.matrices, jpvt, tau, assert_close, fixed=tuple(sorted(fixed)))
        assert_padding_untouched(buf)


def test_gtsv(dtype, random_matrix, assert_close, capi):
    """Diagonally dominant systems with 1 and 3 right-hand sides; dl[0] and du[n-1] are NaN,
    which must not be read."""
    n = 5
    cases = []
    for layout, nrhs in itertools.product(LAYOUTS, (1, 3)):
        dl, du = random_matrix((BATCH, n), dtype), random_matrix((BATCH, n), dtype)
        d = random_matrix((BATCH, n), dtype) + np.array(4, dtype)
        dl[:, 0] = du[:, -1] = np.nan
        b = random_matrix((BATCH, n, nrhs), dtype)
        cases.append((tridiagonal_matrix(dl, d, du), b, dl, d, du, Strided.of(b, layout),
                      output(BATCH, np.int32)))
    results = capi([c_call("gtsv", dtype, layout=buf.layout, batch=BATCH, n=n, nrhs=b.shape[2],
                           dl=dl, d=d, du=du, b=buf.raw, ldb=buf.ld, info=info)
                    for _, b, dl, d, du, buf, info in cases])
    assert_success(results, *(info for *_, info in cases))
    for matrix, b, _, _, _, buf, _ in cases:
        assert_close(buf.matrices, np.linalg.solve(matrix, b), dtype, kind="reconstruct")
        assert_padding_untouched(buf)


def test_gtsv_without_right_hand_sides(dtype, random_matrix, capi):
    """nrhs = 0: the diagonals are factored as with a right-hand side and nothing is written
    to b (LAPACK's ?gtsv writes b's first column even then; found by fuzz/capi)."""
    n = 6
    dl, du = random_matrix((BATCH, n), dtype), random_matrix((BATCH, n), dtype)
    d = random_matrix((BATCH, n), dtype) + np.array(4, dtype)
    cases = {}
    for layout, nrhs in itertools.product(LAYOUTS, (0, 1)):
        # Room for one column in either layout; with nrhs = 0 it must keep the sentinel.
        b = np.full((BATCH, n) if layout == COL else (BATCH, n, 1), sentinel(dtype))
        cases[layout, nrhs] = (dl.copy(), d.copy(), du.copy(), b, output(BATCH, np.int32))
    results = capi([c_call("gtsv", dtype, layout=layout, batch=BATCH, n=n, nrhs=nrhs, dl=dl_,
                           d=d_, du=du_, b=b, ldb=n if layout == COL else 1, info=info)
                    for (layout, nrhs), (dl_, d_, du_, b, info) in cases.items()])
    assert_success(results, *(case[-1] for case in cases.values()))
    for layout in LAYOUTS:
        *without, b, _ = cases[layout, 0]
        *with_one, _, _ = cases[layout, 1]
        np.testing.assert_array_equal(b, sentinel(dtype))
        for factored, expected in zip(without, with_one):
            np.testing.assert_array_equal(factored, expected)


def test_gtsv_perturbed(dtype, random_matrix, assert_close, capi):
    """Diagonally dominant systems with 1 and 3 right-hand sides solved as np.linalg.solve
    does (dl[0] and du[n-1] NaN, never read), and a singular system (a zero first column and
    a zero row) solved without error to finite values; dl, d and du are left as they were."""
    n = 5
    cases = []
    for layout, nrhs, singular in itertools.product(LAYOUTS, (1, 3), (False, True)):
        dl, du = random_matrix((BATCH, n), dtype), random_matrix((BATCH, n), dtype)
        d = random_matrix((BATCH, n), dtype) + np.array(4, dtype)
        if singular:
            d[0, 0] = dl[0, 1] = 0  # first column zero
            dl[1, 2] = d[1, 2] = du[1, 2] = 0  # third row zero
        dl[:, 0] = du[:, -1] = np.nan
        b = random_matrix((BATCH, n, nrhs), dtype)
        cases.append((singular, tridiagonal_matrix(dl, d, du), b, dl, d, du,
                      (dl.copy(), d.copy(), du.copy()), Strided.of(b, layout)))
    results = capi([c_call("gtsv_perturbed", dtype, layout=buf.layout, batch=BATCH, n=n,
                           nrhs=b.shape[2], dl=dl, d=d, du=du, b=buf.raw, ldb=buf.ld)
                    for _, _, b, dl, d, du, _, buf in cases])
    assert_success(results)
    for singular, matrix, b, dl, d, du, before, buf in cases:
        if singular:
            assert np.all(np.isfinite(buf.matrices)), buf.matrices
        else:
            assert_close(buf.matrices, np.linalg.solve(matrix, b), dtype, kind="reconstruct")
        for diagonal, saved in zip((dl, d, du), before):
            np.testing.assert_array_equal(diagonal, saved)
        assert_padding_untouched(buf)


def random_csr(random_matrix, rows, cols, density, dtype, rng):
    """A scipy CSR matrix with about `density` of its entries stored (rows left empty too)."""
    dense = random_matrix((rows, cols), dtype)
    dense[rng.random((rows, cols)) >= density] = 0
    dense[1] = 0
    matrix = scipy.sparse.csr_matrix(dense)
    matrix.indptr = matrix.indptr.astype(np.int32)
    matrix.indices = matrix.indices.astype(np.int32)
    return matrix


def test_csrmm(dtype, random_matrix, rng, assert_close, capi):
    """Sparse times dense for 1 and 4 dense columns, with unsorted column indices and an
    explicitly stored zero, as scipy.sparse computes it; the inputs are left as they were."""
    rows, cols = 6, 5
    cases = []
    for n in (1, 4):
        matrix = random_csr(random_matrix, rows, cols, 0.5, dtype, rng)
        data, indices = matrix.data.copy(), matrix.indices.copy()
        start, end = matrix.indptr[0], matrix.indptr[1]
        data[start:end], indices[start:end] = data[start:end][::-1], indices[start:end][::-1]
        data, indptr = np.append(data, np.zeros(1, dtype)), matrix.indptr.copy()
        indices = np.append(indices, np.int32(cols - 1))
        indptr[-1] += 1  # the explicit zero ends the last row
        rhs = random_matrix((cols, n), dtype)
        saved = (data.copy(), indptr.copy(), indices.copy(), rhs.copy())
        cases.append((matrix, data, indptr, indices, rhs, saved, output((rows, n), dtype)))
    results = capi([c_call("csrmm", dtype, rows=rows, cols=cols, nnz=len(data), data=data,
                           indptr=indptr, indices=indices, n=rhs.shape[1], rhs=rhs, out=out)
                    for _, data, indptr, indices, rhs, _, out in cases])
    assert_success(results)
    for matrix, data, indptr, indices, rhs, saved, out in cases:
        assert_close(out, matrix @ rhs, dtype, kind="reconstruct")
        for array, before in zip((data, indptr, indices, rhs), saved):
            np.testing.assert_array_equal(array, before)


def test_csrmm_bad_indices(capi):
    """A column index out of range or decreasing row offsets are an error naming the problem,
    and `out` is left as it was."""
    data, rhs = np.ones(2), np.ones((3, 2))
    cases = [(np.array([0, 1, 2], np.int32), np.array([0, 3], np.int32), "column indices"),
             (np.array([0, 2, 1], np.int32), np.array([0, 1], np.int32), "row offsets")]
    outs = [output((2, 2), np.float64) for _ in cases]
    results = capi([c_call("csrmm", np.float64, rows=2, cols=3, nnz=2, data=data,
                           indptr=indptr, indices=indices, n=2, rhs=rhs, out=out)
                    for (indptr, indices, _), out in zip(cases, outs)])
    for (_, _, message), (rc, error), out in zip(cases, results, outs):
        assert rc == -1 and message in error, (message, rc, error)
        np.testing.assert_array_equal(out, sentinel(np.float64))


def test_lapack_info_is_reported(dtype, random_matrix, capi):
    """A singular matrix (getrf), a non-positive-definite one (potrf), a singular tridiagonal
    system (gtsv) and a matrix with Inf (geev) are LAPACK's (or ferrax's) info, not failures:
    first of each batch bad, second fine."""
    singular = random_matrix((BATCH, 4, 4), dtype)
    singular[0, :, 1] = 0  # U[1, 1] comes out exactly zero: info 2
    not_spd = spd(random_matrix, (BATCH, 4, 4), dtype)
    not_spd[0, 2, 2] = -100  # the leading 3 x 3 minor is not positive definite: info 3
    infinite = random_matrix((BATCH, 4, 4), dtype)
    infinite[0, 1, 2] = np.inf  # geev's documented info -4
    calls, infos = [], []
    for layout in LAYOUTS:
        lu, chol = Strided.of(singular, layout), Strided.of(not_spd, layout)
        eig = Strided.of(infinite, layout)
        b = Strided.of(random_matrix((BATCH, 4, 1), dtype), layout)
        dl, d, du = (random_matrix((BATCH, 4), dtype) for _ in range(3))
        d[0, 0] = dl[0, 1] = 0  # first column zero: no pivot, info 1
        getrf_info, potrf_info, gtsv_info, geev_info = (output(BATCH, np.int32)
                                                        for _ in range(4))
        calls += [c_call("getrf", dtype, layout=layout, batch=BATCH, m=4, n=4, a=lu.raw,
                         lda=lu.ld, ipiv=output((BATCH, 4), np.int32), info=getrf_info),
                  c_call("potrf", dtype, layout=layout, batch=BATCH, uplo="L", n=4, a=chol.raw,
                         lda=chol.ld, info=potrf_info),
                  c_call("gtsv", dtype, layout=layout, batch=BATCH, n=4, nrhs=1, dl=dl, d=d,
                         du=du, b=b.raw, ldb=b.ld, info=gtsv_info),
                  c_call("geev", dtype, layout=layout, batch=BATCH, jobvl="N", jobvr="V", n=4,
                         a=eig.raw, lda=eig.ld, w=output((BATCH, 4), complex_of(dtype)),
                         vl=None, ldvl=1, vr=output(BATCH * 16, complex_of(dtype)), ldvr=4,
                         info=geev_info)]
        infos += [(getrf_info, [2, 0]), (potrf_info, [3, 0]), (gtsv_info, [1, 0]),
                  (geev_info, [-4, 0])]
    assert_success(capi(calls))
    for info, expected in infos:
        np.testing.assert_array_equal(info, expected)


# Flags that make each op's generic call valid.
_FLAGS = {"potrf": {"uplo": "L"}, "trsm": {"side": "L", "uplo": "L", "trans": "N", "diag": "N"},
          "gesdd": {"jobz": "A"}, "syevd": {"jobz": "V", "uplo": "L"}, "sytrd": {"uplo": "L"},
          "gesvd": {"jobz": "A"}, "geev": {"jobvl": "V", "jobvr": "V"}, "gees": {"jobvs": "V"},
          "ormqr": {"side": "L", "trans": "N"}}
_LEADING = {"lda": "a", "ldb": "b", "ldc": "c", "ldu": "u", "ldvt": "vt", "ldvl": "vl",
            "ldvr": "vr", "ldvs": "vs"}
_SIZES = ("batch", "m", "n", "k", "nrhs", "rows", "cols", "nnz")


def generic_args(op, dtype, batch, dim) -> dict:
    """A valid call of `op` on `batch` dim x dim problems (every dimension `dim`, every leading
    dimension minimal, column-major), each pointer a SENTINEL-filled buffer big enough. An op
    without a batch (csrmm) has no rows for an empty batch; its call is valid only up to the
    contents of its index arrays (which the argument checks precede)."""
    args = {}
    for ctype, name in parameters(op):
        if ctype.endswith("*"):
            args[name] = np.full(64, sentinel(pointee(ctype, dtype)))
        elif name in _LEADING:
            args[name] = max(dim, 1)
        elif ctype == "char":
            args[name] = _FLAGS[op][name]
        else:
            args[name] = {"layout": COL, "batch": batch, "ilo": 1,
                          "rows": dim if batch else 0}.get(name, dim)
    return args


def test_empty_calls_touch_nothing(capi):
    """batch = 0 and zero dimensions succeed for every function and write nothing but info
    (0 for each matrix); null pointers are fine when there is nothing to point at."""
    calls, untouched, infos = [], [], []
    for op, dtype in itertools.product(PROTOTYPES, _TYPE_LETTER):
        for layout, (batch, dim) in itertools.product(LAYOUTS, ((0, 2), (BATCH, 0))):
            args = generic_args(op, dtype, batch, dim)
            if "layout" in args:
                args["layout"] = layout
            calls.append(c_call(op, dtype, **args))
            for name, value in args.items():
                if name == "info":
                    infos.append(value[:batch])
                    untouched.append(value[batch:])
                elif isinstance(value, np.ndarray):
                    untouched.append(value)
        nothing = generic_args(op, dtype, 0, 2)
        calls.append(c_call(op, dtype, **{name: None if isinstance(value, np.ndarray) else value
                                          for name, value in nothing.items()}))
    assert_success(capi(calls), *infos)
    for buffer in untouched:
        np.testing.assert_array_equal(buffer, sentinel(buffer.dtype))


def test_empty_batches_of_huge_extents(capi):
    """Extents whose product is past 64 bits, made empty by one zero extent, with null
    pointers (a fuzz finding: ormqr with k = 0 multiplied batch x m unchecked): every call
    returns, succeeding or failing with a message, and the process lives."""
    huge = {"batch": 2**62, **{name: 2**31 - 1 for name in _SIZES if name != "batch"},
            **{name: 2**31 - 1 for name in _LEADING}}
    calls = []
    for op, dtype in itertools.product(PROTOTYPES, _TYPE_LETTER):
        sizes = [name for _, name in parameters(op) if name in _SIZES]
        for zero in sizes:
            args = {name: None if ctype.endswith("*") else huge.get(name)
                    for ctype, name in parameters(op)}
            args |= {name: value for name, value in generic_args(op, dtype, 1, 1).items()
                     if not isinstance(value, np.ndarray) and name not in huge}
            args[zero] = 0
            calls.append(c_call(op, dtype, **args))
    results = capi(calls)
    assert len(results) == len(calls)
    for call, (rc, error) in zip(calls, results):
        assert rc == 0 or (rc == -1 and error and "internal error" not in error), \
            (call[0], rc, error)


def invalid_calls(op, dtype):
    """(call, what its message must say, its arguments) for each invalid argument of `op`,
    one at a time."""
    valid = generic_args(op, dtype, BATCH, 2)
    cases = []
    if "layout" in valid:
        cases.append((valid | {"layout": 0}, "layout = 0: expected FERRAX_ROW_MAJOR (101) or "
                                             "FERRAX_COL_MAJOR (102)"))
    for ctype, name in parameters(op):
        if ctype.endswith("*"):
            cases.append((valid | {name: None}, f"{name} is null"))
        elif name in _LEADING:
            cases.append((valid | {name: 1}, f"leading dimension of {_LEADING[name]} = 1: "
                                             "expected >= 2"))
        elif name in _SIZES:
            cases.append((valid | {name: -1}, f"{name} = -1: expected >= 0"))
        elif name == "ihi":  # and ilo: 1 <= ilo <= max(1, n), min(ilo, n) <= ihi <= n = 2
            cases += [(valid | {"ilo": 0}, "ilo = 0: expected 1 <= ilo <= max(1, n) = 2"),
                      (valid | {"ilo": 3}, "ilo = 3: expected 1 <= ilo <= max(1, n) = 2"),
                      (valid | {"ilo": 2, "ihi": 1},
                       "ihi = 1: expected min(ilo, n) = 2 <= ihi <= n = 2"),
                      (valid | {"ihi": 3}, "ihi = 3: expected min(ilo, n) = 1 <= ihi <= n = 2")]
        elif ctype == "char":
            cases.append((valid | {name: "X"}, "expected one of"))
    return [(c_call(op, dtype, **args), message, args) for args, message in cases]


def test_invalid_arguments(capi):
    """Every function: a bad layout, too small leading dimensions, negative sizes, null
    pointers where data is needed and unknown flags return -1 with a message saying so, and
    touch no buffer."""
    cases = [case for op, dtype in itertools.product(PROTOTYPES, _TYPE_LETTER)
             for case in invalid_calls(op, dtype)]
    results = capi([call for call, _, _ in cases])
    for (call, message, args), (rc, error) in zip(cases, results):
        assert rc == -1 and message in error, (call[0], message, rc, error)
        for value in args.values():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, sentinel(value.dtype), err_msg=call[0])


def test_concurrent_calls_match_calls_alone(capi, rng):
    """8 threads at once, each making every function's calls (a valid one on random 3 x 3
    problems in batches of 4, and an invalid one; all but csrmm) 3 times in its own order: every
    result is bit for bit that of the call made alone, and every message is the calling
    thread's own (``ferrax_last_error`` while the other threads fail with other messages)."""
    calls = []
    for op, dtype in itertools.product(PROTOTYPES, _TYPE_LETTER):
        if op == "csrmm":  # its index arrays would need a valid CSR structure
            continue
        args = generic_args(op, dtype, 4, 3)
        for name, value in args.items():
            if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
                random = rng.standard_normal(value.shape + (2,)).astype(np.float64)
                value[...] = random[..., 0] + (1j * random[..., 1] if value.dtype.kind == "c"
                                                else 0)
            elif isinstance(value, np.ndarray):
                value[...] = 0
        calls.append(c_call(op, dtype, **args))
        # Each function its own kind of mistake, for messages that differ across the set.
        invalid = invalid_calls(op, dtype)
        calls.append(invalid[len(calls) % len(invalid)][0])
    results, made, differences = capi(calls, threads=8, rounds=3)
    assert made == 8 * 3 * len(calls)
    assert not differences, differences
    # The set mixes successes and failures with distinct messages, so a message read from
    # another thread would show as a difference.
    assert sum(rc == 0 for rc, _ in results) >= len(calls) // 3
    assert len({message for rc, message in results if rc}) >= 10
