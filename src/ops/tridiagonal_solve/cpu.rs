//! The CPU handlers of the tridiagonal solves: [`crate::linalg::tridiagonal_solve`] on XLA's
//! arrays and thread pool.

use super::{Gtsv, Solve, GTSV, PERTURBED};
use crate::ffi::{Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::tridiagonal_solve::{self, PerturbedScalar};
use crate::linalg::LapackScalar;

ffi_handlers! {
    /// Tridiagonal solve on the host through LAPACK's `?gtsv`, batch split across XLA's thread
    /// pool.
    pub fn ferrax_cpu_gtsv(GTSV, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Gtsv;
        dtype T: LapackScalar = b;
        body = gtsv_cpu;
    }

    /// Tridiagonal solve that perturbs tiny pivots (ferrax-kernels' Rust kernel), batch split
    /// across XLA's thread pool.
    pub fn ferrax_cpu_tridiagonal_solve_perturbed(PERTURBED, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Solve;
        dtype T: PerturbedScalar = b;
        body = perturbed_cpu;
    }
}

fn gtsv_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Gtsv<'_, T>) -> Result<()> {
    ops.shape()?;
    // The core factors the diagonals in place (a no-op where XLA aliased them).
    for (input, output) in [(&ops.dl, &ops.dl_out), (&ops.d, &ops.d_out), (&ops.du, &ops.du_out)] {
        input.buffer.copy_into(&output.buffer)?;
    }
    // SAFETY: results distinct from each other, written by the core alone.
    let (diagonals, info) = unsafe {
        (
            [
                ops.dl_out.as_mut_slice(),
                ops.d_out.as_mut_slice(),
                ops.du_out.as_mut_slice(),
            ],
            ops.info.as_mut_slice(),
        )
    };
    let b = InOut {
        input: ops.b.view(Layout::ColumnMajor),
        output: ops.b_out.view(Layout::ColumnMajor),
    };
    tridiagonal_solve::gtsv(&pool, diagonals, b, info)
}

fn perturbed_cpu<T: PerturbedScalar>(pool: ThreadPool<'_>, ops: Solve<'_, T>) -> Result<()> {
    ops.shape()?;
    // SAFETY: arguments, only read, distinct from the result.
    let diagonals = unsafe { [ops.dl.as_slice(), ops.d.as_slice(), ops.du.as_slice()] };
    let b = InOut {
        input: ops.b.view(Layout::ColumnMajor),
        output: ops.x.view(Layout::ColumnMajor),
    };
    tridiagonal_solve::solve_perturbed(&pool, diagonals, b)
}
