//! Triangular solves with multiple right-hand sides (BLAS `?trsm`, alpha = 1):
//! `B ← op(A)⁻¹·B` from the left or `B ← B·op(A)⁻¹` from the right, for every matrix pair of
//! a batch. No `info`: BLAS does not report a singular `A`.

use super::flags::{Diag, Flag, Side, Trans, Uplo};
use super::matrix::{Batch, InOut};
use super::parallel::{for_each_parallel, Pool};
use super::{lapack_int, routine, LapackScalar};
use crate::error::{Error, Result};
use ferrax_kernels::scalar::Scalar;
use ferrax_kernels::small::{self, Transpose};

/// Up to this many rows and columns of `B` the solve runs in Rust ([`small::trsm`]): there
/// one BLAS call costs more than the solve, and concurrent calls contend inside OpenBLAS
/// (`benches/cpu_linalg.py`: 0.5x jaxlib's serial loop at n = 4 through OpenBLAS, 1.6-2x in
/// Rust; at n = 16 OpenBLAS is faster for complex matrices).
pub const SMALL_MAX: usize = 8;

/// Up to this order a single right-hand side (`jnp.linalg.solve` of a vector: two such solves
/// after `lu`) is solved in Rust too, where OpenBLAS packs the lone column for its trsm
/// kernels (`jnp.linalg.solve`, 2 cores, ~4 MB batches: 0.44-0.71× the time at n = 12,
/// 0.59-0.85× at 16, 0.87-0.99× at 24; about even at 28-32, slower beyond).
pub const SINGLE_RHS_MAX: usize = 24;

/// BLAS's character arguments.
#[derive(Clone, Copy, Debug)]
pub struct TrsmFlags {
    pub side: Side,
    pub uplo: Uplo,
    pub trans: Trans,
    pub diag: Diag,
}

/// Solves with each triangular `k × k` matrix of `a` (`k` = B's rows from the left, its
/// columns from the right) for the matrix of `b` (`m × n`), into `b.output`.
pub fn trsm<T: LapackScalar>(
    pool: &dyn Pool,
    flags: TrsmFlags,
    a: Batch<T>,
    b: InOut<T>,
) -> Result<()> {
    let (count, rows, cols) = (b.input.count(), b.input.rows(), b.input.cols());
    let left = flags.side == Side::Left;
    let k = if left { rows } else { cols };
    if a.count() != count || a.rows() != k || a.cols() != k {
        return Err(Error::internal(format!(
            "trsm: {count} right-hand sides of {rows}×{cols} against {} matrices of {}×{}",
            a.count(),
            a.rows(),
            a.cols()
        )));
    }
    // Nothing to solve for an empty batch or empty right-hand sides (k = 0 implies m or n
    // = 0), but the result holds them.
    if count == 0 || rows * cols == 0 {
        // SAFETY: every matrix of the views, on this thread alone.
        unsafe { b.copy_all() };
        return Ok(());
    }
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    let flops = (k * rows * cols).max(1);
    let right_hand_sides = if left { cols } else { rows };
    let single = right_hand_sides == 1 && k <= SINGLE_RHS_MAX;
    if rows.max(cols) <= SMALL_MAX || single {
        let transpose = match flags.trans {
            Trans::No => Transpose::No,
            Trans::Transpose => Transpose::Yes,
            Trans::Conjugate => Transpose::Conjugate,
        };
        let (lower, unit) = (flags.uplo == Uplo::Lower, flags.diag == Diag::Unit);
        return for_each_parallel(pool, count, flops, &|i| {
            let (mut staged_a, mut staged_b) = (Vec::new(), Vec::new());
            // SAFETY: matrix pair `i`, which this task alone touches (`a` is only read).
            unsafe {
                let (a, lda) = a.column_major(i, &mut staged_a)?;
                b.column_major(i, &mut staged_b, |b, ldb| {
                    small::trsm(left, lower, transpose, unit, rows, cols, a, lda, b, ldb)
                })?;
            }
            Ok(())
        });
    }
    let trsm = routine(T::trsm())?;
    let [side, uplo, trans, diag] = [
        flags.side.letter(),
        flags.uplo.letter(),
        flags.trans.letter(),
        flags.diag.letter(),
    ];
    for_each_parallel(pool, count, flops, &|i| {
        let (mut staged_a, mut staged_b) = (Vec::new(), Vec::new());
        // SAFETY: matrix pair `i`, which this task alone touches (`a` is only read); BLAS
        // reads the k×k `a` and reads and writes the m×n `b` with their leading dimensions.
        unsafe {
            let (a, lda) = a.column_major(i, &mut staged_a)?;
            b.column_major(i, &mut staged_b, |b, ldb| {
                let one = <T as Scalar>::ONE;
                let (lda, ldb) = (lda as i32, ldb as i32);
                trsm(
                    &side,
                    &uplo,
                    &trans,
                    &diag,
                    &m,
                    &n,
                    &one,
                    a.as_ptr(),
                    &lda,
                    b.as_mut_ptr(),
                    &ldb,
                )
            })?;
        }
        Ok(())
    })
}
