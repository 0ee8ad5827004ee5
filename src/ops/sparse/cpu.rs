//! The CPU handlers of the sparse targets: [`crate::linalg::sparse`], [`crate::linalg::coo`]
//! and [`crate::linalg::spsolve`] on XLA's arrays and thread pool.

use super::{
    coo_matrix_shape, coo_shape, csr_shape, spsolve_shape, ProductShape, SolveShape,
    COO_SPARSE_DENSE, CSR_SPARSE_DENSE, SPSOLVE,
};
use crate::ffi::{Array, Buffer, DataType, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::coo::{self, Coo};
use crate::linalg::sparse::{self, Csr, Element, SparseIndex};
use crate::linalg::spsolve::{self, CsrBatch, SparseScalar};
use num_complex::Complex;

ffi_handlers! {
    /// CSR times dense on the host, rows split across XLA's thread pool by their entries.
    pub fn ferrax_cpu_csr_sparse_dense(CSR_SPARSE_DENSE, Cpu) {
        ctx pool: ThreadPool;
        arg lhs_data: Buffer;
        arg lhs_outer_indices: Buffer;
        arg lhs_inner_indices: Buffer;
        arg rhs: Buffer;
        ret out: Buffer;
        body = csr_sparse_dense_cpu;
    }

    /// COO times dense on the host, the entries split across XLA's thread pool.
    pub fn ferrax_cpu_coo_sparse_dense(COO_SPARSE_DENSE, Cpu) {
        ctx pool: ThreadPool;
        arg data: Buffer;
        arg indices: Buffer;
        arg rhs: Buffer;
        ret out: Buffer;
        attr rows: i64;
        attr cols: i64;
        attr transpose: bool;
        body = coo_sparse_dense_cpu;
    }

    /// Sparse direct solve on the host (faer's sparse Cholesky or LU), the batch's matrices
    /// split across XLA's thread pool.
    pub fn ferrax_cpu_spsolve(SPSOLVE, Cpu) {
        ctx pool: ThreadPool;
        arg data: Buffer;
        arg indices: Buffer;
        arg indptr: Buffer;
        arg b: Buffer;
        ret x: Buffer;
        body = spsolve_cpu;
    }
}

/// The operands, untyped: six element types and two index types, dispatched below.
#[derive(Clone, Copy)]
struct Operands<'a> {
    data: Buffer<'a>,
    outer: Buffer<'a>,
    inner: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
}

fn csr_sparse_dense_cpu<'a>(
    pool: ThreadPool<'_>,
    data: Buffer<'a>,
    outer: Buffer<'a>,
    inner: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
) -> Result<()> {
    let ops = Operands {
        data,
        outer,
        inner,
        rhs,
        out,
    };
    let ProductShape { cols, n, .. } = csr_shape(&data, &outer, &inner, &rhs, &out)?;
    match data.dtype() {
        DataType::S32 => by_index::<i32>(pool, ops, cols, n),
        DataType::S64 => by_index::<i64>(pool, ops, cols, n),
        DataType::F32 => by_index::<f32>(pool, ops, cols, n),
        DataType::F64 => by_index::<f64>(pool, ops, cols, n),
        DataType::C64 => by_index::<Complex<f32>>(pool, ops, cols, n),
        DataType::C128 => by_index::<Complex<f64>>(pool, ops, cols, n),
        other => Err(data.mismatch(
            "dtype s32, s64, f32, f64, c64 or c128".into(),
            other.to_string(),
        )),
    }
}

fn by_index<T: Element>(pool: ThreadPool<'_>, ops: Operands<'_>, cols: usize, n: usize) -> Result<()> {
    match ops.outer.dtype() {
        DataType::S32 => multiply::<T, i32>(pool, ops, cols, n),
        DataType::S64 => multiply::<T, i64>(pool, ops, cols, n),
        other => Err(ops
            .outer
            .mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

fn multiply<T: Element, I: SparseIndex>(
    pool: ThreadPool<'_>,
    ops: Operands<'_>,
    cols: usize,
    n: usize,
) -> Result<()> {
    let inner = Array::<I>::new(ops.inner)?;
    let (rhs, out) = (Array::<T>::new(ops.rhs)?, Array::<T>::new(ops.out)?);
    let (data, outer) = (Array::<T>::new(ops.data)?, Array::<I>::new(ops.outer)?);
    // SAFETY: `out` is the only result and aliases no argument.
    let csr = unsafe {
        Csr {
            data: data.as_slice(),
            outer: outer.as_slice(),
            inner: inner.as_slice(),
            cols,
        }
    };
    // SAFETY: as above.
    let (rhs, out) = unsafe { (rhs.as_slice(), out.as_mut_slice()) };
    sparse::csr_times_dense(&pool, csr, rhs, n, out)
}

/// `coo_sparse_dense`'s operands, untyped: six element types and two index types, dispatched
/// below; `shape` is the sparse matrix's.
#[derive(Clone, Copy)]
struct CooOperands<'a> {
    data: Buffer<'a>,
    indices: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
    shape: [usize; 2],
    transpose: bool,
    /// Columns of rhs and out (1 for vectors).
    n: usize,
}

#[allow(clippy::too_many_arguments)] // the handler's operands and attributes, as declared
fn coo_sparse_dense_cpu<'a>(
    pool: ThreadPool<'_>,
    data: Buffer<'a>,
    indices: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
    rows: i64,
    cols: i64,
    transpose: bool,
) -> Result<()> {
    let shape = coo_matrix_shape(rows, cols)?;
    let ProductShape { n, .. } = coo_shape(&data, &indices, &rhs, &out, shape, transpose)?;
    let ops = CooOperands {
        data,
        indices,
        rhs,
        out,
        shape,
        transpose,
        n,
    };
    match data.dtype() {
        DataType::S32 => coo_by_index::<i32>(pool, ops),
        DataType::S64 => coo_by_index::<i64>(pool, ops),
        DataType::F32 => coo_by_index::<f32>(pool, ops),
        DataType::F64 => coo_by_index::<f64>(pool, ops),
        DataType::C64 => coo_by_index::<Complex<f32>>(pool, ops),
        DataType::C128 => coo_by_index::<Complex<f64>>(pool, ops),
        other => Err(data.mismatch(
            "dtype s32, s64, f32, f64, c64 or c128".into(),
            other.to_string(),
        )),
    }
}

fn coo_by_index<T: Element>(pool: ThreadPool<'_>, ops: CooOperands<'_>) -> Result<()> {
    match ops.indices.dtype() {
        DataType::S32 => coo_multiply::<T, i32>(pool, ops),
        DataType::S64 => coo_multiply::<T, i64>(pool, ops),
        other => Err(ops
            .indices
            .mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

/// Multiplies (the shapes checked).
fn coo_multiply<T: Element, I: SparseIndex>(pool: ThreadPool<'_>, ops: CooOperands<'_>) -> Result<()> {
    let (data, indices) = (Array::<T>::new(ops.data)?, Array::<I>::new(ops.indices)?);
    let (rhs, out) = (Array::<T>::new(ops.rhs)?, Array::<T>::new(ops.out)?);
    let [rows, cols] = ops.shape;
    // SAFETY: `out` is the only result and aliases no argument.
    let a = unsafe {
        Coo {
            data: data.as_slice(),
            indices: indices.as_slice(),
            rows,
            cols,
        }
    };
    // SAFETY: as above.
    let (rhs, out) = unsafe { (rhs.as_slice(), out.as_mut_slice()) };
    coo::coo_times_dense(&pool, a, ops.transpose, rhs, ops.n, out)
}

/// `spsolve`'s operands, untyped: four element types and two index types, dispatched below.
#[derive(Clone, Copy)]
struct Spsolve<'a> {
    data: Buffer<'a>,
    indices: Buffer<'a>,
    indptr: Buffer<'a>,
    b: Buffer<'a>,
    x: Buffer<'a>,
}

fn spsolve_cpu<'a>(
    pool: ThreadPool<'_>,
    data: Buffer<'a>,
    indices: Buffer<'a>,
    indptr: Buffer<'a>,
    b: Buffer<'a>,
    x: Buffer<'a>,
) -> Result<()> {
    let ops = Spsolve {
        data,
        indices,
        indptr,
        b,
        x,
    };
    match b.dtype() {
        DataType::F32 => spsolve_by_index::<f32>(pool, ops),
        DataType::F64 => spsolve_by_index::<f64>(pool, ops),
        DataType::C64 => spsolve_by_index::<Complex<f32>>(pool, ops),
        DataType::C128 => spsolve_by_index::<Complex<f64>>(pool, ops),
        other => Err(b.mismatch("dtype f32, f64, c64 or c128".into(), other.to_string())),
    }
}

fn spsolve_by_index<T: SparseScalar>(pool: ThreadPool<'_>, ops: Spsolve<'_>) -> Result<()> {
    match ops.indptr.dtype() {
        DataType::S32 => solve::<T, i32>(pool, ops),
        DataType::S64 => solve::<T, i64>(pool, ops),
        other => Err(ops
            .indptr
            .mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

/// Checks the shapes (module docs) and solves.
fn solve<T: SparseScalar, I: SparseIndex>(pool: ThreadPool<'_>, ops: Spsolve<'_>) -> Result<()> {
    let SolveShape { systems, matrices } =
        spsolve_shape(&ops.data, &ops.indices, &ops.indptr, &ops.b, &ops.x)?;
    let (data, b, x) = (Array::<T>::new(ops.data)?, Array::<T>::new(ops.b)?, Array::<T>::new(ops.x)?);
    let (indices, indptr) = (Array::<I>::new(ops.indices)?, Array::<I>::new(ops.indptr)?);
    // SAFETY: `x` is the only result and aliases no argument.
    let a = unsafe {
        CsrBatch {
            data: data.as_slice(),
            indices: indices.as_slice(),
            indptr: indptr.as_slice(),
            matrices,
        }
    };
    // SAFETY: as above.
    let (b, x) = unsafe { (b.as_slice(), x.as_mut_slice()) };
    spsolve::spsolve(&pool, a, b, x, systems)
}
