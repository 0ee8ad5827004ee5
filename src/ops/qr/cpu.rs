//! The CPU handlers of the QR family: [`crate::linalg::qr`] on XLA's arrays and thread pool.

use super::{geqp3_shapes, geqrf_shapes, orgqr_shapes, ormqr_shapes, qr_shapes};
use super::{GEQP3, GEQRF, ORGQR, ORMQR, QR};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::flags::{Side, Trans};
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::qr::{self, Geqp3};
use crate::linalg::LapackScalar;

ffi_handlers! {
    /// Householder QR on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_geqrf(GEQRF, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret tau: Array<T>;
        dtype T: LapackScalar = x;
        body = geqrf_cpu;
    }

    /// Q from Householder reflectors on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_orgqr(ORGQR, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        arg tau: Array<T>;
        ret x_out: Matrices<T>;
        dtype T: LapackScalar = x;
        body = orgqr_cpu;
    }

    /// Multiplication by Q from Householder reflectors on the host, batch split across XLA's
    /// thread pool.
    pub fn ferrax_cpu_ormqr(ORMQR, Cpu) {
        ctx pool: ThreadPool;
        arg a: Matrices<T>;
        arg tau: Array<T>;
        arg c: Matrices<T>;
        ret c_out: Matrices<T>;
        attr left: bool;
        attr transpose: bool;
        dtype T: LapackScalar = a;
        body = ormqr_cpu;
    }

    /// QR with column pivoting on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_geqp3(GEQP3, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        arg jpvt: Array<i32>;
        ret x_out: Matrices<T>;
        ret jpvt_out: Array<i32>;
        ret tau: Array<T>;
        dtype T: Geqp3 = x;
        body = geqp3_cpu;
    }

    /// jax's `qr` on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_qr(QR, Cpu) {
        ctx pool: ThreadPool;
        arg a: Matrices<T>;
        ret q: Matrices<T>;
        ret r: Matrices<T>;
        attr full_matrices: bool;
        dtype T: LapackScalar = a;
        body = qr_cpu;
    }
}

/// An operand and its aliasing result, column-major as jaxlib's contracts lay them out.
fn in_out<T: LapackScalar>(input: &Matrices<'_, T>, output: &Matrices<'_, T>) -> InOut<T> {
    InOut {
        input: input.view(Layout::ColumnMajor),
        output: output.view(Layout::ColumnMajor),
    }
}

fn geqrf_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    x_out: Matrices<'_, T>,
    tau: Array<'_, T>,
) -> Result<()> {
    geqrf_shapes(&x, &x_out, &tau)?;
    // SAFETY: a result distinct from the others, written by the core alone.
    qr::geqrf(&pool, in_out(&x, &x_out), unsafe { tau.as_mut_slice() })
}

fn orgqr_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    tau: Array<'_, T>,
    x_out: Matrices<'_, T>,
) -> Result<()> {
    let (_, k) = orgqr_shapes(&x, &tau, &x_out)?;
    // SAFETY: an argument, distinct from the result.
    qr::orgqr(&pool, in_out(&x, &x_out), k, unsafe { tau.as_slice() })
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handlers! passes them
fn ormqr_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    a: Matrices<'_, T>,
    tau: Array<'_, T>,
    c: Matrices<'_, T>,
    c_out: Matrices<'_, T>,
    left: bool,
    transpose: bool,
) -> Result<()> {
    let shapes = ormqr_shapes(&a, &tau, &c, &c_out, left)?;
    let side = if left { Side::Left } else { Side::Right };
    let trans = if transpose { Trans::Transpose } else { Trans::No };
    let reflectors = a.view(Layout::ColumnMajor);
    // SAFETY: an argument, distinct from the result.
    let tau = unsafe { tau.as_slice() };
    qr::ormqr(&pool, side, trans, reflectors, shapes.k, tau, in_out(&c, &c_out))
}

fn geqp3_cpu<T: Geqp3>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    jpvt: Array<'_, i32>,
    x_out: Matrices<'_, T>,
    jpvt_out: Array<'_, i32>,
    tau: Array<'_, T>,
) -> Result<()> {
    geqp3_shapes(&x, &jpvt, &x_out, &jpvt_out, &tau)?;
    // The core takes the pivots in place (a no-op where XLA aliased the two).
    jpvt.buffer.copy_into(&jpvt_out.buffer)?;
    // SAFETY: results distinct from each other, written by the core alone.
    let (jpvt_out, tau) = unsafe { (jpvt_out.as_mut_slice(), tau.as_mut_slice()) };
    qr::geqp3(&pool, in_out(&x, &x_out), jpvt_out, tau)
}

fn qr_cpu<T: LapackScalar>(
    pool: ThreadPool<'_>,
    a: Matrices<'_, T>,
    q: Matrices<'_, T>,
    r: Matrices<'_, T>,
    full_matrices: bool,
) -> Result<()> {
    qr_shapes(&a, &q, &r, full_matrices)?;
    let [a, q, r] = [&a, &q, &r].map(|m| m.view(Layout::RowMajor));
    qr::qr(&pool, a, q, r, full_matrices)
}
