//! The CUDA handlers of `getrf`: ferrax's PTX kernels for small matrices, cuBLAS's batched or
//! cuSOLVER's looped getrf for the rest.

use super::{Getrf, GETRF, GETRF_ROW_MAJOR};
use crate::cuda::cublas::{Batched, Blas};
use crate::cuda::cusolver::{Dense, Solver};
use crate::cuda::{library_dims, small_kernel, GpuLibrary, GpuScalar, GpuStream};
use crate::ffi::{MatrixBatch, Result, ScratchAllocator, Stream};
use crate::ffi_handlers;
use ferrax_kernels::launch::ScalarKind;
use ferrax_kernels::relayout::Strides;
use ferrax_kernels::small::GetrfArgs;

ffi_handlers! {
    /// Batched LU on the GPU: ferrax's PTX kernels up to 128×128 (as shared memory allows),
    /// cuBLAS's batched or cuSOLVER's looped getrf for the rest.
    pub fn ferrax_cuda_getrf(GETRF, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Getrf;
        dtype T: GpuScalar = a;
        body = getrf_cuda::<T, false>;
    }

    /// [`ferrax_cuda_getrf`] on row-major matrices (jax's layout, `lu` not aliased): the PTX
    /// kernels read and write them where they are; for the libraries, the batch is copied
    /// column-major and back.
    pub fn ferrax_cuda_getrf_row_major(GETRF_ROW_MAJOR, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Getrf;
        dtype T: GpuScalar = a;
        body = getrf_cuda::<T, true>;
    }
}

fn getrf_cuda<T: GpuScalar, const ROW_MAJOR: bool>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    ops: Getrf<'_, T>,
) -> Result<()> {
    let kind = T::KIND;
    let shape = ops.shape()?;
    let Getrf { a, lu, ipiv, info } = ops;
    let gpu = GpuStream::adopt(stream)?;
    if shape.batch == 0 {
        return Ok(());
    }
    if shape.rows == 0 || shape.cols == 0 {
        return gpu.zero(info.ptr().cast(), shape.batch * 4);
    }
    let (a_ptr, lu_ptr) = (a.ptr(), lu.ptr());
    let (ipiv, info) = (ipiv.ptr(), info.ptr());
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::getrf_launch(kind, m, n, batch, max_shared)
    })?
    else {
        let library = GpuLibrary::new(&gpu, &scratch);
        let dims = library_dims(shape)?;
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
        getrf_library::<T>(library, shape, dims, kind, column_major.cast(), ipiv, info)?;
        if ROW_MAJOR {
            relayout(column_major, lu_ptr, lapack, row_major)?;
        }
        return Ok(());
    };
    let args = GetrfArgs {
        src: a_ptr.cast(),
        a: lu_ptr.cast(),
        ipiv,
        info,
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
