//! QR by Householder reflectors: LAPACK's `?geqrf`, `?orgqr`/`?ungqr`, `?ormqr`/`?unmqr` and
//! `?geqp3` on batches in any layout, and jax's whole `qr` (R, then Q from the reflectors, per
//! matrix in cache).

use super::flags::{Flag, Side, Trans};
use super::matrix::{Batch, InOut};
use super::parallel::{
    for_each_chunk, for_each_parallel, look_ahead, one_matrix_over_pool, parallel_chunks, Pool,
    SharedMatrix, SharedMut, PANEL,
};
use super::{lapack_int, query_lwork, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Conj, MatMut, MatRef, Par};
use ferrax_cpu_fallback::{
    single_threaded, ComplexLapack, Geqp3Complex, Geqp3Real, Geqrf, Real, RealLapack,
};
use ferrax_kernels::small::qr as small_qr;
use num_complex::Complex;
use std::ffi::c_char;
use std::ops::Range;

/// Up to this many rows and columns geqrf and orgqr run in Rust ([`small_qr::geqr2`],
/// [`small_qr::org2r`]: LAPACK's unblocked algorithms and formats, as ferrax's GPU kernels
/// compute them) instead of one OpenBLAS call per matrix, whose overhead and lock contention
/// between threads dominate there.
pub const SMALL_MAX: usize = 16;

/// Up to this order of Q, `?ormqr` gets the minimum workspace and so applies the reflectors
/// one at a time (`?orm2r`): the blocked path's many small BLAS-3 calls each take OpenBLAS's
/// buffer lock, and with two threads contending for it they cost more than they save (n = 64,
/// 2 threads: f32 0.65× → 1.04× of stock jaxlib, f64 0.68× → 1.34×, c128 1.30× → 1.68×; at
/// 128 the blocked path is ahead again).
const ORMQR_UNBLOCKED_MAX: usize = 64;

/// The routines here return `info < 0` only for an invalid argument, which the callers' checks
/// rule out: such a failure is a bug here, not a property of the input.
fn check_info(routine: &str, info: i32) -> Result<()> {
    if info == 0 {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "LAPACK {routine} failed with info {info}"
        )))
    }
}

/// Runs `call(b, a, ld, work, info)`, one LAPACK routine on matrix `b` of `a` (where LAPACK
/// can take it in the result, else staged) with a workspace of `lwork` elements per task, on
/// every matrix across `pool`; a non-zero `info` is an error naming `routine`.
fn lapack_each<T: LapackScalar>(
    pool: &dyn Pool,
    a: InOut<T>,
    flops: usize,
    lwork: i32,
    routine: &str,
    call: &(dyn Fn(usize, *mut T, &i32, *mut T, &mut i32) + Sync),
) -> Result<()> {
    for_each_chunk(pool, a.input.count(), flops, &|range| {
        let mut work = memory::vec_of(lwork as usize, T::default())?;
        let (mut staged, mut info) = (Vec::new(), 0);
        for b in range {
            // SAFETY: matrix `b` belongs to this task alone.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    call(
                        b,
                        a.as_mut_ptr(),
                        &(ld as i32),
                        work.as_mut_ptr(),
                        &mut info,
                    )
                })?
            };
            check_info(routine, info)?;
        }
        Ok(())
    })
}

fn expect_len(what: &str, len: usize, expected: usize) -> Result<()> {
    if len == expected {
        return Ok(());
    }
    Err(Error::internal(format!(
        "{what}: {len} elements, expected {expected}"
    )))
}

/// Householder QR of every `m × n` matrix of `a` into `a.output` (R on and above the
/// diagonal, the reflectors below it) and its `min(m, n)` taus into `tau`.
pub fn geqrf<T: LapackScalar>(pool: &dyn Pool, a: InOut<T>, tau: &mut [T]) -> Result<()> {
    let (count, rows, cols) = (a.input.count(), a.input.rows(), a.input.cols());
    let k = rows.min(cols);
    expect_len("geqrf tau", tau.len(), count * k)?;
    // An empty matrix has nothing to factor (LAPACK would return at once) and no taus.
    if count == 0 || k == 0 {
        // SAFETY: every matrix of the views, on this thread alone.
        unsafe { a.copy_all() };
        return Ok(());
    }
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    let tau = SharedMut(tau.as_mut_ptr());
    let flops = (rows * cols).saturating_mul(2 * k);
    if rows.max(cols) <= SMALL_MAX {
        return for_each_parallel(pool, count, flops, &|b| {
            let mut staged = Vec::new();
            // SAFETY: matrix `b` and its taus, which this task alone touches; geqr2 takes
            // packed matrices, so the matrix is staged unless it is packed.
            unsafe {
                let tau = tau.slice(b * k, k);
                a.packed_column_major(b, &mut staged, |a| small_qr::geqr2(a, rows, cols, tau))?;
            }
            Ok(())
        });
    }
    let geqrf = routine(T::geqrf())?;
    // Every matrix has the same shape, so one query sizes the workspace of all.
    let mut dummy = [T::default(); 1];
    let d = dummy.as_mut_ptr();
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        geqrf(&m, &n, d, &m.max(1), d, work, lwork, info)
    })?;
    // SAFETY: matrix `b` and its taus are written by this task alone; LAPACK touches the m×n
    // matrix (leading dimension `ld`), `k` taus and `lwork` elements of `work`.
    lapack_each(
        pool,
        a,
        flops,
        lwork,
        "geqrf",
        &|b, a, ld, work, info| unsafe { geqrf(&m, &n, a, ld, tau.at(b * k), work, &lwork, info) },
    )
}

/// The first `n` columns of Q (`m × m`, `m ≥ n`) from the `k ≤ n` reflectors of each matrix
/// of `a` and their taus `tau` (`k` per matrix), into `a.output`.
pub fn orgqr<T: LapackScalar>(pool: &dyn Pool, a: InOut<T>, k: usize, tau: &[T]) -> Result<()> {
    let (count, rows, cols) = (a.input.count(), a.input.rows(), a.input.cols());
    expect_len("orgqr tau", tau.len(), count * k)?;
    if rows < cols || k > cols {
        return Err(Error::internal(format!(
            "orgqr: {rows}×{cols} matrices with {k} reflectors"
        )));
    }
    // No columns to form (m >= n, so this covers m = 0). With k = 0 LAPACK still has work to
    // do: Q is then the first n columns of the identity.
    if count == 0 || cols == 0 {
        // SAFETY: every matrix of the views, on this thread alone.
        unsafe { a.copy_all() };
        return Ok(());
    }
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    let reflectors = lapack_int("reflectors", k)?;
    let flops = (rows * cols).saturating_mul(2 * k.max(1));
    if rows <= SMALL_MAX {
        return for_each_parallel(pool, count, flops, &|b| {
            let mut staged = Vec::new();
            // SAFETY: matrix `b`, which this task alone touches.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    small_qr::org2r(a, rows, cols, ld, k, &tau[b * k..(b + 1) * k])
                })?
            };
            Ok(())
        });
    }
    let orgqr = routine(T::orgqr())?;
    let mut dummy = [T::default(); 1];
    let d = dummy.as_mut_ptr();
    // Every matrix has the same shape, so one query sizes the workspace of all.
    // SAFETY: a query only writes `work[0]` and `info`.
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        orgqr(&m, &n, &reflectors, d, &m, tau.as_ptr(), work, lwork, info)
    })?;
    // SAFETY: matrix `b` is written by this task alone; LAPACK touches the m×n matrix
    // (leading dimension `ld`), reads `k` taus and uses `lwork` elements of `work`.
    lapack_each(
        pool,
        a,
        flops,
        lwork,
        "orgqr",
        &|b, a, ld, work, info| unsafe {
            orgqr(
                &m,
                &n,
                &reflectors,
                a,
                ld,
                tau[b * k..].as_ptr(),
                work,
                &lwork,
                info,
            )
        },
    )
}

/// `Q·C`, `Qᴴ·C` (`side` left), `C·Q` or `C·Qᴴ` for every matrix of `c`, into `c.output`,
/// Q (of C's row count from the left, its column count from the right) made of the first `k`
/// reflectors (columns) of the matrix of `a` and their taus in `tau`. `trans` is
/// [`Trans::Transpose`] for Qᴴ in every dtype, as jax's `transpose`.
pub fn ormqr<T: LapackScalar>(
    pool: &dyn Pool,
    side: Side,
    trans: Trans,
    a: Batch<T>,
    k: usize,
    tau: &[T],
    c: InOut<T>,
) -> Result<()> {
    let (count, rows, cols) = (c.input.count(), c.input.rows(), c.input.cols());
    let q_order = a.rows();
    let left = side == Side::Left;
    expect_len("ormqr tau", tau.len(), count * k)?;
    if a.count() != count || (if left { rows } else { cols }) != q_order || k > a.cols() {
        return Err(Error::internal(format!(
            "ormqr: {count} matrices of {rows}×{cols} against {} reflector matrices of {}×{} \
             and {k} reflectors",
            a.count(),
            q_order,
            a.cols()
        )));
    }
    // LAPACK's quick return: an empty c, or no reflectors (Q = I), leaves c as it is.
    if count == 0 || rows * cols == 0 || k == 0 {
        // SAFETY: every matrix of the views, on this thread alone.
        unsafe { c.copy_all() };
        return Ok(());
    }
    let ormqr = routine(T::ormqr())?;
    // Real ?ormqr takes 'T', complex ?unmqr 'C': Q^T or Q^H, jax's `transpose` either way.
    let complex = T::DTYPE.is_complex();
    let trans = match (trans, complex) {
        (Trans::No, _) => b'N',
        (_, false) => b'T',
        (_, true) => b'C',
    } as c_char;
    let side = side.letter();
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    let reflector_count = lapack_int("reflectors", k)?;
    let lda = lapack_int("reflector length", q_order.max(1))?;
    let lwork = if q_order <= ORMQR_UNBLOCKED_MAX {
        // LAPACK's minimum: too small for a block of reflectors, so ?orm2r applies them one
        // at a time.
        (if left { n } else { m }).max(1)
    } else {
        let mut dummy = [T::default(); 1];
        let d = dummy.as_mut_ptr();
        // Every matrix has the same shape, so one query sizes the workspace of all.
        // SAFETY: a query only writes `work[0]` and `info`.
        query_lwork::<T>(|work, lwork, info| unsafe {
            ormqr(
                &side,
                &trans,
                &m,
                &n,
                &reflector_count,
                d,
                &lda,
                tau.as_ptr(),
                d,
                &m.max(1),
                work,
                lwork,
                info,
            )
        })?
    };
    // Each reflector costs about 4 flops per element of c.
    let flops = (rows * cols).saturating_mul(4 * k);
    let used = a.leading_columns(k);
    for_each_chunk(pool, count, flops, &|range| {
        let mut work = memory::vec_of(lwork as usize, T::default())?;
        // ?ormqr (through ?orm2r) sets each reflector's diagonal element to 1 while it applies
        // it, restoring it after. Other ops of the executable may read `a` meanwhile (stock
        // jaxlib's target races with them there), so LAPACK gets a copy of the k columns.
        let mut reflectors = memory::vec_of(q_order * k, T::default())?;
        let (mut staged, mut info) = (Vec::new(), 0);
        for b in range {
            // SAFETY: matrix `b` of `c` is written by this task alone; LAPACK uses the `k`
            // columns of `reflectors`, `k` taus, the m×n matrix of c (leading dimension `ld`)
            // and `lwork` elements of `work`.
            unsafe {
                used.gather(b, &mut reflectors);
                c.column_major(b, &mut staged, |c, ld| {
                    let ld = ld as i32;
                    ormqr(
                        &side,
                        &trans,
                        &m,
                        &n,
                        &reflector_count,
                        reflectors.as_mut_ptr(),
                        &lda,
                        tau[b * k..].as_ptr(),
                        c.as_mut_ptr(),
                        &ld,
                        work.as_mut_ptr(),
                        &lwork,
                        &mut info,
                    )
                })?
            };
            check_info("ormqr", info)?;
        }
        Ok(())
    })
}

/// QR with column pivoting of every `m × n` matrix of `a` into `a.output` (as [`geqrf`]'s),
/// `jpvt` (`n` per matrix) holding on entry the columns to move up front (non-zero) and on
/// exit the 1-based column pivots, and `min(m, n)` taus per matrix in `tau`.
pub fn geqp3<T: LapackScalar + Geqp3Scalar>(
    pool: &dyn Pool,
    a: InOut<T>,
    jpvt: &mut [i32],
    tau: &mut [T],
) -> Result<()> {
    let (count, rows, cols) = (a.input.count(), a.input.rows(), a.input.cols());
    let k = rows.min(cols);
    expect_len("geqp3 jpvt", jpvt.len(), count * cols)?;
    expect_len("geqp3 tau", tau.len(), count * k)?;
    // No columns, nothing to pivot. With m = 0 LAPACK still numbers the columns (fixed ones
    // first), so it is called: it touches no matrix element then.
    if count == 0 || cols == 0 {
        // SAFETY: every matrix of the views, on this thread alone.
        unsafe { a.copy_all() };
        return Ok(());
    }
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    let geqp3 = T::routine()?;
    let (jpvt, tau) = (SharedMut(jpvt.as_mut_ptr()), SharedMut(tau.as_mut_ptr()));
    let mut dummy = [T::default(); 1];
    let d = dummy.as_mut_ptr();
    // Every matrix has the same shape, so one query sizes the workspace of all. For m = 0 the
    // query answers 1, yet with fixed columns ?geqp3 then calls ?ormqr, which wants n.
    // SAFETY: a query only writes `work[0]` and `info` (`rwork` is not touched).
    let lwork = query_lwork::<T>(|work, lwork, info| unsafe {
        T::geqp3(
            geqp3,
            &m,
            &n,
            d,
            &m.max(1),
            jpvt.at(0),
            d,
            work,
            lwork,
            std::ptr::null_mut(),
            info,
        )
    })?
    .max(n);
    let rwork_len = T::RWORK_PER_COLUMN * cols;
    let flops = (rows * cols).saturating_mul(2 * k);
    for_each_chunk(pool, count, flops, &|range| {
        let mut work = memory::vec_of(lwork as usize, T::default())?;
        let mut rwork = memory::vec_of(rwork_len, <Real<T>>::default())?;
        let (mut staged, mut info) = (Vec::new(), 0);
        for b in range {
            // SAFETY: matrix `b`, its pivots and its taus are written by this task alone;
            // LAPACK touches the m×n matrix (leading dimension `ld`), `n` pivots, `k` taus,
            // `lwork` elements of `work` and `2n` of `rwork` (complex only).
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    T::geqp3(
                        geqp3,
                        &m,
                        &n,
                        a.as_mut_ptr(),
                        &(ld as i32),
                        jpvt.at(b * cols),
                        tau.at(b * k),
                        work.as_mut_ptr(),
                        &lwork,
                        rwork.as_mut_ptr(),
                        &mut info,
                    )
                })?
            };
            check_info("geqp3", info)?;
        }
        Ok(())
    })
}

/// `?geqp3` for one scalar type: the complex routines take a real workspace of 2n, the real
/// ones none.
pub trait Geqp3Scalar: LapackScalar {
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
        impl Geqp3Scalar for $t {
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
        impl Geqp3Scalar for Complex<$t> {
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

/// Columns of Q for jax's `qr` of `m × n` matrices: `m` with `full_matrices`, else
/// `min(m, n)`.
pub fn q_columns(m: usize, n: usize, full_matrices: bool) -> usize {
    if full_matrices {
        m
    } else {
        m.min(n)
    }
}

/// jax's whole `qr` without pivoting of every matrix of `a` (`m × n`): Q (`m × mq`) into `q`
/// and R (`mq × n`, zeros below the diagonal) into `r`, `mq` being [`q_columns`]; geqrf's then
/// orgqr's results bit for bit, one matrix at a time in cache. By [`one_matrix_over_pool`],
/// each over the whole pool ([`pooled_qr`]; LAPACK's results to rounding), where inside jax's
/// process OpenBLAS's own threads contend with XLA's (one 512×512 f64 matrix took longer on
/// two cores than on one).
pub fn qr<T: LapackScalar>(
    pool: &dyn Pool,
    a: Batch<T>,
    q: Batch<T>,
    r: Batch<T>,
    full_matrices: bool,
) -> Result<()> {
    let (count, rows, cols) = (a.count(), a.rows(), a.cols());
    let q_cols = q_columns(rows, cols, full_matrices);
    let k = rows.min(cols);
    if [q.count(), q.rows(), q.cols(), r.count(), r.rows(), r.cols()]
        != [count, rows, q_cols, count, q_cols, cols]
    {
        return Err(Error::internal(format!(
            "qr: {count} matrices of {rows}×{cols} with Q {}×{} and R {}×{}",
            q.rows(),
            q.cols(),
            r.rows(),
            r.cols()
        )));
    }
    if count == 0 {
        return Ok(());
    }
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    let order = rows.max(cols);
    if one_matrix_over_pool(pool, count, order, k) {
        let geqrf = routine(T::geqrf())?;
        for b in 0..count {
            // SAFETY: the matrices are factored one after the other, each over the pool.
            unsafe { pooled_qr(pool, geqrf, [&a, &q, &r], b)? };
        }
        return Ok(());
    }
    let (mq, reflectors) = (
        lapack_int("columns of Q", q_cols)?,
        lapack_int("reflectors", k)?,
    );
    let small_geqrf = rows.max(cols) <= SMALL_MAX;
    let small_orgqr = rows <= SMALL_MAX;
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
    let (a_len, q_len, r_len) = (rows * cols, rows * q_cols, q_cols * cols);
    let flops = (a_len + q_len).saturating_mul(2 * k.max(1));
    for_each_chunk(pool, count, flops, &|range| {
        // Column-major workspace for A, then Q: Q's columns past A's need no zeros (jax pads R
        // with them), `?orgqr` and `org2r` set every column past the k reflectors themselves.
        let w_len = memory::product("QR workspace", &[rows, rows.max(cols)])?;
        let mut w_raw = memory::vec_of(w_len.saturating_add(64), T::default())?;
        let skip = w_raw.as_ptr().align_offset(64);
        let w = &mut w_raw[skip..skip + w_len];
        let mut upper = memory::vec_of(r_len, T::default())?;
        let mut tau = memory::vec_of(k, T::default())?;
        let mut work = memory::vec_of(lapack.map_or(0, |l| l.2 as usize), T::default())?;
        let mut info = 0;
        for b in range {
            if k == 0 {
                // jax's result for an empty matrix: the identity's first columns, R zero.
                let identity: Vec<T> = (0..q_len)
                    .map(|e| {
                        if e % rows == e / rows {
                            T::ONE
                        } else {
                            T::ZERO
                        }
                    })
                    .collect();
                // SAFETY: matrix `b` of the results, which only this task writes.
                unsafe {
                    q.scatter(b, &identity);
                    r.scatter(b, &upper);
                }
                continue;
            }
            // SAFETY: matrix `b` of the argument, which no task writes.
            unsafe { a.gather(b, &mut w[..a_len]) };
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
            for j in 0..cols {
                for i in 0..q_cols {
                    upper[j * q_cols + i] = if i <= j { w[j * rows + i] } else { T::ZERO };
                }
            }
            // SAFETY: matrix `b` of `r`, which only this task writes.
            unsafe { r.scatter(b, &upper) };
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
            // SAFETY: matrix `b` of `q`, which only this task writes.
            unsafe { q.scatter(b, &w[..q_len]) };
        }
        Ok(())
    })
}

/// Matrix `b` of [`qr`] over the pool, by LAPACK's blocked Householder QR: a block of
/// [`PANEL`] columns by `?geqrf` ([`Reflectors::factor`]), then `Qᴴ` applied to the columns
/// right of it in column blocks, one task each; one task updates the next block's columns
/// first and factors that block meanwhile (look-ahead). Then `R` and `Q` written to the
/// results in column blocks, each of Q's applying the blocks of reflectors, last to first, to
/// its columns of the identity (from a block's first row and column on, as `?orgqr`).
///
/// # Safety
/// Matrix `b` of `q` and `r` belongs to this call alone; nothing writes `a`'s.
unsafe fn pooled_qr<T: LapackScalar>(
    pool: &dyn Pool,
    geqrf: Geqrf<T>,
    [a, q, r]: [&Batch<T>; 3],
    b: usize,
) -> Result<()> {
    let (rows, cols, q_cols) = (a.rows(), a.cols(), q.cols());
    let k = rows.min(cols);
    let mut w = memory::vec_of(memory::product("QR", &[rows, cols])?, T::ZERO)?;
    let (mut v, mut t) = (
        memory::vec_of(rows * k, T::ZERO)?,
        memory::vec_of(PANEL * k, T::ZERO)?,
    );
    let mut tau = memory::vec_of(k, T::ZERO)?;
    let reflectors = Reflectors {
        geqrf,
        k,
        w: SharedMatrix::column_major(w.as_mut_ptr(), rows, cols),
        v: SharedMatrix::column_major(v.as_mut_ptr(), rows, k),
        t: SharedMatrix::column_major(t.as_mut_ptr(), PANEL, k),
        tau: SharedMut(tau.as_mut_ptr()),
    };
    let source = SharedMatrix::new(a.matrix(b), [rows, cols], a.strides());
    parallel_chunks(pool, cols, PANEL, &|columns| {
        let (j, width) = (columns.start, columns.len());
        // SAFETY: this task's columns of the argument, which nothing writes, and of `w`.
        unsafe {
            let from = source.read(0, j, rows, width);
            reflectors.w.write(0, j, rows, width).copy_from(from);
        }
        Ok(())
    })?;
    let width = PANEL.min(k);
    // SAFETY (each factor and update): the blocks of this step, as `Reflectors` says.
    unsafe { reflectors.factor(0, width)? };
    let mut start = 0;
    while start < k {
        let width = PANEL.min(k - start);
        let next = start + width;
        let next_width = PANEL.min(k - next.min(k));
        // Next: its columns, then the block. The rest: the columns right of it.
        let next_block = || unsafe {
            reflectors.update(start, next..next + next_width)?;
            if next_width > 0 {
                reflectors.factor(next, next_width)?;
            }
            Ok(())
        };
        let first = next + next_width;
        look_ahead(pool, &next_block, cols - first, &|range| unsafe {
            reflectors.update(start, first + range.start..first + range.end)
        })?;
        start = next;
    }
    let r = SharedMatrix::new(r.matrix(b), [q_cols, cols], r.strides());
    parallel_chunks(pool, cols, PANEL, &|columns| {
        for j in columns {
            // SAFETY: column j of matrix `b` of `r`, this task's alone, and of `w`.
            unsafe {
                for i in 0..q_cols {
                    *r.at(i, j) = if i <= j {
                        *reflectors.w.at(i, j)
                    } else {
                        T::ZERO
                    };
                }
            }
        }
        Ok(())
    })?;
    let q = SharedMatrix::new(q.matrix(b), [rows, q_cols], q.strides());
    parallel_chunks(pool, q_cols, PANEL, &|chunk| {
        // The last columns first: they take the most reflectors.
        let columns = q_cols - chunk.end..q_cols - chunk.start;
        // SAFETY (all): rows `i..` of this task's columns from `j` of matrix `b` of `q`.
        let block = |i: usize, j: usize| unsafe { q.write(i, j, rows - i, columns.end - j) };
        let mut identity = block(0, columns.start);
        identity.fill(T::ZERO);
        for c in columns.clone() {
            identity[(c, c - columns.start)] = T::ONE;
        }
        for start in (0..k).step_by(PANEL).rev() {
            let j = columns.start.max(start);
            if j < columns.end {
                // SAFETY: the reflectors are all written.
                let (basis, factor) = unsafe { reflectors.block(start) };
                reflect(basis, factor, block(start, j), false)?;
            }
        }
        Ok(())
    })
}

/// [`pooled_qr`]'s working matrices, column-major: the matrix being factored (`w`), its
/// reflectors written out (`v`: unit diagonal, zeros above), each block's triangular factor
/// (`t`: [`PANEL`] rows, the block's columns) and the taus. A block's `factor` writes its
/// columns of all four, which nothing else touches meanwhile; an `update` with a block reads
/// that block's and writes its columns of `w`.
struct Reflectors<T> {
    geqrf: Geqrf<T>,
    k: usize,
    w: SharedMatrix<T>,
    v: SharedMatrix<T>,
    t: SharedMatrix<T>,
    tau: SharedMut<T>,
}

impl<T: LapackScalar> Reflectors<T> {
    /// The reflectors of the block from column `start` (rows `start..`) and its factor.
    unsafe fn block(&self, start: usize) -> (MatRef<'_, T>, MatRef<'_, T>) {
        let (width, height) = (PANEL.min(self.k - start), self.w.rows() - start);
        (
            self.v.read(start, start, height, width),
            self.t.read(0, start, width, width),
        )
    }

    /// Factors the block of `width` columns from `start` (rows `start..`) by `?geqrf` on the
    /// calling thread (OpenBLAS kept to it), writes its reflectors out and their factor.
    unsafe fn factor(&self, start: usize, width: usize) -> Result<()> {
        let rows = self.w.rows();
        let height = rows - start;
        let (m, n) = (lapack_int("rows", height)?, lapack_int("columns", width)?);
        let ld = lapack_int("rows", rows)?;
        let (geqrf, panel) = (self.geqrf, self.w.at(start, start));
        let tau = self.tau.at(start);
        let lwork = query_lwork::<T>(|work, lwork, info| {
            geqrf(&m, &n, panel, &ld, tau, work, lwork, info)
        })?;
        let mut work = memory::vec_of(lwork as usize, T::ZERO)?;
        let mut info = 0;
        single_threaded(|| {
            geqrf(
                &m,
                &n,
                panel,
                &ld,
                tau,
                work.as_mut_ptr(),
                &lwork,
                &mut info,
            )
        });
        check_info("geqrf", info)?;
        for c in start..start + width {
            // The reflector: zeros above its unit diagonal (as allocated).
            *self.v.at(c, c) = T::ONE;
            for i in c + 1..rows {
                *self.v.at(i, c) = *self.w.at(i, c);
            }
        }
        let (basis, _) = self.block(start);
        let factor = self.t.write(0, start, width, width);
        block_factor(basis, std::slice::from_raw_parts(tau, width), factor)
    }

    /// Applies the conjugate transpose of the block from `start` to rows `start..` of
    /// `columns` of `w`.
    unsafe fn update(&self, start: usize, columns: Range<usize>) -> Result<()> {
        if columns.is_empty() {
            return Ok(());
        }
        let (basis, factor) = self.block(start);
        let block = self
            .w
            .write(start, columns.start, self.w.rows() - start, columns.len());
        reflect(basis, factor, block, true)
    }
}

/// LAPACK's `?larft` (forward, by columns): the upper triangular `T` with
/// `H₁·H₂⋯H_w = I − V·T·Vᴴ`, `Hᵢ = I − τᵢ·vᵢ·vᵢᴴ`, from the reflectors `V` (unit diagonal,
/// zeros above) and their taus: `T[..i, i] = −τᵢ·T[..i, ..i]·(V[:, ..i]ᴴ·vᵢ)`.
fn block_factor<T: LapackScalar>(v: MatRef<'_, T>, tau: &[T], mut t: MatMut<'_, T>) -> Result<()> {
    let width = tau.len();
    let mut gram = memory::vec_of(width * width, T::ZERO)?;
    let mut gram = MatMut::from_column_major_slice_mut(&mut gram, width, width);
    matmul(
        gram.as_mut(),
        Accum::Replace,
        v.adjoint(),
        v,
        T::ONE,
        Par::Seq,
    );
    t.fill(T::ZERO);
    for i in 0..width {
        for row in 0..i {
            let sum = (row..i).fold(T::ZERO, |sum, l| sum + t[(row, l)] * gram[(l, i)]);
            t[(row, i)] = -(tau[i] * sum);
        }
        t[(i, i)] = tau[i];
    }
    Ok(())
}

/// `C ← (I − V·T·Vᴴ)·C`, or its conjugate transpose applied (`adjoint`): `C − V·op(T)·(Vᴴ·C)`.
fn reflect<T: LapackScalar>(
    v: MatRef<'_, T>,
    t: MatRef<'_, T>,
    mut c: MatMut<'_, T>,
    adjoint: bool,
) -> Result<()> {
    let (width, columns) = (t.nrows(), c.ncols());
    let mut products = memory::vec_of(2 * width * columns, T::ZERO)?;
    let (vc, tvc) = products.split_at_mut(width * columns);
    let mut vc = MatMut::from_column_major_slice_mut(vc, width, columns);
    let mut tvc = MatMut::from_column_major_slice_mut(tvc, width, columns);
    matmul(
        vc.as_mut(),
        Accum::Replace,
        v.adjoint(),
        c.as_ref(),
        T::ONE,
        Par::Seq,
    );
    let (op_t, structure, conj) = if adjoint {
        (t.transpose(), BlockStructure::TriangularLower, Conj::Yes)
    } else {
        (t, BlockStructure::TriangularUpper, Conj::No)
    };
    triangular::matmul_with_conj(
        tvc.as_mut(),
        BlockStructure::Rectangular,
        Accum::Replace,
        op_t,
        structure,
        conj,
        vc.as_ref(),
        BlockStructure::Rectangular,
        Conj::No,
        T::ONE,
        Par::Seq,
    );
    matmul(c.as_mut(), Accum::Add, v, tvc.as_ref(), -T::ONE, Par::Seq);
    Ok(())
}
