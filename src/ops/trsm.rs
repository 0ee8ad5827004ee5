//! `trsm`: triangular solve with multiple right-hand sides (BLAS `?trsm`, alpha = 1), jaxlib's
//! `lapack_?trsm_ffi` contract: column-major triangular `x` `[..., k, k]` (`k = m` for side
//! 'L', `n` for side 'R') and right-hand sides `y` `[..., m, n]` in, the solution `y_out`
//! `[..., m, n]` (aliasing `y`) out. Attributes, u8 ASCII: `side` 'L'/'R', `uplo` 'L'/'U',
//! `trans_x` 'N'/'T'/'C', `diag` 'N'/'U'. No `info`: BLAS does not report singular `x`.

use crate::ffi::{Buffer, MatrixBatch, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::{char_attr, for_each_parallel, lapack_dim, routine, SharedMut};
use crate::ops::{dispatch_lapack, Scalar};
use ferrax_kernels::scalar::Scalar as KernelScalar;
use ferrax_kernels::small::{self, Transpose};
use std::ffi::{c_char, CStr};

pub const TARGET: &CStr = c"ferrax_trsm";

ffi_handler! {
    /// Triangular solve on the host through BLAS, batch split across XLA's thread pool.
    pub fn ferrax_cpu_trsm = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    arg y: Buffer;
    ret y_out: Buffer;
    attr side: u8;
    attr uplo: u8;
    attr trans_x: u8;
    attr diag: u8;
    traits = 0;
    body = trsm_cpu;
}

/// BLAS's character arguments, checked.
#[derive(Clone, Copy)]
struct Flags {
    side: c_char,
    uplo: c_char,
    trans: c_char,
    diag: c_char,
}

// One parameter per operand and attribute of the signature.
#[allow(clippy::too_many_arguments)]
fn trsm_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    y: Buffer<'_>,
    y_out: Buffer<'_>,
    side: u8,
    uplo: u8,
    trans_x: u8,
    diag: u8,
) -> Result<()> {
    let flags = Flags {
        side: char_attr("side", side, b"LR")?,
        uplo: char_attr("uplo", uplo, b"LU")?,
        trans: char_attr("trans_x", trans_x, b"NTC")?,
        diag: char_attr("diag", diag, b"NU")?,
    };
    dispatch_lapack!(x, trsm_typed(pool, x, y, y_out, flags))
}

/// Up to this many rows and columns of `y` the CPU handler solves in Rust ([`small::trsm`]): there
/// one BLAS call costs more than the solve, and concurrent calls contend inside OpenBLAS
/// (`benches/cpu_linalg.py`: 0.5x jaxlib's serial loop at n = 4 through OpenBLAS, 1.6-2x in Rust;
/// at n = 16 OpenBLAS is faster for complex matrices).
pub const CPU_SMALL_MAX: usize = 8;

/// Up to this order a single right-hand side (`jnp.linalg.solve` of a vector: two such solves
/// after `lu`) is solved in Rust too, where OpenBLAS packs the lone column for its trsm kernels
/// (`jnp.linalg.solve`, 2 cores, ~4 MB batches: 0.44-0.71× the time at n = 12, 0.59-0.85× at
/// 16, 0.87-0.99× at 24; about even at 28-32, slower beyond).
pub const SINGLE_RHS_MAX: usize = 24;

fn trsm_typed<T: Scalar + KernelScalar>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    y: Buffer<'_>,
    y_out: Buffer<'_>,
    flags: Flags,
) -> Result<()> {
    y.expect_dtype(T::DTYPE)?;
    let a_shape = MatrixBatch::of(&x)?;
    let b_shape = MatrixBatch::of(&y)?;
    let k = if flags.side == b'L' as c_char {
        b_shape.rows
    } else {
        b_shape.cols
    };
    let batch_dims = b_shape.batch_dims(&y);
    x.expect_dims(&[batch_dims, &[k as i64, k as i64]].concat())?;
    let (m, n) = (lapack_dim(&y, b_shape.rows)?, lapack_dim(&y, b_shape.cols)?);
    let k = lapack_dim(&x, k)?;
    // BLAS rejects leading dimensions below 1 even for empty matrices.
    let (lda, ldb) = (k.max(1), m.max(1));
    y.copy_into(&y_out)?;
    // Nothing to solve for an empty batch or empty right-hand sides (k = 0 implies m or n = 0).
    if b_shape.batch == 0 || b_shape.matrix_len() == 0 {
        return Ok(());
    }
    let trsm = routine(T::trsm())?;
    // SAFETY: `y` is no longer read; `x` is an argument distinct from the result.
    let (a, b) = unsafe { (x.as_slice::<T>()?, y_out.as_mut_slice::<T>()?) };
    let b = SharedMut(b.as_mut_ptr());
    let (a_len, b_len) = (a_shape.matrix_len(), b_shape.matrix_len());
    let flops = (a_shape.rows * b_len).max(1);
    let right_hand_sides = if flags.side == b'L' as c_char {
        b_shape.cols
    } else {
        b_shape.rows
    };
    let single = right_hand_sides == 1 && a_shape.rows <= SINGLE_RHS_MAX;
    if b_shape.rows.max(b_shape.cols) <= CPU_SMALL_MAX || single {
        let transpose = match flags.trans as u8 {
            b'N' => Transpose::No,
            b'T' => Transpose::Yes,
            _ => Transpose::Conjugate,
        };
        let left = flags.side == b'L' as c_char;
        let lower = flags.uplo == b'L' as c_char;
        let unit = flags.diag == b'U' as c_char;
        let (rows, cols, k_rows) = (b_shape.rows, b_shape.cols, a_shape.rows.max(1));
        return for_each_parallel(&pool, b_shape.batch, flops, &|i| {
            // SAFETY: matrix `i` of `y_out` is written by this task alone.
            let b = unsafe { b.slice(i * b_len, b_len) };
            let a = &a[i * a_len..(i + 1) * a_len];
            small::trsm(
                left,
                lower,
                transpose,
                unit,
                rows,
                cols,
                a,
                k_rows,
                b,
                rows.max(1),
            );
            Ok(())
        });
    }
    for_each_parallel(&pool, b_shape.batch, flops, &|i| {
        // SAFETY: matrix `i` of `y_out` is written by this task alone; BLAS reads `lda * k`
        // elements of `x` (shared, read-only) and reads and writes `ldb * n` of `y_out`.
        unsafe {
            trsm(
                &flags.side,
                &flags.uplo,
                &flags.trans,
                &flags.diag,
                &m,
                &n,
                &<T as Scalar>::ONE,
                a[i * a_len..].as_ptr(),
                &lda,
                b.at(i * b_len),
                &ldb,
            )
        };
        Ok(())
    })
}
