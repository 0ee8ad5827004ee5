//! Sizes that cannot be met are errors, not aborts: each C ABI family gets one order whose
//! staging copy cannot be allocated (a row-major 2^20 × 2^20 f64 matrix, 8 TiB, which LAPACK
//! needs column-major), in memory that is only reserved, never touched; and batches whose
//! byte size is past the address space. Every call must return -1 with a message naming the
//! function and what could not be had, and the process must live to check it.
//!
//! Needs LAPACK (FERRAX_TEST_LAPACK, set by scripts/test), since the staging happens on the
//! LAPACK paths, and the kernel's default overcommit heuristic (or none), under which an
//! allocation larger than the machine's memory fails at once.

use std::ffi::{c_char, c_int};
use std::ptr::{null, null_mut};

#[path = "common/capi.rs"]
mod capi;
#[path = "common/reserved.rs"]
mod reserved;
use capi::*;
use num_complex::Complex;
use reserved::{resident_kib, Reserved};

const ROW: c_int = 101;
const COL: c_int = 102;
type C64 = Complex<f64>;

/// Asserts that `rc` is a failure whose message names `function` and every fragment.
#[track_caller]
fn assert_refused(function: &str, rc: c_int, fragments: &[&str]) {
    let message = last_error();
    assert_eq!(rc, -1, "{function} returned {rc} ({message})");
    assert!(
        message.starts_with(&format!("{function}: ")),
        "{function}: {message}"
    );
    for fragment in fragments {
        assert!(
            message.contains(fragment),
            "{function}: {message:?} lacks {fragment:?}"
        );
    }
}

#[test]
fn orders_whose_staging_cannot_be_allocated_are_errors() {
    if !reserved::allocations_past_memory_fail() {
        return;
    }
    load_lapack();
    const N: i32 = 1 << 20;
    let n = N as usize;
    let cannot = "cannot allocate 8796093022208 bytes";
    // The matrices, in reserved address space; the vector outputs are real and small.
    let (a, b) = (Reserved::new(n * n * 8), Reserved::new(n * n * 8));
    let (mut v1, mut v2, mut v3) = (vec![0.0f64; n], vec![0.0f64; n], vec![0.0f64; n]);
    let mut w = vec![C64::default(); n];
    let (mut ipiv, mut info) = (vec![0i32; n], [0i32; 1]);
    let before = resident_kib();
    let (a, x) = (a.at::<f64>(), b.at::<f64>());
    // SAFETY (every call): the arrays have the sizes each function reads and writes.
    unsafe {
        let (v1, v2, v3) = (v1.as_mut_ptr(), v2.as_mut_ptr(), v3.as_mut_ptr());
        let (ipiv, info) = (ipiv.as_mut_ptr(), info.as_mut_ptr());
        assert_refused(
            "ferrax_dgetrf",
            ferrax_dgetrf(ROW, 1, N, N, a, N, ipiv, info),
            &[cannot],
        );
        assert_refused(
            "ferrax_dgeqrf",
            ferrax_dgeqrf(ROW, 1, N, N, a, N, v1),
            &[cannot],
        );
        assert_refused(
            "ferrax_dorgqr",
            ferrax_dorgqr(ROW, 1, N, N, N, a, N, v1),
            &[cannot],
        );
        assert_refused(
            "ferrax_dtrsm",
            ferrax_dtrsm(
                ROW,
                1,
                b'L' as c_char,
                b'L' as c_char,
                b'N' as c_char,
                b'N' as c_char,
                N,
                N,
                a,
                N,
                x,
                N,
            ),
            &[cannot],
        );
        assert_refused(
            "ferrax_dgesdd",
            ferrax_dgesdd(
                ROW,
                1,
                b'N' as c_char,
                N,
                N,
                a,
                N,
                v1,
                null_mut(),
                1,
                null_mut(),
                1,
                info,
            ),
            &[cannot],
        );
        assert_refused(
            "ferrax_dsyevd",
            ferrax_dsyevd(ROW, 1, b'N' as c_char, b'L' as c_char, N, a, N, v1, info),
            &[cannot],
        );
        assert_refused(
            "ferrax_dgehrd",
            ferrax_dgehrd(ROW, 1, N, 1, N, a, N, v1, info),
            &[cannot],
        );
        assert_refused(
            "ferrax_dsytrd",
            ferrax_dsytrd(ROW, 1, b'L' as c_char, N, a, N, v1, v2, v3, info),
            &[cannot],
        );
        assert_refused(
            "ferrax_dgeev",
            ferrax_dgeev(
                ROW,
                1,
                b'N' as c_char,
                b'N' as c_char,
                N,
                a,
                N,
                w.as_mut_ptr(),
                null_mut(),
                1,
                null_mut(),
                1,
                info,
            ),
            &[cannot],
        );
        assert_refused(
            "ferrax_dgees",
            ferrax_dgees(
                ROW,
                1,
                b'N' as c_char,
                N,
                a,
                N,
                w.as_mut_ptr(),
                null_mut(),
                1,
                info,
            ),
            &[cannot],
        );
        assert_refused(
            "ferrax_dgtsv",
            ferrax_dgtsv(ROW, 1, N, N, v1, v2, v3, x, N, info),
            &[cannot],
        );
        // The product is computed aside before it is copied out: `n` columns of 2^20 rows.
        let (indptr, one) = (vec![0i32; n + 1], [0.0f64]);
        let rc = ferrax_dcsrmm(
            N.into(),
            1,
            0,
            one.as_ptr(),
            indptr.as_ptr(),
            null(),
            N.into(),
            x,
            a,
        );
        assert_refused("ferrax_dcsrmm", rc, &[cannot]);
    }
    let grown = resident_kib().saturating_sub(before);
    assert!(
        grown < 1 << 20,
        "the calls touched {grown} KiB of the reserved matrices"
    );
}

#[test]
fn batches_past_the_address_space_are_errors() {
    let (mut a, mut ipiv, mut info) = ([0.0f64; 16], [0i32; 4], [0i32; 1]);
    for batch in [1i64 << 59, 1 << 62, i64::MAX] {
        // SAFETY: the call is refused before it reads or writes anything.
        let rc = unsafe {
            ferrax_dgetrf(
                ROW,
                batch,
                4,
                4,
                a.as_mut_ptr(),
                4,
                ipiv.as_mut_ptr(),
                info.as_mut_ptr(),
            )
        };
        assert_refused(
            "ferrax_dgetrf",
            rc,
            &[
                &format!("a: {batch} x 4 x 4 elements of 8 bytes"),
                "past the address space",
            ],
        );
    }
    assert_eq!(a, [0.0; 16], "a refused call wrote its operand");
}

#[test]
fn huge_batches_of_empty_matrices_return_at_once() {
    // 2^62 matrices of no element: nothing to read, write or walk (found by fuzz/capi, where
    // geqrf walked the whole batch to copy empty matrices).
    let batch = 1i64 << 62;
    let (mut a, mut tau) = ([0.0f64; 4], [0.0f64; 4]);
    let (a, tau) = (a.as_mut_ptr(), tau.as_mut_ptr());
    let start = std::time::Instant::now();
    // SAFETY: every array the calls could touch is empty.
    unsafe {
        assert_eq!(
            ferrax_dgeqrf(ROW, batch, 0, 1, a, 1, tau),
            0,
            "{}",
            last_error()
        );
        assert_eq!(
            ferrax_dgeqrf(COL, batch, 3, 0, a, 3, tau),
            0,
            "{}",
            last_error()
        );
        assert_eq!(
            ferrax_dorgqr(COL, batch, 0, 0, 0, a, 1, tau),
            0,
            "{}",
            last_error()
        );
        let n = b'N' as c_char;
        assert_eq!(
            ferrax_dtrsm(
                ROW,
                batch,
                b'L' as c_char,
                b'L' as c_char,
                n,
                n,
                0,
                5,
                a,
                1,
                tau,
                5
            ),
            0,
            "{}",
            last_error()
        );
        assert_eq!(
            ferrax_dgtsv_perturbed(ROW, batch, 0, 2, a, a, a, tau, 2),
            0,
            "{}",
            last_error()
        );
    }
    assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
}
