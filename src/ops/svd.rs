//! Singular value decomposition, jaxlib's `lapack_?gesdd_ffi` and `lapack_?gesvd_ffi`
//! contract (the same for both): column-major `[..., m, n]` in (overwritten: it aliases result
//! 0), real singular values `[..., min(m, n)]`, `u` `[..., m, m or k]`, `vt` `[..., n or k, n]`
//! and S32 `info` `[...]` out. Attribute `mode`: u8 'A' (full U, V^T), 'S' (the first k
//! columns/rows) or 'N' (singular values only; `u` and `vt` are still passed, and `ldvt` is
//! `vt`'s row count).
//! - `gesdd` (divide and conquer): jax's default CPU SVD.
//! - `gesvd` (QR iteration, `jobu = jobvt = mode`): `SvdAlgorithm.QR`.

use crate::ffi::{Buffer, DataType, Error, MatrixBatch, NativeType, Result, ThreadPool};
use crate::ffi_handler;
use crate::ops::{char_attr, for_each_chunk, lapack_dim, routine, SharedMut};
use crate::ops::{dispatch_lapack, Scalar};
use ferrax_cpu_fallback::{ComplexLapack, GesddComplex, GesddReal, Lapack, Real, RealLapack};
use ferrax_cpu_fallback::{GesvdComplex, GesvdReal};
use num_complex::Complex;
use std::ffi::{c_char, CStr};

pub const GESDD_TARGET: &CStr = c"ferrax_gesdd";
pub const GESVD_TARGET: &CStr = c"ferrax_gesvd";

ffi_handler! {
    /// SVD on the host through LAPACK's `?gesdd`, batch split across XLA's thread pool.
    pub fn ferrax_cpu_gesdd = GESDD_TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret s: Buffer;
    ret u: Buffer;
    ret vt: Buffer;
    ret info: Buffer;
    attr mode: u8;
    traits = 0;
    body = gesdd_cpu;
}

ffi_handler! {
    /// SVD on the host through LAPACK's `?gesvd`, batch split across XLA's thread pool.
    pub fn ferrax_cpu_gesvd = GESVD_TARGET;
    ctx pool: ThreadPool;
    arg x: Buffer;
    ret x_out: Buffer;
    ret s: Buffer;
    ret u: Buffer;
    ret vt: Buffer;
    ret info: Buffer;
    attr mode: u8;
    traits = 0;
    body = gesvd_cpu;
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn gesdd_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    s: Buffer<'_>,
    u: Buffer<'_>,
    vt: Buffer<'_>,
    info: Buffer<'_>,
    mode: u8,
) -> Result<()> {
    let outputs = Outputs {
        x_out,
        s,
        u,
        vt,
        info,
    };
    svd_cpu(Driver::Gesdd, pool, x, outputs, mode)
}

#[allow(clippy::too_many_arguments)] // one parameter per operand, as ffi_handler! passes them
fn gesvd_cpu(
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    x_out: Buffer<'_>,
    s: Buffer<'_>,
    u: Buffer<'_>,
    vt: Buffer<'_>,
    info: Buffer<'_>,
    mode: u8,
) -> Result<()> {
    let outputs = Outputs {
        x_out,
        s,
        u,
        vt,
        info,
    };
    svd_cpu(Driver::Gesvd, pool, x, outputs, mode)
}

fn svd_cpu(
    driver: Driver,
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    outputs: Outputs<'_>,
    mode: u8,
) -> Result<()> {
    let job = char_attr("mode", mode, b"ASNO")?;
    if mode == b'O' {
        // As jaxlib: 'O' would overwrite `x` with part of U or V^T, which no lowering asks for.
        return Err(Error::unimplemented(
            "attribute 'mode': 'O' (U or V^T written over the input) is not supported",
        ));
    }
    dispatch_lapack!(x, svd_typed(driver, pool, x, outputs, job))
}

/// The LAPACK driver behind a target: both take the same operands and `mode`.
#[derive(Clone, Copy)]
enum Driver {
    Gesdd,
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

/// The handler's results, in signature order.
struct Outputs<'a> {
    x_out: Buffer<'a>,
    s: Buffer<'a>,
    u: Buffer<'a>,
    vt: Buffer<'a>,
    info: Buffer<'a>,
}

fn svd_typed<T: Svd>(
    driver: Driver,
    pool: ThreadPool<'_>,
    x: Buffer<'_>,
    out: Outputs<'_>,
    job: c_char,
) -> Result<()> {
    let shape = MatrixBatch::of(&x)?;
    let batch_dims = shape.batch_dims(&x);
    let (rows, cols) = (shape.rows, shape.cols);
    let k = rows.min(cols);
    out.s.expect_dtype(<Real<T>>::DTYPE)?;
    out.s.expect_dims(&[batch_dims, &[k as i64]].concat())?;
    // With 'N' LAPACK never touches `u` and `vt`; jax then sizes them by `full_matrices`.
    let (u_shapes, vt_shapes) = match job as u8 {
        b'A' => (vec![[rows, rows]], vec![[cols, cols]]),
        b'S' => (vec![[rows, k]], vec![[k, cols]]),
        _ => (vec![[rows, rows], [rows, k]], vec![[cols, cols], [k, cols]]),
    };
    let [u_rows, u_cols] = expect_matrices::<T>(&out.u, batch_dims, &u_shapes)?;
    let [vt_rows, vt_cols] = expect_matrices::<T>(&out.vt, batch_dims, &vt_shapes)?;
    out.info.expect_dtype(DataType::S32)?;
    out.info.expect_dims(batch_dims)?;
    let call = Call {
        job,
        m: lapack_dim(&x, rows)?,
        n: lapack_dim(&x, cols)?,
        lda: lapack_dim(&x, rows.max(1))?,
        ldu: lapack_dim(&out.u, u_rows.max(1))?,
        ldvt: lapack_dim(&out.vt, vt_rows.max(1))?,
    };
    x.copy_into(&out.x_out)?;
    if shape.batch == 0 {
        return Ok(());
    }
    // SAFETY: `x` is no longer read; the results are distinct buffers.
    let (a, s, u, vt, info) = unsafe {
        (
            out.x_out.as_mut_slice::<T>()?,
            out.s.as_mut_slice::<Real<T>>()?,
            out.u.as_mut_slice::<T>()?,
            out.vt.as_mut_slice::<T>()?,
            out.info.as_mut_slice::<i32>()?,
        )
    };
    if k == 0 {
        // An empty matrix has the empty SVD. LAPACK would return at once and leave U and V^T
        // unwritten, so give what jax's own lowering gives: identity U and V^T.
        info.fill(0);
        fill_identity(u, u_rows, u_cols);
        fill_identity(vt, vt_rows, vt_cols);
        return Ok(());
    }
    let routine = T::routine(driver)?;
    let lwork = optimal_lwork::<T>(driver, routine, &call)?;
    let rwork_len = T::rwork_len(driver, rows, cols, job).ok_or_else(|| {
        x.mismatch(
            "a real workspace that fits in memory".into(),
            format!("shape {:?}", x.dims()),
        )
    })?;
    let iwork_len = driver.iwork_len(k);
    let (a_len, u_len, vt_len) = (shape.matrix_len(), u_rows * u_cols, vt_rows * vt_cols);
    let (a, s, u, vt, info) = (
        SharedMut(a.as_mut_ptr()),
        SharedMut(s.as_mut_ptr()),
        SharedMut(u.as_mut_ptr()),
        SharedMut(vt.as_mut_ptr()),
        SharedMut(info.as_mut_ptr()),
    );
    // Roughly the bidiagonalization's 4mnk flops.
    let flops = a_len.saturating_mul(4 * k).max(1);
    for_each_chunk(&pool, shape.batch, flops, &|range| {
        let mut workspace = Workspace::<T> {
            work: vec![T::default(); lwork as usize],
            rwork: vec![<Real<T>>::default(); rwork_len],
            iwork: vec![0; iwork_len],
        };
        for b in range {
            // SAFETY: matrix `b` of each result is written by this task alone, within the
            // shapes checked above; the workspace has the sizes LAPACK asked for.
            unsafe {
                let matrix = Matrix {
                    a: a.at(b * a_len),
                    s: s.at(b * k),
                    u: u.at(b * u_len),
                    vt: vt.at(b * vt_len),
                    info: info.at(b),
                };
                // OpenBLAS's ?gesdd and ?gesvd never return on Inf input when vectors are
                // asked for (stock jaxlib hangs); report any non-finite matrix as an illegal
                // `a`, as jaxlib's geev does, and jax fills its outputs with NaN (what stock
                // jax gives for the inputs on which LAPACK does return).
                if !std::slice::from_raw_parts(matrix.a, a_len)
                    .iter()
                    .all(|x| x.is_finite())
                {
                    *matrix.info = -driver.a_argument();
                    continue;
                }
                T::svd(routine, &call, &matrix, &mut workspace, lwork);
            }
        }
        Ok(())
    })
}

/// Checks `buffer`'s dtype (`T`) and that its shape is `[batch..., r, c]` for one of the
/// allowed `[r, c]`; returns the matching one.
fn expect_matrices<T: NativeType>(
    buffer: &Buffer<'_>,
    batch_dims: &[i64],
    allowed: &[[usize; 2]],
) -> Result<[usize; 2]> {
    buffer.expect_dtype(T::DTYPE)?;
    let full = |[r, c]: [usize; 2]| [batch_dims, &[r as i64, c as i64]].concat();
    if let Some(&found) = allowed.iter().find(|&&m| buffer.dims() == full(m)) {
        return Ok(found);
    }
    let mut expected: Vec<String> = allowed.iter().map(|&m| format!("{:?}", full(m))).collect();
    expected.dedup();
    Err(buffer.mismatch(
        format!("shape {}", expected.join(" or ")),
        format!("shape {:?}", buffer.dims()),
    ))
}

/// Sets every column-major `rows x cols` matrix in `data` to the identity.
fn fill_identity<T: Scalar>(data: &mut [T], rows: usize, cols: usize) {
    for (i, value) in data.iter_mut().enumerate() {
        let within = i % (rows * cols);
        *value = if within % rows == within / rows {
            T::ONE
        } else {
            T::default()
        };
    }
}

/// The `lwork = -1` query for the batch's matrix shape (the same for every matrix).
fn optimal_lwork<T: Svd>(driver: Driver, routine: Routine<T>, call: &Call) -> Result<i32> {
    let mut query = Workspace::<T> {
        work: vec![T::default()],
        rwork: Vec::new(),
        iwork: Vec::new(),
    };
    let mut info = 0;
    let matrix = Matrix::<T> {
        a: std::ptr::null_mut(),
        s: std::ptr::null_mut(),
        u: std::ptr::null_mut(),
        vt: std::ptr::null_mut(),
        info: &mut info,
    };
    // SAFETY: a workspace query reads only the scalar arguments and writes `work[0]` and
    // `info` (jaxlib passes null matrices too).
    unsafe { T::svd(routine, call, &matrix, &mut query, -1) };
    let lwork = query.work[0].real_f64().ceil();
    if info != 0 || !(1.0..=f64::from(i32::MAX)).contains(&lwork) {
        return Err(Error::internal(format!(
            "{} workspace query failed (info {info}, lwork {lwork})",
            driver.name()
        )));
    }
    Ok(lwork as i32)
}

/// The scalar arguments of every call of one batch (`?gesvd` takes `job` as both `jobu` and
/// `jobvt`).
struct Call {
    job: c_char,
    m: i32,
    n: i32,
    lda: i32,
    ldu: i32,
    ldvt: i32,
}

/// One matrix's operands.
struct Matrix<T: Lapack> {
    a: *mut T,
    s: *mut Real<T>,
    u: *mut T,
    vt: *mut T,
    info: *mut i32,
}

/// LAPACK scratch, allocated once per chunk of the batch.
struct Workspace<T: Lapack> {
    work: Vec<T>,
    rwork: Vec<Real<T>>,
    iwork: Vec<i32>,
}

/// The routine of one driver for `T`, looked up once per call.
#[derive(Clone, Copy)]
enum Routine<T: Svd> {
    Gesdd(T::Gesdd),
    Gesvd(T::Gesvd),
}

/// `?gesdd` and `?gesvd` for one scalar type: the real routines have no `rwork`, the complex
/// ones do.
trait Svd: Scalar {
    type Gesdd: Copy + Send + Sync;
    type Gesvd: Copy + Send + Sync;
    fn routine(driver: Driver) -> Result<Routine<Self>>;
    /// jaxlib's `rwork` length (none for real scalars), or `None` on overflow.
    fn rwork_len(driver: Driver, m: usize, n: usize, job: c_char) -> Option<usize>;
    /// # Safety
    /// The pointers must be valid for the shapes in `call`, the workspace at least as large as
    /// `lwork` (or `lwork` -1 for a query).
    unsafe fn svd(
        f: Routine<Self>,
        call: &Call,
        x: &Matrix<Self>,
        work: &mut Workspace<Self>,
        lwork: i32,
    );
}

macro_rules! svd_real {
    ($($t:ty),*) => {$(
        impl Svd for $t {
            type Gesdd = GesddReal<$t>;
            type Gesvd = GesvdReal<$t>;
            fn routine(driver: Driver) -> Result<Routine<Self>> {
                Ok(match driver {
                    Driver::Gesdd => Routine::Gesdd(routine(<$t as RealLapack>::gesdd())?),
                    Driver::Gesvd => Routine::Gesvd(routine(<$t as RealLapack>::gesvd())?),
                })
            }
            fn rwork_len(_: Driver, _: usize, _: usize, _: c_char) -> Option<usize> {
                Some(0)
            }
            unsafe fn svd(
                f: Routine<Self>,
                c: &Call,
                x: &Matrix<Self>,
                w: &mut Workspace<Self>,
                lwork: i32,
            ) {
                match f {
                    Routine::Gesdd(f) => f(
                        &c.job, &c.m, &c.n, x.a, &c.lda, x.s, x.u, &c.ldu, x.vt, &c.ldvt,
                        w.work.as_mut_ptr(), &lwork, w.iwork.as_mut_ptr(), x.info,
                    ),
                    Routine::Gesvd(f) => f(
                        &c.job, &c.job, &c.m, &c.n, x.a, &c.lda, x.s, x.u, &c.ldu, x.vt, &c.ldvt,
                        w.work.as_mut_ptr(), &lwork, x.info,
                    ),
                }
            }
        }
    )*};
}
svd_real!(f32, f64);

macro_rules! svd_complex {
    ($($t:ty),*) => {$(
        impl Svd for Complex<$t> {
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
            fn rwork_len(driver: Driver, m: usize, n: usize, job: c_char) -> Option<usize> {
                let (mn, mx) = (m.min(n), m.max(n));
                let len = match driver {
                    Driver::Gesvd => mn.checked_mul(5)?,
                    Driver::Gesdd if job as u8 == b'N' => mn.checked_mul(7)?,
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
                c: &Call,
                x: &Matrix<Self>,
                w: &mut Workspace<Self>,
                lwork: i32,
            ) {
                match f {
                    Routine::Gesdd(f) => f(
                        &c.job, &c.m, &c.n, x.a, &c.lda, x.s, x.u, &c.ldu, x.vt, &c.ldvt,
                        w.work.as_mut_ptr(), &lwork, w.rwork.as_mut_ptr(), w.iwork.as_mut_ptr(),
                        x.info,
                    ),
                    Routine::Gesvd(f) => f(
                        &c.job, &c.job, &c.m, &c.n, x.a, &c.lda, x.s, x.u, &c.ldu, x.vt, &c.ldvt,
                        w.work.as_mut_ptr(), &lwork, w.rwork.as_mut_ptr(), x.info,
                    ),
                }
            }
        }
    )*};
}
svd_complex!(f32, f64);
