//! The table of (name, value) for the limits of ferrax's kernels that callers route by, so
//! that the Python package reads them instead of copying them. Each value is the Rust constant
//! itself and each name is that constant's (a per-type one's with the type appended).

use crate::linalg::svd::{Svd, SVD_FAER_MIN, SVD_SPLIT_MIN_BYTES};
use ferrax_kernels::small::FUSED_CHOLESKY_BLOCK_MAX;
use num_complex::Complex;
use std::ffi::c_char;

#[repr(C)]
pub struct FerraxLimit {
    /// NUL-terminated name of the Rust constant, e.g. `FUSED_CHOLESKY_BLOCK_MAX`.
    pub name: *const c_char,
    pub value: u64,
}

// The table only holds pointers to static strings.
unsafe impl Sync for FerraxLimit {}

macro_rules! limits {
    ($($name:ident $(= $value:expr)?),* $(,)?) => {
        static LIMITS: &[FerraxLimit] = &[$(FerraxLimit {
            name: concat!(stringify!($name), "\0").as_ptr() as *const c_char,
            value: limits!(@value $name $(= $value)?) as u64,
        }),*];
    };
    (@value $name:ident) => { $name };
    (@value $name:ident = $value:expr) => { $value };
}

limits!(
    // The largest order ferrax_cholesky takes on CUDA (its fused kernels).
    FUSED_CHOLESKY_BLOCK_MAX,
    // The largest order the CPU SVD takes by one-sided Jacobi, per dtype (`Svd::JACOBI_MAX`).
    SVD_JACOBI_MAX_F32 = <f32 as Svd>::JACOBI_MAX,
    SVD_JACOBI_MAX_F64 = <f64 as Svd>::JACOBI_MAX,
    SVD_JACOBI_MAX_C64 = <Complex<f32> as Svd>::JACOBI_MAX,
    SVD_JACOBI_MAX_C128 = <Complex<f64> as Svd>::JACOBI_MAX,
    // The order from which the CPU SVD with vectors is faer's.
    SVD_FAER_MIN,
    // The size in bytes from which the CPU SVD of one matrix with vectors is split over the pool.
    SVD_SPLIT_MIN_BYTES,
);

/// Returns the limits table and writes its length to `count`.
///
/// # Safety
/// `count` must be null or point to writable memory.
#[no_mangle]
pub unsafe extern "C" fn ferrax_limits(count: *mut usize) -> *const FerraxLimit {
    if let Some(count) = count.as_mut() {
        *count = LIMITS.len();
    }
    LIMITS.as_ptr()
}
