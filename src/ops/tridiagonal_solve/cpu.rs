//! The CPU handlers of the tridiagonal solves: [`crate::linalg::tridiagonal_solve`] on XLA's
//! arrays and thread pool.

use super::{expect_diagonals, GTSV, PERTURBED};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::tridiagonal_solve::{self, PerturbedScalar};
use crate::linalg::LapackScalar;

ffi_handlers! {
    /// Tridiagonal solve on the host through LAPACK's `?gtsv`, batch split across XLA's thread
    /// pool.
    pub fn ferrax_cpu_gtsv(GTSV, Cpu) {
        ctx pool: ThreadPool;
        arg dl: Array<T>;
        arg d: Array<T>;
        arg du: Array<T>;
        arg b: Matrices<T>;
        ret dl_out: Array<T>;
        ret d_out: Array<T>;
        ret du_out: Array<T>;
        ret b_out: Matrices<T>;
        ret info: Array<i32>;
        dtype T: LapackScalar = b;
        body = gtsv_cpu;
    }

    /// Tridiagonal solve that perturbs tiny pivots (ferrax-kernels' Rust kernel), batch split
    /// across XLA's thread pool.
    pub fn ferrax_cpu_tridiagonal_solve_perturbed(PERTURBED, Cpu) {
        ctx pool: ThreadPool;
        arg dl: Array<T>;
        arg d: Array<T>;
        arg du: Array<T>;
        arg b: Matrices<T>;
        ret x: Matrices<T>;
        dtype T: PerturbedScalar = b;
        body = perturbed_cpu;
    }
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handlers! passes them
fn gtsv_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    dl: Array<'_, T>,
    d: Array<'_, T>,
    du: Array<'_, T>,
    b: Matrices<'_, T>,
    dl_out: Array<'_, T>,
    d_out: Array<'_, T>,
    du_out: Array<'_, T>,
    b_out: Matrices<'_, T>,
    info: Array<'_, i32>,
) -> Result<()> {
    expect_diagonals([&dl, &d, &du], &b)?;
    info.expect_dims(b.batch_dims())?;
    b_out.expect_dims(b.dims())?;
    // The core factors the diagonals in place (a no-op where XLA aliased them).
    for (input, output) in [(&dl, &dl_out), (&d, &d_out), (&du, &du_out)] {
        input.buffer.copy_into(&output.buffer)?;
    }
    // SAFETY: results distinct from each other, written by the core alone.
    let (diagonals, info) = unsafe {
        (
            [dl_out.as_mut_slice(), d_out.as_mut_slice(), du_out.as_mut_slice()],
            info.as_mut_slice(),
        )
    };
    let b = InOut {
        input: b.view(Layout::ColumnMajor),
        output: b_out.view(Layout::ColumnMajor),
    };
    tridiagonal_solve::gtsv(&pool, diagonals, b, info)
}

fn perturbed_cpu<T: PerturbedScalar>(
    pool: ThreadPool<'_>,
    dl: Array<'_, T>,
    d: Array<'_, T>,
    du: Array<'_, T>,
    b: Matrices<'_, T>,
    x: Matrices<'_, T>,
) -> Result<()> {
    expect_diagonals([&dl, &d, &du], &b)?;
    x.expect_dims(b.dims())?;
    // SAFETY: arguments, only read, distinct from the result.
    let diagonals = unsafe { [dl.as_slice(), d.as_slice(), du.as_slice()] };
    let b = InOut {
        input: b.view(Layout::ColumnMajor),
        output: x.view(Layout::ColumnMajor),
    };
    tridiagonal_solve::solve_perturbed(&pool, diagonals, b)
}
