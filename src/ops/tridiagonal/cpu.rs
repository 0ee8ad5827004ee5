//! The CPU handler of `sytrd`: [`crate::linalg::tridiagonal::sytrd`] on XLA's arrays and
//! thread pool.

use super::{expect_shapes, Results, TARGET};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::flags::Uplo;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::{tridiagonal, LapackScalar};
use ferrax_cpu_fallback::Real;

ffi_handlers! {
    /// Tridiagonal reduction on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_sytrd(TARGET, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret d: Array<Real<T>>;
        ret e: Array<Real<T>>;
        ret tau: Array<T>;
        ret info: Array<i32>;
        attr uplo: Uplo;
        dtype T: LapackScalar = x;
        body = |pool, x, x_out, d, e, tau, info, uplo| {
            sytrd_cpu(pool, x, Results { x_out, d, e, tau, info }, uplo)
        };
    }
}

fn sytrd_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    out: Results<'_, T, Real<T>>,
    uplo: Uplo,
) -> Result<()> {
    expect_shapes(&x, &out)?;
    let a = InOut {
        input: x.view(Layout::ColumnMajor),
        output: out.x_out.view(Layout::ColumnMajor),
    };
    // SAFETY: the results are distinct buffers, written by the core alone.
    let (d, e, tau, info) = unsafe {
        (
            out.d.as_mut_slice(),
            out.e.as_mut_slice(),
            out.tau.as_mut_slice(),
            out.info.as_mut_slice(),
        )
    };
    tridiagonal::sytrd(&pool, a, uplo, d, e, tau, info)
}
