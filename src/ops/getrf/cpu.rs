//! The CPU handlers of `getrf`: [`crate::linalg::getrf`] on XLA's arrays and thread pool.

use super::{Getrf, GETRF, GETRF_ROW_MAJOR};
use crate::ffi::{Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::{getrf, LapackScalar};

ffi_handlers! {
    /// LU factorization on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_getrf(GETRF, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Getrf;
        dtype T: LapackScalar = a;
        body = |pool, ops| getrf_cpu(pool, ops, Layout::ColumnMajor);
    }

    /// [`ferrax_cpu_getrf`] on row-major matrices.
    pub fn ferrax_cpu_getrf_row_major(GETRF_ROW_MAJOR, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Getrf;
        dtype T: LapackScalar = a;
        body = |pool, ops| getrf_cpu(pool, ops, Layout::RowMajor);
    }
}

fn getrf_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Getrf<'_, T>, layout: Layout) -> Result<()> {
    ops.shape()?;
    let a = InOut {
        input: ops.a.view(layout),
        output: ops.lu.view(layout),
    };
    // SAFETY: the results are distinct buffers, written by the core alone.
    let (ipiv, info) = unsafe { (ops.ipiv.as_mut_slice(), ops.info.as_mut_slice()) };
    getrf::getrf(&pool, a, ipiv, info)
}
