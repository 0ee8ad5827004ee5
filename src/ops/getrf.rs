//! `getrf`: LU factorization with partial pivoting, LAPACK's contract as jaxlib's
//! `lapack_?getrf_ffi` / `cusolver_getrf_ffi`: column-major `[..., m, n]` in, packed LU
//! (aliasing the input), 1-based S32 pivots `[..., min(m, n)]` and S32 `info` `[...]` out.

use crate::cuda::param;
use crate::ffi::{Buffer, DataType, MatrixBatch, NativeType, Result, Stream, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{
    by_lanes, for_each_chunk, gpu_in_place, gpu_scalar_kind, lapack_dim, routine,
    small_matrix_launch, InPlace, Layout, SharedMut,
};
use ferrax_cpu_fallback::Lapack;
use ferrax_kernels::small::lanes::{self, LANES};
use ferrax_kernels::small::{getf2, Scalar};
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_getrf";
/// The same with jax's own row-major layout for `a` and `lu` (not aliased): the CPU lowering
/// of `lu` calls it, so XLA adds no transposing passes over the batch around the call.
pub const ROW_MAJOR_TARGET: &CStr = c"ferrax_getrf_row_major";

ffi_handler! {
    /// LU factorization on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_getrf = TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    ret lu: Buffer;
    ret ipiv: Buffer;
    ret info: Buffer;
    traits = 0;
    body = getrf_cpu::<false>;
}

ffi_handler! {
    /// [`ferrax_cpu_getrf`] on row-major matrices.
    pub fn ferrax_cpu_getrf_row_major = ROW_MAJOR_TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    ret lu: Buffer;
    ret ipiv: Buffer;
    ret info: Buffer;
    traits = 0;
    body = getrf_cpu::<true>;
}

fn getrf_cpu<const ROW_MAJOR: bool>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    lu: Buffer<'_>,
    ipiv: Buffer<'_>,
    info: Buffer<'_>,
) -> Result<()> {
    let layout = if ROW_MAJOR {
        Layout::RowMajor
    } else {
        Layout::ColumnMajor
    };
    dispatch_lapack!(a, getrf_typed(pool, a, lu, ipiv, info, layout))
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
    layout: Layout,
) -> Result<()> {
    let shape = expect_shapes(&a, &ipiv, &info)?;
    let input = InPlace::<T>::new(&a, &lu)?;
    let k = shape.rows.min(shape.cols);
    let (m, n) = (lapack_dim(&a, shape.rows)?, lapack_dim(&a, shape.cols)?);
    let lda = m.max(1);
    if shape.batch == 0 {
        return Ok(());
    }
    let getrf = routine(T::getrf())?;
    // SAFETY: the results are distinct buffers.
    let (ipiv, info) = unsafe { (ipiv.as_mut_slice::<i32>()?, info.as_mut_slice::<i32>()?) };
    let (ipiv, info) = (SharedMut(ipiv.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    let matrix_len = shape.matrix_len();
    let (rows, cols) = (shape.rows, shape.cols);
    let flops = (rows * cols * k.max(1)).max(1);
    // SAFETY: the slices cover exactly `count` pivots and infos from `first`, items of the
    // calling task, which it alone writes.
    let pivots = |first: usize, count: usize| unsafe {
        (ipiv.slice(first * k, count * k), info.slice(first, count))
    };
    if rows.max(cols) <= CPU_SMALL_MAX {
        return for_each_chunk(&pool, shape.batch, flops, &|range| {
            let mut scratch = vec![<T as Scalar>::ZERO; LANES * matrix_len];
            let mut transposed = Vec::new();
            by_lanes(
                range,
                |first| {
                    // SAFETY: matrices of this task, which it alone writes.
                    let a = unsafe { input.load(first * matrix_len, LANES * matrix_len) };
                    let (p, info) = pivots(first, LANES);
                    let info = info.try_into().expect("LANES infos");
                    lanes::getf2(a, rows, cols, layout, p, info, &mut scratch);
                },
                |b| {
                    let (p, info) = pivots(b, 1);
                    // SAFETY: matrix `b`, which this task alone writes.
                    info[0] = unsafe {
                        input.column_major(
                            b * matrix_len,
                            rows,
                            cols,
                            layout,
                            &mut transposed,
                            |a| getf2(a, rows, cols, rows.max(1), p),
                        )
                    };
                },
            );
            Ok(())
        });
    }
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut transposed = Vec::new();
        for b in range {
            let (p, info) = pivots(b, 1);
            // SAFETY: matrix `b`, which this task alone writes; LAPACK reads and writes exactly
            // `lda * n` elements of it, `min(m, n)` pivots and one info.
            unsafe {
                input.column_major(b * matrix_len, rows, cols, layout, &mut transposed, |a| {
                    getrf(&m, &n, a.as_mut_ptr(), &lda, p.as_mut_ptr(), &mut info[0])
                })
            };
        }
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
