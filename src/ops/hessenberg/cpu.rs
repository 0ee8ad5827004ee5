//! The CPU handler of `gehrd`: [`crate::linalg::hessenberg::gehrd`] on XLA's arrays and
//! thread pool.

use super::{expect_shapes, TARGET};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::hessenberg;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::LapackScalar;

ffi_handlers! {
    /// Hessenberg reduction on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_gehrd(TARGET, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret tau: Array<T>;
        ret info: Array<i32>;
        attr low: i32;
        attr high: i32;
        dtype T: LapackScalar = x;
        body = gehrd_cpu;
    }
}

fn gehrd_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    x_out: Matrices<'_, T>,
    tau: Array<'_, T>,
    info: Array<'_, i32>,
    low: i32,
    high: i32,
) -> Result<()> {
    expect_shapes(&x, &x_out, &tau, &info, [low, high])?;
    let a = InOut {
        input: x.view(Layout::ColumnMajor),
        output: x_out.view(Layout::ColumnMajor),
    };
    // SAFETY: the results are distinct buffers, written by the core alone.
    let (tau, info) = unsafe { (tau.as_mut_slice(), info.as_mut_slice()) };
    hessenberg::gehrd(&pool, a, low, high, tau, info)
}
