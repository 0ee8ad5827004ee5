//! `getrf`: LU factorization with partial pivoting, LAPACK's contract as jaxlib's
//! `lapack_?getrf_ffi` / `cusolver_getrf_ffi`: column-major `[..., m, n]` in, packed LU
//! (aliasing the input), 1-based S32 pivots `[..., min(m, n)]` and S32 `info` `[...]` out.

use crate::cuda::param;
use crate::ffi::{Buffer, DataType, MatrixBatch, NativeType, Result, Stream, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{
    by_lanes, for_each_chunk, for_each_parallel, gpu_in_place, gpu_scalar_kind, lapack_dim,
    routine, small_matrix_launch, SharedMut,
};
use ferrax_cpu_fallback::Lapack;
use ferrax_kernels::small::lanes::{self, LANES};
use ferrax_kernels::small::{getf2, Scalar};
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

/// Checks the pivot and info results against `a [..., m, n]` and returns its shape.
fn expect_shapes(a: &Buffer<'_>, ipiv: &Buffer<'_>, info: &Buffer<'_>) -> Result<MatrixBatch> {
    let shape = MatrixBatch::of(a)?;
    let batch_dims = shape.batch_dims(a);
    let k = shape.rows.min(shape.cols);
    ipiv.expect_dtype(DataType::S32)?;
    ipiv.expect_dims(&[batch_dims, &[k as i64]].concat())?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(batch_dims)?;
    Ok(shape)
}

/// Up to this many rows and columns the CPU handler factors in Rust, [`LANES`] matrices at a
/// time ([`lanes::getf2`]; [`getf2`] for the rest; LAPACK's unblocked algorithm and output):
/// there one OpenBLAS call costs more than the factorization (per 16×16 f64 matrix, one core:
/// `getf2` 709 ns, `lanes::getf2` 570 ns; `benches/cpu_linalg.py`).
pub const CPU_SMALL_MAX: usize = 16;

fn getrf_typed<T: NativeType + Lapack + Scalar>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    lu: Buffer<'_>,
    ipiv: Buffer<'_>,
    info: Buffer<'_>,
) -> Result<()> {
    let shape = expect_shapes(&a, &ipiv, &info)?;
    let k = shape.rows.min(shape.cols);
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
    if shape.rows.max(shape.cols) <= CPU_SMALL_MAX {
        let (rows, cols) = (shape.rows, shape.cols);
        return for_each_chunk(&pool, shape.batch, flops, &|range| {
            // SAFETY: the slices cover exactly `count` matrices, pivots and infos from `first`,
            // items of this chunk, which this task alone writes.
            let matrices = |first: usize, count: usize| unsafe {
                (
                    lu.slice(first * matrix_len, count * matrix_len),
                    ipiv.slice(first * k, count * k),
                    info.slice(first, count),
                )
            };
            let mut scratch = vec![<T as Scalar>::ZERO; LANES * matrix_len];
            by_lanes(
                range,
                |first| {
                    let (a, p, info) = matrices(first, LANES);
                    let info = info.try_into().expect("LANES infos");
                    lanes::getf2(a, rows, cols, p, info, &mut scratch);
                },
                |b| {
                    let (a, p, info) = matrices(b, 1);
                    info[0] = getf2(a, rows, cols, rows.max(1), p);
                },
            );
            Ok(())
        });
    }
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

ffi_handler! {
    /// Batched LU of small matrices on the GPU (ferrax's PTX kernels, up to 64×64; jax's own
    /// cuSOLVER lowering serves larger ones).
    pub fn ferrax_cuda_getrf = TARGET;
    ctx stream: Stream;
    arg a: Buffer;
    ret lu: Buffer;
    ret ipiv: Buffer;
    ret info: Buffer;
    traits = 0;
    body = getrf_cuda;
}

fn getrf_cuda(
    stream: Stream,
    a: Buffer<'_>,
    lu: Buffer<'_>,
    ipiv: Buffer<'_>,
    info: Buffer<'_>,
) -> Result<()> {
    let kind = gpu_scalar_kind(&a)?;
    let shape = expect_shapes(&a, &ipiv, &info)?;
    if shape.batch == 0 {
        return lu.expect_dims(a.dims());
    }
    let gpu = gpu_in_place(stream, &a, &lu, shape, kind)?;
    if shape.rows == 0 || shape.cols == 0 {
        return gpu.zero(info.data_ptr().cast(), shape.batch * 4);
    }
    let config = small_matrix_launch(TARGET, shape, |m, n, batch| {
        ferrax_kernels::small::getrf_launch(kind, m, n, batch)
    })?;
    let (m, n, batch) = (shape.rows as u32, shape.cols as u32, shape.batch as u64);
    let (lu, ipiv, info) = (lu.data_ptr(), ipiv.data_ptr(), info.data_ptr());
    let mut params = [
        param(&lu),
        param(&ipiv),
        param(&info),
        param(&m),
        param(&n),
        param(&batch),
    ];
    // SAFETY: batch column-major m×n matrices, min(m, n) pivots and one info each.
    unsafe { gpu.launch(&config, &mut params) }
}
