//! QR by Householder reflectors, jaxlib's contracts (column-major matrices, input aliasing the
//! first result, no attributes, no `info`):
//! - `geqrf` (`lapack_?geqrf_ffi`): `x` `[..., m, n]` in; `x_out` (R on and above the diagonal,
//!   the reflectors below it) and `tau` `[..., min(m, n)]` out.
//! - `orgqr` (`lapack_?orgqr_ffi` / `lapack_?ungqr_ffi`): reflectors `x` `[..., m, n]` (m >= n)
//!   and `tau` `[..., k]` (k <= n) in; `x_out`, the first n columns of Q, out.
//! - `ormqr` (`lapack_?ormqr_ffi` / `lapack_?unmqr_ffi`): reflectors `a` `[..., a_rows, a_cols]`,
//!   `tau` `[..., k]` and `c` `[..., m, n]` in; `c_out` (aliasing `c`) = Q c, Q^H c, c Q or
//!   c Q^H out, Q being `a_rows x a_rows`. Attributes `left` and `transpose` (PRED).
//! - `geqp3` (`lapack_?geqp3_ffi`): `x` `[..., m, n]` and S32 `jpvt` `[..., n]` (non-zero: a
//!   column to move up front) in; `x_out` (as geqrf's), `jpvt_out` (1-based column pivots) and
//!   `tau` `[..., min(m, n)]` out, the first two aliasing the inputs.

use crate::cuda::cublas::{Batched, Blas};
use crate::cuda::cusolver::{Dense, Op, Side};
use crate::cuda::GpuStream;
use crate::ffi::{
    Buffer, DataType, Error, MatrixBatch, Result, ScratchAllocator, Stream, ThreadPool,
};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{
    for_each_chunk, for_each_parallel, gpu_in_place, gpu_scalar_kind, lapack_dim, query_lwork,
    routine, small_kernel, transpose, GpuLibrary, Scalar, SharedMut,
};
use ferrax_cpu_fallback::{ComplexLapack, Geqp3Complex, Geqp3Real, Real, RealLapack};
use ferrax_kernels::launch::ScalarKind;
use ferrax_kernels::relayout::Strides;
use ferrax_kernels::scalar::Scalar as KernelScalar;
use ferrax_kernels::small::qr::{self as small_qr, GeqrfArgs, OrgqrArgs, OrmqrArgs, QrArgs};
use num_complex::Complex;
use std::ffi::{c_char, CStr};

pub const GEQRF_TARGET: &CStr = c"ferrax_geqrf";
pub const ORGQR_TARGET: &CStr = c"ferrax_orgqr";
pub const ORMQR_TARGET: &CStr = c"ferrax_ormqr";
pub const GEQP3_TARGET: &CStr = c"ferrax_geqp3";

ffi_handler! {
    /// Householder QR on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_geqrf = GEQRF_TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret tau: Buffer;
    traits = 0;
    body = geqrf_cpu;
}

ffi_handler! {
    /// Q from Householder reflectors on the host through LAPACK, batch split across XLA's
    /// thread pool.
    pub fn ferrax_cpu_orgqr = ORGQR_TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    arg tau: Buffer;
    ret x_out: Buffer;
    traits = 0;
    body = orgqr_cpu;
}

ffi_handler! {
    /// Multiplication by Q from Householder reflectors on the host through LAPACK, batch split
    /// across XLA's thread pool.
    pub fn ferrax_cpu_ormqr = ORMQR_TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    arg tau: Buffer;
    arg c: Buffer;
    ret c_out: Buffer;
    attr left: bool;
    attr transpose: bool;
    traits = 0;
    body = ormqr_cpu;
}

ffi_handler! {
    /// QR with column pivoting on the host through LAPACK, batch split across XLA's thread
    /// pool.
    pub fn ferrax_cpu_geqp3 = GEQP3_TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    arg jpvt: Buffer;
    ret x_out: Buffer;
    ret jpvt_out: Buffer;
    ret tau: Buffer;
    traits = 0;
    body = geqp3_cpu;
}

fn geqrf_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    tau: Buffer<'_>,
) -> Result<()> {
    dispatch_lapack!(x, geqrf_typed(pool, x, x_out, tau))
}

fn orgqr_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    tau: Buffer<'_>,
    x_out: Buffer<'_>,
) -> Result<()> {
    dispatch_lapack!(x, orgqr_typed(pool, x, tau, x_out))
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn ormqr_cpu(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    tau: Buffer<'_>,
    c: Buffer<'_>,
    c_out: Buffer<'_>,
    left: bool,
    transpose: bool,
) -> Result<()> {
    dispatch_lapack!(a, ormqr_typed(pool, a, tau, c, c_out, left, transpose))
}

fn geqp3_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    jpvt: Buffer<'_>,
    x_out: Buffer<'_>,
    jpvt_out: Buffer<'_>,
    tau: Buffer<'_>,
) -> Result<()> {
    dispatch_lapack!(x, geqp3_typed(pool, x, jpvt, x_out, jpvt_out, tau))
}

/// All four routines return `info < 0` only for an invalid argument, which the shape checks rule
/// out: such a failure is a bug here, not a property of the input.
fn check_info(routine: &str, info: i32) -> Result<()> {
    if info == 0 {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "LAPACK {routine} failed with info {info}"
        )))
    }
}

/// Checks geqrf's `tau` against `x [..., m, n]` and returns x's shape.
fn geqrf_shapes(x: &Buffer<'_>, tau: &Buffer<'_>) -> Result<MatrixBatch> {
    let shape = MatrixBatch::of(x)?;
    let k = shape.rows.min(shape.cols);
    tau.expect_dtype(x.dtype())?;
    tau.expect_dims(&[shape.batch_dims(x), &[k as i64]].concat())?;
    Ok(shape)
}

/// Checks orgqr's operands (m >= n, `tau [..., k]` with k <= n); returns x's shape and k.
fn orgqr_shapes(x: &Buffer<'_>, tau: &Buffer<'_>) -> Result<(MatrixBatch, usize)> {
    let shape = MatrixBatch::of(x)?;
    if shape.rows < shape.cols {
        return Err(x.mismatch(
            "matrices with at least as many rows as columns".into(),
            format!("shape {:?}", x.dims()),
        ));
    }
    let batch_dims = shape.batch_dims(x);
    tau.expect_dtype(x.dtype())?;
    let k = match tau.dims().split_last() {
        Some((&k, tau_batch)) if tau_batch == batch_dims && k as usize <= shape.cols => k as usize,
        _ => {
            return Err(tau.mismatch(
                format!("shape {batch_dims:?} + [k] with k <= {}", shape.cols),
                format!("shape {:?}", tau.dims()),
            ))
        }
    };
    Ok((shape, k))
}

/// The shapes of ormqr's operands: the reflectors' matrices, c's, and the reflector count k.
struct OrmqrShapes {
    reflectors: MatrixBatch,
    c: MatrixBatch,
    k: usize,
}

/// Checks ormqr's operands against the reflectors `a [..., q, a_cols]`: `c [..., q, n]` (left)
/// or `[..., m, q]` (right) and `tau [..., k]` with k <= min(q, a_cols), both of a's dtype.
fn ormqr_shapes(
    a: &Buffer<'_>,
    tau: &Buffer<'_>,
    c: &Buffer<'_>,
    left: bool,
) -> Result<OrmqrShapes> {
    let reflectors = MatrixBatch::of(a)?;
    let batch_dims = reflectors.batch_dims(a);
    let q_order = reflectors.rows;
    c.expect_dtype(a.dtype())?;
    let shape = MatrixBatch::of(c)?;
    // Q (q_order x q_order) meets c's rows from the left, its columns from the right.
    let (meets, expected) = if left {
        (shape.rows, format!("[{q_order}, n]"))
    } else {
        (shape.cols, format!("[m, {q_order}]"))
    };
    if shape.batch_dims(c) != batch_dims || meets != q_order {
        return Err(c.mismatch(
            format!(
                "shape {batch_dims:?} + {expected} (left = {left}, a's shape {:?})",
                a.dims()
            ),
            format!("shape {:?}", c.dims()),
        ));
    }
    tau.expect_dtype(a.dtype())?;
    // LAPACK reads k reflectors, a's first k columns, each of length q_order.
    let max_k = reflectors.rows.min(reflectors.cols);
    let k = match tau.dims().split_last() {
        Some((&k, tau_batch)) if tau_batch == batch_dims && k as usize <= max_k => k as usize,
        _ => {
            return Err(tau.mismatch(
                format!("shape {batch_dims:?} + [k] with k <= {max_k}"),
                format!("shape {:?}", tau.dims()),
            ))
        }
    };
    Ok(OrmqrShapes {
        reflectors,
        c: shape,
        k,
    })
}

/// Up to this many rows and columns the CPU geqrf and orgqr handlers run in Rust
/// ([`small_qr::geqr2`], [`small_qr::org2r`]: LAPACK's unblocked algorithms and formats, as
/// ferrax's GPU kernels compute them) instead of one OpenBLAS call per matrix, whose overhead
/// and lock contention between threads dominate there.
pub const CPU_SMALL_MAX: usize = 16;

fn geqrf_typed<T: Scalar + KernelScalar>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    tau: Buffer<'_>,
) -> Result<()> {
    let shape = geqrf_shapes(&x, &tau)?;
    let k = shape.rows.min(shape.cols);
    let (m, n) = (lapack_dim(&x, shape.rows)?, lapack_dim(&x, shape.cols)?);
    let lda = m.max(1);
    x.copy_into(&x_out)?;
    // An empty matrix has nothing to factor (LAPACK would return at once) and no taus.
    if shape.batch == 0 || k == 0 {
        return Ok(());
    }
    // SAFETY: `x` is no longer read; the results are distinct buffers.
    let (x_out, tau) = unsafe { (x_out.as_mut_slice::<T>()?, tau.as_mut_slice::<T>()?) };
    let (x_out, tau) = (SharedMut(x_out.as_mut_ptr()), SharedMut(tau.as_mut_ptr()));
    let matrix_len = shape.matrix_len();
    let flops = matrix_len.saturating_mul(2 * k);
    if shape.rows.max(shape.cols) <= CPU_SMALL_MAX {
        let (rows, cols) = (shape.rows, shape.cols);
        return for_each_parallel(&pool, shape.batch, flops, &|b| {
            // SAFETY: matrix `b` and its taus, written by this task alone.
            let (a, tau) =
                unsafe { (x_out.slice(b * matrix_len, matrix_len), tau.slice(b * k, k)) };
            small_qr::geqr2(a, rows, cols, tau);
            Ok(())
        });
    }
    let geqrf = routine(T::geqrf())?;
    // Every matrix has the same shape, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        geqrf(&m, &n, x_out.at(0), &lda, tau.at(0), work, lwork, info)
    })?;
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        let mut info = 0;
        for b in range {
            // SAFETY: matrix `b` and its taus are written by this task alone; LAPACK touches
            // exactly `lda * n` elements, `k` taus and `lwork` elements of `work`.
            unsafe {
                geqrf(
                    &m,
                    &n,
                    x_out.at(b * matrix_len),
                    &lda,
                    tau.at(b * k),
                    work.as_mut_ptr(),
                    &lwork,
                    &mut info,
                )
            };
            check_info("geqrf", info)?;
        }
        Ok(())
    })
}

fn orgqr_typed<T: Scalar + KernelScalar>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    tau: Buffer<'_>,
    x_out: Buffer<'_>,
) -> Result<()> {
    let (shape, k) = orgqr_shapes(&x, &tau)?;
    let (m, n) = (lapack_dim(&x, shape.rows)?, lapack_dim(&x, shape.cols)?);
    let reflectors = lapack_dim(&tau, k)?;
    let lda = m.max(1);
    x.copy_into(&x_out)?;
    // No columns to form (m >= n, so this covers m = 0). With k = 0 LAPACK still has work to
    // do: Q is then the first n columns of the identity.
    if shape.batch == 0 || shape.cols == 0 {
        return Ok(());
    }
    // SAFETY: `x` is no longer read; `tau` is an argument, distinct from the result.
    let (x_out, tau) = unsafe { (x_out.as_mut_slice::<T>()?, tau.as_slice::<T>()?) };
    let x_out = SharedMut(x_out.as_mut_ptr());
    let matrix_len = shape.matrix_len();
    let flops = matrix_len.saturating_mul(2 * k.max(1));
    if shape.rows <= CPU_SMALL_MAX {
        let (rows, cols) = (shape.rows, shape.cols);
        return for_each_parallel(&pool, shape.batch, flops, &|b| {
            // SAFETY: matrix `b`, written by this task alone.
            let a = unsafe { x_out.slice(b * matrix_len, matrix_len) };
            small_qr::org2r(a, rows, cols, rows, k, &tau[b * k..(b + 1) * k]);
            Ok(())
        });
    }
    let orgqr = routine(T::orgqr())?;
    // Every matrix has the same shape, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        orgqr(
            &m,
            &n,
            &reflectors,
            x_out.at(0),
            &lda,
            tau.as_ptr(),
            work,
            lwork,
            info,
        )
    })?;
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        let mut info = 0;
        for b in range {
            // SAFETY: matrix `b` is written by this task alone; LAPACK touches exactly
            // `lda * n` elements, reads `k` taus and uses `lwork` elements of `work`.
            unsafe {
                orgqr(
                    &m,
                    &n,
                    &reflectors,
                    x_out.at(b * matrix_len),
                    &lda,
                    tau[b * k..].as_ptr(),
                    work.as_mut_ptr(),
                    &lwork,
                    &mut info,
                )
            };
            check_info("orgqr", info)?;
        }
        Ok(())
    })
}

/// jax's whole `qr` without pivoting (`geqrf`, Q formed by `householder_product`, `triu` of
/// R) in one call on jax's row-major arrays: jax's steps cost four XLA passes over the batch
/// (a transposing copy in, a copy of the reflectors for Q, R's `triu` and Q's transpose out),
/// which here are per-matrix moves in cache. Results are the separate targets' bit for bit.
pub const QR_TARGET: &CStr = c"ferrax_qr";

ffi_handler! {
    /// jax's `qr` on the host: `a [..., m, n]` in; `q [..., m, mq]` and `r [..., mq, n]` out
    /// (row-major), `mq` being `m` with `full_matrices`, else `min(m, n)`.
    pub fn ferrax_cpu_qr = QR_TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    ret q: Buffer;
    ret r: Buffer;
    attr full_matrices: bool;
    traits = 0;
    body = qr_cpu;
}

fn qr_cpu(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    q: Buffer<'_>,
    r: Buffer<'_>,
    full_matrices: bool,
) -> Result<()> {
    dispatch_lapack!(a, qr_typed(pool, a, q, r, full_matrices))
}

/// Checks `q` and `r` against `a [..., m, n]` (`q [..., m, mq]`, `r [..., mq, n]`, `mq` being
/// `m` with `full_matrices`, else `min(m, n)`); returns `a`'s shape and `mq`.
fn qr_shapes(
    a: &Buffer<'_>,
    q: &Buffer<'_>,
    r: &Buffer<'_>,
    full_matrices: bool,
) -> Result<(MatrixBatch, usize)> {
    let shape = MatrixBatch::of(a)?;
    let (rows, cols) = (shape.rows, shape.cols);
    let q_cols = if full_matrices { rows } else { rows.min(cols) };
    for (result, dims) in [(q, [rows, q_cols]), (r, [q_cols, cols])] {
        result.expect_dtype(a.dtype())?;
        result.expect_dims(&[shape.batch_dims(a), &[dims[0] as i64, dims[1] as i64]].concat())?;
    }
    Ok((shape, q_cols))
}

fn qr_typed<T: Scalar + KernelScalar>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    q: Buffer<'_>,
    r: Buffer<'_>,
    full_matrices: bool,
) -> Result<()> {
    let (shape, q_cols) = qr_shapes(&a, &q, &r, full_matrices)?;
    let (rows, cols) = (shape.rows, shape.cols);
    let k = rows.min(cols);
    let (m, n) = (lapack_dim(&a, rows)?, lapack_dim(&a, cols)?);
    let (mq, reflectors) = (lapack_dim(&a, q_cols)?, lapack_dim(&a, k)?);
    if shape.batch == 0 {
        return Ok(());
    }
    let x = SharedMut(a.data_ptr().cast::<T>());
    let (q, r) = (
        SharedMut(q.data_ptr().cast::<T>()),
        SharedMut(r.data_ptr().cast::<T>()),
    );
    let (a_len, q_len, r_len) = (rows * cols, rows * q_cols, q_cols * cols);
    let small_geqrf = rows.max(cols) <= CPU_SMALL_MAX;
    let small_orgqr = rows <= CPU_SMALL_MAX;
    let lapack = if k == 0 || (small_geqrf && small_orgqr) {
        None
    } else {
        let (geqrf, orgqr) = (routine(T::geqrf())?, routine(T::orgqr())?);
        // Queries read no matrix: one workspace serves every matrix and both routines.
        let mut dummy = [T::default(); 1];
        let d = dummy.as_mut_ptr();
        // SAFETY: queries only write `work[0]` and `info`.
        let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
            geqrf(&m, &n, d, &m, d, work, lwork, info)
        })?
        .max(query_lwork::<T>(|work, lwork, info| unsafe {
            orgqr(&m, &mq, &reflectors, d, &m, d, work, lwork, info)
        })?);
        Some((geqrf, orgqr, lwork))
    };
    let flops = (a_len + q_len).saturating_mul(2 * k.max(1));
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        // Column-major workspace for A, then Q: Q's columns past A's need no zeros (jax pads R
        // with them), `?orgqr` and `org2r` set every column past the k reflectors themselves.
        let mut w = vec![T::default(); rows * rows.max(cols)];
        let mut tau = vec![T::default(); k];
        let mut work = vec![T::default(); lapack.map_or(0, |l| l.2 as usize)];
        let mut info = 0;
        for b in range {
            // SAFETY: matrix `b` of the argument, which no task writes, and of the results,
            // which only this task writes.
            let (x, q, r) = unsafe {
                (
                    &*x.slice(b * a_len, a_len),
                    q.slice(b * q_len, q_len),
                    r.slice(b * r_len, r_len),
                )
            };
            if k == 0 {
                // jax's result for an empty matrix: the identity's first columns, R zero.
                for (i, row) in q.chunks_exact_mut(q_cols).enumerate() {
                    row.iter_mut().enumerate().for_each(|(j, e)| {
                        *e = if i == j {
                            <T as Scalar>::ONE
                        } else {
                            T::default()
                        }
                    });
                }
                r.fill(T::default());
                continue;
            }
            transpose(x, rows, cols, &mut w[..a_len]);
            match lapack {
                Some((geqrf, _, lwork)) if !small_geqrf => {
                    // SAFETY: the m×n matrix `w` (leading dimension m), k taus, lwork work.
                    unsafe {
                        geqrf(
                            &m,
                            &n,
                            w.as_mut_ptr(),
                            &m,
                            tau.as_mut_ptr(),
                            work.as_mut_ptr(),
                            &lwork,
                            &mut info,
                        )
                    };
                    check_info("geqrf", info)?;
                }
                _ => small_qr::geqr2(&mut w[..a_len], rows, cols, &mut tau),
            }
            for (i, row) in r.chunks_exact_mut(cols).enumerate() {
                for (j, e) in row.iter_mut().enumerate() {
                    *e = if i <= j {
                        w[j * rows + i]
                    } else {
                        T::default()
                    };
                }
            }
            match lapack {
                Some((_, orgqr, lwork)) if !small_orgqr => {
                    // SAFETY: the m×mq matrix `w` (leading dimension m), k taus, lwork work.
                    unsafe {
                        orgqr(
                            &m,
                            &mq,
                            &reflectors,
                            w.as_mut_ptr(),
                            &m,
                            tau.as_ptr(),
                            work.as_mut_ptr(),
                            &lwork,
                            &mut info,
                        )
                    };
                    check_info("orgqr", info)?;
                }
                _ => small_qr::org2r(&mut w[..q_len], rows, q_cols, rows, k, &tau),
            }
            transpose(&w[..q_len], q_cols, rows, q);
        }
        Ok(())
    })
}

/// Up to this order of Q, `?ormqr` gets the minimum workspace and so applies the reflectors one
/// at a time (`?orm2r`): the blocked path's many small BLAS-3 calls each take OpenBLAS's buffer
/// lock, and with two threads contending for it they cost more than they save (n = 64, 2
/// threads: f32 0.65× → 1.04× of stock jaxlib, f64 0.68× → 1.34×, c128 1.30× → 1.68×; at 128
/// the blocked path is ahead again).
const ORMQR_UNBLOCKED_MAX: usize = 64;

fn ormqr_typed<T: Scalar>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    tau: Buffer<'_>,
    c: Buffer<'_>,
    c_out: Buffer<'_>,
    left: bool,
    transpose: bool,
) -> Result<()> {
    a.expect_dtype(T::DTYPE)?;
    let OrmqrShapes {
        reflectors,
        c: shape,
        k,
    } = ormqr_shapes(&a, &tau, &c, left)?;
    let q_order = reflectors.rows;
    let side = if left { b'L' } else { b'R' } as c_char;
    // Real ?ormqr takes 'T', complex ?unmqr 'C': Q^T or Q^H, jax's `transpose` either way.
    let complex = matches!(T::DTYPE, DataType::C64 | DataType::C128);
    let trans = match (transpose, complex) {
        (false, _) => b'N',
        (true, false) => b'T',
        (true, true) => b'C',
    } as c_char;
    let (m, n) = (lapack_dim(&c, shape.rows)?, lapack_dim(&c, shape.cols)?);
    let reflector_count = lapack_dim(&tau, k)?;
    let lda = lapack_dim(&a, q_order.max(1))?;
    let ldc = m.max(1);
    c.copy_into(&c_out)?;
    // LAPACK's quick return: an empty c, or no reflectors (Q = I), leaves c as it is.
    if shape.batch == 0 || shape.matrix_len() == 0 || k == 0 {
        return Ok(());
    }
    let ormqr = routine(T::ormqr())?;
    // SAFETY: `c` is no longer read; `a` and `tau` are arguments, distinct from the result.
    let (a, tau, c_out) = unsafe {
        (
            a.as_slice::<T>()?,
            tau.as_slice::<T>()?,
            c_out.as_mut_slice::<T>()?,
        )
    };
    let c_out = SharedMut(c_out.as_mut_ptr());
    let lwork = if q_order <= ORMQR_UNBLOCKED_MAX {
        // LAPACK's minimum: too small for a block of reflectors, so ?orm2r applies them one
        // at a time.
        (if left { n } else { m }).max(1)
    } else {
        // Every matrix has the same shape, so one query sizes the workspace of all.
        // SAFETY: a query only writes `work[0]` and `info`.
        query_lwork::<T>(|work, lwork, info| unsafe {
            ormqr(
                &side,
                &trans,
                &m,
                &n,
                &reflector_count,
                a.as_ptr(),
                &lda,
                tau.as_ptr(),
                c_out.at(0),
                &ldc,
                work,
                lwork,
                info,
            )
        })?
    };
    let (a_len, c_len) = (reflectors.matrix_len(), shape.matrix_len());
    let used_len = q_order * k;
    // Each reflector costs about 4 flops per element of c.
    let flops = c_len.saturating_mul(4 * k);
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        // ?ormqr (through ?orm2r) sets each reflector's diagonal element to 1 while it applies
        // it, restoring it after. Other ops of the executable may read `a` meanwhile (stock
        // jaxlib's target races with them there), so LAPACK gets a copy of the k columns.
        let mut reflectors = vec![T::default(); used_len];
        let mut info = 0;
        for b in range {
            reflectors.copy_from_slice(&a[b * a_len..][..used_len]);
            // SAFETY: matrix `b` of `c_out` is written by this task alone; LAPACK uses the
            // `k` columns of `reflectors` (k <= a_cols), `k` taus, `ldc * n` elements of
            // `c_out` and `lwork` elements of `work`.
            unsafe {
                ormqr(
                    &side,
                    &trans,
                    &m,
                    &n,
                    &reflector_count,
                    reflectors.as_mut_ptr(),
                    &lda,
                    tau[b * k..].as_ptr(),
                    c_out.at(b * c_len),
                    &ldc,
                    work.as_mut_ptr(),
                    &lwork,
                    &mut info,
                )
            };
            check_info("ormqr", info)?;
        }
        Ok(())
    })
}

fn geqp3_typed<T: Geqp3>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    jpvt: Buffer<'_>,
    x_out: Buffer<'_>,
    jpvt_out: Buffer<'_>,
    tau: Buffer<'_>,
) -> Result<()> {
    let shape = MatrixBatch::of(&x)?;
    let batch_dims = shape.batch_dims(&x);
    let k = shape.rows.min(shape.cols);
    jpvt.expect_dtype(DataType::S32)?;
    jpvt.expect_dims(&[batch_dims, &[shape.cols as i64]].concat())?;
    tau.expect_dtype(T::DTYPE)?;
    tau.expect_dims(&[batch_dims, &[k as i64]].concat())?;
    let (m, n) = (lapack_dim(&x, shape.rows)?, lapack_dim(&x, shape.cols)?);
    let lda = m.max(1);
    x.copy_into(&x_out)?;
    jpvt.copy_into(&jpvt_out)?;
    // No columns, nothing to pivot. With m = 0 LAPACK still numbers the columns (fixed ones
    // first), so it is called: it touches no matrix element then.
    if shape.batch == 0 || shape.cols == 0 {
        return Ok(());
    }
    let geqp3 = T::routine()?;
    // SAFETY: `x` and `jpvt` are no longer read; the results are distinct buffers.
    let (x_out, jpvt_out, tau) = unsafe {
        (
            x_out.as_mut_slice::<T>()?,
            jpvt_out.as_mut_slice::<i32>()?,
            tau.as_mut_slice::<T>()?,
        )
    };
    let (x_out, jpvt_out, tau) = (
        SharedMut(x_out.as_mut_ptr()),
        SharedMut(jpvt_out.as_mut_ptr()),
        SharedMut(tau.as_mut_ptr()),
    );
    // Every matrix has the same shape, so one query sizes the workspace of all. For m = 0 the
    // query answers 1, yet with fixed columns ?geqp3 then calls ?ormqr, which wants n.
    // SAFETY: a query only writes `work[0]` and `info` (`rwork` is not touched).
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        T::geqp3(
            geqp3,
            &m,
            &n,
            x_out.at(0),
            &lda,
            jpvt_out.at(0),
            tau.at(0),
            work,
            lwork,
            std::ptr::null_mut(),
            info,
        )
    })?
    .max(n);
    let rwork_len = T::RWORK_PER_COLUMN * shape.cols;
    let matrix_len = shape.matrix_len();
    let flops = matrix_len.saturating_mul(2 * k);
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut work = vec![T::default(); lwork as usize];
        let mut rwork = vec![<Real<T>>::default(); rwork_len];
        let mut info = 0;
        for b in range {
            // SAFETY: matrix `b`, its pivots and its taus are written by this task alone;
            // LAPACK touches `lda * n` elements, `n` pivots, `k` taus, `lwork` elements of
            // `work` and `2n` of `rwork` (complex only).
            unsafe {
                T::geqp3(
                    geqp3,
                    &m,
                    &n,
                    x_out.at(b * matrix_len),
                    &lda,
                    jpvt_out.at(b * shape.cols),
                    tau.at(b * k),
                    work.as_mut_ptr(),
                    &lwork,
                    rwork.as_mut_ptr(),
                    &mut info,
                )
            };
            check_info("geqp3", info)?;
        }
        Ok(())
    })
}

/// `?geqp3` for one scalar type: the complex routines take a real workspace of 2n, the real
/// ones none.
trait Geqp3: Scalar {
    type Routine: Copy + Send + Sync;
    /// `rwork`'s length per column of the matrix.
    const RWORK_PER_COLUMN: usize;
    fn routine() -> Result<Self::Routine>;
    /// # Safety
    /// As LAPACK's `?geqp3` (`rwork` is ignored for real scalars).
    #[allow(clippy::too_many_arguments)] // LAPACK's argument list
    unsafe fn geqp3(
        f: Self::Routine,
        m: &i32,
        n: &i32,
        a: *mut Self,
        lda: &i32,
        jpvt: *mut i32,
        tau: *mut Self,
        work: *mut Self,
        lwork: *const i32,
        rwork: *mut Real<Self>,
        info: *mut i32,
    );
}

macro_rules! geqp3_real {
    ($($t:ty),*) => {$(
        impl Geqp3 for $t {
            type Routine = Geqp3Real<$t>;
            const RWORK_PER_COLUMN: usize = 0;
            fn routine() -> Result<Self::Routine> {
                routine(<$t as RealLapack>::geqp3())
            }
            unsafe fn geqp3(
                f: Self::Routine,
                m: &i32,
                n: &i32,
                a: *mut Self,
                lda: &i32,
                jpvt: *mut i32,
                tau: *mut Self,
                work: *mut Self,
                lwork: *const i32,
                _rwork: *mut $t,
                info: *mut i32,
            ) {
                f(m, n, a, lda, jpvt, tau, work, lwork, info)
            }
        }
    )*};
}
geqp3_real!(f32, f64);

macro_rules! geqp3_complex {
    ($($t:ty),*) => {$(
        impl Geqp3 for Complex<$t> {
            type Routine = Geqp3Complex<Complex<$t>>;
            const RWORK_PER_COLUMN: usize = 2;
            fn routine() -> Result<Self::Routine> {
                routine(<Complex<$t> as ComplexLapack>::geqp3())
            }
            unsafe fn geqp3(
                f: Self::Routine,
                m: &i32,
                n: &i32,
                a: *mut Self,
                lda: &i32,
                jpvt: *mut i32,
                tau: *mut Self,
                work: *mut Self,
                lwork: *const i32,
                rwork: *mut $t,
                info: *mut i32,
            ) {
                f(m, n, a, lda, jpvt, tau, work, lwork, rwork, info)
            }
        }
    )*};
}
geqp3_complex!(f32, f64);

ffi_handler! {
    /// Batched Householder QR on the GPU: ferrax's PTX kernels up to 128×128 (as shared
    /// memory allows), cuBLAS's batched or cuSOLVER's looped geqrf for the rest.
    pub fn ferrax_cuda_geqrf = GEQRF_TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg x: Buffer;
    ret x_out: Buffer;
    ret tau: Buffer;
    traits = 0;
    body = geqrf_cuda;
}

fn geqrf_cuda(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    tau: Buffer<'_>,
) -> Result<()> {
    let kind = gpu_scalar_kind(&x)?;
    let shape = geqrf_shapes(&x, &tau)?;
    if shape.batch == 0 || shape.matrix_len() == 0 {
        return x_out.expect_dims(x.dims());
    }
    let gpu = gpu_in_place(stream, &x, &x_out, shape, kind)?;
    let (a, tau) = (x_out.data_ptr(), tau.data_ptr());
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::qr::geqrf_launch(kind, m, n, batch, max_shared)
    })?
    else {
        let library = GpuLibrary {
            gpu: &gpu,
            scratch: &scratch,
        };
        let dims = [
            lapack_dim(&x, shape.rows)?,
            lapack_dim(&x, shape.cols)?,
            lapack_dim(&x, shape.batch)?,
        ];
        let stride = shape.matrix_len();
        return dispatch_lapack!(
            x,
            geqrf_library(library, shape, dims, stride, a.cast(), tau.cast())
        );
    };
    let args = GeqrfArgs {
        a: a.cast(),
        tau: tau.cast(),
        m: shape.rows as u32,
        n: shape.cols as u32,
        batch: shape.batch as u64,
    };
    // SAFETY: batch column-major m×n matrices and min(m, n) taus each.
    unsafe { gpu.launch(&config, args) }
}

/// Whether cuBLAS's `geqrfBatched` (one call for the batch) beats a loop of cuSOLVER's
/// `geqrf`: PyTorch's rule (up to 256 rows, and at least one matrix per 16 rows; PR #56253's
/// measurements, e.g. 128 2×2 matrices f64 24.7 µs batched vs 1676 µs looped). jaxlib's own
/// rule (`m / batch <= 128`, integer division) takes cuBLAS for any order once the batch is
/// large, where it is slow (512×512, 16 matrices: jaxlib's QR 255 ms, PyTorch's loop 29.7).
pub(crate) fn geqrf_uses_cublas_batched(m: usize, batch: usize) -> bool {
    m <= 256 && batch >= (m / 16).max(2)
}

/// Householder QR of the batch (`dims`: m, n and the batch; the matrices `stride` elements
/// apart, leading dimension m) in place in `a`, taus in `tau`.
fn geqrf_library<T: Dense + Batched>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [m, n, batch]: [i32; 3],
    stride: usize,
    a: *mut T,
    tau: *mut T,
) -> Result<()> {
    let (k, matrix_len) = (shape.rows.min(shape.cols), stride);
    if geqrf_uses_cublas_batched(shape.rows, shape.batch) {
        let matrices = library.batch_pointers(a, matrix_len, shape.batch)?;
        let taus = library.batch_pointers(tau, k, shape.batch)?;
        let mut info = 0;
        // SAFETY: `batch` pointers to m×n matrices and to their k taus; `info` is on the host.
        Blas::on(library.gpu)?.run("geqrfBatched", |h| unsafe {
            T::geqrf_batched(h, m, n, matrices, m, taus, &mut info, batch)
        })?;
        return check_info("geqrfBatched", info);
    }
    library.solve_each(
        "geqrf",
        shape.batch,
        // SAFETY: a size query on a matrix of the batch.
        |h, lwork| unsafe { T::geqrf_buffer_size(h, m, n, a, m, lwork) },
        // SAFETY: matrix b and its k taus, the workspace and info `solve_each` sized.
        |h, b, work, lwork, info| unsafe {
            let (matrix, taus) = (a.add(b * matrix_len), tau.add(b * k));
            T::geqrf(h, m, n, matrix, m, taus, work, lwork, info)
        },
    )
}

ffi_handler! {
    /// jax's `qr` on the GPU, on row-major arrays as [`ferrax_cpu_qr`]: ferrax's fused PTX
    /// kernels (R and Q in one pass over memory) up to 128×128 as shared memory allows; past
    /// them geqrf and orgqr from the libraries on a column-major copy of the batch.
    pub fn ferrax_cuda_qr = QR_TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg a: Buffer;
    ret q: Buffer;
    ret r: Buffer;
    attr full_matrices: bool;
    traits = 0;
    body = qr_cuda;
}

fn qr_cuda(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    a: Buffer<'_>,
    q: Buffer<'_>,
    r: Buffer<'_>,
    full_matrices: bool,
) -> Result<()> {
    let kind = gpu_scalar_kind(&a)?;
    let (shape, q_cols) = qr_shapes(&a, &q, &r, full_matrices)?;
    if shape.batch == 0 || shape.rows == 0 {
        return Ok(()); // Q and R are empty
    }
    let gpu = GpuStream::adopt(stream)?;
    let (a_ptr, q_ptr, r_ptr) = (a.data_ptr(), q.data_ptr(), r.data_ptr());
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::qr::qr_launch(kind, m, n, batch, full_matrices, max_shared)
    })?
    else {
        let library = GpuLibrary {
            gpu: &gpu,
            scratch: &scratch,
        };
        let dims = [
            lapack_dim(&a, shape.rows)?,
            lapack_dim(&a, shape.cols)?,
            lapack_dim(&a, q_cols)?,
            lapack_dim(&a, shape.batch)?,
        ];
        let pointers = [a_ptr, q_ptr, r_ptr].map(|p| p.cast::<std::ffi::c_void>());
        return dispatch_lapack!(a, qr_library(library, shape, dims, kind, pointers));
    };
    let args = QrArgs {
        a: a_ptr.cast_const().cast(),
        q: q_ptr.cast(),
        r: r_ptr.cast(),
        m: shape.rows as u32,
        n: shape.cols as u32,
        batch: shape.batch as u64,
        full_matrices: full_matrices as u32,
    };
    // SAFETY: batch row-major m×n matrices in, their m×mq Q and mq×n R out.
    unsafe { gpu.launch(&config, args) }
}

/// jax's `qr` through the libraries (`dims`: m, n, Q's columns mq and the batch): A copied
/// column-major into a workspace as wide as A and Q, geqrf there, R copied out (its upper
/// triangle), orgqr in place, Q copied out.
fn qr_library<T: Dense + Batched>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [m, n, q_cols, batch]: [i32; 4],
    kind: ScalarKind,
    [a, q, r]: [*mut std::ffi::c_void; 3],
) -> Result<()> {
    let (rows, cols, mq) = (shape.rows, shape.cols, q_cols as usize);
    let k = rows.min(cols);
    let width = cols.max(mq);
    let (stride, bytes) = (rows * width, kind.bytes());
    let work = library.scratch.allocate(shape.batch * stride * bytes, 16)?;
    let taus = library
        .scratch
        .allocate((shape.batch * k).max(1) * bytes, 16)?;
    let gpu = library.gpu;
    if width > cols {
        // Q's columns past A's: orgqr sets them, but from defined values.
        gpu.zero(work, shape.batch * stride * bytes)?;
    }
    let workspace = Strides::column_major(rows as u64, stride as u64);
    let row_major = |r: usize, c: usize| Strides::row_major(r as u64, c as u64);
    let copy = |src, dst, (r, c): (usize, usize), from, to, upper| {
        // SAFETY: `r×c` stays within each array's matrices (A m×n, R mq×n, Q m×mq, the
        // workspace m×width), distinct buffers.
        unsafe { gpu.copy_matrices(src, dst, bytes, [r, c, shape.batch], from, to, upper) }
    };
    copy(
        a,
        work,
        (rows, cols),
        row_major(rows, cols),
        workspace,
        false,
    )?;
    if k > 0 {
        geqrf_library::<T>(
            library,
            shape,
            [m, n, batch],
            stride,
            work.cast(),
            taus.cast(),
        )?;
    }
    copy(work, r, (mq, cols), workspace, row_major(mq, cols), true)?;
    let q_shape = MatrixBatch { cols: mq, ..shape };
    let dims = [m, q_cols, k as i32];
    orgqr_library::<T>(
        library,
        q_shape,
        dims,
        stride,
        work.cast(),
        taus.cast_const().cast(),
    )?;
    copy(work, q, (rows, mq), workspace, row_major(rows, mq), false)
}

ffi_handler! {
    /// Q from Householder reflectors on the GPU: ferrax's PTX kernels up to 128×128 (as shared
    /// memory allows), cuSOLVER's looped orgqr/ungqr for the rest.
    pub fn ferrax_cuda_orgqr = ORGQR_TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg x: Buffer;
    arg tau: Buffer;
    ret x_out: Buffer;
    traits = 0;
    body = orgqr_cuda;
}

fn orgqr_cuda(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    x: Buffer<'_>,
    tau: Buffer<'_>,
    x_out: Buffer<'_>,
) -> Result<()> {
    let kind = gpu_scalar_kind(&x)?;
    let (shape, k) = orgqr_shapes(&x, &tau)?;
    if shape.batch == 0 || shape.matrix_len() == 0 {
        return x_out.expect_dims(x.dims());
    }
    let gpu = gpu_in_place(stream, &x, &x_out, shape, kind)?;
    let reflectors = lapack_dim(&tau, k)?;
    let (a, tau) = (x_out.data_ptr(), tau.data_ptr());
    // k <= n <= 128 once a kernel takes the shape.
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::qr::orgqr_launch(kind, m, n, k as u32, batch, max_shared)
    })?
    else {
        let library = GpuLibrary {
            gpu: &gpu,
            scratch: &scratch,
        };
        let dims = [
            lapack_dim(&x, shape.rows)?,
            lapack_dim(&x, shape.cols)?,
            reflectors,
        ];
        let stride = shape.matrix_len();
        return dispatch_lapack!(
            x,
            orgqr_library(
                library,
                shape,
                dims,
                stride,
                a.cast(),
                tau.cast_const().cast()
            )
        );
    };
    let args = OrgqrArgs {
        a: a.cast(),
        tau: tau.cast_const().cast(),
        m: shape.rows as u32,
        n: shape.cols as u32,
        k: k as u32,
        batch: shape.batch as u64,
    };
    // SAFETY: batch column-major m×n reflector matrices and k taus each.
    unsafe { gpu.launch(&config, args) }
}

/// Q's first n columns from k reflectors per matrix (`dims`: m, n, k; the matrices `stride`
/// elements apart, leading dimension m), in place in `a`, one cuSOLVER call per matrix (it has
/// no batched orgqr).
fn orgqr_library<T: Dense>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [m, n, k]: [i32; 3],
    stride: usize,
    a: *mut T,
    tau: *const T,
) -> Result<()> {
    let taus = k as usize;
    library.solve_each(
        "orgqr",
        shape.batch,
        // SAFETY: a size query on a matrix of the batch.
        |h, lwork| unsafe { T::orgqr_buffer_size(h, m, n, k, a, m, tau, lwork) },
        // SAFETY: matrix b and its k taus, the workspace and info `solve_each` sized.
        |h, b, work, lwork, info| unsafe {
            let (matrix, its_taus) = (a.add(b * stride), tau.add(b * taus));
            T::orgqr(h, m, n, k, matrix, m, its_taus, work, lwork, info)
        },
    )
}

ffi_handler! {
    /// Multiplication by Q from Householder reflectors on the GPU: ferrax's PTX kernel for Q
    /// up to 128×128 acting on up to 128 vectors of c (as shared memory allows), cuSOLVER's
    /// ormqr/unmqr, one call per matrix, for the rest.
    pub fn ferrax_cuda_ormqr = ORMQR_TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg a: Buffer;
    arg tau: Buffer;
    arg c: Buffer;
    ret c_out: Buffer;
    attr left: bool;
    attr transpose: bool;
    traits = 0;
    body = ormqr_cuda;
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn ormqr_cuda(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    a: Buffer<'_>,
    tau: Buffer<'_>,
    c: Buffer<'_>,
    c_out: Buffer<'_>,
    left: bool,
    transpose: bool,
) -> Result<()> {
    let kind = gpu_scalar_kind(&a)?;
    let shapes = ormqr_shapes(&a, &tau, &c, left)?;
    let shape = shapes.c;
    if shape.batch == 0 {
        return c_out.expect_dims(c.dims());
    }
    let gpu = gpu_in_place(stream, &c, &c_out, shape, kind)?;
    // cuSOLVER's quick return as LAPACK's: an empty c, or no reflectors (Q = I).
    if shape.matrix_len() == 0 || shapes.k == 0 {
        return Ok(());
    }
    let q_order = shapes.reflectors.rows;
    let vectors = if left { shape.cols } else { shape.rows };
    let small = MatrixBatch {
        rows: q_order,
        cols: vectors,
        ..shape
    };
    let k = shapes.k as u32; // k <= q_order <= 128 once a kernel takes the shape
    let kernel = small_kernel(&gpu, small, |q, vectors, batch, max_shared| {
        small_qr::ormqr_launch(kind, q, k, vectors, batch, max_shared)
    })?;
    if let (Some(config), Ok(a_cols)) = (kernel, u32::try_from(shapes.reflectors.cols)) {
        let args = OrmqrArgs {
            a: a.data_ptr().cast_const().cast(),
            tau: tau.data_ptr().cast_const().cast(),
            c: c_out.data_ptr().cast(),
            q: q_order as u32,
            a_cols,
            k,
            vectors: vectors as u32,
            batch: shape.batch as u64,
            left: left as u32,
            transpose: transpose as u32,
        };
        // SAFETY: batch reflector matrices of q×a_cols with k taus each, and batch matrices
        // of c with q×vectors elements, as ormqr_shapes checked.
        return unsafe { gpu.launch(&config, args) };
    }
    let library = GpuLibrary {
        gpu: &gpu,
        scratch: &scratch,
    };
    // Real ormqr takes OP_T, complex unmqr OP_C: Q^T or Q^H, jax's `transpose` either way.
    let complex = matches!(a.dtype(), DataType::C64 | DataType::C128);
    let operation = match (transpose, complex) {
        (false, _) => Op::CUBLAS_OP_N,
        (true, false) => Op::CUBLAS_OP_T,
        (true, true) => Op::CUBLAS_OP_C,
    };
    let side = if left {
        Side::CUBLAS_SIDE_LEFT
    } else {
        Side::CUBLAS_SIDE_RIGHT
    };
    let dims = [
        lapack_dim(&c, shape.rows)?,
        lapack_dim(&c, shape.cols)?,
        lapack_dim(&tau, shapes.k)?,
        lapack_dim(&a, shapes.reflectors.rows)?,
    ];
    let (a, tau, c) = (a.data_ptr(), tau.data_ptr(), c_out.data_ptr());
    dispatch_lapack!(
        c_out,
        ormqr_library(
            library,
            &shapes,
            (side, operation),
            dims,
            a.cast_const().cast(),
            tau.cast_const().cast(),
            c.cast()
        )
    )
}

/// Q c, Q^H c, c Q or c Q^H in place in `c` (`dims`: c's m and n, k, and a's leading
/// dimension, Q's order), one cuSOLVER call per matrix.
fn ormqr_library<T: Dense>(
    library: GpuLibrary<'_>,
    shapes: &OrmqrShapes,
    (side, operation): (Side, Op),
    [m, n, k, lda]: [i32; 4],
    a: *const T,
    tau: *const T,
    c: *mut T,
) -> Result<()> {
    let (a_len, c_len, taus) = (
        shapes.reflectors.matrix_len(),
        shapes.c.matrix_len(),
        shapes.k,
    );
    library.solve_each(
        "ormqr",
        shapes.c.batch,
        // SAFETY: a size query on a matrix of the batch.
        |h, lwork| unsafe {
            T::ormqr_buffer_size(h, side, operation, m, n, k, a, lda, tau, c, m, lwork)
        },
        // SAFETY: matrix b of a (k reflectors of length lda), its k taus and matrix b of c,
        // the workspace and info `solve_each` sized.
        |h, b, work, lwork, info| unsafe {
            let (reflectors, its_taus) = (a.add(b * a_len), tau.add(b * taus));
            let its_c = c.add(b * c_len);
            T::ormqr(
                h, side, operation, m, n, k, reflectors, lda, its_taus, its_c, m, work, lwork, info,
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cublas_batched_qr_for_many_matrices_of_up_to_256_rows() {
        assert!(geqrf_uses_cublas_batched(128, 1024));
        assert!(geqrf_uses_cublas_batched(256, 16));
        assert!(!geqrf_uses_cublas_batched(256, 15));
        assert!(!geqrf_uses_cublas_batched(257, 1 << 20));
        // The case jaxlib's rule sends to cuBLAS: 16 matrices of 512×512.
        assert!(!geqrf_uses_cublas_batched(512, 16));
        assert!(!geqrf_uses_cublas_batched(8, 1));
        assert!(geqrf_uses_cublas_batched(8, 2));
    }
}
