//! `trsm`: triangular solve with multiple right-hand sides (BLAS `?trsm`, alpha = 1), jaxlib's
//! `lapack_?trsm_ffi` contract: column-major triangular `x` `[..., k, k]` (`k = m` for side
//! 'L', `n` for side 'R') and right-hand sides `y` `[..., m, n]` in, the solution `y_out`
//! `[..., m, n]` (aliasing `y`) out. Attributes, u8 ASCII: `side` 'L'/'R', `uplo` 'L'/'U',
//! `trans_x` 'N'/'T'/'C', `diag` 'N'/'U'. No `info`: BLAS does not report singular `x`.

pub mod cpu;

use crate::ffi::{MatrixBatch, Matrices, NativeType, Result};
use crate::linalg::flags::{Diag, Side, Trans, Uplo};
use std::ffi::CStr;

pub const TRSM: &CStr = c"ferrax_trsm";

crate::ffi_operands! {
    /// `trsm`'s operands.
    pub struct Trsm<'a, T> {
        arg x: Matrices<'a, T>,
        arg y: Matrices<'a, T>,
        ret y_out: Matrices<'a, T>,
        attr side: Side,
        attr uplo: Uplo,
        attr trans_x: Trans,
        attr diag: Diag,
    }
}

impl<T: NativeType> Trsm<'_, T> {
    /// Checks `x` and `y_out` against the right-hand sides `y`; returns y's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        let shape = self.y.shape;
        let k = if self.side == Side::Left { shape.rows } else { shape.cols } as i64;
        self.x.expect_dims(&[self.y.batch_dims(), &[k, k]].concat())?;
        self.y_out.expect_dims(self.y.dims())?;
        Ok(shape)
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
