//! Tridiagonal solves, jaxlib's contracts: diagonals `dl`, `d`, `du` `[..., m]` (`dl[0]` and
//! `du[m-1]` lie outside the matrix and are ignored) and right-hand sides `b` `[..., m, nrhs]`
//! (column-major), all of one dtype; no attributes.
//! - `gtsv` (`lapack_?gtsv_ffi`): LAPACK's `?gtsv` in place: `dl_out`, `d_out`, `du_out` (the
//!   factorization LAPACK leaves there) and `b_out` (the solution) alias the four operands, plus
//!   S32 `info` `[...]`.
//! - `tridiagonal_solve_perturbed` (`tridiagonal_solve_perturbed_ffi`, CPU and CUDA): `x`
//!   `[..., m, nrhs]` by Gaussian elimination that perturbs tiny pivots instead of failing (no
//!   `info`).
//! - `tridiagonal_solve` (CUDA, in place of jaxlib's `cusparse_gtsv2_ffi`, whose contract it
//!   keeps: `x` aliases `b`): the same elimination without perturbation; a singular system's
//!   `x` is NaN, as jax makes it where LAPACK's `?gtsv` fails on the CPU (cuSPARSE's `gtsv2`
//!   says nothing). Every order, where jaxlib's target needs `m >= 3`.

pub mod cpu;
pub mod cuda;

use crate::ffi::{Array, MatrixBatch, Matrices, NativeType, Result};
use std::ffi::CStr;

pub const GTSV: &CStr = c"ferrax_gtsv";
pub const PERTURBED: &CStr = c"ferrax_tridiagonal_solve_perturbed";
pub const TRIDIAGONAL_SOLVE: &CStr = c"ferrax_tridiagonal_solve";

/// Checks the diagonals against `b [..., m, nrhs]`: shape `[..., m]`; returns b's shape.
fn expect_diagonals<T: NativeType>(
    diagonals: [&Array<'_, T>; 3],
    b: &Matrices<'_, T>,
) -> Result<MatrixBatch> {
    let dims = b.dims();
    for diagonal in diagonals {
        diagonal.expect_dims(&dims[..dims.len() - 1])?;
    }
    Ok(b.shape)
}

crate::ffi_operands! {
    /// `gtsv`'s operands.
    pub struct Gtsv<'a, T> {
        arg dl: Array<'a, T>,
        arg d: Array<'a, T>,
        arg du: Array<'a, T>,
        arg b: Matrices<'a, T>,
        ret dl_out: Array<'a, T>,
        ret d_out: Array<'a, T>,
        ret du_out: Array<'a, T>,
        ret b_out: Matrices<'a, T>,
        ret info: Array<'a, i32>,
    }
}

impl<T: NativeType> Gtsv<'_, T> {
    /// Checks the diagonals, `info` and `b_out` against `b`; returns b's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        let shape = expect_diagonals([&self.dl, &self.d, &self.du], &self.b)?;
        self.info.expect_dims(self.b.batch_dims())?;
        self.b_out.expect_dims(self.b.dims())?;
        Ok(shape)
    }
}

crate::ffi_operands! {
    /// `tridiagonal_solve_perturbed`'s and `tridiagonal_solve`'s operands.
    pub struct Solve<'a, T> {
        arg dl: Array<'a, T>,
        arg d: Array<'a, T>,
        arg du: Array<'a, T>,
        arg b: Matrices<'a, T>,
        ret x: Matrices<'a, T>,
    }
}

impl<T: NativeType> Solve<'_, T> {
    /// Checks the diagonals and `x` against `b`; returns b's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        let shape = expect_diagonals([&self.dl, &self.d, &self.du], &self.b)?;
        self.x.expect_dims(self.b.dims())?;
        Ok(shape)
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
