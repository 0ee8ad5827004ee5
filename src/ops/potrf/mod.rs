//! Cholesky factorization.
//! - `potrf`: jaxlib's `lapack_?potrf_ffi` contract: column-major `a` `[..., n, n]` in, the
//!   factor in the `uplo` triangle (aliasing the input; the other triangle keeps the input) and
//!   S32 `info` `[...]` out. Attribute `uplo`: u8 'L' or 'U'. The CUDA handler takes the same
//!   contract (jaxlib's `cusolver_potrf_ffi` has a `lower` flag instead), except that past
//!   ferrax's kernels, for more than one matrix, cuSOLVER's `potrfBatched` uses the other
//!   triangle as workspace (as in jaxlib's target; jax reads the factor's triangle only).
//! - `cholesky`: jax's whole `cholesky(x, symmetrize_input)` in one call on its row-major
//!   arrays: `a` `[..., n, n]` in, `l` (not aliased) out: `tril(L)` of `(a + aᴴ)/2` (or of
//!   `a`'s lower triangle), NaN on and below the diagonal where the factorization fails. jax's
//!   rule needs an XLA pass over the batch for each of those steps.

pub mod cpu;
pub mod cuda;

use crate::ffi::{Array, MatrixBatch, Matrices, NativeType, Result};
use crate::linalg::flags::Uplo;
use std::ffi::CStr;

pub const POTRF: &CStr = c"ferrax_potrf";
pub const CHOLESKY: &CStr = c"ferrax_cholesky";

crate::ffi_operands! {
    /// `potrf`'s operands.
    pub struct Potrf<'a, T> {
        arg a: Matrices<'a, T>,
        ret factor: Matrices<'a, T>,
        ret info: Array<'a, i32>,
        attr uplo: Uplo,
    }
}

impl<T: NativeType> Potrf<'_, T> {
    /// Checks `factor` and `info` against `a` (square matrices); returns a's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        self.a.expect_square()?;
        self.factor.expect_dims(self.a.dims())?;
        self.info.expect_dims(self.a.batch_dims())?;
        Ok(self.a.shape)
    }
}

crate::ffi_operands! {
    /// `cholesky`'s operands.
    pub struct Cholesky<'a, T> {
        arg a: Matrices<'a, T>,
        ret l: Matrices<'a, T>,
        attr symmetrize_input: bool,
    }
}

impl<T: NativeType> Cholesky<'_, T> {
    /// Checks `l` against `a` (square matrices); returns a's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        self.a.expect_square()?;
        self.l.expect_dims(self.a.dims())?;
        Ok(self.a.shape)
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
