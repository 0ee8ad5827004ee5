//! Singular value decomposition (LAPACK's `?gesdd`, divide and conquer, and `?gesvd`, QR
//! iteration): the singular values, `info` and (when asked) `U` and `Vᴴ` of every matrix of a
//! batch, in whatever layout the batch and the factors are. In place of `?gesdd`, batches of
//! small matrices take one-sided Jacobi in SIMD lanes ([`Svd::JACOBI_MAX`]), larger ones
//! with their vectors faer's SVD ([`takes_faer`]), and one large matrix with its vectors
//! faer's and LAPACK's steps split over the pool ([`takes_split`]).

use super::bidiag_over_pool::bidiag_over_pool;
use super::flags::{Flag, SvdJob};
use super::matrix::Batch;
use super::parallel::{for_each_chunk, Pool, Serial, SharedMut, SIMD_GROUP};
use super::steps_over_pool;
use super::underflow::GradualUnderflow;
use super::vector_unit::simd_dispatch;
use super::{lapack_int, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use faer::diag::DiagMut;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::qr::no_pivoting::factor::recommended_block_size;
use faer::linalg::svd::{svd_scratch, ComputeSvdVectors};
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Conj, MatMut, MatRef, Par};
use ferrax_cpu_fallback::{
    Bdsdc, ComplexLapack, GesddComplex, GesddReal, Lapack, Real, RealLapack,
};
use ferrax_cpu_fallback::{GesvdComplex, GesvdReal};
use ferrax_kernels::scalar::{Real as _, Scalar};
use ferrax_kernels::small::jacobi;
use num_complex::Complex;
use std::ffi::c_char;
use std::ops::Range;

/// The LAPACK driver: both take the same operands and job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// `?gesdd`: divide and conquer (jax's default CPU SVD).
    Gesdd,
    /// `?gesvd` with `jobu = jobvt = job`: QR iteration (`SvdAlgorithm.QR`).
    Gesvd,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Gesdd => "gesdd",
            Driver::Gesvd => "gesvd",
        }
    }

    /// The position of `a` among the routine's arguments (`info = -i` flags argument i).
    fn a_argument(self) -> i32 {
        match self {
            Driver::Gesdd => 4,
            Driver::Gesvd => 5,
        }
    }

    /// jaxlib's integer workspace length for `k = min(m, n)` (only `?gesdd` takes one).
    fn iwork_len(self, k: usize) -> usize {
        match self {
            Driver::Gesdd => 8 * k,
            Driver::Gesvd => 0,
        }
    }
}

/// Up to order `T::JACOBI_MAX` (`max(m, n)`) the default driver ([`Driver::Gesdd`])
/// decomposes batches [`SIMD_GROUP`] matrices at a time by one-sided Jacobi
/// ([`jacobi::Lanes`]; the last few of each task's share by `?gesdd`), where its `U` and `Vᴴ`
/// are what the job asks for: not a full `U` (`Vᴴ`) of a tall (wide) matrix, which would need
/// completing.
fn takes_jacobi<T: Svd>(
    driver: Driver,
    job: SvdJob,
    rows: usize,
    cols: usize,
    count: usize,
) -> bool {
    driver == Driver::Gesdd
        && rows.max(cols) <= T::JACOBI_MAX
        && (job != SvdJob::All || rows == cols)
        && count >= SIMD_GROUP
}

/// From order [`SVD_FAER_MIN`] (`max(m, n)`) the default driver's vectors come from faer's SVD
/// (bidiagonalization, divide and conquer), one matrix per core, which beats `?gesdd` there
/// on one core (OpenBLAS, AVX-512, ms, full `U` and `Vᴴ`, Zen 5): c128 64² 0.41 against 0.49,
/// 128² 1.95 / 3.0, 512² 68 / 108; f64 128² 1.34 / 1.43, 512² 37 / 54; f32 256² 4.4 / 4.8,
/// 512² 23 / 29; c64 512² 42 / 63; f64 256×64 0.61 / 1.15. Where the batch leaves cores idle
/// (fewer matrices than the pool's threads), `?gesdd` keeps its own threads on them (faer's
/// parallelism is rayon's, which ferrax leaves out), except up to order
/// [`SVD_FAER_ALONE_MAX`] with at least half as many matrices as threads: there one faer core
/// beat `?gesdd` on two on both machines measured (one matrix, jax, ms: Emerald Rapids c128
/// 128² 4.5 against 6.5, 256² 23.5 / 23.5, f64 128² 2.7 / 3.5; Zen 5 c128 128² 2.4 / 3.3, f64
/// 256² 7.9 / 9.4), while at 512² it won on Zen 5 (c128 69 / 97) but lost on Emerald Rapids
/// (c128 159 / 114, f64 74 / 64). Without vectors `?gesdd` is the faster (f64 512² 22
/// against 27).
fn takes_faer(
    driver: Driver,
    job: SvdJob,
    [count, rows, cols]: [usize; 3],
    threads: usize,
) -> bool {
    let order = rows.max(cols);
    driver == Driver::Gesdd
        && matches!(job, SvdJob::All | SvdJob::Some)
        && order >= SVD_FAER_MIN
        && (count >= threads || (2 * count >= threads && order <= SVD_FAER_ALONE_MAX))
}

/// See [`takes_faer`].
pub const SVD_FAER_MIN: usize = 64;

/// See [`takes_faer`].
const SVD_FAER_ALONE_MAX: usize = 256;

/// The results of [`svd`] for a batch of `m × n` matrices, `k = min(m, n)`.
pub struct Factors<'a, T: LapackScalar> {
    /// `k` singular values per matrix, descending.
    pub s: &'a mut [Real<T>],
    /// `U`: `m × m` ([`SvdJob::All`]) or `m × k` ([`SvdJob::Some`]); with [`SvdJob::None`] it
    /// need not be given, and one given is not written (but see [`svd`] on empty matrices).
    pub u: Option<Batch<T>>,
    /// `Vᴴ`: `n × n` or `k × n`, as `u`.
    pub vt: Option<Batch<T>>,
    /// LAPACK's `info` per matrix; `-a` (the position of `a` among the driver's arguments) for
    /// a matrix with a non-finite entry, which is not passed to LAPACK.
    pub info: &'a mut [i32],
}

/// Decomposes every matrix of `a` with `driver`. LAPACK overwrites its copy of each matrix
/// (faer leaves it as it is): that copy is `a_out` where given (jaxlib's `x_out`, which may be
/// `a` itself), else scratch, `a` being left as it is. OpenBLAS's drivers never return on Inf
/// input when vectors are asked for (stock jaxlib hangs), so a matrix with a non-finite entry
/// gets `info` `-a` (as jaxlib's `geev`, and jax then fills its outputs with NaN) and zero `U`,
/// `Vᴴ`. An empty matrix (`k = 0`) has the empty SVD: LAPACK would leave `U` and `Vᴴ`
/// unwritten, so every one given becomes the identity, what jax's own lowering gives.
/// [`SvdJob::Overwrite`] is not supported.
pub fn svd<T: Svd>(
    pool: &dyn Pool,
    driver: Driver,
    job: SvdJob,
    a: Batch<T>,
    a_out: Option<Batch<T>>,
    out: Factors<'_, T>,
) -> Result<()> {
    let (count, rows, cols) = (a.count(), a.rows(), a.cols());
    let k = rows.min(cols);
    let factor_shapes = match job {
        SvdJob::All => Some(([rows, rows], [cols, cols])),
        SvdJob::Some => Some(([rows, k], [k, cols])),
        SvdJob::None => None,
        SvdJob::Overwrite => {
            return Err(Error::unimplemented(
                "svd: job 'O' (U or V^T written over the input) is not supported",
            ))
        }
    };
    let shape_of = |m: &Batch<T>| [m.count(), m.rows(), m.cols()];
    let factors_fit = match factor_shapes {
        Some(([ur, uc], [vr, vc])) => {
            out.u.as_ref().map(shape_of) == Some([count, ur, uc])
                && out.vt.as_ref().map(shape_of) == Some([count, vr, vc])
        }
        None => [&out.u, &out.vt]
            .iter()
            .all(|f| f.as_ref().is_none_or(|f| f.count() == count)),
    };
    if out.s.len() != count * k
        || out.info.len() != count
        || !factors_fit
        || a_out
            .as_ref()
            .is_some_and(|o| shape_of(o) != [count, rows, cols])
    {
        return Err(Error::internal(format!(
            "{}: the results do not fit {count} matrices of {rows}×{cols} and job {:?}",
            driver.name(),
            job
        )));
    }
    let (m, n) = (lapack_int("rows", rows)?, lapack_int("columns", cols)?);
    if count == 0 {
        return Ok(());
    }
    let Factors { s, u, vt, info } = out;
    if k == 0 {
        info.fill(0);
        for factor in [u, vt].into_iter().flatten() {
            let mut staged = Vec::new();
            for b in 0..count {
                // SAFETY: each matrix of the factor, one after another.
                unsafe {
                    factor.column_major_result(b, T::ZERO, &mut staged, |f, ld| {
                        (0..factor.rows().min(factor.cols())).for_each(|i| f[i * ld + i] = T::ONE)
                    })?
                };
            }
        }
        return Ok(());
    }
    let computed = factor_shapes.is_some();
    let jacobi = takes_jacobi::<T>(driver, job, rows, cols, count);
    let faer_first = takes_faer(driver, job, [count, rows, cols], pool.threads());
    let split_first = takes_split::<T>(driver, job, [count, rows, cols], pool.threads());
    let routine = T::routine(driver)?;
    let lwork = optimal_lwork::<T>(driver, routine, job.letter(), m, n)?;
    let rwork_len = T::rwork_len(driver, rows, cols, job).ok_or_else(|| {
        Error::invalid_argument(format!(
            "{}: the real workspace for {rows}×{cols} matrices does not fit in memory",
            driver.name()
        ))
    })?;
    let iwork_len = driver.iwork_len(k);
    let (s, info) = (SharedMut(s.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    // Roughly the bidiagonalization's 4mnk flops.
    let flops = (rows * cols).saturating_mul(4 * k).max(1);
    // Matrices `range` one after another, the split path's steps over `columns_pool`.
    let lapack_range = |range: Range<usize>, columns_pool: &dyn Pool| -> Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        // LAPACK's workspace once a matrix needs it (faer's path and the split one: only
        // where they give up).
        let mut workspace: Option<Workspace<T>> = None;
        let mut faer = match faer_first {
            true => Some(FaerSvd::<T>::new(rows, cols, job)?),
            false => None,
        };
        let mut split = match T::bdsdc().filter(|_| split_first) {
            Some(bdsdc) => Some(SplitSvd::<T>::new(bdsdc, rows, cols, job)?),
            None => None,
        };
        let (mut staged_a, mut staged_u, mut staged_vt) = (Vec::new(), Vec::new(), Vec::new());
        // Not referenced by LAPACK without vectors.
        let (mut no_u, mut no_vt) = ([T::ZERO], [T::ZERO]);
        for b in range {
            // SAFETY: matrix `b` of each operand and result, which this task alone touches,
            // within the shapes checked above; the workspace has the sizes LAPACK asked for.
            unsafe {
                let (s, info) = (s.at(b * k), info.at(b));
                let mut decompose = |a: &mut [T], lda: usize| {
                    let (mut finite, mut largest) = (true, 0.0f64);
                    for x in (0..cols).flat_map(|j| &a[j * lda..j * lda + rows]) {
                        finite &= x.is_finite();
                        largest = largest.max(x.abs1().into());
                    }
                    let mut lapack = |u: &mut [T], ldu: usize, vt: &mut [T], ldvt: usize| {
                        if !finite {
                            *info = -driver.a_argument();
                            return Ok(());
                        }
                        let scales = gesdd_scales::<T>(largest);
                        if let Some(split) = split.as_mut().filter(|_| !scales) {
                            let a = MatRef::from_column_major_slice_with_stride(a, rows, cols, lda);
                            let s = std::slice::from_raw_parts_mut(s, k);
                            if split.decompose(columns_pool, a, s, (u, ldu), (vt, ldvt))? {
                                *info = 0;
                                return Ok(());
                            }
                        }
                        if let Some(faer) = faer.as_mut().filter(|_| !scales) {
                            let a = MatRef::from_column_major_slice_with_stride(a, rows, cols, lda);
                            let u = MatMut::from_column_major_slice_with_stride_mut(
                                u,
                                rows,
                                if job == SvdJob::All { rows } else { k },
                                ldu,
                            );
                            let s = std::slice::from_raw_parts_mut(s, k);
                            if faer.decompose(a, s, u, vt, ldvt) {
                                *info = 0;
                                return Ok(());
                            }
                        }
                        let matrix = Matrix {
                            a: a.as_mut_ptr(),
                            lda: lda as i32,
                            s,
                            u: u.as_mut_ptr(),
                            ldu: ldu as i32,
                            vt: vt.as_mut_ptr(),
                            ldvt: ldvt as i32,
                            info,
                        };
                        let workspace = match workspace.as_mut() {
                            Some(workspace) => workspace,
                            None => workspace.insert(Workspace {
                                work: memory::vec_of(lwork as usize, T::default())?,
                                rwork: memory::vec_of(rwork_len, <Real<T>>::default())?,
                                iwork: memory::vec_of(iwork_len, 0)?,
                            }),
                        };
                        T::svd(routine, job.letter(), m, n, &matrix, workspace, lwork);
                        Ok(())
                    };
                    match (computed, u, vt) {
                        (true, Some(u), Some(vt)) => {
                            u.column_major_result(b, T::ZERO, &mut staged_u, |u, ldu| {
                                vt.column_major_result(b, T::ZERO, &mut staged_vt, |vt, ldvt| {
                                    lapack(u, ldu, vt, ldvt)
                                })
                            })??
                        }
                        _ => lapack(&mut no_u, 1, &mut no_vt, 1),
                    }
                };
                match a_out {
                    Some(a_out) => {
                        let a = super::matrix::InOut {
                            input: a,
                            output: a_out,
                        };
                        a.column_major(b, &mut staged_a, decompose)??
                    }
                    None => {
                        memory::grow(&mut staged_a, rows * cols, T::ZERO)?;
                        let staged = &mut staged_a[..rows * cols];
                        a.gather(b, staged);
                        decompose(staged, rows)?
                    }
                }
            }
        }
        Ok(())
    };
    if split_first {
        return lapack_range(0..count, pool);
    }
    if !jacobi {
        return for_each_chunk(pool, count, flops, &|range| lapack_range(range, &Serial));
    }
    let factors = computed.then(|| (u.expect("U"), vt.expect("Vᴴ")));
    for_each_chunk(pool, count, flops, &|range| {
        let groups_end = range.start + range.len() / SIMD_GROUP * SIMD_GROUP;
        let (mut scratch, mut staged) = (Vec::new(), Vec::new());
        for first in (range.start..groups_end).step_by(SIMD_GROUP) {
            // SAFETY: matrices `first..first + SIMD_GROUP` of each operand and result, and their
            // singular values and infos, which this task alone touches.
            unsafe {
                jacobi_group(a, factors, first, &mut scratch, &mut staged, |b| {
                    (s.slice(b * k, k), &mut info.slice(b, 1)[0])
                })?
            };
        }
        lapack_range(groups_end..range.end, &Serial)
    })
}

simd_dispatch! {
    /// [`jacobi::Lanes::run`], compiled for the widest vector unit.
    fn run_lanes<T: Scalar>(lanes: &mut jacobi::Lanes<'_, T>, vectors: bool) {
        lanes.run(vectors)
    }
}

/// Decomposes matrices `first..first + SIMD_GROUP` of `a` by one-sided Jacobi, a wide matrix
/// as its conjugate transpose (`Aᴴ = Q·Σ·Wᴴ` gives `U = W`, `Vᴴ = Qᴴ`). `factors` are `U`
/// and `Vᴴ` with the shapes of a job other than [`SvdJob::All`], or that of a square matrix;
/// `results(b)` is matrix `b`'s singular values and `info` (-4, `?gesdd`'s position of `a`,
/// for a matrix with a non-finite element, whose factors are zero; 1 if it did not converge).
///
/// # Safety
/// The matrices exist in `a` and the factors, and the caller's task alone touches them.
unsafe fn jacobi_group<'r, T: Svd>(
    a: Batch<T>,
    factors: Option<(Batch<T>, Batch<T>)>,
    first: usize,
    scratch: &mut Vec<Real<T>>,
    staged: &mut Vec<T>,
    results: impl Fn(usize) -> (&'r mut [Real<T>], &'r mut i32),
) -> Result<()> {
    let (rows, cols) = (a.rows(), a.cols());
    let wide = rows < cols;
    let (m, n) = (rows.max(cols), rows.min(cols));
    memory::grow(
        scratch,
        jacobi::scratch_len(T::COMPLEX, m, n),
        Real::<T>::default(),
    )?;
    memory::grow(staged, rows * cols, T::ZERO)?;
    let mut lanes = jacobi::Lanes::<T>::new(m, n, scratch);
    for l in 0..SIMD_GROUP {
        let staged = &mut staged[..rows * cols];
        a.gather(first + l, staged);
        if wide {
            lanes.load(l, |i, j| staged[i * rows + j].conj());
        } else {
            lanes.load(l, |i, j| staged[j * rows + i]);
        }
    }
    run_lanes(&mut lanes, factors.is_some());
    for l in 0..SIMD_GROUP {
        let b = first + l;
        let (s, info) = results(b);
        (0..n).for_each(|j| s[j] = lanes.singular_value(l, j));
        *info = match (lanes.finite(l), lanes.converged(l)) {
            (false, _) => -Driver::Gesdd.a_argument(),
            (true, false) => 1,
            (true, true) => 0,
        };
        let Some((u, vt)) = factors else { continue };
        let finite = lanes.finite(l);
        // U (rows × its columns) and Vᴴ (its rows × cols) from the tall matrix's U and V.
        u.column_major_result(b, T::ZERO, staged, |f, ld| {
            for j in (0..u.cols()).filter(|_| finite) {
                for i in 0..rows {
                    f[j * ld + i] = if wide {
                        lanes.v(l, i, j)
                    } else {
                        lanes.u(l, i, j)
                    };
                }
            }
        })?;
        vt.column_major_result(b, T::ZERO, staged, |f, ld| {
            for j in (0..cols).filter(|_| finite) {
                for i in 0..vt.rows() {
                    f[j * ld + i] = if wide {
                        lanes.u(l, j, i).conj()
                    } else {
                        lanes.v(l, j, i).conj()
                    };
                }
            }
        })?;
    }
    Ok(())
}

/// Whether `?gesdd` may scale a matrix whose largest element is `largest` (|re| + |im|)
/// before decomposing it: where its modulus may lie outside [sqrt(safmin) / eps, its
/// reciprocal] (LAPACK's `smlnum`, `bignum`). faer does not scale, so those matrices and the
/// zero matrix stay with LAPACK. |re| + |im| is up to √2 above the modulus, so the lower bound
/// is taken √2 higher: matrices just above LAPACK's own bound go to LAPACK too, which does not
/// scale them.
fn gesdd_scales<T: Svd>(largest: f64) -> bool {
    let eps: f64 = <Real<T>>::EPSILON.into();
    let small = <Real<T>>::SAFE_MIN.into().sqrt() / eps;
    !(std::f64::consts::SQRT_2 * small..=1.0 / small).contains(&largest)
}

/// faer's SVD of `m × n` matrices with `U` and `Vᴴ` for one job: its scratch, the singular
/// values as `T` and `V` (`n × n` or `n × k`), which becomes `Vᴴ`.
struct FaerSvd<T: Svd> {
    stack: MemBuffer,
    values: Vec<T>,
    v: Vec<T>,
    v_cols: usize,
}

impl<T: Svd> FaerSvd<T> {
    fn new(m: usize, n: usize, job: SvdJob) -> Result<Self> {
        let (vectors, v_cols) = match job {
            SvdJob::All => (ComputeSvdVectors::Full, n),
            _ => (ComputeSvdVectors::Thin, m.min(n)),
        };
        let request = svd_scratch::<T>(m, n, vectors, vectors, Par::Seq, Default::default());
        Ok(FaerSvd {
            stack: memory::faer_scratch(request, "gesdd")?,
            values: memory::vec_of(m.min(n), T::ZERO)?,
            v: memory::vec_of(n * v_cols, T::ZERO)?,
            v_cols,
        })
    }

    /// Decomposes `a`: its singular values into `s`, `U` into `u`, `Vᴴ` into `vt` (column-major,
    /// columns `ldvt` apart). False where faer does not converge or gives a value that is not
    /// finite: LAPACK should take the matrix then.
    fn decompose(
        &mut self,
        a: MatRef<'_, T>,
        s: &mut [Real<T>],
        mut u: MatMut<'_, T>,
        vt: &mut [T],
        ldvt: usize,
    ) -> bool {
        let n = a.ncols();
        // faer's full vectors of a far from square matrix leave a block of zeros unwritten.
        u.fill(T::ZERO);
        self.v.fill(T::ZERO);
        let v = MatMut::from_column_major_slice_mut(&mut self.v, n, self.v_cols);
        // faer's rotations and reflectors count on gradual underflow, which XLA turns off.
        let _gradual = GradualUnderflow::new();
        let solved = faer::linalg::svd::svd(
            a,
            DiagMut::from_slice_mut(&mut self.values),
            Some(u),
            Some(v),
            Par::Seq,
            MemStack::new(&mut self.stack),
            Default::default(),
        );
        if solved.is_err() || !self.values.iter().all(|x| x.is_finite()) {
            return false;
        }
        for (s, x) in s.iter_mut().zip(&self.values) {
            *s = x.re();
        }
        for j in 0..n {
            for i in 0..self.v_cols {
                vt[j * ldvt + i] = self.v[i * n + j].conj();
            }
        }
        true
    }
}

/// From this many bytes, one matrix with its vectors takes [`SplitSvd`] where the pool has
/// idle threads ([`takes_split`]): one matrix, 2 cores, p10 ms, `?gesdd` on OpenBLAS's two
/// threads → split: c128 384² 75 → 67, 512² 162 → 138-153 (three runs), 768² 479 → 437;
/// c64 512² 93 → 77; f64 512² 95 → 77, 768² 269 → 207, 1024² 577 → 457; f32 768² 121 → 103,
/// 1024² 369 → 319. Below, the reduction's steps are too short for the hand-overs (c128 256²,
/// the bidiagonalization alone: 9.4 ms on one thread, 11.5 on two).
pub const SVD_SPLIT_MIN_BYTES: usize = 2 << 20;

/// Whether the default driver decomposes the batch's one matrix by [`SplitSvd`]: with its
/// vectors, large ([`SVD_SPLIT_MIN_BYTES`]) and at most twice as long as wide (a longer one
/// stays with `?gesdd`, which reduces it by QR first), on a pool of several threads that a
/// batch of one leaves idle, where `?bdsdc` is at hand.
fn takes_split<T: Svd>(
    driver: Driver,
    job: SvdJob,
    [count, rows, cols]: [usize; 3],
    threads: usize,
) -> bool {
    let (k, order) = (rows.min(cols), rows.max(cols));
    driver == Driver::Gesdd
        && matches!(job, SvdJob::All | SvdJob::Some)
        && count == 1
        && threads > 1
        && order <= 2 * k
        && rows * cols * std::mem::size_of::<T>() >= SVD_SPLIT_MIN_BYTES
        && T::bdsdc().is_some()
}

/// The SVD of one large matrix in three steps over the pool: faer's bidiagonalization with
/// each step's pass over the pool ([`bidiag_over_pool`]), LAPACK's divide and conquer on the
/// real bidiagonal (`?bdsdc`), faer's blocked back-transformations with their columns split
/// over the pool. A wide matrix `A` is taken as its adjoint `Aᴴ = Q·Σ·Pᴴ`, which gives
/// `U = P`, `Vᴴ = Qᴴ`. Its scratch, for one shape and job: the tall matrix (`M × N`) reduced
/// in place, its reflectors' block factors, the real bidiagonal (`d`, `e`) and its vectors
/// (`ur`, `vtr`), `?bdsdc`'s workspaces, the phases that make the bidiagonal real (`p` on the
/// left, `q` on the right), and the tall matrix's `U` (`M × M` or `M × N`) and `V` (`N × N`).
struct SplitSvd<T: Svd> {
    bdsdc: Bdsdc<Real<T>>,
    wide: bool,
    shape: [usize; 2],
    u_cols: usize,
    reduced: Vec<T>,
    block: usize,
    left: Vec<T>,
    right: Vec<T>,
    d: Vec<Real<T>>,
    e: Vec<Real<T>>,
    ur: Vec<Real<T>>,
    vtr: Vec<Real<T>>,
    work: Vec<Real<T>>,
    iwork: Vec<i32>,
    p: Vec<T>,
    q: Vec<T>,
    u: Vec<T>,
    v: Vec<T>,
    stack: MemBuffer,
}

impl<T: Svd> SplitSvd<T> {
    fn new(bdsdc: Bdsdc<Real<T>>, rows: usize, cols: usize, job: SvdJob) -> Result<Self> {
        let (m, n) = (rows.max(cols), rows.min(cols));
        let u_cols = if job == SvdJob::All { m } else { n };
        let block = recommended_block_size::<T>(m, n);
        let real = Real::<T>::default();
        let request = steps_over_pool::apply_reflectors_scratch::<T>(m, block, m);
        Ok(SplitSvd {
            bdsdc,
            wide: rows < cols,
            shape: [m, n],
            u_cols,
            reduced: memory::vec_of(m * n, T::ZERO)?,
            block,
            left: memory::vec_of(block * n, T::ZERO)?,
            right: memory::vec_of(block * (n - 1), T::ZERO)?,
            d: memory::vec_of(n, real)?,
            e: memory::vec_of(n, real)?,
            ur: memory::vec_of(n * n, real)?,
            vtr: memory::vec_of(n * n, real)?,
            // `?bdsdc`'s for COMPQ = 'I'.
            work: memory::vec_of(3 * n * n + 4 * n, real)?,
            iwork: memory::vec_of(8 * n, 0)?,
            p: memory::vec_of(n, T::ZERO)?,
            q: memory::vec_of(n, T::ZERO)?,
            u: memory::vec_of(m * u_cols, T::ZERO)?,
            v: memory::vec_of(n * n, T::ZERO)?,
            stack: memory::faer_scratch(request, "gesdd")?,
        })
    }

    /// Decomposes `a` (finite, not scaled by `?gesdd`) over `pool`: its singular values into
    /// `s`, `U` into `u` and `Vᴴ` into `vt` (column-major, columns `ldu`, `ldvt` apart). False
    /// where `?bdsdc` fails: LAPACK should take the matrix then.
    fn decompose(
        &mut self,
        pool: &dyn Pool,
        a: MatRef<'_, T>,
        s: &mut [Real<T>],
        (u, ldu): (&mut [T], usize),
        (vt, ldvt): (&mut [T], usize),
    ) -> Result<bool> {
        let [m, n] = self.shape;
        let mut reduced = MatMut::from_column_major_slice_mut(&mut self.reduced, m, n);
        match self.wide {
            true => reduced.copy_from(a.adjoint()),
            false => reduced.copy_from(a),
        }
        let mut left = MatMut::from_column_major_slice_mut(&mut self.left, self.block, n);
        let mut right = MatMut::from_column_major_slice_mut(&mut self.right, self.block, n - 1);
        bidiag_over_pool(pool, reduced.rb_mut(), left.rb_mut(), right.rb_mut())?;
        // The bidiagonal B is P·R·Qᴴ with R real (|dᵢ| on the diagonal, |eᵢ| above it) and P,
        // Q diagonal (phases, signs for real scalars): qᵢ₊₁ that of pᵢ·conj(eᵢ), pᵢ that of
        // dᵢ·qᵢ. Divided by the modulus, not times its reciprocal, which overflows for a
        // subnormal element.
        let phase = |x: T| {
            let modulus = x.cabs();
            match modulus == Real::<T>::default() {
                true => (T::ONE, modulus),
                false => (T::from_re_im(x.re() / modulus, x.im() / modulus), modulus),
            }
        };
        let mut q = T::ONE;
        for i in 0..n {
            let (p, d) = phase(reduced[(i, i)] * q);
            (self.p[i], self.q[i], self.d[i]) = (p, q, d);
            self.e[i] = Real::<T>::default();
            if i + 1 < n {
                let (conj_q, e) = phase(p.conj() * reduced[(i, i + 1)]);
                (q, self.e[i]) = (conj_q.conj(), e);
            }
        }
        let order = n as i32;
        let mut info = 0;
        let (mut q_unused, mut iq_unused) = (Real::<T>::default(), 0);
        // SAFETY: `d` and `e` hold the n-element bidiagonal, `ur` and `vtr` room for its n × n
        // vectors (leading dimension n), the workspaces LAPACK's for COMPQ = 'I', which
        // references neither `q` nor `iq`.
        ferrax_cpu_fallback::single_threaded(|| unsafe {
            (self.bdsdc)(
                &(b'U' as c_char),
                &(b'I' as c_char),
                &order,
                self.d.as_mut_ptr(),
                self.e.as_mut_ptr(),
                self.ur.as_mut_ptr(),
                &order,
                self.vtr.as_mut_ptr(),
                &order,
                &mut q_unused,
                &mut iq_unused,
                self.work.as_mut_ptr(),
                self.iwork.as_mut_ptr(),
                &mut info,
            )
        });
        if info != 0 {
            return Ok(false);
        }
        s.copy_from_slice(&self.d);
        // U = (left reflectors)·[P·Uᵣ 0; 0 I].
        let (p, ur) = (&self.p, &self.ur);
        let init_u = |columns: Range<usize>, mut block: MatMut<'_, T>| {
            for (j, mut column) in columns.zip(block.rb_mut().col_iter_mut()) {
                for (i, to) in column.rb_mut().iter_mut().enumerate() {
                    *to = match (i < n && j < n, i == j) {
                        (true, _) => p[i].scale(ur[j * n + i]),
                        (false, true) => T::ONE,
                        (false, false) => T::ZERO,
                    };
                }
            }
        };
        let mut stack = MemStack::new(&mut self.stack);
        steps_over_pool::apply_reflectors(
            pool,
            reduced.rb(),
            left.rb(),
            Conj::No,
            &mut self.u,
            m,
            0,
            &init_u,
            stack.rb_mut(),
            "gesdd",
        )?;
        // V = (right reflectors)·Q·Vᵣ, the reflectors (rows) as columns below the diagonal,
        // over the left ones, which U has taken.
        for j in 1..n {
            for i in 0..j {
                reduced[(j, i)] = reduced[(i, j)];
            }
        }
        let (q, vtr) = (&self.q, &self.vtr);
        let init_v = |columns: Range<usize>, mut block: MatMut<'_, T>| {
            for (j, mut column) in columns.zip(block.rb_mut().col_iter_mut()) {
                for (i, to) in column.rb_mut().iter_mut().enumerate() {
                    *to = q[i].scale(vtr[i * n + j]);
                }
            }
        };
        steps_over_pool::apply_reflectors(
            pool,
            reduced.rb().submatrix(1, 0, n - 1, n - 1),
            right.rb(),
            Conj::Yes,
            &mut self.v,
            n,
            1,
            &init_v,
            stack,
            "gesdd",
        )?;
        // The tall matrix's U and V as the matrix's U and Vᴴ.
        let tall_u = MatRef::from_column_major_slice(&self.u, m, self.u_cols);
        let tall_v = MatRef::from_column_major_slice(&self.v, n, n);
        let (to_u, to_vt) = match self.wide {
            false => (tall_u, tall_v),
            true => (tall_v, tall_u),
        };
        for j in 0..to_u.ncols() {
            for i in 0..to_u.nrows() {
                u[j * ldu + i] = to_u[(i, j)];
            }
        }
        for j in 0..to_vt.nrows() {
            for i in 0..to_vt.ncols() {
                vt[j * ldvt + i] = to_vt[(j, i)].conj();
            }
        }
        Ok(true)
    }
}

/// The `lwork = -1` query for the batch's matrix shape (the same for every matrix).
fn optimal_lwork<T: Svd>(
    driver: Driver,
    routine: Routine<T>,
    job: c_char,
    m: i32,
    n: i32,
) -> Result<i32> {
    let mut query = Workspace::<T> {
        work: vec![T::default()],
        rwork: Vec::new(),
        iwork: Vec::new(),
    };
    let mut info = 0;
    let ld = |rows: i32| rows.max(1);
    let k = m.min(n);
    // The factors' leading dimensions for the job (LAPACK checks them even in a query).
    let (ldu, ldvt) = match job as u8 {
        b'A' => (ld(m), ld(n)),
        b'S' => (ld(m), ld(k)),
        _ => (1, 1),
    };
    let matrix = Matrix::<T> {
        a: std::ptr::null_mut(),
        lda: ld(m),
        s: std::ptr::null_mut(),
        u: std::ptr::null_mut(),
        ldu,
        vt: std::ptr::null_mut(),
        ldvt,
        info: &mut info,
    };
    // SAFETY: a workspace query reads only the scalar arguments and writes `work[0]` and
    // `info` (jaxlib passes null matrices too).
    unsafe { T::svd(routine, job, m, n, &matrix, &mut query, -1) };
    let lwork = query.work[0].real_f64().ceil();
    if info != 0 || !(1.0..=f64::from(i32::MAX)).contains(&lwork) {
        return Err(Error::internal(format!(
            "{} workspace query failed (info {info}, lwork {lwork})",
            driver.name()
        )));
    }
    Ok(lwork as i32)
}

/// One matrix's operands, with their leading dimensions.
pub struct Matrix<T: Lapack> {
    a: *mut T,
    lda: i32,
    s: *mut Real<T>,
    u: *mut T,
    ldu: i32,
    vt: *mut T,
    ldvt: i32,
    info: *mut i32,
}

/// LAPACK scratch, allocated once per chunk of the batch.
pub struct Workspace<T: Lapack> {
    work: Vec<T>,
    rwork: Vec<Real<T>>,
    iwork: Vec<i32>,
}

/// The routine of one driver for `T`, looked up once per call.
#[derive(Clone, Copy)]
pub enum Routine<T: Svd> {
    Gesdd(T::Gesdd),
    Gesvd(T::Gesvd),
}

/// The scalars [`svd`] takes: `?gesdd` and `?gesvd` for each (the real routines have no
/// `rwork`, the complex ones do).
pub trait Svd: LapackScalar {
    /// The largest order at which one-sided Jacobi in SIMD lanes beats `?gesdd` on batches,
    /// measured with `benches/cpu_linalg.py --ops svd` (2 cores, AVX2, against stock jax's
    /// serial loop; ferrax's `?gesdd` path is about 1.9× there): Jacobi 2.6× (f32) and 2.0×
    /// (c64, f64) at 24, 1.8× (f32) and 1.45× (c64, f64) at 32; in c128 2.2× at 12 and 1.6× at
    /// 16 (its complex rotations cost about four real ones).
    const JACOBI_MAX: usize;
    type Gesdd: Copy + Send + Sync;
    type Gesvd: Copy + Send + Sync;
    fn routine(driver: Driver) -> Result<Routine<Self>>;
    /// `?bdsdc` of the real scalar, where the table has it.
    fn bdsdc() -> Option<Bdsdc<Real<Self>>>;
    /// jaxlib's `rwork` length (none for real scalars), or `None` on overflow.
    fn rwork_len(driver: Driver, m: usize, n: usize, job: SvdJob) -> Option<usize>;
    /// # Safety
    /// The pointers must be valid for `m × n` and the job, the workspace at least as large
    /// as `lwork` (or `lwork` -1 for a query).
    unsafe fn svd(
        f: Routine<Self>,
        job: c_char,
        m: i32,
        n: i32,
        x: &Matrix<Self>,
        work: &mut Workspace<Self>,
        lwork: i32,
    );
}

macro_rules! svd_real {
    ($($t:ty = $jacobi_max:literal),*) => {$(
        impl Svd for $t {
            const JACOBI_MAX: usize = $jacobi_max;
            type Gesdd = GesddReal<$t>;
            type Gesvd = GesvdReal<$t>;
            fn routine(driver: Driver) -> Result<Routine<Self>> {
                Ok(match driver {
                    Driver::Gesdd => Routine::Gesdd(routine(<$t as RealLapack>::gesdd())?),
                    Driver::Gesvd => Routine::Gesvd(routine(<$t as RealLapack>::gesvd())?),
                })
            }
            fn bdsdc() -> Option<Bdsdc<$t>> {
                <$t as RealLapack>::bdsdc().ok()
            }
            fn rwork_len(_: Driver, _: usize, _: usize, _: SvdJob) -> Option<usize> {
                Some(0)
            }
            unsafe fn svd(
                f: Routine<Self>,
                job: c_char,
                m: i32,
                n: i32,
                x: &Matrix<Self>,
                w: &mut Workspace<Self>,
                lwork: i32,
            ) {
                match f {
                    Routine::Gesdd(f) => f(
                        &job, &m, &n, x.a, &x.lda, x.s, x.u, &x.ldu, x.vt, &x.ldvt,
                        w.work.as_mut_ptr(), &lwork, w.iwork.as_mut_ptr(), x.info,
                    ),
                    Routine::Gesvd(f) => f(
                        &job, &job, &m, &n, x.a, &x.lda, x.s, x.u, &x.ldu, x.vt, &x.ldvt,
                        w.work.as_mut_ptr(), &lwork, x.info,
                    ),
                }
            }
        }
    )*};
}
svd_real!(f32 = 32, f64 = 24);

macro_rules! svd_complex {
    ($($t:ty = $jacobi_max:literal),*) => {$(
        impl Svd for Complex<$t> {
            const JACOBI_MAX: usize = $jacobi_max;
            type Gesdd = GesddComplex<Complex<$t>>;
            type Gesvd = GesvdComplex<Complex<$t>>;
            fn routine(driver: Driver) -> Result<Routine<Self>> {
                Ok(match driver {
                    Driver::Gesdd => {
                        Routine::Gesdd(routine(<Complex<$t> as ComplexLapack>::gesdd())?)
                    }
                    Driver::Gesvd => {
                        Routine::Gesvd(routine(<Complex<$t> as ComplexLapack>::gesvd())?)
                    }
                })
            }
            fn bdsdc() -> Option<Bdsdc<$t>> {
                <$t as RealLapack>::bdsdc().ok()
            }
            fn rwork_len(driver: Driver, m: usize, n: usize, job: SvdJob) -> Option<usize> {
                let (mn, mx) = (m.min(n), m.max(n));
                let len = match driver {
                    Driver::Gesvd => mn.checked_mul(5)?,
                    Driver::Gesdd if job == SvdJob::None => mn.checked_mul(7)?,
                    Driver::Gesdd => {
                        let sq = mn.checked_mul(mn)?;
                        let a = sq.checked_mul(5)?.checked_add(mn.checked_mul(5)?)?;
                        let b = mx.checked_mul(mn)?.checked_add(sq)?.checked_mul(2)?.checked_add(mn)?;
                        a.max(b)
                    }
                };
                Some(len.max(1))
            }
            unsafe fn svd(
                f: Routine<Self>,
                job: c_char,
                m: i32,
                n: i32,
                x: &Matrix<Self>,
                w: &mut Workspace<Self>,
                lwork: i32,
            ) {
                match f {
                    Routine::Gesdd(f) => f(
                        &job, &m, &n, x.a, &x.lda, x.s, x.u, &x.ldu, x.vt, &x.ldvt,
                        w.work.as_mut_ptr(), &lwork, w.rwork.as_mut_ptr(), w.iwork.as_mut_ptr(),
                        x.info,
                    ),
                    Routine::Gesvd(f) => f(
                        &job, &job, &m, &n, x.a, &x.lda, x.s, x.u, &x.ldu, x.vt, &x.ldvt,
                        w.work.as_mut_ptr(), &lwork, w.rwork.as_mut_ptr(), x.info,
                    ),
                }
            }
        }
    )*};
}
svd_complex!(f32 = 24, f64 = 12);
