//! A batch split over a thread pool: XLA's intra-op pool in the CPU handlers, the C ABI's own
//! in `capi`. Tasks may run inline or on a pool of one thread, so nothing depends on parallel
//! progress: the calling thread drains tasks too.

use crate::error::{Error, Result};
use faer::{MatMut, MatRef};
use std::ffi::c_void;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A pool of threads that run tasks handed to them: what the cores need of one.
pub trait Pool {
    /// The pool's threads (1 when there is none).
    fn threads(&self) -> usize;
    /// Runs `task(data)` on one of the pool's threads, or returns false (the calling thread
    /// then does the work itself).
    fn schedule(&self, task: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> bool;
}

/// A pool without threads: everything runs on the calling thread.
pub struct Serial;

impl Pool for Serial {
    fn threads(&self) -> usize {
        1
    }
    fn schedule(&self, _: unsafe extern "C" fn(*mut c_void), _: *mut c_void) -> bool {
        false
    }
}

struct ParallelState {
    next: AtomicUsize,
    done: Mutex<usize>,
    all_done: Condvar,
    first_error: Mutex<Option<Error>>,
    tasks: usize,
    // Points to the caller's closure; only dereferenced while a task index < `tasks` is held,
    // and the caller does not return before every such index is finished.
    body: *const (dyn Fn(usize) -> Result<()> + Sync),
}

unsafe impl Send for ParallelState {}
unsafe impl Sync for ParallelState {}

impl ParallelState {
    /// Claims and runs task indices until none are left.
    fn drain(&self) {
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= self.tasks {
                return;
            }
            // SAFETY: see `body`.
            let body = unsafe { &*self.body };
            let outcome = catch_unwind(AssertUnwindSafe(|| body(index)))
                .unwrap_or_else(|panic| Err(Error::from_panic(panic)));
            if let Err(error) = outcome {
                self.first_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(error);
            }
            let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
            *done += 1;
            if *done == self.tasks {
                self.all_done.notify_all();
            }
        }
    }
}

unsafe extern "C" fn run_pool_task(data: *mut c_void) {
    // SAFETY: `data` is the `Arc` leaked by `parallel_for` for this task.
    let state = unsafe { Arc::from_raw(data as *const ParallelState) };
    state.drain();
}

/// Runs `body(0..tasks)` on `pool` and the calling thread; returns the first error (or panic,
/// as an internal error) once every task has finished.
pub fn parallel_for(
    pool: &dyn Pool,
    tasks: usize,
    body: &(dyn Fn(usize) -> Result<()> + Sync),
) -> Result<()> {
    if tasks == 0 {
        return Ok(());
    }
    // The calling thread works too, so one helper fewer than the pool's threads keeps as many
    // threads busy as the pool is sized for; one helper per thread oversubscribed the cores
    // (2 cores, batched Cholesky: p90 of the call time 1.4 -> 0.9 ms).
    let helpers = (pool.threads().max(1) - 1).min(tasks - 1);
    if helpers == 0 {
        return (0..tasks).try_for_each(body);
    }
    // SAFETY: erases the closure's lifetime; `ParallelState::body` explains why that holds.
    let body: *const (dyn Fn(usize) -> Result<()> + Sync + 'static) =
        unsafe { std::mem::transmute(body as *const (dyn Fn(usize) -> Result<()> + Sync)) };
    let state = Arc::new(ParallelState {
        next: AtomicUsize::new(0),
        done: Mutex::new(0),
        all_done: Condvar::new(),
        first_error: Mutex::new(None),
        tasks,
        body,
    });
    for _ in 0..helpers {
        let data = Arc::into_raw(state.clone()) as *mut c_void;
        if !pool.schedule(run_pool_task, data) {
            // No pool: reclaim the reference and let the calling thread do the work.
            // SAFETY: the task was not scheduled, so this reference is still ours.
            drop(unsafe { Arc::from_raw(data as *const ParallelState) });
            break;
        }
    }
    state.drain();
    let mut done = state.done.lock().unwrap_or_else(|e| e.into_inner());
    while *done < tasks {
        done = state.all_done.wait(done).unwrap_or_else(|e| e.into_inner());
    }
    drop(done);
    let error = state
        .first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    error.map_or(Ok(()), Err)
}

/// How many chunks [`parallel_chunks`] makes per thread, at most.
const CHUNKS_PER_THREAD: usize = 4;

/// Splits `0..items` into chunks of at least `min_chunk` and runs `body(range)` per chunk.
pub fn parallel_chunks(
    pool: &dyn Pool,
    items: usize,
    min_chunk: usize,
    body: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    if items == 0 {
        return Ok(());
    }
    let chunk = chunk_len(pool, items, min_chunk);
    let tasks = items.div_ceil(chunk);
    if tasks == 1 {
        return body(0..items);
    }
    parallel_for(pool, tasks, &|t| {
        body(t * chunk..((t + 1) * chunk).min(items))
    })
}

/// The items per chunk where `items` are split over `pool`, at least `min_chunk`. Several
/// chunks per thread: a helper that starts late (a busy or descheduled core) then takes fewer
/// of them, where with one chunk per thread the caller would wait for it, or do its chunk too.
fn chunk_len(pool: &dyn Pool, items: usize, min_chunk: usize) -> usize {
    let threads = pool.threads().max(1);
    items
        .div_ceil(threads * CHUNKS_PER_THREAD)
        .max(min_chunk.max(1))
}

/// One step of a blocked factorization over the pool with look-ahead: `next()` (the next
/// panel's columns and that panel, the critical path) as one task from the start, and
/// `rest(range)` over `0..items` (the other columns) in chunks of at least half a [`PANEL`]
/// as the others.
pub fn look_ahead(
    pool: &dyn Pool,
    next: &(dyn Fn() -> Result<()> + Sync),
    items: usize,
    rest: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let chunk = chunk_len(pool, items, PANEL / 2);
    parallel_for(pool, 1 + items.div_ceil(chunk), &|task| match task {
        0 => next(),
        _ => rest((task - 1) * chunk..(task * chunk).min(items)),
    })
}

/// Below this many flops of work per task, scheduling on the pool costs more than it saves
/// (the same cut-off jaxlib uses for its LAPACK batch loop).
pub const MIN_FLOPS_PER_TASK: usize = 200_000;

/// Runs `per_chunk(range)` over `0..items` on `pool`, in chunks of at least
/// `MIN_FLOPS_PER_TASK` given the cost of one item in flops. Per-chunk setup (LAPACK
/// workspace) goes at the top of `per_chunk`.
pub fn for_each_chunk(
    pool: &dyn Pool,
    items: usize,
    flops_per_item: usize,
    per_chunk: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let min_chunk = min_chunk(flops_per_item);
    if items <= min_chunk {
        // One chunk: LAPACK may use its own threads.
        return per_chunk(0..items);
    }
    // Several calls run at once, so each keeps OpenBLAS on its own thread: even small ones
    // start its threads otherwise (bench-cpu, 2 cores: triangular_solve f64 227×48 4.2 ms
    // with them, 2.1 without; 512×32 4.7-20 ms, 2.1 without).
    parallel_chunks(pool, items, min_chunk, &|range| {
        ferrax_cpu_fallback::single_threaded(|| per_chunk(range))
    })
}

/// Whether [`for_each_chunk`] runs `items` on several of `pool`'s threads at once.
pub fn splits_over_threads(pool: &dyn Pool, items: usize, flops_per_item: usize) -> bool {
    pool.threads() > 1 && items > min_chunk(flops_per_item)
}

/// The fewest items per task of [`for_each_chunk`].
fn min_chunk(flops_per_item: usize) -> usize {
    MIN_FLOPS_PER_TASK.div_ceil(flops_per_item.max(1))
}

/// [`for_each_chunk`] for work without per-chunk setup.
pub fn for_each_parallel(
    pool: &dyn Pool,
    items: usize,
    flops_per_item: usize,
    per_item: &(dyn Fn(usize) -> Result<()> + Sync),
) -> Result<()> {
    for_each_chunk(pool, items, flops_per_item, &|range| {
        range.into_iter().try_for_each(per_item)
    })
}

/// Calls `group(first)` for each run of [`SIMD_GROUP`] items of `range` (the CPU's SIMD
/// small-matrix routines factor that many matrices at once, one per vector lane) and
/// `one(item)` for the items left over, up to the first error.
pub fn by_simd_groups(
    range: Range<usize>,
    mut group: impl FnMut(usize) -> Result<()>,
    one: impl FnMut(usize) -> Result<()>,
) -> Result<()> {
    let mut first = range.start;
    while first + SIMD_GROUP <= range.end {
        group(first)?;
        first += SIMD_GROUP;
    }
    (first..range.end).try_for_each(one)
}

/// Matrices the CPU's SIMD small-matrix routines take at once.
pub const SIMD_GROUP: usize = ferrax_kernels::small::simd::LANES;

/// A raw pointer that pool tasks may share: each task touches a disjoint part of the buffer
/// it points into.
#[derive(Clone, Copy)]
pub struct SharedMut<T>(pub *mut T);
unsafe impl<T> Send for SharedMut<T> {}
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// The pointer offset by `count` elements. (A method, so that closures capture the
    /// wrapper rather than its non-`Sync` field.)
    ///
    /// # Safety
    /// As `pointer::add`.
    pub unsafe fn at(&self, count: usize) -> *mut T {
        self.0.add(count)
    }

    /// The `len` elements from element `start`, as a slice.
    ///
    /// # Safety
    /// They lie in the buffer, and nothing else reads or writes them while the slice lives
    /// (each pool task takes its own part of the buffer).
    #[allow(clippy::mut_from_ref)] // the buffer is shared, its parts are not
    pub unsafe fn slice<'a>(&self, start: usize, len: usize) -> &'a mut [T] {
        if len == 0 {
            return &mut [];
        }
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

/// A matrix that pool tasks share, `rows × cols` with elements `strides` apart (between rows,
/// between columns): each task reads blocks that nothing writes meanwhile, or writes its own.
#[derive(Clone, Copy)]
pub struct SharedMatrix<T> {
    first: SharedMut<T>,
    rows: usize,
    cols: usize,
    strides: [usize; 2],
}

impl<T> SharedMatrix<T> {
    /// # Safety
    /// `first` points to such a matrix, which outlives the view and its blocks, and which
    /// nothing but the blocks touches meanwhile.
    pub unsafe fn new(first: *mut T, [rows, cols]: [usize; 2], strides: [usize; 2]) -> Self {
        Self {
            first: SharedMut(first),
            rows,
            cols,
            strides,
        }
    }

    /// [`SharedMatrix::new`] for a column-major matrix, columns `rows` apart.
    ///
    /// # Safety
    /// As [`SharedMatrix::new`].
    pub unsafe fn column_major(first: *mut T, rows: usize, cols: usize) -> Self {
        Self::new(first, [rows, cols], [1, rows])
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn strides(&self) -> [usize; 2] {
        self.strides
    }

    /// The element in row `i` of column `j`.
    ///
    /// # Safety
    /// `i < rows` and `j < cols`.
    pub unsafe fn at(&self, i: usize, j: usize) -> *mut T {
        debug_assert!(i < self.rows && j < self.cols);
        self.first.at(i * self.strides[0] + j * self.strides[1])
    }

    /// Rows `r..r + h` of columns `c..c + w`.
    ///
    /// # Safety
    /// A block of the matrix that starts in it, which nothing writes while the view lives.
    pub unsafe fn read(&self, r: usize, c: usize, h: usize, w: usize) -> MatRef<'_, T> {
        debug_assert!(r + h <= self.rows && c + w <= self.cols);
        let [rs, cs] = self.strides.map(|s| s as isize);
        MatRef::from_raw_parts(self.at(r, c), h, w, rs, cs)
    }

    /// Rows `r..r + h` of columns `c..c + w`.
    ///
    /// # Safety
    /// A block of the matrix that starts in it, which nothing else reads or writes while the
    /// view lives.
    #[allow(clippy::mut_from_ref)] // blocks of the shared matrix, each its task's own
    pub unsafe fn write(&self, r: usize, c: usize, h: usize, w: usize) -> MatMut<'_, T> {
        debug_assert!(r + h <= self.rows && c + w <= self.cols);
        let [rs, cs] = self.strides.map(|s| s as isize);
        MatMut::from_raw_parts_mut(self.at(r, c), h, w, rs, cs)
    }
}

/// Columns per panel (block of reflectors) where one matrix is factored over the pool.
pub const PANEL: usize = 64;

/// Past this many pivots every matrix is factored over the pool, however many there are: a
/// task per matrix stages copies of its matrix (64 MB each at 2048 complex128).
pub const STAGED_PIVOTS_MAX: usize = 2048;

/// Whether each matrix of a batch is factored over the whole pool, one after the other,
/// rather than a matrix per task: from order 128 with fewer matrices than threads, where a
/// task per matrix would leave cores idle, and past [`STAGED_PIVOTS_MAX`]. Over the pool is
/// also faster than LAPACK on OpenBLAS's own threads (2 cores, one 512 matrix, ms, SciPy's
/// OpenBLAS → over the pool: f64 LU 5.8 → 2.7, QR 18.1 → 11.7, Cholesky 1.8 → 1.6; c128 LU
/// 6.8 → 5.8, QR 38.6 → 25.5, Cholesky 3.9 → 3.5). With as many matrices as threads a task
/// per matrix is the faster (2 cores, two f64 matrices, ms, over the pool → a task each: LU
/// 512 5.1 → 3.6, 1024 29.8 → 22.3, 2048 202 → 190; QR 512 20.9 → 14.9, 1024 112 → 93, 2048
/// 803 → 684; Cholesky 512 3.1 → 2.5, 2048 116 → 117). A batch of tall or wide matrices with
/// fewer pivots keeps a task per matrix (one matrix after another left batches of 1000×4
/// nearly serial).
pub fn one_matrix_over_pool(pool: &dyn Pool, count: usize, order: usize, pivots: usize) -> bool {
    pivots > STAGED_PIVOTS_MAX || (pivots > 0 && order >= 128 && count < pool.threads())
}
