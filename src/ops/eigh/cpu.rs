//! The CPU handler of `eigh`: [`crate::linalg::eigh`] on XLA's arrays and thread pool.

use super::{expect_shapes, TARGET};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::eigh::{self, Evd};
use crate::linalg::flags::{Uplo, Vectors};
use crate::linalg::matrix::{InOut, Layout};
use ferrax_cpu_fallback::Real;

ffi_handlers! {
    /// Eigendecomposition of symmetric / Hermitian matrices on the host, batch split across
    /// XLA's thread pool.
    pub fn ferrax_cpu_syevd(TARGET, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret w: Array<Real<T>>;
        ret info: Array<i32>;
        attr uplo: Uplo;
        attr mode: Vectors;
        dtype T: Evd = x;
        body = eigh_cpu;
    }
}

fn eigh_cpu<T: Evd>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    x_out: Matrices<'_, T>,
    w: Array<'_, Real<T>>,
    info: Array<'_, i32>,
    uplo: Uplo,
    mode: Vectors,
) -> Result<()> {
    expect_shapes(&x, &x_out, &w, &info)?;
    let a = InOut {
        input: x.view(Layout::ColumnMajor),
        output: x_out.view(Layout::ColumnMajor),
    };
    // SAFETY: the results are distinct buffers, written by the core alone.
    let (w, info) = unsafe { (w.as_mut_slice(), info.as_mut_slice()) };
    eigh::eigh(&pool, a, uplo, mode, w, info)
}
