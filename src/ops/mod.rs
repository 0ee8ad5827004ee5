//! One module per op family. Each declares its target name once and the handlers bound to it
//! (the same name is registered per platform, with that platform's handler).

pub mod getrf;
pub mod pivots;
pub mod threefry;

use crate::ffi::{Error, Result, ThreadPool};

/// A raw pointer that thread-pool tasks may share: each task touches a disjoint part of the
/// buffer it points into.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut<T>(pub *mut T);
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
}

/// Below this many flops of work per task, scheduling on the pool costs more than it saves
/// (the same cut-off jaxlib uses for its LAPACK batch loop).
const MIN_FLOPS_PER_TASK: usize = 200_000;

/// Runs `per_item(i)` for `i in 0..items` on XLA's thread pool, in chunks of at least
/// `MIN_FLOPS_PER_TASK` given the cost of one item in flops.
pub(crate) fn for_each_parallel(
    pool: &ThreadPool<'_>,
    items: usize,
    flops_per_item: usize,
    per_item: &(dyn Fn(usize) -> Result<()> + Sync),
) -> Result<()> {
    let min_chunk = MIN_FLOPS_PER_TASK.div_ceil(flops_per_item.max(1));
    pool.parallel_chunks(items, min_chunk, &|range| {
        range.into_iter().try_for_each(per_item)
    })
}

/// A dimension as LAPACK's 32-bit integer, or an error naming the operand.
pub(crate) fn lapack_dim(buffer: &crate::ffi::Buffer<'_>, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        Error::invalid_argument(format!(
            "{}: dimension {value} exceeds LAPACK's 32-bit integer range (shape {:?})",
            buffer.operand,
            buffer.dims()
        ))
    })
}
