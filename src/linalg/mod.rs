//! The CPU computations, one module per op family: typed cores over strided batch views
//! ([`matrix::Batch`]) with an explicit thread pool ([`parallel::Pool`]) and their own
//! scratch. The XLA CPU handlers (`ops::*::cpu`) and the C ABI (`capi`) are thin adapters
//! over them; nothing here knows about either.

pub mod flags;
pub mod matrix;
pub mod parallel;
pub mod transpose;

pub mod bidiag_over_pool;
pub mod coo;
pub mod eig;
pub mod eigh;
pub mod getrf;
pub mod hessenberg;
pub mod lu_solve;
pub mod potrf;
pub mod qr;
pub mod rnn;
pub mod schur;
pub mod sparse;
pub mod spsolve;
pub mod steps_over_pool;
pub mod svd;
pub mod tridiag_over_pool;
pub mod tridiagonal;
pub mod tridiagonal_solve;
pub mod trsm;
pub(crate) mod underflow;
pub mod vector_unit;
pub(crate) mod workers;

use crate::error::{Error, Result};
use crate::ffi::NativeType;
use ferrax_cpu_fallback::Lapack;
use ferrax_kernels::scalar::Scalar as KernelScalar;
use num_complex::Complex;

/// The four LAPACK scalars (f32, f64, c64, c128): LAPACK's routines for them, the Rust
/// small-matrix kernels (whose real type is LAPACK's), and what generic code needs besides.
pub trait LapackScalar:
    NativeType
    + Lapack<Real: NativeType + Default + Into<f64> + ferrax_kernels::scalar::Real>
    + Default
    + KernelScalar<Real = <Self as Lapack>::Real>
    + faer::traits::ComplexField
{
    /// The complex scalar of the same precision (eigenvalues of real matrices are complex).
    type Complex: NativeType + Default + KernelScalar<Real = <Self as Lapack>::Real>;
    /// The real part as f64 (LAPACK reports workspace sizes in the real part of `work[0]`).
    fn real_f64(self) -> f64;
    fn is_finite(self) -> bool;
}

macro_rules! lapack_scalar {
    ($t:ty, $complex:ty, |$x:ident| $re:expr, $finite:expr) => {
        impl LapackScalar for $t {
            type Complex = $complex;
            fn real_f64(self) -> f64 {
                let $x = self;
                $re
            }
            fn is_finite(self) -> bool {
                let $x = self;
                $finite
            }
        }
    };
}
lapack_scalar!(f32, Complex<f32>, |x| x.into(), x.is_finite());
lapack_scalar!(f64, Complex<f64>, |x| x, x.is_finite());
lapack_scalar!(
    Complex<f32>,
    Complex<f32>,
    |x| x.re.into(),
    x.re.is_finite() && x.im.is_finite()
);
lapack_scalar!(
    Complex<f64>,
    Complex<f64>,
    |x| x.re,
    x.re.is_finite() && x.im.is_finite()
);

/// The LAPACK routine for `T`, or an error that says how to fill the table.
pub fn routine<F>(lookup: std::result::Result<F, ferrax_cpu_fallback::Missing>) -> Result<F> {
    lookup.map_err(|missing| Error::failed_precondition(missing.to_string()))
}

/// `value` as LAPACK's 32-bit integer, or an error naming `what` it is.
pub fn lapack_int(what: &str, value: usize) -> Result<i32> {
    api_int("LAPACK's", what, value)
}

/// `value` as the 32-bit integer of `api` (e.g. "LAPACK's"), or an error naming `what` it is.
pub fn api_int(api: &str, what: &str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        Error::invalid_argument(format!(
            "{what} = {value} exceeds {api} 32-bit integer range"
        ))
    })
}

/// LAPACK's optimal `lwork`: `query(work, lwork, info)` must call the routine with the given
/// `lwork` (-1, a workspace query), which writes the size into `work[0]`.
pub fn query_lwork<T: LapackScalar>(
    query: impl FnOnce(*mut T, *const i32, *mut i32),
) -> Result<i32> {
    let (mut work, mut info) = (T::default(), 0);
    query(&mut work, &-1, &mut info);
    if info != 0 {
        return Err(Error::internal(format!(
            "LAPACK workspace query failed with info {info}"
        )));
    }
    // LAPACK wants lwork >= 1 even where it needs no workspace.
    let lwork = work.real_f64().ceil().max(1.0);
    if lwork > f64::from(i32::MAX) {
        return Err(Error::invalid_argument(format!(
            "LAPACK asks for a workspace of {lwork} elements, past its 32-bit integer range"
        )));
    }
    Ok(lwork as i32)
}
