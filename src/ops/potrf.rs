//! `potrf`: Cholesky factorization, jaxlib's `lapack_?potrf_ffi` contract: column-major
//! `[..., n, n]` in, the factor in the `uplo` triangle (aliasing the input; the other triangle
//! keeps the input) and S32 `info` `[...]` out. Attribute `uplo`: u8 'L' or 'U'.

use crate::ffi::{Buffer, DataType, MatrixBatch, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{char_attr, for_each_parallel, lapack_dim, routine, SharedMut};
use ferrax_cpu_fallback::Lapack;
use std::ffi::{c_char, CStr};

pub const TARGET: &CStr = c"ferrax_potrf";

ffi_handler! {
    /// Cholesky factorization on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_potrf = TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    ret factor: Buffer;
    ret info: Buffer;
    attr uplo: u8;
    traits = 0;
    body = potrf_cpu;
}

fn potrf_cpu(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    factor: Buffer<'_>,
    info: Buffer<'_>,
    uplo: u8,
) -> Result<()> {
    let uplo = char_attr("uplo", uplo, b"LU")?;
    dispatch_lapack!(a, potrf_typed(pool, a, factor, info, uplo))
}

fn potrf_typed<T: NativeType + Lapack>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    factor: Buffer<'_>,
    info: Buffer<'_>,
    uplo: c_char,
) -> Result<()> {
    let shape = MatrixBatch::square(&a)?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(shape.batch_dims(&a))?;
    let n = lapack_dim(&a, shape.rows)?;
    let lda = n.max(1);
    a.copy_into(&factor)?;
    if shape.batch == 0 {
        return Ok(());
    }
    let potrf = routine(T::potrf())?;
    // SAFETY: `a` is no longer read; the results are distinct buffers.
    let (factor, info) = unsafe { (factor.as_mut_slice::<T>()?, info.as_mut_slice::<i32>()?) };
    let (factor, info) = (SharedMut(factor.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    let matrix_len = shape.matrix_len();
    let flops = (shape.rows.pow(3) / 3).max(1);
    for_each_parallel(&pool, shape.batch, flops, &|b| {
        // SAFETY: matrix `b` and its info are written by this task alone.
        unsafe { potrf(&uplo, &n, factor.at(b * matrix_len), &lda, info.at(b)) };
        Ok(())
    })
}
