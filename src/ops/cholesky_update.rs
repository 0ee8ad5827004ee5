//! `cholesky_update`: the rank-1 update of an upper Cholesky factor, `R'ᴴR' = RᴴR + wwᴴ`, as
//! jaxlib's `cu_cholesky_update_ffi` (R row-major, results aliased to the operands), but
//! batched (`[..., n, n]` with `[..., n]`) and for all four dtypes.

use crate::cuda::GpuStream;
use crate::ffi::{Buffer, MatrixBatch, Result, ScratchAllocator, Stream};
use crate::ffi_handler;
use crate::ops::gpu_scalar_kind;
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_cholesky_update";

ffi_handler! {
    /// Batched rank-1 Cholesky update on the GPU; `w` is used as workspace.
    pub fn ferrax_cuda_cholesky_update = TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg r: Buffer;
    arg w: Buffer;
    ret r_out: Buffer;
    ret w_out: Buffer;
    traits = 0;
    body = cholesky_update_cuda;
}

fn cholesky_update_cuda(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    r: Buffer<'_>,
    w: Buffer<'_>,
    r_out: Buffer<'_>,
    w_out: Buffer<'_>,
) -> Result<()> {
    let kind = gpu_scalar_kind(&r)?;
    let shape = MatrixBatch::square(&r)?;
    let batch_dims = shape.batch_dims(&r);
    let vector: Vec<i64> = batch_dims
        .iter()
        .copied()
        .chain([shape.rows as i64])
        .collect();
    w.expect_dtype(r.dtype())?;
    w.expect_dims(&vector)?;
    r_out.expect_dtype(r.dtype())?;
    r_out.expect_dims(r.dims())?;
    w_out.expect_dtype(r.dtype())?;
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
        r_out.data_ptr().cast(),
        r.data_ptr().cast(),
        shape.batch * shape.matrix_len() * bytes,
    )?;
    gpu.copy(
        w_out.data_ptr().cast(),
        w.data_ptr().cast(),
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
        r: r_out.data_ptr().cast(),
        w: w_out.data_ptr().cast(),
        n,
        batch,
        scratch: workspace.cast(),
    };
    // SAFETY: batch matrices of n*n and vectors of n elements of `kind`, and the zeroed
    // scratch the plan asked for. The scratch is freed after the call returns, stream-ordered
    // after the kernel.
    unsafe { gpu.launch(&config, args) }
}
