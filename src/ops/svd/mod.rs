//! Singular value decomposition, jaxlib's `lapack_?gesdd_ffi` and `lapack_?gesvd_ffi`
//! contract (the same for both): column-major `[..., m, n]` in (overwritten: it aliases result
//! 0), real singular values `[..., min(m, n)]`, `u` `[..., m, m or k]`, `vt` `[..., n or k, n]`
//! and S32 `info` `[...]` out. Attribute `mode`: u8 'A' (full U, V^T), 'S' (the first k
//! columns/rows) or 'N' (singular values only; `u` and `vt` are still passed, sized by
//! `full_matrices`).
//! - `gesdd` (divide and conquer): jax's default CPU SVD.
//! - `gesvd` (QR iteration, `jobu = jobvt = mode`): `SvdAlgorithm.QR`.

pub mod cpu;

use crate::ffi::{Array, Error, Matrices, NativeType, Result};
use crate::linalg::flags::SvdJob;
use std::ffi::CStr;

pub const GESDD_TARGET: &CStr = c"ferrax_gesdd";
pub const GESVD_TARGET: &CStr = c"ferrax_gesvd";

/// The results of both targets, in signature order.
pub(crate) struct Results<'a, T, R> {
    pub x_out: Matrices<'a, T>,
    pub s: Array<'a, R>,
    pub u: Matrices<'a, T>,
    pub vt: Matrices<'a, T>,
    pub info: Array<'a, i32>,
}

/// Checks `mode` and the results against `x [..., m, n]`.
pub(crate) fn expect_shapes<T: NativeType, R: NativeType>(
    x: &Matrices<'_, T>,
    out: &Results<'_, T, R>,
    mode: SvdJob,
) -> Result<()> {
    if mode == SvdJob::Overwrite {
        // As jaxlib: 'O' would overwrite `x` with part of U or V^T, which no lowering asks for.
        return Err(Error::unimplemented(
            "attribute 'mode': 'O' (U or V^T written over the input) is not supported",
        ));
    }
    let (rows, cols) = (x.shape.rows, x.shape.cols);
    let k = rows.min(cols);
    let batch_dims = x.batch_dims();
    out.s.expect_dims(&[batch_dims, &[k as i64]].concat())?;
    // With 'N' LAPACK never touches `u` and `vt`; jax then sizes them by `full_matrices`.
    let (u_shapes, vt_shapes) = match mode {
        SvdJob::All => (vec![[rows, rows]], vec![[cols, cols]]),
        SvdJob::Some => (vec![[rows, k]], vec![[k, cols]]),
        _ => (vec![[rows, rows], [rows, k]], vec![[cols, cols], [k, cols]]),
    };
    expect_matrices(&out.u, batch_dims, &u_shapes)?;
    expect_matrices(&out.vt, batch_dims, &vt_shapes)?;
    out.info.expect_dims(batch_dims)?;
    out.x_out.expect_dims(x.dims())
}

/// Checks that `m`'s shape is `[batch..., r, c]` for one of the allowed `[r, c]`.
fn expect_matrices<T: NativeType>(
    m: &Matrices<'_, T>,
    batch_dims: &[i64],
    allowed: &[[usize; 2]],
) -> Result<()> {
    let full = |[r, c]: [usize; 2]| [batch_dims, &[r as i64, c as i64]].concat();
    if allowed.iter().any(|&shape| m.dims() == full(shape)) {
        return Ok(());
    }
    let mut expected: Vec<String> = allowed.iter().map(|&s| format!("{:?}", full(s))).collect();
    expected.dedup();
    Err(m.mismatch(
        format!("shape {}", expected.join(" or ")),
        format!("shape {:?}", m.dims()),
    ))
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
