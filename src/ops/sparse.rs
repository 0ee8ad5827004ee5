//! CSR sparse matrix times dense matrix or vector, jaxlib's `cpu_csr_sparse_dense_ffi` contract
//! (row-major, no aliasing, no attributes): `lhs_data` `[nnz]`, `lhs_outer_indices`
//! `[rows + 1]` (row offsets into the entries), `lhs_inner_indices` `[nnz]` (column of each
//! entry; S32 or S64, the same as the offsets) and `rhs` `[k]` or `[k, n]` in; `out` `[rows]` or
//! `[rows, n]` out. Dtypes S32, S64, F32, F64, C64, C128 (one for data, rhs and out).
//!
//! jaxlib's kernel (Eigen) reads the indices unchecked; here every offset and column is checked
//! before it is used, and a bad one is an error naming the operand. Entries past
//! `outer[rows]` (jax pads BCSR there) are never read.

use crate::ffi::{Buffer, DataType, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::{for_each_parallel, SharedMut, MIN_FLOPS_PER_TASK};
use num_complex::Complex;
use std::ffi::CStr;
use std::ops::Range;

pub const TARGET: &CStr = c"ferrax_csr_sparse_dense";

ffi_handler! {
    /// CSR times dense on the host, rows split across XLA's thread pool by their entries.
    pub fn ferrax_cpu_csr_sparse_dense = TARGET;
    ctx pool: ThreadPool;
    arg lhs_data: Buffer;
    arg lhs_outer_indices: Buffer;
    arg lhs_inner_indices: Buffer;
    arg rhs: Buffer;
    ret out: Buffer;
    traits = 0;
    body = csr_sparse_dense_cpu;
}

/// The operands, with the sizes their shapes were checked against.
#[derive(Clone, Copy)]
struct Operands<'a> {
    data: Buffer<'a>,
    outer: Buffer<'a>,
    inner: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
    /// Stored entries (`data` and `inner` length).
    nnz: usize,
    rows: usize,
    /// Columns of the sparse matrix, rows of `rhs`.
    k: usize,
    /// Columns of `rhs` and `out` (1 for vectors).
    n: usize,
}

fn csr_sparse_dense_cpu(
    pool: ThreadPool<'_>,
    lhs_data: Buffer<'_>,
    lhs_outer_indices: Buffer<'_>,
    lhs_inner_indices: Buffer<'_>,
    rhs: Buffer<'_>,
    out: Buffer<'_>,
) -> Result<()> {
    let ops = check_shapes(lhs_data, lhs_outer_indices, lhs_inner_indices, rhs, out)?;
    match lhs_data.dtype() {
        DataType::S32 => by_index::<i32>(pool, ops),
        DataType::S64 => by_index::<i64>(pool, ops),
        DataType::F32 => by_index::<f32>(pool, ops),
        DataType::F64 => by_index::<f64>(pool, ops),
        DataType::C64 => by_index::<Complex<f32>>(pool, ops),
        DataType::C128 => by_index::<Complex<f64>>(pool, ops),
        other => Err(lhs_data.mismatch(
            "dtype s32, s64, f32, f64, c64 or c128".into(),
            other.to_string(),
        )),
    }
}

fn check_shapes<'a>(
    data: Buffer<'a>,
    outer: Buffer<'a>,
    inner: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
) -> Result<Operands<'a>> {
    let vector = |b: &Buffer<'_>, what: &str| match b.dims() {
        &[len] => Ok(len as usize),
        dims => Err(b.mismatch(format!("shape [{what}]"), format!("shape {dims:?}"))),
    };
    let nnz = vector(&data, "nnz")?;
    let rows = match vector(&outer, "rows + 1")? {
        0 => return Err(outer.mismatch("shape [rows + 1]".into(), "shape [0]".into())),
        len => len - 1,
    };
    inner.expect_dims(&[nnz as i64])?;
    let (k, n, out_dims) = match *rhs.dims() {
        [k] => (k as usize, 1, vec![rows as i64]),
        [k, n] => (k as usize, n as usize, vec![rows as i64, n]),
        _ => {
            return Err(rhs.mismatch(
                "shape [k] or [k, n]".into(),
                format!("shape {:?}", rhs.dims()),
            ))
        }
    };
    out.expect_dims(&out_dims)?;
    // Sizes the kernel indexes with must fit in memory.
    out.element_count()?;
    rhs.element_count()?;
    Ok(Operands {
        data,
        outer,
        inner,
        rhs,
        out,
        nnz,
        rows,
        k,
        n,
    })
}

fn by_index<T: Element>(pool: ThreadPool<'_>, ops: Operands<'_>) -> Result<()> {
    match ops.outer.dtype() {
        DataType::S32 => multiply::<T, i32>(pool, ops),
        DataType::S64 => multiply::<T, i64>(pool, ops),
        other => Err(ops
            .outer
            .mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

fn multiply<T: Element, I: SparseIndex>(pool: ThreadPool<'_>, ops: Operands<'_>) -> Result<()> {
    ops.inner.expect_dtype(I::DTYPE)?;
    ops.rhs.expect_dtype(T::DTYPE)?;
    ops.out.expect_dtype(T::DTYPE)?;
    // SAFETY: `out` is the only result and aliases no argument.
    let (data, outer, inner, rhs, out) = unsafe {
        (
            ops.data.as_slice::<T>()?,
            ops.outer.as_slice::<I>()?,
            ops.inner.as_slice::<I>()?,
            ops.rhs.as_slice::<T>()?,
            ops.out.as_mut_slice::<T>()?,
        )
    };
    let blocks = row_blocks::<T, I>(&ops, outer)?;
    if out.is_empty() {
        return Ok(());
    }
    let (n, out) = (ops.n, SharedMut(out.as_mut_ptr()));
    // Each block is already worth a task; grouping them is up to the pool's chunking.
    for_each_parallel(&pool, blocks.len() - 1, MIN_FLOPS_PER_TASK, &|b| {
        let rows = blocks[b]..blocks[b + 1];
        // SAFETY: blocks are disjoint row ranges of `out`, within its `rows * n` elements.
        let out = unsafe { out.slice(rows.start * n, rows.len() * n) };
        let csr = Csr {
            data,
            outer,
            inner,
            inner_buffer: &ops.inner,
            k: ops.k,
        };
        csr.rows_times(rows, rhs, n, out)
    })
}

/// Checks the row offsets (non-decreasing, within `0..=nnz`) and splits the rows into blocks
/// of at least `MIN_FLOPS_PER_TASK` each, balanced by entries as jaxlib does (an empty row
/// counts as one entry: it still writes a row). Returns the block boundaries.
fn row_blocks<T: Element, I: SparseIndex>(ops: &Operands<'_>, outer: &[I]) -> Result<Vec<usize>> {
    let offset = |r: usize| {
        outer[r]
            .to_usize()
            .filter(|&o| o <= ops.nnz)
            .ok_or_else(|| {
                ops.outer.mismatch(
                    format!("row offsets within 0..={}", ops.nnz),
                    format!("{} at index {r}", outer[r]),
                )
            })
    };
    let flops_per_entry = ops.n.saturating_mul(T::FLOPS);
    let mut blocks = vec![0];
    let (mut start, mut work) = (offset(0)?, 0usize);
    for r in 0..ops.rows {
        let end = offset(r + 1)?;
        if end < start {
            return Err(ops.outer.mismatch(
                "non-decreasing row offsets".into(),
                format!("{} after {} at index {}", outer[r + 1], outer[r], r + 1),
            ));
        }
        work = work.saturating_add((end - start).max(1).saturating_mul(flops_per_entry));
        if work >= MIN_FLOPS_PER_TASK && r + 1 < ops.rows {
            blocks.push(r + 1);
            work = 0;
        }
        start = end;
    }
    blocks.push(ops.rows);
    Ok(blocks)
}

/// The sparse matrix as the kernel reads it (offsets already checked).
struct Csr<'a, T, I> {
    data: &'a [T],
    outer: &'a [I],
    inner: &'a [I],
    inner_buffer: &'a Buffer<'a>,
    k: usize,
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
                    .filter(|&c| c < self.k)
                    .ok_or_else(|| {
                        self.inner_buffer.mismatch(
                            format!("column indices within 0..{}", self.k),
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
trait Element: NativeType + Default {
    /// Flops of one `add_product`, to size thread-pool tasks.
    const FLOPS: usize;
    /// `self + a * b`; integers wrap, as jaxlib's C++ does in practice.
    fn add_product(self, a: Self, b: Self) -> Self;
    /// `1 * self` as Eigen computes it (its product scales every entry by alpha = 1): the
    /// identity, except that a complex infinity gets NaN parts (`0 * inf`), as in stock jax.
    fn times_one(self) -> Self;
}

macro_rules! element {
    ($flops:expr, |$acc:ident, $a:ident, $b:ident| $sum:expr, |$x:ident| $one:expr, $($t:ty),*) => {$(
        impl Element for $t {
            const FLOPS: usize = $flops;
            fn add_product(self, $a: Self, $b: Self) -> Self {
                let $acc = self;
                $sum
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
    |acc, a, b| acc.wrapping_add(a.wrapping_mul(b)),
    |x| x,
    i32,
    i64
);
// Plain multiply then add (no fused multiply-add), as Eigen's vectorized product.
element!(2, |acc, a, b| acc + a * b, |x| x, f32, f64);
element!(
    8,
    |acc, a, b| acc + a * b,
    |x| Complex::new(1.0, 0.0) * x,
    Complex<f32>,
    Complex<f64>
);

/// The index types of the offsets and columns.
trait SparseIndex: NativeType + std::fmt::Display {
    /// The value as an index, or `None` when negative.
    fn to_usize(self) -> Option<usize>;
}

impl SparseIndex for i32 {
    fn to_usize(self) -> Option<usize> {
        usize::try_from(self).ok()
    }
}

impl SparseIndex for i64 {
    fn to_usize(self) -> Option<usize> {
        usize::try_from(self).ok()
    }
}
