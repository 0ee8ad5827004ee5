//! QR by Householder reflectors, jaxlib's contracts (column-major matrices, input aliasing the
//! first result, no attributes, no `info`):
//! - `geqrf` (`lapack_?geqrf_ffi`): `x` `[..., m, n]` in; `x_out` (R on and above the diagonal,
//!   the reflectors below it) and `tau` `[..., min(m, n)]` out.
//! - `orgqr` (`lapack_?orgqr_ffi` / `lapack_?ungqr_ffi`): reflectors `x` `[..., m, n]` (m >= n)
//!   and `tau` `[..., k]` (k <= n) in; `x_out`, the first n columns of Q, out.

use crate::ffi::{Buffer, Error, MatrixBatch, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{for_each_chunk, lapack_dim, query_lwork, routine, Scalar, SharedMut};
use std::ffi::CStr;

pub const GEQRF_TARGET: &CStr = c"ferrax_geqrf";
pub const ORGQR_TARGET: &CStr = c"ferrax_orgqr";

ffi_handler! {
    /// Householder QR on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_geqrf = GEQRF_TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret tau: Buffer;
    traits = 0;
    body = geqrf_cpu;
}

ffi_handler! {
    /// Q from Householder reflectors on the host through LAPACK, batch split across XLA's
    /// thread pool.
    pub fn ferrax_cpu_orgqr = ORGQR_TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    arg tau: Buffer;
    ret x_out: Buffer;
    traits = 0;
    body = orgqr_cpu;
}

fn geqrf_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    tau: Buffer<'_>,
) -> Result<()> {
    dispatch_lapack!(x, geqrf_typed(pool, x, x_out, tau))
}

fn orgqr_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    tau: Buffer<'_>,
    x_out: Buffer<'_>,
) -> Result<()> {
    dispatch_lapack!(x, orgqr_typed(pool, x, tau, x_out))
}

/// Both routines return `info < 0` only for an invalid argument, which the shape checks rule
/// out: such a failure is a bug here, not a property of the input.
fn check_info(routine: &str, info: i32) -> Result<()> {
    if info == 0 {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "LAPACK {routine} failed with info {info}"
        )))
    }
}

fn geqrf_typed<T: Scalar>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    tau: Buffer<'_>,
) -> Result<()> {
    let shape = MatrixBatch::of(&x)?;
    let batch_dims = shape.batch_dims(&x);
    let k = shape.rows.min(shape.cols);
    tau.expect_dtype(T::DTYPE)?;
    tau.expect_dims(&[batch_dims, &[k as i64]].concat())?;
    let (m, n) = (lapack_dim(&x, shape.rows)?, lapack_dim(&x, shape.cols)?);
    let lda = m.max(1);
    x.copy_into(&x_out)?;
    // An empty matrix has nothing to factor (LAPACK would return at once) and no taus.
    if shape.batch == 0 || k == 0 {
        return Ok(());
    }
    let geqrf = routine(T::geqrf())?;
    // SAFETY: `x` is no longer read; the results are distinct buffers.
    let (x_out, tau) = unsafe { (x_out.as_mut_slice::<T>()?, tau.as_mut_slice::<T>()?) };
    let (x_out, tau) = (SharedMut(x_out.as_mut_ptr()), SharedMut(tau.as_mut_ptr()));
    // Every matrix has the same shape, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        geqrf(&m, &n, x_out.at(0), &lda, tau.at(0), work, lwork, info)
    })?;
    let matrix_len = shape.matrix_len();
    let flops = matrix_len.saturating_mul(2 * k);
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        let mut info = 0;
        for b in range {
            // SAFETY: matrix `b` and its taus are written by this task alone; LAPACK touches
            // exactly `lda * n` elements, `k` taus and `lwork` elements of `work`.
            unsafe {
                geqrf(
                    &m,
                    &n,
                    x_out.at(b * matrix_len),
                    &lda,
                    tau.at(b * k),
                    work.as_mut_ptr(),
                    &lwork,
                    &mut info,
                )
            };
            check_info("geqrf", info)?;
        }
        Ok(())
    })
}

fn orgqr_typed<T: Scalar>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    tau: Buffer<'_>,
    x_out: Buffer<'_>,
) -> Result<()> {
    let shape = MatrixBatch::of(&x)?;
    if shape.rows < shape.cols {
        return Err(x.mismatch(
            "matrices with at least as many rows as columns".into(),
            format!("shape {:?}", x.dims()),
        ));
    }
    let batch_dims = shape.batch_dims(&x);
    tau.expect_dtype(T::DTYPE)?;
    let k = match tau.dims().split_last() {
        Some((&k, tau_batch)) if tau_batch == batch_dims && k as usize <= shape.cols => k as usize,
        _ => {
            return Err(tau.mismatch(
                format!("shape {batch_dims:?} + [k] with k <= {}", shape.cols),
                format!("shape {:?}", tau.dims()),
            ))
        }
    };
    let (m, n) = (lapack_dim(&x, shape.rows)?, lapack_dim(&x, shape.cols)?);
    let reflectors = lapack_dim(&tau, k)?;
    let lda = m.max(1);
    x.copy_into(&x_out)?;
    // No columns to form (m >= n, so this covers m = 0). With k = 0 LAPACK still has work to
    // do: Q is then the first n columns of the identity.
    if shape.batch == 0 || shape.cols == 0 {
        return Ok(());
    }
    let orgqr = routine(T::orgqr())?;
    // SAFETY: `x` is no longer read; `tau` is an argument, distinct from the result.
    let (x_out, tau) = unsafe { (x_out.as_mut_slice::<T>()?, tau.as_slice::<T>()?) };
    let x_out = SharedMut(x_out.as_mut_ptr());
    // Every matrix has the same shape, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        orgqr(
            &m,
            &n,
            &reflectors,
            x_out.at(0),
            &lda,
            tau.as_ptr(),
            work,
            lwork,
            info,
        )
    })?;
    let matrix_len = shape.matrix_len();
    let flops = matrix_len.saturating_mul(2 * k.max(1));
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        let mut info = 0;
        for b in range {
            // SAFETY: matrix `b` is written by this task alone; LAPACK touches exactly
            // `lda * n` elements, reads `k` taus and uses `lwork` elements of `work`.
            unsafe {
                orgqr(
                    &m,
                    &n,
                    &reflectors,
                    x_out.at(b * matrix_len),
                    &lda,
                    tau[b * k..].as_ptr(),
                    work.as_mut_ptr(),
                    &lwork,
                    &mut info,
                )
            };
            check_info("orgqr", info)?;
        }
        Ok(())
    })
}
