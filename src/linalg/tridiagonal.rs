//! Reduction of symmetric / Hermitian matrices to real tridiagonal form (LAPACK's `?sytrd` /
//! `?hetrd`): `T = Qᴴ A Q` and the reflectors of `Q` for every matrix of a batch, in whatever
//! layout the batch is; in Rust up to [`RUST_MAX`] or [`RUST_MAX_SPLIT`].

use super::flags::{Flag, Uplo};
use super::matrix::InOut;
use super::parallel::{for_each_chunk, splits_over_threads, Pool, SharedMut};
use super::{lapack_int, query_lwork, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use ferrax_cpu_fallback::Real;
use ferrax_kernels::small::eigh as small_eigh;

/// Up to this order the matrices are reduced in Rust ([`small_eigh::sytd2`], LAPACK's
/// unblocked algorithm) instead of by one `?sytrd` call each, which costs more at these sizes.
pub const RUST_MAX: usize = 32;

/// Up to this order the Rust reduction also takes batches split over several threads: there
/// LAPACK's level-2 BLAS calls contend for OpenBLAS's buffer lock, once per column (p10 ms,
/// 2 threads, 128 matrices of order 64: f64 3.9 against 8.9, c128 12.0 against 16.1; stock
/// jaxlib's one thread 6.9 and 18.9), while on one thread LAPACK is as fast or faster (f64
/// 6.9 against 7.1, c128 18.6 against 23.9), and past 64 on two as well (c128 96: 13.4
/// against 16.4; f64 about even, 5.8 against 5.4).
pub const RUST_MAX_SPLIT: usize = 64;

/// Reduces every matrix of `a` (`n × n`) from its `uplo` triangle: the tridiagonal and the
/// reflectors replace that triangle in `a.output` (the other one untouched), `d` gets the `n`
/// diagonal entries, `e` the `n - 1` off-diagonal ones, `tau` the reflectors' scales and
/// `info` LAPACK's `info`.
pub fn sytrd<T: LapackScalar>(
    pool: &dyn Pool,
    a: InOut<T>,
    uplo: Uplo,
    d: &mut [Real<T>],
    e: &mut [Real<T>],
    tau: &mut [T],
    info: &mut [i32],
) -> Result<()> {
    let (count, order) = (a.input.count(), a.input.rows());
    // n - 1 off-diagonal entries and reflectors; none (not -1) for n = 0.
    let off = order.saturating_sub(1);
    let fits = d.len() == count * order
        && e.len() == count * off
        && tau.len() == count * off
        && info.len() == count;
    if a.input.cols() != order || !fits {
        return Err(Error::internal(format!(
            "sytrd: the results do not fit {count} matrices of {order}×{}",
            a.input.cols()
        )));
    }
    let n = lapack_int("n", order)?;
    if count == 0 || order == 0 {
        // What LAPACK answers for n = 0, without calling it with a zero leading dimension.
        info.fill(0);
        return Ok(());
    }
    let (d, e, tau, info) = (
        SharedMut(d.as_mut_ptr()),
        SharedMut(e.as_mut_ptr()),
        SharedMut(tau.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    // About 4/3 n^3 flops.
    let flops = order.saturating_pow(3).saturating_mul(4) / 3;
    let split = splits_over_threads(pool, count, flops);
    if order <= RUST_MAX || (split && order <= RUST_MAX_SPLIT) {
        let lower = uplo.is_lower();
        return for_each_chunk(pool, count, flops, &|range| {
            let mut scratch = memory::vec_of(small_eigh::sytd2_scratch_len(order), T::default())?;
            let mut staged = Vec::new();
            for b in range {
                // SAFETY: matrix `b`, its d, e, taus and info, which this task alone touches.
                unsafe {
                    let (d, e, tau) = (
                        d.slice(b * order, order),
                        e.slice(b * off, off),
                        tau.slice(b * off, off),
                    );
                    a.packed_column_major(b, &mut staged, |a| {
                        small_eigh::sytd2(a, order, lower, d, e, tau, &mut scratch)
                    })?;
                    *info.at(b) = 0;
                }
            }
            Ok(())
        });
    }
    let sytrd = routine(T::sytrd())?;
    let uplo = uplo.letter();
    // Every matrix has the same order, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, query_info| unsafe {
        sytrd(
            &uplo,
            &n,
            a.output.as_ptr(),
            &n,
            d.at(0),
            e.at(0),
            tau.at(0),
            work,
            lwork,
            query_info,
        )
    })?;
    for_each_chunk(pool, count, flops, &|range| {
        let mut work = memory::vec_of(lwork as usize, T::default())?;
        let mut staged = Vec::new();
        for b in range {
            // SAFETY: matrix `b`, its d, e, taus and info, which this task alone touches;
            // LAPACK touches `lda × n` elements, `n` d, `n - 1` e and taus and `lwork`
            // elements of `work`.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    let ld = ld as i32;
                    sytrd(
                        &uplo,
                        &n,
                        a.as_mut_ptr(),
                        &ld,
                        d.at(b * order),
                        e.at(b * off),
                        tau.at(b * off),
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
