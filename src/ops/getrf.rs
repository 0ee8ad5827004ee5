//! `getrf`: LU factorization with partial pivoting, LAPACK's contract as jaxlib's
//! `lapack_?getrf_ffi` / `cusolver_getrf_ffi`: column-major `[..., m, n]` in, packed LU
//! (aliasing the input), 1-based S32 pivots `[..., min(m, n)]` and S32 `info` `[...]` out.

use crate::ffi::{Buffer, DataType, MatrixBatch, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{for_each_parallel, lapack_dim, routine, SharedMut};
use ferrax_cpu_fallback::Lapack;
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_getrf";

ffi_handler! {
    /// LU factorization on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_getrf = TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    ret lu: Buffer;
    ret ipiv: Buffer;
    ret info: Buffer;
    traits = 0;
    body = getrf_cpu;
}

fn getrf_cpu(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    lu: Buffer<'_>,
    ipiv: Buffer<'_>,
    info: Buffer<'_>,
) -> Result<()> {
    dispatch_lapack!(a, getrf_typed(pool, a, lu, ipiv, info))
}

fn getrf_typed<T: NativeType + Lapack>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    lu: Buffer<'_>,
    ipiv: Buffer<'_>,
    info: Buffer<'_>,
) -> Result<()> {
    let shape = MatrixBatch::of(&a)?;
    let batch_dims = shape.batch_dims(&a);
    let k = shape.rows.min(shape.cols);
    ipiv.expect_dtype(DataType::S32)?;
    ipiv.expect_dims(&[batch_dims, &[k as i64]].concat())?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(batch_dims)?;
    let (m, n) = (lapack_dim(&a, shape.rows)?, lapack_dim(&a, shape.cols)?);
    let lda = m.max(1);
    a.copy_into(&lu)?;
    if shape.batch == 0 {
        return Ok(());
    }
    let getrf = routine(T::getrf())?;
    // SAFETY: `a` is no longer read; the results are distinct buffers.
    let (lu, ipiv, info) = unsafe {
        (
            lu.as_mut_slice::<T>()?,
            ipiv.as_mut_slice::<i32>()?,
            info.as_mut_slice::<i32>()?,
        )
    };
    let (lu, ipiv, info) = (
        SharedMut(lu.as_mut_ptr()),
        SharedMut(ipiv.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    let matrix_len = shape.matrix_len();
    let flops = (shape.rows * shape.cols * k.max(1)).max(1);
    for_each_parallel(&pool, shape.batch, flops, &|b| {
        // SAFETY: matrix `b` of each result is written by this task alone; LAPACK reads and
        // writes exactly `lda * n` elements, `min(m, n)` pivots and one info.
        unsafe {
            getrf(
                &m,
                &n,
                lu.at(b * matrix_len),
                &lda,
                ipiv.at(b * k),
                info.at(b),
            )
        };
        Ok(())
    })
}
