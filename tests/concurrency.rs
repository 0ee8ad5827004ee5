//! Eight threads call eight different C ABI functions at once, over and over, on the C ABI's
//! one shared pool: every result must be bit-identical to the same call made alone, and each
//! thread's `ferrax_last_error()` must hold its own failure, whatever the others fail with.
//! (The XLA side of the same check is tests/test_concurrency.py, under real XLA.)
//!
//! Needs LAPACK (FERRAX_TEST_LAPACK, set by scripts/test).

use std::ffi::{c_char, c_int};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

#[path = "common/capi.rs"]
mod capi;
#[path = "common/rng.rs"]
mod rng;
use capi::*;
use num_complex::Complex;
use rng::Rng;

const ROW: c_int = 101;
const COL: c_int = 102;
type C64 = Complex<f64>;

/// Rounds of each thread's call.
const ROUNDS: usize = 200;

/// One C ABI function on fixed inputs.
struct Case {
    function: &'static str,
    /// Random values the call's inputs are built from.
    inputs: usize,
    /// Runs the call on inputs built from the values; returns every output's bits.
    run: fn(&[f64]) -> Vec<u64>,
    /// The same function with an invalid argument (the call must return -1).
    invalid: fn() -> c_int,
}

fn bits(values: &[f64]) -> impl Iterator<Item = u64> + '_ {
    values.iter().map(|v| v.to_bits())
}

fn complex_bits(values: &[C64]) -> impl Iterator<Item = u64> + '_ {
    values.iter().flat_map(|v| [v.re.to_bits(), v.im.to_bits()])
}

fn int_bits(values: &[i32]) -> impl Iterator<Item = u64> + '_ {
    values.iter().map(|&v| v as u32 as u64)
}

fn complex(values: &[f64]) -> Vec<C64> {
    values.chunks(2).map(|p| C64::new(p[0], p[1])).collect()
}

#[track_caller]
fn succeeded(function: &str, rc: c_int) {
    assert_eq!(rc, 0, "{function}: {}", last_error());
}

// SAFETY (every call below): each array holds what the function reads and writes for the
// batch, dimensions and leading dimensions it is given.
const CASES: &[Case] = &[
    Case {
        function: "ferrax_dgetrf",
        inputs: 16 * 24 * 24,
        run: |values| {
            let (b, n) = (16, 24);
            let mut a = values.to_vec();
            let (mut ipiv, mut info) = (vec![0; b * n], vec![0; b]);
            let rc = unsafe {
                ferrax_dgetrf(
                    COL,
                    b as i64,
                    24,
                    24,
                    a.as_mut_ptr(),
                    24,
                    ipiv.as_mut_ptr(),
                    info.as_mut_ptr(),
                )
            };
            succeeded("ferrax_dgetrf", rc);
            bits(&a)
                .chain(int_bits(&ipiv))
                .chain(int_bits(&info))
                .collect()
        },
        invalid: || unsafe { ferrax_dgetrf(COL, 1, -1, 4, null_mut(), 4, null_mut(), null_mut()) },
    },
    Case {
        function: "ferrax_zgetrf",
        inputs: 2 * 8 * 20 * 20,
        run: |values| {
            let (b, n) = (8, 20);
            let mut a = complex(values);
            let (mut ipiv, mut info) = (vec![0; b * n], vec![0; b]);
            let rc = unsafe {
                ferrax_zgetrf(
                    ROW,
                    b as i64,
                    20,
                    20,
                    a.as_mut_ptr(),
                    20,
                    ipiv.as_mut_ptr(),
                    info.as_mut_ptr(),
                )
            };
            succeeded("ferrax_zgetrf", rc);
            complex_bits(&a)
                .chain(int_bits(&ipiv))
                .chain(int_bits(&info))
                .collect()
        },
        invalid: || unsafe { ferrax_zgetrf(ROW, -2, 4, 4, null_mut(), 4, null_mut(), null_mut()) },
    },
    Case {
        function: "ferrax_dpotrf",
        inputs: 16 * 32 * 32,
        run: |values| {
            let (b, n) = (16, 32);
            // M M^T + n I: symmetric positive definite.
            let mut a = vec![0.0; b * n * n];
            for (m, spd) in values.chunks(n * n).zip(a.chunks_mut(n * n)) {
                for i in 0..n {
                    for j in 0..n {
                        let dot: f64 = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum();
                        spd[i * n + j] = dot + if i == j { n as f64 } else { 0.0 };
                    }
                }
            }
            let mut info = vec![0; b];
            let rc = unsafe {
                ferrax_dpotrf(
                    COL,
                    b as i64,
                    b'L' as c_char,
                    32,
                    a.as_mut_ptr(),
                    32,
                    info.as_mut_ptr(),
                )
            };
            succeeded("ferrax_dpotrf", rc);
            assert!(info.iter().all(|&i| i == 0), "{info:?}");
            bits(&a).chain(int_bits(&info)).collect()
        },
        invalid: || unsafe { ferrax_dpotrf(COL, 1, b'X' as c_char, 4, null_mut(), 4, null_mut()) },
    },
    Case {
        function: "ferrax_dgeqrf",
        inputs: 8 * 30 * 20,
        run: |values| {
            let b = 8;
            let mut a = values.to_vec();
            let mut tau = vec![0.0; b * 20];
            let rc = unsafe {
                ferrax_dgeqrf(COL, b as i64, 30, 20, a.as_mut_ptr(), 30, tau.as_mut_ptr())
            };
            succeeded("ferrax_dgeqrf", rc);
            bits(&a).chain(bits(&tau)).collect()
        },
        invalid: || unsafe { ferrax_dgeqrf(COL, 1, 4, 4, null_mut(), 2, null_mut()) },
    },
    Case {
        function: "ferrax_dgesdd",
        inputs: 4 * 24 * 16,
        run: |values| {
            let (b, m, n) = (4, 24, 16);
            let mut a = values.to_vec();
            let (mut s, mut u, mut vt) =
                (vec![0.0; b * n], vec![0.0; b * m * n], vec![0.0; b * n * n]);
            let mut info = vec![0; b];
            let rc = unsafe {
                ferrax_dgesdd(
                    COL,
                    b as i64,
                    b'S' as c_char,
                    24,
                    16,
                    a.as_mut_ptr(),
                    24,
                    s.as_mut_ptr(),
                    u.as_mut_ptr(),
                    24,
                    vt.as_mut_ptr(),
                    16,
                    info.as_mut_ptr(),
                )
            };
            succeeded("ferrax_dgesdd", rc);
            bits(&s)
                .chain(bits(&u))
                .chain(bits(&vt))
                .chain(int_bits(&info))
                .collect()
        },
        invalid: || unsafe {
            ferrax_dgesdd(
                COL,
                1,
                b'Q' as c_char,
                4,
                4,
                null_mut(),
                4,
                null_mut(),
                null_mut(),
                4,
                null_mut(),
                4,
                null_mut(),
            )
        },
    },
    Case {
        function: "ferrax_zheevd",
        inputs: 2 * 4 * 24 * 24,
        run: |values| {
            let (b, n) = (4, 24);
            let mut a = complex(values);
            let (mut w, mut info) = (vec![0.0; b * n], vec![0; b]);
            let rc = unsafe {
                ferrax_zheevd(
                    ROW,
                    b as i64,
                    b'V' as c_char,
                    b'L' as c_char,
                    24,
                    a.as_mut_ptr(),
                    24,
                    w.as_mut_ptr(),
                    info.as_mut_ptr(),
                )
            };
            succeeded("ferrax_zheevd", rc);
            complex_bits(&a)
                .chain(bits(&w))
                .chain(int_bits(&info))
                .collect()
        },
        invalid: || unsafe {
            ferrax_zheevd(
                ROW,
                1,
                b'V' as c_char,
                b'L' as c_char,
                -3,
                null_mut(),
                1,
                null_mut(),
                null_mut(),
            )
        },
    },
    Case {
        function: "ferrax_dgeev",
        inputs: 4 * 16 * 16,
        run: |values| {
            let (b, n) = (4, 16);
            let mut a = values.to_vec();
            let mut w = vec![C64::default(); b * n];
            let (mut vl, mut vr) = (
                vec![C64::default(); b * n * n],
                vec![C64::default(); b * n * n],
            );
            let mut info = vec![0; b];
            let rc = unsafe {
                ferrax_dgeev(
                    COL,
                    b as i64,
                    b'N' as c_char,
                    b'V' as c_char,
                    16,
                    a.as_mut_ptr(),
                    16,
                    w.as_mut_ptr(),
                    vl.as_mut_ptr(),
                    16,
                    vr.as_mut_ptr(),
                    16,
                    info.as_mut_ptr(),
                )
            };
            succeeded("ferrax_dgeev", rc);
            complex_bits(&w)
                .chain(complex_bits(&vr))
                .chain(int_bits(&info))
                .collect()
        },
        invalid: || unsafe {
            ferrax_dgeev(
                7,
                1,
                b'N' as c_char,
                b'V' as c_char,
                4,
                null_mut(),
                4,
                null_mut(),
                null_mut(),
                4,
                null_mut(),
                4,
                null_mut(),
            )
        },
    },
    Case {
        function: "ferrax_dtrsm",
        inputs: 8 * 24 * 24 + 8 * 24 * 8,
        run: |values| {
            let (b, m) = (8, 24);
            let (lower, rhs) = values.split_at(b * m * m);
            // Lower triangular with a dominant diagonal: well conditioned.
            let mut a = lower.to_vec();
            for t in a.chunks_mut(m * m) {
                for j in 0..m {
                    t[j * m + j] += m as f64;
                }
            }
            let mut x = rhs.to_vec();
            let rc = unsafe {
                ferrax_dtrsm(
                    COL,
                    b as i64,
                    b'L' as c_char,
                    b'L' as c_char,
                    b'N' as c_char,
                    b'N' as c_char,
                    24,
                    8,
                    a.as_ptr(),
                    24,
                    x.as_mut_ptr(),
                    24,
                )
            };
            succeeded("ferrax_dtrsm", rc);
            bits(&x).collect()
        },
        invalid: || unsafe {
            let c = |f: u8| f as c_char;
            ferrax_dtrsm(
                COL,
                1,
                c(b'L'),
                c(b'L'),
                c(b'N'),
                c(b'N'),
                4,
                4,
                null(),
                1,
                null_mut(),
                4,
            )
        },
    },
];

#[track_caller]
fn assert_own_failure(case: &Case) {
    let message = last_error();
    assert!(
        message.starts_with(&format!("{}: ", case.function)),
        "{}'s thread reads another's message: {message:?}",
        case.function
    );
}

#[test]
fn eight_threads_running_different_functions_match_each_run_alone() {
    load_lapack();
    let mut rng = Rng::fresh("concurrency");
    let inputs: Vec<Vec<f64>> = CASES
        .iter()
        .map(|case| (0..case.inputs).map(|_| rng.uniform()).collect())
        .collect();
    // Alone: one call at a time, on this thread.
    let alone: Vec<Vec<u64>> = CASES
        .iter()
        .zip(&inputs)
        .map(|(case, x)| (case.run)(x))
        .collect();
    for case in CASES {
        assert_eq!(
            (case.invalid)(),
            -1,
            "{} accepted its invalid call",
            case.function
        );
        assert_own_failure(case);
    }

    let calls = AtomicUsize::new(0);
    let start = Barrier::new(CASES.len());
    std::thread::scope(|scope| {
        for ((case, x), expected) in CASES.iter().zip(&inputs).zip(&alone) {
            let (calls, start) = (&calls, &start);
            scope.spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    // Alternate failing and succeeding first: a success must not clear the
                    // message, and the other threads' failures must not reach it.
                    if round % 2 == 0 {
                        assert_eq!((case.invalid)(), -1, "{}", case.function);
                    }
                    let got = (case.run)(x);
                    assert!(
                        got == *expected,
                        "{} round {round}: {} of {} output words differ from the call alone",
                        case.function,
                        got.iter().zip(expected).filter(|(g, e)| g != e).count(),
                        expected.len()
                    );
                    assert_own_failure(case);
                    calls.fetch_add(1 + usize::from(round % 2 == 0), Ordering::Relaxed);
                }
            });
        }
    });
    let calls = calls.into_inner();
    assert_eq!(calls, CASES.len() * (ROUNDS + ROUNDS / 2));
    eprintln!(
        "concurrency: {calls} C ABI calls on {} threads",
        CASES.len()
    );
}
