//! LU factorization with partial pivoting (LAPACK's `?getrf`): the packed LU, 1-based pivots
//! and `info` of every matrix of a batch, in whatever layout the batch is.

use super::matrix::{InOut, Layout};
use super::parallel::{by_simd_groups, for_each_chunk, Pool, SharedMut, SIMD_GROUP};
use super::underflow::GradualUnderflow;
use super::vector_unit::simd_dispatch;
use super::{lapack_int, routine, LapackScalar};
use crate::error::{Error, Result};
use faer::dyn_stack::MemStack;
use faer::linalg::lu::partial_pivoting::factor::lu_in_place;
use faer::{MatMut, Par};
use ferrax_cpu_fallback::Getrf;
use ferrax_kernels::scalar::{Real, Scalar};
use ferrax_kernels::small::{getf2, simd};
use std::mem::MaybeUninit;

/// Up to this many rows and columns the matrices are factored in Rust, [`SIMD_GROUP`] at a
/// time ([`simd::getf2`] compiled for the widest vector unit; [`getf2`] for the rest;
/// LAPACK's unblocked algorithm and output): there one OpenBLAS call costs more than the
/// factorization. Past it the interleaved matrices outgrow the L1 cache. Per matrix on one
/// core of this project's AVX-512 machine against single-threaded OpenBLAS 0.3.34 `?getrf`
/// (µs): f64 24×24 1.76 vs 2.38 (32: 7.2 vs 4.0); f32 32×32 3.09 vs 4.05 (48: 8.3 vs 7.7);
/// complex64 24×24 2.24 vs 3.44 (32: 8.4 vs 5.7); complex128 16×16 1.31 vs 1.58 (24: 4.09 vs
/// 3.78).
pub fn small_max<T: Scalar>() -> usize {
    match (T::COMPLEX, std::mem::size_of::<T>()) {
        (false, 4) => 32,
        (true, 16) => 16,
        _ => 24,
    }
}

/// From [`small_max`] up to this many rows and columns, faer's recursive LU (its own SIMD
/// matrix products), 1.1–1.4× OpenBLAS's `?getrf` per matrix there; OpenBLAS past it, where its
/// threads can share one large matrix.
pub const MID_MAX: usize = 256;

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
    if rows.max(cols) <= small_max::<T>() {
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
                                getf2_lanes(group, rows, cols, layout, p, info, &mut lane_scratch)
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
    let mid = rows.max(cols) <= MID_MAX;
    for_each_chunk(pool, count, flops, &|range| {
        let (mut staged, mut original) = (Vec::new(), Vec::new());
        let mut rows_order = vec![0usize; if mid { 3 * rows } else { 0 }];
        let mut transpositions = vec![MaybeUninit::<usize>::uninit(); if mid { k } else { 0 }];
        for b in range {
            let (p, info) = results(b, 1);
            // SAFETY: matrix `b`, which this task alone touches; LAPACK reads and writes the
            // m×n matrix (leading dimension `ld`), min(m, n) pivots and one info.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    if mid {
                        original.clear();
                        original.extend_from_slice(&a[..]);
                        let stack = MemStack::new_any(&mut transpositions);
                        if faer_getrf(a, rows, cols, ld, p, &mut rows_order, stack) {
                            info[0] = 0;
                            return;
                        }
                        a.copy_from_slice(&original);
                    }
                    lapack_getrf(getrf, m, n, a, ld, p, &mut info[0])
                })?
            };
        }
        Ok(())
    })
}

fn lapack_getrf<T>(
    getrf: Getrf<T>,
    m: i32,
    n: i32,
    a: &mut [T],
    ld: usize,
    p: &mut [i32],
    info: &mut i32,
) {
    let ld = ld as i32;
    // SAFETY: `a` holds the m×n matrix at leading dimension `ld`, `p` its min(m, n) pivots.
    unsafe { getrf(&m, &n, a.as_mut_ptr(), &ld, p.as_mut_ptr(), info) }
}

/// faer's LU of the column-major `rows × cols` matrix `a` (leading dimension `ld`), with
/// LAPACK's 1-based pivots in `ipiv`; false where a pivot's modulus is below the safe minimum
/// or NaN: faer multiplies by its reciprocal regardless, LAPACK leaves a zero pivot's column
/// unscaled (`info > 0`, no NaN) and divides by a tiny one, so `a` is not LAPACK's result.
/// `rows_order` holds `3·rows` indices, `stack` faer's `min(rows, cols)` transpositions.
fn faer_getrf<T: LapackScalar>(
    a: &mut [T],
    rows: usize,
    cols: usize,
    ld: usize,
    ipiv: &mut [i32],
    rows_order: &mut [usize],
    stack: &mut MemStack,
) -> bool {
    let _gradual = GradualUnderflow::new();
    let (perm, rest) = rows_order.split_at_mut(rows);
    let (perm_inv, order) = rest.split_at_mut(rows);
    let matrix = MatMut::from_column_major_slice_with_stride_mut(a, rows, cols, ld);
    lu_in_place(matrix, perm, perm_inv, Par::Seq, stack, Default::default());
    let k = rows.min(cols);
    let safe_min = <<T as Scalar>::Real as Real>::SAFE_MIN;
    if !(0..k).all(|j| a[j * ld + j].modulus_at_least(safe_min)) {
        return false;
    }
    // faer gives the final row order (row i of P·A is row perm[i] of A); LAPACK's pivots are
    // the swaps that make it, one per column: at step j, row j with the row then holding
    // perm[j]. `order` is the rows' order so far, `position` its inverse.
    let position = perm_inv;
    for i in 0..rows {
        (order[i], position[i]) = (i, i);
    }
    for j in 0..k {
        let (row, at) = (perm[j], position[perm[j]]);
        ipiv[j] = at as i32 + 1;
        let displaced = order[j];
        order.swap(j, at);
        (position[displaced], position[row]) = (at, j);
    }
    true
}

simd_dispatch! {
    /// [`simd::getf2`], compiled for the widest vector unit.
    fn getf2_lanes<T: Scalar>(
        a: &mut [T],
        m: usize,
        n: usize,
        layout: Layout,
        ipiv: &mut [i32],
        info: &mut [i32; SIMD_GROUP],
        scratch: &mut [T],
    ) {
        simd::getf2(a, m, n, layout, ipiv, info, scratch)
    }
}
