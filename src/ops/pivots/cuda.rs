//! The CUDA handler of pivots to permutation: one launch of ferrax's PTX kernel for the batch.

use super::{Pivots, LU_PIVOTS_TO_PERMUTATION};
use crate::cuda::GpuStream;
use crate::ffi::{Result, Stream};
use crate::ffi_handlers;

ffi_handlers! {
    /// Pivots to permutation on the GPU, one launch for the whole batch.
    pub fn ferrax_cuda_lu_pivots_to_permutation(LU_PIVOTS_TO_PERMUTATION, Cuda) {
        ctx stream: Stream;
        operands ops: Pivots;
        body = pivots_cuda;
    }
}

fn pivots_cuda(stream: Stream, ops: Pivots<'_>) -> Result<()> {
    let (batch, k, size) = ops.dimensions()?;
    let Pivots {
        pivots,
        permutation,
    } = ops;
    if batch == 0 {
        return Ok(());
    }
    // `dimensions` bounds both: k <= size <= i32::MAX.
    let (k, size) = (k as u32, size as u32);
    let gpu = GpuStream::adopt(stream)?;
    let batch = batch as u64;
    let config = ferrax_kernels::pivots::launch_config(
        batch,
        k,
        size,
        gpu.multiprocessors()?,
        gpu.max_shared_bytes()?,
    );
    let args = ferrax_kernels::pivots::PivotsArgs {
        pivots: pivots.ptr().cast_const(),
        permutation: permutation.ptr(),
        batch,
        k,
        size,
    };
    // SAFETY: batch*k pivots and batch*size permutation entries.
    unsafe { gpu.launch(&config, args) }
}
