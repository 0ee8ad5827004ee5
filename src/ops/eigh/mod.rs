//! `eigh`: symmetric / Hermitian eigendecomposition by divide and conquer, jaxlib's
//! `lapack_?syevd_ffi` / `lapack_?heevd_ffi` contract: column-major `[..., n, n]` in, the
//! eigenvectors (aliasing the input), the real eigenvalues `[..., n]` in ascending order and S32
//! `info` `[...]` out. Attributes `uplo` (u8 'L' or 'U': the triangle read) and `mode` (u8 'V'
//! eigenvectors too, 'N' eigenvalues only, the matrix then being destroyed). One target for
//! real (`?syevd`) and complex (`?heevd`) inputs.

pub mod cpu;

use crate::ffi::{Array, Matrices, NativeType, Result};
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_syevd";

/// Checks `x_out`, `w` and `info` against the square `x [..., n, n]`.
pub(crate) fn expect_shapes<T: NativeType, R: NativeType>(
    x: &Matrices<'_, T>,
    x_out: &Matrices<'_, T>,
    w: &Array<'_, R>,
    info: &Array<'_, i32>,
) -> Result<()> {
    x.expect_square()?;
    w.expect_dims(&[x.batch_dims(), &[x.shape.rows as i64]].concat())?;
    info.expect_dims(x.batch_dims())?;
    x_out.expect_dims(x.dims())
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
