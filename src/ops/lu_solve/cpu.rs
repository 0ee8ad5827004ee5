//! The CPU handler of `lu_solve`: [`crate::linalg::lu_solve`] on XLA's arrays and thread pool.

use super::{LuSolve, LU_SOLVE};
use crate::ffi::{Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::{lu_solve, LapackScalar};

ffi_handlers! {
    /// jax's `lu_solve` on the host, one system per task in cache, the batch split across
    /// XLA's thread pool.
    pub fn ferrax_cpu_lu_solve(LU_SOLVE, Cpu) {
        ctx pool: ThreadPool;
        operands ops: LuSolve;
        dtype T: LapackScalar = lu;
        body = lu_solve_cpu;
    }
}

fn lu_solve_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: LuSolve<'_, T>) -> Result<()> {
    let (shape, trans) = ops.shape()?;
    // SAFETY: the arguments are only read and the result (not aliased to them) only written,
    // by the core alone.
    let (lu, permutation, b, x) = unsafe {
        (ops.lu.array.as_slice(), ops.permutation.as_slice(), ops.b.array.as_slice(),
         ops.x.array.as_mut_slice())
    };
    let n = ops.lu.shape.rows;
    lu_solve::lu_solve(&pool, lu, permutation, b, x, [shape.batch, n, shape.cols], trans)
}
