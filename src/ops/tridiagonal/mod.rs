//! `sytrd`: reduction of a symmetric / Hermitian matrix to real tridiagonal form, jaxlib's
//! `lapack_?sytrd_ffi` / `lapack_?hetrd_ffi` contract: column-major `[..., n, n]` in; `x_out`
//! (aliasing the input: the tridiagonal and the reflectors in the `uplo` triangle, the other
//! triangle untouched), real `d` `[..., n]` and `e` `[..., n - 1]`, `tau` `[..., n - 1]` and S32
//! `info` `[...]` out. Attribute `uplo`: u8 'L' or 'U'. One target for real (`?sytrd`) and
//! complex (`?hetrd`) inputs.

pub mod cpu;

use crate::ffi::{Array, Matrices, NativeType, Result};
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_sytrd";

/// The results, in signature order.
pub(crate) struct Results<'a, T, R> {
    pub x_out: Matrices<'a, T>,
    pub d: Array<'a, R>,
    pub e: Array<'a, R>,
    pub tau: Array<'a, T>,
    pub info: Array<'a, i32>,
}

/// Checks the results against the square `x [..., n, n]`.
pub(crate) fn expect_shapes<T: NativeType, R: NativeType>(
    x: &Matrices<'_, T>,
    out: &Results<'_, T, R>,
) -> Result<()> {
    x.expect_square()?;
    // n - 1 off-diagonal entries and reflectors; none (not -1) for n = 0, which jax never
    // lowers but a raw call may pass.
    let order = x.shape.rows;
    let with_len = |len: usize| [x.batch_dims(), &[len as i64]].concat();
    out.d.expect_dims(&with_len(order))?;
    out.e.expect_dims(&with_len(order.saturating_sub(1)))?;
    out.tau.expect_dims(&with_len(order.saturating_sub(1)))?;
    out.info.expect_dims(x.batch_dims())?;
    out.x_out.expect_dims(x.dims())
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
