//! Householder reduction of one `m × n` matrix (`m ≥ n`) to upper bidiagonal form over the
//! pool: faer's algorithm (`faer::linalg::svd::bidiag::bidiag_in_place`: unblocked, the left
//! and the right reflector of each step from the trailing matrix's products with them), with
//! each step's work on the trailing matrix one pass split into column slabs, one per thread
//! ([`steps_over_pool`]). faer reads the trailing matrix twice per step: once to apply the last
//! step's rank-2 update and multiply by the new left reflector (`y = uᴴ·A₂₂`), once more for
//! `z = A₂₂·wᴴ` with the row `w` that `y` makes. Both are one pass here: `w`'s element `j` comes
//! from `y`'s alone, so each column, once updated and multiplied, adds its part of `z` while
//! it is in the core's cache, and the leader sums the slabs' parts. The pass is level-2 work
//! bound by memory: on one core faer's reduction is about half of its complex128 SVD of order
//! 512 (87 of 161 ms).

use super::parallel::Pool;
use super::steps_over_pool::{self, block_factors, load, store, Steps};
use super::LapackScalar;
use crate::error::Result;
use crate::memory;
use faer::linalg::householder::make_householder_in_place;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::traits::pulp::{Simd, WithSimd};
use faer::traits::{ComplexField, ComplexImpl, SimdArch};
use faer::{ColMut, MatMut, RowMut};
use std::ops::Range;

/// Below this many columns left, a step's pass runs on the leader alone: the slabs are too
/// small to pay for the threads' hand-over.
const PARALLEL_MIN: usize = 64;

/// Reduces `a` (`m × n`, `m ≥ n`, column-major) as faer's `bidiag_in_place` does, into the same
/// results: the bidiagonal on the diagonal and first superdiagonal, the left reflectors'
/// essential parts below the diagonal and the right ones' right of the superdiagonal, their
/// block factors in `left` (`block × n`) and `right` (`block × (n - 1)`), with each step's
/// pass over `pool`.
pub fn bidiag_over_pool<T: LapackScalar>(
    pool: &dyn Pool,
    a: MatMut<'_, T>,
    left: MatMut<'_, T>,
    right: MatMut<'_, T>,
) -> Result<()> {
    let (m, n) = (a.nrows(), a.ncols());
    assert!(m >= n && a.row_stride() == 1 && left.ncols() == n);
    assert!(right.ncols() == n.saturating_sub(1));
    if n == 0 {
        return Ok(());
    }
    let slabs = steps_over_pool::slabs(pool);
    let zero = T::zero_impl();
    let mut y = memory::vec_of(n, zero)?;
    let mut z = memory::vec_of(m, zero)?;
    let mut parts = memory::vec_of(slabs * m, zero)?;
    let mut tau_inv = zero;
    let (mut a, mut left, mut right) = (a, left, right);
    let reduction = Reduction {
        a: a.rb_mut().as_ptr_mut(),
        lda: a.col_stride() as usize,
        m,
        n,
        y: y.as_mut_ptr(),
        z: z.as_mut_ptr(),
        parts: parts.as_mut_ptr(),
        tau_inv: &mut tau_inv,
        left_taus: left.rb_mut().as_ptr_mut(),
        left_stride: left.col_stride() as usize,
        right_taus: right.rb_mut().as_ptr_mut(),
        right_stride: right.col_stride() as usize,
        slabs,
    };
    // SAFETY: `reduction` describes `a`, the factors and the vectors above, which outlive the
    // tasks; the schedule hands each slab of a step to one task, after the leader's writes for
    // that step and before its next ones.
    let slab = |k: usize, s: usize| unsafe { reduction.slab(k, s) };
    steps_over_pool::run(
        pool,
        slabs,
        "bidiagonalization",
        &|steps| unsafe { reduction.lead(steps) },
        &slab,
    )?;
    // The reflectors' block factors, as faer's: the left ones' below the diagonal, the right
    // ones' (rows) right of the superdiagonal.
    let a = a.rb();
    block_factors(left, a);
    block_factors(right, a.submatrix(0, 1, n - 1, n - 1).transpose());
    Ok(())
}

/// The matrix (column-major, columns `lda` apart) and the reduction's vectors: `y` (of `n`:
/// the left reflector's product with the trailing matrix, then faer's `y`), `z` (of `m`),
/// one part of `z` of `m` per slab, the step's left `τ⁻¹`, and the reflectors' `τ` (the first
/// rows of the block factors).
struct Reduction<T> {
    a: *mut T,
    lda: usize,
    m: usize,
    n: usize,
    y: *mut T,
    z: *mut T,
    parts: *mut T,
    tau_inv: *mut T,
    left_taus: *mut T,
    left_stride: usize,
    right_taus: *mut T,
    right_stride: usize,
    slabs: usize,
}

// SAFETY: the tasks share the pointers as the schedule orders their accesses.
unsafe impl<T> Send for Reduction<T> {}
unsafe impl<T> Sync for Reduction<T> {}

impl<T: LapackScalar> Reduction<T> {
    unsafe fn at(&self, i: usize, j: usize) -> *mut T {
        self.a.add(i + j * self.lda)
    }

    /// Row `k` right of column `k`: `A₁₂`.
    unsafe fn row(&self, k: usize) -> RowMut<'_, T> {
        RowMut::from_raw_parts_mut(self.at(k, k + 1), self.n - k - 1, self.lda as isize)
    }

    /// faer's loop: for each step `k`, the last step's update of column `k` (the pass updates
    /// row `k`, column by column), the left reflector, the pass over the trailing matrix (step
    /// `k` over the pool), the right reflector and `z`'s corrections.
    unsafe fn lead(&self, steps: &mut Steps<'_, impl Fn(usize, usize)>) -> Result<()> {
        let (m, n, y, z) = (self.m, self.n, self.y, self.z);
        for k in 0..n {
            if k > 0 {
                let (y1, z1, up0) = (*y.add(k), *z.add(k), *self.at(k, k - 1));
                *self.at(k, k) -= up0 * y1 + z1;
                for i in k + 1..m {
                    *self.at(i, k) -= *self.at(i, k - 1) * y1 + *z.add(i);
                }
            }
            let tail = ColMut::from_raw_parts_mut(self.at(k + 1, k), m - k - 1, 1);
            let info = make_householder_in_place(&mut *self.at(k, k), tail);
            *self.left_taus.add(k * self.left_stride) = T::from_real_impl(&info.tau);
            *self.tau_inv = T::from_real_impl(&<T as ComplexField>::Real::recip_impl(&info.tau));
            let columns = n - k - 1;
            let pooled = columns >= PARALLEL_MIN && self.slabs > 1;
            match pooled {
                true => steps.run(k)?,
                false => self.pass(k, 0..columns, self.parts),
            }
            // z = A₂₂·wᴴ from the slabs' parts, w = A₁₂ normalized.
            let (rows, slabs) = (m - k - 1, if pooled { self.slabs } else { 1 });
            for i in 0..rows {
                let mut sum = *self.parts.add(i);
                for s in 1..slabs {
                    sum += *self.parts.add(s * m + i);
                }
                *z.add(k + 1 + i) = sum;
            }
            let norm = self.row(k).rb().norm_l2();
            if norm != <T as ComplexField>::Real::zero_impl() {
                let norm_inv = T::from_real_impl(&<T as ComplexField>::Real::recip_impl(&norm));
                self.row(k).iter_mut().for_each(|w| *w *= norm_inv);
                (k + 1..m).for_each(|i| *z.add(i) *= norm_inv);
            }
            if k + 1 == n {
                break;
            }
            let tail = self.row(k).subcols_mut(1, columns - 1).transpose_mut();
            let info = make_householder_in_place(&mut *self.at(k, k + 1), tail);
            *self.right_taus.add(k * self.right_stride) = T::from_real_impl(&info.tau);
            let tr_inv = T::from_real_impl(&<T as ComplexField>::Real::recip_impl(&info.tau));
            let beta = *self.at(k, k + 1);
            *self.at(k, k + 1) = beta * T::from_real_impl(&norm);
            let mut b = *y.add(k + 1);
            for j in k + 2..n {
                b += *y.add(j) * self.at(k, j).read().conj();
            }
            let scale = info.head_with_beta_inv;
            for i in k + 1..m {
                let (u, a) = (*self.at(i, k), *self.at(i, k + 1));
                let w = if scale != T::infinity_impl() {
                    (*z.add(i) - a * beta.conj()) * scale.conj()
                } else {
                    a
                };
                *z.add(i) = (w - u * b) * tr_inv;
            }
        }
        Ok(())
    }

    /// Slab `s` of step `k`'s pass: its columns, its part of `z`.
    unsafe fn slab(&self, k: usize, s: usize) {
        let columns = self.n - k - 1;
        let slab = columns * s / self.slabs..columns * (s + 1) / self.slabs;
        self.pass(k, slab, self.parts.add(s * self.m));
    }

    /// Step `k`'s pass over `columns` of the trailing matrix from `(k + 1, k + 1)`, its part of
    /// `z` into `part`.
    unsafe fn pass(&self, k: usize, columns: Range<usize>, part: *mut T) {
        let first = k + 1;
        // Step 0 has no last step: `z` is zero there and stands for its left reflector (its
        // right one is not read).
        let (previous_left, previous_right, up0) = if k == 0 {
            (self.z.add(first), self.y.add(first), T::zero_impl())
        } else {
            (
                self.at(first, k - 1),
                self.at(k - 1, first),
                *self.at(k, k - 1),
            )
        };
        StepPass {
            a: self.at(first, first),
            lda: self.lda,
            rows: self.m - first,
            columns,
            u: self.at(first, k),
            previous_left,
            z: self.z.add(first),
            y: self.y.add(first),
            previous_right,
            row: self.at(k, first),
            part,
            tau_inv: *self.tau_inv,
            up0,
            z0: *self.z.add(k),
            first_step: k == 0,
        }
        .run();
    }
}

/// One slab of a step's pass: columns `columns` of the `rows`-row trailing matrix `a`; from its
/// first row the left reflector's essential part `u`, the last step's left one `up` and `z`;
/// from its first column `y`, the last step's right reflector `vp` (a row, `lda` apart) and the
/// step's row `A₁₂` (`lda` apart, above `a`); `up₀`, `z₀`: the elements of `up` and `z` in
/// `A₁₂`'s row. For each column `j`, with `y_j`, `vp_j` the last step's (zero at step 0):
/// `A₁₂_j -= up₀·y_j + z₀·vp_j`, `a_j -= up·y_j + z·vp_j`, then `y_j = (uᴴ·a_j + A₁₂_j)·τ⁻¹`,
/// `A₁₂_j -= y_j`, `part += a_j·conj(A₁₂_j)`.
struct StepPass<T> {
    a: *mut T,
    lda: usize,
    rows: usize,
    columns: Range<usize>,
    u: *const T,
    previous_left: *const T,
    z: *const T,
    y: *mut T,
    previous_right: *const T,
    row: *mut T,
    part: *mut T,
    tau_inv: T,
    up0: T,
    z0: T,
    first_step: bool,
}

impl<T: ComplexField> StepPass<T> {
    /// On the widest vector unit, in faer's native complex layout where `T` is complex.
    fn run(self) {
        if const { T::IS_NATIVE_C64 } {
            <ComplexImpl<f64> as ComplexField>::Arch::default()
                .dispatch(self.cast::<ComplexImpl<f64>>())
        } else if const { T::IS_NATIVE_C32 } {
            <ComplexImpl<f32> as ComplexField>::Arch::default()
                .dispatch(self.cast::<ComplexImpl<f32>>())
        } else {
            T::Arch::default().dispatch(self)
        }
    }

    /// The same pass over `U`, which is `T` in memory.
    fn cast<U: ComplexField>(self) -> StepPass<U> {
        assert!(std::mem::size_of::<U>() == std::mem::size_of::<T>());
        StepPass {
            a: self.a.cast(),
            lda: self.lda,
            rows: self.rows,
            columns: self.columns,
            u: self.u.cast(),
            previous_left: self.previous_left.cast(),
            z: self.z.cast(),
            y: self.y.cast(),
            previous_right: self.previous_right.cast(),
            row: self.row.cast(),
            part: self.part.cast(),
            // SAFETY: `U` is `T` in memory (faer's native complex types).
            tau_inv: unsafe { std::mem::transmute_copy(&self.tau_inv) },
            up0: unsafe { std::mem::transmute_copy(&self.up0) },
            z0: unsafe { std::mem::transmute_copy(&self.z0) },
            first_step: self.first_step,
        }
    }
}

/// One column's sweep: the column, the last step's left reflector, `z`, `u` (from the first
/// row), and the column's splatted last-step factors (`-y_j`, `-vp_j`).
struct Sweep<T: ComplexField, S: Simd> {
    column: *mut T,
    previous_left: *const T,
    z: *const T,
    u: *const T,
    splat: [T::SimdVec<S>; 2],
}

impl<T: ComplexField, S: Simd> Sweep<T, S> {
    /// Rows `i..` (one vector): the column's update, and `acc`'s (`Σ conj(u)·a`).
    ///
    /// # Safety
    /// The rows are in bounds, the column the caller's.
    #[inline(always)]
    unsafe fn step(&self, ctx: &T::SimdCtx<S>, i: usize, acc: T::SimdVec<S>) -> T::SimdVec<S> {
        let [sy, sv] = self.splat;
        let mut v = load::<T, S>(ctx, self.column.add(i));
        v = T::simd_mul_add(ctx, load::<T, S>(ctx, self.previous_left.add(i)), sy, v);
        v = T::simd_mul_add(ctx, load::<T, S>(ctx, self.z.add(i)), sv, v);
        store::<T, S>(ctx, self.column.add(i), v);
        T::simd_conj_mul_add(ctx, load::<T, S>(ctx, self.u.add(i)), v, acc)
    }
}

impl<T: ComplexField> WithSimd for StepPass<T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let StepPass {
            a,
            lda,
            rows,
            columns,
            u,
            previous_left,
            z,
            y,
            previous_right,
            row,
            part,
            tau_inv,
            up0,
            z0,
            first_step,
        } = self;
        let ctx = T::simd_ctx(simd);
        let lanes = std::mem::size_of::<T::SimdVec<S>>() / std::mem::size_of::<T>();
        let vectors = rows / lanes * lanes;
        // SAFETY (all below): the pointers cover `rows` elements (the columns, `u`, the last
        // step's left reflector, `z`, `part`) or the trailing columns (`y`, the rows, `lda`
        // apart); this slab's columns of `a`, of the step's row and of `y`, and `part`, are its
        // own.
        unsafe {
            // Every row the leader sums, also where the slab has no columns.
            (0..rows).for_each(|i| *part.add(i) = T::zero_impl());
            for j in columns {
                let column = a.add(j * lda);
                let a12 = row.add(j * lda);
                // The last step's factors for this column (zero at step 0: no update).
                let (ry, rv) = match first_step {
                    true => (T::zero_impl(), T::zero_impl()),
                    false => (-&*y.add(j), -&*previous_right.add(j * lda)),
                };
                *a12 = &(&*a12 + &(&up0 * &ry)) + &(&z0 * &rv);
                // The update and uᴴ·column in one sweep.
                let sweep = Sweep {
                    column,
                    previous_left,
                    z,
                    u,
                    splat: [T::simd_splat(&ctx, &ry), T::simd_splat(&ctx, &rv)],
                };
                let mut acc = [T::simd_splat(&ctx, &T::zero_impl()); 2];
                let mut i = 0;
                while i + 2 * lanes <= rows {
                    acc[0] = sweep.step(&ctx, i, acc[0]);
                    acc[1] = sweep.step(&ctx, i + lanes, acc[1]);
                    i += 2 * lanes;
                }
                if i < vectors {
                    acc[0] = sweep.step(&ctx, i, acc[0]);
                }
                let mut dot = T::simd_reduce_sum(&ctx, T::simd_add(&ctx, acc[0], acc[1]));
                for i in vectors..rows {
                    let v =
                        &(&*column.add(i) + &(&*previous_left.add(i) * &ry)) + &(&*z.add(i) * &rv);
                    dot = &dot + &(&T::conj_impl(&*u.add(i)) * &v);
                    *column.add(i) = v;
                }
                let yj = &(&dot + &*a12) * &tau_inv;
                let w = &*a12 - &yj;
                *a12 = w.clone();
                *y.add(j) = yj;
                let cw = T::conj_impl(&w);
                let sw = T::simd_splat(&ctx, &cw);
                let mut i = 0;
                while i < vectors {
                    let p = load::<T, S>(&ctx, part.add(i));
                    let v = load::<T, S>(&ctx, column.add(i));
                    store::<T, S>(&ctx, part.add(i), T::simd_mul_add(&ctx, v, sw, p));
                    i += lanes;
                }
                for i in vectors..rows {
                    *part.add(i) = &*part.add(i) + &(&*column.add(i) * &cw);
                }
            }
        }
    }
}
