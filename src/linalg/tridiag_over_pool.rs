//! Householder reduction of one self-adjoint matrix to tridiagonal form over the pool: faer's
//! algorithm (`faer::linalg::evd::tridiag::tridiag_in_place`: unblocked, each column one fused
//! pass over the trailing matrix that applies the last reflector's rank-2 update and
//! multiplies by the new reflector), with that pass split into column slabs of equal work,
//! one per thread ([`steps_over_pool`]), and the rest of each step, `O(n)`, on the task that
//! leads. The pass is level-2 work bound by memory: on one core faer's is 26 of the 50 ms of
//! one complex128 eigendecomposition of order 512.

use super::parallel::Pool;
use super::steps_over_pool::{self, block_factors, load, store, Steps};
use super::LapackScalar;
use crate::error::Result;
use crate::memory;
use faer::linalg::householder::make_householder_in_place;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::traits::pulp::{Simd, WithSimd};
use faer::traits::{ComplexField, ComplexImpl, SimdArch};
use faer::{ColMut, MatMut};
use std::ops::Range;

/// Below this many columns left, a step's pass runs on the leader alone: the slabs are too
/// small to pay for the threads' hand-over.
const PARALLEL_MIN: usize = 64;

/// From this many bytes a matrix is worth reducing over the pool: below, its pass runs from
/// one core's cache anyway and gains less than the hand-overs cost (2 cores, 2 MiB of L2
/// each, one eigendecomposition, ms, faer's reduction → this one: complex128 128 1.97 →
/// 2.19, 256 9.8 → 9.9, 384 28.2 → 25.2, 512 62.8 → 51.9; complex64 512 31.9 → 30.2, 768
/// 97.8 → 88.4).
pub const MIN_BYTES: usize = 2 << 20;

/// Reduces the self-adjoint `a` (its lower triangle read; column-major) as faer's
/// `tridiag_in_place` does, into the same results: the tridiagonal on the diagonal and first
/// subdiagonal, the reflectors' essential parts below it, and their block factors in
/// `householder` (`block × (n - 1)`), with the fused pass of each step over `pool`.
pub fn tridiag_over_pool<T: LapackScalar>(
    pool: &dyn Pool,
    a: MatMut<'_, T>,
    householder: MatMut<'_, T>,
) -> Result<()> {
    let n = a.nrows();
    assert!(a.ncols() == n && a.row_stride() == 1 && householder.ncols() == n.saturating_sub(1));
    if n == 0 {
        return Ok(());
    }
    let slabs = steps_over_pool::slabs(pool);
    let zero = T::zero_impl();
    let mut y = memory::vec_of(n, zero)?;
    let mut w = memory::vec_of(n, zero)?;
    let mut z = memory::vec_of(slabs * n, zero)?;
    let mut tau_inv = zero;
    let (mut a, mut householder) = (a, householder);
    let reduction = Reduction {
        a: a.rb_mut().as_ptr_mut(),
        lda: a.col_stride() as usize,
        n,
        y: y.as_mut_ptr(),
        w: w.as_mut_ptr(),
        z: z.as_mut_ptr(),
        tau_inv: &mut tau_inv,
        taus: householder.rb_mut().as_ptr_mut(),
        taus_stride: householder.col_stride() as usize,
        slabs,
    };
    // SAFETY: `reduction` describes `a`, `householder` and the vectors above, which outlive
    // the tasks; the schedule hands each slab of a step to one task, after the leader's writes
    // for that step and before its next ones.
    let slab = |k: usize, s: usize| unsafe { reduction.slab(k, s) };
    steps_over_pool::run(
        pool,
        slabs,
        "tridiagonalization",
        &|steps| unsafe { reduction.lead(steps) },
        &slab,
    )?;
    // The reflectors' block factors, as faer's.
    block_factors(householder, a.rb().submatrix(1, 0, n - 1, n - 1));
    Ok(())
}

/// The matrix (column-major, columns `lda` apart) and the reduction's vectors: `y` (the
/// current reflector's `τ⁻¹·A·v`, corrected as faer's), `w` (the previous one's `y`), one
/// partial product `z` of `n` per slab, the step's `τ⁻¹`, and the reflectors' `τ` (the first
/// row of the block factors, columns `taus_stride` apart).
struct Reduction<T> {
    a: *mut T,
    lda: usize,
    n: usize,
    y: *mut T,
    w: *mut T,
    z: *mut T,
    tau_inv: *mut T,
    taus: *mut T,
    taus_stride: usize,
    slabs: usize,
}

// SAFETY: the tasks share the pointers as the schedule orders their accesses.
unsafe impl<T> Send for Reduction<T> {}
unsafe impl<T> Sync for Reduction<T> {}

impl<T: LapackScalar> Reduction<T> {
    unsafe fn at(&self, i: usize, j: usize) -> *mut T {
        self.a.add(i + j * self.lda)
    }

    /// faer's loop: for each column, the previous reflector's update of it, its reflector,
    /// the fused pass over the trailing matrix (step `k` over the pool), `y`'s corrections.
    unsafe fn lead(&self, steps: &mut Steps<'_, impl Fn(usize, usize)>) -> Result<()> {
        let (n, y, w) = (self.n, self.y, self.w);
        let half = T::from_f64_impl(0.5);
        for k in 0..n {
            if k > 0 {
                let y1 = *y.add(k);
                *self.at(k, k) -= y1 + y1.conj();
                for i in k + 1..n {
                    *self.at(i, k) -= y1.conj() * *self.at(i, k - 1) + *y.add(i);
                }
            }
            if k + 1 == n {
                break;
            }
            let tail = ColMut::from_raw_parts_mut(self.at(k + 2, k), n - k - 2, 1);
            let info = make_householder_in_place(&mut *self.at(k + 1, k), tail);
            *self.taus.add(k * self.taus_stride) = T::from_real_impl(&info.tau);
            let tau_inv = T::from_real_impl(&<T as ComplexField>::Real::recip_impl(&info.tau));
            *self.tau_inv = tau_inv;
            if k > 0 {
                let (u1, y1) = (*self.at(k + 1, k - 1), *y.add(k + 1));
                let diagonal = self.at(k + 1, k + 1);
                *diagonal -= u1 * y1.conj() + y1 * u1.conj();
                for i in k + 2..n {
                    let (u, yi) = (*self.at(i, k - 1), *y.add(i));
                    *self.at(i, k + 1) -= u * y1.conj() + yi * u1.conj();
                    *w.add(i) = yi;
                }
            } else {
                (2..n).for_each(|i| *w.add(i) = T::zero_impl());
            }
            let m = n - k - 2;
            if m >= PARALLEL_MIN && self.slabs > 1 {
                steps.run(k)?;
                for s in 0..self.slabs {
                    for i in self.first_column(m, s)..m {
                        *y.add(k + 2 + i) += *self.z.add(s * n + i);
                    }
                }
            } else if m > 0 {
                self.fused_pass(k, 0..m, self.z, tau_inv);
                for i in 0..m {
                    *y.add(k + 2 + i) += *self.z.add(i);
                }
            }
            // The reflector is v = (1, x): A·v's part from the column's own element.
            let x = |i: usize| *self.at(i, k);
            let mut dot = *self.at(k + 1, k + 1);
            for i in k + 2..n {
                *y.add(i) += *self.at(i, k + 1) * tau_inv;
                dot += self.at(i, k + 1).read().conj() * x(i);
            }
            let y1 = dot * tau_inv;
            let mut dot = y1;
            for i in k + 2..n {
                dot += x(i).conj() * *y.add(i);
            }
            let b = dot * half * tau_inv;
            *y.add(k + 1) = y1 - b;
            for i in k + 2..n {
                *y.add(i) -= b * x(i);
            }
        }
        Ok(())
    }

    /// Slab `s` of step `k`'s pass: its columns, its partial product.
    unsafe fn slab(&self, k: usize, s: usize) {
        let m = self.n - k - 2;
        let columns = self.first_column(m, s)..self.first_column(m, s + 1);
        self.fused_pass(k, columns, self.z.add(s * self.n), *self.tau_inv);
    }

    /// The first of slab `s`'s columns of `m`: column `j` costs `m - j`, so slab `s` starts
    /// where `s / slabs` of the work is done.
    fn first_column(&self, m: usize, s: usize) -> usize {
        let done = s as f64 / self.slabs as f64;
        (((1.0 - (1.0 - done).sqrt()) * m as f64) as usize).min(m)
    }

    /// Step `k`'s pass over `columns` of the trailing `m × m` matrix from `(k + 2, k + 2)`:
    /// the previous reflector's rank-2 update (`u`, `w`; none at step 0), `y`'s part from
    /// these columns above the diagonal, `z`'s (rows from the first column) below.
    unsafe fn fused_pass(&self, k: usize, columns: Range<usize>, z: *mut T, tau_inv: T) {
        let first = k + 2;
        // Step 0 has no previous reflector: `w` is zero there, and stands for `u` too.
        let u = if k == 0 {
            self.w.add(first)
        } else {
            self.at(first, k - 1)
        };
        FusedPass {
            a: self.at(first, first),
            lda: self.lda,
            m: self.n - first,
            columns,
            y: self.y.add(first),
            z,
            w: self.w.add(first),
            u,
            x: self.at(first, k),
            f: tau_inv,
        }
        .run();
    }
}

/// One slab of a step's pass (see [`Reduction::fused_pass`]): columns `columns` of the
/// `m × m` trailing matrix `a`; `y`, `z`, `w`, `u`, `x` of `m`, from its first row.
struct FusedPass<T> {
    a: *mut T,
    lda: usize,
    m: usize,
    columns: Range<usize>,
    y: *mut T,
    z: *mut T,
    w: *const T,
    u: *const T,
    x: *const T,
    f: T,
}

impl<T: ComplexField> FusedPass<T> {
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
    fn cast<U: ComplexField>(self) -> FusedPass<U> {
        assert!(std::mem::size_of::<U>() == std::mem::size_of::<T>());
        FusedPass {
            a: self.a.cast(),
            lda: self.lda,
            m: self.m,
            columns: self.columns,
            y: self.y.cast(),
            z: self.z.cast(),
            w: self.w.cast(),
            u: self.u.cast(),
            x: self.x.cast(),
            // SAFETY: `U` is `T` in memory (faer's native complex types).
            f: unsafe { std::mem::transmute_copy(&self.f) },
        }
    }
}

/// One column's pass: the column, `z`, `w`, `u`, `x` (from the matrix's first row), and the
/// column's splatted `-w[j]`, `-u[j]`, `τ⁻¹·x[j]`.
struct FusedRows<T: ComplexField, S: Simd> {
    column: *mut T,
    z: *mut T,
    w: *const T,
    u: *const T,
    x: *const T,
    splat: [T::SimdVec<S>; 3],
}

impl<T: ComplexField, S: Simd> FusedRows<T, S> {
    /// Rows `i..` (one vector): the column's update, `z`'s and `acc`'s (`Σ conj(a)·x`).
    ///
    /// # Safety
    /// The rows are in bounds, the column and `z` the caller's.
    #[inline(always)]
    unsafe fn step(&self, ctx: &T::SimdCtx<S>, i: usize, acc: T::SimdVec<S>) -> T::SimdVec<S> {
        let [ry, ub, uc] = self.splat;
        let mut v = load::<T, S>(ctx, self.column.add(i));
        v = T::simd_conj_mul_add(ctx, ry, load::<T, S>(ctx, self.u.add(i)), v);
        v = T::simd_conj_mul_add(ctx, ub, load::<T, S>(ctx, self.w.add(i)), v);
        store::<T, S>(ctx, self.column.add(i), v);
        let z = T::simd_mul_add(ctx, v, uc, load::<T, S>(ctx, self.z.add(i)));
        store::<T, S>(ctx, self.z.add(i), z);
        T::simd_conj_mul_add(ctx, v, load::<T, S>(ctx, self.x.add(i)), acc)
    }
}

impl<T: ComplexField> WithSimd for FusedPass<T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let FusedPass {
            a,
            lda,
            m,
            columns,
            y,
            z,
            w,
            u,
            x,
            f,
        } = self;
        let ctx = T::simd_ctx(simd);
        let lanes = std::mem::size_of::<T::SimdVec<S>>() / std::mem::size_of::<T>();
        // SAFETY (all below): the pointers cover `m` elements (the matrix's columns, `m`
        // rows); this slab's columns of `a`, its `y` and `z` are its own.
        unsafe {
            // Every row the leader sums, also where the slab has no columns.
            (columns.start..m).for_each(|i| *z.add(i) = T::zero_impl());
            for j in columns {
                let column = a.add(j * lda);
                let ry = -&*w.add(j);
                let ub = -&*u.add(j);
                let uc = &f * &*x.add(j);
                let splat = [
                    T::simd_splat(&ctx, &ry),
                    T::simd_splat(&ctx, &ub),
                    T::simd_splat(&ctx, &uc),
                ];
                let rows = FusedRows {
                    column,
                    z,
                    w,
                    u,
                    x,
                    splat,
                };
                let mut acc = [T::simd_splat(&ctx, &T::zero_impl()); 2];
                let mut i = j;
                while i + 2 * lanes <= m {
                    acc[0] = rows.step(&ctx, i, acc[0]);
                    acc[1] = rows.step(&ctx, i + lanes, acc[1]);
                    i += 2 * lanes;
                }
                if i + lanes <= m {
                    acc[0] = rows.step(&ctx, i, acc[0]);
                    i += lanes;
                }
                let mut sum = T::simd_reduce_sum(&ctx, T::simd_add(&ctx, acc[0], acc[1]));
                let (ry, ub) = (T::conj_impl(&ry), T::conj_impl(&ub));
                for i in i..m {
                    let v = &(&*column.add(i) + &(&ry * &*u.add(i))) + &(&ub * &*w.add(i));
                    *z.add(i) = &*z.add(i) + &(&v * &uc);
                    sum = &sum + &(&T::conj_impl(&v) * &*x.add(i));
                    *column.add(i) = v;
                }
                // The diagonal is in `z`'s sum: not here too.
                let diagonal = &T::conj_impl(&*column.add(j)) * &*x.add(j);
                *y.add(j) = &f * &(&sum - &diagonal);
            }
        }
    }
}
