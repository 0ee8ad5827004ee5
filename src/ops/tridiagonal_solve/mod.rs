//! Tridiagonal solves, jaxlib's contracts: diagonals `dl`, `d`, `du` `[..., m]` (`dl[0]` and
//! `du[m-1]` lie outside the matrix and are ignored) and right-hand sides `b` `[..., m, nrhs]`
//! (column-major), all of one dtype; no attributes.
//! - `gtsv` (`lapack_?gtsv_ffi`): LAPACK's `?gtsv` in place: `dl_out`, `d_out`, `du_out` (the
//!   factorization LAPACK leaves there) and `b_out` (the solution) alias the four operands, plus
//!   S32 `info` `[...]`.
//! - `tridiagonal_solve_perturbed` (`tridiagonal_solve_perturbed_ffi`): `x` `[..., m, nrhs]`
//!   by Gaussian elimination that perturbs tiny pivots instead of failing (no `info`).

pub mod cpu;

use crate::ffi::{Array, MatrixBatch, Matrices, NativeType, Result};
use std::ffi::CStr;

pub const GTSV: &CStr = c"ferrax_gtsv";
pub const PERTURBED: &CStr = c"ferrax_tridiagonal_solve_perturbed";

/// Checks the diagonals against `b [..., m, nrhs]`: shape `[..., m]`; returns b's shape.
pub(crate) fn expect_diagonals<T: NativeType>(
    diagonals: [&Array<'_, T>; 3],
    b: &Matrices<'_, T>,
) -> Result<MatrixBatch> {
    let dims = b.dims();
    for diagonal in diagonals {
        diagonal.expect_dims(&dims[..dims.len() - 1])?;
    }
    Ok(b.shape)
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
