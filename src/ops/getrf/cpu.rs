//! The CPU handlers of `getrf`: [`crate::linalg::getrf`] on XLA's arrays and thread pool.

use super::{expect_shapes, GETRF, GETRF_ROW_MAJOR};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::{getrf, LapackScalar};

ffi_handlers! {
    /// LU factorization on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_getrf(GETRF, Cpu) {
        ctx pool: ThreadPool;
        arg a: Matrices<T>;
        ret lu: Matrices<T>;
        ret ipiv: Array<i32>;
        ret info: Array<i32>;
        dtype T: LapackScalar = a;
        body = |pool, a, lu, ipiv, info| getrf_cpu(pool, a, lu, ipiv, info, Layout::ColumnMajor);
    }

    /// [`ferrax_cpu_getrf`] on row-major matrices.
    pub fn ferrax_cpu_getrf_row_major(GETRF_ROW_MAJOR, Cpu) {
        ctx pool: ThreadPool;
        arg a: Matrices<T>;
        ret lu: Matrices<T>;
        ret ipiv: Array<i32>;
        ret info: Array<i32>;
        dtype T: LapackScalar = a;
        body = |pool, a, lu, ipiv, info| getrf_cpu(pool, a, lu, ipiv, info, Layout::RowMajor);
    }
}

fn getrf_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    a: Matrices<'_, T>,
    lu: Matrices<'_, T>,
    ipiv: Array<'_, i32>,
    info: Array<'_, i32>,
    layout: Layout,
) -> Result<()> {
    expect_shapes(&a, &lu, &ipiv, &info)?;
    let a = InOut {
        input: a.view(layout),
        output: lu.view(layout),
    };
    // SAFETY: the results are distinct buffers, written by the core alone.
    let (ipiv, info) = unsafe { (ipiv.as_mut_slice(), info.as_mut_slice()) };
    getrf::getrf(&pool, a, ipiv, info)
}
