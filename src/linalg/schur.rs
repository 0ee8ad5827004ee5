//! Schur decomposition `A = Z T Zᴴ` of general square matrices (LAPACK's `?gees`, without
//! sorting) of a batch in whatever layout it is.

use super::eig::{lapack_ptr, optional_result, Eigenvalues};
use super::matrix::{Batch, InOut};
use super::parallel::{for_each_chunk, Pool, SharedMut};
use super::{lapack_int, query_lwork, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use ferrax_cpu_fallback::{ComplexLapack, GeesComplex, GeesReal, Real, RealLapack};
use num_complex::Complex;
use std::ffi::c_char;
use std::ptr::null_mut;

/// Decomposes every matrix of `a` (`n × n`): the Schur form `T` (quasi-triangular for real
/// input) replaces it in `a.output`, `w` gets its eigenvalues, `vs`, where given, the Schur
/// vectors `Z`, and `sdim` and `info` LAPACK's `sdim` (0: there is no selection function to
/// sort by) and `info`.
pub fn gees<T: Gees>(
    pool: &dyn Pool,
    a: InOut<T>,
    w: Eigenvalues<'_, T>,
    vs: Option<Batch<T>>,
    sdim: &mut [i32],
    info: &mut [i32],
) -> Result<()> {
    let (count, order) = (a.input.count(), a.input.rows());
    let square = |m: &Batch<T>| [m.count(), m.rows(), m.cols()] == [count, order, order];
    if a.input.cols() != order
        || sdim.len() != count
        || info.len() != count
        || !vs.iter().all(square)
    {
        return Err(Error::internal(format!(
            "gees: the results do not fit {count} matrices of {order}×{}",
            a.input.cols()
        )));
    }
    w.expect("gees", count, order)?;
    let jobs = Jobs {
        jobvs: if vs.is_some() { b'V' } else { b'N' } as c_char,
        sort: b'N' as c_char,
        n: lapack_int("n", order)?,
        ld: lapack_int("n", order.max(1))?,
    };
    if count == 0 {
        return Ok(());
    }
    if order == 0 {
        // Nothing to compute (LAPACK's quick return: no eigenvalue selected).
        sdim.fill(0);
        info.fill(0);
        return Ok(());
    }
    let gees = T::routine()?;
    // SAFETY: a query reads only the scalar arguments and writes `work[0]` and `info`.
    let lwork =
        query_lwork::<T>(|work, lwork, info| unsafe { T::query(gees, &jobs, work, lwork, info) })?;
    let w = w.share();
    let (sdim, info) = (SharedMut(sdim.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    // Roughly the Hessenberg reduction and QR iterations.
    let flops = order.saturating_pow(3).saturating_mul(10);
    for_each_chunk(pool, count, flops, &|range| {
        let mut ws = T::workspace(&jobs, lwork)?;
        let (mut staged_a, mut staged_w, mut staged_vs) = (Vec::new(), Vec::new(), Vec::new());
        for b in range {
            // SAFETY: matrix `b` of each operand and result, which this task alone touches,
            // within the shapes checked above; the workspace has the sizes LAPACK asked for.
            unsafe {
                let (sdim, info) = (&mut *sdim.at(b), &mut *info.at(b));
                w.lapack_form(b, order, &mut staged_w, |w| {
                    optional_result(vs, b, &mut staged_vs, |vs| {
                        a.column_major(b, &mut staged_a, |a, lda| {
                            let matrix = Matrix {
                                a,
                                lda: lda as i32,
                                w,
                                vs,
                                sdim,
                                info,
                            };
                            T::gees(gees, &jobs, matrix, &mut ws)
                        })
                    })
                })?;
            }
        }
        Ok(())
    })
}

/// The scalar arguments of every `?gees` call of one batch.
pub struct Jobs {
    jobvs: c_char,
    sort: c_char,
    n: i32,
    /// `lda` and `ldvs` in the workspace query: `max(1, n)`.
    ld: i32,
}

/// One matrix's operands and results.
pub struct Matrix<'a, T: LapackScalar> {
    /// Column-major, leading dimension `lda`.
    a: &'a mut [T],
    lda: i32,
    /// In LAPACK's form for `T`.
    w: Eigenvalues<'a, T>,
    /// Column-major with its leading dimension, where asked for.
    vs: Option<(&'a mut [T], usize)>,
    sdim: &'a mut i32,
    info: &'a mut i32,
}

/// Scratch for one chunk of the batch.
pub struct Workspace<T: Gees> {
    work: Vec<T>,
    lwork: i32,
    /// Complex input: `n` reals.
    rwork: Vec<Real<T>>,
    /// LAPACK logicals, `n` of them (referenced only when sorting).
    bwork: Vec<i32>,
}

/// The scalars [`gees`] takes: real routines return the eigenvalues as two arrays, complex
/// ones as one, and take a real workspace.
pub trait Gees: LapackScalar {
    type Routine: Copy + Send + Sync;
    fn routine() -> Result<Self::Routine>;
    fn workspace(jobs: &Jobs, lwork: i32) -> Result<Workspace<Self>>;
    /// # Safety
    /// A workspace query: `work` has room for one element.
    unsafe fn query(
        f: Self::Routine,
        jobs: &Jobs,
        work: *mut Self,
        lwork: *const i32,
        info: *mut i32,
    );
    /// # Safety
    /// `matrix` holds one matrix's operands and results; `ws` is from `workspace`.
    unsafe fn gees(
        f: Self::Routine,
        jobs: &Jobs,
        matrix: Matrix<'_, Self>,
        ws: &mut Workspace<Self>,
    );
}

macro_rules! gees_real {
    ($($t:ty),*) => {$(
        impl Gees for $t {
            type Routine = GeesReal<$t>;

            fn routine() -> Result<Self::Routine> {
                routine(<$t as RealLapack>::gees())
            }

            fn workspace(c: &Jobs, lwork: i32) -> Result<Workspace<Self>> {
                Ok(Workspace {
                    work: memory::vec_of(lwork as usize, 0.0)?,
                    lwork,
                    rwork: Vec::new(),
                    bwork: memory::vec_of(c.n as usize, 0)?,
                })
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Jobs,
                work: *mut Self,
                lwork: *const i32,
                info: *mut i32,
            ) {
                // As jaxlib: a query touches no array, and no selection function is needed.
                f(
                    &c.jobvs, &c.sort, null_mut(), &c.n, null_mut(), &c.ld, null_mut(),
                    null_mut(), null_mut(), null_mut(), &c.ld, work, lwork, null_mut(), info,
                )
            }

            unsafe fn gees(
                f: Self::Routine,
                c: &Jobs,
                m: Matrix<'_, Self>,
                ws: &mut Workspace<Self>,
            ) {
                let Eigenvalues::Parts { re, im } = m.w else {
                    unreachable!("real input's eigenvalues come as parts")
                };
                let mut no_vs = 0.0;
                let (vs, ldvs) = lapack_ptr(m.vs, &mut no_vs, c.ld);
                f(
                    &c.jobvs, &c.sort, null_mut(), &c.n, m.a.as_mut_ptr(), &m.lda, m.sdim,
                    re.as_mut_ptr(), im.as_mut_ptr(), vs, &ldvs, ws.work.as_mut_ptr(), &ws.lwork,
                    ws.bwork.as_mut_ptr(), m.info,
                )
            }
        }
    )*};
}
gees_real!(f32, f64);

macro_rules! gees_complex {
    ($($t:ty),*) => {$(
        impl Gees for Complex<$t> {
            type Routine = GeesComplex<Complex<$t>>;

            fn routine() -> Result<Self::Routine> {
                routine(<Complex<$t> as ComplexLapack>::gees())
            }

            fn workspace(c: &Jobs, lwork: i32) -> Result<Workspace<Self>> {
                let n = c.n as usize;
                Ok(Workspace {
                    work: memory::vec_of(lwork as usize, Complex::default())?,
                    lwork,
                    rwork: memory::vec_of(n, 0.0)?,
                    bwork: memory::vec_of(n, 0)?,
                })
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Jobs,
                work: *mut Self,
                lwork: *const i32,
                info: *mut i32,
            ) {
                // As jaxlib: a query touches no array, and no selection function is needed.
                f(
                    &c.jobvs, &c.sort, null_mut(), &c.n, null_mut(), &c.ld, null_mut(),
                    null_mut(), null_mut(), &c.ld, work, lwork, null_mut(), null_mut(), info,
                )
            }

            unsafe fn gees(
                f: Self::Routine,
                c: &Jobs,
                m: Matrix<'_, Self>,
                ws: &mut Workspace<Self>,
            ) {
                let Eigenvalues::Complex(w) = m.w else {
                    unreachable!("complex input's eigenvalues are complex")
                };
                let mut no_vs = Complex::default();
                let (vs, ldvs) = lapack_ptr(m.vs, &mut no_vs, c.ld);
                f(
                    &c.jobvs, &c.sort, null_mut(), &c.n, m.a.as_mut_ptr(), &m.lda, m.sdim,
                    w.as_mut_ptr(), vs, &ldvs, ws.work.as_mut_ptr(), &ws.lwork,
                    ws.rwork.as_mut_ptr(), ws.bwork.as_mut_ptr(), m.info,
                )
            }
        }
    )*};
}
gees_complex!(f32, f64);
