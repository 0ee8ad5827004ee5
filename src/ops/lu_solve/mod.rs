//! `lu_solve`: jax's `lu_solve` (its `_lu_solve_core` under vmap) in one call on jax's
//! row-major arrays: `lu` `[..., n, n]` (jax's packed `lu` factors), S32 `permutation`
//! `[..., n]` (jax's `lu` permutation) and `b` `[..., n, k]` in, `x` `[..., n, k]` out
//! (not aliased). Attribute `trans` (S32): 0 solves `A·x = b`, 1 `Aᵀ·x = b`, 2 `Aᴴ·x = b`.

pub mod cpu;

use crate::ffi::{Array, Error, MatrixBatch, Matrices, NativeType, Result};
use ferrax_kernels::small::Transpose;
use std::ffi::CStr;

pub const LU_SOLVE: &CStr = c"ferrax_lu_solve";

crate::ffi_operands! {
    /// `lu_solve`'s operands.
    pub struct LuSolve<'a, T> {
        arg lu: Matrices<'a, T>,
        arg permutation: Array<'a, i32>,
        arg b: Matrices<'a, T>,
        ret x: Matrices<'a, T>,
        attr trans: i32,
    }
}

impl<T: NativeType> LuSolve<'_, T> {
    /// Checks the operands against `lu` (square) and `b` (its batch, n rows); returns b's
    /// shape and the transpose `trans` asks for.
    pub(crate) fn shape(&self) -> Result<(MatrixBatch, Transpose)> {
        self.lu.expect_square()?;
        let batch = self.lu.batch_dims();
        let n = self.lu.shape.rows as i64;
        self.permutation.expect_dims(&[batch, &[n]].concat())?;
        let k = self.b.shape.cols as i64;
        self.b.expect_dims(&[batch, &[n, k]].concat())?;
        self.x.expect_dims(self.b.dims())?;
        let trans = match self.trans {
            0 => Transpose::No,
            1 => Transpose::Yes,
            2 => Transpose::Conjugate,
            other => {
                return Err(Error::invalid_argument(format!(
                    "attribute trans: 0, 1 or 2 expected, got {other}"
                )))
            }
        };
        Ok((self.b.shape, trans))
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
