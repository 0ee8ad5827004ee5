//! LU with partial pivoting of a row-major matrix where it lies (jax's layout): LAPACK's
//! recursive `?getrf2` — the left half of the columns, the right half's swaps, solve and
//! update by faer, the right half — with row swaps along contiguous rows and an unblocked
//! base for panels of up to [`base`] columns whose rows the vector unit takes whole. Nothing
//! is transposed in or out: `jax.lax.linalg.lu` of 128 f64 64×64 matrices on this project's
//! 2-core AVX-512 machine 0.64 ms, against 0.85 by faer's LU of a column-major copy.

use super::swap_rows;
use crate::linalg::underflow::GradualUnderflow;
use crate::linalg::vector_unit::{has_avx512, simd_dispatch};
use crate::linalg::LapackScalar;
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::solve_unit_lower_triangular_in_place;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, MatMut, Par};
use ferrax_kernels::scalar::{Real, Scalar};

/// Panels up to this many columns are factored unblocked: 16 with AVX-512, 8 without. On AVX2
/// 8 against 16 (this project's Zen 3 machine, 2 cores, jax.scipy.linalg.lu_factor, batch×n,
/// ms): f64 128×64 1.21 vs 1.36, 32×128 1.57 vs 1.72; c128 64×64 1.49 vs 2.10, 16×128 2.01
/// vs 2.62 (a row of 16 complex takes 8 of the 16 ymm registers, the pivot row 8 more); f32
/// and c64 10-20% faster; 4 no faster than 8.
fn base() -> usize {
    if has_avx512() {
        16
    } else {
        8
    }
}

/// Factors the `m × n` matrix `a` (its columns adjacent: row-major) in place into LAPACK's
/// packed `L` and `U`, with its `min(m, n)` 1-based pivots in `ipiv`. False where a pivot's
/// modulus is below the safe minimum or NaN (`a` then partly factored): LAPACK divides by a
/// tiny pivot and leaves a zero one's column unscaled, which the caller leaves to LAPACK.
pub fn getrf_row_major<T: LapackScalar>(mut a: MatMut<'_, T>, ipiv: &mut [i32]) -> bool {
    debug_assert!(a.col_stride() == 1 && ipiv.len() == a.nrows().min(a.ncols()));
    let _gradual = GradualUnderflow::new();
    let m = a.nrows();
    let base = base();
    if a.ncols() <= m {
        return tall(a, ipiv, base);
    }
    // Wide: the leading square, then the rest of `U`'s rows.
    let (mut left, mut right) = a.rb_mut().split_at_col_mut(m);
    if !tall(left.rb_mut(), ipiv, base) {
        return false;
    }
    swap_rows(right.rb_mut(), ipiv, 0);
    solve_unit_lower_triangular_in_place(left.rb(), right, Par::Seq);
    true
}

/// [`getrf_row_major`] of an `m × n` matrix with `m ≥ n`, panels up to `base` wide unblocked.
fn tall<T: LapackScalar>(a: MatMut<'_, T>, ipiv: &mut [i32], base: usize) -> bool {
    let n = a.ncols();
    if n <= base {
        let mut factored = false;
        unblocked(a, ipiv, &mut factored);
        return factored;
    }
    // The left part a whole number of base panels where it can be.
    let n1 = (n / 2).next_multiple_of(base / 2).min(n - 1);
    let (ipiv_left, ipiv_right) = ipiv.split_at_mut(n1);
    let (mut left, mut right) = a.split_at_col_mut(n1);
    if !tall(left.rb_mut(), ipiv_left, base) {
        return false;
    }
    swap_rows(right.rb_mut(), ipiv_left, 0);
    let (l11, a21) = left.rb().split_at_row(n1);
    let (mut a12, mut a22) = right.split_at_row_mut(n1);
    solve_unit_lower_triangular_in_place(l11, a12.rb_mut(), Par::Seq);
    let minus_one = -<T as Scalar>::ONE;
    matmul(a22.rb_mut(), Accum::Add, a21, a12.rb(), minus_one, Par::Seq);
    if !tall(a22, ipiv_right, base) {
        return false;
    }
    ipiv_right.iter_mut().for_each(|p| *p += n1 as i32);
    swap_rows(left, ipiv_right, n1);
    true
}

simd_dispatch! {
    /// LAPACK's unblocked LU (`?getf2`) of the panel `a` (`m × w`, `m ≥ w`, `w ≤` [`base`]):
    /// `factored` as [`getrf_row_major`] returns.
    fn unblocked<T: LapackScalar>(a: MatMut<'_, T>, ipiv: &mut [i32], factored: &mut bool) {
        let panel = Panel {
            first: a.as_ptr_mut(),
            rows: a.nrows(),
            width: a.ncols(),
            stride: a.row_stride() as usize,
        };
        // SAFETY: `panel` is `a`, borrowed mutably here.
        *factored = unsafe {
            match panel.width {
                16 => panel.factor_fixed::<16>(ipiv),
                8 => panel.factor_fixed::<8>(ipiv),
                4 => panel.factor_fixed::<4>(ipiv),
                _ => panel.factor_any(ipiv),
            }
        };
    }
}

/// A row-major panel: `rows × width` from `first`, rows `stride` elements apart.
struct Panel<T> {
    first: *mut T,
    rows: usize,
    width: usize,
    stride: usize,
}

impl<T: LapackScalar> Panel<T> {
    /// Row `i`.
    ///
    /// # Safety
    /// `i < rows`; no other reference to the row lives meanwhile.
    #[inline(always)]
    unsafe fn row<'a>(&self, i: usize) -> &'a mut [T] {
        std::slice::from_raw_parts_mut(self.first.add(i * self.stride), self.width)
    }

    /// Row `i` of a panel `W` wide, as an array (no bounds to check in its loops).
    ///
    /// # Safety
    /// As [`Panel::row`], and `width == W`.
    #[inline(always)]
    unsafe fn row_of<'a, const W: usize>(&self, i: usize) -> &'a mut [T; W] {
        &mut *self.first.add(i * self.stride).cast::<[T; W]>()
    }

    /// Column `k`'s pivot from row `k` down: the first of the largest `|re| + |im|`, as
    /// `I?AMAX` (a NaN in row `k` stays, a later one is passed over).
    ///
    /// # Safety
    /// `k < width ≤ rows`.
    #[inline(always)]
    unsafe fn pivot_row(&self, k: usize) -> usize {
        let (mut row, mut largest) = (k, self.row(k)[k].abs1());
        for i in k + 1..self.rows {
            let x = self.row(i)[k].abs1();
            if x > largest {
                (row, largest) = (i, x);
            }
        }
        row
    }

    /// Swaps row `row`, column `k`'s pivot, into row `k` and records it in `ipiv[k]`; the
    /// pivot's reciprocal, or None where LAPACK would not scale by it (modulus below the safe
    /// minimum, or NaN).
    ///
    /// # Safety
    /// `k ≤ row < rows`, `k < width`.
    #[inline(always)]
    unsafe fn take_pivot(&self, k: usize, row: usize, ipiv: &mut [i32]) -> Option<T> {
        let safe_min = <<T as Scalar>::Real as Real>::SAFE_MIN;
        let pivot = self.row(row)[k];
        if !pivot.modulus_at_least(safe_min) {
            return None;
        }
        ipiv[k] = row as i32 + 1;
        if row != k {
            self.row(k).swap_with_slice(self.row(row));
        }
        Some(<T as Scalar>::ONE.quotient(pivot))
    }

    /// The factorization of a panel exactly `W` wide: each row's update is one fixed-length
    /// pass over all `W` elements (kept where left of the pivot), which vectorizes whole.
    ///
    /// # Safety
    /// The panel is the caller's, `width == W ≤ rows`.
    #[inline(always)]
    unsafe fn factor_fixed<const W: usize>(&self, ipiv: &mut [i32]) -> bool {
        let mut pivot_row = self.pivot_row(0);
        for k in 0..W {
            let Some(reciprocal) = self.take_pivot(k, pivot_row, ipiv) else {
                return false;
            };
            let u = *self.row_of::<W>(k);
            // Column k + 1's pivot is searched for as its elements are updated, which saves
            // the panel a second pass over its rows per column (as `pivot_row`): f64 LU of
            // 256 matrices of 64 2.9 -> 2.3 ms on 2 cores, c128 5.0 -> 4.9.
            let next = k + 1;
            let mut largest = <<T as Scalar>::Real as Real>::ZERO;
            for i in next..self.rows {
                let row = self.row_of::<W>(i);
                let l = row[k] * reciprocal;
                for j in 0..W {
                    let (x, updated) = (row[j], row[j] - l * u[j]);
                    let kept = if j > k { updated } else { x };
                    row[j] = if j == k { l } else { kept };
                }
                if next < W {
                    let x = row[next].abs1();
                    if i == next || x > largest {
                        (pivot_row, largest) = (i, x);
                    }
                }
            }
        }
        true
    }

    /// The factorization of a panel of any width.
    ///
    /// # Safety
    /// The panel is the caller's, `width ≤ rows`.
    #[inline(always)]
    unsafe fn factor_any(&self, ipiv: &mut [i32]) -> bool {
        for k in 0..self.width {
            let Some(reciprocal) = self.take_pivot(k, self.pivot_row(k), ipiv) else {
                return false;
            };
            let u = &self.row(k)[k + 1..];
            for i in k + 1..self.rows {
                let row = self.row(i);
                let l = row[k] * reciprocal;
                row[k] = l;
                for (x, &u) in row[k + 1..].iter_mut().zip(u) {
                    *x -= l * u;
                }
            }
        }
        true
    }
}
