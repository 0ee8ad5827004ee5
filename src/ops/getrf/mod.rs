//! `getrf`: LU factorization with partial pivoting, LAPACK's contract as jaxlib's
//! `lapack_?getrf_ffi` / `cusolver_getrf_ffi`: column-major `a` `[..., m, n]` in, packed `lu`
//! (aliasing the input), 1-based S32 pivots `ipiv` `[..., min(m, n)]` and S32 `info` `[...]`
//! out. `ferrax_getrf_row_major` is the same on jax's own row-major arrays, `lu` not aliased:
//! jax's `lu` lowers to it, so XLA adds no transposing passes over the batch around the call.

pub mod cpu;
pub mod cuda;

use crate::ffi::{Array, MatrixBatch, Matrices, NativeType, Result};
use std::ffi::CStr;

pub const GETRF: &CStr = c"ferrax_getrf";
pub const GETRF_ROW_MAJOR: &CStr = c"ferrax_getrf_row_major";

/// Checks `lu`, `ipiv` and `info` against `a [..., m, n]`; returns a's shape.
pub(crate) fn expect_shapes<T: NativeType>(
    a: &Matrices<'_, T>,
    lu: &Matrices<'_, T>,
    ipiv: &Array<'_, i32>,
    info: &Array<'_, i32>,
) -> Result<MatrixBatch> {
    lu.expect_dims(a.dims())?;
    let k = a.shape.rows.min(a.shape.cols);
    ipiv.expect_dims(&[a.batch_dims(), &[k as i64]].concat())?;
    info.expect_dims(a.batch_dims())?;
    Ok(a.shape)
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
