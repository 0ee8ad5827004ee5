//! Tridiagonal solves of a batch of systems: diagonals `dl`, `d`, `du` (`m` each per system;
//! `dl[0]` and `du[m-1]` lie outside the matrix and are ignored) and right-hand sides `m × nrhs`.

use super::matrix::InOut;
use super::parallel::{for_each_chunk, for_each_parallel, Pool, SharedMut};
use super::{lapack_int, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use ferrax_kernels::scalar::Scalar as KernelScalar;
use ferrax_kernels::tridiagonal;

/// The diagonals' expected length, else an error.
fn expect_diagonals(count: usize, rows: usize, lens: [usize; 3]) -> Result<()> {
    if lens.iter().all(|&len| len == count * rows) {
        return Ok(());
    }
    Err(Error::internal(format!(
        "tridiagonal solve: {count} systems of order {rows} with diagonals of {lens:?} elements"
    )))
}

/// LAPACK's `?gtsv` on every system, in place: the right-hand sides of `b` become the
/// solutions in `b.output`, the diagonals the factorization LAPACK leaves there, and `info`
/// LAPACK's (`i > 0`: `U[i-1, i-1]` is exactly zero, the solution not computed).
pub fn gtsv<T: LapackScalar>(
    pool: &dyn Pool,
    [dl, d, du]: [&mut [T]; 3],
    b: InOut<T>,
    info: &mut [i32],
) -> Result<()> {
    let (count, rows, cols) = (b.input.count(), b.input.rows(), b.input.cols());
    expect_diagonals(count, rows, [dl.len(), d.len(), du.len()])?;
    if info.len() != count {
        return Err(Error::internal(format!(
            "gtsv: {count} systems, {} infos",
            info.len()
        )));
    }
    if count == 0 {
        return Ok(());
    }
    if rows == 0 {
        // Empty systems (and so empty right-hand sides): LAPACK would return at once.
        info.fill(0);
        return Ok(());
    }
    let gtsv = routine(T::gtsv())?;
    let (m, nrhs) = (
        lapack_int("order", rows)?,
        lapack_int("right-hand sides", cols)?,
    );
    let (dl, d, du, info) = (
        SharedMut(dl.as_mut_ptr()),
        SharedMut(d.as_mut_ptr()),
        SharedMut(du.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    // Elimination on the three diagonals, then two sweeps over each right-hand side.
    let flops = rows.saturating_mul(cols.saturating_mul(6).saturating_add(8));
    for_each_parallel(pool, count, flops, &|i| {
        // SAFETY: system `i` and its info are written by this task alone. As jaxlib, LAPACK's
        // sub-diagonal starts at `dl[1]` (one past the end of a 1 x 1 system's `dl`, which
        // LAPACK then does not read); `?gtsv` touches `m - 1` elements of `dl` and `du`, `m`
        // of `d` and the m×nrhs right-hand sides at `b` (leading dimension `ld`), and the
        // first column even when nrhs = 0: its back substitution runs once before it looks
        // at nrhs. Without right-hand sides it gets a column of its own, not past the caller's.
        let solve = |b: *mut T, ld: usize| unsafe {
            let ld = ld as i32;
            let (dl, d, du) = (dl.at(i * rows + 1), d.at(i * rows), du.at(i * rows));
            gtsv(&m, &nrhs, dl, d, du, b, &ld, info.at(i))
        };
        if cols == 0 {
            solve(memory::vec_of(rows, T::default())?.as_mut_ptr(), rows);
            return Ok(());
        }
        let mut staged = Vec::new();
        // SAFETY: as above.
        unsafe { b.column_major(i, &mut staged, |b, ld| solve(b.as_mut_ptr(), ld))? };
        Ok(())
    })
}

/// The scalars of the perturbed solve: LAPACK's four, with the kernel's arithmetic.
pub trait PerturbedScalar: LapackScalar + KernelScalar {}
impl<T: LapackScalar + KernelScalar> PerturbedScalar for T {}

/// The solution of every system by Gaussian elimination that perturbs tiny pivots instead of
/// failing (ferrax-kernels' `solve_perturbed`, as jaxlib's `tridiagonal_solve_perturbed_ffi`):
/// from the right-hand sides `b.input` into `b.output`; the diagonals are only read.
pub fn solve_perturbed<T: PerturbedScalar>(
    pool: &dyn Pool,
    [dl, d, du]: [&[T]; 3],
    b: InOut<T>,
) -> Result<()> {
    let (count, rows, cols) = (b.input.count(), b.input.rows(), b.input.cols());
    expect_diagonals(count, rows, [dl.len(), d.len(), du.len()])?;
    if count == 0 || rows * cols == 0 {
        return Ok(());
    }
    let workspace_len = tridiagonal::workspace_len(rows, cols);
    let flops = rows.saturating_mul(cols.saturating_mul(8).saturating_add(10));
    for_each_chunk(pool, count, flops, &|range| {
        let mut workspace = memory::vec_of(workspace_len, <T as KernelScalar>::ZERO)?;
        let mut staged = [Vec::new(), Vec::new()];
        for i in range {
            let diagonals = i * rows..(i + 1) * rows;
            // SAFETY: system `i`'s solution is written by this task alone.
            unsafe {
                b.apart(i, &mut staged, |b, x| {
                    tridiagonal::solve_perturbed(
                        &dl[diagonals.clone()],
                        &d[diagonals.clone()],
                        &du[diagonals],
                        b,
                        x,
                        &mut workspace,
                    )
                })?
            };
        }
        Ok(())
    })
}
