//! What the CUDA handlers' cuSOLVER/cuBLAS paths share: workspaces and `info` from XLA's
//! scratch allocator, per-matrix pointer arrays, and a routine looped over a batch.

use super::cusolver::{Handle as SolverHandle, Solver, Status as SolverStatus};
use super::GpuStream;
use crate::ffi::{MatrixBatch, Result, ScratchAllocator};
use crate::linalg::api_int;
use std::ffi::c_int;

/// What a GPU handler's cuSOLVER/cuBLAS path needs besides its operands: XLA's stream (with
/// the context current) and XLA's scratch allocator for workspaces and pointer arrays.
#[derive(Clone, Copy)]
pub(crate) struct GpuLibrary<'a> {
    pub gpu: &'a GpuStream,
    pub scratch: &'a ScratchAllocator<'a>,
}

impl<'a> GpuLibrary<'a> {
    pub fn new(gpu: &'a GpuStream, scratch: &'a ScratchAllocator<'a>) -> Self {
        GpuLibrary { gpu, scratch }
    }

    /// Device workspace for `lwork` elements of `T` (a size from [`Solver::lwork`]).
    pub fn workspace<T>(&self, lwork: i32) -> Result<*mut T> {
        let bytes = (lwork.max(1) as usize) * std::mem::size_of::<T>();
        Ok(self.scratch.allocate(bytes, 16)?.cast())
    }

    /// One device integer for the `info` that cuSOLVER's geqrf, orgqr and ormqr write and
    /// jaxlib's contracts have no result for (their `info < 0` means an invalid argument,
    /// which the handlers' checks rule out).
    pub fn ignored_info(&self) -> Result<*mut i32> {
        Ok(self.scratch.allocate(4, 4)?.cast())
    }

    /// One cuSOLVER routine per matrix `b < batch` (it has no batched geqrf, orgqr or ormqr),
    /// with one workspace sized by `query(handle, &mut lwork)` and one ignored `info`, both
    /// reused in stream order: `call(handle, b, work, lwork, info)` runs it on matrix `b`.
    pub fn solve_each<T>(
        &self,
        routine: &str,
        batch: usize,
        query: impl FnOnce(SolverHandle, *mut c_int) -> SolverStatus,
        mut call: impl FnMut(SolverHandle, usize, *mut T, c_int, *mut c_int) -> SolverStatus,
    ) -> Result<()> {
        let solver = Solver::on(self.gpu)?;
        let lwork = solver.lwork(&format!("{routine}_bufferSize"), query)?;
        let (work, info) = (self.workspace::<T>(lwork)?, self.ignored_info()?);
        for b in 0..batch {
            solver.run(routine, |h| call(h, b, work, lwork, info))?;
        }
        Ok(())
    }

    /// A device array of `count` pointers `base + i·stride` (elements of `T`).
    pub fn batch_pointers<T>(
        &self,
        base: *mut T,
        stride: usize,
        count: usize,
    ) -> Result<*mut *mut T> {
        self.gpu
            .batch_pointers(self.scratch, base, stride * std::mem::size_of::<T>(), count)
    }
}

/// A batch's rows, columns and count as the libraries' 32-bit integers.
pub(crate) fn library_dims(shape: MatrixBatch) -> Result<[i32; 3]> {
    Ok([
        library_int("rows", shape.rows)?,
        library_int("columns", shape.cols)?,
        library_int("batch", shape.batch)?,
    ])
}

/// `value` as the 32-bit integer of cuSOLVER's and cuBLAS's API (jaxlib's too), or an error
/// naming `what` it is: ferrax does not call their 64-bit API yet.
pub(crate) fn library_int(what: &str, value: usize) -> Result<i32> {
    api_int("cuSOLVER's and cuBLAS's", what, value)
}
