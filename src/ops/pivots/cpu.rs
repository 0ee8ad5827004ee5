//! The CPU handler of pivots to permutation: the kernels crate's loop, the batch split across
//! XLA's thread pool.

use super::{Pivots, LU_PIVOTS_TO_PERMUTATION};
use crate::ffi::{Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::parallel::{for_each_parallel, SharedMut};

ffi_handlers! {
    /// Pivots to permutation on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_lu_pivots_to_permutation(LU_PIVOTS_TO_PERMUTATION, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Pivots;
        body = pivots_cpu;
    }
}

fn pivots_cpu(pool: ThreadPool<'_>, ops: Pivots<'_>) -> Result<()> {
    let (batch, k, p) = ops.dimensions()?;
    let Pivots {
        pivots,
        permutation,
    } = ops;
    if batch == 0 {
        return Ok(());
    }
    // SAFETY: the result is distinct from the argument.
    let (pivots, permutation) = unsafe { (pivots.as_slice(), permutation.as_mut_slice()) };
    let out = SharedMut(permutation.as_mut_ptr());
    for_each_parallel(&pool, batch, k + p, &|b| {
        // SAFETY: each task writes its own matrix's permutation.
        let perm = unsafe { out.slice(b * p, p) };
        ferrax_kernels::pivots::pivots_to_permutation(&pivots[b * k..(b + 1) * k], perm);
        Ok(())
    })
}
