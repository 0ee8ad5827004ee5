//! The CPU handlers of the QR family: [`crate::linalg::qr`] on XLA's arrays and thread pool.

use super::{Geqp3, Geqrf, Orgqr, Ormqr, Qr, GEQP3, GEQRF, ORGQR, ORMQR, QR};
use crate::ffi::{Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::flags::{Side, Trans};
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::qr::{self, Geqp3Scalar};
use crate::linalg::LapackScalar;

ffi_handlers! {
    /// Householder QR on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_geqrf(GEQRF, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Geqrf;
        dtype T: LapackScalar = x;
        body = geqrf_cpu;
    }

    /// Q from Householder reflectors on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_orgqr(ORGQR, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Orgqr;
        dtype T: LapackScalar = x;
        body = orgqr_cpu;
    }

    /// Multiplication by Q from Householder reflectors on the host, batch split across XLA's
    /// thread pool.
    pub fn ferrax_cpu_ormqr(ORMQR, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Ormqr;
        dtype T: LapackScalar = a;
        body = ormqr_cpu;
    }

    /// QR with column pivoting on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_geqp3(GEQP3, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Geqp3;
        dtype T: Geqp3Scalar = x;
        body = geqp3_cpu;
    }

    /// jax's `qr` on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_qr(QR, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Qr;
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

fn geqrf_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Geqrf<'_, T>) -> Result<()> {
    ops.shape()?;
    // SAFETY: a result distinct from the others, written by the core alone.
    let tau = unsafe { ops.tau.as_mut_slice() };
    qr::geqrf(&pool, in_out(&ops.x, &ops.x_out), tau)
}

fn orgqr_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Orgqr<'_, T>) -> Result<()> {
    let (_, k) = ops.shape()?;
    // SAFETY: an argument, distinct from the result.
    let tau = unsafe { ops.tau.as_slice() };
    qr::orgqr(&pool, in_out(&ops.x, &ops.x_out), k, tau)
}

fn ormqr_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Ormqr<'_, T>) -> Result<()> {
    let shapes = ops.shapes()?;
    let side = if ops.left { Side::Left } else { Side::Right };
    let trans = if ops.transpose { Trans::Transpose } else { Trans::No };
    let reflectors = ops.a.view(Layout::ColumnMajor);
    // SAFETY: an argument, distinct from the result.
    let tau = unsafe { ops.tau.as_slice() };
    let c = in_out(&ops.c, &ops.c_out);
    qr::ormqr(&pool, side, trans, reflectors, shapes.k, tau, c)
}

fn geqp3_cpu<T: Geqp3Scalar>(pool: ThreadPool<'_>, ops: Geqp3<'_, T>) -> Result<()> {
    ops.shape()?;
    // The core takes the pivots in place (a no-op where XLA aliased the two).
    ops.jpvt.buffer.copy_into(&ops.jpvt_out.buffer)?;
    // SAFETY: results distinct from each other, written by the core alone.
    let (jpvt, tau) = unsafe { (ops.jpvt_out.as_mut_slice(), ops.tau.as_mut_slice()) };
    qr::geqp3(&pool, in_out(&ops.x, &ops.x_out), jpvt, tau)
}

fn qr_cpu<T: LapackScalar>(pool: ThreadPool<'_>, ops: Qr<'_, T>) -> Result<()> {
    ops.shape()?;
    let [a, q, r] = [&ops.a, &ops.q, &ops.r].map(|m| m.view(Layout::RowMajor));
    qr::qr(&pool, a, q, r, ops.full_matrices)
}
