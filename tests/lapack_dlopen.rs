//! The non-Python LAPACK source: the table is empty until filled, a bad path is a clear error,
//! and after `ferrax_lapack_load_library` of the scipy-openblas32 library (path in
//! FERRAX_TEST_LAPACK, set by scripts/test) every getrf factors random matrices correctly.

#[path = "common/rng.rs"]
mod rng;
use ferrax_cpu_fallback::{Lapack, ROUTINES};
use num_complex::Complex;
use rng::Rng;
use std::ffi::{c_char, c_int, CString};

extern "C" {
    fn ferrax_lapack_load_library(
        path: *const c_char,
        error: *mut c_char,
        error_len: usize,
    ) -> c_int;
    fn ferrax_lapack_missing_count() -> usize;
}

// The exported symbols live in the ferrax rlib; naming the crate keeps it linked.
use ferrax as _;

fn load(path: &str) -> Result<c_int, String> {
    let path = CString::new(path).unwrap();
    let mut error = [0 as c_char; 256];
    let found =
        unsafe { ferrax_lapack_load_library(path.as_ptr(), error.as_mut_ptr(), error.len()) };
    if found < 0 {
        Err(unsafe { std::ffi::CStr::from_ptr(error.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    } else {
        Ok(found)
    }
}

/// Scalars built from random parts, with the arithmetic the check needs.
trait TestScalar: Lapack + Copy + Default + std::ops::Mul<Output = Self> + std::ops::AddAssign {
    fn random(next: &mut impl FnMut() -> f64) -> Self;
    fn abs(self) -> f64;
    fn sub(self, other: Self) -> Self;
    fn one() -> Self;
    const TOLERANCE: f64;
}

macro_rules! real {
    ($t:ty, $tol:expr) => {
        impl TestScalar for $t {
            fn random(next: &mut impl FnMut() -> f64) -> Self {
                next() as $t
            }
            fn abs(self) -> f64 {
                <$t>::abs(self) as f64
            }
            fn sub(self, other: Self) -> Self {
                self - other
            }
            fn one() -> Self {
                1.0
            }
            const TOLERANCE: f64 = $tol;
        }
    };
}
macro_rules! complex {
    ($t:ty, $tol:expr) => {
        impl TestScalar for Complex<$t> {
            fn random(next: &mut impl FnMut() -> f64) -> Self {
                Complex::new(next() as $t, next() as $t)
            }
            fn abs(self) -> f64 {
                (self.re as f64).hypot(self.im as f64)
            }
            fn sub(self, other: Self) -> Self {
                self - other
            }
            fn one() -> Self {
                Complex::new(1.0, 0.0)
            }
            const TOLERANCE: f64 = $tol;
        }
    };
}
real!(f32, 1e-4);
real!(f64, 1e-12);
complex!(f32, 1e-4);
complex!(f64, 1e-12);

/// Factors a random column-major m×n matrix and checks P·A = L·U.
fn check_getrf<T: TestScalar>(m: usize, n: usize, rng: &mut Rng) {
    let mut next = || rng.uniform();
    let a: Vec<T> = (0..m * n).map(|_| T::random(&mut next)).collect();
    let mut lu = a.clone();
    let k = m.min(n);
    let mut ipiv = vec![0i32; k];
    let mut info = -1;
    let getrf = T::getrf().expect("table filled");
    let (mi, ni, lda) = (m as i32, n as i32, m.max(1) as i32);
    unsafe {
        getrf(
            &mi,
            &ni,
            lu.as_mut_ptr(),
            &lda,
            ipiv.as_mut_ptr(),
            &mut info,
        )
    };
    assert_eq!(info, 0, "random {m}x{n} matrix reported singular");
    // Row permutation from the 1-based swaps.
    let mut rows: Vec<usize> = (0..m).collect();
    for (i, &p) in ipiv.iter().enumerate() {
        rows.swap(i, p as usize - 1);
    }
    let at = |v: &[T], i: usize, j: usize| v[i + j * m];
    for (i, &row) in rows.iter().enumerate() {
        for j in 0..n {
            let mut product = T::default();
            for l in 0..=i.min(j).min(k - 1) {
                let lower = if l == i { T::one() } else { at(&lu, i, l) };
                product += lower * at(&lu, l, j);
            }
            let error = at(&a, row, j).sub(product).abs();
            assert!(
                error < T::TOLERANCE,
                "{m}x{n}: |PA - LU| = {error} at ({i}, {j})"
            );
        }
    }
}

#[test]
fn scipy_openblas32_fills_the_table() {
    // One test, because the table is process-wide and its state is checked in sequence.
    assert_eq!(unsafe { ferrax_lapack_missing_count() }, ROUTINES.len());
    let missing = <f64 as Lapack>::getrf()
        .map(|_| ())
        .expect_err("empty table")
        .to_string();
    assert!(
        missing.contains("dgetrf") && missing.contains("ferrax.register()"),
        "{missing}"
    );

    let error = load("/nonexistent/libnothing.so").unwrap_err();
    assert!(error.contains("/nonexistent/libnothing.so"), "{error}");

    let Ok(path) = std::env::var("FERRAX_TEST_LAPACK") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set FERRAX_TEST_LAPACK (scripts/test does)"
        );
        eprintln!("*** lapack_dlopen skipped: FERRAX_TEST_LAPACK is not set ***");
        return;
    };
    assert_eq!(load(&path), Ok(ROUTINES.len() as c_int));
    assert_eq!(unsafe { ferrax_lapack_missing_count() }, 0);
    let mut rng = Rng::fresh("lapack_dlopen");
    for (m, n) in [(1, 1), (6, 6), (7, 4), (4, 7)] {
        check_getrf::<f32>(m, n, &mut rng);
        check_getrf::<f64>(m, n, &mut rng);
        check_getrf::<Complex<f32>>(m, n, &mut rng);
        check_getrf::<Complex<f64>>(m, n, &mut rng);
    }
}
