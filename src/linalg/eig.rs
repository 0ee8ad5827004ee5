//! Eigenvalues and eigenvectors of general square matrices (LAPACK's `?geev`) of a batch in
//! whatever layout it is; and the eigenvalue results that `?geev` and `?gees` share.

use super::matrix::Batch;
use super::parallel::{for_each_chunk, Pool, SharedMut};
use super::{lapack_int, query_lwork, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use ferrax_cpu_fallback::{ComplexLapack, GeevComplex, GeevReal, Real, RealLapack};
use ferrax_kernels::scalar::Scalar as KernelScalar;
use ferrax_kernels::scalar::Scalar;
use num_complex::Complex;
use std::ffi::c_char;
use std::ptr::null_mut;

/// Where the eigenvalues of a batch of general `n × n` matrices go, `n` per matrix.
pub enum Eigenvalues<'a, T: LapackScalar> {
    /// Real and imaginary parts apart (jaxlib's results for real input; real input only).
    Parts {
        re: &'a mut [Real<T>],
        im: &'a mut [Real<T>],
    },
    /// Complex values (jaxlib's results for complex input, the C ABI's for either).
    Complex(&'a mut [T::Complex]),
}

impl<T: LapackScalar> Eigenvalues<'_, T> {
    /// Checks that there are `count · n` and that real parts apart come from real input.
    pub(crate) fn expect(&self, what: &str, count: usize, n: usize) -> Result<()> {
        let fits = match self {
            Eigenvalues::Parts { re, im } => {
                !T::COMPLEX && re.len() == count * n && im.len() == count * n
            }
            Eigenvalues::Complex(w) => w.len() == count * n,
        };
        if fits {
            return Ok(());
        }
        Err(Error::internal(format!(
            "{what}: the eigenvalue results do not fit {count} {} matrices of order {n}",
            T::DTYPE
        )))
    }

    /// The results as the pool's tasks share them, each writing its matrices' own.
    pub(crate) fn share(self) -> SharedEigenvalues<T> {
        match self {
            Eigenvalues::Parts { re, im } => {
                SharedEigenvalues::Parts(SharedMut(re.as_mut_ptr()), SharedMut(im.as_mut_ptr()))
            }
            Eigenvalues::Complex(w) => SharedEigenvalues::Complex(SharedMut(w.as_mut_ptr())),
        }
    }
}

/// [`Eigenvalues`] shared by the pool's tasks.
pub(crate) enum SharedEigenvalues<T: LapackScalar> {
    Parts(SharedMut<Real<T>>, SharedMut<Real<T>>),
    Complex(SharedMut<T::Complex>),
}

impl<T: LapackScalar> SharedEigenvalues<T> {
    /// Runs `f` on matrix `b`'s eigenvalues (`n` of them) in LAPACK's form for `T` (parts
    /// apart for real input, else complex): in place, or for real input with complex results
    /// staged in `staged` (zero first) and written as complex afterwards, whatever `f` did.
    ///
    /// # Safety
    /// `b` is in the batch; no other task touches its eigenvalues.
    pub(crate) unsafe fn lapack_form<R>(
        &self,
        b: usize,
        n: usize,
        staged: &mut Vec<Real<T>>,
        f: impl FnOnce(Eigenvalues<'_, T>) -> Result<R>,
    ) -> Result<R> {
        match self {
            SharedEigenvalues::Parts(re, im) => f(Eigenvalues::Parts {
                re: re.slice(b * n, n),
                im: im.slice(b * n, n),
            }),
            SharedEigenvalues::Complex(w) => {
                let w = w.slice(b * n, n);
                if T::COMPLEX {
                    return f(Eigenvalues::Complex(w));
                }
                staged.clear();
                memory::grow(staged, 2 * n, Real::<T>::default())?;
                let (re, im) = staged.split_at_mut(n);
                let result = f(Eigenvalues::Parts { re, im });
                for (w, (&re, &im)) in w.iter_mut().zip(re.iter().zip(im.iter())) {
                    *w = T::Complex::from_re_im(re, im);
                }
                result
            }
        }
    }
}

/// Runs `f` on matrix `b` of `result`, if there is one, as [`Batch::column_major_result`]
/// does with zero, else on `None`.
///
/// # Safety
/// As [`Batch::column_major_result`].
pub(crate) unsafe fn optional_result<T: Copy + Scalar, R>(
    result: Option<Batch<T>>,
    b: usize,
    scratch: &mut Vec<T>,
    f: impl FnOnce(Option<(&mut [T], usize)>) -> Result<R>,
) -> Result<R> {
    match result {
        Some(m) => m.column_major_result(b, T::ZERO, scratch, |m, ld| f(Some((m, ld))))?,
        None => f(None),
    }
}

/// Decomposes every matrix of `a` (`n × n`, read only: LAPACK works on a copy): `w` gets its
/// eigenvalues, `info` its LAPACK `info`, and `vl` and `vr`, where given, its left and right
/// eigenvectors (complex columns, as jaxlib's `UnpackEigenvectors` gives them for real
/// input). As in jaxlib, a matrix with a non-finite entry is not passed to LAPACK: its `info`
/// is -4, its eigenvectors zero and its eigenvalues not written (but real ones staged for
/// complex results are: zero). Where LAPACK fails (`info > 0`) the eigenvectors of real input
/// are zero.
pub fn geev<T: Geev>(
    pool: &dyn Pool,
    a: Batch<T>,
    w: Eigenvalues<'_, T>,
    vl: Option<Batch<T::Complex>>,
    vr: Option<Batch<T::Complex>>,
    info: &mut [i32],
) -> Result<()> {
    let (count, order) = (a.count(), a.rows());
    let square = |m: &Batch<T::Complex>| [m.count(), m.rows(), m.cols()] == [count, order, order];
    if a.cols() != order || info.len() != count || ![vl, vr].iter().flatten().all(square) {
        return Err(Error::internal(format!(
            "geev: the results do not fit {count} matrices of {order}×{}",
            a.cols()
        )));
    }
    w.expect("geev", count, order)?;
    let jobs = Jobs {
        jobvl: if vl.is_some() { b'V' } else { b'N' } as c_char,
        jobvr: if vr.is_some() { b'V' } else { b'N' } as c_char,
        n: lapack_int("n", order)?,
        ld: lapack_int("n", order.max(1))?,
    };
    if count == 0 {
        return Ok(());
    }
    if order == 0 {
        // Nothing to compute, and LAPACK would see `n` 0 as its quick return.
        info.fill(0);
        return Ok(());
    }
    let geev = T::routine()?;
    let w = w.share();
    // SAFETY: a query reads only the scalar arguments and writes `work[0]` and `info`.
    let lwork =
        query_lwork::<T>(|work, lwork, info| unsafe { T::query(geev, &jobs, work, lwork, info) })?;
    let info = SharedMut(info.as_mut_ptr());
    let len = order * order;
    // Roughly the Hessenberg reduction and QR iterations of the eigenvalues alone.
    let flops = order.saturating_pow(3).saturating_mul(10);
    for_each_chunk(pool, count, flops, &|range| {
        let mut ws = T::workspace(&jobs, lwork)?;
        let mut matrix = memory::vec_of(len, T::ZERO)?;
        let (mut staged_w, mut staged_vl, mut staged_vr) = (Vec::new(), Vec::new(), Vec::new());
        for b in range {
            // SAFETY: matrix `b` of each operand and result, which this task alone touches,
            // within the shapes checked above; the workspace has the sizes LAPACK asked for.
            unsafe {
                let info = &mut *info.at(b);
                a.gather(b, &mut matrix);
                let finite = matrix.iter().all(|v| v.is_finite());
                w.lapack_form(b, order, &mut staged_w, |w| {
                    optional_result(vl, b, &mut staged_vl, |vl| {
                        optional_result(vr, b, &mut staged_vr, |vr| {
                            if finite {
                                T::geev(geev, &jobs, &mut matrix, w, vl, vr, &mut ws, info);
                            } else {
                                *info = -4;
                            }
                            Ok(())
                        })
                    })
                })?;
            }
        }
        Ok(())
    })
}

/// The scalar arguments of every `?geev` call of one batch.
pub struct Jobs {
    jobvl: c_char,
    jobvr: c_char,
    n: i32,
    /// `lda`, and `ldvl` and `ldvr` of the packed real eigenvectors: `max(1, n)`.
    ld: i32,
}

/// Scratch for one chunk of the batch.
pub struct Workspace<T: Geev> {
    work: Vec<T>,
    lwork: i32,
    /// Real input: LAPACK's packed eigenvectors (only those asked for), unpacked afterwards.
    packed_vl: Vec<T>,
    packed_vr: Vec<T>,
    /// Complex input: `2n` reals.
    rwork: Vec<Real<T>>,
}

/// A matrix's eigenvectors as [`optional_result`] gives them: column-major with a leading
/// dimension, where asked for.
pub type MatrixVectors<'a, T> = Option<(&'a mut [<T as LapackScalar>::Complex], usize)>;

/// The scalars [`geev`] takes: real routines return packed real eigenvectors and the
/// eigenvalues as two arrays; complex ones return both complex, and take a real workspace.
pub trait Geev: LapackScalar {
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
    /// Decomposes `a` (column-major `n × n`, overwritten) into `w` (in LAPACK's form for the
    /// type) and the eigenvectors asked for.
    ///
    /// # Safety
    /// The slices hold one matrix's results; `ws` is from `workspace`.
    #[allow(clippy::too_many_arguments)] // LAPACK's operands
    unsafe fn geev(
        f: Self::Routine,
        jobs: &Jobs,
        a: &mut [Self],
        w: Eigenvalues<'_, Self>,
        vl: MatrixVectors<'_, Self>,
        vr: MatrixVectors<'_, Self>,
        ws: &mut Workspace<Self>,
        info: &mut i32,
    );
}

/// jaxlib's `UnpackEigenvectors`: for a conjugate pair `w[j]`, `w[j + 1]` (`wi[j] > 0`) LAPACK
/// stores the real part of the eigenvector in column `j` and its imaginary part in column
/// `j + 1`; the pair's vectors are `re + i im` and `re - i im`. Other columns are real. `out`
/// is column-major with leading dimension `ld`.
fn unpack<R>(n: usize, wi: &[R], packed: &[R], out: &mut [Complex<R>], ld: usize)
where
    R: Copy + Default + PartialOrd + std::ops::Neg<Output = R>,
{
    let mut j = 0;
    while j < n {
        let re = &packed[j * n..][..n];
        if wi[j] > R::default() && j + 1 < n {
            let im = &packed[(j + 1) * n..][..n];
            let (first, second) = out[j * ld..].split_at_mut(ld);
            for i in 0..n {
                first[i] = Complex::new(re[i], im[i]);
                second[i] = Complex::new(re[i], -im[i]);
            }
            j += 2;
        } else {
            for (o, &r) in out[j * ld..][..n].iter_mut().zip(re) {
                *o = Complex::new(r, R::default());
            }
            j += 1;
        }
    }
}

/// A pointer and leading dimension for LAPACK's optional results (eigenvectors, Schur
/// vectors): to `dummy`, with `ld`, where they are not asked for (LAPACK then does not
/// reference them).
pub(crate) fn lapack_ptr<T>(
    vectors: Option<(&mut [T], usize)>,
    dummy: &mut T,
    ld: i32,
) -> (*mut T, i32) {
    match vectors {
        Some((v, ld)) => (v.as_mut_ptr(), ld as i32),
        None => (dummy, ld),
    }
}

macro_rules! geev_real {
    ($($t:ty),*) => {$(
        impl Geev for $t {
            type Routine = GeevReal<$t>;

            fn routine() -> Result<Self::Routine> {
                routine(<$t as RealLapack>::geev())
            }

            fn workspace(c: &Jobs, lwork: i32) -> Result<Workspace<Self>> {
                let n = c.n as usize;
                let packed = |job: c_char| memory::vec_of(if job as u8 == b'V' { n * n } else { 0 }, 0.0);
                Ok(Workspace {
                    work: memory::vec_of(lwork as usize, 0.0)?,
                    lwork,
                    packed_vl: packed(c.jobvl)?,
                    packed_vr: packed(c.jobvr)?,
                    rwork: Vec::new(),
                })
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Jobs,
                work: *mut Self,
                lwork: *const i32,
                info: *mut i32,
            ) {
                f(
                    &c.jobvl, &c.jobvr, &c.n, null_mut(), &c.ld, null_mut(), null_mut(),
                    null_mut(), &c.ld, null_mut(), &c.ld, work, lwork, info,
                )
            }

            unsafe fn geev(
                f: Self::Routine,
                c: &Jobs,
                a: &mut [Self],
                w: Eigenvalues<'_, Self>,
                vl: MatrixVectors<'_, Self>,
                vr: MatrixVectors<'_, Self>,
                ws: &mut Workspace<Self>,
                info: &mut i32,
            ) {
                let Eigenvalues::Parts { re, im } = w else {
                    unreachable!("real input's eigenvalues come as parts")
                };
                f(
                    &c.jobvl, &c.jobvr, &c.n, a.as_mut_ptr(), &c.ld, re.as_mut_ptr(),
                    im.as_mut_ptr(), ws.packed_vl.as_mut_ptr(), &c.ld, ws.packed_vr.as_mut_ptr(),
                    &c.ld, ws.work.as_mut_ptr(), &ws.lwork, info,
                );
                if *info != 0 {
                    return;
                }
                let n = c.n as usize;
                for (packed, v) in [(&ws.packed_vl, vl), (&ws.packed_vr, vr)] {
                    if let Some((v, ld)) = v {
                        unpack(n, im, packed, v, ld);
                    }
                }
            }
        }
    )*};
}
geev_real!(f32, f64);

macro_rules! geev_complex {
    ($($t:ty),*) => {$(
        impl Geev for Complex<$t> {
            type Routine = GeevComplex<Complex<$t>>;

            fn routine() -> Result<Self::Routine> {
                routine(<Complex<$t> as ComplexLapack>::geev())
            }

            fn workspace(c: &Jobs, lwork: i32) -> Result<Workspace<Self>> {
                Ok(Workspace {
                    work: memory::vec_of(lwork as usize, Complex::default())?,
                    lwork,
                    packed_vl: Vec::new(),
                    packed_vr: Vec::new(),
                    rwork: memory::vec_of(2 * c.n as usize, 0.0)?,
                })
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Jobs,
                work: *mut Self,
                lwork: *const i32,
                info: *mut i32,
            ) {
                // The query of the eigenvector step (`?trevc3`) writes `rwork[0]`.
                let mut rwork = vec![0.0; 2 * c.n as usize];
                f(
                    &c.jobvl, &c.jobvr, &c.n, null_mut(), &c.ld, null_mut(), null_mut(), &c.ld,
                    null_mut(), &c.ld, work, lwork, rwork.as_mut_ptr(), info,
                )
            }

            unsafe fn geev(
                f: Self::Routine,
                c: &Jobs,
                a: &mut [Self],
                w: Eigenvalues<'_, Self>,
                vl: MatrixVectors<'_, Self>,
                vr: MatrixVectors<'_, Self>,
                ws: &mut Workspace<Self>,
                info: &mut i32,
            ) {
                let Eigenvalues::Complex(w) = w else {
                    unreachable!("complex input's eigenvalues are complex")
                };
                // The eigenvectors LAPACK computes are already the results.
                let (mut no_vl, mut no_vr) = (Complex::default(), Complex::default());
                let (vl, ldvl) = lapack_ptr(vl, &mut no_vl, c.ld);
                let (vr, ldvr) = lapack_ptr(vr, &mut no_vr, c.ld);
                f(
                    &c.jobvl, &c.jobvr, &c.n, a.as_mut_ptr(), &c.ld, w.as_mut_ptr(), vl, &ldvl,
                    vr, &ldvr, ws.work.as_mut_ptr(), &ws.lwork, ws.rwork.as_mut_ptr(), info,
                )
            }
        }
    )*};
}
geev_complex!(f32, f64);
