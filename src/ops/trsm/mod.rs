//! `trsm`: triangular solve with multiple right-hand sides (BLAS `?trsm`, alpha = 1), jaxlib's
//! `lapack_?trsm_ffi` contract: column-major triangular `x` `[..., k, k]` (`k = m` for side
//! 'L', `n` for side 'R') and right-hand sides `y` `[..., m, n]` in, the solution `y_out`
//! `[..., m, n]` (aliasing `y`) out. Attributes, u8 ASCII: `side` 'L'/'R', `uplo` 'L'/'U',
//! `trans_x` 'N'/'T'/'C', `diag` 'N'/'U'. No `info`: BLAS does not report singular `x`.

pub mod cpu;

use crate::ffi::{MatrixBatch, Matrices, NativeType, Result};
use crate::linalg::flags::Side;
use std::ffi::CStr;

pub const TRSM: &CStr = c"ferrax_trsm";

/// Checks `x` and `y_out` against the right-hand sides `y`; returns y's shape.
pub(crate) fn expect_shapes<T: NativeType>(
    x: &Matrices<'_, T>,
    y: &Matrices<'_, T>,
    y_out: &Matrices<'_, T>,
    side: Side,
) -> Result<MatrixBatch> {
    let shape = y.shape;
    let k = if side == Side::Left { shape.rows } else { shape.cols } as i64;
    x.expect_dims(&[y.batch_dims(), &[k, k]].concat())?;
    y_out.expect_dims(y.dims())?;
    Ok(shape)
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
