//! The CPU handlers of the Cholesky family: [`crate::linalg::potrf`] on XLA's arrays and
//! thread pool.

use super::{Cholesky, Potrf, CHOLESKY, POTRF};
use crate::ffi::{Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::{potrf, LapackScalar};

ffi_handlers! {
    /// Cholesky factorization on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_potrf(POTRF, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Potrf;
        dtype T: LapackScalar = a;
        body = potrf_cpu;
    }

    /// jax's whole `cholesky` on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_cholesky(CHOLESKY, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Cholesky;
        dtype T: LapackScalar = a;
        body = cholesky_cpu;
    }
}

fn potrf_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Potrf<'_, T>) -> Result<()> {
    ops.shape()?;
    let a = InOut {
        input: ops.a.view(Layout::ColumnMajor),
        output: ops.factor.view(Layout::ColumnMajor),
    };
    // SAFETY: a result distinct from the others, written by the core alone.
    potrf::potrf(&pool, a, ops.uplo, unsafe { ops.info.as_mut_slice() })
}

fn cholesky_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Cholesky<'_, T>) -> Result<()> {
    let shape = ops.shape()?;
    // SAFETY: the argument is only read and the result (which the lowering does not alias to
    // it) only written, by the core alone.
    let (x, out) = unsafe { (ops.a.array.as_slice(), ops.l.array.as_mut_slice()) };
    potrf::cholesky(&pool, x, out, [shape.batch, shape.rows], ops.symmetrize_input)
}
