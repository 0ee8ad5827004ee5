//! `lu_pivots_to_permutation`: 0-based LAPACK row swaps `[..., k]` to permutations
//! `[..., p]` (p read from the result's shape), as jaxlib's `cu_lu_pivots_to_permutation`.

use crate::cuda::GpuStream;
use crate::ffi::{Buffer, DataType, Result, Stream, ThreadPool};
use crate::ffi_handler;
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_lu_pivots_to_permutation";

ffi_handler! {
    /// Pivots to permutation on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_lu_pivots_to_permutation = TARGET;
    ctx pool: ThreadPool;
    arg pivots: Buffer;
    ret permutation: Buffer;
    traits = 0;
    body = pivots_cpu;
}

/// Checks the operands and returns (batch, k, permutation size).
fn dimensions(pivots: &Buffer<'_>, permutation: &Buffer<'_>) -> Result<(usize, usize, usize)> {
    pivots.expect_dtype(DataType::S32)?;
    permutation.expect_dtype(DataType::S32)?;
    pivots.expect_rank_at_least(1)?;
    let (batch_dims, k) = pivots.dims().split_at(pivots.rank() - 1);
    if permutation.rank() != pivots.rank() || &permutation.dims()[..batch_dims.len()] != batch_dims
    {
        return Err(permutation.mismatch(
            format!("shape {batch_dims:?} + [permutation_size]"),
            format!("shape {:?}", permutation.dims()),
        ));
    }
    let (k, p) = (
        k[0] as usize,
        *permutation.dims().last().unwrap_or(&0) as usize,
    );
    if p < k {
        return Err(permutation.mismatch(
            format!("permutation_size >= {k} (the number of pivots)"),
            format!("{p}"),
        ));
    }
    let batch = permutation.element_count()?.checked_div(p).unwrap_or(0);
    Ok((batch, k, p))
}

fn pivots_cpu(pool: ThreadPool<'_>, pivots: Buffer<'_>, permutation: Buffer<'_>) -> Result<()> {
    let (batch, k, p) = dimensions(&pivots, &permutation)?;
    if batch == 0 {
        return Ok(());
    }
    // SAFETY: the result is distinct from the argument.
    let (pivots, permutation) = unsafe {
        (
            pivots.as_slice::<i32>()?,
            permutation.as_mut_slice::<i32>()?,
        )
    };
    let out = crate::ops::SharedMut(permutation.as_mut_ptr());
    crate::ops::for_each_parallel(&pool, batch, k + p, &|b| {
        // SAFETY: each task writes its own matrix's permutation.
        let perm = unsafe { out.slice(b * p, p) };
        ferrax_kernels::pivots::pivots_to_permutation(&pivots[b * k..(b + 1) * k], perm);
        Ok(())
    })
}

ffi_handler! {
    /// Pivots to permutation on the GPU, one launch for the whole batch.
    pub fn ferrax_cuda_lu_pivots_to_permutation = TARGET;
    ctx stream: Stream;
    arg pivots: Buffer;
    ret permutation: Buffer;
    traits = 0;
    body = pivots_cuda;
}

fn pivots_cuda(stream: Stream, pivots: Buffer<'_>, permutation: Buffer<'_>) -> Result<()> {
    let (batch, k, size) = dimensions(&pivots, &permutation)?;
    if batch == 0 {
        return Ok(());
    }
    let (Ok(k), Ok(size)) = (u32::try_from(k), u32::try_from(size)) else {
        return Err(permutation.mismatch(
            "at most 2^32-1 pivots and permutation entries per matrix".into(),
            format!("k = {k}, permutation_size = {size}"),
        ));
    };
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
        pivots: pivots.data_ptr().cast_const().cast(),
        permutation: permutation.data_ptr().cast(),
        batch,
        k,
        size,
    };
    // SAFETY: batch*k pivots and batch*size permutation entries.
    unsafe { gpu.launch(&config, args) }
}
