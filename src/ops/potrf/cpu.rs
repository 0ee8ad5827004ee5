//! The CPU handlers of the Cholesky family: [`crate::linalg::potrf`] on XLA's arrays and
//! thread pool.

use super::{cholesky_shapes, potrf_shapes, CHOLESKY, POTRF};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::flags::Uplo;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::{potrf, LapackScalar};

ffi_handlers! {
    /// Cholesky factorization on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_potrf(POTRF, Cpu) {
        ctx pool: ThreadPool;
        arg a: Matrices<T>;
        ret factor: Matrices<T>;
        ret info: Array<i32>;
        attr uplo: Uplo;
        dtype T: LapackScalar = a;
        body = potrf_cpu;
    }

    /// jax's whole `cholesky` on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_cholesky(CHOLESKY, Cpu) {
        ctx pool: ThreadPool;
        arg a: Matrices<T>;
        ret l: Matrices<T>;
        attr symmetrize_input: bool;
        dtype T: LapackScalar = a;
        body = cholesky_cpu;
    }
}

fn potrf_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    a: Matrices<'_, T>,
    factor: Matrices<'_, T>,
    info: Array<'_, i32>,
    uplo: Uplo,
) -> Result<()> {
    potrf_shapes(&a, &factor, &info)?;
    let a = InOut {
        input: a.view(Layout::ColumnMajor),
        output: factor.view(Layout::ColumnMajor),
    };
    // SAFETY: a result distinct from the others, written by the core alone.
    potrf::potrf(&pool, a, uplo, unsafe { info.as_mut_slice() })
}

fn cholesky_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    a: Matrices<'_, T>,
    l: Matrices<'_, T>,
    symmetrize_input: bool,
) -> Result<()> {
    let shape = cholesky_shapes(&a, &l)?;
    // SAFETY: the argument is only read and the result (which the lowering does not alias to
    // it) only written, by the core alone.
    let (x, out) = unsafe { (a.array.as_slice(), l.array.as_mut_slice()) };
    potrf::cholesky(&pool, x, out, [shape.batch, shape.rows], symmetrize_input)
}
