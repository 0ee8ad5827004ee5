//! The CUDA handlers of the sparse targets, with the CPU targets' contracts: the products on
//! ferrax's PTX kernels (`ferrax_kernels::sparse`) on XLA's stream; the direct solve on the
//! host (see `ferrax_cuda_spsolve`).

use super::{
    coo_matrix_shape, coo_shape, csr_shape, spsolve_shape, ProductShape, SolveShape,
    COO_SPARSE_DENSE, CSR_SPARSE_DENSE, SPSOLVE,
};
use crate::cuda::GpuStream;
use crate::ffi::{Buffer, DataType, NativeType, Result, Stream};
use crate::ffi_handlers;
use crate::linalg::sparse::SparseIndex;
use crate::linalg::spsolve::{self, CsrBatch, SparseScalar};
use crate::linalg::workers::workers;
use crate::memory::vec_of;
use num_complex::Complex;
use ferrax_kernels::launch::ScalarKind;
use ferrax_kernels::sparse::{self, CooArgs, CsrArgs, IndexKind};

ffi_handlers! {
    /// CSR times dense on the GPU.
    pub fn ferrax_cuda_csr_sparse_dense(CSR_SPARSE_DENSE, Cuda) {
        ctx stream: Stream;
        arg lhs_data: Buffer;
        arg lhs_outer_indices: Buffer;
        arg lhs_inner_indices: Buffer;
        arg rhs: Buffer;
        ret out: Buffer;
        body = csr_sparse_dense_cuda;
    }

    /// COO times dense on the GPU (atomic sums into the zeroed result).
    pub fn ferrax_cuda_coo_sparse_dense(COO_SPARSE_DENSE, Cuda) {
        ctx stream: Stream;
        arg data: Buffer;
        arg indices: Buffer;
        arg rhs: Buffer;
        ret out: Buffer;
        attr rows: i64;
        attr cols: i64;
        attr transpose: bool;
        body = coo_sparse_dense_cuda;
    }

    /// Sparse direct solve of CUDA buffers on the host: the matrices and right-hand sides are
    /// copied there, factored by the CPU's core (faer's sparse Cholesky or LU, the batch
    /// across ferrax's thread pool) and the solutions copied back, the stream waited for. A
    /// sparse factorization's pivoting and fill are sequential work that a GPU's sparse QR
    /// (jaxlib's csrlsvqr, which waits for the stream too) does slowly.
    pub fn ferrax_cuda_spsolve(SPSOLVE, Cuda) {
        ctx stream: Stream;
        arg data: Buffer;
        arg indices: Buffer;
        arg indptr: Buffer;
        arg b: Buffer;
        ret x: Buffer;
        body = spsolve_cuda;
    }
}

/// The kernels' element type: data's dtype, which rhs and out share.
fn element_kind(data: &Buffer<'_>, rhs: &Buffer<'_>, out: &Buffer<'_>) -> Result<ScalarKind> {
    let kind = match data.dtype() {
        DataType::F32 => ScalarKind::F32,
        DataType::F64 => ScalarKind::F64,
        DataType::C64 => ScalarKind::C64,
        DataType::C128 => ScalarKind::C128,
        other => {
            return Err(data.mismatch(
                "dtype f32, f64, c64 or c128 (on CUDA)".into(),
                other.to_string(),
            ))
        }
    };
    rhs.expect_dtype(data.dtype())?;
    out.expect_dtype(data.dtype())?;
    Ok(kind)
}

fn index_kind(indices: &Buffer<'_>) -> Result<IndexKind> {
    match indices.dtype() {
        DataType::S32 => Ok(IndexKind::I32),
        DataType::S64 => Ok(IndexKind::I64),
        other => Err(indices.mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

fn csr_sparse_dense_cuda<'a>(
    stream: Stream,
    data: Buffer<'a>,
    outer: Buffer<'a>,
    inner: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
) -> Result<()> {
    let ProductShape { nnz, cols, n } = csr_shape(&data, &outer, &inner, &rhs, &out)?;
    let kind = element_kind(&data, &rhs, &out)?;
    let index = index_kind(&outer)?;
    inner.expect_dtype(outer.dtype())?;
    let rows = outer.dims()[0] as u64 - 1;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    let (nnz, n) = (nnz as u64, n as u64);
    let (config, lanes) =
        sparse::csr_launch_config(kind, index, rows, nnz, n, gpu.multiprocessors()?);
    let args = CsrArgs {
        data: data.data_ptr().cast_const().cast(),
        outer: outer.data_ptr().cast_const(),
        inner: inner.data_ptr().cast_const(),
        rhs: rhs.data_ptr().cast_const().cast(),
        out: out.data_ptr().cast(),
        rows,
        cols: cols as u64,
        n,
        nnz,
        lanes,
    };
    // SAFETY: the shapes are checked against each other and the dtypes against the entry; the
    // kernel reads offsets and columns within them and clamps what they point to.
    unsafe { gpu.launch(&config, args) }
}

#[allow(clippy::too_many_arguments)] // the handler's operands and attributes, as declared
fn coo_sparse_dense_cuda<'a>(
    stream: Stream,
    data: Buffer<'a>,
    indices: Buffer<'a>,
    rhs: Buffer<'a>,
    out: Buffer<'a>,
    rows: i64,
    cols: i64,
    transpose: bool,
) -> Result<()> {
    let shape = coo_matrix_shape(rows, cols)?;
    let ProductShape { nnz, n, .. } = coo_shape(&data, &indices, &rhs, &out, shape, transpose)?;
    let kind = element_kind(&data, &rhs, &out)?;
    let index = index_kind(&indices)?;
    let bytes = out.element_count()? * kind.bytes();
    if bytes == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    gpu.zero(out.data_ptr().cast(), bytes)?;
    let (nnz, n) = (nnz as u64, n as u64);
    if nnz == 0 {
        return Ok(());
    }
    let config = sparse::coo_launch_config(kind, index, nnz, n, gpu.multiprocessors()?);
    let row = indices.data_ptr().cast_const();
    let index_bytes = match index {
        IndexKind::I32 => 4,
        IndexKind::I64 => 8,
    };
    let args = CooArgs {
        data: data.data_ptr().cast_const().cast(),
        row,
        // The column of each entry follows its row ([nnz, 2], row-major).
        col: row.wrapping_add(index_bytes),
        rhs: rhs.data_ptr().cast_const().cast(),
        out: out.data_ptr().cast(),
        index_stride: 2,
        nnz,
        rows: shape[0] as u64,
        cols: shape[1] as u64,
        n,
        transpose: transpose.into(),
    };
    // SAFETY: as in `csr_sparse_dense_cuda`; out is zeroed before the kernel adds into it, and
    // entries outside the matrix are dropped.
    unsafe { gpu.launch(&config, args) }
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

fn spsolve_cuda<'a>(
    stream: Stream,
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
    let shape = spsolve_shape(&data, &indices, &indptr, &b, &x)?;
    match b.dtype() {
        DataType::F32 => spsolve_by_index::<f32>(stream, ops, shape),
        DataType::F64 => spsolve_by_index::<f64>(stream, ops, shape),
        DataType::C64 => spsolve_by_index::<Complex<f32>>(stream, ops, shape),
        DataType::C128 => spsolve_by_index::<Complex<f64>>(stream, ops, shape),
        other => Err(b.mismatch("dtype f32, f64, c64 or c128".into(), other.to_string())),
    }
}

fn spsolve_by_index<T: SparseScalar>(stream: Stream, ops: Spsolve<'_>, shape: SolveShape) -> Result<()> {
    match ops.indptr.dtype() {
        DataType::S32 => solve_on_host::<T, i32>(stream, ops, shape),
        DataType::S64 => solve_on_host::<T, i64>(stream, ops, shape),
        other => Err(ops
            .indptr
            .mismatch("dtype s32 or s64".into(), other.to_string())),
    }
}

/// `buffer`'s elements, copied from the device once the stream has made them.
fn download<E: Clone + Default>(gpu: &GpuStream, buffer: &Buffer<'_>) -> Result<Vec<E>> {
    let mut host = vec_of(buffer.element_count()?, E::default())?;
    gpu.download(&mut host, buffer.data_ptr().cast_const().cast())?;
    Ok(host)
}

fn solve_on_host<T, I>(stream: Stream, ops: Spsolve<'_>, shape: SolveShape) -> Result<()>
where
    T: SparseScalar + NativeType + Default,
    I: SparseIndex + NativeType + Default,
{
    for buffer in [&ops.data, &ops.b, &ops.x] {
        buffer.expect_dtype(T::DTYPE)?;
    }
    ops.indices.expect_dtype(I::DTYPE)?;
    let gpu = GpuStream::adopt(stream)?;
    let (data, b) = (download::<T>(&gpu, &ops.data)?, download::<T>(&gpu, &ops.b)?);
    let (indices, indptr) = (download::<I>(&gpu, &ops.indices)?, download::<I>(&gpu, &ops.indptr)?);
    let mut x = vec_of(b.len(), T::default())?;
    let a = CsrBatch {
        data: &data,
        indices: &indices,
        indptr: &indptr,
        matrices: shape.matrices,
    };
    spsolve::spsolve(workers(), a, &b, &mut x, shape.systems)?;
    gpu.upload(ops.x.data_ptr().cast(), &x)
}
