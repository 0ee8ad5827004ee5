//! `eigh`: symmetric / Hermitian eigendecomposition by divide and conquer, jaxlib's
//! `lapack_?syevd_ffi` / `lapack_?heevd_ffi` contract: column-major `[..., n, n]` in, the
//! eigenvectors (aliasing the input), the real eigenvalues `[..., n]` in ascending order and S32
//! `info` `[...]` out. Attributes `uplo` (u8 'L' or 'U': the triangle read) and `mode` (u8 'V'
//! eigenvectors too, 'N' eigenvalues only, the matrix then being destroyed). One target for
//! real (`?syevd`) and complex (`?heevd`) inputs.

use crate::ffi::{Buffer, DataType, Error, MatrixBatch, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::{char_attr, for_each_chunk, lapack_dim, routine, SharedMut};
use crate::ops::{dispatch_lapack, Scalar};
use ferrax_cpu_fallback::{ComplexLapack, Heevd, Lapack, Real, RealLapack, Syevd};
use ferrax_kernels::scalar::Scalar as KernelScalar;
use ferrax_kernels::small::eigh as small_eigh;
use num_complex::Complex;
use std::ffi::{c_char, CStr};

pub const TARGET: &CStr = c"ferrax_syevd";

ffi_handler! {
    /// Eigendecomposition of symmetric / Hermitian matrices on the host through LAPACK, batch
    /// split across XLA's thread pool.
    pub fn ferrax_cpu_syevd = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret w: Buffer;
    ret info: Buffer;
    attr uplo: u8;
    attr mode: u8;
    traits = 0;
    body = eigh_cpu;
}

fn eigh_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    w: Buffer<'_>,
    info: Buffer<'_>,
    uplo: u8,
    mode: u8,
) -> Result<()> {
    let uplo = char_attr("uplo", uplo, b"LU")?;
    let jobz = char_attr("mode", mode, b"VN")?;
    dispatch_lapack!(x, eigh_typed(pool, x, x_out, w, info, uplo, jobz))
}

/// LAPACK's three workspaces with their lengths; `rwork` is used by `?heevd` only.
struct Workspace<T: Lapack> {
    work: Vec<T>,
    lwork: i32,
    rwork: Vec<Real<T>>,
    lrwork: i32,
    iwork: Vec<i32>,
    liwork: i32,
}

impl<T: Evd> Workspace<T> {
    /// Room for LAPACK's answer to a workspace query (lengths -1): the optimal sizes, written
    /// to the first element of each workspace.
    fn query() -> Self {
        Self::new(-1, -1, -1)
    }

    fn new(lwork: i32, lrwork: i32, liwork: i32) -> Self {
        let len = |l: i32| usize::try_from(l).unwrap_or(1);
        Workspace {
            work: vec![T::default(); len(lwork)],
            lwork,
            rwork: vec![Real::<T>::default(); len(lrwork)],
            lrwork,
            iwork: vec![0; len(liwork)],
            liwork,
        }
    }
}

/// `?syevd` for real scalars and `?heevd` (which also takes a real workspace) for complex
/// ones, behind one signature.
trait Evd: Scalar {
    type Routine: Copy + Send + Sync;

    fn routine() -> Result<Self::Routine>;

    /// jaxlib's closed-form `(lwork, lrwork)` for order `n`, LAPACK's documented minimums.
    fn min_work(n: usize, vectors: bool) -> (usize, usize);

    /// # Safety
    /// As the LAPACK routine: `a` holds an `lda * n` matrix, `w` room for `n` eigenvalues.
    #[allow(clippy::too_many_arguments)] // LAPACK's own argument list
    unsafe fn evd(
        routine: Self::Routine,
        jobz: &c_char,
        uplo: &c_char,
        n: &i32,
        a: *mut Self,
        lda: &i32,
        w: *mut Self::Real,
        ws: &mut Workspace<Self>,
        info: *mut i32,
    );
}

macro_rules! real_evd {
    ($($t:ty),*) => {$(
        impl Evd for $t {
            type Routine = Syevd<$t>;

            fn routine() -> Result<Self::Routine> {
                routine(<$t as RealLapack>::syevd())
            }

            fn min_work(n: usize, vectors: bool) -> (usize, usize) {
                (if vectors { 1 + 6 * n + 2 * n * n } else { 2 * n + 1 }, 0)
            }

            unsafe fn evd(
                syevd: Self::Routine,
                jobz: &c_char,
                uplo: &c_char,
                n: &i32,
                a: *mut Self,
                lda: &i32,
                w: *mut Self::Real,
                ws: &mut Workspace<Self>,
                info: *mut i32,
            ) {
                syevd(
                    jobz, uplo, n, a, lda, w,
                    ws.work.as_mut_ptr(), &ws.lwork,
                    ws.iwork.as_mut_ptr(), &ws.liwork,
                    info,
                )
            }
        }
    )*};
}
real_evd!(f32, f64);

macro_rules! complex_evd {
    ($($t:ty),*) => {$(
        impl Evd for $t {
            type Routine = Heevd<$t>;

            fn routine() -> Result<Self::Routine> {
                routine(<$t as ComplexLapack>::heevd())
            }

            fn min_work(n: usize, vectors: bool) -> (usize, usize) {
                if vectors {
                    (2 * n + n * n, 1 + 5 * n + 2 * n * n)
                } else {
                    (n + 1, n.max(1))
                }
            }

            unsafe fn evd(
                heevd: Self::Routine,
                jobz: &c_char,
                uplo: &c_char,
                n: &i32,
                a: *mut Self,
                lda: &i32,
                w: *mut Self::Real,
                ws: &mut Workspace<Self>,
                info: *mut i32,
            ) {
                heevd(
                    jobz, uplo, n, a, lda, w,
                    ws.work.as_mut_ptr(), &ws.lwork,
                    ws.rwork.as_mut_ptr(), &ws.lrwork,
                    ws.iwork.as_mut_ptr(), &ws.liwork,
                    info,
                )
            }
        }
    )*};
}
complex_evd!(Complex<f32>, Complex<f64>);

/// A workspace length as LAPACK's integer: the larger of the queried size and the documented
/// minimum (a size returned as a float may have been rounded down in single precision).
fn workspace_len(queried: f64, minimum: usize, what: &str) -> Result<i32> {
    let len = (queried.ceil() as usize).max(minimum);
    i32::try_from(len).map_err(|_| {
        Error::invalid_argument(format!(
            "{what} of {len} elements exceeds LAPACK's 32-bit integer range"
        ))
    })
}

/// Up to this order the CPU handler solves in Rust ([`small_eigh::eigh`]: LAPACK's steps for
/// these sizes, where `?syevd` hands the tridiagonal problem to `?steqr`) instead of calling
/// LAPACK once per matrix, whose overhead and allocator lock dominate there (2.6-4.3× faster
/// at n = 4-24, 2 cores). Above, LAPACK's divide and conquer wins (at n = 32 QL iteration in
/// Rust is 1.1-1.5× slower than LAPACK).
pub const CPU_SMALL_MAX: usize = 25;

fn eigh_typed<T>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    w: Buffer<'_>,
    info: Buffer<'_>,
    uplo: c_char,
    jobz: c_char,
) -> Result<()>
where
    T: Evd + KernelScalar<Real = Real<T>>,
{
    let shape = MatrixBatch::square(&x)?;
    let batch_dims = shape.batch_dims(&x);
    w.expect_dtype(Real::<T>::DTYPE)?;
    w.expect_dims(&[batch_dims, &[shape.rows as i64]].concat())?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(batch_dims)?;
    let n = lapack_dim(&x, shape.rows)?;
    x.copy_into(&x_out)?;
    // SAFETY: `x` is no longer read; the results are distinct buffers.
    let (x_out, w, info) = unsafe {
        (
            x_out.as_mut_slice::<T>()?,
            w.as_mut_slice::<Real<T>>()?,
            info.as_mut_slice::<i32>()?,
        )
    };
    if shape.batch == 0 || n == 0 {
        // What LAPACK answers for n = 0, without calling it with a zero leading dimension.
        info.fill(0);
        return Ok(());
    }
    let (x_out, w, info) = (
        SharedMut(x_out.as_mut_ptr()),
        SharedMut(w.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    let matrix_len = shape.matrix_len();
    let flops = shape.rows.saturating_pow(3);
    let order = shape.rows;
    if order <= CPU_SMALL_MAX {
        let (lower, vectors) = (uplo == b'L' as c_char, jobz == b'V' as c_char);
        return for_each_chunk(&pool, shape.batch, flops, &|range| {
            let mut off_diagonal = vec![Real::<T>::default(); order];
            let mut scratch = vec![T::default(); small_eigh::scratch_len(order)];
            for b in range {
                // SAFETY: matrix `b`, its eigenvalues and its info, written by this task alone.
                let (a, w, info) = unsafe {
                    (
                        x_out.slice(b * matrix_len, matrix_len),
                        w.slice(b * order, order),
                        info.slice(b, 1),
                    )
                };
                info[0] =
                    small_eigh::eigh(a, order, lower, vectors, w, &mut off_diagonal, &mut scratch);
            }
            Ok(())
        });
    }
    let lda = n; // n > 0 here, so lda >= max(1, n)
    let evd = T::routine()?;

    // One workspace query for the whole call: every matrix has the same order.
    let mut query = Workspace::<T>::query();
    let mut query_info = 0;
    // SAFETY: a query only writes the first element of each workspace and `query_info`.
    unsafe {
        T::evd(
            evd,
            &jobz,
            &uplo,
            &n,
            x_out.at(0),
            &lda,
            w.at(0),
            &mut query,
            &mut query_info,
        )
    };
    if query_info != 0 {
        return Err(Error::internal(format!(
            "LAPACK workspace query failed with info {query_info}"
        )));
    }
    let (min_work, min_rwork) = T::min_work(shape.rows, jobz == b'V' as c_char);
    let lwork = workspace_len(Scalar::re(query.work[0]), min_work, "work")?;
    let lrwork = workspace_len(query.rwork[0].into(), min_rwork, "rwork")?;
    let liwork = query.iwork[0].max(1);

    let syevd_range = |range: std::ops::Range<usize>| {
        let mut ws = Workspace::<T>::new(lwork, lrwork, liwork);
        for b in range {
            // SAFETY: matrix `b`, its eigenvalues and its info are written by this task alone;
            // the workspace has the sizes LAPACK asked for.
            unsafe {
                T::evd(
                    evd,
                    &jobz,
                    &uplo,
                    &n,
                    x_out.at(b * matrix_len),
                    &lda,
                    w.at(b * shape.rows),
                    &mut ws,
                    info.at(b),
                )
            };
        }
        Ok(())
    };
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        // OpenBLAS's divide and conquer (its threaded `xLAED3`) starts its own threads even for
        // small matrices, which next to the pool's threads oversubscribe the cores (n = 32,
        // 512 matrices, 2 cores: 72 -> 28 ms; 43 ms on one core). One matrix keeps them.
        if shape.batch > 1 {
            ferrax_cpu_fallback::single_threaded(|| syevd_range(range))
        } else {
            syevd_range(range)
        }
    })
}
