//! The CPU handler of `trsm`: [`crate::linalg::trsm`] on XLA's arrays and thread pool.

use super::{Trsm, TRSM};
use crate::ffi::{Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::trsm::{self, TrsmFlags};
use crate::linalg::LapackScalar;

ffi_handlers! {
    /// Triangular solve on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_trsm(TRSM, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Trsm;
        dtype T: LapackScalar = x;
        body = trsm_cpu;
    }
}

fn trsm_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Trsm<'_, T>) -> Result<()> {
    ops.shape()?;
    let flags = TrsmFlags {
        side: ops.side,
        uplo: ops.uplo,
        trans: ops.trans_x,
        diag: ops.diag,
    };
    let b = InOut {
        input: ops.y.view(Layout::ColumnMajor),
        output: ops.y_out.view(Layout::ColumnMajor),
    };
    trsm::trsm(&pool, flags, ops.x.view(Layout::ColumnMajor), b)
}
