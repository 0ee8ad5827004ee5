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

crate::ffi_operands! {
    /// The operands of both targets.
    pub struct Getrf<'a, T> {
        arg a: Matrices<'a, T>,
        ret lu: Matrices<'a, T>,
        ret ipiv: Array<'a, i32>,
        ret info: Array<'a, i32>,
    }
}

impl<T: NativeType> Getrf<'_, T> {
    /// Checks `lu`, `ipiv` and `info` against `a [..., m, n]`; returns a's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        let a = &self.a;
        self.lu.expect_dims(a.dims())?;
        let k = a.shape.rows.min(a.shape.cols);
        self.ipiv.expect_dims(&[a.batch_dims(), &[k as i64]].concat())?;
        self.info.expect_dims(a.batch_dims())?;
        Ok(a.shape)
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
