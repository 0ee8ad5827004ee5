//! LU factorization with partial pivoting (LAPACK's `?getrf`): the packed LU, 1-based pivots
//! and `info` of every matrix of a batch, in whatever layout the batch is.

use super::matrix::{InOut, Layout};
use super::parallel::{
    by_simd_groups, for_each_chunk, look_ahead, one_matrix_over_pool, parallel_chunks, Pool,
    SharedMatrix, SharedMut, PANEL, SIMD_GROUP,
};
use super::underflow::GradualUnderflow;
use super::vector_unit::simd_dispatch;
use super::{lapack_int, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use faer::dyn_stack::MemStack;
use faer::linalg::lu::partial_pivoting::factor::lu_in_place;
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::solve_unit_lower_triangular_in_place;
use faer::prelude::ReborrowMut;
use faer::{Accum, MatMut, MatRef, Par};
use ferrax_cpu_fallback::Getrf;
use ferrax_kernels::scalar::{Real, Scalar};
use ferrax_kernels::small::{getf2, simd};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

mod row_major;
use row_major::getrf_row_major;

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

/// Factors every matrix of `a` (`m × n`) into `a.output`: `ipiv` gets its `min(m, n)` 1-based
/// pivots and `info` its LAPACK `info` (`i > 0`: `U[i-1, i-1]` is exactly zero).
///
/// Past [`small_max`], one matrix per task: row-major ones where they lie by
/// [`getrf_row_major`], column-major ones by faer's recursive LU (its own SIMD matrix
/// products, 1.1–1.4× OpenBLAS's `?getrf` per matrix up to 256); or, by
/// [`one_matrix_over_pool`], [`pooled_getrf`] (one 512×512 f64 matrix, row-major, 2 cores:
/// 5.9 ms by jax's rule, 3.2 ms).
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
                        a.packed_from(
                            first,
                            SIMD_GROUP,
                            true,
                            &mut staged_group,
                            |source, group, layout| {
                                let scratch = &mut lane_scratch;
                                getf2_lanes(source, group, rows, cols, layout, p, info, scratch)
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
    let order = rows.max(cols);
    if one_matrix_over_pool(pool, count, order, k) {
        for b in 0..count {
            let (p, info) = results(b, 1);
            // SAFETY: the matrices are factored one after the other, each over the pool.
            unsafe {
                a.input.copy_to(b, &a.output);
                let matrix =
                    SharedMatrix::new(a.output.matrix(b), [rows, cols], a.output.strides());
                pooled_getrf(pool, getrf, matrix, p, &mut info[0])?
            };
        }
        return Ok(());
    }
    // Row-major matrices are factored where they lie, column-major ones by faer's LU.
    let row_major = k > 0 && a.output.strides()[1] == 1;
    for_each_chunk(pool, count, flops, &|range| {
        let (mut staged, mut original) = (Vec::new(), Vec::new());
        let mut rows_order = vec![0usize; 3 * rows];
        let mut transpositions = vec![MaybeUninit::<usize>::uninit(); k];
        for b in range {
            let (p, info) = results(b, 1);
            // SAFETY: matrix `b`, which this task alone touches.
            if row_major && unsafe { factor_row_major(&a, b, &mut original, p) } {
                info[0] = 0;
                continue;
            }
            // SAFETY: as above; LAPACK reads and writes the m×n matrix (leading dimension
            // `ld`), min(m, n) pivots and one info.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    if !row_major {
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

/// [`getrf_row_major`] of matrix `b` (row-major, not empty) into the result, its pivots in
/// `ipiv`; false where it takes a pivot that LAPACK treats apart, with the operand as it was
/// (`saved`: its copy where the result is the operand's memory).
///
/// # Safety
/// `b < count`; nothing else touches the matrix meanwhile.
unsafe fn factor_row_major<T: LapackScalar>(
    a: &InOut<T>,
    b: usize,
    saved: &mut Vec<T>,
    ipiv: &mut [i32],
) -> bool {
    let (rows, cols, [row_stride, _]) = (a.output.rows(), a.output.cols(), a.output.strides());
    let in_place = a.aliased(b);
    a.input.copy_to(b, &a.output);
    if in_place {
        saved.clear();
        saved.extend_from_slice(a.output.matrix_span(b));
    }
    let matrix = MatMut::from_raw_parts_mut(a.output.matrix(b), rows, cols, row_stride as isize, 1);
    if getrf_row_major(matrix, ipiv) {
        return true;
    }
    if in_place {
        a.output.matrix_span(b).copy_from_slice(saved);
    }
    false
}

/// One matrix over the pool, in place in whatever layout it is, right-looking by panels of
/// [`PANEL`] columns: a panel is copied out, factored by faer's LU and written back; then the
/// other columns take its row swaps, and those right of it the solve for `U`'s rows and the
/// trailing update, in column blocks, one task each. One task updates the next panel's
/// columns first and factors that panel meanwhile (look-ahead), so the panels, a third of the
/// time at 512, overlap the updates. A panel with a pivot faer cannot take
/// ([`faer_getrf`]) leaves the matrix as it was, and LAPACK factors the trailing matrix from
/// there, as its blocked `?getrf` would have.
///
/// # Safety
/// Nothing else touches the matrix meanwhile.
unsafe fn pooled_getrf<T: LapackScalar>(
    pool: &dyn Pool,
    getrf: Getrf<T>,
    matrix: SharedMatrix<T>,
    ipiv: &mut [i32],
    info: &mut i32,
) -> Result<()> {
    let (rows, cols) = (matrix.rows(), matrix.cols());
    let k = rows.min(cols);
    let mut scratch = Mutex::new(PanelScratch {
        panel: memory::vec_of(rows * PANEL, <T as Scalar>::ZERO)?,
        rows_order: memory::vec_of(3 * rows, 0usize)?,
    });
    let (mut start, mut factored) = (0, true);
    if k > 0 {
        let scratch = scratch.get_mut().unwrap_or_else(|e| e.into_inner());
        factored = factor_panel(&matrix, 0, PANEL.min(k), &mut ipiv[..PANEL.min(k)], scratch);
    }
    while start < k {
        let width = PANEL.min(k - start);
        let rest = &mut ipiv[start..];
        if !factored {
            let height = rows - start;
            let rest_cols = cols - start;
            let mut trailing = memory::vec_of(height * rest_cols, <T as Scalar>::ZERO)?;
            let mut staged = MatMut::from_column_major_slice_mut(&mut trailing, height, rest_cols);
            staged.copy_from(matrix.read(start, start, height, rest_cols));
            let (m, n) = (
                lapack_int("rows", height)?,
                lapack_int("columns", rest_cols)?,
            );
            lapack_getrf(getrf, m, n, &mut trailing, height, rest, info);
            let staged = MatRef::from_column_major_slice(&trailing, height, rest_cols);
            matrix
                .write(start, start, height, rest_cols)
                .copy_from(staged);
            if *info > 0 {
                *info += start as i32;
            }
            rest.iter_mut().for_each(|p| *p += start as i32);
            let pivots = &*rest;
            return parallel_chunks(pool, start, PANEL / 2, &|range| {
                swap_rows_in(&matrix, range, start, pivots);
                Ok(())
            });
        }
        let (pivots, later) = rest.split_at_mut(width);
        pivots.iter_mut().for_each(|p| *p += start as i32);
        let pivots = &*pivots;
        let next = start + width;
        let next_width = PANEL.min(k - next.min(k));
        let next_pivots = Mutex::new(&mut later[..next_width]);
        let next_factored = AtomicBool::new(true);
        // Next: its columns, then the panel. The rest: the columns left of this panel (swaps
        // only) and those right of the next.
        let column = |c: usize| if c < start { c } else { c + width + next_width };
        let next_panel = || {
            update(&matrix, next..next + next_width, start, width, pivots);
            if next_width > 0 {
                let mut scratch = scratch.lock().unwrap_or_else(|e| e.into_inner());
                let mut next_pivots = next_pivots.lock().unwrap_or_else(|e| e.into_inner());
                let factored =
                    factor_panel(&matrix, next, next_width, &mut next_pivots, &mut scratch);
                next_factored.store(factored, Ordering::Relaxed);
            }
            Ok(())
        };
        look_ahead(
            pool,
            &next_panel,
            start + cols - next - next_width,
            &|range| {
                let left = range.start..range.end.min(start);
                swap_rows_in(&matrix, left, start, pivots);
                let right = range.start.max(start)..range.end;
                if !right.is_empty() {
                    update(
                        &matrix,
                        column(right.start)..column(right.end - 1) + 1,
                        start,
                        width,
                        pivots,
                    );
                }
                Ok(())
            },
        )?;
        factored = next_factored.load(Ordering::Relaxed);
        start = next;
    }
    *info = 0;
    Ok(())
}

/// [`factor_panel`]'s scratch: the panel, column-major, and faer's row orders.
struct PanelScratch<T> {
    panel: Vec<T>,
    rows_order: Vec<usize>,
}

/// Factors rows `start..` of columns `start..start + width` (a copy of them, written back where
/// faer could take every pivot): `pivots` gets the panel's own 0-based ones, + 1.
///
/// # Safety
/// Those columns are the calling task's.
unsafe fn factor_panel<T: LapackScalar>(
    matrix: &SharedMatrix<T>,
    start: usize,
    width: usize,
    pivots: &mut [i32],
    scratch: &mut PanelScratch<T>,
) -> bool {
    let height = matrix.rows() - start;
    let panel = &mut scratch.panel[..height * width];
    let mut staged = MatMut::from_column_major_slice_mut(panel, height, width);
    staged.copy_from(matrix.read(start, start, height, width));
    let mut transpositions = [MaybeUninit::<usize>::uninit(); PANEL];
    let stack = MemStack::new_any(&mut transpositions);
    let rows_order = &mut scratch.rows_order;
    if !faer_getrf(panel, height, width, height, pivots, rows_order, stack) {
        return false;
    }
    let staged = MatRef::from_column_major_slice(panel, height, width);
    matrix.write(start, start, height, width).copy_from(staged);
    true
}

/// Swaps rows `start + i` and `pivots[i] - 1` (1-based, whole-matrix) in `columns`.
///
/// # Safety
/// Those columns are the calling task's.
unsafe fn swap_rows_in<T>(
    matrix: &SharedMatrix<T>,
    columns: Range<usize>,
    start: usize,
    pivots: &[i32],
) {
    if !columns.is_empty() {
        let (rows, first, width) = (matrix.rows(), columns.start, columns.len());
        swap_rows(matrix.write(0, first, rows, width), pivots, start);
    }
}

/// Swaps row `first + i` of `a` with row `pivots[i] - 1` (LAPACK's 1-based pivots), for each
/// `i`: whole rows at once where a row's elements are adjacent, else column by column.
fn swap_rows<T>(mut a: MatMut<'_, T>, pivots: &[i32], first: usize) {
    let (rows, cols) = (a.nrows(), a.ncols());
    let swaps = pivots
        .iter()
        .enumerate()
        .map(|(i, &p)| (first + i, p as usize - 1))
        .filter(|(row, pivot)| row != pivot);
    for (row, pivot) in swaps.clone() {
        assert!(row < rows && pivot < rows);
    }
    if cols == 0 {
        return;
    }
    // SAFETY: two distinct rows of `a` (checked above), element by element or, where a row's
    // elements are adjacent, `cols` at once.
    unsafe {
        if a.col_stride() == 1 {
            for (row, pivot) in swaps {
                let (x, y) = (
                    a.rb_mut().ptr_at_mut(row, 0),
                    a.rb_mut().ptr_at_mut(pivot, 0),
                );
                std::ptr::swap_nonoverlapping(x, y, cols);
            }
        } else {
            for j in 0..cols {
                for (row, pivot) in swaps.clone() {
                    std::ptr::swap(
                        a.rb_mut().ptr_at_mut(row, j),
                        a.rb_mut().ptr_at_mut(pivot, j),
                    );
                }
            }
        }
    }
}

/// Columns `columns`, right of the factored panel of `width` columns from `start`: its swaps,
/// the solve with its unit lower triangle for `U`'s rows, the update below.
///
/// # Safety
/// Those columns are the calling task's; nothing writes the panel's.
unsafe fn update<T: LapackScalar>(
    matrix: &SharedMatrix<T>,
    columns: Range<usize>,
    start: usize,
    width: usize,
    pivots: &[i32],
) {
    if columns.is_empty() {
        return;
    }
    swap_rows_in(matrix, columns.clone(), start, pivots);
    let (c, w, below, rows) = (columns.start, columns.len(), start + width, matrix.rows());
    let lower = matrix.read(start, start, width, width);
    solve_unit_lower_triangular_in_place(lower, matrix.write(start, c, width, w), Par::Seq);
    if below == rows {
        // (No rows below: the views would start past the matrix.)
        return;
    }
    matmul(
        matrix.write(below, c, rows - below, w),
        Accum::Add,
        matrix.read(below, start, rows - below, width),
        matrix.read(start, c, width, w),
        -<T as Scalar>::ONE,
        Par::Seq,
    );
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
    #[allow(clippy::too_many_arguments)] // simd::getf2's
    fn getf2_lanes<T: Scalar>(
        source: Option<&[T]>,
        a: &mut [T],
        m: usize,
        n: usize,
        layout: Layout,
        ipiv: &mut [i32],
        info: &mut [i32; SIMD_GROUP],
        scratch: &mut [T],
    ) {
        simd::getf2(source, a, m, n, layout, ipiv, info, scratch)
    }
}
