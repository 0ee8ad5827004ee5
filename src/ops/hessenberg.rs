//! `gehrd`: reduction to upper Hessenberg form, jaxlib's `lapack_?gehrd_ffi` contract:
//! column-major `[..., n, n]` in; `x_out` (aliasing the input: H on and above the first
//! subdiagonal, the reflectors below it), `tau` `[..., n - 1]` and S32 `info` `[...]` out.
//! Attributes `low` and `high`: S32, LAPACK's `ilo` and `ihi` (jax passes 1 and n).

use crate::ffi::{Buffer, DataType, Error, MatrixBatch, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{for_each_chunk, lapack_dim, query_lwork, routine, Scalar, SharedMut};
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_gehrd";

ffi_handler! {
    /// Hessenberg reduction on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_gehrd = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret tau: Buffer;
    ret info: Buffer;
    attr low: i32;
    attr high: i32;
    traits = 0;
    body = gehrd_cpu;
}

fn gehrd_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    tau: Buffer<'_>,
    info: Buffer<'_>,
    low: i32,
    high: i32,
) -> Result<()> {
    dispatch_lapack!(x, gehrd_typed(pool, x, x_out, tau, info, low, high))
}

/// LAPACK's bounds `1 <= ilo <= max(1, n)` and `min(ilo, n) <= ihi <= n`, checked here so that
/// a bad attribute is an error naming it rather than LAPACK's `info < 0` (and xerbla's print).
fn check_bounds(n: i32, low: i32, high: i32) -> Result<()> {
    if !(1..=n.max(1)).contains(&low) {
        return Err(Error::invalid_argument(format!(
            "attribute 'low': expected 1 <= low <= max(1, n) = {}, got {low}",
            n.max(1)
        )));
    }
    if !(low.min(n)..=n).contains(&high) {
        return Err(Error::invalid_argument(format!(
            "attribute 'high': expected min(low, n) = {} <= high <= n = {n}, got {high}",
            low.min(n)
        )));
    }
    Ok(())
}

fn gehrd_typed<T: Scalar>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    tau: Buffer<'_>,
    info: Buffer<'_>,
    low: i32,
    high: i32,
) -> Result<()> {
    let shape = MatrixBatch::square(&x)?;
    let batch_dims = shape.batch_dims(&x);
    // n - 1 reflectors; none (not -1) for n = 0, which jax never lowers but a raw call may pass.
    let reflectors = shape.rows.saturating_sub(1);
    tau.expect_dtype(T::DTYPE)?;
    tau.expect_dims(&[batch_dims, &[reflectors as i64]].concat())?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(batch_dims)?;
    let n = lapack_dim(&x, shape.rows)?;
    check_bounds(n, low, high)?;
    x.copy_into(&x_out)?;
    // SAFETY: `x` is no longer read; the results are distinct buffers.
    let (x_out, tau, info) = unsafe {
        (
            x_out.as_mut_slice::<T>()?,
            tau.as_mut_slice::<T>()?,
            info.as_mut_slice::<i32>()?,
        )
    };
    if shape.batch == 0 || n == 0 {
        // What LAPACK answers for n = 0, without calling it with a zero leading dimension.
        info.fill(0);
        return Ok(());
    }
    let lda = n; // n > 0 here, so lda >= max(1, n)
    let gehrd = routine(T::gehrd())?;
    let (x_out, tau, info) = (
        SharedMut(x_out.as_mut_ptr()),
        SharedMut(tau.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    // Every matrix has the same order, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, query_info| unsafe {
        gehrd(
            &n,
            &low,
            &high,
            x_out.at(0),
            &lda,
            tau.at(0),
            work,
            lwork,
            query_info,
        )
    })?;
    let matrix_len = shape.matrix_len();
    // About 10/3 n^3 flops.
    let flops = shape.rows.saturating_pow(3).saturating_mul(10) / 3;
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        for b in range {
            // SAFETY: matrix `b`, its taus and its info are written by this task alone; LAPACK
            // touches `lda * n` elements, `n - 1` taus and `lwork` elements of `work`.
            unsafe {
                gehrd(
                    &n,
                    &low,
                    &high,
                    x_out.at(b * matrix_len),
                    &lda,
                    tau.at(b * reflectors),
                    work.as_mut_ptr(),
                    &lwork,
                    info.at(b),
                )
            };
        }
        Ok(())
    })
}
