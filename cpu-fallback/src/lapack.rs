//! Typed, scalar-generic access to the table: `T::getrf()?` gives the right routine for `T`.
//!
//! Signatures are SciPy's `cython_lapack` / `cython_blas` ones: LP64 integers, every argument
//! by pointer, no hidden Fortran string lengths. `T` is the matrix scalar and `Self::Real`
//! its real counterpart [`Real<T>`] (singular values, eigenvalues, complex routines' real workspace).

use crate::table::{get, Missing};
use num_complex::Complex;

/// LAPACK's integer in the LP64 interface that SciPy and scipy-openblas32 use.
pub type LapackInt = i32;

type I = LapackInt;
/// The real counterpart of a LAPACK scalar.
pub type Real<T> = <T as Lapack>::Real;

macro_rules! families {
    ($(
        $(#[$doc:meta])*
        $method:ident: $family:ident<$T:ident>($($arg:ident: $ty:ty),* $(,)?)
            = [$f32:literal, $f64:literal, $c64:literal, $c128:literal];
    )*) => {
        /// Every routine the handlers call, by LAPACK/BLAS name (lower case, no underscore).
        pub const ROUTINES: [&str; 4 * [$(stringify!($family)),*].len()] = [$($f32, $f64, $c64, $c128),*];

        $(
            $(#[$doc])*
            pub type $family<$T> = unsafe extern "C" fn($($arg: $ty),*);
        )*

        /// Scalars LAPACK works on (s, d, c, z), with their routines looked up in the table.
        pub trait Lapack: Copy + Send + Sync + 'static {
            type Real: Copy + Send + Sync + 'static;
            $(fn $method() -> Result<$family<Self>, Missing>;)*
        }

        families!(@impl f32, f32, 0, $($method $family [$f32, $f64, $c64, $c128])*);
        families!(@impl f64, f64, 1, $($method $family [$f32, $f64, $c64, $c128])*);
        families!(@impl Complex<f32>, f32, 2, $($method $family [$f32, $f64, $c64, $c128])*);
        families!(@impl Complex<f64>, f64, 3, $($method $family [$f32, $f64, $c64, $c128])*);
    };
    (@impl $t:ty, $real:ty, $index:tt, $($method:ident $family:ident [$($name:literal),*])*) => {
        impl Lapack for $t {
            type Real = $real;
            $(
                fn $method() -> Result<$family<Self>, Missing> {
                    let name = [$($name),*][$index];
                    // SAFETY: the slot holds this routine for this scalar (see `register`).
                    get(name).map(|p| unsafe {
                        std::mem::transmute::<*mut std::ffi::c_void, $family<Self>>(p)
                    })
                }
            )*
        }
    };
}

families! {
    /// `?getrf`: LU with partial pivoting.
    getrf: Getrf<T>(m: *const I, n: *const I, a: *mut T, lda: *const I, ipiv: *mut I, info: *mut I)
        = ["sgetrf", "dgetrf", "cgetrf", "zgetrf"];
}
