//! What the Householder reductions over the pool share ([`super::tridiag_over_pool`],
//! [`super::bidiag_over_pool`]), and the application of their reflectors, its columns split
//! over the pool ([`apply_reflectors`]).
//! Each step of a reduction is one pass over the trailing matrix, split into column slabs,
//! one per thread, between `O(n)` work on the task that leads. The slabs of one step start
//! together and the leader waits for all of them, about `n` times per matrix: too often for a
//! dispatch on the pool each time. So one task per thread runs for the whole reduction, and
//! the steps are handed out through atomics ([`Schedule`]). Nothing waits for a task that has
//! not started: the leader does every slab nobody else has claimed, and a task that starts
//! late joins at the step under way.

use super::parallel::{parallel_chunks, parallel_for, Pool, SharedMatrix, PANEL};
use super::underflow::GradualUnderflow;
use super::LapackScalar;
use crate::error::{Error, Result};
use crate::memory;
use faer::dyn_stack::{MemStack, StackReq};
use faer::linalg::householder::{
    apply_block_householder_sequence_on_the_left_in_place_scratch,
    apply_block_householder_sequence_on_the_left_in_place_with_conj, upgrade_householder_factor,
};
use faer::prelude::ReborrowMut;
use faer::traits::pulp::Simd;
use faer::traits::ComplexField;
use faer::{Conj, MatMut, MatRef, Par};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

/// At most this many slabs per step (the pool's threads, up to this): the leader sums the
/// slabs' partial products, up to `n` elements each per step, which past a few slabs outgrows
/// a slab's share of the pass.
const MAX_SLABS: usize = 8;

/// The slabs per step for `pool`.
pub fn slabs(pool: &dyn Pool) -> usize {
    pool.threads().clamp(1, MAX_SLABS)
}

/// Runs one reduction over `pool` in `slabs` slabs per step: `lead` on the calling thread's
/// task, which runs the steps over the pool through [`Steps::run`], and `slab(step, s)` for
/// each slab of those steps, on whichever task claims it. `what` names the reduction in the
/// error of a task that stopped.
pub fn run<S: Fn(usize, usize) + Sync>(
    pool: &dyn Pool,
    slabs: usize,
    what: &'static str,
    lead: &(dyn Fn(&mut Steps<'_, S>) -> Result<()> + Sync),
    slab: &S,
) -> Result<()> {
    let schedule = Schedule::new(slabs, what);
    parallel_for(pool, slabs, &|task| {
        // faer's reflectors count on gradual underflow, which XLA's threads turn off; the
        // caller keeps it on its own thread, each helper here on its own.
        let _gradual = GradualUnderflow::new();
        let run = || {
            if task == 0 {
                lead(&mut Steps {
                    schedule: &schedule,
                    slab,
                    held: None,
                })
            } else {
                schedule.help(slab);
                Ok(())
            }
        };
        let outcome = catch_unwind(AssertUnwindSafe(run));
        // Whatever happened, no task may wait for this one any longer.
        schedule.close();
        outcome.unwrap_or_else(|panic| Err(Error::from_panic(panic)))
    })
}

/// The leader's side of the schedule.
pub struct Steps<'a, S> {
    schedule: &'a Schedule,
    slab: &'a S,
    /// A ticket of the next step, claimed before that step opened.
    held: Option<usize>,
}

impl<S: Fn(usize, usize)> Steps<'_, S> {
    /// Runs step `k`'s slabs over the pool, once the leader's writes for it are done; returns
    /// when all are finished. The steps over the pool are `0, 1, …` in order.
    pub fn run(&mut self, k: usize) -> Result<()> {
        let schedule = self.schedule;
        schedule.open(k);
        loop {
            let ticket = self.held.take().unwrap_or_else(|| schedule.claim());
            if ticket / schedule.slabs > k {
                self.held = Some(ticket);
                break;
            }
            (self.slab)(k, ticket % schedule.slabs);
            schedule.finish();
        }
        schedule.wait_for(k)
    }
}

/// Who does which slab of which step. A ticket `t` is slab `t % slabs` of step `t / slabs`;
/// tickets are claimed in order, so all of one step's are claimed before the next's. The
/// leader opens a step once its own writes for it are done, and waits until every slab of it
/// is finished before it writes again.
struct Schedule {
    slabs: usize,
    what: &'static str,
    /// One past the last step opened; [`CLOSED`] once the reduction is over.
    opened: AtomicUsize,
    tickets: AtomicUsize,
    finished: AtomicUsize,
}

const CLOSED: usize = usize::MAX;

impl Schedule {
    fn new(slabs: usize, what: &'static str) -> Self {
        Schedule {
            slabs,
            what,
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

    /// A helper's loop: slabs of the steps the leader opens, until it closes the schedule.
    fn help(&self, slab: &impl Fn(usize, usize)) {
        loop {
            let ticket = self.claim();
            let step = ticket / self.slabs;
            if !self.wait_open(step) {
                return;
            }
            slab(step, ticket % self.slabs);
            self.finish();
        }
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
                return Err(Error::internal(format!("{}: a task stopped", self.what)));
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

/// The vector at `p`, for the passes' SIMD kernels (not a closure: those do not take the
/// caller's vector unit).
///
/// # Safety
/// `p` points to a vector's worth of elements.
#[inline(always)]
pub unsafe fn load<T: ComplexField, S: Simd>(ctx: &T::SimdCtx<S>, p: *const T) -> T::SimdVec<S> {
    T::simd_load(ctx, &*(p as *const T::SimdVec<S>))
}

/// Stores `v` at `p`.
///
/// # Safety
/// `p` points to a vector's worth of elements that the caller may write.
#[inline(always)]
pub unsafe fn store<T: ComplexField, S: Simd>(ctx: &T::SimdCtx<S>, p: *mut T, v: T::SimdVec<S>) {
    T::simd_store(ctx, &mut *(p as *mut T::SimdVec<S>), v)
}

/// faer's block factors (`upgrade_householder_factor`) of the reflectors stored below the
/// diagonal of `essentials` (one per column of `factors`), from their `τ` in `factors`' first
/// row, as faer's reductions finish.
pub fn block_factors<T: LapackScalar>(mut factors: MatMut<'_, T>, essentials: MatRef<'_, T>) {
    let (block, count) = (factors.nrows(), factors.ncols());
    let mut j = 0;
    while j < count {
        let b = block.min(count - j);
        let mut factor = factors.rb_mut().submatrix_mut(0, j, b, b);
        for k in 0..b {
            factor[(k, k)] = factor[(0, k)];
        }
        let rows = essentials.nrows() - j;
        upgrade_householder_factor(factor, essentials.submatrix(j, j, rows, b), b, 1, Par::Seq);
        j += b;
    }
}

/// Applies the reflectors stored below the diagonal of `essentials` (their block factors in
/// `factors`, conjugated as `conj` says) to rows `first..` of `target` (column-major, `rows`
/// rows, columns `rows` apart, as many as it holds) by faer's blocked application, its
/// columns split over `pool`: each task first writes its columns (`init(columns, block)`, the
/// block of all their rows), then applies the reflectors to them. On one thread in `stack`
/// ([`apply_reflectors_scratch`] for all the columns), else each task in scratch of its own;
/// `what` names the routine where that scratch cannot be had.
#[allow(clippy::too_many_arguments)] // the reflectors, the target and its layout, the scratch
pub fn apply_reflectors<T: LapackScalar>(
    pool: &dyn Pool,
    essentials: MatRef<'_, T>,
    factors: MatRef<'_, T>,
    conj: Conj,
    target: &mut [T],
    rows: usize,
    first: usize,
    init: &(dyn Fn(Range<usize>, MatMut<'_, T>) + Sync),
    stack: &mut MemStack,
    what: &'static str,
) -> Result<()> {
    let cols = target.len().checked_div(rows).unwrap_or(0);
    // SAFETY: `target` holds `rows × cols` elements, and each task below writes its own columns.
    let shared = unsafe { SharedMatrix::column_major(target.as_mut_ptr(), rows, cols) };
    let apply = |columns: Range<usize>, stack: &mut MemStack| {
        // SAFETY: this task's columns.
        let mut block = unsafe { shared.write(0, columns.start, rows, columns.len()) };
        init(columns, block.rb_mut());
        if factors.ncols() > 0 {
            apply_block_householder_sequence_on_the_left_in_place_with_conj(
                essentials,
                factors,
                conj,
                block.subrows_mut(first, rows - first),
                Par::Seq,
                stack,
            );
        }
    };
    if pool.threads() == 1 {
        apply(0..cols, stack);
        return Ok(());
    }
    parallel_chunks(pool, cols, PANEL / 2, &|columns| {
        let request = apply_reflectors_scratch::<T>(rows - first, factors.nrows(), columns.len());
        let mut scratch = memory::faer_scratch(request, what)?;
        let _gradual = GradualUnderflow::new();
        apply(columns, MemStack::new(&mut scratch));
        Ok(())
    })
}

/// faer's scratch for [`apply_reflectors`] of reflectors of `rows` in blocks of `block` to
/// `columns` columns.
pub fn apply_reflectors_scratch<T: LapackScalar>(
    rows: usize,
    block: usize,
    columns: usize,
) -> StackReq {
    apply_block_householder_sequence_on_the_left_in_place_scratch::<T>(rows, block, columns)
}
