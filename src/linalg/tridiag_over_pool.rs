//! Householder reduction of one self-adjoint matrix to tridiagonal form over the pool: faer's
//! algorithm (`faer::linalg::evd::tridiag::tridiag_in_place`: unblocked, each column one fused
//! pass over the trailing matrix that applies the last reflector's rank-2 update and
//! multiplies by the new reflector), with that pass split into column slabs of equal work,
//! one per thread (up to [`MAX_SLABS`]), and the rest of each step, `O(n)`, on the task that
//! leads. The pass is level-2 work bound by memory: on one core faer's is 26 of the 50 ms of
//! one complex128 eigendecomposition of order 512.
//!
//! The slabs of one step start together and the leader waits for all of them, about `n`
//! times per matrix: too often for a dispatch on the pool each time. So one task per thread
//! runs for the whole reduction, and the steps are handed out through atomics ([`Schedule`]).
//! Nothing waits for a task that has not started: the leader does every slab nobody else has
//! claimed, and a task that starts late joins at the step under way.

use super::parallel::{parallel_for, Pool};
use super::underflow::GradualUnderflow;
use super::LapackScalar;
use crate::error::{Error, Result};
use crate::memory;
use faer::linalg::householder::{make_householder_in_place, upgrade_householder_factor};
use faer::prelude::{Reborrow, ReborrowMut};
use faer::traits::pulp::{Simd, WithSimd};
use faer::traits::{ComplexField, ComplexImpl, SimdArch};
use faer::{ColMut, MatMut, MatRef, Par};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Below this many columns left, a step's pass runs on the leader alone: the slabs are too
/// small to pay for the threads' hand-over.
const PARALLEL_MIN: usize = 64;

/// At most this many slabs per step (the pool's threads, up to this): the leader sums the
/// slabs' partial products, up to `n` elements each per step, which past a few slabs outgrows
/// a slab's share of the pass.
const MAX_SLABS: usize = 8;

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
    let slabs = pool.threads().clamp(1, MAX_SLABS);
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
    let schedule = Schedule::new(slabs);
    parallel_for(pool, slabs, &|task| {
        // faer's reflectors count on gradual underflow, which XLA's threads turn off; the
        // caller keeps it on its own thread, each helper here on its own.
        let _gradual = GradualUnderflow::new();
        // SAFETY: `reduction` describes `a`, `householder` and the vectors above, which
        // outlive the tasks; the schedule hands each slab of a step to one task, after the
        // leader's writes for that step and before its next ones.
        let run = || unsafe {
            if task == 0 {
                reduction.lead(&schedule)
            } else {
                reduction.help(&schedule);
                Ok(())
            }
        };
        let outcome = catch_unwind(AssertUnwindSafe(run));
        // Whatever happened, no task may wait for this one any longer.
        schedule.close();
        outcome.unwrap_or_else(|panic| Err(Error::from_panic(panic)))
    })?;
    // The reflectors' block factors, as faer's.
    let n1 = n - 1;
    let block = householder.nrows();
    let essentials = a.rb().submatrix(1, 0, n1, n1);
    let mut j = 0;
    while j < n1 {
        let b = block.min(n1 - j);
        let mut factor = householder.rb_mut().submatrix_mut(0, j, b, b);
        for k in 0..b {
            factor[(k, k)] = factor[(0, k)];
        }
        let reflectors: MatRef<'_, T> = essentials.submatrix(j, j, n1 - j, b);
        upgrade_householder_factor(factor, reflectors, b, 1, Par::Seq);
        j += b;
    }
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

// SAFETY: the tasks share the pointers as `Schedule` orders their accesses.
unsafe impl<T> Send for Reduction<T> {}
unsafe impl<T> Sync for Reduction<T> {}

impl<T: LapackScalar> Reduction<T> {
    unsafe fn at(&self, i: usize, j: usize) -> *mut T {
        self.a.add(i + j * self.lda)
    }

    /// faer's loop: for each column, the previous reflector's update of it, its reflector,
    /// the fused pass over the trailing matrix (step `k` of the schedule), `y`'s corrections.
    unsafe fn lead(&self, schedule: &Schedule) -> Result<()> {
        let (n, y, w) = (self.n, self.y, self.w);
        let half = T::from_f64_impl(0.5);
        let mut held = None;
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
                schedule.open(k);
                loop {
                    let ticket = held.take().unwrap_or_else(|| schedule.claim());
                    if ticket / self.slabs > k {
                        held = Some(ticket);
                        break;
                    }
                    self.slab(k, ticket % self.slabs, tau_inv);
                    schedule.finish();
                }
                schedule.wait_for(k)?;
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

    /// Slabs of the steps the leader opens, until it closes the schedule.
    unsafe fn help(&self, schedule: &Schedule) {
        loop {
            let ticket = schedule.claim();
            let step = ticket / self.slabs;
            if !schedule.wait_open(step) {
                return;
            }
            self.slab(step, ticket % self.slabs, *self.tau_inv);
            schedule.finish();
        }
    }

    /// Slab `s` of step `k`'s pass: its columns, its partial product.
    unsafe fn slab(&self, k: usize, s: usize, tau_inv: T) {
        let m = self.n - k - 2;
        let columns = self.first_column(m, s)..self.first_column(m, s + 1);
        self.fused_pass(k, columns, self.z.add(s * self.n), tau_inv);
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

/// Who does which slab of which step. A ticket `t` is slab `t % slabs` of step `t / slabs`
/// (the steps over the pool are the first ones, from 0); tickets are claimed in order, so all
/// of one step's are claimed before the next's. The leader opens a step once its own writes
/// for it are done, and waits until every slab of it is finished before it writes again.
struct Schedule {
    slabs: usize,
    /// One past the last step opened; [`CLOSED`] once the reduction is over.
    opened: AtomicUsize,
    tickets: AtomicUsize,
    finished: AtomicUsize,
}

const CLOSED: usize = usize::MAX;

impl Schedule {
    fn new(slabs: usize) -> Self {
        Schedule {
            slabs,
            opened: AtomicUsize::new(0),
            tickets: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
        }
    }

    fn open(&self, step: usize) {
        self.opened.store(step + 1, Ordering::Release);
    }

    fn claim(&self) -> usize {
        self.tickets.fetch_add(1, Ordering::Relaxed)
    }

    fn finish(&self) {
        self.finished.fetch_add(1, Ordering::Release);
    }

    fn close(&self) {
        self.opened.store(CLOSED, Ordering::Release);
    }

    /// Waits until `step` is open (true) or the schedule closed (false).
    fn wait_open(&self, step: usize) -> bool {
        let mut spins = 0;
        loop {
            match self.opened.load(Ordering::Acquire) {
                CLOSED => return false,
                opened if opened > step => return true,
                _ => spin(&mut spins),
            }
        }
    }

    /// Waits until every slab of `step` is finished; an error where a task that held one
    /// stopped (a panic, which closed the schedule).
    fn wait_for(&self, step: usize) -> Result<()> {
        let mut spins = 0;
        while self.finished.load(Ordering::Acquire) < (step + 1) * self.slabs {
            if self.opened.load(Ordering::Acquire) == CLOSED {
                return Err(Error::internal("tridiagonalization: a task stopped"));
            }
            spin(&mut spins);
        }
        Ok(())
    }
}

/// Busy waits a while (the other side's work between steps is microseconds), then yields the
/// core (the other side is descheduled or late).
fn spin(spins: &mut u32) {
    *spins += 1;
    if *spins < 1 << 12 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
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
        T::simd_store(ctx, &mut *(self.column.add(i) as *mut T::SimdVec<S>), v);
        let z = T::simd_mul_add(ctx, v, uc, load::<T, S>(ctx, self.z.add(i)));
        T::simd_store(ctx, &mut *(self.z.add(i) as *mut T::SimdVec<S>), z);
        T::simd_conj_mul_add(ctx, v, load::<T, S>(ctx, self.x.add(i)), acc)
    }
}

/// The vector at `p` (not a closure: those do not take the caller's vector unit).
///
/// # Safety
/// `p` points to a vector's worth of elements.
#[inline(always)]
unsafe fn load<T: ComplexField, S: Simd>(ctx: &T::SimdCtx<S>, p: *const T) -> T::SimdVec<S> {
    T::simd_load(ctx, &*(p as *const T::SimdVec<S>))
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
