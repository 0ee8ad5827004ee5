//! `geev`: eigenvalues and eigenvectors of general square matrices, jaxlib's
//! `lapack_?geev_ffi` contract: column-major `x` `[..., n, n]` in (not modified: each matrix is
//! copied to scratch), then
//! - real input: `wr`, `wi` `[..., n]` (real and imaginary parts of the eigenvalues), `vl`,
//!   `vr` complex `[..., n, n]` (LAPACK's packed real eigenvectors, unpacked) and S32 `info`;
//! - complex input: `w` `[..., n]`, `vl`, `vr` and `info`.
//!
//! Attributes `compute_left`, `compute_right`: u8 'V' (that side's eigenvectors) or 'N' (that
//! result is then zero). As in jaxlib, a matrix with a non-finite entry is not passed to LAPACK
//! and gets `info` -4.

pub mod cpu;

use super::eigenvalues::Contract;
use crate::ffi::{Array, Matrices, NativeType, Result};
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_geev";

/// The results of each contract, for errors.
pub(crate) const CONTRACT: Contract = Contract {
    real: "wr, wi, vl, vr, info",
    complex: "w, vl, vr, info",
};

/// Checks the eigenvectors and `info` against `x [..., n, n]`.
pub(crate) fn expect_shapes<T: NativeType, V: NativeType>(
    x: &Matrices<'_, T>,
    vl: &Matrices<'_, V>,
    vr: &Matrices<'_, V>,
    info: &Array<'_, i32>,
) -> Result<()> {
    vl.expect_dims(x.dims())?;
    vr.expect_dims(x.dims())?;
    info.expect_dims(x.batch_dims())
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
