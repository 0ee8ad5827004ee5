//! `gees`: Schur decomposition `A = Z T Z^H` of general square matrices, jaxlib's
//! `lapack_?gees_ffi` contract: column-major `x` `[..., n, n]` in, overwritten by the Schur
//! form `T` (it aliases result 0), then
//! - real input: `schur_vectors` `Z` `[..., n, n]`, `eigvals_real`, `eigvals_imag` `[..., n]`,
//!   S32 `selected_eigvals` `[...]` (LAPACK's `sdim`) and S32 `info` `[...]`;
//! - complex input: `schur_vectors`, `eigvals` `[..., n]`, `selected_eigvals` and `info`.
//!
//! Attributes `mode`: u8 'V' (compute `Z`) or 'N' (`schur_vectors` is then zero); `sort`: u8
//! 'N' only (jaxlib has no selection function to sort by, so 'S' is UNIMPLEMENTED there too).

pub mod cpu;

use super::eigenvalues::Contract;
use crate::ffi::{Array, Error, Matrices, NativeType, Result};
use crate::linalg::flags::Sort;
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_gees";

/// The results of each contract, for errors.
pub(crate) const CONTRACT: Contract = Contract {
    real: "x_out, schur_vectors, eigvals_real, eigvals_imag, selected_eigvals, info",
    complex: "x_out, schur_vectors, eigvals, selected_eigvals, info",
};

/// Rejects sorting, which needs a selection function that no caller can pass.
pub(crate) fn expect_unsorted(sort: Sort) -> Result<()> {
    if sort == Sort::Yes {
        return Err(Error::unimplemented(
            "attribute 'sort': 'S' (sorted eigenvalues) is not supported: there is no \
             selection function",
        ));
    }
    Ok(())
}

/// Checks the results other than the eigenvalues against `x [..., n, n]`.
pub(crate) fn expect_shapes<T: NativeType>(
    x: &Matrices<'_, T>,
    x_out: &Matrices<'_, T>,
    schur_vectors: &Matrices<'_, T>,
    selected_eigvals: &Array<'_, i32>,
    info: &Array<'_, i32>,
) -> Result<()> {
    schur_vectors.expect_dims(x.dims())?;
    selected_eigvals.expect_dims(x.batch_dims())?;
    info.expect_dims(x.batch_dims())?;
    x_out.expect_dims(x.dims())
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
