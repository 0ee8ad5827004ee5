//! Typed, scalar-generic access to the table: `T::getrf()?` gives the right routine for `T`.

use crate::table::{get, Missing};
use num_complex::Complex;

/// LAPACK's integer in the LP64 interface that SciPy and scipy-openblas32 use.
pub type LapackInt = i32;

/// `?getrf(m, n, a, lda, ipiv, info)`.
pub type Getrf<T> = unsafe extern "C" fn(
    m: *const LapackInt,
    n: *const LapackInt,
    a: *mut T,
    lda: *const LapackInt,
    ipiv: *mut LapackInt,
    info: *mut LapackInt,
);

/// Scalars LAPACK works on (s, d, c, z), with their routines looked up in the table.
pub trait Lapack: Copy + Send + Sync + 'static {
    fn getrf() -> Result<Getrf<Self>, Missing>;
}

macro_rules! lapack_scalar {
    ($t:ty, $getrf:literal) => {
        impl Lapack for $t {
            fn getrf() -> Result<Getrf<Self>, Missing> {
                // SAFETY: the slot holds a `?getrf` with this element type (see `register`).
                get($getrf).map(|p| unsafe { std::mem::transmute::<*mut std::ffi::c_void, Getrf<Self>>(p) })
            }
        }
    };
}

lapack_scalar!(f32, "sgetrf");
lapack_scalar!(f64, "dgetrf");
lapack_scalar!(Complex<f32>, "cgetrf");
lapack_scalar!(Complex<f64>, "zgetrf");
