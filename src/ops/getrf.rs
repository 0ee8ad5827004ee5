//! `getrf`: LU factorization with partial pivoting, LAPACK's contract as jaxlib's
//! `lapack_?getrf_ffi` / `cusolver_getrf_ffi`: column-major `[..., m, n]` in, packed LU
//! (aliasing the input), 1-based S32 pivots `[..., min(m, n)]` and S32 `info` `[...]` out.

use crate::cuda::cublas::{Batched, Blas};
use crate::cuda::cusolver::{Dense, Solver};
use crate::ffi::{
    Buffer, DataType, MatrixBatch, NativeType, Result, ScratchAllocator, Stream, ThreadPool,
};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{
    by_lanes, for_each_chunk, gpu_replacing, gpu_scalar_kind, lapack_dim, routine, small_kernel,
    GpuLibrary, InPlace, Layout, SharedMut,
};
use ferrax_cpu_fallback::Lapack;
use ferrax_kernels::launch::ScalarKind;
use ferrax_kernels::relayout::Strides;
use ferrax_kernels::scalar::Scalar;
use ferrax_kernels::small::simd::{self, LANES};
use ferrax_kernels::small::{getf2, GetrfArgs};
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
/// time ([`simd::getf2`]; [`getf2`] for the rest; LAPACK's unblocked algorithm and output):
/// there one OpenBLAS call costs more than the factorization (per 16×16 f64 matrix, one core:
/// `getf2` 709 ns, `simd::getf2` 570 ns; `benches/cpu_linalg.py`).
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
                    simd::getf2(a, rows, cols, layout, p, info, &mut scratch);
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
    /// Batched LU on the GPU: ferrax's PTX kernels up to 128×128 (as shared memory allows),
    /// cuBLAS's batched or cuSOLVER's looped getrf for the rest.
    pub fn ferrax_cuda_getrf = TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg a: Buffer;
    ret lu: Buffer;
    ret ipiv: Buffer;
    ret info: Buffer;
    traits = 0;
    body = getrf_cuda::<false>;
}

ffi_handler! {
    /// [`ferrax_cuda_getrf`] on row-major matrices (jax's layout, `lu` not aliased): the PTX
    /// kernels read and write them where they are; for the libraries, the batch is copied
    /// column-major and back.
    pub fn ferrax_cuda_getrf_row_major = ROW_MAJOR_TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg a: Buffer;
    ret lu: Buffer;
    ret ipiv: Buffer;
    ret info: Buffer;
    traits = 0;
    body = getrf_cuda::<true>;
}

fn getrf_cuda<const ROW_MAJOR: bool>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    a: Buffer<'_>,
    lu: Buffer<'_>,
    ipiv: Buffer<'_>,
    info: Buffer<'_>,
) -> Result<()> {
    let kind = gpu_scalar_kind(&a)?;
    let shape = expect_shapes(&a, &ipiv, &info)?;
    let gpu = gpu_replacing(stream, &a, &lu)?;
    if shape.batch == 0 {
        return Ok(());
    }
    if shape.rows == 0 || shape.cols == 0 {
        return gpu.zero(info.data_ptr().cast(), shape.batch * 4);
    }
    let (a_ptr, lu_ptr) = (a.data_ptr(), lu.data_ptr());
    let (ipiv, info) = (ipiv.data_ptr(), info.data_ptr());
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::getrf_launch(kind, m, n, batch, max_shared)
    })?
    else {
        let library = GpuLibrary {
            gpu: &gpu,
            scratch: &scratch,
        };
        let dims = [
            lapack_dim(&a, shape.rows)?,
            lapack_dim(&a, shape.cols)?,
            lapack_dim(&a, shape.batch)?,
        ];
        let (a_ptr, lu_ptr) = (a_ptr.cast(), lu_ptr.cast());
        let bytes = shape.batch * shape.matrix_len() * kind.bytes();
        let column_major = if ROW_MAJOR {
            scratch.allocate(bytes, 16)?
        } else {
            gpu.copy(lu_ptr, a_ptr, bytes)?; // a no-op where XLA aliased them
            lu_ptr
        };
        let relayout = |src, dst, from, to| {
            let geometry = [shape.rows, shape.cols, shape.batch];
            // SAFETY: each holds the batch (`a` and `lu` as their shapes say, `column_major`
            // as allocated), distinct buffers.
            unsafe { gpu.copy_matrices(src, dst, kind.bytes(), geometry, from, to, false) }
        };
        let (rows, cols) = (shape.rows as u64, shape.cols as u64);
        let (row_major, lapack) = (
            Strides::row_major(rows, cols),
            Strides::column_major(rows, rows * cols),
        );
        if ROW_MAJOR {
            relayout(a_ptr, column_major, row_major, lapack)?;
        }
        dispatch_lapack!(
            a,
            getrf_library(
                library,
                shape,
                dims,
                kind,
                column_major.cast(),
                ipiv.cast(),
                info.cast()
            )
        )?;
        if ROW_MAJOR {
            relayout(column_major, lu_ptr, lapack, row_major)?;
        }
        return Ok(());
    };
    let args = GetrfArgs {
        src: a_ptr.cast(),
        a: lu_ptr.cast(),
        ipiv: ipiv.cast(),
        info: info.cast(),
        m: shape.rows as u32,
        n: shape.cols as u32,
        batch: shape.batch as u64,
        row_major: ROW_MAJOR as u32,
    };
    // SAFETY: batch m×n matrices in the target's layout read from `a` and written to `lu`
    // (the same buffer where XLA aliased them), min(m, n) pivots and one info each.
    unsafe { gpu.launch(&config, args) }
}

/// Whether cuBLAS's `getrfBatched` (one call for the batch) beats a loop of cuSOLVER's `getrf`:
/// PyTorch's rule (`get_lu_factor_solver_backend`, PR #185344), fitted on about 3800
/// measurements over H100, A100, L40 and RTX 5090 — cuBLAS's batched kernel costs about the
/// same for any batch, the loop grows with it, so cuBLAS wins up to an order that grows with
/// the batch (f32, batch 64: n ≈ 1091; f64: n ≈ 2915). Square matrices only.
pub(crate) fn getrf_uses_cublas_batched(
    kind: ScalarKind,
    m: usize,
    n: usize,
    batch: usize,
) -> bool {
    if m != n || batch < 2 {
        return false;
    }
    let b = batch as f64;
    let cutoff = match (kind, batch) {
        (ScalarKind::F32 | ScalarKind::C64, 2) => 8400.0 * b,
        (ScalarKind::F64 | ScalarKind::C128, 2) => 2200.0 * b,
        (ScalarKind::F32 | ScalarKind::C64, _) => 18600.0 * b,
        (ScalarKind::F64, _) => 16600.0 * b * b.sqrt().floor(),
        (ScalarKind::C128, _) => 5200.0 * b * b.sqrt().floor(),
    };
    (n * n) as f64 <= cutoff
}

/// LU of the batch (`dims`: m, n and the batch as cuSOLVER's integers) in place in `lu`, with
/// cuBLAS or cuSOLVER.
fn getrf_library<T: Dense + Batched>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [m, n, batch]: [i32; 3],
    kind: ScalarKind,
    lu: *mut T,
    ipiv: *mut i32,
    info: *mut i32,
) -> Result<()> {
    let (k, matrix_len) = (shape.rows.min(shape.cols), shape.matrix_len());
    if getrf_uses_cublas_batched(kind, shape.rows, shape.cols, shape.batch) {
        let pointers = library.batch_pointers(lu, matrix_len, shape.batch)?;
        // SAFETY: `batch` pointers to n×n matrices, n pivots and one info each.
        return Blas::on(library.gpu)?.run("getrfBatched", |h| unsafe {
            T::getrf_batched(h, n, pointers, m, ipiv, info, batch)
        });
    }
    let solver = Solver::on(library.gpu)?;
    // SAFETY: a size query on a matrix of the batch.
    let lwork = solver.lwork("getrf_bufferSize", |h, lwork| unsafe {
        T::getrf_buffer_size(h, m, n, lu, m, lwork)
    })?;
    let work = library.workspace::<T>(lwork)?;
    for b in 0..shape.batch {
        // SAFETY: matrix b (m×n, leading dimension m), its k pivots and its info; the
        // workspace is reused in stream order.
        solver.run("getrf", |h| unsafe {
            T::getrf(
                h,
                m,
                n,
                lu.add(b * matrix_len),
                m,
                work,
                ipiv.add(b * k),
                info.add(b),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked examples of PyTorch's rule: cuBLAS up to n = 1091 (f32) and 2915 (f64) for
    /// 64 matrices.
    #[test]
    fn cublas_batched_lu_up_to_pytorchs_orders() {
        assert!(getrf_uses_cublas_batched(ScalarKind::F32, 1091, 1091, 64));
        assert!(!getrf_uses_cublas_batched(ScalarKind::F32, 1092, 1092, 64));
        assert!(getrf_uses_cublas_batched(ScalarKind::F64, 2915, 2915, 64));
        assert!(!getrf_uses_cublas_batched(ScalarKind::F64, 2916, 2916, 64));
        assert!(getrf_uses_cublas_batched(ScalarKind::C64, 128, 128, 1024));
        assert!(getrf_uses_cublas_batched(ScalarKind::C128, 512, 512, 16));
        // Two matrices: cuBLAS only for smaller orders (f64 up to sqrt(2200·2) ≈ 66).
        assert!(getrf_uses_cublas_batched(ScalarKind::F64, 66, 66, 2));
        assert!(!getrf_uses_cublas_batched(ScalarKind::F64, 67, 67, 2));
    }

    #[test]
    fn rectangular_or_single_lu_goes_to_cusolver() {
        assert!(!getrf_uses_cublas_batched(ScalarKind::F32, 128, 96, 4096));
        assert!(!getrf_uses_cublas_batched(ScalarKind::F32, 128, 128, 1));
    }
}
