//! Tridiagonal solves, jaxlib's contracts: diagonals `dl`, `d`, `du` `[..., m]` (`dl[0]` and
//! `du[m-1]` lie outside the matrix and are ignored) and right-hand sides `b` `[..., m, nrhs]`
//! (column-major), all of one dtype; no attributes.
//! - `gtsv` (`lapack_?gtsv_ffi`): LAPACK's `?gtsv` in place: `dl_out`, `d_out`, `du_out` (the
//!   factorization LAPACK leaves there) and `b_out` (the solution) alias the four operands, plus
//!   S32 `info` `[...]`.
//! - `tridiagonal_solve_perturbed` (`tridiagonal_solve_perturbed_ffi`): `x` `[..., m, nrhs]`
//!   by Gaussian elimination that perturbs tiny pivots instead of failing (no `info`).

use crate::ffi::{Buffer, DataType, MatrixBatch, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::{dispatch_lapack, for_each_chunk, for_each_parallel, lapack_dim, routine};
use crate::ops::{Scalar, SharedMut};
use ferrax_kernels::scalar::Scalar as KernelScalar;
use ferrax_kernels::tridiagonal;
use std::ffi::CStr;

pub const GTSV_TARGET: &CStr = c"ferrax_gtsv";
pub const PERTURBED_TARGET: &CStr = c"ferrax_tridiagonal_solve_perturbed";

ffi_handler! {
    /// Tridiagonal solve on the host through LAPACK's `?gtsv`, batch split across XLA's thread
    /// pool.
    pub fn ferrax_cpu_gtsv = GTSV_TARGET;
    ctx pool: ThreadPool;
    arg dl: Buffer;
    arg d: Buffer;
    arg du: Buffer;
    arg b: Buffer;
    ret dl_out: Buffer;
    ret d_out: Buffer;
    ret du_out: Buffer;
    ret b_out: Buffer;
    ret info: Buffer;
    traits = 0;
    body = gtsv_cpu;
}

ffi_handler! {
    /// Tridiagonal solve that perturbs tiny pivots (ferrax-kernels' Rust kernel), batch split
    /// across XLA's thread pool.
    pub fn ferrax_cpu_tridiagonal_solve_perturbed = PERTURBED_TARGET;
    ctx pool: ThreadPool;
    arg dl: Buffer;
    arg d: Buffer;
    arg du: Buffer;
    arg b: Buffer;
    ret x: Buffer;
    traits = 0;
    body = perturbed_cpu;
}

/// The operands of both targets, in signature order.
struct System<'a> {
    dl: Buffer<'a>,
    d: Buffer<'a>,
    du: Buffer<'a>,
    b: Buffer<'a>,
}

impl System<'_> {
    /// Checks the diagonals against `b` `[..., m, nrhs]` of dtype `T`: dtype `T`, shape
    /// `[..., m]`.
    fn shape<T: NativeType>(&self) -> Result<MatrixBatch> {
        let shape = MatrixBatch::of(&self.b)?;
        let diagonal_dims = &self.b.dims()[..self.b.rank() - 1];
        for diagonal in [&self.dl, &self.d, &self.du] {
            diagonal.expect_dtype(T::DTYPE)?;
            diagonal.expect_dims(diagonal_dims)?;
        }
        Ok(shape)
    }
}

/// `gtsv`'s results, in signature order.
struct GtsvOutputs<'a> {
    dl: Buffer<'a>,
    d: Buffer<'a>,
    du: Buffer<'a>,
    b: Buffer<'a>,
    info: Buffer<'a>,
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn gtsv_cpu(
    pool: ThreadPool<'_>,
    dl: Buffer<'_>,
    d: Buffer<'_>,
    du: Buffer<'_>,
    b: Buffer<'_>,
    dl_out: Buffer<'_>,
    d_out: Buffer<'_>,
    du_out: Buffer<'_>,
    b_out: Buffer<'_>,
    info: Buffer<'_>,
) -> Result<()> {
    let system = System { dl, d, du, b };
    let outputs = GtsvOutputs {
        dl: dl_out,
        d: d_out,
        du: du_out,
        b: b_out,
        info,
    };
    dispatch_lapack!(b, gtsv_typed(pool, system, outputs))
}

fn perturbed_cpu(
    pool: ThreadPool<'_>,
    dl: Buffer<'_>,
    d: Buffer<'_>,
    du: Buffer<'_>,
    b: Buffer<'_>,
    x: Buffer<'_>,
) -> Result<()> {
    dispatch_lapack!(b, perturbed_typed(pool, System { dl, d, du, b }, x))
}

fn gtsv_typed<T: Scalar>(
    pool: ThreadPool<'_>,
    args: System<'_>,
    out: GtsvOutputs<'_>,
) -> Result<()> {
    let shape = args.shape::<T>()?;
    out.info.expect_dtype(DataType::S32)?;
    out.info.expect_dims(shape.batch_dims(&args.b))?;
    let (rows, cols) = (shape.rows, shape.cols);
    let (m, nrhs) = (lapack_dim(&args.b, rows)?, lapack_dim(&args.b, cols)?);
    let ldb = m.max(1);
    args.dl.copy_into(&out.dl)?;
    args.d.copy_into(&out.d)?;
    args.du.copy_into(&out.du)?;
    args.b.copy_into(&out.b)?;
    if shape.batch == 0 {
        return Ok(());
    }
    // SAFETY: the arguments are no longer read; the results are distinct buffers.
    let (dl, d, du, b, info) = unsafe {
        (
            out.dl.as_mut_slice::<T>()?,
            out.d.as_mut_slice::<T>()?,
            out.du.as_mut_slice::<T>()?,
            out.b.as_mut_slice::<T>()?,
            out.info.as_mut_slice::<i32>()?,
        )
    };
    if rows == 0 {
        // An empty system: LAPACK would return at once.
        info.fill(0);
        return Ok(());
    }
    let gtsv = routine(T::gtsv())?;
    let (dl, d, du, b, info) = (
        SharedMut(dl.as_mut_ptr()),
        SharedMut(d.as_mut_ptr()),
        SharedMut(du.as_mut_ptr()),
        SharedMut(b.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    let matrix_len = shape.matrix_len();
    // Elimination on the three diagonals, then two sweeps over each right-hand side.
    let flops = rows.saturating_mul(cols.saturating_mul(6).saturating_add(8));
    for_each_parallel(&pool, shape.batch, flops, &|i| {
        // SAFETY: system `i` and its info are written by this task alone. As jaxlib, LAPACK's
        // sub-diagonal starts at `dl[1]` (one past the end of a 1 x 1 system's `dl`, which
        // LAPACK then does not read); `?gtsv` touches `m - 1` elements of `dl` and `du`, `m` of
        // `d` and `ldb * nrhs` of `b` (none when `nrhs` is 0).
        unsafe {
            gtsv(
                &m,
                &nrhs,
                dl.at(i * rows + 1),
                d.at(i * rows),
                du.at(i * rows),
                b.at(i * matrix_len),
                &ldb,
                info.at(i),
            )
        };
        Ok(())
    })
}

fn perturbed_typed<T: NativeType + KernelScalar>(
    pool: ThreadPool<'_>,
    args: System<'_>,
    x: Buffer<'_>,
) -> Result<()> {
    let shape = args.shape::<T>()?;
    x.expect_dtype(T::DTYPE)?;
    x.expect_dims(args.b.dims())?;
    let (rows, matrix_len) = (shape.rows, shape.matrix_len());
    if shape.batch == 0 || matrix_len == 0 {
        return Ok(());
    }
    // SAFETY: the arguments are only read and do not alias the result.
    let (dl, d, du, b, x) = unsafe {
        (
            args.dl.as_slice::<T>()?,
            args.d.as_slice::<T>()?,
            args.du.as_slice::<T>()?,
            args.b.as_slice::<T>()?,
            x.as_mut_slice::<T>()?,
        )
    };
    let x = SharedMut(x.as_mut_ptr());
    let workspace_len = tridiagonal::workspace_len(rows, shape.cols);
    let flops = rows.saturating_mul(shape.cols.saturating_mul(8).saturating_add(10));
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut workspace = vec![T::ZERO; workspace_len];
        for i in range {
            let diagonals = i * rows..(i + 1) * rows;
            let matrix = i * matrix_len..(i + 1) * matrix_len;
            // SAFETY: system `i`'s solution is written by this task alone.
            let x = unsafe { x.slice(matrix.start, matrix_len) };
            tridiagonal::solve_perturbed(
                &dl[diagonals.clone()],
                &d[diagonals.clone()],
                &du[diagonals],
                &b[matrix],
                x,
                &mut workspace,
            );
        }
        Ok(())
    })
}
