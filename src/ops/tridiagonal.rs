//! `sytrd`: reduction of a symmetric / Hermitian matrix to real tridiagonal form, jaxlib's
//! `lapack_?sytrd_ffi` / `lapack_?hetrd_ffi` contract: column-major `[..., n, n]` in; `x_out`
//! (aliasing the input: the tridiagonal and the reflectors in the `uplo` triangle, the other
//! triangle untouched), real `d` `[..., n]` and `e` `[..., n - 1]`, `tau` `[..., n - 1]` and S32
//! `info` `[...]` out. Attribute `uplo`: u8 'L' or 'U'. One target for real (`?sytrd`) and
//! complex (`?hetrd`) inputs.

use crate::ffi::{Buffer, DataType, MatrixBatch, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{char_attr, for_each_chunk, lapack_dim, query_lwork, routine, Scalar, SharedMut};
use ferrax_cpu_fallback::Real;
use ferrax_kernels::scalar::Scalar as KernelScalar;
use ferrax_kernels::small::eigh as small_eigh;
use std::ffi::{c_char, CStr};

pub const TARGET: &CStr = c"ferrax_sytrd";

ffi_handler! {
    /// Tridiagonal reduction on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_sytrd = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret d: Buffer;
    ret e: Buffer;
    ret tau: Buffer;
    ret info: Buffer;
    attr uplo: u8;
    traits = 0;
    body = sytrd_cpu;
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn sytrd_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    d: Buffer<'_>,
    e: Buffer<'_>,
    tau: Buffer<'_>,
    info: Buffer<'_>,
    uplo: u8,
) -> Result<()> {
    let uplo = char_attr("uplo", uplo, b"LU")?;
    dispatch_lapack!(x, sytrd_typed(pool, x, x_out, d, e, tau, info, uplo))
}

/// Up to this order the CPU handler reduces in Rust ([`small_eigh::sytd2`], LAPACK's unblocked
/// algorithm, which `?sytrd` also runs at these sizes) instead of calling LAPACK once per
/// matrix: its level-2 BLAS calls take OpenBLAS's buffer lock once per column, and two threads
/// contending for it ran slower than stock jaxlib's one.
pub const CPU_SMALL_MAX: usize = small_eigh::MAX_ORDER;

#[allow(clippy::too_many_arguments)] // as `sytrd_cpu`
fn sytrd_typed<T: Scalar + KernelScalar<Real = Real<T>>>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    d: Buffer<'_>,
    e: Buffer<'_>,
    tau: Buffer<'_>,
    info: Buffer<'_>,
    uplo: c_char,
) -> Result<()> {
    let shape = MatrixBatch::square(&x)?;
    let batch_dims = shape.batch_dims(&x);
    // n - 1 off-diagonal entries and reflectors; none (not -1) for n = 0, which jax never
    // lowers but a raw call may pass.
    let order = shape.rows;
    let off = order.saturating_sub(1);
    let with_len = |len: usize| [batch_dims, &[len as i64]].concat();
    d.expect_dtype(Real::<T>::DTYPE)?;
    d.expect_dims(&with_len(order))?;
    e.expect_dtype(Real::<T>::DTYPE)?;
    e.expect_dims(&with_len(off))?;
    tau.expect_dtype(T::DTYPE)?;
    tau.expect_dims(&with_len(off))?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(batch_dims)?;
    let n = lapack_dim(&x, order)?;
    x.copy_into(&x_out)?;
    // SAFETY: `x` is no longer read; the results are distinct buffers.
    let (x_out, d, e, tau, info) = unsafe {
        (
            x_out.as_mut_slice::<T>()?,
            d.as_mut_slice::<Real<T>>()?,
            e.as_mut_slice::<Real<T>>()?,
            tau.as_mut_slice::<T>()?,
            info.as_mut_slice::<i32>()?,
        )
    };
    if shape.batch == 0 || n == 0 {
        // What LAPACK answers for n = 0, without calling it with a zero leading dimension.
        info.fill(0);
        return Ok(());
    }
    let (x_out, d, e, tau, info) = (
        SharedMut(x_out.as_mut_ptr()),
        SharedMut(d.as_mut_ptr()),
        SharedMut(e.as_mut_ptr()),
        SharedMut(tau.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    let matrix_len = shape.matrix_len();
    // About 4/3 n^3 flops.
    let flops = order.saturating_pow(3).saturating_mul(4) / 3;
    if order <= CPU_SMALL_MAX {
        let lower = uplo == b'L' as c_char;
        return for_each_chunk(&pool, shape.batch, flops, &|range| {
            let mut scratch = vec![T::default(); small_eigh::sytd2_scratch_len(order)];
            for b in range {
                // SAFETY: matrix `b`, its d, e, taus and info, written by this task alone.
                let (a, d, e, tau, info) = unsafe {
                    (
                        x_out.slice(b * matrix_len, matrix_len),
                        d.slice(b * order, order),
                        e.slice(b * off, off),
                        tau.slice(b * off, off),
                        info.slice(b, 1),
                    )
                };
                small_eigh::sytd2(a, order, lower, d, e, tau, &mut scratch);
                info[0] = 0;
            }
            Ok(())
        });
    }
    let lda = n; // n > 0 here, so lda >= max(1, n)
    let sytrd = routine(T::sytrd())?;
    // Every matrix has the same order, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, query_info| unsafe {
        sytrd(
            &uplo,
            &n,
            x_out.at(0),
            &lda,
            d.at(0),
            e.at(0),
            tau.at(0),
            work,
            lwork,
            query_info,
        )
    })?;
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        for b in range {
            // SAFETY: matrix `b`, its d, e, taus and info are written by this task alone;
            // LAPACK touches `lda * n` elements, `n` d, `n - 1` e and taus and `lwork`
            // elements of `work`.
            unsafe {
                sytrd(
                    &uplo,
                    &n,
                    x_out.at(b * matrix_len),
                    &lda,
                    d.at(b * order),
                    e.at(b * off),
                    tau.at(b * off),
                    work.as_mut_ptr(),
                    &lwork,
                    info.at(b),
                )
            };
        }
        Ok(())
    })
}
