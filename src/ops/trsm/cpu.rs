//! The CPU handler of `trsm`: [`crate::linalg::trsm`] on XLA's arrays and thread pool.

use super::{expect_shapes, TRSM};
use crate::ffi::{Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::flags::{Diag, Side, Trans, Uplo};
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::trsm::{self, TrsmFlags};
use crate::linalg::LapackScalar;

ffi_handlers! {
    /// Triangular solve on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_trsm(TRSM, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        arg y: Matrices<T>;
        ret y_out: Matrices<T>;
        attr side: Side;
        attr uplo: Uplo;
        attr trans_x: Trans;
        attr diag: Diag;
        dtype T: LapackScalar = x;
        body = trsm_cpu;
    }
}

// One parameter per operand and attribute of the signature.
#[allow(clippy::too_many_arguments)]
fn trsm_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    y: Matrices<'_, T>,
    y_out: Matrices<'_, T>,
    side: Side,
    uplo: Uplo,
    trans: Trans,
    diag: Diag,
) -> Result<()> {
    expect_shapes(&x, &y, &y_out, side)?;
    let flags = TrsmFlags {
        side,
        uplo,
        trans,
        diag,
    };
    let b = InOut {
        input: y.view(Layout::ColumnMajor),
        output: y_out.view(Layout::ColumnMajor),
    };
    trsm::trsm(&pool, flags, x.view(Layout::ColumnMajor), b)
}
