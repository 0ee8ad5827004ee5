//! The CUDA handlers of the tridiagonal solves: ferrax's PTX kernel (one thread per system, the
//! elimination the CPU's perturbed solve runs) on XLA's stream.

use super::{Solve, PERTURBED, TRIDIAGONAL_SOLVE};
use crate::cuda::{GpuScalar, GpuStream};
use crate::ffi::{Error, Result, ScratchAllocator, Stream};
use crate::ffi_handlers;
use ferrax_kernels::tridiagonal::{self, Pivots, TridiagonalArgs};

ffi_handlers! {
    /// Tridiagonal solve on the GPU; a singular system's solution is NaN.
    pub fn ferrax_cuda_tridiagonal_solve(TRIDIAGONAL_SOLVE, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Solve;
        dtype T: GpuScalar = b;
        body = |stream, scratch, ops| solve_cuda::<T>(stream, scratch, ops, Pivots::Exact);
    }

    /// Tridiagonal solve that perturbs tiny pivots, on the GPU.
    pub fn ferrax_cuda_tridiagonal_solve_perturbed(PERTURBED, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Solve;
        dtype T: GpuScalar = b;
        body = |stream, scratch, ops| solve_cuda::<T>(stream, scratch, ops, Pivots::Perturb);
    }
}

fn solve_cuda<T: GpuScalar>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    ops: Solve<'_, T>,
    pivots: Pivots,
) -> Result<()> {
    let shape = ops.shape()?;
    if shape.batch == 0 || shape.rows == 0 || shape.cols == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    let (batch, m, nrhs) = (shape.batch as u64, shape.rows as u64, shape.cols as u64);
    let target = match pivots {
        Pivots::Exact => TRIDIAGONAL_SOLVE,
        Pivots::Perturb => PERTURBED,
    };
    let (config, workspace_bytes) =
        tridiagonal::launch_config(T::KIND, pivots, batch, m, nrhs, gpu.multiprocessors()?)
            .ok_or_else(|| {
                Error::resource_exhausted(format!(
                    "{}: the workspace for {m} equations with {nrhs} right-hand sides is past \
                     the address space",
                    target.to_string_lossy()
                ))
            })?;
    let workspace = scratch.allocate(workspace_bytes, 16)?;
    let args = TridiagonalArgs {
        dl: ops.dl.ptr().cast_const().cast(),
        d: ops.d.ptr().cast_const().cast(),
        du: ops.du.ptr().cast_const().cast(),
        b: ops.b.ptr().cast_const().cast(),
        x: ops.x.ptr().cast(),
        workspace: workspace.cast(),
        batch,
        m,
        nrhs,
    };
    // SAFETY: the diagonals hold batch·m elements, b and x (the same buffer where XLA aliased
    // them) batch·m·nrhs, the workspace what the plan asked for; the kernel reads b before it
    // writes a system's x.
    unsafe { gpu.launch(&config, args) }
}
