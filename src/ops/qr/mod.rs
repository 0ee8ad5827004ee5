//! QR by Householder reflectors, jaxlib's contracts (column-major matrices, input aliasing the
//! first result, no `info`):
//! - `geqrf` (`lapack_?geqrf_ffi`): `x` `[..., m, n]` in; `x_out` (R on and above the diagonal,
//!   the reflectors below it) and `tau` `[..., min(m, n)]` out.
//! - `orgqr` (`lapack_?orgqr_ffi` / `lapack_?ungqr_ffi`): reflectors `x` `[..., m, n]` (m >= n)
//!   and `tau` `[..., k]` (k <= n) in; `x_out`, the first n columns of Q, out.
//! - `ormqr` (`lapack_?ormqr_ffi` / `lapack_?unmqr_ffi`): reflectors `a` `[..., a_rows, a_cols]`,
//!   `tau` `[..., k]` and `c` `[..., m, n]` in; `c_out` (aliasing `c`) = Q c, Q^H c, c Q or
//!   c Q^H out, Q being `a_rows x a_rows`. Attributes `left` and `transpose` (PRED).
//! - `geqp3` (`lapack_?geqp3_ffi`): `x` `[..., m, n]` and S32 `jpvt` `[..., n]` (non-zero: a
//!   column to move up front) in; `x_out` (as geqrf's), `jpvt_out` (1-based column pivots) and
//!   `tau` `[..., min(m, n)]` out, the first two aliasing the inputs.
//! - `qr`: jax's whole `qr` without pivoting (`geqrf`, Q by `householder_product`, `triu` of
//!   R) in one call on jax's row-major arrays: `a` `[..., m, n]` in; `q` `[..., m, mq]` and `r`
//!   `[..., mq, n]` out, `mq` being `m` with the attribute `full_matrices`, else `min(m, n)`.
//!   jax's steps cost four XLA passes over the batch (a transposing copy in, a copy of the
//!   reflectors for Q, R's `triu` and Q's transpose out).

pub mod cpu;
pub mod cuda;

use crate::ffi::{Array, MatrixBatch, Matrices, NativeType, Result};
use crate::linalg::qr::q_columns;
use std::ffi::CStr;

pub const GEQRF: &CStr = c"ferrax_geqrf";
pub const ORGQR: &CStr = c"ferrax_orgqr";
pub const ORMQR: &CStr = c"ferrax_ormqr";
pub const GEQP3: &CStr = c"ferrax_geqp3";
pub const QR: &CStr = c"ferrax_qr";

/// Checks geqrf's `x_out` and `tau` against `x [..., m, n]`; returns x's shape.
pub(crate) fn geqrf_shapes<T: NativeType>(
    x: &Matrices<'_, T>,
    x_out: &Matrices<'_, T>,
    tau: &Array<'_, T>,
) -> Result<MatrixBatch> {
    x_out.expect_dims(x.dims())?;
    let k = x.shape.rows.min(x.shape.cols);
    tau.expect_dims(&[x.batch_dims(), &[k as i64]].concat())?;
    Ok(x.shape)
}

/// The reflector count `k` of `tau [..., k]` for matrices `a` of `cols` columns (`k <= cols`).
fn reflector_count<T: NativeType, U: NativeType>(
    a: &Matrices<'_, T>,
    tau: &Array<'_, U>,
    max: usize,
) -> Result<usize> {
    let batch_dims = a.batch_dims();
    match tau.dims().split_last() {
        Some((&k, tau_batch)) if tau_batch == batch_dims && k as usize <= max => Ok(k as usize),
        _ => Err(tau.mismatch(
            format!("shape {batch_dims:?} + [k] with k <= {max}"),
            format!("shape {:?}", tau.dims()),
        )),
    }
}

/// Checks orgqr's operands (m >= n, `tau [..., k]` with k <= n); returns x's shape and k.
pub(crate) fn orgqr_shapes<T: NativeType>(
    x: &Matrices<'_, T>,
    tau: &Array<'_, T>,
    x_out: &Matrices<'_, T>,
) -> Result<(MatrixBatch, usize)> {
    let shape = x.shape;
    if shape.rows < shape.cols {
        return Err(x.mismatch(
            "matrices with at least as many rows as columns".into(),
            format!("shape {:?}", x.dims()),
        ));
    }
    let k = reflector_count(x, tau, shape.cols)?;
    x_out.expect_dims(x.dims())?;
    Ok((shape, k))
}

/// The shapes of ormqr's operands: the reflectors' matrices, c's, and the reflector count k.
pub(crate) struct OrmqrShapes {
    pub reflectors: MatrixBatch,
    pub c: MatrixBatch,
    pub k: usize,
}

/// Checks ormqr's operands against the reflectors `a [..., q, a_cols]`: `c [..., q, n]` (left)
/// or `[..., m, q]` (right), `c_out` as `c`, and `tau [..., k]` with k <= min(q, a_cols).
pub(crate) fn ormqr_shapes<T: NativeType>(
    a: &Matrices<'_, T>,
    tau: &Array<'_, T>,
    c: &Matrices<'_, T>,
    c_out: &Matrices<'_, T>,
    left: bool,
) -> Result<OrmqrShapes> {
    let reflectors = a.shape;
    let batch_dims = a.batch_dims();
    let q_order = reflectors.rows;
    let shape = c.shape;
    // Q (q_order x q_order) meets c's rows from the left, its columns from the right.
    let (meets, expected) = if left {
        (shape.rows, format!("[{q_order}, n]"))
    } else {
        (shape.cols, format!("[m, {q_order}]"))
    };
    if c.batch_dims() != batch_dims || meets != q_order {
        return Err(c.mismatch(
            format!(
                "shape {batch_dims:?} + {expected} (left = {left}, a's shape {:?})",
                a.dims()
            ),
            format!("shape {:?}", c.dims()),
        ));
    }
    // LAPACK reads k reflectors, a's first k columns, each of length q_order.
    let k = reflector_count(a, tau, reflectors.rows.min(reflectors.cols))?;
    c_out.expect_dims(c.dims())?;
    Ok(OrmqrShapes {
        reflectors,
        c: shape,
        k,
    })
}

/// Checks geqp3's `jpvt`, results and `tau` against `x [..., m, n]`; returns x's shape.
pub(crate) fn geqp3_shapes<T: NativeType>(
    x: &Matrices<'_, T>,
    jpvt: &Array<'_, i32>,
    x_out: &Matrices<'_, T>,
    jpvt_out: &Array<'_, i32>,
    tau: &Array<'_, T>,
) -> Result<MatrixBatch> {
    let shape = x.shape;
    let batch_dims = x.batch_dims();
    jpvt.expect_dims(&[batch_dims, &[shape.cols as i64]].concat())?;
    let k = shape.rows.min(shape.cols);
    tau.expect_dims(&[batch_dims, &[k as i64]].concat())?;
    x_out.expect_dims(x.dims())?;
    jpvt_out.expect_dims(jpvt.dims())?;
    Ok(shape)
}

/// Checks `q` and `r` against `a [..., m, n]` (`q [..., m, mq]`, `r [..., mq, n]`); returns
/// a's shape and `mq`.
pub(crate) fn qr_shapes<T: NativeType>(
    a: &Matrices<'_, T>,
    q: &Matrices<'_, T>,
    r: &Matrices<'_, T>,
    full_matrices: bool,
) -> Result<(MatrixBatch, usize)> {
    let shape = a.shape;
    let (rows, cols) = (shape.rows, shape.cols);
    let q_cols = q_columns(rows, cols, full_matrices);
    for (result, dims) in [(q, [rows, q_cols]), (r, [q_cols, cols])] {
        result.expect_dims(&[a.batch_dims(), &[dims[0] as i64, dims[1] as i64]].concat())?;
    }
    Ok((shape, q_cols))
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
