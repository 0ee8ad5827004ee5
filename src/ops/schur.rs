//! `gees`: Schur decomposition `A = Z T Z^H` of general square matrices, jaxlib's
//! `lapack_?gees_ffi` contract: column-major `x` `[..., n, n]` in, overwritten by the Schur
//! form `T` (it aliases result 0), then
//! - real input: `schur_vectors` `Z` `[..., n, n]`, `eigvals_real`, `eigvals_imag` `[..., n]`,
//!   S32 `selected_eigvals` `[...]` (LAPACK's `sdim`) and S32 `info` `[...]`;
//! - complex input: `schur_vectors`, `eigvals` `[..., n]`, `selected_eigvals` and `info`.
//!
//! Attributes `mode`: u8 'V' (compute `Z`) or 'N' (`schur_vectors` is then zero); `sort`: u8
//! 'N' only (jaxlib has no selection function to sort by, so 'S' is UNIMPLEMENTED there too).

use crate::ffi::sys::{XLA_FFI_CallFrame, XLA_FFI_Error};
use crate::ffi::{Buffer, DataType, Error, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::eigenvalues::by_result_count;
use crate::ops::{char_attr, for_each_chunk, lapack_dim, query_lwork, routine};
use crate::ops::{dispatch_lapack, expect_eigenvalues, Scalar, SharedMut};
use ferrax_cpu_fallback::{ComplexLapack, GeesComplex, GeesReal, Real, RealLapack};
use num_complex::Complex;
use std::ffi::{c_char, CStr};
use std::ptr::null_mut;

pub const TARGET: &CStr = c"ferrax_gees";

/// Schur decomposition of general matrices on the host through LAPACK, batch split across
/// XLA's thread pool. jaxlib's real and complex contracts differ in their results, so the
/// call's result count picks the signature.
///
/// # Safety
/// Called by XLA with a valid call frame.
pub unsafe extern "C" fn ferrax_cpu_gees(frame: *mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error {
    // Real input: x_out, schur_vectors, eigvals_real, eigvals_imag, selected_eigvals, info.
    by_result_count(frame, 6, ferrax_cpu_gees_real, ferrax_cpu_gees_complex)
}

ffi_handler! {
    /// `ferrax_gees` for real input: eigenvalues as real and imaginary parts.
    fn ferrax_cpu_gees_real = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret schur_vectors: Buffer;
    ret eigvals_real: Buffer;
    ret eigvals_imag: Buffer;
    ret selected_eigvals: Buffer;
    ret info: Buffer;
    attr mode: u8;
    attr sort: u8;
    traits = 0;
    body = gees_real_cpu;
}

ffi_handler! {
    /// `ferrax_gees` for complex input: complex eigenvalues.
    fn ferrax_cpu_gees_complex = TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret schur_vectors: Buffer;
    ret eigvals: Buffer;
    ret selected_eigvals: Buffer;
    ret info: Buffer;
    attr mode: u8;
    attr sort: u8;
    traits = 0;
    body = gees_complex_cpu;
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn gees_real_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    schur_vectors: Buffer<'_>,
    eigvals_real: Buffer<'_>,
    eigvals_imag: Buffer<'_>,
    selected_eigvals: Buffer<'_>,
    info: Buffer<'_>,
    mode: u8,
    sort: u8,
) -> Result<()> {
    let outputs = Outputs {
        x_out,
        schur_vectors,
        eigvals: &[eigvals_real, eigvals_imag],
        sdim: selected_eigvals,
        info,
    };
    let jobs = jobs(mode, sort)?;
    dispatch_lapack!(x, gees_typed(pool, x, outputs, jobs))
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn gees_complex_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    schur_vectors: Buffer<'_>,
    eigvals: Buffer<'_>,
    selected_eigvals: Buffer<'_>,
    info: Buffer<'_>,
    mode: u8,
    sort: u8,
) -> Result<()> {
    let outputs = Outputs {
        x_out,
        schur_vectors,
        eigvals: &[eigvals],
        sdim: selected_eigvals,
        info,
    };
    let jobs = jobs(mode, sort)?;
    dispatch_lapack!(x, gees_typed(pool, x, outputs, jobs))
}

/// LAPACK's `jobvs` and `sort`.
fn jobs(mode: u8, sort: u8) -> Result<[c_char; 2]> {
    let jobvs = char_attr("mode", mode, b"VN")?;
    let sort = char_attr("sort", sort, b"NS")?;
    if sort as u8 == b'S' {
        return Err(Error::unimplemented(
            "attribute 'sort': 'S' (sorted eigenvalues) is not supported: there is no \
             selection function",
        ));
    }
    Ok([jobvs, sort])
}

/// The handler's results, in signature order.
struct Outputs<'a, 'b> {
    x_out: Buffer<'a>,
    schur_vectors: Buffer<'a>,
    /// `[eigvals_real, eigvals_imag]` or `[eigvals]`.
    eigvals: &'b [Buffer<'a>],
    sdim: Buffer<'a>,
    info: Buffer<'a>,
}

fn gees_typed<T: Gees>(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    out: Outputs<'_, '_>,
    [jobvs, sort]: [c_char; 2],
) -> Result<()> {
    // The other results: x_out, schur_vectors, selected_eigvals, info.
    let shape = expect_eigenvalues::<T>(&x, out.eigvals, T::EIGVALS, T::RESULTS, 4)?;
    let batch_dims = shape.batch_dims(&x);
    let n = shape.rows;
    out.schur_vectors.expect_dtype(T::DTYPE)?;
    out.schur_vectors.expect_dims(x.dims())?;
    for b in [&out.sdim, &out.info] {
        b.expect_dtype(DataType::S32)?;
        b.expect_dims(batch_dims)?;
    }
    let call = Call {
        jobvs,
        sort,
        n: lapack_dim(&x, n)?,
        ld: lapack_dim(&x, n.max(1))?,
    };
    x.copy_into(&out.x_out)?;
    // SAFETY: `x` is no longer read; the results are distinct buffers.
    let (a, vs, sdim, info) = unsafe {
        (
            out.x_out.as_mut_slice::<T>()?,
            out.schur_vectors.as_mut_slice::<T>()?,
            out.sdim.as_mut_slice::<i32>()?,
            out.info.as_mut_slice::<i32>()?,
        )
    };
    // jax ignores the Schur vectors it did not ask for, but they should not be uninitialized
    // memory.
    if jobvs as u8 == b'N' {
        vs.fill(T::default());
    }
    if shape.batch == 0 {
        return Ok(());
    }
    if n == 0 {
        // Nothing to compute (LAPACK's quick return: no eigenvalue selected).
        sdim.fill(0);
        info.fill(0);
        return Ok(());
    }
    let gees = T::routine()?;
    // SAFETY: a query reads only the scalar arguments and writes `work[0]` and `info`.
    let lwork =
        query_lwork::<T>(|work, lwork, info| unsafe { T::query(gees, &call, work, lwork, info) })?;
    let mut eigvals = [SharedMut(null_mut()); 2];
    for (slot, w) in eigvals.iter_mut().zip(out.eigvals) {
        // SAFETY: the result is written by one task per matrix, below.
        *slot = SharedMut(unsafe { w.as_mut_slice::<T>()? }.as_mut_ptr());
    }
    let (a, vs, sdim, info) = (
        SharedMut(a.as_mut_ptr()),
        SharedMut(vs.as_mut_ptr()),
        SharedMut(sdim.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    let matrix_len = shape.matrix_len();
    // Roughly the Hessenberg reduction and QR iterations.
    let flops = n.saturating_pow(3).saturating_mul(10);
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut ws = T::workspace(&call, lwork);
        for b in range {
            // SAFETY: matrix `b` of each result is written by this task alone, within the
            // shapes checked above; the workspace has the sizes LAPACK asked for.
            unsafe {
                let mut w = [null_mut(); 2];
                for (w, base) in w.iter_mut().zip(&eigvals[..T::EIGVALS]) {
                    *w = base.at(b * n);
                }
                let matrix = Matrix {
                    a: a.at(b * matrix_len),
                    vs: vs.at(b * matrix_len),
                    w,
                    sdim: sdim.at(b),
                    info: info.at(b),
                };
                T::gees(gees, &call, &matrix, &mut ws);
            }
        }
        Ok(())
    })
}

/// The scalar arguments of every `?gees` call of one batch.
struct Call {
    jobvs: c_char,
    sort: c_char,
    n: i32,
    /// `lda` and `ldvs`: `max(1, n)`.
    ld: i32,
}

/// One matrix's results.
struct Matrix<T> {
    a: *mut T,
    vs: *mut T,
    /// `[wr, wi]`, or `[w, null]`.
    w: [*mut T; 2],
    sdim: *mut i32,
    info: *mut i32,
}

/// Scratch for one chunk of the batch.
struct Workspace<T: Gees> {
    work: Vec<T>,
    lwork: i32,
    /// Complex input: `n` reals.
    rwork: Vec<Real<T>>,
    /// LAPACK logicals, `n` of them (referenced only when sorting).
    bwork: Vec<i32>,
}

/// `?gees` for one scalar type: real routines return the eigenvalues as two arrays, complex
/// ones as one, and take a real workspace.
trait Gees: Scalar {
    type Routine: Copy + Send + Sync;
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
    /// # Safety
    /// The pointers must be valid for the shapes in `call`, `ws` from `workspace`.
    unsafe fn gees(f: Self::Routine, call: &Call, matrix: &Matrix<Self>, ws: &mut Workspace<Self>);
}

macro_rules! gees_real {
    ($($t:ty),*) => {$(
        impl Gees for $t {
            type Routine = GeesReal<$t>;
            const EIGVALS: usize = 2;
            const RESULTS: &'static str =
                "x_out, schur_vectors, eigvals_real, eigvals_imag, selected_eigvals, info";

            fn routine() -> Result<Self::Routine> {
                routine(<$t as RealLapack>::gees())
            }

            fn workspace(c: &Call, lwork: i32) -> Workspace<Self> {
                Workspace {
                    work: vec![0.0; lwork as usize],
                    lwork,
                    rwork: Vec::new(),
                    bwork: vec![0; c.n as usize],
                }
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Call,
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

            unsafe fn gees(f: Self::Routine, c: &Call, m: &Matrix<Self>, ws: &mut Workspace<Self>) {
                f(
                    &c.jobvs, &c.sort, null_mut(), &c.n, m.a, &c.ld, m.sdim, m.w[0], m.w[1],
                    m.vs, &c.ld, ws.work.as_mut_ptr(), &ws.lwork, ws.bwork.as_mut_ptr(), m.info,
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
            const EIGVALS: usize = 1;
            const RESULTS: &'static str =
                "x_out, schur_vectors, eigvals, selected_eigvals, info";

            fn routine() -> Result<Self::Routine> {
                routine(<Complex<$t> as ComplexLapack>::gees())
            }

            fn workspace(c: &Call, lwork: i32) -> Workspace<Self> {
                let n = c.n as usize;
                Workspace {
                    work: vec![Complex::default(); lwork as usize],
                    lwork,
                    rwork: vec![0.0; n],
                    bwork: vec![0; n],
                }
            }

            unsafe fn query(
                f: Self::Routine,
                c: &Call,
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

            unsafe fn gees(f: Self::Routine, c: &Call, m: &Matrix<Self>, ws: &mut Workspace<Self>) {
                f(
                    &c.jobvs, &c.sort, null_mut(), &c.n, m.a, &c.ld, m.sdim, m.w[0], m.vs,
                    &c.ld, ws.work.as_mut_ptr(), &ws.lwork, ws.rwork.as_mut_ptr(),
                    ws.bwork.as_mut_ptr(), m.info,
                )
            }
        }
    )*};
}
gees_complex!(f32, f64);
