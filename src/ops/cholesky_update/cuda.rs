//! The CUDA handler of `cholesky_update`: ferrax's PTX kernels on XLA's stream.

use super::CHOLESKY_UPDATE;
use crate::cuda::{GpuScalar, GpuStream};
use crate::ffi::{Array, Matrices, Result, ScratchAllocator, Stream};
use crate::ffi_handlers;

ffi_handlers! {
    /// Batched rank-1 Cholesky update on the GPU; `w` is used as workspace.
    pub fn ferrax_cuda_cholesky_update(CHOLESKY_UPDATE, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        arg r: Matrices<T>;
        arg w: Array<T>;
        ret r_out: Matrices<T>;
        ret w_out: Array<T>;
        dtype T: GpuScalar = r;
        body = cholesky_update_cuda;
    }
}

fn cholesky_update_cuda<T: GpuScalar>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    r: Matrices<'_, T>,
    w: Array<'_, T>,
    r_out: Matrices<'_, T>,
    w_out: Array<'_, T>,
) -> Result<()> {
    let kind = T::KIND;
    r.expect_square()?;
    let shape = r.shape;
    let vector = [r.batch_dims(), &[shape.rows as i64]].concat();
    w.expect_dims(&vector)?;
    r_out.expect_dims(r.dims())?;
    w_out.expect_dims(&vector)?;
    if shape.batch == 0 || shape.rows == 0 {
        return Ok(());
    }
    let Ok(n) = u32::try_from(shape.rows) else {
        return Err(r.mismatch("n < 2^32".into(), format!("n = {}", shape.rows)));
    };
    let gpu = GpuStream::adopt(stream)?;
    let bytes = kind.bytes();
    // The kernel works in place; XLA normally aliases the results to the operands.
    gpu.copy(
        r_out.ptr().cast(),
        r.ptr().cast(),
        shape.batch * shape.matrix_len() * bytes,
    )?;
    gpu.copy(
        w_out.ptr().cast(),
        w.ptr().cast(),
        shape.batch * shape.rows * bytes,
    )?;
    let batch = shape.batch as u64;
    let (config, scratch_bytes) =
        ferrax_kernels::cholesky_update::launch_config(kind, n, batch, gpu.multiprocessors()?);
    let workspace = if scratch_bytes > 0 {
        let p = scratch.allocate(scratch_bytes, 16)?;
        gpu.zero(p, scratch_bytes)?;
        p
    } else {
        std::ptr::null_mut()
    };
    let args = ferrax_kernels::cholesky_update::CholeskyUpdateArgs {
        r: r_out.ptr().cast(),
        w: w_out.ptr().cast(),
        n,
        batch,
        scratch: workspace.cast(),
    };
    // SAFETY: batch matrices of n*n and vectors of n elements of `kind`, and the zeroed
    // scratch the plan asked for. The scratch is freed after the call returns, stream-ordered
    // after the kernel.
    unsafe { gpu.launch(&config, args) }
}
