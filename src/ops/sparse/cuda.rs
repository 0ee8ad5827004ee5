//! The CUDA handlers of the sparse targets, with the CPU targets' contracts: the products on
//! ferrax's PTX kernels (`ferrax_kernels::sparse`) on XLA's stream; the direct solve on the
//! host (see `ferrax_cuda_spsolve`).

use super::{
    CooProduct, CsrProduct, ProductShape, SolveShape, SolveTyped, Spsolve, COO_SPARSE_DENSE,
    CSR_SPARSE_DENSE, SPSOLVE,
};
use crate::cuda::GpuStream;
use crate::ffi::{Buffer, DataType, NativeType, Result, Stream};
use crate::ffi_handlers;
use crate::linalg::sparse::SparseIndex;
use crate::linalg::spsolve::{self, CsrBatch};
use crate::linalg::LapackScalar;
use crate::linalg::workers::workers;
use crate::memory::vec_of;
use ferrax_kernels::launch::ScalarKind;
use ferrax_kernels::sparse::{self, CooArgs, CsrArgs, IndexKind};

ffi_handlers! {
    /// CSR times dense on the GPU.
    pub fn ferrax_cuda_csr_sparse_dense(CSR_SPARSE_DENSE, Cuda) {
        ctx stream: Stream;
        operands ops: CsrProduct;
        body = csr_sparse_dense_cuda;
    }

    /// COO times dense on the GPU (atomic sums into the zeroed result).
    pub fn ferrax_cuda_coo_sparse_dense(COO_SPARSE_DENSE, Cuda) {
        ctx stream: Stream;
        operands ops: CooProduct;
        body = coo_sparse_dense_cuda;
    }

    /// Sparse direct solve of CUDA buffers on the host: the matrices and right-hand sides are
    /// copied there, factored by the CPU's core (faer's sparse Cholesky or LU, the batch
    /// across ferrax's thread pool) and the solutions copied back, the stream waited for. A
    /// sparse factorization's pivoting and fill are sequential work that a GPU's sparse QR
    /// (jaxlib's csrlsvqr, which waits for the stream too) does slowly.
    pub fn ferrax_cuda_spsolve(SPSOLVE, Cuda) {
        ctx stream: Stream;
        operands ops: Spsolve;
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

fn csr_sparse_dense_cuda(stream: Stream, ops: CsrProduct<'_>) -> Result<()> {
    let ProductShape { nnz, rows, cols, n } = ops.shape()?;
    let kind = element_kind(&ops.lhs_data, &ops.rhs, &ops.out)?;
    let index = index_kind(&ops.lhs_outer_indices)?;
    ops.lhs_inner_indices
        .expect_dtype(ops.lhs_outer_indices.dtype())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    let [rows, cols, nnz, n] = [rows, cols, nnz, n].map(|d| d as u64);
    let (config, lanes) =
        sparse::csr_launch_config(kind, index, rows, nnz, n, gpu.multiprocessors()?);
    let args = CsrArgs {
        data: ops.lhs_data.data_ptr().cast_const().cast(),
        outer: ops.lhs_outer_indices.data_ptr().cast_const(),
        inner: ops.lhs_inner_indices.data_ptr().cast_const(),
        rhs: ops.rhs.data_ptr().cast_const().cast(),
        out: ops.out.data_ptr().cast(),
        rows,
        cols,
        n,
        nnz,
        lanes,
    };
    // SAFETY: the shapes are checked against each other and the dtypes against the entry; the
    // kernel reads offsets and columns within them and clamps what they point to.
    unsafe { gpu.launch(&config, args) }
}

fn coo_sparse_dense_cuda(stream: Stream, ops: CooProduct<'_>) -> Result<()> {
    let ProductShape { nnz, rows, cols, n } = ops.shape()?;
    let kind = element_kind(&ops.data, &ops.rhs, &ops.out)?;
    let index = index_kind(&ops.indices)?;
    let bytes = ops.out.element_count()? * kind.bytes();
    if bytes == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    gpu.zero(ops.out.data_ptr().cast(), bytes)?;
    if nnz == 0 {
        return Ok(());
    }
    let [rows, cols, nnz, n] = [rows, cols, nnz, n].map(|d| d as u64);
    let config = sparse::coo_launch_config(kind, index, nnz, n, gpu.multiprocessors()?);
    let row = ops.indices.data_ptr().cast_const();
        let args = CooArgs {
        data: ops.data.data_ptr().cast_const().cast(),
        row,
        // The column of each entry follows its row ([nnz, 2], row-major).
        col: row.wrapping_add(index.bytes()),
        rhs: ops.rhs.data_ptr().cast_const().cast(),
        out: ops.out.data_ptr().cast(),
        index_stride: 2,
        nnz,
        rows,
        cols,
        n,
        transpose: ops.transpose.into(),
    };
    // SAFETY: as in `csr_sparse_dense_cuda`; out is zeroed before the kernel adds into it, and
    // entries outside the matrix are dropped.
    unsafe { gpu.launch(&config, args) }
}

fn spsolve_cuda(stream: Stream, ops: Spsolve<'_>) -> Result<()> {
    ops.dispatch(OnHost(stream))
}

/// `buffer`'s elements, copied from the device once the stream has made them.
fn download<E: Clone + Default>(gpu: &GpuStream, buffer: &Buffer<'_>) -> Result<Vec<E>> {
    let mut host = vec_of(buffer.element_count()?, E::default())?;
    gpu.download(&mut host, buffer.data_ptr().cast_const().cast())?;
    Ok(host)
}

/// spsolve of device buffers on the host (see `ferrax_cuda_spsolve`).
struct OnHost(Stream);

impl SolveTyped for OnHost {
    fn solve<T, I>(self, ops: Spsolve<'_>, shape: SolveShape) -> Result<()>
    where
        T: LapackScalar,
        I: SparseIndex + NativeType + Default,
    {
        let gpu = GpuStream::adopt(self.0)?;
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
}
