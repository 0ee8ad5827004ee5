//! Reduction to upper Hessenberg form (LAPACK's `?gehrd`): `H = Qᴴ A Q` and the reflectors of
//! `Q` for every matrix of a batch, in whatever layout the batch is.

use super::matrix::InOut;
use super::parallel::{for_each_chunk, Pool, SharedMut};
use super::{lapack_int, query_lwork, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use std::ops::RangeInclusive;

/// LAPACK's range for `ilo` at order `n`: `1 ..= max(1, n)`.
pub fn ilo_range(n: i32) -> RangeInclusive<i32> {
    1..=n.max(1)
}

/// LAPACK's range for `ihi` at order `n` given `ilo`: `min(ilo, n) ..= n`.
pub fn ihi_range(n: i32, ilo: i32) -> RangeInclusive<i32> {
    ilo.min(n)..=n
}

/// Reduces every matrix of `a` (`n × n`), acting on rows and columns `ilo..=ihi` (1-based,
/// within [`ilo_range`] and [`ihi_range`]; 1 and n for the whole matrix): H on and above the
/// first subdiagonal and the reflectors below it replace the matrix in `a.output`, `tau` gets
/// their `n - 1` scales and `info` LAPACK's `info`.
pub fn gehrd<T: LapackScalar>(
    pool: &dyn Pool,
    a: InOut<T>,
    ilo: i32,
    ihi: i32,
    tau: &mut [T],
    info: &mut [i32],
) -> Result<()> {
    let (count, order) = (a.input.count(), a.input.rows());
    // n - 1 reflectors; none (not -1) for n = 0.
    let reflectors = order.saturating_sub(1);
    if a.input.cols() != order || tau.len() != count * reflectors || info.len() != count {
        return Err(Error::internal(format!(
            "gehrd: {count} matrices of {order}×{} take {} taus and {count} infos, got {} and {}",
            a.input.cols(),
            count * reflectors,
            tau.len(),
            info.len()
        )));
    }
    let n = lapack_int("n", order)?;
    if !ilo_range(n).contains(&ilo) || !ihi_range(n, ilo).contains(&ihi) {
        return Err(Error::invalid_argument(format!(
            "gehrd: ilo = {ilo} and ihi = {ihi} are out of LAPACK's bounds for n = {n}"
        )));
    }
    if count == 0 || order == 0 {
        // What LAPACK answers for n = 0, without calling it with a zero leading dimension.
        info.fill(0);
        return Ok(());
    }
    let gehrd = routine(T::gehrd())?;
    // Every matrix has the same order, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, query_info| unsafe {
        gehrd(
            &n,
            &ilo,
            &ihi,
            a.output.as_ptr(),
            &n,
            tau.as_mut_ptr(),
            work,
            lwork,
            query_info,
        )
    })?;
    let (tau, info) = (SharedMut(tau.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    // About 10/3 n^3 flops.
    let flops = order.saturating_pow(3).saturating_mul(10) / 3;
    for_each_chunk(pool, count, flops, &|range| {
        let mut work = memory::vec_of(lwork as usize, T::default())?;
        let mut staged = Vec::new();
        for b in range {
            // SAFETY: matrix `b`, its taus and its info, which this task alone touches;
            // LAPACK touches `lda × n` elements, `n - 1` taus and `lwork` elements of `work`.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    let ld = ld as i32;
                    gehrd(
                        &n,
                        &ilo,
                        &ihi,
                        a.as_mut_ptr(),
                        &ld,
                        tau.at(b * reflectors),
                        work.as_mut_ptr(),
                        &lwork,
                        info.at(b),
                    )
                })?
            };
        }
        Ok(())
    })
}
