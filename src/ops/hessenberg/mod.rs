//! `gehrd`: reduction to upper Hessenberg form, jaxlib's `lapack_?gehrd_ffi` contract:
//! column-major `[..., n, n]` in; `x_out` (aliasing the input: H on and above the first
//! subdiagonal, the reflectors below it), `tau` `[..., n - 1]` and S32 `info` `[...]` out.
//! Attributes `low` and `high`: S32, LAPACK's `ilo` and `ihi` (jax passes 1 and n).

pub mod cpu;

use crate::ffi::{Array, Error, Matrices, NativeType, Result};
use crate::linalg::hessenberg::{ihi_range, ilo_range};
use crate::linalg::lapack_int;
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_gehrd";

/// Checks `x_out`, `tau` and `info` against the square `x [..., n, n]`, and `low` and `high`
/// against LAPACK's bounds, so that a bad attribute is an error naming it rather than LAPACK's
/// `info < 0` (and xerbla's print).
pub(crate) fn expect_shapes<T: NativeType>(
    x: &Matrices<'_, T>,
    x_out: &Matrices<'_, T>,
    tau: &Array<'_, T>,
    info: &Array<'_, i32>,
    [low, high]: [i32; 2],
) -> Result<()> {
    x.expect_square()?;
    // n - 1 reflectors; none (not -1) for n = 0, which jax never lowers but a raw call may pass.
    let reflectors = x.shape.rows.saturating_sub(1);
    tau.expect_dims(&[x.batch_dims(), &[reflectors as i64]].concat())?;
    info.expect_dims(x.batch_dims())?;
    let n = lapack_int("n", x.shape.rows)?;
    let lows = ilo_range(n);
    if !lows.contains(&low) {
        return Err(Error::invalid_argument(format!(
            "attribute 'low': expected 1 <= low <= max(1, n) = {}, got {low}",
            lows.end()
        )));
    }
    let highs = ihi_range(n, low);
    if !highs.contains(&high) {
        return Err(Error::invalid_argument(format!(
            "attribute 'high': expected min(low, n) = {} <= high <= n = {n}, got {high}",
            highs.start()
        )));
    }
    x_out.expect_dims(x.dims())
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
