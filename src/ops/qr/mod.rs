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

crate::ffi_operands! {
    /// `geqrf`'s operands.
    pub struct Geqrf<'a, T> {
        arg x: Matrices<'a, T>,
        ret x_out: Matrices<'a, T>,
        ret tau: Array<'a, T>,
    }
}

impl<T: NativeType> Geqrf<'_, T> {
    /// Checks `x_out` and `tau` against `x [..., m, n]`; returns x's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        self.x_out.expect_dims(self.x.dims())?;
        let k = self.x.shape.rows.min(self.x.shape.cols);
        self.tau.expect_dims(&[self.x.batch_dims(), &[k as i64]].concat())?;
        Ok(self.x.shape)
    }
}

/// The reflector count `k` of `tau [..., k]` for the reflector matrices `a` (`k <= max`).
fn reflector_count<T: NativeType>(
    a: &Matrices<'_, T>,
    tau: &Array<'_, T>,
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

crate::ffi_operands! {
    /// `orgqr`'s operands.
    pub struct Orgqr<'a, T> {
        arg x: Matrices<'a, T>,
        arg tau: Array<'a, T>,
        ret x_out: Matrices<'a, T>,
    }
}

impl<T: NativeType> Orgqr<'_, T> {
    /// Checks the operands (m >= n, `tau [..., k]` with k <= n); returns x's shape and k.
    pub(crate) fn shape(&self) -> Result<(MatrixBatch, usize)> {
        let shape = self.x.shape;
        if shape.rows < shape.cols {
            return Err(self.x.mismatch(
                "matrices with at least as many rows as columns".into(),
                format!("shape {:?}", self.x.dims()),
            ));
        }
        let k = reflector_count(&self.x, &self.tau, shape.cols)?;
        self.x_out.expect_dims(self.x.dims())?;
        Ok((shape, k))
    }
}

crate::ffi_operands! {
    /// `ormqr`'s operands.
    pub struct Ormqr<'a, T> {
        arg a: Matrices<'a, T>,
        arg tau: Array<'a, T>,
        arg c: Matrices<'a, T>,
        ret c_out: Matrices<'a, T>,
        attr left: bool,
        attr transpose: bool,
    }
}

/// The shapes of ormqr's operands: the reflectors' matrices, c's, and the reflector count k.
pub(crate) struct OrmqrShapes {
    pub reflectors: MatrixBatch,
    pub c: MatrixBatch,
    pub k: usize,
}

impl<T: NativeType> Ormqr<'_, T> {
    /// Checks the operands against the reflectors `a [..., q, a_cols]`: `c [..., q, n]` (left)
    /// or `[..., m, q]` (right), `c_out` as `c`, and `tau [..., k]` with k <= min(q, a_cols).
    pub(crate) fn shapes(&self) -> Result<OrmqrShapes> {
        let (a, c, left) = (&self.a, &self.c, self.left);
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
        let k = reflector_count(a, &self.tau, reflectors.rows.min(reflectors.cols))?;
        self.c_out.expect_dims(c.dims())?;
        Ok(OrmqrShapes {
            reflectors,
            c: shape,
            k,
        })
    }
}

crate::ffi_operands! {
    /// `geqp3`'s operands.
    pub struct Geqp3<'a, T> {
        arg x: Matrices<'a, T>,
        arg jpvt: Array<'a, i32>,
        ret x_out: Matrices<'a, T>,
        ret jpvt_out: Array<'a, i32>,
        ret tau: Array<'a, T>,
    }
}

impl<T: NativeType> Geqp3<'_, T> {
    /// Checks `jpvt`, the results and `tau` against `x [..., m, n]`; returns x's shape.
    pub(crate) fn shape(&self) -> Result<MatrixBatch> {
        let shape = self.x.shape;
        let batch_dims = self.x.batch_dims();
        self.jpvt.expect_dims(&[batch_dims, &[shape.cols as i64]].concat())?;
        let k = shape.rows.min(shape.cols);
        self.tau.expect_dims(&[batch_dims, &[k as i64]].concat())?;
        self.x_out.expect_dims(self.x.dims())?;
        self.jpvt_out.expect_dims(self.jpvt.dims())?;
        Ok(shape)
    }
}

crate::ffi_operands! {
    /// `qr`'s operands.
    pub struct Qr<'a, T> {
        arg a: Matrices<'a, T>,
        ret q: Matrices<'a, T>,
        ret r: Matrices<'a, T>,
        attr full_matrices: bool,
    }
}

impl<T: NativeType> Qr<'_, T> {
    /// Checks `q` and `r` against `a [..., m, n]` (`q [..., m, mq]`, `r [..., mq, n]`);
    /// returns a's shape and `mq`.
    pub(crate) fn shape(&self) -> Result<(MatrixBatch, usize)> {
        let shape = self.a.shape;
        let (rows, cols) = (shape.rows, shape.cols);
        let q_cols = q_columns(rows, cols, self.full_matrices);
        for (result, dims) in [(&self.q, [rows, q_cols]), (&self.r, [q_cols, cols])] {
            let dims = [self.a.batch_dims(), &[dims[0] as i64, dims[1] as i64]].concat();
            result.expect_dims(&dims)?;
        }
        Ok((shape, q_cols))
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
