//! jax's `lu_solve` (its `_lu_solve_core` under vmap) on row-major batches in one pass: per
//! matrix, the right-hand sides permuted and both triangular solves, in cache. jax's rule
//! makes an XLA gather and two `triangular_solve` calls, each a pass over the whole batch
//! (and, on the CPU, two transposes around each solve).

use super::parallel::{for_each_chunk, Pool, SharedMut};
use super::underflow::GradualUnderflow;
use super::LapackScalar;
use crate::error::{Error, Result};
use crate::memory;
use faer::linalg::triangular_solve as faer_trsm;
use faer::{Conj, MatMut, MatRef, Par};
use ferrax_kernels::small::{trsm, Transpose};

/// From this order on the triangular solves are faer's (recursive, its matrix products' SIMD
/// kernels), for any number of right-hand sides: `jnp.linalg.solve`, 2 cores, ~4 MB batches,
/// 1 to n right-hand sides, against the substitution loops of [`trsm`]: n = 8 0.85-1.05x the
/// time, 16 0.55-0.9x, 32 0.6-0.8x, 64-128 0.4-0.9x. Below it, faer's 4×4 base case is
/// about all there is and the loops are as fast.
const FAER_MIN_ORDER: usize = 8;

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
    for_each_chunk(pool, count, flops, &|range| {
        // A transposed solve's copy of b and put-back offsets, one per task.
        let (mut y, mut starts) = (Vec::new(), Vec::new());
        if trans != Transpose::No {
            memory::grow(&mut y, n * k, T::ZERO)?;
            memory::grow(&mut starts, n + 1, 0)?;
        }
        for m in range {
            let lu = &lu[m * n * n..(m + 1) * n * n];
            let perm = &perm[m * n..(m + 1) * n];
            let b = &b[m * n * k..(m + 1) * n * k];
            // SAFETY: system `m`'s solution, which this task alone writes.
            let x = unsafe { out.slice(m * n * k, n * k) };
            solve_one(lu, perm, b, x, [n, k], trans, (&mut y[..], &mut starts[..]));
        }
        Ok(())
    })
}

/// One system. Row-major `lu` read column-major is `(L·U)ᵀ`'s storage: its upper triangle
/// holds `Lᵀ`, its lower one `Uᵀ`; row-major `x` read column-major is `xᵀ` (`k × n`, leading
/// dimension `k`). So `L·y = c` is `yᵀ·Lᵀ = cᵀ`, a solve from the right with that upper
/// triangle, and so on: each step is an update of contiguous rows of x.
/// With `trans`, `y` (`n·k` elements) and `starts` (`n + 1`) are its scratch.
fn solve_one<T: LapackScalar>(
    lu: &[T],
    perm: &[i32],
    b: &[T],
    x: &mut [T],
    [n, k]: [usize; 2],
    trans: Transpose,
    (y, starts): (&mut [T], &mut [usize]),
) {
    let solve = |x: &mut [T], lower: bool, trans: Transpose, unit: bool| {
        if n >= FAER_MIN_ORDER {
            faer_solve(lu, x, [n, k], lower, trans, unit)
        } else {
            trsm(false, lower, trans, unit, k, n, lu, n, x, k)
        }
    };
    if trans == Transpose::No {
        for (row, &p) in x.chunks_exact_mut(k).zip(perm) {
            let p = p as usize;
            row.copy_from_slice(&b[p * k..(p + 1) * k]);
        }
        solve(x, false, Transpose::No, true); // L
        solve(x, true, Transpose::No, false); // U
        return;
    }
    // Uᵀ (or Uᴴ), then Lᵀ (or Lᴴ), on a copy of b; row r of the solution is then row ind[r]
    // of it, ind the stable argsort of perm.
    y.copy_from_slice(b);
    solve(y, true, trans, false);
    solve(y, false, trans, true);
    starts.fill(0);
    for &p in perm {
        starts[p as usize + 1] += 1;
    }
    for v in 0..n {
        starts[v + 1] += starts[v];
    }
    for (i, &p) in perm.iter().enumerate() {
        let r = &mut starts[p as usize];
        x[*r * k..(*r + 1) * k].copy_from_slice(&y[i * k..(i + 1) * k]);
        *r += 1;
    }
}

/// The step of [`solve_one`] that `trsm` makes from the right on the column-major views, made
/// by faer on the row-major ones: `x ← op(T)⁻¹·x`, `T` the triangle of `lu` that the
/// column-major view calls `lower_in_column_major` (its transpose's), unit if `unit`.
fn faer_solve<T: LapackScalar>(
    lu: &[T],
    x: &mut [T],
    [n, k]: [usize; 2],
    lower_in_column_major: bool,
    trans: Transpose,
    unit: bool,
) {
    // faer's complex reciprocal needs subnormals (see `underflow`).
    let _gradual = GradualUnderflow::new();
    let a = MatRef::from_row_major_slice(lu, n, n);
    let x = MatMut::from_row_major_slice_mut(x, n, k);
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
