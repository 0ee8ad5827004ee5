//! `geev`: eigenvalues and eigenvectors of general square matrices, jaxlib's
//! `lapack_?geev_ffi` contract: column-major `x` `[..., n, n]` in (not modified: each matrix is
//! copied to scratch), then
//! - real input: `wr`, `wi` `[..., n]` (real and imaginary parts of the eigenvalues), `vl`,
//!   `vr` complex `[..., n, n]` (LAPACK's packed real eigenvectors, unpacked) and S32 `info`;
//! - complex input: `w` `[..., n]`, `vl`, `vr` and `info`.
//!
//! Attributes `compute_left`, `compute_right`: u8 'V' (that side's eigenvectors) or 'N' (that
//! result is then zero). As in jaxlib, a matrix with a non-finite entry is not passed to LAPACK
//! and gets `info` -4.

use crate::ffi::sys::{XLA_FFI_CallFrame, XLA_FFI_Error};
use crate::ffi::{Buffer, DataType, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::{by_result_count, char_attr, for_each_chunk, lapack_dim, query_lwork, routine};
use crate::ops::{dispatch_lapack, expect_eigenvalues, Scalar, SharedMut};
use ferrax_cpu_fallback::{ComplexLapack, GeevComplex, GeevReal, Real, RealLapack};
use num_complex::Complex;
use std::ffi::{c_char, CStr};
use std::ptr::null_mut;

pub const TARGET: &CStr = c"ferrax_geev";

/// Eigendecomposition of general matrices on the host through LAPACK, batch split across
/// XLA's thread pool. jaxlib's real and complex contracts differ in their results, so the
/// call's result count picks the signature.
///
/// # Safety
/// Called by XLA with a valid call frame.
pub unsafe extern "C" fn ferrax_cpu_geev(frame: *mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error {
    // Real input: wr, wi, vl, vr, info.
    by_result_count(frame, 5, ferrax_cpu_geev_real, ferrax_cpu_geev_complex)
}

ffi_handler! {
    /// `ferrax_geev` for real input: eigenvalues as real and imaginary parts.
    fn ferrax_cpu_geev_real = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret wr: Buffer;
    ret wi: Buffer;
    ret vl: Buffer;
    ret vr: Buffer;
    ret info: Buffer;
    attr compute_left: u8;
    attr compute_right: u8;
    traits = 0;
    body = geev_real_cpu;
}

ffi_handler! {
    /// `ferrax_geev` for complex input: complex eigenvalues.
    fn ferrax_cpu_geev_complex = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret w: Buffer;
    ret vl: Buffer;
    ret vr: Buffer;
    ret info: Buffer;
    attr compute_left: u8;
    attr compute_right: u8;
    traits = 0;
    body = geev_complex_cpu;
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn geev_real_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    wr: Buffer<'_>,
    wi: Buffer<'_>,
    vl: Buffer<'_>,
    vr: Buffer<'_>,
    info: Buffer<'_>,
    compute_left: u8,
    compute_right: u8,
) -> Result<()> {
    let outputs = Outputs {
        eigvals: &[wr, wi],
        vl,
        vr,
        info,
    };
    let jobs = jobs(compute_left, compute_right)?;
    dispatch_lapack!(x, geev_typed(pool, x, outputs, jobs))
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn geev_complex_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    w: Buffer<'_>,
    vl: Buffer<'_>,
    vr: Buffer<'_>,
    info: Buffer<'_>,
    compute_left: u8,
    compute_right: u8,
) -> Result<()> {
    let outputs = Outputs {
        eigvals: &[w],
        vl,
        vr,
        info,
    };
    let jobs = jobs(compute_left, compute_right)?;
    dispatch_lapack!(x, geev_typed(pool, x, outputs, jobs))
}

/// LAPACK's `jobvl` and `jobvr`.
fn jobs(compute_left: u8, compute_right: u8) -> Result<[c_char; 2]> {
    Ok([
        char_attr("compute_left", compute_left, b"VN")?,
        char_attr("compute_right", compute_right, b"VN")?,
    ])
}

/// The handler's results, in signature order.
struct Outputs<'a, 'b> {
    /// `[wr, wi]` or `[w]`.
    eigvals: &'b [Buffer<'a>],
    vl: Buffer<'a>,
    vr: Buffer<'a>,
    info: Buffer<'a>,
}

fn geev_typed<T: Geev>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    out: Outputs<'_, '_>,
    [jobvl, jobvr]: [c_char; 2],
) -> Result<()> {
    // The other results: vl, vr, info.
    let shape = expect_eigenvalues::<T>(&x, out.eigvals, T::EIGVALS, T::RESULTS, 3)?;
    let batch_dims = shape.batch_dims(&x);
    let n = shape.rows;
    for v in [&out.vl, &out.vr] {
        v.expect_dtype(T::Vector::DTYPE)?;
        v.expect_dims(x.dims())?;
    }
    out.info.expect_dtype(DataType::S32)?;
    out.info.expect_dims(batch_dims)?;
    let call = Call {
        jobvl,
        jobvr,
        n: lapack_dim(&x, n)?,
        ld: lapack_dim(&x, n.max(1))?,
    };
    // SAFETY: `x` is only read; the results are distinct buffers.
    let (x, vl, vr, info) = unsafe {
        (
            x.as_slice::<T>()?,
            out.vl.as_mut_slice::<T::Vector>()?,
            out.vr.as_mut_slice::<T::Vector>()?,
            out.info.as_mut_slice::<i32>()?,
        )
    };
    // jax ignores the vectors it did not ask for, but they should not be uninitialized memory.
    for (job, v) in [(call.jobvl, &mut *vl), (call.jobvr, &mut *vr)] {
        if job as u8 == b'N' {
            v.fill(T::Vector::default());
        }
    }
    if shape.batch == 0 {
        return Ok(());
    }
    if n == 0 {
        // Nothing to compute, and LAPACK would see `n` 0 as its quick return.
        info.fill(0);
        return Ok(());
    }
    let geev = T::routine()?;
    // SAFETY: a query reads only the scalar arguments and writes `work[0]` and `info`.
    let lwork =
        query_lwork::<T>(|work, lwork, info| unsafe { T::query(geev, &call, work, lwork, info) })?;
    let mut eigvals = [SharedMut(null_mut()); 2];
    for (slot, w) in eigvals.iter_mut().zip(out.eigvals) {
        // SAFETY: the result is written by one task per matrix, below.
        *slot = SharedMut(unsafe { w.as_mut_slice::<T>()? }.as_mut_ptr());
    }
    let (vl, vr, info) = (
        SharedMut(vl.as_mut_ptr()),
        SharedMut(vr.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    let matrix_len = shape.matrix_len();
    // Roughly the Hessenberg reduction and QR iterations of the eigenvalues alone.
    let flops = n.saturating_pow(3).saturating_mul(10);
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut ws = T::workspace(&call, lwork);
        for b in range {
            let a = &x[b * matrix_len..][..matrix_len];
            // SAFETY: matrix `b` of each result is written by this task alone, within the
            // shapes checked above; the workspace has the sizes LAPACK asked for.
            unsafe {
                if !a.iter().all(|v| v.is_finite()) {
                    *info.at(b) = -4;
                    continue;
                }
                ws.a.copy_from_slice(a);
                let mut w = [null_mut(); 2];
                for (w, base) in w.iter_mut().zip(&eigvals[..T::EIGVALS]) {
                    *w = base.at(b * n);
                }
                let matrix = Matrix {
                    w,
                    vl: vl.at(b * matrix_len),
                    vr: vr.at(b * matrix_len),
                    info: info.at(b),
                };
                T::geev(geev, &call, &matrix, &mut ws);
            }
        }
        Ok(())
    })
}

/// The scalar arguments of every `?geev` call of one batch.
struct Call {
    jobvl: c_char,
    jobvr: c_char,
    n: i32,
    /// `lda`, `ldvl` and `ldvr`: `max(1, n)`.
    ld: i32,
}

/// One matrix's results.
struct Matrix<T: Geev> {
    /// `[wr, wi]`, or `[w, null]`.
    w: [*mut T; 2],
    vl: *mut T::Vector,
    vr: *mut T::Vector,
    info: *mut i32,
}

/// Scratch for one chunk of the batch.
struct Workspace<T: Geev> {
    /// The copy of the input matrix that LAPACK overwrites.
    a: Vec<T>,
    work: Vec<T>,
    lwork: i32,
    /// Real input: LAPACK's packed eigenvectors (only those asked for), unpacked afterwards.
    packed_vl: Vec<T>,
    packed_vr: Vec<T>,
    /// Complex input: `2n` reals.
    rwork: Vec<Real<T>>,
}

/// `?geev` for one scalar type: real routines return packed real eigenvectors and the
/// eigenvalues as two arrays; complex ones return both complex, and take a real workspace.
trait Geev: Scalar {
    type Routine: Copy + Send + Sync;
    /// The eigenvectors' scalar: complex, whatever the input.
    type Vector: NativeType + Default;
    /// How many eigenvalue results there are, and all results by name, for errors.
    const EIGVALS: usize;
    const RESULTS: &'static str;
    fn routine() -> Result<Self::Routine>;
    fn workspace(call: &Call, lwork: i32) -> Workspace<Self>;
    /// # Safety
    /// A workspace query: `work` has room for one element.
    unsafe fn query(
        f: Self::Routine,
        call: &Call,
        work: *mut Self,
        lwork: *const i32,
        info: *mut i32,
    );
    /// Decomposes `ws.a` into `matrix`'s results.
    ///
    /// # Safety
    /// The pointers must be valid for the shapes in `call`, `ws` from `workspace`.
    unsafe fn geev(f: Self::Routine, call: &Call, matrix: &Matrix<Self>, ws: &mut Workspace<Self>);
}

/// jaxlib's `UnpackEigenvectors`: for a conjugate pair `w[j]`, `w[j + 1]` (`wi[j] > 0`) LAPACK
/// stores the real part of the eigenvector in column `j` and its imaginary part in column
/// `j + 1`; the pair's vectors are `re + i im` and `re - i im`. Other columns are real.
fn unpack<R>(n: usize, wi: &[R], packed: &[R], out: &mut [Complex<R>])
where
    R: Copy + Default + PartialOrd + std::ops::Neg<Output = R>,
{
    let mut j = 0;
    while j < n {
        let re = &packed[j * n..][..n];
        if wi[j] > R::default() && j + 1 < n {
            let im = &packed[(j + 1) * n..][..n];
            let (first, second) = out[j * n..][..2 * n].split_at_mut(n);
            for i in 0..n {
                first[i] = Complex::new(re[i], im[i]);
                second[i] = Complex::new(re[i], -im[i]);
            }
            j += 2;
        } else {
            for (o, &r) in out[j * n..][..n].iter_mut().zip(re) {
                *o = Complex::new(r, R::default());
            }
            j += 1;
        }
    }
}

macro_rules! geev_real {
    ($($t:ty),*) => {$(
        impl Geev for $t {
            type Routine = GeevReal<$t>;
            type Vector = Complex<$t>;
            const EIGVALS: usize = 2;
            const RESULTS: &'static str = "wr, wi, vl, vr, info";

            fn routine() -> Result<Self::Routine> {
                routine(<$t as RealLapack>::geev())
            }

            fn workspace(c: &Call, lwork: i32) -> Workspace<Self> {
                let n = c.n as usize;
                let packed = |job: c_char| vec![0.0; if job as u8 == b'V' { n * n } else { 0 }];
                Workspace {
                    a: vec![0.0; n * n],
                    work: vec![0.0; lwork as usize],
                    lwork,
                    packed_vl: packed(c.jobvl),
                    packed_vr: packed(c.jobvr),
                    rwork: Vec::new(),
                }
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Call,
                work: *mut Self,
                lwork: *const i32,
                info: *mut i32,
            ) {
                f(
                    &c.jobvl, &c.jobvr, &c.n, null_mut(), &c.ld, null_mut(), null_mut(),
                    null_mut(), &c.ld, null_mut(), &c.ld, work, lwork, info,
                )
            }

            unsafe fn geev(f: Self::Routine, c: &Call, m: &Matrix<Self>, ws: &mut Workspace<Self>) {
                f(
                    &c.jobvl, &c.jobvr, &c.n, ws.a.as_mut_ptr(), &c.ld, m.w[0], m.w[1],
                    ws.packed_vl.as_mut_ptr(), &c.ld, ws.packed_vr.as_mut_ptr(), &c.ld,
                    ws.work.as_mut_ptr(), &ws.lwork, m.info,
                );
                if *m.info != 0 {
                    return;
                }
                let n = c.n as usize;
                let wi = std::slice::from_raw_parts(m.w[1], n);
                for (job, packed, v) in [(c.jobvl, &ws.packed_vl, m.vl), (c.jobvr, &ws.packed_vr, m.vr)] {
                    if job as u8 == b'V' {
                        unpack(n, wi, packed, std::slice::from_raw_parts_mut(v, n * n));
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
            type Vector = Complex<$t>;
            const EIGVALS: usize = 1;
            const RESULTS: &'static str = "w, vl, vr, info";

            fn routine() -> Result<Self::Routine> {
                routine(<Complex<$t> as ComplexLapack>::geev())
            }

            fn workspace(c: &Call, lwork: i32) -> Workspace<Self> {
                let n = c.n as usize;
                Workspace {
                    a: vec![Complex::default(); n * n],
                    work: vec![Complex::default(); lwork as usize],
                    lwork,
                    packed_vl: Vec::new(),
                    packed_vr: Vec::new(),
                    rwork: vec![0.0; 2 * n],
                }
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Call,
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

            unsafe fn geev(f: Self::Routine, c: &Call, m: &Matrix<Self>, ws: &mut Workspace<Self>) {
                // The eigenvectors LAPACK computes are already the results.
                f(
                    &c.jobvl, &c.jobvr, &c.n, ws.a.as_mut_ptr(), &c.ld, m.w[0], m.vl, &c.ld,
                    m.vr, &c.ld, ws.work.as_mut_ptr(), &ws.lwork, ws.rwork.as_mut_ptr(), m.info,
                )
            }
        }
    )*};
}
geev_complex!(f32, f64);
