//! The stable C ABI for compilers that do not run XLA: one exported function per LAPACK-style
//! op and scalar type (`ferrax_dgetrf`, `ferrax_zheevd`, ...) that takes a batch count, plain
//! dimensions, a layout flag and leading dimensions. Each checks its arguments (errors name the
//! C parameter) and calls the family's core from [`crate::linalg`], the one the XLA handlers
//! call, on the caller's memory in its layout and leading dimension, on the C ABI's thread pool;
//! results follow LAPACK's conventions exactly (1-based pivots, per-matrix `info`) in either
//! layout.
//!
//! Every function returns 0 on success and -1 on an invalid argument or failure, with the
//! message in `ferrax_last_error()`. LAPACK's own `info` (singular matrix, no convergence) is
//! written to the `info` array and is not a failure.

use crate::linalg::eig::{self, Geev};
use crate::linalg::eigh::{self, Evd};
use crate::linalg::flags::{Flag, Side, SvdJob, Trans, Uplo, Vectors};
use crate::linalg::matrix::{Batch, InOut, Layout};
use crate::linalg::qr::{self, Geqp3Scalar};
use crate::linalg::schur::{self, Gees};
use crate::linalg::sparse::{self, Csr, Element};
use crate::linalg::svd::{self, Driver, Factors, Svd};
use crate::linalg::tridiagonal_solve::{self, PerturbedScalar};
use crate::linalg::trsm::{self, TrsmFlags};
use crate::linalg::workers::workers;
use crate::linalg::{getrf, hessenberg, potrf, tridiagonal, LapackScalar};
use crate::memory;
use ferrax_cpu_fallback::Real;
use num_complex::Complex;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `layout` values, LAPACKE's `LAPACK_ROW_MAJOR` and `LAPACK_COL_MAJOR`.
pub const FERRAX_ROW_MAJOR: c_int = 101;
pub const FERRAX_COL_MAJOR: c_int = 102;

type Result<T> = std::result::Result<T, String>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// The message of the last failed call on this thread (empty if none failed).
#[no_mangle]
pub extern "C" fn ferrax_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs one C entry point: a failure or panic becomes -1 with its message saved.
pub(crate) fn guard(body: impl FnOnce() -> Result<()>) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|_| Err("internal error: panic in ferrax".to_string()));
    match outcome {
        Ok(()) => 0,
        Err(message) => {
            let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
            LAST_ERROR.with(|e| *e.borrow_mut() = message);
            -1
        }
    }
}

fn size(name: &str, value: i64) -> Result<usize> {
    usize::try_from(value).map_err(|_| format!("{name} = {value}: expected >= 0"))
}

/// A LAPACK character argument, checked here so that errors name the C parameter.
fn flag<F: Flag>(name: &str, value: c_char) -> Result<F> {
    F::from_letter(value as u8)
        .ok_or_else(|| format!("{name} = {}: expected {}", value as u8, F::expected()))
}

/// A batch of `rows x cols` matrices in the caller's layout at `data`, with leading dimension
/// `ld`; consecutive matrices are `ld * cols` (column-major) or `ld * rows` (row-major)
/// elements apart.
struct Matrices<T> {
    row_major: bool,
    batch: usize,
    rows: usize,
    cols: usize,
    ld: usize,
    data: *mut T,
}

impl<T: Copy + Default> Matrices<T> {
    fn new(
        name: &str,
        layout: c_int,
        [batch, rows, cols]: [usize; 3],
        data: *mut T,
        ld: i32,
    ) -> Result<Self> {
        let row_major = match layout {
            FERRAX_ROW_MAJOR => true,
            FERRAX_COL_MAJOR => false,
            other => {
                return Err(format!(
                    "layout = {other}: expected FERRAX_ROW_MAJOR (101) or FERRAX_COL_MAJOR (102)"
                ))
            }
        };
        let minimum = if row_major { cols } else { rows }.max(1);
        let ld = usize::try_from(ld)
            .ok()
            .filter(|&ld| ld >= minimum)
            .ok_or_else(|| format!("leading dimension of {name} = {ld}: expected >= {minimum}"))?;
        // The memory the caller vouches for: `batch` matrices `ld` apart in each line.
        let lines = if row_major { rows } else { cols };
        elements::<T>(name, &[batch, ld, lines])?;
        // An empty batch needs no pointer (its other extents may be anything: no product).
        if data.is_null() && ![batch, rows, cols].contains(&0) {
            return Err(format!("{name} is null"));
        }
        Ok(Matrices {
            row_major,
            batch,
            rows,
            cols,
            ld,
            data,
        })
    }

    /// The batch as the cores take it, where the caller keeps it.
    fn view(&self) -> Batch<T> {
        let layout = if self.row_major {
            Layout::RowMajor
        } else {
            Layout::ColumnMajor
        };
        // SAFETY: `new` checked the pointer; the caller promised `ld` and the batch.
        unsafe {
            Batch::with_ld(
                self.data,
                [self.batch, self.rows, self.cols],
                layout,
                self.ld,
            )
        }
    }
}

/// The caller's contiguous array `name` of `len` elements, for a result.
///
/// # Safety
/// `data` is null or points to `len` writable elements that nothing else touches meanwhile.
unsafe fn output<'a, T>(name: &str, data: *mut T, shape: &[usize]) -> Result<&'a mut [T]> {
    let len = elements::<T>(name, shape)?;
    if len == 0 {
        return Ok(&mut []);
    }
    if data.is_null() {
        return Err(format!("{name} is null"));
    }
    Ok(std::slice::from_raw_parts_mut(data, len))
}

/// The caller's contiguous array `name` of `len` elements, for an operand.
///
/// # Safety
/// `data` is null or points to `len` elements that nothing writes meanwhile.
unsafe fn input<'a, T>(name: &str, data: *const T, shape: &[usize]) -> Result<&'a [T]> {
    let len = elements::<T>(name, shape)?;
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(format!("{name} is null"));
    }
    Ok(std::slice::from_raw_parts(data, len))
}

/// The number of elements of array `name` of `shape`, checked to be memory a caller can have:
/// at most `isize::MAX` bytes, as Rust's slices require.
fn elements<T>(name: &str, shape: &[usize]) -> Result<usize> {
    let factors: Vec<usize> = shape
        .iter()
        .copied()
        .chain([std::mem::size_of::<T>()])
        .collect();
    match (
        memory::product(name, shape),
        memory::product(name, &factors),
    ) {
        (Ok(elements), Ok(bytes)) if isize::try_from(bytes).is_ok() => Ok(elements),
        _ => Err(format!(
            "{name}: {} elements of {} bytes are past the address space",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" x "),
            std::mem::size_of::<T>()
        )),
    }
}

/// A core's result as the C ABI reports it.
fn core(result: crate::error::Result<()>) -> Result<()> {
    result.map_err(|error| error.message)
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn getrf<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    m: i32,
    n: i32,
    a: *mut T,
    lda: i32,
    ipiv: *mut i32,
    info: *mut i32,
) -> Result<()> {
    let (batch, m, n) = (
        size("batch", batch)?,
        size("m", m.into())?,
        size("n", n.into())?,
    );
    let a = Matrices::new("a", layout, [batch, m, n], a, lda)?.view();
    let ipiv = output("ipiv", ipiv, &[batch, m.min(n)])?;
    let info = output("info", info, &[batch])?;
    core(getrf::getrf(workers(), InOut::in_place(a), ipiv, info))
}

pub(crate) unsafe fn potrf<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    uplo: c_char,
    n: i32,
    a: *mut T,
    lda: i32,
    info: *mut i32,
) -> Result<()> {
    let uplo = flag::<Uplo>("uplo", uplo)?;
    let (batch, n) = (size("batch", batch)?, size("n", n.into())?);
    let a = Matrices::new("a", layout, [batch, n, n], a, lda)?.view();
    let info = output("info", info, &[batch])?;
    core(potrf::potrf(workers(), InOut::in_place(a), uplo, info))
}

pub(crate) unsafe fn geqrf<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    m: i32,
    n: i32,
    a: *mut T,
    lda: i32,
    tau: *mut T,
) -> Result<()> {
    let (batch, m, n) = (
        size("batch", batch)?,
        size("m", m.into())?,
        size("n", n.into())?,
    );
    let a = Matrices::new("a", layout, [batch, m, n], a, lda)?.view();
    let tau = output("tau", tau, &[batch, m.min(n)])?;
    core(qr::geqrf(workers(), InOut::in_place(a), tau))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn orgqr<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    m: i32,
    n: i32,
    k: i32,
    a: *mut T,
    lda: i32,
    tau: *const T,
) -> Result<()> {
    let (batch, m, n, k) = (
        size("batch", batch)?,
        size("m", m.into())?,
        size("n", n.into())?,
        size("k", k.into())?,
    );
    let a = Matrices::new("a", layout, [batch, m, n], a, lda)?;
    let tau = input("tau", tau, &[batch, k])?;
    if m < n || k > n {
        return Err(format!("m = {m}, n = {n}, k = {k}: expected m >= n >= k"));
    }
    core(qr::orgqr(workers(), InOut::in_place(a.view()), k, tau))
}

#[allow(clippy::too_many_arguments)] // the BLAS argument list
pub(crate) unsafe fn trsm<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    side: c_char,
    uplo: c_char,
    trans: c_char,
    diag: c_char,
    m: i32,
    n: i32,
    a: *const T,
    lda: i32,
    b: *mut T,
    ldb: i32,
) -> Result<()> {
    let flags = TrsmFlags {
        side: flag("side", side)?,
        uplo: flag("uplo", uplo)?,
        trans: flag("trans", trans)?,
        diag: flag("diag", diag)?,
    };
    let (batch, m, n) = (
        size("batch", batch)?,
        size("m", m.into())?,
        size("n", n.into())?,
    );
    let k = if flags.side == Side::Right { n } else { m };
    let a = Matrices::new("a", layout, [batch, k, k], a.cast_mut(), lda)?.view();
    let b = Matrices::new("b", layout, [batch, m, n], b, ldb)?.view();
    core(trsm::trsm(workers(), flags, a, InOut::in_place(b)))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn gesdd<T: Svd>(
    layout: c_int,
    batch: i64,
    jobz: c_char,
    m: i32,
    n: i32,
    a: *mut T,
    lda: i32,
    s: *mut Real<T>,
    u: *mut T,
    ldu: i32,
    vt: *mut T,
    ldvt: i32,
    info: *mut i32,
) -> Result<()> {
    let matrices = (a, lda, s, u, ldu, vt, ldvt, info);
    svd(Driver::Gesdd, layout, batch, jobz, m, n, matrices)
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn gesvd<T: Svd>(
    layout: c_int,
    batch: i64,
    jobz: c_char,
    m: i32,
    n: i32,
    a: *mut T,
    lda: i32,
    s: *mut Real<T>,
    u: *mut T,
    ldu: i32,
    vt: *mut T,
    ldvt: i32,
    info: *mut i32,
) -> Result<()> {
    let matrices = (a, lda, s, u, ldu, vt, ldvt, info);
    svd(Driver::Gesvd, layout, batch, jobz, m, n, matrices)
}

/// The SVD operands of the C functions: `a, lda, s, u, ldu, vt, ldvt, info`.
type SvdOperands<T> = (
    *mut T,
    i32,
    *mut Real<T>,
    *mut T,
    i32,
    *mut T,
    i32,
    *mut i32,
);

/// `gesdd` and `gesvd` share their contract; only the driver differs. `a` is LAPACK's
/// workspace, so the core works on a copy of each matrix and the caller's is left as it was.
unsafe fn svd<T: Svd>(
    driver: Driver,
    layout: c_int,
    batch: i64,
    jobz: c_char,
    m: i32,
    n: i32,
    (a, lda, s, u, ldu, vt, ldvt, info): SvdOperands<T>,
) -> Result<()> {
    // 'O' (U or V^T written over `a`) is not offered.
    let job = flag::<SvdJob>("jobz", jobz)
        .ok()
        .filter(|&job| job != SvdJob::Overwrite)
        .ok_or_else(|| format!("jobz = {}: expected one of 'A', 'S', 'N'", jobz as u8))?;
    let (batch, m, n) = (
        size("batch", batch)?,
        size("m", m.into())?,
        size("n", n.into())?,
    );
    let k = m.min(n);
    let a = Matrices::new("a", layout, [batch, m, n], a, lda)?.view();
    let s = output("s", s, &[batch, k])?;
    let info = output("info", info, &[batch])?;
    // jobz 'A': U is m x m and V^T n x n; 'S': m x k and k x n; 'N': neither is computed.
    let (u_cols, vt_rows) = if job == SvdJob::All { (m, n) } else { (k, k) };
    let (u, vt) = if job == SvdJob::None {
        (None, None)
    } else {
        (
            Some(Matrices::new("u", layout, [batch, m, u_cols], u, ldu)?.view()),
            Some(Matrices::new("vt", layout, [batch, vt_rows, n], vt, ldvt)?.view()),
        )
    };
    let factors = Factors { s, u, vt, info };
    core(svd::svd(workers(), driver, job, a, None, factors))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn syevd<T: Evd>(
    layout: c_int,
    batch: i64,
    jobz: c_char,
    uplo: c_char,
    n: i32,
    a: *mut T,
    lda: i32,
    w: *mut Real<T>,
    info: *mut i32,
) -> Result<()> {
    let uplo = flag::<Uplo>("uplo", uplo)?;
    let jobz = flag::<Vectors>("jobz", jobz)?;
    let (batch, n) = (size("batch", batch)?, size("n", n.into())?);
    let a = Matrices::new("a", layout, [batch, n, n], a, lda)?.view();
    let w = output("w", w, &[batch, n])?;
    let info = output("info", info, &[batch])?;
    core(eigh::eigh(
        workers(),
        InOut::in_place(a),
        uplo,
        jobz,
        w,
        info,
    ))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn gehrd<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    n: i32,
    ilo: i32,
    ihi: i32,
    a: *mut T,
    lda: i32,
    tau: *mut T,
    info: *mut i32,
) -> Result<()> {
    let (batch, n) = (size("batch", batch)?, size("n", n.into())?);
    let order = n as i32;
    let ilos = hessenberg::ilo_range(order);
    if !ilos.contains(&ilo) {
        return Err(format!(
            "ilo = {ilo}: expected 1 <= ilo <= max(1, n) = {}",
            ilos.end()
        ));
    }
    let ihis = hessenberg::ihi_range(order, ilo);
    if !ihis.contains(&ihi) {
        return Err(format!(
            "ihi = {ihi}: expected min(ilo, n) = {} <= ihi <= n = {n}",
            ihis.start()
        ));
    }
    let a = Matrices::new("a", layout, [batch, n, n], a, lda)?.view();
    let tau = output("tau", tau, &[batch, n.saturating_sub(1)])?;
    let info = output("info", info, &[batch])?;
    core(hessenberg::gehrd(
        workers(),
        InOut::in_place(a),
        ilo,
        ihi,
        tau,
        info,
    ))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn sytrd<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    uplo: c_char,
    n: i32,
    a: *mut T,
    lda: i32,
    d: *mut Real<T>,
    e: *mut Real<T>,
    tau: *mut T,
    info: *mut i32,
) -> Result<()> {
    let uplo = flag::<Uplo>("uplo", uplo)?;
    let (batch, n) = (size("batch", batch)?, size("n", n.into())?);
    let a = Matrices::new("a", layout, [batch, n, n], a, lda)?.view();
    let off = n.saturating_sub(1);
    let d = output("d", d, &[batch, n])?;
    let e = output("e", e, &[batch, off])?;
    let tau = output("tau", tau, &[batch, off])?;
    let info = output("info", info, &[batch])?;
    core(tridiagonal::sytrd(
        workers(),
        InOut::in_place(a),
        uplo,
        d,
        e,
        tau,
        info,
    ))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn ormqr<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    side: c_char,
    trans: c_char,
    m: i32,
    n: i32,
    k: i32,
    a: *const T,
    lda: i32,
    tau: *const T,
    c: *mut T,
    ldc: i32,
) -> Result<()> {
    let side = flag::<Side>("side", side)?;
    // As LAPACK: complex Q has no plain transpose ('C' is its conjugate transpose); 'T' and
    // 'C' of real Q are both Qᵀ.
    let trans = match flag::<Trans>("trans", trans)? {
        Trans::Transpose if T::DTYPE.is_complex() => {
            return Err(format!("trans = {}: expected one of 'N', 'C'", b'T'))
        }
        Trans::No => Trans::No,
        _ => Trans::Transpose,
    };
    let (batch, m, n, k) = (
        size("batch", batch)?,
        size("m", m.into())?,
        size("n", n.into())?,
        size("k", k.into())?,
    );
    let q_order = if side == Side::Left { m } else { n };
    let a = Matrices::new("a", layout, [batch, q_order, k], a.cast_mut(), lda)?;
    let tau = input("tau", tau, &[batch, k])?;
    let c = Matrices::new("c", layout, [batch, m, n], c, ldc)?;
    if k > q_order {
        return Err(format!("k = {k}: expected <= {q_order}, the order of Q"));
    }
    let c = InOut::in_place(c.view());
    core(qr::ormqr(workers(), side, trans, a.view(), k, tau, c))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn geqp3<T: Geqp3Scalar>(
    layout: c_int,
    batch: i64,
    m: i32,
    n: i32,
    a: *mut T,
    lda: i32,
    jpvt: *mut i32,
    tau: *mut T,
) -> Result<()> {
    let (batch, m, n) = (
        size("batch", batch)?,
        size("m", m.into())?,
        size("n", n.into())?,
    );
    let a = Matrices::new("a", layout, [batch, m, n], a, lda)?.view();
    let jpvt = output("jpvt", jpvt, &[batch, n])?;
    let tau = output("tau", tau, &[batch, m.min(n)])?;
    core(qr::geqp3(workers(), InOut::in_place(a), jpvt, tau))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn gtsv<T: LapackScalar>(
    layout: c_int,
    batch: i64,
    n: i32,
    nrhs: i32,
    dl: *mut T,
    d: *mut T,
    du: *mut T,
    b: *mut T,
    ldb: i32,
    info: *mut i32,
) -> Result<()> {
    let (batch, n, nrhs) = (
        size("batch", batch)?,
        size("n", n.into())?,
        size("nrhs", nrhs.into())?,
    );
    let diagonals = [
        output("dl", dl, &[batch, n])?,
        output("d", d, &[batch, n])?,
        output("du", du, &[batch, n])?,
    ];
    let info = output("info", info, &[batch])?;
    let b = Matrices::new("b", layout, [batch, n, nrhs], b, ldb)?.view();
    core(tridiagonal_solve::gtsv(
        workers(),
        diagonals,
        InOut::in_place(b),
        info,
    ))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn geev<T: Geev>(
    layout: c_int,
    batch: i64,
    jobvl: c_char,
    jobvr: c_char,
    n: i32,
    a: *mut T,
    lda: i32,
    w: *mut T::Complex,
    vl: *mut T::Complex,
    ldvl: i32,
    vr: *mut T::Complex,
    ldvr: i32,
    info: *mut i32,
) -> Result<()> {
    let left = flag::<Vectors>("jobvl", jobvl)?;
    let right = flag::<Vectors>("jobvr", jobvr)?;
    let (batch, n) = (size("batch", batch)?, size("n", n.into())?);
    let a = Matrices::new("a", layout, [batch, n, n], a, lda)?.view();
    let w = eig::Eigenvalues::Complex(output("w", w, &[batch, n])?);
    let info = output("info", info, &[batch])?;
    let wanted = |job: Vectors, name, data, ld| -> Result<Option<Batch<_>>> {
        if job.computed() {
            Ok(Some(
                Matrices::new(name, layout, [batch, n, n], data, ld)?.view(),
            ))
        } else {
            Ok(None)
        }
    };
    let (vl, vr) = (
        wanted(left, "vl", vl, ldvl)?,
        wanted(right, "vr", vr, ldvr)?,
    );
    core(eig::geev(workers(), a, w, vl, vr, info))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn gees<T: Gees>(
    layout: c_int,
    batch: i64,
    jobvs: c_char,
    n: i32,
    a: *mut T,
    lda: i32,
    w: *mut T::Complex,
    vs: *mut T,
    ldvs: i32,
    info: *mut i32,
) -> Result<()> {
    let jobvs = flag::<Vectors>("jobvs", jobvs)?;
    let (batch, n) = (size("batch", batch)?, size("n", n.into())?);
    let a = Matrices::new("a", layout, [batch, n, n], a, lda)?.view();
    let w = eig::Eigenvalues::Complex(output("w", w, &[batch, n])?);
    let info = output("info", info, &[batch])?;
    let vs = if jobvs.computed() {
        Some(Matrices::new("vs", layout, [batch, n, n], vs, ldvs)?.view())
    } else {
        None
    };
    // LAPACK's `sdim`, the number of eigenvalues selected by sorting, which is not offered.
    let mut sdim = memory::vec_of(batch, 0).map_err(|error| error.message)?;
    core(schur::gees(
        workers(),
        InOut::in_place(a),
        w,
        vs,
        &mut sdim,
        info,
    ))
}

#[allow(clippy::too_many_arguments)] // the LAPACK argument list
pub(crate) unsafe fn gtsv_perturbed<T: PerturbedScalar>(
    layout: c_int,
    batch: i64,
    n: i32,
    nrhs: i32,
    dl: *const T,
    d: *const T,
    du: *const T,
    b: *mut T,
    ldb: i32,
) -> Result<()> {
    let (batch, n, nrhs) = (
        size("batch", batch)?,
        size("n", n.into())?,
        size("nrhs", nrhs.into())?,
    );
    let diagonals = [
        input("dl", dl, &[batch, n])?,
        input("d", d, &[batch, n])?,
        input("du", du, &[batch, n])?,
    ];
    let b = Matrices::new("b", layout, [batch, n, nrhs], b, ldb)?.view();
    core(tridiagonal_solve::solve_perturbed(
        workers(),
        diagonals,
        InOut::in_place(b),
    ))
}

#[allow(clippy::too_many_arguments)] // the CSR arrays and the dense operand
pub(crate) unsafe fn csrmm<T: LapackScalar + Element>(
    rows: i64,
    cols: i64,
    nnz: i64,
    data: *const T,
    indptr: *const i32,
    indices: *const i32,
    n: i64,
    rhs: *const T,
    out: *mut T,
) -> Result<()> {
    let (rows, cols, nnz, n) = (
        size("rows", rows)?,
        size("cols", cols)?,
        size("nnz", nnz)?,
        size("n", n)?,
    );
    let out_len = rows
        .checked_mul(n)
        .ok_or_else(|| format!("rows x n = {rows} x {n} is too large"))?;
    let rhs_len = cols
        .checked_mul(n)
        .ok_or_else(|| format!("cols x n = {cols} x {n} is too large"))?;
    if out_len == 0 {
        // Nothing to compute: no row of `out`, or no column.
        return Ok(());
    }
    let csr = Csr {
        data: input("data", data, &[nnz])?,
        outer: input("indptr", indptr, &[rows + 1])?,
        inner: input("indices", indices, &[nnz])?,
        cols,
    };
    let rhs = input("rhs", rhs, &[rhs_len])?;
    let out = output("out", out, &[out_len])?;
    // Computed aside, so that a bad index (an error) leaves `out` as it was.
    let mut product = memory::vec_of(out_len, T::default()).map_err(|error| error.message)?;
    core(sparse::csr_times_dense(
        workers(),
        csr,
        rhs,
        n,
        &mut product,
    ))?;
    out.copy_from_slice(&product);
    Ok(())
}

/// One exported C function of the ABI: its name and its parameters as (name, Rust type), for
/// the generated header (`include/ferrax.h`).
pub struct CFunction {
    pub name: &'static str,
    /// The C type of `T` in this function (`float`, `double`, `ferrax_complex_float`, ...).
    pub scalar: &'static str,
    pub params: &'static [(&'static str, &'static str)],
    pub doc: &'static str,
}

/// Exports `generic::<T>` once per LAPACK scalar under the four given names, and lists each in
/// [`C_FUNCTIONS`]. Parameter types may use `T` (the scalar), `R` (its real type) and `C`
/// (the complex type of that precision).
macro_rules! c_functions {
    ($(
        $(#[doc = $doc:literal])*
        $generic:ident => [$s:ident, $d:ident, $c:ident, $z:ident]($($arg:ident: $ty:ty),* $(,)?);
    )*) => {
        $(
            c_functions!(@one $generic, $s, f32, f32, $($arg: $ty),*);
            c_functions!(@one $generic, $d, f64, f64, $($arg: $ty),*);
            c_functions!(@one $generic, $c, Complex<f32>, f32, $($arg: $ty),*);
            c_functions!(@one $generic, $z, Complex<f64>, f64, $($arg: $ty),*);
        )*
        /// Every function of the C ABI, in header order.
        pub static C_FUNCTIONS: &[CFunction] = &[$(
            c_functions!(@entry $s, "float", [$($doc)*], $($arg: $ty),*),
            c_functions!(@entry $d, "double", [$($doc)*], $($arg: $ty),*),
            c_functions!(@entry $c, "ferrax_complex_float", [$($doc)*], $($arg: $ty),*),
            c_functions!(@entry $z, "ferrax_complex_double", [$($doc)*], $($arg: $ty),*),
        )*];
    };
    (@one $generic:ident, $name:ident, $t:ty, $r:ty, $($arg:ident: $ty:ty),*) => {
        #[allow(non_snake_case)]
        mod $name {
            use super::*;
            type T = $t;
            // Not every op has real- or complex-typed parameters.
            #[allow(dead_code)]
            type R = $r;
            #[allow(dead_code)]
            type C = Complex<$r>;
            /// # Safety
            /// The pointers must be valid for the dimensions given, as in LAPACK.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                guard(|| {
                    $generic::<T>($($arg),*)
                        .map_err(|message| format!("{}: {message}", stringify!($name)))
                })
            }
        }
    };
    (@entry $name:ident, $scalar:literal, [$($doc:literal)*], $($arg:ident: $ty:ty),*) => {
        CFunction {
            name: stringify!($name),
            scalar: $scalar,
            params: &[$((stringify!($arg), stringify!($ty))),*],
            doc: concat!($($doc, "\n"),*),
        }
    };
}

c_functions! {
    /// LU with partial pivoting of `batch` m x n matrices: `a` is overwritten by L and U,
    /// `ipiv` (batch x min(m, n)) gets LAPACK's 1-based row swaps, `info` one code per matrix.
    getrf => [ferrax_sgetrf, ferrax_dgetrf, ferrax_cgetrf, ferrax_zgetrf](
        layout: c_int, batch: i64, m: i32, n: i32, a: *mut T, lda: i32, ipiv: *mut i32,
        info: *mut i32);
    /// Cholesky factorization of `batch` n x n matrices: the `uplo` ('L' or 'U') triangle of
    /// `a` is overwritten by the factor.
    potrf => [ferrax_spotrf, ferrax_dpotrf, ferrax_cpotrf, ferrax_zpotrf](
        layout: c_int, batch: i64, uplo: c_char, n: i32, a: *mut T, lda: i32, info: *mut i32);
    /// Householder QR of `batch` m x n matrices: R and the reflectors overwrite `a`, their
    /// scales go to `tau` (batch x min(m, n)).
    geqrf => [ferrax_sgeqrf, ferrax_dgeqrf, ferrax_cgeqrf, ferrax_zgeqrf](
        layout: c_int, batch: i64, m: i32, n: i32, a: *mut T, lda: i32, tau: *mut T);
    /// Forms the m x n matrices Q (m >= n) from the `k` reflectors of `geqrf` in `a` and `tau`
    /// (batch x k).
    orgqr => [ferrax_sorgqr, ferrax_dorgqr, ferrax_cungqr, ferrax_zungqr](
        layout: c_int, batch: i64, m: i32, n: i32, k: i32, a: *mut T, lda: i32, tau: *const T);
    /// Solves op(A) X = B (`side` 'L') or X op(A) = B ('R') for triangular A; X overwrites `b`.
    /// `trans` is 'N', 'T' or 'C'; `diag` 'U' for a unit diagonal, else 'N'.
    trsm => [ferrax_strsm, ferrax_dtrsm, ferrax_ctrsm, ferrax_ztrsm](
        layout: c_int, batch: i64, side: c_char, uplo: c_char, trans: c_char, diag: c_char,
        m: i32, n: i32, a: *const T, lda: i32, b: *mut T, ldb: i32);
    /// SVD (divide and conquer) of `batch` m x n matrices: singular values in `s`
    /// (batch x min(m, n)); `jobz` 'A' gives U m x m and V^T n x n, 'S' m x min(m, n) and
    /// min(m, n) x n, 'N' neither (`u` and `vt` may be null). `a` is not modified.
    gesdd => [ferrax_sgesdd, ferrax_dgesdd, ferrax_cgesdd, ferrax_zgesdd](
        layout: c_int, batch: i64, jobz: c_char, m: i32, n: i32, a: *mut T, lda: i32,
        s: *mut R, u: *mut T, ldu: i32, vt: *mut T, ldvt: i32, info: *mut i32);
    /// Eigendecomposition of `batch` symmetric (Hermitian) n x n matrices from their `uplo`
    /// triangle: ascending eigenvalues in `w` (batch x n); with `jobz` 'V' the eigenvectors
    /// overwrite `a` (as columns).
    syevd => [ferrax_ssyevd, ferrax_dsyevd, ferrax_cheevd, ferrax_zheevd](
        layout: c_int, batch: i64, jobz: c_char, uplo: c_char, n: i32, a: *mut T, lda: i32,
        w: *mut R, info: *mut i32);
    /// Reduces `batch` n x n matrices to upper Hessenberg form H = Q^H A Q, acting on rows and
    /// columns `ilo..=ihi` (1-based; 1 and n for the whole matrix): H and the reflectors
    /// overwrite `a`, their scales go to `tau` (batch x (n - 1)).
    gehrd => [ferrax_sgehrd, ferrax_dgehrd, ferrax_cgehrd, ferrax_zgehrd](
        layout: c_int, batch: i64, n: i32, ilo: i32, ihi: i32, a: *mut T, lda: i32, tau: *mut T,
        info: *mut i32);
    /// Reduces `batch` symmetric (Hermitian) n x n matrices, from their `uplo` triangle, to real
    /// tridiagonal form T = Q^H A Q: diagonal `d` (batch x n), off-diagonal `e` and reflector
    /// scales `tau` (batch x (n - 1)); the reflectors overwrite that triangle of `a`.
    sytrd => [ferrax_ssytrd, ferrax_dsytrd, ferrax_chetrd, ferrax_zhetrd](
        layout: c_int, batch: i64, uplo: c_char, n: i32, a: *mut T, lda: i32, d: *mut R, e: *mut R,
        tau: *mut T, info: *mut i32);
    /// SVD (QR iteration) with the arguments of `gesdd`; slower but sometimes more accurate
    /// for tiny singular values.
    gesvd => [ferrax_sgesvd, ferrax_dgesvd, ferrax_cgesvd, ferrax_zgesvd](
        layout: c_int, batch: i64, jobz: c_char, m: i32, n: i32, a: *mut T, lda: i32,
        s: *mut R, u: *mut T, ldu: i32, vt: *mut T, ldvt: i32, info: *mut i32);
    /// Eigenvalues (`w`, complex, batch x n) and optionally left (`jobvl` 'V') and right
    /// (`jobvr` 'V') eigenvectors, as complex columns, of `batch` general n x n matrices; `a`
    /// is not modified. Matrices with Inf or NaN entries get info -4.
    geev => [ferrax_sgeev, ferrax_dgeev, ferrax_cgeev, ferrax_zgeev](
        layout: c_int, batch: i64, jobvl: c_char, jobvr: c_char, n: i32, a: *mut T, lda: i32,
        w: *mut C, vl: *mut C, ldvl: i32, vr: *mut C, ldvr: i32, info: *mut i32);
    /// Schur decomposition A = Z T Z^H of `batch` n x n matrices: T (quasi-triangular for
    /// real input) overwrites `a`, the eigenvalues go to `w` (complex, batch x n) and, with
    /// `jobvs` 'V', the Schur vectors Z to `vs`.
    gees => [ferrax_sgees, ferrax_dgees, ferrax_cgees, ferrax_zgees](
        layout: c_int, batch: i64, jobvs: c_char, n: i32, a: *mut T, lda: i32, w: *mut C,
        vs: *mut T, ldvs: i32, info: *mut i32);
    /// Multiplies the m x n matrices `c` by Q from `k` reflectors of `geqrf` (`a`, m x k for
    /// `side` 'L' and n x k for 'R', and `tau`, batch x k): op(Q) C or C op(Q), op per `trans`
    /// ('N'; 'T' for the transpose of real Q, 'C' for the conjugate transpose); the product
    /// overwrites `c`.
    ormqr => [ferrax_sormqr, ferrax_dormqr, ferrax_cunmqr, ferrax_zunmqr](
        layout: c_int, batch: i64, side: c_char, trans: c_char, m: i32, n: i32, k: i32,
        a: *const T, lda: i32, tau: *const T, c: *mut T, ldc: i32);
    /// QR with column pivoting of `batch` m x n matrices: on entry `jpvt` (batch x n) marks
    /// columns to keep in front (nonzero) or free (0); on exit it holds the 1-based column
    /// permutation; R and the reflectors overwrite `a`, their scales go to `tau`.
    geqp3 => [ferrax_sgeqp3, ferrax_dgeqp3, ferrax_cgeqp3, ferrax_zgeqp3](
        layout: c_int, batch: i64, m: i32, n: i32, a: *mut T, lda: i32, jpvt: *mut i32,
        tau: *mut T);
    /// Solves `batch` tridiagonal systems with `nrhs` right-hand sides (`b`, n x nrhs, which
    /// the solution overwrites). `dl`, `d` and `du` hold n entries each, as in JAX: `dl[0]` and
    /// `du[n - 1]` are ignored; they are overwritten by the factorization.
    gtsv => [ferrax_sgtsv, ferrax_dgtsv, ferrax_cgtsv, ferrax_zgtsv](
        layout: c_int, batch: i64, n: i32, nrhs: i32, dl: *mut T, d: *mut T, du: *mut T,
        b: *mut T, ldb: i32, info: *mut i32);
    /// Solves `batch` tridiagonal systems as `gtsv` (`dl[0]` and `du[n - 1]` ignored; the
    /// solution overwrites `b`), but zero or tiny pivots are perturbed instead of failing, as
    /// TensorFlow's and JAX's `perturb_singular=True`: there is no `info`, and `dl`, `d` and
    /// `du` are not modified.
    gtsv_perturbed => [ferrax_sgtsv_perturbed, ferrax_dgtsv_perturbed, ferrax_cgtsv_perturbed,
                       ferrax_zgtsv_perturbed](
        layout: c_int, batch: i64, n: i32, nrhs: i32, dl: *const T, d: *const T, du: *const T,
        b: *mut T, ldb: i32);
    /// CSR sparse times dense: `out` (rows x n) = A `rhs` (cols x n) for the rows x cols matrix
    /// A with `nnz` stored entries `data` in column `indices` (nnz entries, 0-based), row `i`
    /// holding entries `indptr[i]..indptr[i + 1]` (`indptr`: rows + 1 offsets). `rhs` and
    /// `out` are contiguous and row-major, without a layout flag since CSR is row-oriented;
    /// a vector is n = 1. Offsets and column indices are checked: a bad one is an error (its
    /// message calls `indptr` and `indices` lhs_outer_indices and lhs_inner_indices, as
    /// jaxlib) and `out` is left as it was. With rows or n 0 nothing is read or written.
    csrmm => [ferrax_scsrmm, ferrax_dcsrmm, ferrax_ccsrmm, ferrax_zcsrmm](
        rows: i64, cols: i64, nnz: i64, data: *const T, indptr: *const i32,
        indices: *const i32, n: i64, rhs: *const T, out: *mut T);
}
