//! `potrf`: Cholesky factorization, jaxlib's `lapack_?potrf_ffi` contract: column-major
//! `[..., n, n]` in, the factor in the `uplo` triangle (aliasing the input; the other triangle
//! keeps the input) and S32 `info` `[...]` out. Attribute `uplo`: u8 'L' or 'U'. The CUDA
//! handler takes the same contract (jaxlib's `cusolver_potrf_ffi` has a `lower` flag instead).

use crate::cuda::param;
use crate::ffi::{Buffer, DataType, MatrixBatch, NativeType, Result, Stream, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{
    by_lanes, char_attr, for_each_chunk, for_each_parallel, gpu_in_place, gpu_scalar_kind,
    lapack_dim, routine, small_matrix_launch, SharedMut,
};
use ferrax_cpu_fallback::Lapack;
use ferrax_kernels::small::lanes::{self, LANES};
use ferrax_kernels::small::{potf2, Scalar};
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

fn expect_shapes(a: &Buffer<'_>, info: &Buffer<'_>) -> Result<MatrixBatch> {
    let shape = MatrixBatch::square(a)?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(shape.batch_dims(a))?;
    Ok(shape)
}

/// Up to this order the CPU handler factors in Rust, [`LANES`] matrices at a time
/// ([`lanes::potf2`]; [`potf2`] for the rest): there one OpenBLAS
/// call costs more than the factorization (per 16×16 f64 matrix, one core: OpenBLAS 470 ns,
/// `potf2` 740 ns, `lanes::potf2` 376 ns; at 32 OpenBLAS is faster).
pub const CPU_SMALL_MAX: usize = 16;

fn potrf_typed<T: NativeType + Lapack + Scalar>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    factor: Buffer<'_>,
    info: Buffer<'_>,
    uplo: c_char,
) -> Result<()> {
    let shape = expect_shapes(&a, &info)?;
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
    let lower = uplo == b'L' as c_char;
    if shape.rows <= CPU_SMALL_MAX {
        let order = shape.rows;
        return for_each_chunk(&pool, shape.batch, flops, &|range| {
            // SAFETY: the slices cover exactly `count` matrices and infos from `first`, items of
            // this chunk, which this task alone writes.
            let matrices = |first: usize, count: usize| unsafe {
                (
                    factor.slice(first * matrix_len, count * matrix_len),
                    info.slice(first, count),
                )
            };
            let one = |b: usize| {
                let (a, info) = matrices(b, 1);
                info[0] = potf2(a, order, order.max(1), lower);
            };
            let mut scratch = vec![<T as Scalar>::ZERO; LANES * matrix_len];
            let group = |first: usize| {
                let (a, info) = matrices(first, LANES);
                let info = info.try_into().expect("LANES infos");
                lanes::potf2(a, order, lower, info, &mut scratch);
            };
            by_lanes(range, group, one);
            Ok(())
        });
    }
    for_each_parallel(&pool, shape.batch, flops, &|b| {
        // SAFETY: matrix `b` and its info are written by this task alone.
        unsafe { potrf(&uplo, &n, factor.at(b * matrix_len), &lda, info.at(b)) };
        Ok(())
    })
}

ffi_handler! {
    /// Batched Cholesky of small matrices on the GPU (ferrax's PTX kernels, up to 64×64; jax's
    /// own cuSOLVER lowering serves larger ones).
    pub fn ferrax_cuda_potrf = TARGET;
    ctx stream: Stream;
    arg a: Buffer;
    ret factor: Buffer;
    ret info: Buffer;
    attr uplo: u8;
    traits = 0;
    body = potrf_cuda;
}

fn potrf_cuda(
    stream: Stream,
    a: Buffer<'_>,
    factor: Buffer<'_>,
    info: Buffer<'_>,
    uplo: u8,
) -> Result<()> {
    let lower = u32::from(char_attr("uplo", uplo, b"LU")? == b'L' as c_char);
    let kind = gpu_scalar_kind(&a)?;
    let shape = expect_shapes(&a, &info)?;
    if shape.batch == 0 {
        return factor.expect_dims(a.dims());
    }
    let gpu = gpu_in_place(stream, &a, &factor, shape, kind)?;
    if shape.rows == 0 {
        return gpu.zero(info.data_ptr().cast(), shape.batch * 4);
    }
    let config = small_matrix_launch(TARGET, shape, |n, _, batch| {
        ferrax_kernels::small::potrf_launch(kind, n, batch)
    })?;
    let (n, batch) = (shape.rows as u32, shape.batch as u64);
    let (factor, info) = (factor.data_ptr(), info.data_ptr());
    let mut params = [
        param(&factor),
        param(&info),
        param(&n),
        param(&batch),
        param(&lower),
    ];
    // SAFETY: batch column-major n×n matrices and one info each.
    unsafe { gpu.launch(&config, &mut params) }
}
