//! The CPU handlers of the sparse targets: [`crate::linalg::sparse`], [`crate::linalg::coo`]
//! and [`crate::linalg::spsolve`] on XLA's arrays and thread pool.

use super::{
    CooProduct, CsrProduct, ProductShape, SolveShape, SolveTyped, Spsolve, COO_SPARSE_DENSE,
    CSR_SPARSE_DENSE, SPSOLVE,
};
use crate::ffi::{Array, DataType, NativeType, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::coo::{self, Coo};
use crate::linalg::sparse::{self, Csr, Element, SparseIndex};
use crate::linalg::spsolve::{self, CsrBatch};
use crate::linalg::LapackScalar;
use num_complex::Complex;

ffi_handlers! {
    /// CSR times dense on the host, rows split across XLA's thread pool by their entries.
    pub fn ferrax_cpu_csr_sparse_dense(CSR_SPARSE_DENSE, Cpu) {
        ctx pool: ThreadPool;
        operands ops: CsrProduct;
        body = csr_sparse_dense_cpu;
    }

    /// COO times dense on the host, the entries split across XLA's thread pool.
    pub fn ferrax_cpu_coo_sparse_dense(COO_SPARSE_DENSE, Cpu) {
        ctx pool: ThreadPool;
        operands ops: CooProduct;
        body = coo_sparse_dense_cpu;
    }

    /// Sparse direct solve on the host (faer's sparse Cholesky or LU), the batch's matrices
    /// split across XLA's thread pool.
    pub fn ferrax_cpu_spsolve(SPSOLVE, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Spsolve;
        body = spsolve_cpu;
    }
}

fn csr_sparse_dense_cpu(pool: ThreadPool<'_>, ops: CsrProduct<'_>) -> Result<()> {
    let shape = ops.shape()?;
    match ops.lhs_data.dtype() {
        DataType::S32 => by_index::<i32>(pool, ops, shape),
        DataType::S64 => by_index::<i64>(pool, ops, shape),
        DataType::F32 => by_index::<f32>(pool, ops, shape),
        DataType::F64 => by_index::<f64>(pool, ops, shape),
        DataType::C64 => by_index::<Complex<f32>>(pool, ops, shape),
        DataType::C128 => by_index::<Complex<f64>>(pool, ops, shape),
        other => Err(ops.lhs_data.mismatch(
            "dtype s32, s64, f32, f64, c64 or c128".into(),
            other.to_string(),
        )),
    }
}

fn by_index<T: Element>(pool: ThreadPool<'_>, ops: CsrProduct<'_>, shape: ProductShape) -> Result<()> {
    match ops.lhs_outer_indices.dtype() {
        DataType::S32 => multiply::<T, i32>(pool, ops, shape),
        DataType::S64 => multiply::<T, i64>(pool, ops, shape),
        other => Err(ops
            .lhs_outer_indices
            .mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

fn multiply<T: Element, I: SparseIndex>(
    pool: ThreadPool<'_>,
    ops: CsrProduct<'_>,
    shape: ProductShape,
) -> Result<()> {
    let (data, rhs, out) = (
        Array::<T>::new(ops.lhs_data)?,
        Array::<T>::new(ops.rhs)?,
        Array::<T>::new(ops.out)?,
    );
    let outer = Array::<I>::new(ops.lhs_outer_indices)?;
    let inner = Array::<I>::new(ops.lhs_inner_indices)?;
    // SAFETY: `out` is the only result and aliases no argument.
    let csr = unsafe {
        Csr {
            data: data.as_slice(),
            outer: outer.as_slice(),
            inner: inner.as_slice(),
            cols: shape.cols,
        }
    };
    // SAFETY: as above.
    let (rhs, out) = unsafe { (rhs.as_slice(), out.as_mut_slice()) };
    sparse::csr_times_dense(&pool, csr, rhs, shape.n, out)
}

fn coo_sparse_dense_cpu(pool: ThreadPool<'_>, ops: CooProduct<'_>) -> Result<()> {
    let shape = ops.shape()?;
    match ops.data.dtype() {
        DataType::S32 => coo_by_index::<i32>(pool, ops, shape),
        DataType::S64 => coo_by_index::<i64>(pool, ops, shape),
        DataType::F32 => coo_by_index::<f32>(pool, ops, shape),
        DataType::F64 => coo_by_index::<f64>(pool, ops, shape),
        DataType::C64 => coo_by_index::<Complex<f32>>(pool, ops, shape),
        DataType::C128 => coo_by_index::<Complex<f64>>(pool, ops, shape),
        other => Err(ops.data.mismatch(
            "dtype s32, s64, f32, f64, c64 or c128".into(),
            other.to_string(),
        )),
    }
}

fn coo_by_index<T: Element>(pool: ThreadPool<'_>, ops: CooProduct<'_>, shape: ProductShape) -> Result<()> {
    match ops.indices.dtype() {
        DataType::S32 => coo_multiply::<T, i32>(pool, ops, shape),
        DataType::S64 => coo_multiply::<T, i64>(pool, ops, shape),
        other => Err(ops
            .indices
            .mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

fn coo_multiply<T: Element, I: SparseIndex>(
    pool: ThreadPool<'_>,
    ops: CooProduct<'_>,
    shape: ProductShape,
) -> Result<()> {
    let (data, indices) = (Array::<T>::new(ops.data)?, Array::<I>::new(ops.indices)?);
    let (rhs, out) = (Array::<T>::new(ops.rhs)?, Array::<T>::new(ops.out)?);
    // SAFETY: `out` is the only result and aliases no argument.
    let a = unsafe {
        Coo {
            data: data.as_slice(),
            indices: indices.as_slice(),
            rows: shape.rows,
            cols: shape.cols,
        }
    };
    // SAFETY: as above.
    let (rhs, out) = unsafe { (rhs.as_slice(), out.as_mut_slice()) };
    coo::coo_times_dense(&pool, a, ops.transpose, rhs, shape.n, out)
}

fn spsolve_cpu(pool: ThreadPool<'_>, ops: Spsolve<'_>) -> Result<()> {
    ops.dispatch(OnPool(pool))
}

/// spsolve on XLA's pool, from and into XLA's host buffers.
struct OnPool<'p>(ThreadPool<'p>);

impl SolveTyped for OnPool<'_> {
    fn solve<T, I>(self, ops: Spsolve<'_>, shape: SolveShape) -> Result<()>
    where
        T: LapackScalar,
        I: SparseIndex + NativeType + Default,
    {
        let (data, b, x) = (Array::<T>::new(ops.data)?, Array::<T>::new(ops.b)?, Array::<T>::new(ops.x)?);
        let (indices, indptr) = (Array::<I>::new(ops.indices)?, Array::<I>::new(ops.indptr)?);
        // SAFETY: `x` is the only result and aliases no argument.
        let a = unsafe {
            CsrBatch {
                data: data.as_slice(),
                indices: indices.as_slice(),
                indptr: indptr.as_slice(),
                matrices: shape.matrices,
            }
        };
        // SAFETY: as above.
        let (b, x) = unsafe { (b.as_slice(), x.as_mut_slice()) };
        spsolve::spsolve(&self.0, a, b, x, shape.systems)
    }
}
