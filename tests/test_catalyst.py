"""The Catalyst-compatible entry points (lapack_<t><op>_ffi) as Catalyst-compiled code calls them.

tests/c/catalyst_check.c, compiled here with the header, dlopens libferrax.so, loads LAPACK
from scipy-openblas32 and calls the entry points with EncodedMemref argument lists laid out as
Catalyst's HloCustomCallPatterns lowering lays them out (attributes, operand sizes, operands;
row-major, batch 2); the buffers it saves are checked here against SciPy and NumPy with
row-major semantics. It also makes invalid calls, which must return with a message.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack

from test_capi import (check_geqrf, check_gesdd, check_getrf, check_orgqr, check_potrf,
                       check_syevd, check_trsm, compile_c, ferrax_path, openblas_path,
                       run_checked, SANITIZER_ENV)

DTYPES = {"f8": "<f8", "c16": "<c16", "i4": "<i4"}


@pytest.fixture(scope="module")
def c_run(tmp_path_factory):
    """(arrays by "<case>.<role>", errors by case: (info[0], output NaN?, message))."""
    tmp = tmp_path_factory.mktemp("catalyst_check")
    program, out = tmp / "catalyst_check", tmp / "out"
    out.mkdir()
    compile_c("tests/c/catalyst_check.c", program, "-lm")
    run_checked([str(program), ferrax_path(), openblas_path(), str(out)],
                env={**os.environ, **SANITIZER_ENV})
    arrays = {}
    for line in (out / "manifest.txt").read_text().splitlines():
        name, dtype, shape = line.split()
        raw = np.fromfile(out / f"{name}.bin", dtype=DTYPES[dtype])
        arrays[name] = raw.reshape(tuple(map(int, shape.split(","))))
    errors = {}
    for line in (out / "errors.txt").read_text().splitlines():
        name, info, nan, message = line.split(" ", 3)
        errors[name] = (int(info), nan == "1", message)
    return arrays, errors


@pytest.fixture
def got(c_run):
    return c_run[0].__getitem__


def test_getrf(got, assert_close):
    for case in ("getrf", "zgetrf"):
        check_getrf(got(f"{case}.a_in"), got(f"{case}.a_out"), got(f"{case}.ipiv"), assert_close)
        np.testing.assert_array_equal(got(f"{case}.info"), 0)


def test_geqrf_orgqr(got, assert_close):
    a, qr, tau = got("qr.a_in"), got("qr.a_out"), got("qr.tau")
    check_geqrf(a, qr, tau, assert_close)
    check_orgqr(qr, tau, got("qr.q"), assert_close)
    check_orgqr(qr[:1], tau[:1], got("qr.q1"), assert_close)  # unbatched tau's argument list


def test_potrf(got, assert_close):
    check_potrf(got("potrf.a_in"), got("potrf.a_out"), "L", assert_close)
    np.testing.assert_array_equal(got("potrf.info"), 0)


def test_trsm(got, assert_close):
    check_trsm(got("trsm.a_in"), got("trsm.b_in"), got("trsm.x"), "LLTN", assert_close)


def test_gesdd(got, assert_close):
    check_gesdd(got("gesdd.a_in"), got("gesdd.s"), got("gesdd.u"), got("gesdd.vt"), assert_close)
    np.testing.assert_array_equal(got("gesdd.info"), 0)


def test_syevd_heevd(got, assert_close):
    for case, uplo in (("syevd", "L"), ("heevd", "U")):
        check_syevd(got(f"{case}.a_in"), got(f"{case}.w"), got(f"{case}.v"), uplo, assert_close)
        np.testing.assert_array_equal(got(f"{case}.info"), 0)


def test_geev(got, assert_close):
    a = got("geev.a_in")
    w = got("geev.wr") + 1j * got("geev.wi")
    np.testing.assert_array_equal(got("geev.info"), 0)
    for x, wx in zip(a, w):
        assert_close(np.sort_complex(wx), np.sort_complex(np.linalg.eigvals(x)), np.float64,
                     kind="reconstruct")
    vl, vr = got("geev.vl"), got("geev.vr")  # eigenvectors are the columns
    ac = a.astype(np.complex128)
    assert_close(ac @ vr, vr * w[:, None, :], np.complex128, kind="reconstruct")
    assert_close(vl.conj().swapaxes(1, 2) @ ac, w[:, :, None] * vl.conj().swapaxes(1, 2),
                 np.complex128, kind="reconstruct")
    za, zw, zvr = got("zgeev.a_in"), got("zgeev.w"), got("zgeev.vr")
    np.testing.assert_array_equal(got("zgeev.info"), 0)
    assert_close(za @ zvr, zvr * zw[:, None, :], np.complex128, kind="reconstruct")


def test_gees(got, assert_close):
    a, t, vs = got("geev.a_in"), got("gees.t"), got("gees.vs")
    np.testing.assert_array_equal(got("gees.info"), 0)
    np.testing.assert_array_equal(got("gees.sdim"), 0)
    assert_close(vs @ t @ vs.swapaxes(1, 2), a, np.float64, kind="reconstruct")
    assert_close(vs.swapaxes(1, 2) @ vs, np.broadcast_to(np.eye(4), a.shape), np.float64,
                 kind="reconstruct")
    np.testing.assert_array_equal(np.tril(t, -2), 0)  # quasi-upper triangular
    w = got("gees.wr") + 1j * got("gees.wi")
    for x, wx in zip(a, w):
        assert_close(np.sort_complex(wx), np.sort_complex(np.linalg.eigvals(x)), np.float64,
                     kind="reconstruct")


def test_gehrd(got, assert_close):
    for x, h, tau, info in zip(got("gehrd.a_in"), got("gehrd.a_out"), got("gehrd.tau"),
                               got("gehrd.info")):
        expected_h, expected_tau, expected_info = scipy.linalg.lapack.dgehrd(x)
        assert info == expected_info == 0
        assert_close(h, expected_h, np.float64)
        assert_close(tau, expected_tau, np.float64)


def test_hetrd(got, assert_close):
    for x, c, d, e, tau, info in zip(*(got(f"hetrd.{r}") for r in
                                       ("a_in", "a_out", "d", "e", "tau", "info"))):
        lwork = scipy.linalg.lapack.zhetrd_lwork(x.shape[0], lower=1)[0]
        expected = scipy.linalg.lapack.zhetrd(x, lower=1, lwork=int(lwork.real))
        assert info == expected[4] == 0
        for actual, wanted in zip((c, d, e, tau), expected[:4]):
            assert_close(actual, wanted, actual.dtype)


def test_invalid_calls_return_with_a_message(c_run):
    errors = c_run[1]
    assert errors.keys() == {"null_entry", "scalar_rank", "bad_flag", "null_lists"}
    assert errors["null_entry"] == (-1, True, "lapack_dgetrf_ffi: data[3] is null")
    info, nan, message = errors["scalar_rank"]
    assert (info, nan) == (0, False)  # sizes unknown: nothing written
    assert message == "lapack_dgetrf_ffi: data[1]: rank 1, expected a scalar (rank 0)"
    info, nan, message = errors["bad_flag"]
    assert (info, nan) == (-1, True)
    assert message.startswith("lapack_dpotrf_ffi: uplo = 88")
    assert errors["null_lists"][2] == "lapack_dgetrf_ffi: data is null"
