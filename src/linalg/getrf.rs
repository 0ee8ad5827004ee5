//! LU factorization with partial pivoting (LAPACK's `?getrf`): the packed LU, 1-based pivots
//! and `info` of every matrix of a batch, in whatever layout the batch is.

use super::matrix::InOut;
use super::parallel::{by_simd_groups, for_each_chunk, Pool, SharedMut, SIMD_GROUP};
use super::{lapack_int, routine, LapackScalar};
use crate::error::{Error, Result};
use ferrax_kernels::scalar::Scalar;
use ferrax_kernels::small::{getf2, simd};

/// Up to this many rows and columns the matrices are factored in Rust, [`SIMD_GROUP`] at a
/// time ([`simd::getf2`]; [`getf2`] for the rest; LAPACK's unblocked algorithm and output):
/// there one OpenBLAS call costs more than the factorization (per 16×16 f64 matrix, one core:
/// `getf2` 709 ns, `simd::getf2` 570 ns; `benches/cpu_linalg.py`).
pub const SMALL_MAX: usize = 16;

/// Factors every matrix of `a` (`m × n`) into `a.output`: `ipiv` gets its `min(m, n)` 1-based
/// pivots and `info` its LAPACK `info` (`i > 0`: `U[i-1, i-1]` is exactly zero).
pub fn getrf<T: LapackScalar>(
    pool: &dyn Pool,
    a: InOut<T>,
    ipiv: &mut [i32],
    info: &mut [i32],
) -> Result<()> {
    let (count, rows, cols) = (a.input.count(), a.input.rows(), a.input.cols());
    let k = rows.min(cols);
    if ipiv.len() != count * k || info.len() != count {
        return Err(Error::internal(format!(
            "getrf: {count} matrices of {rows}×{cols} take {} pivots and {count} infos, got {} \
             and {}",
            count * k,
            ipiv.len(),
            info.len()
        )));
    }
    if count == 0 {
        return Ok(());
    }
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    let (ipiv, info) = (SharedMut(ipiv.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    // SAFETY: the slices cover exactly `count` pivots and infos from `first`, items of the
    // calling task, which it alone writes.
    let results = |first: usize, count: usize| unsafe {
        (ipiv.slice(first * k, count * k), info.slice(first, count))
    };
    let flops = (rows * cols * k.max(1)).max(1);
    if rows.max(cols) <= SMALL_MAX {
        return for_each_chunk(pool, count, flops, &|range| {
            let mut lane_scratch = vec![<T as Scalar>::ZERO; SIMD_GROUP * rows * cols];
            let (mut staged_group, mut staged_one) = (Vec::new(), Vec::new());
            by_simd_groups(
                range,
                |first| {
                    let (p, info) = results(first, SIMD_GROUP);
                    let info = info.try_into().expect("SIMD_GROUP infos");
                    // SAFETY: matrices of this task, which it alone touches.
                    unsafe {
                        a.packed(
                            first,
                            SIMD_GROUP,
                            true,
                            &mut staged_group,
                            |group, layout| {
                                simd::getf2(group, rows, cols, layout, p, info, &mut lane_scratch)
                            },
                        )
                    }
                },
                |b| {
                    let (p, info) = results(b, 1);
                    // SAFETY: matrix `b`, which this task alone touches.
                    info[0] = unsafe {
                        a.column_major(b, &mut staged_one, |a, ld| getf2(a, rows, cols, ld, p))
                    }?;
                    Ok(())
                },
            )
        });
    }
    let getrf = routine(T::getrf())?;
    for_each_chunk(pool, count, flops, &|range| {
        let mut staged = Vec::new();
        for b in range {
            let (p, info) = results(b, 1);
            // SAFETY: matrix `b`, which this task alone touches; LAPACK reads and writes the
            // m×n matrix (leading dimension `ld`), min(m, n) pivots and one info.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    let ld = ld as i32;
                    getrf(&m, &n, a.as_mut_ptr(), &ld, p.as_mut_ptr(), &mut info[0])
                })?
            };
        }
        Ok(())
    })
}
