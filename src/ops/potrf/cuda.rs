//! The CUDA handlers of the Cholesky family: ferrax's PTX kernels for small matrices,
//! cuSOLVER for the rest.

use super::{Cholesky, Potrf, CHOLESKY, POTRF};
use crate::cuda::cusolver::{Dense, Fill, Solver};
use crate::cuda::{library_int, small_kernel, GpuLibrary, GpuScalar, GpuStream};
use crate::ffi::{Error, MatrixBatch, Result, ScratchAllocator, Stream};
use crate::ffi_handlers;
use ferrax_kernels::small::{CholeskyArgs, PotrfArgs};

ffi_handlers! {
    /// Batched Cholesky on the GPU: ferrax's PTX kernels up to 128×128 (as shared memory
    /// allows), cuSOLVER's batched or single potrf for the rest.
    pub fn ferrax_cuda_potrf(POTRF, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Potrf;
        dtype T: GpuScalar = a;
        body = potrf_cuda;
    }

    /// jax's whole `cholesky` on the GPU, on row-major arrays as the CPU handler: ferrax's
    /// kernels (warp kernels up to 32, a block per matrix up to 48), one pass over memory
    /// (`install()` sends larger matrices through jax's steps, i.e. [`ferrax_cuda_potrf`]).
    pub fn ferrax_cuda_cholesky(CHOLESKY, Cuda) {
        ctx stream: Stream;
        operands ops: Cholesky;
        dtype T: GpuScalar = a;
        body = cholesky_cuda;
    }
}

fn cholesky_cuda<T: GpuScalar>(stream: Stream, ops: Cholesky<'_, T>) -> Result<()> {
    let shape = ops.shape()?;
    let Cholesky {
        a,
        l,
        symmetrize_input,
    } = ops;
    let gpu = GpuStream::adopt(stream)?;
    if shape.batch == 0 || shape.rows == 0 {
        return Ok(());
    }
    let n = u32::try_from(shape.rows).ok();
    let Some(config) =
        n.and_then(|n| ferrax_kernels::small::cholesky_launch(T::KIND, n, shape.batch as u64))
    else {
        let max = ferrax_kernels::small::FUSED_CHOLESKY_BLOCK_MAX;
        let limit = if shape.rows <= max as usize {
            // Only a batch that needs more than 2^31 - 1 blocks of the warp kernels.
            format!("batches of up to 2^31 - 1 blocks, got {} matrices", shape.batch)
        } else {
            format!("matrices up to {max}×{max}, got {}×{}", shape.rows, shape.cols)
        };
        return Err(Error::unimplemented(format!(
            "{}: on CUDA its kernels take {limit} (jax's cholesky steps with ferrax_potrf take \
             any shape)",
            CHOLESKY.to_string_lossy(),
        )));
    };
    let args = CholeskyArgs {
        a: a.ptr().cast_const().cast(),
        l: l.ptr().cast(),
        n: shape.rows as u32,
        batch: shape.batch as u64,
        symmetrize: symmetrize_input as u32,
    };
    // SAFETY: batch row-major n×n matrices in `a` and in `l`.
    unsafe { gpu.launch(&config, args) }
}

fn potrf_cuda<T: GpuScalar>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    ops: Potrf<'_, T>,
) -> Result<()> {
    let shape = ops.shape()?;
    let Potrf {
        a,
        factor,
        info,
        uplo,
    } = ops;
    let lower = u32::from(uplo.is_lower());
    if shape.batch == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    // A no-op where XLA aliased them, as jax's lowerings ask.
    gpu.copy(
        factor.ptr().cast(),
        a.ptr().cast(),
        shape.batch * shape.matrix_len() * T::KIND.bytes(),
    )?;
    if shape.rows == 0 {
        return gpu.zero(info.ptr().cast(), shape.batch * 4);
    }
    let Some(config) = small_kernel(&gpu, shape, |n, _, batch, max_shared| {
        ferrax_kernels::small::potrf_launch(T::KIND, n, batch, max_shared)
    })?
    else {
        let library = GpuLibrary::new(&gpu, &scratch);
        let dims = [library_int("order", shape.rows)?, library_int("batch", shape.batch)?];
        let fill = if lower == 1 {
            Fill::CUBLAS_FILL_MODE_LOWER
        } else {
            Fill::CUBLAS_FILL_MODE_UPPER
        };
        return potrf_library(library, shape, dims, fill, factor.ptr(), info.ptr());
    };
    let (factor, info) = (factor.ptr(), info.ptr());
    let args = PotrfArgs {
        a: factor.cast(),
        info,
        n: shape.rows as u32,
        batch: shape.batch as u64,
        lower,
    };
    // SAFETY: batch column-major n×n matrices and one info each.
    unsafe { gpu.launch(&config, args) }
}

/// Cholesky of the batch (`dims`: n and the batch) in place in `factor`: cuSOLVER's
/// `potrfBatched` for more than one matrix (one call, no workspace but the other triangle,
/// which it overwrites; 10-40× a loop of `potrf` for 16-256 matrices of order 32-512 in MLX's
/// and PyTorch's measurements), `potrf` for one.
fn potrf_library<T: Dense>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [n, batch]: [i32; 2],
    fill: Fill,
    factor: *mut T,
    info: *mut i32,
) -> Result<()> {
    let solver = Solver::on(library.gpu)?;
    if shape.batch > 1 {
        let pointers = library.batch_pointers(factor, shape.matrix_len(), shape.batch)?;
        // SAFETY: `batch` pointers to n×n matrices and one info each.
        return solver.run("potrfBatched", |h| unsafe {
            T::potrf_batched(h, fill, n, pointers, n, info, batch)
        });
    }
    // SAFETY: a size query on the one matrix.
    let lwork = solver.lwork("potrf_bufferSize", |h, lwork| unsafe {
        T::potrf_buffer_size(h, fill, n, factor, n, lwork)
    })?;
    let work = library.workspace::<T>(lwork)?;
    // SAFETY: the n×n matrix, its workspace and its info.
    solver.run("potrf", |h| unsafe {
        T::potrf(h, fill, n, factor, n, work, lwork, info)
    })
}
