//! The C ABI as a caller in Rust sees it (the signatures of `include/ferrax.h` that the Rust
//! tests and the fuzz targets call), and the LAPACK table filled from FERRAX_TEST_LAPACK.
#![allow(dead_code)] // each test crate calls part of it

use num_complex::Complex;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::Once;

// The exported symbols live in the ferrax rlib; naming the crate keeps it linked.
use ferrax as _;

type C64 = Complex<f64>;

extern "C" {
    pub fn ferrax_lapack_load_library(path: *const c_char, error: *mut c_char, len: usize)
        -> c_int;
    pub fn ferrax_last_error() -> *const c_char;
    pub fn ferrax_dgetrf(
        l: c_int,
        b: i64,
        m: i32,
        n: i32,
        a: *mut f64,
        lda: i32,
        ipiv: *mut i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_zgetrf(
        l: c_int,
        b: i64,
        m: i32,
        n: i32,
        a: *mut C64,
        lda: i32,
        ipiv: *mut i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dpotrf(
        l: c_int,
        b: i64,
        uplo: c_char,
        n: i32,
        a: *mut f64,
        lda: i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dgeqrf(
        l: c_int,
        b: i64,
        m: i32,
        n: i32,
        a: *mut f64,
        lda: i32,
        tau: *mut f64,
    ) -> c_int;
    pub fn ferrax_dorgqr(
        l: c_int,
        b: i64,
        m: i32,
        n: i32,
        k: i32,
        a: *mut f64,
        lda: i32,
        tau: *const f64,
    ) -> c_int;
    pub fn ferrax_dtrsm(
        l: c_int,
        b: i64,
        side: c_char,
        uplo: c_char,
        trans: c_char,
        diag: c_char,
        m: i32,
        n: i32,
        a: *const f64,
        lda: i32,
        x: *mut f64,
        ldb: i32,
    ) -> c_int;
    pub fn ferrax_dgesdd(
        l: c_int,
        b: i64,
        jobz: c_char,
        m: i32,
        n: i32,
        a: *mut f64,
        lda: i32,
        s: *mut f64,
        u: *mut f64,
        ldu: i32,
        vt: *mut f64,
        ldvt: i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_zgesvd(
        l: c_int,
        b: i64,
        jobz: c_char,
        m: i32,
        n: i32,
        a: *mut C64,
        lda: i32,
        s: *mut f64,
        u: *mut C64,
        ldu: i32,
        vt: *mut C64,
        ldvt: i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dsyevd(
        l: c_int,
        b: i64,
        jobz: c_char,
        uplo: c_char,
        n: i32,
        a: *mut f64,
        lda: i32,
        w: *mut f64,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_zheevd(
        l: c_int,
        b: i64,
        jobz: c_char,
        uplo: c_char,
        n: i32,
        a: *mut C64,
        lda: i32,
        w: *mut f64,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dgehrd(
        l: c_int,
        b: i64,
        n: i32,
        ilo: i32,
        ihi: i32,
        a: *mut f64,
        lda: i32,
        tau: *mut f64,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dsytrd(
        l: c_int,
        b: i64,
        uplo: c_char,
        n: i32,
        a: *mut f64,
        lda: i32,
        d: *mut f64,
        e: *mut f64,
        tau: *mut f64,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dgeev(
        l: c_int,
        b: i64,
        jobvl: c_char,
        jobvr: c_char,
        n: i32,
        a: *mut f64,
        lda: i32,
        w: *mut C64,
        vl: *mut C64,
        ldvl: i32,
        vr: *mut C64,
        ldvr: i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dgees(
        l: c_int,
        b: i64,
        jobvs: c_char,
        n: i32,
        a: *mut f64,
        lda: i32,
        w: *mut C64,
        vs: *mut f64,
        ldvs: i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_zgees(
        l: c_int,
        b: i64,
        jobvs: c_char,
        n: i32,
        a: *mut C64,
        lda: i32,
        w: *mut C64,
        vs: *mut C64,
        ldvs: i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dormqr(
        l: c_int,
        b: i64,
        side: c_char,
        trans: c_char,
        m: i32,
        n: i32,
        k: i32,
        a: *const f64,
        lda: i32,
        tau: *const f64,
        c: *mut f64,
        ldc: i32,
    ) -> c_int;
    pub fn ferrax_dgtsv(
        l: c_int,
        b: i64,
        n: i32,
        nrhs: i32,
        dl: *mut f64,
        d: *mut f64,
        du: *mut f64,
        x: *mut f64,
        ldb: i32,
        info: *mut i32,
    ) -> c_int;
    pub fn ferrax_dgtsv_perturbed(
        l: c_int,
        b: i64,
        n: i32,
        nrhs: i32,
        dl: *const f64,
        d: *const f64,
        du: *const f64,
        x: *mut f64,
        ldb: i32,
    ) -> c_int;
    pub fn ferrax_dcsrmm(
        rows: i64,
        cols: i64,
        nnz: i64,
        data: *const f64,
        indptr: *const i32,
        indices: *const i32,
        n: i64,
        rhs: *const f64,
        out: *mut f64,
    ) -> c_int;
}

/// Fills ferrax's LAPACK table from FERRAX_TEST_LAPACK (scripts/test and scripts/fuzz set it),
/// once per process.
pub fn load_lapack() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let path = std::env::var("FERRAX_TEST_LAPACK")
            .expect("FERRAX_TEST_LAPACK: the LAPACK library (scripts/test sets it)");
        let path = CString::new(path).unwrap();
        let mut error = [0 as c_char; 256];
        // SAFETY: a NUL-terminated path and a buffer of the length given.
        let found = unsafe { ferrax_lapack_load_library(path.as_ptr(), error.as_mut_ptr(), 256) };
        assert!(found > 0, "LAPACK: {:?}", unsafe {
            CStr::from_ptr(error.as_ptr())
        });
    });
}

/// The calling thread's last C ABI message.
pub fn last_error() -> String {
    // SAFETY: the library's NUL-terminated, thread-local message.
    unsafe { CStr::from_ptr(ferrax_last_error()) }
        .to_string_lossy()
        .into_owned()
}
