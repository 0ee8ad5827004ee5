//! COO sparse matrix times dense, or its transpose times dense: jax's BCOO `dot_general` for a
//! plain sparse matrix (`indices` `[nnz, 2]`, no batch or dense dimensions), which stock jax
//! lowers to XLA's gather and scatter-add, one serial pass over the entries. Here the entries
//! are split across the pool, each read once: the product streams them, so a pass to learn
//! their order first would cost as much as the product.
//!
//! jax's index rules: a negative index counts from the end once (`-1` is the last row), and an
//! index still outside the matrix drops its entry (jax pads BCOO with such entries). Duplicate
//! entries add up. No index is an error.
//!
//! Where the tasks' entries look sorted by output row (each task's first row at most its last,
//! which is at most the next task's first: what `sort_indices`, and every BCOO jax makes from
//! dense, give), each task owns the rows strictly between its first and last and adds into them
//! in `out` directly; its first and last rows it sums apart, and they are added in task order
//! afterwards. A task that meets a row outside its range after all (unsorted entries) says so,
//! and the product is done again the other way: each thread sums into its own copy of `out`,
//! and the copies are added element by element, where they cost no more memory than the
//! entries; else in one pass.

use super::parallel::{parallel_chunks, parallel_for, Pool, SharedMut, MIN_FLOPS_PER_TASK};
use super::sparse::{Element, SparseIndex};
use crate::error::{Error, Result};
use crate::memory::vec_of;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

/// A `rows × cols` sparse matrix in COO form: entry `e` is `data[e]` at row `indices[2e]` and
/// column `indices[2e + 1]` (jax's rules above).
#[derive(Clone, Copy)]
pub struct Coo<'a, T, I> {
    pub data: &'a [T],
    pub indices: &'a [I],
    pub rows: usize,
    pub cols: usize,
}

/// Row ranges per thread of the pool.
const RANGES_PER_THREAD: usize = 4;

/// Entries a task adds between looks at whether any task met a row outside its range.
const STRAY_CHECK_ENTRIES: usize = 1 << 14;

/// Elements of `out` one task sums at least, where that is all it does.
const MIN_ELEMENTS_PER_TASK: usize = 1 << 15;

/// `out = a · rhs`, or `out = aᵀ · rhs` with `transpose`, for `rhs` `[k, n]` and `out`
/// `[m, n]`, both row-major (`k × m` is `cols × rows`, or `rows × cols` transposed).
pub fn coo_times_dense<T: Element, I: SparseIndex>(
    pool: &dyn Pool,
    a: Coo<'_, T, I>,
    transpose: bool,
    rhs: &[T],
    n: usize,
    out: &mut [T],
) -> Result<()> {
    let (m, k) = if transpose {
        (a.cols, a.rows)
    } else {
        (a.rows, a.cols)
    };
    if a.indices.len() != 2 * a.data.len() || rhs.len() != k * n || out.len() != m * n {
        return Err(Error::internal(format!(
            "coo_times_dense: {} indices for {} entries, rhs of {} and out of {} elements for a \
             {}×{} matrix and n = {n}",
            a.indices.len(),
            a.data.len(),
            rhs.len(),
            out.len(),
            a.rows,
            a.cols
        )));
    }
    if out.is_empty() {
        return Ok(());
    }
    let product = Product {
        a,
        transpose,
        rhs,
        n,
        m,
        k,
    };
    let entries = a.data.len();
    let work = entries.saturating_mul(n).saturating_mul(T::FLOPS);
    let threads = pool
        .threads()
        .min(work / MIN_FLOPS_PER_TASK)
        .clamp(1, entries.max(1));
    if threads == 1 {
        product.serial(out);
        return Ok(());
    }
    // Several row ranges per thread: a thread that starts late (XLA's pool wakes its threads
    // on demand) then takes fewer of them, rather than the caller doing its share too.
    let tasks = (threads * RANGES_PER_THREAD).min(entries);
    let chunk = entries.div_ceil(tasks);
    let task_entries = |t: usize| (t * chunk).min(entries)..((t + 1) * chunk).min(entries);
    let rows: Vec<Option<(usize, usize)>> = (0..tasks)
        .map(|t| product.first_and_last_row(task_entries(t)))
        .collect();
    if ordered(&rows) && product.by_row_ranges(pool, &rows, &task_entries, out)? {
        return Ok(());
    }
    // One copy of `out` per thread.
    if threads.saturating_mul(m) <= entries {
        if let Ok(copies) = vec_of(threads * m * n, T::default()) {
            let chunk = entries.div_ceil(threads);
            let thread_entries = |t: usize| t * chunk..((t + 1) * chunk).min(entries);
            return product.by_copies(pool, copies, &thread_entries, out);
        }
    }
    product.serial(out);
    Ok(())
}

/// Whether each task's first row (of its kept entries) is at most its last, and its last at
/// most the next task's first.
fn ordered(rows: &[Option<(usize, usize)>]) -> bool {
    let mut next = 0;
    rows.iter().flatten().all(|&(first, last)| {
        let fits = next <= first && first <= last;
        next = last;
        fits
    })
}

/// The product's operands, and `out`'s `m` rows and `rhs`'s `k`.
#[derive(Clone, Copy)]
struct Product<'a, T, I> {
    a: Coo<'a, T, I>,
    transpose: bool,
    rhs: &'a [T],
    n: usize,
    m: usize,
    k: usize,
}

impl<T: Element, I: SparseIndex> Product<'_, T, I> {
    /// The kept entries of `entries`: each one's output row, `rhs` row and value.
    #[inline(always)]
    fn entries(
        &self,
        entries: Range<usize>,
    ) -> impl DoubleEndedIterator<Item = (usize, usize, T)> + '_ {
        let out_column = usize::from(self.transpose);
        let pairs = self.a.indices[2 * entries.start..2 * entries.end].chunks_exact(2);
        pairs
            .zip(&self.a.data[entries])
            .filter_map(move |(pair, &value)| {
                let (out_index, rhs_index) = (pair[out_column], pair[1 - out_column]);
                Some((
                    out_index.wrapped(self.m)?,
                    rhs_index.wrapped(self.k)?,
                    value,
                ))
            })
    }

    /// The output rows of the first and the last kept entry of `entries`.
    fn first_and_last_row(&self, entries: Range<usize>) -> Option<(usize, usize)> {
        let mut kept = self.entries(entries);
        let first = kept.next()?.0;
        Some((first, kept.next_back().map_or(first, |(r, _, _)| r)))
    }

    /// Adds `data[e] · rhs[c]` into the `n` elements at `row(r)` for each kept entry `e` of
    /// `entries` at `(r, c)`, with the widest vector unit the CPU has (the baseline x86-64
    /// build only assumes SSE2).
    ///
    /// # Safety
    /// `row(r)` points at `n` elements that nothing else reads or writes during the call.
    unsafe fn accumulate(&self, entries: Range<usize>, row: impl FnMut(usize) -> *mut T) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present; the rows as the caller promises.
            return unsafe { self.accumulate_avx2(entries, row) };
        }
        // SAFETY: as the caller promises.
        unsafe { self.accumulate_portable(entries, row) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn accumulate_avx2(&self, entries: Range<usize>, row: impl FnMut(usize) -> *mut T) {
        // SAFETY: as `accumulate`'s caller promises.
        unsafe { self.accumulate_portable(entries, row) }
    }

    #[inline(always)]
    unsafe fn accumulate_portable(
        &self,
        entries: Range<usize>,
        mut row: impl FnMut(usize) -> *mut T,
    ) {
        let n = self.n;
        if n == 1 {
            // A run of entries in one row sums in a register, and is added to its row once.
            let (mut run, mut sum) = (None, T::default());
            for (r, c, value) in self.entries(entries) {
                if run != Some(r) {
                    if let Some(run) = run {
                        // SAFETY: as the caller promises.
                        unsafe { *row(run) = (*row(run)).plus(sum) };
                    }
                    (run, sum) = (Some(r), T::default());
                }
                // SAFETY: `c < k` (`entries`) and `rhs` has `k` elements.
                sum = sum.add_product(value, unsafe { *self.rhs.get_unchecked(c) });
            }
            if let Some(run) = run {
                // SAFETY: as the caller promises.
                unsafe { *row(run) = (*row(run)).plus(sum) };
            }
            return;
        }
        for (r, c, value) in self.entries(entries) {
            // SAFETY: as the caller promises.
            let out = unsafe { std::slice::from_raw_parts_mut(row(r), n) };
            for (o, &x) in out.iter_mut().zip(&self.rhs[c * n..][..n]) {
                *o = o.add_product(value, x);
            }
        }
    }

    /// The whole product in one pass.
    fn serial(&self, out: &mut [T]) {
        out.fill(T::default());
        let out = out.as_mut_ptr();
        // SAFETY: rows of `out`, within its `m * n` elements (`entries` keeps rows below `m`).
        unsafe { self.accumulate(0..self.a.data.len(), |r| out.add(r * self.n)) }
    }

    /// Each task adds into the rows strictly between its first and last row in `out`
    /// directly, and sums those two apart (`ordered` rows). Returns false, with `out` half
    /// done, where a task met a row outside its range.
    fn by_row_ranges(
        &self,
        pool: &dyn Pool,
        rows: &[Option<(usize, usize)>],
        task_entries: &(dyn Fn(usize) -> Range<usize> + Sync),
        out: &mut [T],
    ) -> Result<bool> {
        let n = self.n;
        // Per task: its first row's sums, its last row's, and a row for strays.
        let mut own = vec_of(rows.len() * 3 * n, T::default())?;
        let strays = AtomicBool::new(false);
        let (out_ptr, own_ptr) = (SharedMut(out.as_mut_ptr()), SharedMut(own.as_mut_ptr()));
        parallel_for(pool, rows.len(), &|t| {
            let Some((first, last)) = rows[t] else {
                return Ok(());
            };
            let mut strayed = false;
            // SAFETY: the rows strictly between `first` and `last` are this task's alone (the
            // tasks' ranges meet at most at their ends), as are its three rows of `own`.
            unsafe {
                let own = [0, 1, 2].map(|i| own_ptr.at((3 * t + i) * n));
                let interior = last.saturating_sub(first + 1);
                out_ptr
                    .slice((first + 1) * n, interior * n)
                    .fill(T::default());
                let entries = task_entries(t);
                // In blocks, so that every task stops soon after one strays.
                for start in entries.clone().step_by(STRAY_CHECK_ENTRIES) {
                    let block = start..(start + STRAY_CHECK_ENTRIES).min(entries.end);
                    self.accumulate(block, |r| {
                        if first < r && r < last {
                            out_ptr.at(r * n)
                        } else if r == first {
                            own[0]
                        } else if r == last {
                            own[1]
                        } else {
                            strayed = true;
                            own[2]
                        }
                    });
                    if strayed {
                        strays.store(true, Ordering::Relaxed);
                    }
                    if strays.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            Ok(())
        })?;
        if strays.load(Ordering::Relaxed) {
            return Ok(false);
        }
        // The rows no task owns, then the tasks' first and last rows, in task order.
        let mut next = 0;
        for &(first, last) in rows.iter().flatten() {
            out[next.min(first + 1) * n..(first + 1) * n].fill(T::default());
            next = if first == last { last + 1 } else { last };
        }
        out[next * n..].fill(T::default());
        for (t, &(first, last)) in rows
            .iter()
            .enumerate()
            .filter_map(|(t, r)| Some((t, r.as_ref()?)))
        {
            let ends = if first == last {
                &[first][..]
            } else {
                &[first, last]
            };
            for (&r, sums) in ends.iter().zip(own[3 * t * n..].chunks_exact(n)) {
                for (o, &s) in out[r * n..][..n].iter_mut().zip(sums) {
                    *o = o.plus(s);
                }
            }
        }
        Ok(true)
    }

    /// Task `t` sums into copy `t` of `out` (in `copies`, zeroed: one per thread); the copies
    /// are then added element by element.
    fn by_copies(
        &self,
        pool: &dyn Pool,
        mut copies: Vec<T>,
        task_entries: &(dyn Fn(usize) -> Range<usize> + Sync),
        out: &mut [T],
    ) -> Result<()> {
        let size = out.len();
        let tasks = copies.len() / size;
        let copies_ptr = SharedMut(copies.as_mut_ptr());
        parallel_for(pool, tasks, &|t| {
            // SAFETY: each task writes its own copy.
            unsafe { self.accumulate(task_entries(t), |r| copies_ptr.at(t * size + r * self.n)) };
            Ok(())
        })?;
        let out_ptr = SharedMut(out.as_mut_ptr());
        parallel_chunks(pool, size, MIN_ELEMENTS_PER_TASK, &|range| {
            // SAFETY: chunks are disjoint ranges of `out`.
            let out = unsafe { out_ptr.slice(range.start, range.len()) };
            out.copy_from_slice(&copies[range.clone()]);
            for copy in copies[size..].chunks_exact(size) {
                for (o, &c) in out.iter_mut().zip(&copy[range.clone()]) {
                    *o = o.plus(c);
                }
            }
            Ok(())
        })
    }
}
