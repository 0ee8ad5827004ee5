//! CSR sparse matrix times dense matrix, as jaxlib's `cpu_csr_sparse_dense_ffi` computes it
//! (Eigen's order of operations), row-major, with every offset and column checked before it
//! is used (jaxlib reads them unchecked). Errors name the operands as jaxlib's contract does
//! (`lhs_outer_indices`, `lhs_inner_indices`), which the C ABI documents too.

use super::parallel::{for_each_parallel, Pool, SharedMut, MIN_FLOPS_PER_TASK};
use crate::error::{Error, Result};
use crate::ffi::NativeType;
use num_complex::Complex;
use std::ops::Range;

/// The names errors give the offsets and the columns.
const OUTER: &str = "operand 1 'lhs_outer_indices'";
const INNER: &str = "operand 2 'lhs_inner_indices'";

/// A `rows × cols` sparse matrix in CSR form: row `r`'s entries are
/// `outer[r]..outer[r + 1]` of `data`, in the columns `inner` gives (entries past
/// `outer[rows]`, where jax pads BCSR, are never read).
#[derive(Clone, Copy)]
pub struct Csr<'a, T, I> {
    pub data: &'a [T],
    pub outer: &'a [I],
    pub inner: &'a [I],
    pub cols: usize,
}

/// `out = csr · rhs` for `rhs` `[cols, n]` and `out` `[rows, n]`, both row-major, the rows
/// split across `pool` by their entries; a bad offset or column is an error.
pub fn csr_times_dense<T: Element, I: SparseIndex>(
    pool: &dyn Pool,
    csr: Csr<'_, T, I>,
    rhs: &[T],
    n: usize,
    out: &mut [T],
) -> Result<()> {
    let rows = csr.outer.len().saturating_sub(1);
    if csr.outer.is_empty()
        || csr.inner.len() != csr.data.len()
        || rhs.len() != csr.cols * n
        || out.len() != rows * n
    {
        return Err(Error::internal(format!(
            "csr_times_dense: {} offsets, {} columns and {} entries, rhs of {} and out of {} \
             elements for n = {n}",
            csr.outer.len(),
            csr.inner.len(),
            csr.data.len(),
            rhs.len(),
            out.len()
        )));
    }
    let blocks = row_blocks::<T, I>(csr, n)?;
    if out.is_empty() {
        return Ok(());
    }
    let out = SharedMut(out.as_mut_ptr());
    // Each block is already worth a task; grouping them is up to the pool's chunking.
    for_each_parallel(pool, blocks.len() - 1, MIN_FLOPS_PER_TASK, &|b| {
        let rows = blocks[b]..blocks[b + 1];
        // SAFETY: blocks are disjoint row ranges of `out`, within its `rows * n` elements.
        let out = unsafe { out.slice(rows.start * n, rows.len() * n) };
        csr.rows_times(rows, rhs, n, out)
    })
}

/// An invalid-argument error: `operand: expected …, got …`.
pub(super) fn mismatch(operand: &str, expected: String, got: String) -> Error {
    Error::invalid_argument(format!("{operand}: expected {expected}, got {got}"))
}

/// Checks the row offsets (non-decreasing, within `0..=nnz`) and splits the rows into blocks
/// of at least `MIN_FLOPS_PER_TASK` each, balanced by entries as jaxlib does (an empty row
/// counts as one entry: it still writes a row). Returns the block boundaries.
fn row_blocks<T: Element, I: SparseIndex>(csr: Csr<'_, T, I>, n: usize) -> Result<Vec<usize>> {
    let (outer, nnz, rows) = (csr.outer, csr.data.len(), csr.outer.len() - 1);
    let offset = |r: usize| {
        outer[r].to_usize().filter(|&o| o <= nnz).ok_or_else(|| {
            mismatch(
                OUTER,
                format!("row offsets within 0..={nnz}"),
                format!("{} at index {r}", outer[r]),
            )
        })
    };
    let flops_per_entry = n.saturating_mul(T::FLOPS);
    let mut blocks = vec![0];
    let (mut start, mut work) = (offset(0)?, 0usize);
    for r in 0..rows {
        let end = offset(r + 1)?;
        if end < start {
            return Err(mismatch(
                OUTER,
                "non-decreasing row offsets".into(),
                format!("{} after {} at index {}", outer[r + 1], outer[r], r + 1),
            ));
        }
        work = work.saturating_add((end - start).max(1).saturating_mul(flops_per_entry));
        if work >= MIN_FLOPS_PER_TASK && r + 1 < rows {
            blocks.push(r + 1);
            work = 0;
        }
        start = end;
    }
    blocks.push(rows);
    Ok(blocks)
}

impl<T: Element, I: SparseIndex> Csr<'_, T, I> {
    /// `out = self[rows] · rhs` for `rhs` `[k, n]` and `out` `[rows.len(), n]`, both row-major,
    /// with the widest vector unit the CPU has (the baseline x86-64 build only assumes SSE2).
    fn rows_times(&self, rows: Range<usize>, rhs: &[T], n: usize, out: &mut [T]) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present.
            return unsafe { self.rows_times_avx2(rows, rhs, n, out) };
        }
        self.rows_times_portable(rows, rhs, n, out)
    }

    /// Without FMA, so that the sums stay bit-identical to the SSE2 build and to jaxlib's.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn rows_times_avx2(
        &self,
        rows: Range<usize>,
        rhs: &[T],
        n: usize,
        out: &mut [T],
    ) -> Result<()> {
        self.rows_times_portable(rows, rhs, n, out)
    }

    /// Sums each row's entries in storage order from zero, as Eigen does.
    #[inline(always)]
    fn rows_times_portable(
        &self,
        rows: Range<usize>,
        rhs: &[T],
        n: usize,
        out: &mut [T],
    ) -> Result<()> {
        for (r, out_row) in rows.zip(out.chunks_exact_mut(n)) {
            out_row.fill(T::default());
            // Checked by `row_blocks`.
            let entries =
                self.outer[r].to_usize().unwrap_or(0)..self.outer[r + 1].to_usize().unwrap_or(0);
            for e in entries {
                let column = self.inner[e]
                    .to_usize()
                    .filter(|&c| c < self.cols)
                    .ok_or_else(|| {
                        mismatch(
                            INNER,
                            format!("column indices within 0..{}", self.cols),
                            format!("{} at index {e} (row {r})", self.inner[e]),
                        )
                    })?;
                let value = self.data[e].times_one();
                let rhs_row = &rhs[column * n..(column + 1) * n];
                for (o, &x) in out_row.iter_mut().zip(rhs_row) {
                    *o = o.add_product(value, x);
                }
            }
        }
        Ok(())
    }
}

/// The element types jaxlib's kernel takes.
pub trait Element: NativeType + Default {
    /// Flops of one `add_product`, to size thread-pool tasks.
    const FLOPS: usize;
    /// `self + b`; integers wrap, as jaxlib's C++ does in practice.
    fn plus(self, b: Self) -> Self;
    /// `self * b`; integers wrap.
    fn times(self, b: Self) -> Self;
    /// `self + a * b`, rounded twice (no fused multiply-add, as Eigen's vectorized product).
    fn add_product(self, a: Self, b: Self) -> Self {
        self.plus(a.times(b))
    }
    /// `1 * self` as Eigen computes it (its product scales every entry by alpha = 1): the
    /// identity, except that a complex infinity gets NaN parts (`0 * inf`), as in stock jax.
    fn times_one(self) -> Self;
}

macro_rules! element {
    ($flops:expr, |$a:ident, $b:ident| $plus:expr, $times:expr, |$x:ident| $one:expr, $($t:ty),*) => {$(
        impl Element for $t {
            const FLOPS: usize = $flops;
            fn plus(self, $b: Self) -> Self {
                let $a = self;
                $plus
            }
            fn times(self, $b: Self) -> Self {
                let $a = self;
                $times
            }
            fn times_one(self) -> Self {
                let $x = self;
                $one
            }
        }
    )*};
}
element!(
    2,
    |a, b| a.wrapping_add(b),
    a.wrapping_mul(b),
    |x| x,
    i32,
    i64
);
element!(2, |a, b| a + b, a * b, |x| x, f32, f64);
element!(
    8,
    |a, b| a + b,
    a * b,
    |x| Complex::new(1.0, 0.0) * x,
    Complex<f32>,
    Complex<f64>
);

/// The index types of the offsets and columns.
pub trait SparseIndex: NativeType + std::fmt::Display {
    /// The value as an index, or `None` when negative.
    fn to_usize(self) -> Option<usize>;
    /// The value as an index into `0..len` by jax's rule for indexing (a negative index counts
    /// from the end, once), or `None` where it falls outside.
    fn wrapped(self, len: usize) -> Option<usize>;
}

macro_rules! sparse_index {
    ($($t:ty),*) => {$(
        impl SparseIndex for $t {
            fn to_usize(self) -> Option<usize> {
                usize::try_from(self).ok()
            }
            #[inline(always)]
            fn wrapped(self, len: usize) -> Option<usize> {
                // Without branches on the index: a select and one unsigned compare (`len` is at
                // most isize::MAX, an array's length; `self + len` below zero wraps above it).
                let index = self as i64;
                let index = if index < 0 { index.wrapping_add(len as i64) } else { index };
                ((index as u64) < len as u64).then_some(index as usize)
            }
        }
    )*};
}
sparse_index!(i32, i64);
