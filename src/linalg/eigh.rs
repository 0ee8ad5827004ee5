//! Symmetric / Hermitian eigendecomposition by divide and conquer (LAPACK's `?syevd` and
//! `?heevd`): the ascending real eigenvalues, `info` and (when asked) the eigenvectors of
//! every matrix of a batch, in whatever layout the batch is; in Rust up to [`SMALL_MAX`].

use super::flags::{Flag, Uplo, Vectors};
use super::matrix::InOut;
use super::parallel::{for_each_chunk, Pool, Serial, SharedMut};
use super::underflow::GradualUnderflow;
use super::{lapack_int, routine, steps_over_pool, tridiag_over_pool, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use faer::diag::DiagMut;
use faer::dyn_stack::{MemBuffer, MemStack, StackReq};
use faer::linalg::evd::tridiag::{tridiag_in_place, tridiag_in_place_scratch};
use faer::linalg::evd::{self_adjoint_evd, self_adjoint_evd_scratch, ComputeEigenvectors};
use faer::linalg::qr::no_pivoting::factor::recommended_block_size;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Conj, MatMut, MatRef, Par};
use ferrax_cpu_fallback::{ComplexLapack, Heevd, Lapack, Real, RealLapack, Stedc, Syevd};
use ferrax_kernels::small::eigh as small_eigh;
use num_complex::Complex;
use std::ffi::c_char;
use std::ops::Range;

/// Up to this order the matrices are solved in Rust ([`small_eigh::eigh`]: LAPACK's steps for
/// these sizes, where `?syevd` hands the tridiagonal problem to `?steqr`) instead of calling
/// LAPACK once per matrix, whose overhead and allocator lock dominate there (2.6-4.3× faster
/// at n = 4-24, 2 cores). Above, LAPACK's divide and conquer wins (at n = 32 QL iteration in
/// Rust is 1.1-1.5× slower than LAPACK).
pub const SMALL_MAX: usize = 25;

/// Whether `count` matrices of `order` past [`SMALL_MAX`] go to faer first ([`faer_eigh`]:
/// its own blocked tridiagonalization and SIMD kernels), to LAPACK where faer cannot take
/// one: complex ones at every order; real ones in batches of at least as many matrices as
/// threads, past 256, or with eigenvectors and `?stedc` at hand (`split`: faer's steps around
/// LAPACK's tridiagonal solver); one large real matrix is as fast by OpenBLAS's own threads.
/// With eigenvectors, one core, random matrices, faer against OpenBLAS 0.3.x
/// `?syevd`/`?heevd` (ms): c128 32 0.098/0.100, 64 0.41/0.51, 128 1.89/2.86, 256 10.3/15.8,
/// 512 64/141; c64 32 0.063/0.102, 128 2.0/2.9, 512 36/142; f32 64 0.20/0.30, 128 1.48/1.25,
/// 256 4.9/5.2, 512 18/29; f64 128 1.41/1.34, 256 6.2/5.9, 512 31/34. Split, f64, against
/// `dsyevd` (µs, Zen 5): 32 58/61, 64 172/192, 128 648/788, 256 2707/3264.
fn by_faer<T: Evd>(count: usize, order: usize, threads: usize, split: bool) -> bool {
    T::COMPLEX || (count >= threads && (order > 256 || split))
}

/// From this order complex matrices with eigenvectors take the split path ([`split_eigh`])
/// rather than faer's whole solver, whose own divide and conquer is the slower there (2
/// cores, p10 ms, whole → split: 64 c128 matrices of 64 16.9 → 15.5, 16 c64 of 128 14.0 →
/// 11.8, 4 c128 of 256 28.0 → 25.1; one c128 of 512, its back-transformation over the pool
/// too, 84 → 65, bench-cpu's median 73); below, at 32 and 48, c128 is even and c64 8-10 %
/// slower split.
const COMPLEX_SPLIT_MIN: usize = 64;

/// Decomposes every matrix of `a` (`n × n`, its `uplo` triangle read): `w` gets its `n`
/// ascending eigenvalues and `info` its LAPACK `info`; with `jobz` [`Vectors::Compute`] the
/// orthonormal eigenvectors (columns) replace it in `a.output`, else that matrix is left
/// undefined, as by LAPACK.
pub fn eigh<T: Evd>(
    pool: &dyn Pool,
    a: InOut<T>,
    uplo: Uplo,
    jobz: Vectors,
    w: &mut [Real<T>],
    info: &mut [i32],
) -> Result<()> {
    let (count, order) = (a.input.count(), a.input.rows());
    if a.input.cols() != order || w.len() != count * order || info.len() != count {
        return Err(Error::internal(format!(
            "eigh: {count} matrices of {order}×{} take {} eigenvalues and {count} infos, got \
             {} and {}",
            a.input.cols(),
            count * order,
            w.len(),
            info.len()
        )));
    }
    let n = lapack_int("n", order)?;
    if count == 0 || order == 0 {
        // What LAPACK answers for n = 0, without calling it with a zero leading dimension.
        info.fill(0);
        return Ok(());
    }
    let (w, info) = (SharedMut(w.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    // SAFETY: the eigenvalues and info of matrix `b`, which its task alone writes.
    let results = |b: usize| unsafe { (w.slice(b * order, order), info.slice(b, 1)) };
    let flops = order.saturating_pow(3);
    if order <= SMALL_MAX {
        let (lower, vectors) = (uplo.is_lower(), jobz.computed());
        return for_each_chunk(pool, count, flops, &|range| {
            let mut off_diagonal = vec![Real::<T>::default(); order];
            let mut scratch = vec![T::default(); small_eigh::scratch_len(order)];
            let mut staged = Vec::new();
            for b in range {
                let (w, info) = results(b);
                // SAFETY: matrix `b`, which this task alone touches.
                info[0] = unsafe {
                    a.packed_column_major(b, &mut staged, |a| {
                        small_eigh::eigh(
                            a,
                            order,
                            lower,
                            vectors,
                            w,
                            &mut off_diagonal,
                            &mut scratch,
                        )
                    })?
                };
            }
            Ok(())
        });
    }
    let evd = T::routine()?;
    let (uplo, jobz) = (uplo.letter(), jobz.letter());

    // One workspace query for the whole call: every matrix has the same order.
    let mut query = Workspace::<T>::query()?;
    let mut query_info = 0;
    // SAFETY: a query only writes the first element of each workspace and `query_info`.
    unsafe {
        T::evd(
            evd,
            &jobz,
            &uplo,
            &n,
            a.output.as_ptr(),
            &n,
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
    let (min_work, min_rwork) = T::min_work(order, jobz == b'V' as c_char);
    let lwork = workspace_len(query.work[0].real_f64(), min_work, "work")?;
    let lrwork = workspace_len(query.rwork[0].into(), min_rwork, "rwork")?;
    let liwork = query.iwork[0].max(1);

    let (lower, vectors) = (uplo == b'L' as c_char, jobz == b'V' as c_char);
    // LAPACK's tridiagonal solver between faer's steps, where the table has it.
    let stedc = T::stedc().filter(|_| vectors && (!T::COMPLEX || order >= COMPLEX_SPLIT_MIN));
    let faer_first = by_faer::<T>(count, order, pool.threads(), stedc.is_some());
    // Matrices `range` one after another, each one's back-transformation split over
    // `columns_pool`.
    let decompose_range = |range: Range<usize>, columns_pool: &dyn Pool| {
        // LAPACK's workspace once a matrix needs it.
        let mut ws = None;
        let mut faer = if faer_first {
            Some(FaerScratch::new(order, vectors, stedc)?)
        } else {
            None
        };
        let mut staged = Vec::new();
        for b in range {
            let (w, info) = results(b);
            // SAFETY: matrix `b`, which this task alone touches; the workspace has the sizes
            // LAPACK asked for.
            unsafe {
                a.column_major(b, &mut staged, |a, ld| {
                    if let Some(faer) = faer.as_mut() {
                        if faer_eigh(columns_pool, a, order, ld, lower, vectors, w, faer)? {
                            info[0] = 0;
                            return Ok(());
                        }
                    }
                    let ws = match ws.as_mut() {
                        Some(ws) => ws,
                        None => ws.insert(Workspace::<T>::new(lwork, lrwork, liwork)?),
                    };
                    let ld = ld as i32;
                    T::evd(
                        evd,
                        &jobz,
                        &uplo,
                        &n,
                        a.as_mut_ptr(),
                        &ld,
                        w.as_mut_ptr(),
                        ws,
                        &mut info[0],
                    );
                    Ok(())
                })??
            };
        }
        Ok(())
    };
    if count == 1 {
        // The split path's back-transformation over the pool, LAPACK on OpenBLAS's threads.
        return decompose_range(0..1, pool);
    }
    for_each_chunk(pool, count, flops, &|range| {
        // OpenBLAS's divide and conquer (its threaded `xLAED3`) starts its own threads even for
        // small matrices, which next to the pool's threads oversubscribe the cores (n = 32,
        // 512 matrices, 2 cores: 72 -> 28 ms; 43 ms on one core).
        ferrax_cpu_fallback::single_threaded(|| decompose_range(range, &Serial))
    })
}

/// [`faer_eigh`]'s scratch for one order: faer's, the eigenvalues as `T`, the eigenvectors
/// and, where it takes the split path, [`Split`]'s.
struct FaerScratch<T: Evd> {
    stack: MemBuffer,
    values: Vec<T>,
    vectors: Vec<T>,
    split: Option<Split<T>>,
}

/// The split path: `?stedc` and its own scratch (the tridiagonalized matrix, faer's block
/// reflectors' factors, the phases that make its off-diagonal real, the real tridiagonal `d`,
/// `e`, its eigenvectors `z`, `?stedc`'s workspaces).
struct Split<T: Evd> {
    stedc: Stedc<Real<T>>,
    reduced: Vec<T>,
    factors: Vec<T>,
    block: usize,
    phases: Vec<T>,
    d: Vec<Real<T>>,
    e: Vec<Real<T>>,
    z: Vec<Real<T>>,
    work: Vec<Real<T>>,
    iwork: Vec<i32>,
}

impl<T: Evd> FaerScratch<T> {
    /// With `stedc` (where the matrices' eigenvectors take the split path), the split path's
    /// scratch; else faer's whole solver's.
    fn new(order: usize, vectors: bool, stedc: Option<Stedc<Real<T>>>) -> Result<Self> {
        let n = order;
        let block = recommended_block_size::<T>(n, n);
        let request = if stedc.is_some() {
            StackReq::any_of(&[
                tridiag_in_place_scratch::<T>(n, Par::Seq, Default::default()),
                steps_over_pool::apply_reflectors_scratch::<T>(n.saturating_sub(1), block, n),
            ])
        } else {
            let compute = if vectors {
                ComputeEigenvectors::Yes
            } else {
                ComputeEigenvectors::No
            };
            self_adjoint_evd_scratch::<T>(n, compute, Par::Seq, Default::default())
        };
        let zero = Real::<T>::default();
        let split = match stedc {
            Some(stedc) => Some(Split {
                stedc,
                reduced: memory::vec_of(n * n, T::ZERO)?,
                factors: memory::vec_of(block * n.saturating_sub(1), T::ZERO)?,
                block,
                phases: memory::vec_of(n, T::ZERO)?,
                d: memory::vec_of(n, zero)?,
                e: memory::vec_of(n, zero)?,
                z: memory::vec_of(n * n, zero)?,
                // `?stedc`'s minimums for COMPZ = 'I'.
                work: memory::vec_of(1 + 4 * n + n * n, zero)?,
                iwork: memory::vec_of(3 + 5 * n, 0)?,
            }),
            None => None,
        };
        Ok(FaerScratch {
            stack: memory::faer_scratch(request, "eigh")?,
            values: memory::vec_of(order, T::ZERO)?,
            vectors: memory::vec_of(if vectors { order * order } else { 0 }, T::ZERO)?,
            split,
        })
    }
}

/// The eigenvalues (into `values`) and eigenvectors (into `vectors`, `n × n` column-major) of
/// the self-adjoint `matrix` (its lower triangle read) in three steps: faer's
/// tridiagonalization (over `columns_pool` where it has several threads and the matrix is
/// large: [`tridiag_over_pool::tridiag_over_pool`]), LAPACK's divide and conquer on the real
/// tridiagonal, faer's blocked back-transformation, its columns split over `columns_pool`.
/// False where `?stedc` fails.
fn split_eigh<T: Evd>(
    columns_pool: &dyn Pool,
    matrix: MatRef<'_, T>,
    split: &mut Split<T>,
    values: &mut [T],
    vectors: &mut [T],
    stack: &mut MemStack,
) -> Result<bool> {
    let n = matrix.nrows();
    let mut reduced = MatMut::from_column_major_slice_mut(&mut split.reduced, n, n);
    reduced.copy_from_triangular_lower(matrix);
    let mut factors =
        MatMut::from_column_major_slice_mut(&mut split.factors, split.block, n.saturating_sub(1));
    if columns_pool.threads() > 1
        && n * n * std::mem::size_of::<T>() >= tridiag_over_pool::MIN_BYTES
    {
        tridiag_over_pool::tridiag_over_pool(columns_pool, reduced.rb_mut(), factors.rb_mut())?;
    } else {
        tridiag_in_place(
            reduced.rb_mut(),
            factors.rb_mut(),
            Par::Seq,
            stack,
            Default::default(),
        );
    }
    // The reduced matrix is D·T·Dᴴ with T real (off-diagonal |βᵢ|) and D = diag(phases):
    // phase i + 1 is that of βᵢ times phase i, so T's eigenvectors times D are its own. For
    // real scalars the phases are signs. Divided by the modulus, not times its reciprocal,
    // which overflows for a subnormal βᵢ.
    let mut phase = T::ONE;
    for i in 0..n {
        split.d[i] = reduced[(i, i)].re();
        split.phases[i] = phase;
        split.e[i] = Real::<T>::default();
        if i + 1 < n {
            let beta = reduced[(i + 1, i)] * phase;
            let modulus = beta.cabs();
            split.e[i] = modulus;
            if modulus != Real::<T>::default() {
                phase = T::from_re_im(beta.re() / modulus, beta.im() / modulus);
            }
        }
    }
    // In LAPACK's integer range: [`eigh`] checked `?syevd`'s larger workspace first.
    let (order, lwork, liwork) = (n as i32, split.work.len() as i32, split.iwork.len() as i32);
    let mut info = 0;
    // SAFETY: `d` and `e` hold the n-element tridiagonal, `z` room for n × n eigenvectors
    // (leading dimension n), the workspaces LAPACK's minimums for COMPZ = 'I'.
    ferrax_cpu_fallback::single_threaded(|| unsafe {
        (split.stedc)(
            &(b'I' as c_char),
            &order,
            split.d.as_mut_ptr(),
            split.e.as_mut_ptr(),
            split.z.as_mut_ptr(),
            &order,
            split.work.as_mut_ptr(),
            &lwork,
            split.iwork.as_mut_ptr(),
            &liwork,
            &mut info,
        )
    });
    if info != 0 {
        return Ok(false);
    }
    for (value, &d) in values.iter_mut().zip(&split.d) {
        *value = T::from_real(d);
    }
    let (phases, z) = (&split.phases, &split.z);
    // The tridiagonal's eigenvectors, times the phases, back-transformed.
    let init = |columns: Range<usize>, mut u: MatMut<'_, T>| {
        for (j, column) in columns.zip(u.rb_mut().col_iter_mut()) {
            for ((to, &z), &phase) in column.iter_mut().zip(&z[j * n..(j + 1) * n]).zip(phases) {
                *to = phase.scale(z);
            }
        }
    };
    steps_over_pool::apply_reflectors(
        columns_pool,
        reduced.rb().submatrix(1, 0, n - 1, n - 1),
        factors.rb(),
        Conj::No,
        vectors,
        n,
        1,
        &init,
        stack,
        "eigh",
    )?;
    Ok(true)
}

/// Decomposes the `n × n` column-major matrix `a` (columns `ld` apart, its lower or upper
/// triangle read) by faer: its ascending eigenvalues into `w` and, with `vectors`, the
/// eigenvectors over `a`; by [`split_eigh`] where `scratch` is made for it. False,
/// with nothing written but the diagonal's imaginary parts (which LAPACK ignores) zeroed,
/// where LAPACK should take the matrix instead: an element not finite, or so large or small
/// that LAPACK would scale the matrix first (faer does not), or faer or `?stedc` stopped.
#[allow(clippy::too_many_arguments)] // the matrix and its layout, the results, the scratch
fn faer_eigh<T: Evd>(
    columns_pool: &dyn Pool,
    a: &mut [T],
    n: usize,
    ld: usize,
    lower: bool,
    vectors: bool,
    w: &mut [Real<T>],
    scratch: &mut FaerScratch<T>,
) -> Result<bool> {
    // LAPACK's `?syevd` scales the matrix where its largest element's modulus lies outside
    // [sqrt(safmin/eps), sqrt(eps/safmin)]. Measured here by |re| + |im| (no square root), up
    // to √2 above the modulus: a complex matrix just below the upper threshold goes to LAPACK,
    // which does not scale it; one up to √2 below the lower one stays with faer.
    let (safmin, eps) = if std::mem::size_of::<Real<T>>() == 4 {
        (f32::MIN_POSITIVE as f64, f32::EPSILON as f64 / 2.0)
    } else {
        (f64::MIN_POSITIVE, f64::EPSILON / 2.0)
    };
    let (low, high) = ((safmin / eps).sqrt(), (eps / safmin).sqrt());
    let mut largest = 0.0f64;
    for j in 0..n {
        let rows = if lower { j..n } else { 0..j + 1 };
        for x in &a[j * ld + rows.start..j * ld + rows.end] {
            if !x.is_finite() {
                return Ok(false);
            }
            largest = largest.max(x.abs1().into());
        }
        a[j * ld + j] = T::from_real(a[j * ld + j].re());
    }
    if !(low..=high).contains(&largest) {
        return Ok(false);
    }
    let matrix = MatRef::from_column_major_slice_with_stride(a, n, n, ld);
    // faer reads the lower triangle. Aᵀ's is the upper one's transposed: Aᵀ = conj(A), with
    // A's eigenvalues and its eigenvectors conjugated.
    let matrix = if lower { matrix } else { matrix.transpose() };
    let stack = MemStack::new(&mut scratch.stack);
    // faer's rotations and reflectors count on gradual underflow, which XLA turns off.
    let _gradual = GradualUnderflow::new();
    let solved = match scratch.split.as_mut() {
        Some(split) => split_eigh(
            columns_pool,
            matrix,
            split,
            &mut scratch.values,
            &mut scratch.vectors,
            stack,
        )?,
        None => {
            let values = DiagMut::from_slice_mut(&mut scratch.values);
            let eigenvectors =
                vectors.then(|| MatMut::from_column_major_slice_mut(&mut scratch.vectors, n, n));
            self_adjoint_evd(
                matrix,
                values,
                eigenvectors,
                Par::Seq,
                stack,
                Default::default(),
            )
            .is_ok()
        }
    };
    if !solved || !scratch.values.iter().all(|x| x.is_finite()) {
        return Ok(false);
    }
    for (w, x) in w.iter_mut().zip(&scratch.values) {
        *w = x.re();
    }
    if vectors {
        for (to, from) in a.chunks_mut(ld).zip(scratch.vectors.chunks(n)) {
            for (to, &from) in to.iter_mut().zip(from) {
                *to = if lower { from } else { from.conj() };
            }
        }
    }
    Ok(true)
}

/// LAPACK's three workspaces with their lengths; `rwork` is used by `?heevd` only.
pub struct Workspace<T: Lapack> {
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
    fn query() -> Result<Self> {
        Self::new(-1, -1, -1)
    }

    fn new(lwork: i32, lrwork: i32, liwork: i32) -> Result<Self> {
        let len = |l: i32| usize::try_from(l).unwrap_or(1);
        Ok(Workspace {
            work: memory::vec_of(len(lwork), T::default())?,
            lwork,
            rwork: memory::vec_of(len(lrwork), Real::<T>::default())?,
            lrwork,
            iwork: memory::vec_of(len(liwork), 0)?,
            liwork,
        })
    }
}

/// The scalars [`eigh`] takes: `?syevd` for real ones and `?heevd` (which also takes a real
/// workspace) for complex ones, behind one signature, and the Rust solver's real type.
pub trait Evd: LapackScalar {
    type Routine: Copy + Send + Sync;

    fn routine() -> Result<Self::Routine>;

    /// LAPACK's real tridiagonal divide and conquer, which [`faer_eigh`] runs between faer's
    /// tridiagonalization and back-transformation, where the table has it.
    fn stedc() -> Option<Stedc<Real<Self>>>;

    /// jaxlib's closed-form `(lwork, lrwork)` for order `n`, LAPACK's documented minimums.
    fn min_work(n: usize, vectors: bool) -> (usize, usize);

    /// # Safety
    /// As the LAPACK routine: `a` holds an `lda × n` matrix, `w` room for `n` eigenvalues.
    #[allow(clippy::too_many_arguments)] // LAPACK's own argument list
    unsafe fn evd(
        routine: Self::Routine,
        jobz: &c_char,
        uplo: &c_char,
        n: &i32,
        a: *mut Self,
        lda: &i32,
        w: *mut Real<Self>,
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

            fn stedc() -> Option<Stedc<$t>> {
                <$t as RealLapack>::stedc().ok()
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
                w: *mut Real<Self>,
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

            fn stedc() -> Option<Stedc<Real<$t>>> {
                <Real<$t> as RealLapack>::stedc().ok()
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
                w: *mut Real<Self>,
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
