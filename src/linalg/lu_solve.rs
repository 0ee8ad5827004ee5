//! jax's `lu_solve` (its `_lu_solve_core` under vmap) on row-major batches in one pass: per
//! matrix, the right-hand sides permuted and both triangular solves, in cache. jax's rule
//! makes an XLA gather and two `triangular_solve` calls, each a pass over the whole batch
//! (and, on the CPU, two transposes around each solve).

use super::parallel::{
    for_each_chunk, parallel_for, Pool, SharedMut, MIN_FLOPS_PER_TASK, SIMD_GROUP,
};
use super::underflow::GradualUnderflow;
use super::vector_unit::simd_dispatch;
use super::LapackScalar;
use crate::error::{Error, Result};
use crate::memory;
use faer::linalg::triangular_solve as faer_trsm;
use faer::{Conj, MatMut, MatRef, Par};
use ferrax_kernels::scalar::Scalar;
use ferrax_kernels::small::{trsm, Transpose};
use std::ops::Range;

/// From this order on the triangular solves are faer's (recursive, its matrix products' SIMD
/// kernels), for any number of right-hand sides (but one, to [`SUBSTITUTE_MAX_ORDER`]):
/// `jnp.linalg.solve`, 2 cores, ~4 MB batches, 1 to n right-hand sides, against the
/// substitution loops of [`trsm`]: n = 8 0.85-1.05x the time, 16 0.55-0.9x, 32 0.6-0.8x,
/// 64-128 0.4-0.9x. Below it, faer's 4×4 base case is about all there is and the loops are
/// as fast.
const FAER_MIN_ORDER: usize = 8;

/// Up to this order, one right-hand side and no transpose (`jnp.linalg.solve(a, b)` with one
/// vector), [`substitute`] takes the place of both (its rounding is not the loops' below 8:
/// division by the pivot; sums in 8 parts for complex systems and above
/// [`INTERLEAVED_MAX_ORDER`]): ~4 MB batches on 2 cores (AVX-512), ms,
/// f64 n = 2 1.14 -> 0.41, 4 0.95 -> 0.63, 8 0.77 -> 0.40, 16 0.40 -> 0.32, 32 0.24 -> 0.20,
/// 64 0.15 -> 0.12; c128 n = 8 0.46 -> 0.30, 16 0.30 -> 0.20, 64 0.13 -> 0.10.
const SUBSTITUTE_MAX_ORDER: usize = 64;

/// The fewest right-hand sides a task takes when one system's are split over the threads.
const MIN_BLOCK_COLUMNS: usize = 16;

/// Solves `op(A)·x = b` for each of the `count` row-major `n × n` packed LU factorizations in
/// `lu` (`A = P⁻¹·L·U` as jax's `lu` returns it: `b`'s row `perm[i]` is row `i` of `P·b`;
/// L unit lower, U upper) and row-major `n × k` right-hand sides in `b`, into `x`. `op` is
/// `trans`: `A`, `Aᵀ` or `Aᴴ` (jax's `trans` 0, 1, 2).
///
/// As jax's steps: a singular U gives infinities and NaNs (no `info`); with `trans`, the
/// solution's rows are put back by a stable argsort of `perm` (jax's `sort_key_val`), so a
/// `perm` that is not a permutation gives what jax's gather gives. An entry of `perm` outside
/// `0..n` is an error (jax would clamp it).
#[allow(clippy::too_many_arguments)]
pub fn lu_solve<T: LapackScalar>(
    pool: &dyn Pool,
    lu: &[T],
    perm: &[i32],
    b: &[T],
    x: &mut [T],
    [count, n, k]: [usize; 3],
    trans: Transpose,
) -> Result<()> {
    if lu.len() != count * n * n
        || perm.len() != count * n
        || b.len() != count * n * k
        || x.len() != b.len()
    {
        return Err(Error::internal(format!(
            "lu_solve: {count} systems of order {n} with {k} right-hand sides in {}, {}, {} and \
             {} elements",
            lu.len(),
            perm.len(),
            b.len(),
            x.len()
        )));
    }
    if let Some(bad) = perm.iter().find(|&&p| p < 0 || p as usize >= n) {
        return Err(Error::invalid_argument(format!(
            "permutation: entries in 0..{n} expected, got {bad}"
        )));
    }
    if count == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    let out = SharedMut(x.as_mut_ptr());
    let flops = (2 * n * n * k).max(1);
    // Each task: system `m`'s columns `cols`, with `y` and `starts` a transposed solve's
    // scratch (a copy of those columns of b, the put-back offsets).
    let solve = |m: usize, cols: Range<usize>, y: &mut Vec<T>, starts: &mut Vec<usize>| {
        if trans != Transpose::No {
            memory::grow(y, n * cols.len(), T::ZERO)?;
            memory::grow(starts, n + 1, 0)?;
        }
        let system = [
            &lu[m * n * n..(m + 1) * n * n],
            &b[m * n * k..(m + 1) * n * k],
        ];
        let perm = &perm[m * n..(m + 1) * n];
        // SAFETY: system `m`'s solution, of which this task alone writes columns `cols`.
        unsafe {
            solve_one(
                system,
                perm,
                out.at(m * n * k),
                [n, k],
                cols,
                trans,
                (y, starts),
            )
        };
        Ok(())
    };
    let parts = column_blocks(pool.threads(), [count, n, k]);
    if parts > 1 {
        return parallel_for(pool, count * parts, &|task| {
            let (m, part) = (task / parts, task % parts);
            solve(
                m,
                part * k / parts..(part + 1) * k / parts,
                &mut Vec::new(),
                &mut Vec::new(),
            )
        });
    }
    if trans == Transpose::No && k == 1 && n <= SUBSTITUTE_MAX_ORDER {
        return for_each_chunk(pool, count, flops, &|range| {
            let systems = range.start * n..range.end * n;
            // SAFETY: the chunk's solutions, which this task alone writes.
            let x = unsafe { out.slice(systems.start, systems.len()) };
            let lu = &lu[range.start * n * n..range.end * n * n];
            // Subnormals kept, as around faer's solves: a subnormal pivot of ferrax's LU
            // gives the same solution for one right-hand side as for several.
            let _gradual = GradualUnderflow::new();
            substitute(lu, &perm[systems.clone()], &b[systems], x, n);
            Ok(())
        });
    }
    for_each_chunk(pool, count, flops, &|range| {
        let (mut y, mut starts) = (Vec::new(), Vec::new());
        range
            .into_iter()
            .try_for_each(|m| solve(m, 0..k, &mut y, &mut starts))
    })
}

/// Into how many blocks of columns each system's right-hand sides are split, one task each:
/// with fewer systems than threads (one large matrix: `jnp.linalg.inv`, a solve with many
/// right-hand sides), blocks of at least [`MIN_BLOCK_COLUMNS`] columns and
/// [`MIN_FLOPS_PER_TASK`] flops, by faer's solves (they take strided blocks); else 1.
/// One system of order 256-1024 with as many right-hand sides, 2 cores: 0.45-0.6x the time
/// of one task (`jax.scipy.linalg.lu_solve`).
fn column_blocks(threads: usize, [count, n, k]: [usize; 3]) -> usize {
    if n < FAER_MIN_ORDER || count >= threads {
        return 1;
    }
    let flops = 2 * n * n * k;
    threads
        .div_ceil(count)
        .min(k / MIN_BLOCK_COLUMNS)
        .min(flops / MIN_FLOPS_PER_TASK)
        .max(1)
}

/// One system, columns `cols` of its `n × k` right-hand sides (all of them below
/// [`FAER_MIN_ORDER`]). Row-major `lu` read column-major is `(L·U)ᵀ`'s storage: its upper
/// triangle holds `Lᵀ`, its lower one `Uᵀ`; row-major `x` read column-major is `xᵀ` (`k × n`,
/// leading dimension `k`). So `L·y = c` is `yᵀ·Lᵀ = cᵀ`, a solve from the right with that
/// upper triangle, and so on: each step is an update of contiguous rows of x.
/// With `trans`, `y` (`n·w` elements, `w` the block's width) and `starts` (`n + 1`) are its
/// scratch.
///
/// # Safety
/// `x` points to the system's `n × k` row-major solution, whose columns `cols` nothing else
/// reads or writes meanwhile.
unsafe fn solve_one<T: LapackScalar>(
    [lu, b]: [&[T]; 2],
    perm: &[i32],
    x: *mut T,
    [n, k]: [usize; 2],
    cols: Range<usize>,
    trans: Transpose,
    (y, starts): (&mut [T], &mut [usize]),
) {
    let w = cols.len();
    // In place on the n × w block at `block`, rows `ld` apart (see `column_blocks` for why
    // only faer's solves take a block narrower than the rows).
    let solve = |block: *mut T, ld: usize, lower: bool, trans: Transpose, unit: bool| {
        if n >= FAER_MIN_ORDER {
            // SAFETY: the block (the caller's columns of x, or y) is this call's alone.
            let block = unsafe { MatMut::from_raw_parts_mut(block, n, w, ld as isize, 1) };
            faer_solve(lu, block, lower, trans, unit)
        } else {
            // SAFETY: as above; here `w = ld`, the whole of x or y.
            let block = unsafe { std::slice::from_raw_parts_mut(block, n * ld) };
            trsm(false, lower, trans, unit, w, n, lu, n, block, ld)
        }
    };
    let row = |i: usize| i * k + cols.start..i * k + cols.end;
    if trans == Transpose::No {
        for (i, &p) in perm.iter().enumerate() {
            let source = &b[row(p as usize)];
            // SAFETY: row i of the caller's columns of x.
            unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), x.add(row(i).start), w) };
        }
        let block = unsafe { x.add(cols.start) };
        solve(block, k, false, Transpose::No, true); // L
        solve(block, k, true, Transpose::No, false); // U
        return;
    }
    // Uᵀ (or Uᴴ), then Lᵀ (or Lᴴ), on a copy of b; row r of the solution is then row ind[r]
    // of it, ind the stable argsort of perm.
    let y = &mut y[..n * w];
    for (i, y) in y.chunks_exact_mut(w).enumerate() {
        y.copy_from_slice(&b[row(i)]);
    }
    solve(y.as_mut_ptr(), w, true, trans, false);
    solve(y.as_mut_ptr(), w, false, trans, true);
    starts.fill(0);
    for &p in perm {
        starts[p as usize + 1] += 1;
    }
    for v in 0..n {
        starts[v + 1] += starts[v];
    }
    for (i, &p) in perm.iter().enumerate() {
        let r = &mut starts[p as usize];
        // SAFETY: row r of the caller's columns of x.
        unsafe { std::ptr::copy_nonoverlapping(y[i * w..].as_ptr(), x.add(row(*r).start), w) };
        *r += 1;
    }
}

/// The step of [`solve_one`] that `trsm` makes from the right on the column-major views, made
/// by faer on the row-major ones: `x ← op(T)⁻¹·x`, `T` the triangle of `lu` that the
/// column-major view calls `lower_in_column_major` (its transpose's), unit if `unit`.
fn faer_solve<T: LapackScalar>(
    lu: &[T],
    x: MatMut<'_, T>,
    lower_in_column_major: bool,
    trans: Transpose,
    unit: bool,
) {
    // faer's complex reciprocal needs subnormals (see `underflow`).
    let _gradual = GradualUnderflow::new();
    let n = x.nrows();
    let a = MatRef::from_row_major_slice(lu, n, n);
    let (a, conj) = match trans {
        Transpose::No => (a, Conj::No),
        Transpose::Yes => (a.transpose(), Conj::No),
        Transpose::Conjugate => (a.transpose(), Conj::Yes),
    };
    // The column-major view's upper triangle is the row-major lower one; op(·) transposes.
    let lower = lower_in_column_major != (trans == Transpose::No);
    match (lower, unit) {
        (true, true) => {
            faer_trsm::solve_unit_lower_triangular_in_place_with_conj(a, conj, x, Par::Seq)
        }
        (true, false) => faer_trsm::solve_lower_triangular_in_place_with_conj(a, conj, x, Par::Seq),
        (false, true) => {
            faer_trsm::solve_unit_upper_triangular_in_place_with_conj(a, conj, x, Par::Seq)
        }
        (false, false) => {
            faer_trsm::solve_upper_triangular_in_place_with_conj(a, conj, x, Par::Seq)
        }
    }
}

simd_dispatch! {
    /// `x = U⁻¹·L⁻¹·(P·b)` for consecutive systems of order `n` with one right-hand side each
    /// (`n` elements of `b` and `x` per system): substitution along the rows of the row-major
    /// `lu`, each step a dot product of contiguous elements that the vector unit takes
    /// [`DOT_LANES`] products at a time. faer's solves, made for blocks of right-hand sides,
    /// spend most of a small system's time in their dispatch.
    ///
    /// Real systems up to [`INTERLEAVED_MAX_ORDER`]: [`SIMD_GROUP`] at a time by
    /// [`substitute_lanes`], the rest of the batch one at a time in the same order (a system's
    /// rounding does not depend on where in the batch it is).
    fn substitute<T: LapackScalar>(lu: &[T], perm: &[i32], b: &[T], x: &mut [T], n: usize) {
        if !T::COMPLEX && n <= INTERLEAVED_MAX_ORDER {
            let grouped = x.len() / n / SIMD_GROUP * SIMD_GROUP;
            let mut groups = x.chunks_exact_mut(SIMD_GROUP * n);
            for (group, x) in (&mut groups).enumerate() {
                let first = group * SIMD_GROUP;
                let (lu, perm) = (&lu[first * n * n..], &perm[first * n..]);
                substitute_lanes::<T, SIMD_GROUP>(lu, perm, &b[first * n..], x, n);
            }
            for (system, x) in groups.into_remainder().chunks_exact_mut(n).enumerate() {
                let first = grouped + system;
                let (lu, perm) = (&lu[first * n * n..], &perm[first * n..]);
                substitute_lanes::<T, 1>(lu, perm, &b[first * n..], x, n);
            }
            return;
        }
        let systems = lu
            .chunks_exact(n * n)
            .zip(perm.chunks_exact(n))
            .zip(b.chunks_exact(n).zip(x.chunks_exact_mut(n)));
        for ((lu, perm), (b, x)) in systems {
            for (x, &p) in x.iter_mut().zip(perm) {
                *x = b[p as usize];
            }
            for i in 1..n {
                x[i] -= dot(&lu[i * n..i * n + i], &x[..i]);
            }
            for i in (0..n).rev() {
                let sum = x[i] - dot(&lu[i * n + i + 1..(i + 1) * n], &x[i + 1..]);
                x[i] = sum.quotient(lu[i * n + i]);
            }
        }
    }
}

/// Up to this order [`substitute`] solves [`SIMD_GROUP`] real systems at once, one per lane:
/// a system's steps depend on each other, and its short dot products are mostly their
/// reduction. `jnp.linalg.solve` of ~4 MB batches with one right-hand side, 2 cores of this
/// project's Zen 3 machine (AVX2), batch×n, ms, against one system at a time: f64 32768×4
/// 2.42 -> 1.59, 8192×8 1.79 -> 1.30, 2048×16 1.52 -> 1.19; f32 4096×16 3.2 -> 2.7; at 24
/// and 32 no clear gain. Complex systems stay one at a time (c128 8 and 16: 2-9% slower
/// so, their division is not the vector unit's).
const INTERLEAVED_MAX_ORDER: usize = 16;

/// [`substitute`] of the first `L` systems (of order `n` ≤ [`INTERLEAVED_MAX_ORDER`]), each
/// step for all of them at once, one per lane, in the order of LAPACK's row-wise substitution
/// (one sum from the right-hand side down): the same operations in every lane, so a system
/// rounds alike for any `L`.
#[inline(always)] // compiled with the caller's vector unit
fn substitute_lanes<T: Scalar, const L: usize>(
    lu: &[T],
    perm: &[i32],
    b: &[T],
    x: &mut [T],
    n: usize,
) {
    let (lu, perm, b, x) = (
        &lu[..L * n * n],
        &perm[..L * n],
        &b[..L * n],
        &mut x[..L * n],
    );
    let entry =
        |i: usize, j: usize| -> [T; L] { std::array::from_fn(|g| lu[g * n * n + i * n + j]) };
    let mut y = [[T::ZERO; L]; INTERLEAVED_MAX_ORDER];
    for (i, y) in y[..n].iter_mut().enumerate() {
        *y = std::array::from_fn(|g| b[g * n + perm[g * n + i] as usize]);
    }
    for i in 1..n {
        let mut sum = y[i];
        for (j, y_j) in y[..i].iter().enumerate() {
            let l = entry(i, j);
            for g in 0..L {
                sum[g] = sum[g] - l[g] * y_j[g];
            }
        }
        y[i] = sum;
    }
    for i in (0..n).rev() {
        let mut sum = y[i];
        for (j, y_j) in (i + 1..n).zip(&y[i + 1..n]) {
            let u = entry(i, j);
            for g in 0..L {
                sum[g] = sum[g] - u[g] * y_j[g];
            }
        }
        let pivot = entry(i, i);
        y[i] = std::array::from_fn(|g| sum[g].quotient(pivot[g]));
    }
    for (i, y) in y[..n].iter().enumerate() {
        for g in 0..L {
            x[g * n + i] = y[g];
        }
    }
}

/// The partial sums [`dot`] keeps (one vector of f64).
const DOT_LANES: usize = 8;

/// `Σ a[j]·b[j]`, in [`DOT_LANES`] partial sums.
#[inline(always)] // compiled with the caller's vector unit
fn dot<T: Scalar>(a: &[T], b: &[T]) -> T {
    let mut partial = [T::ZERO; DOT_LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
    let (a_rest, b_rest) = (a_chunks.remainder(), b_chunks.remainder());
    for (a, b) in a_chunks.zip(b_chunks) {
        for l in 0..DOT_LANES {
            partial[l] = partial[l] + a[l] * b[l];
        }
    }
    for (l, (&a, &b)) in a_rest.iter().zip(b_rest).enumerate() {
        partial[l] = partial[l] + a * b;
    }
    let [p0, p1, p2, p3, p4, p5, p6, p7] = partial;
    ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7))
}
