//! The cuSOLVER dense routines ferrax calls (`src/cuda/cusolver.rs`): handles, streams, and
//! getrf, potrf (single and batched), geqrf, orgqr/ungqr and ormqr/unmqr with their
//! `bufferSize` queries, on host memory with LAPACK underneath.
//!
//! Each routine checks what cuSOLVER checks (its arguments, as LAPACK's do, returning
//! `CUSOLVER_STATUS_INVALID_VALUE`; `lwork` against its own `bufferSize` answer), and what a
//! GPU would only show as corrupted results or an illegal address: every device operand over
//! exactly the elements the routine touches lies in one device allocation, and no operand the
//! routine writes overlaps another operand. Each violation is recorded as a problem and
//! returned as an error status. Streams run work at once, so every routine computes before it
//! returns.
//!
//! The first part of this file is what cuBLAS's emulation ([`crate::blas`]) shares: the
//! scalars, the LAPACK table, handles, operand checks, and the panic guard.
#![allow(non_snake_case)] // cuSOLVER's names

use crate::memory;
use crate::problem;
use ferrax_cpu_fallback::{single_threaded, Lapack, Missing};
use num_complex::Complex;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

// ---------------------------------------------------------------------------------------------
// Shared with the cuBLAS emulation.
// ---------------------------------------------------------------------------------------------

/// What went wrong in a call, as each library turns it into its own status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// An unknown (or destroyed) handle, or one not bound to a stream.
    NotInitialized,
    /// An argument the library rejects.
    InvalidValue,
    /// An operand outside device memory, or overlapping another: on a GPU, an illegal address
    /// or a race.
    ExecutionFailed,
    /// No LAPACK to compute with, LAPACK rejecting what the checks let through, or a panic.
    Internal,
}

pub(crate) type Outcome = Result<(), Fault>;

/// Records `message` and fails with `fault`.
pub(crate) fn fail<T>(fault: Fault, message: String) -> Result<T, Fault> {
    problem(message);
    Err(fault)
}

/// An invalid argument of `routine` unless `ok`.
pub(crate) fn require(ok: bool, routine: &str, message: impl FnOnce() -> String) -> Outcome {
    if ok {
        Ok(())
    } else {
        fail(Fault::InvalidValue, format!("{routine}: {}", message()))
    }
}

/// Runs an exported entry point's body: its fault as the library's `status`, a panic (which
/// must not cross the C boundary) recorded and returned as an internal error.
pub(crate) fn guard(
    routine: &str,
    status: fn(Option<Fault>) -> u32,
    body: impl FnOnce() -> Outcome,
) -> u32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(outcome) => status(outcome.err()),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            problem(format!("{routine}: panicked: {message}"));
            status(Some(Fault::Internal))
        }
    }
}

/// A library's handles: each one made by its `Create`, and the stream its `SetStream` bound
/// it to.
pub(crate) struct Handles {
    library: &'static str,
    streams: Mutex<BTreeMap<usize, Option<usize>>>,
}

impl Handles {
    pub(crate) const fn new(library: &'static str) -> Self {
        Handles {
            library,
            streams: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Option<usize>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh handle into `out` (a host pointer).
    ///
    /// # Safety
    /// `out` is null or writable.
    pub(crate) unsafe fn create(&self, routine: &str, out: *mut *mut c_void) -> Outcome {
        host_pointer(routine, "handle", out)?;
        // Never freed, so that no later handle has the address of a destroyed one.
        let handle = Box::into_raw(Box::new(0u64)) as usize;
        self.lock().insert(handle, None);
        *out = handle as *mut c_void;
        Ok(())
    }

    pub(crate) fn destroy(&self, routine: &str, handle: *mut c_void) -> Outcome {
        if self.lock().remove(&(handle as usize)).is_none() {
            return self.unknown(routine, handle);
        }
        Ok(())
    }

    fn unknown(&self, routine: &str, handle: *mut c_void) -> Outcome {
        fail(
            Fault::NotInitialized,
            format!("{routine}: {handle:?} is no live {} handle", self.library),
        )
    }

    /// Binds `handle` to `stream`, which must be one of the device's.
    pub(crate) fn set_stream(
        &self,
        routine: &str,
        handle: *mut c_void,
        stream: *mut c_void,
    ) -> Outcome {
        self.known(routine, handle)?;
        if !crate::driver::known_stream(stream, routine) {
            return Err(Fault::InvalidValue);
        }
        self.lock().insert(handle as usize, Some(stream as usize));
        Ok(())
    }

    /// Whether `handle` is live (what a size query needs).
    pub(crate) fn known(&self, routine: &str, handle: *mut c_void) -> Outcome {
        if self.lock().contains_key(&(handle as usize)) {
            Ok(())
        } else {
            self.unknown(routine, handle)
        }
    }

    /// Whether `handle` is live and bound to a stream (what a routine that runs needs: ferrax
    /// must never run library work on the default stream instead of XLA's).
    pub(crate) fn bound(&self, routine: &str, handle: *mut c_void) -> Outcome {
        match self.lock().get(&(handle as usize)) {
            Some(Some(_)) => return Ok(()),
            Some(None) => {}
            None => return self.unknown(routine, handle),
        }
        fail(
            Fault::NotInitialized,
            format!(
                "{routine}: {} handle {handle:?} is bound to no stream (SetStream)",
                self.library
            ),
        )
    }
}

/// The four scalars, with what the emulation needs beyond their LAPACK routines.
pub(crate) trait Scalar: Lapack + Default + PartialEq + std::fmt::Debug {
    const COMPLEX: bool;
    /// The unit roundoff, for the tests' tolerances.
    #[cfg(test)]
    const EPS: f64;
    fn nan() -> Self;
    #[cfg(test)]
    fn from_parts(re: f64, im: f64) -> Self;
    fn parts(self) -> (f64, f64);
}

macro_rules! real_scalar {
    ($t:ty) => {
        impl Scalar for $t {
            const COMPLEX: bool = false;
            #[cfg(test)]
            const EPS: f64 = <$t>::EPSILON as f64;
            fn nan() -> Self {
                <$t>::NAN
            }
            #[cfg(test)]
            fn from_parts(re: f64, _: f64) -> Self {
                re as $t
            }
            fn parts(self) -> (f64, f64) {
                (self as f64, 0.0)
            }
        }
    };
}
macro_rules! complex_scalar {
    ($t:ty) => {
        impl Scalar for Complex<$t> {
            const COMPLEX: bool = true;
            #[cfg(test)]
            const EPS: f64 = <$t>::EPSILON as f64;
            fn nan() -> Self {
                Complex::new(<$t>::NAN, <$t>::NAN)
            }
            #[cfg(test)]
            fn from_parts(re: f64, im: f64) -> Self {
                Complex::new(re as $t, im as $t)
            }
            fn parts(self) -> (f64, f64) {
                (self.re as f64, self.im as f64)
            }
        }
    };
}
real_scalar!(f32);
real_scalar!(f64);
complex_scalar!(f32);
complex_scalar!(f64);

/// The LAPACK table, filled once from `FERRAX_TEST_LAPACK` (scipy-openblas32's
/// `libscipy_openblas.so`): routines' results, and workspace sizes from LAPACK's own queries.
static LAPACK: OnceLock<Result<usize, String>> = OnceLock::new();

/// `get`'s routine from the table for `routine`; a missing table or routine is a problem.
pub(crate) fn lapack<F>(routine: &str, get: fn() -> Result<F, Missing>) -> Result<F, Fault> {
    let loaded = LAPACK.get_or_init(|| match std::env::var_os("FERRAX_TEST_LAPACK") {
        None => Err(
            "FERRAX_TEST_LAPACK is not set (the path of scipy-openblas32's \
                     libscipy_openblas.so)"
                .into(),
        ),
        Some(path) => ferrax_cpu_fallback::load_library(std::path::Path::new(&path)),
    });
    if let Err(why) = loaded {
        return fail(
            Fault::Internal,
            format!("{routine}: no LAPACK to compute with: {why}"),
        );
    }
    get().or_else(|missing| fail(Fault::Internal, format!("{routine}: {missing}")))
}

/// LAPACK's `info` after a call the checks let through: negative only if they missed an
/// invalid argument.
pub(crate) fn lapack_info(routine: &str, info: c_int) -> Outcome {
    if info < 0 {
        return fail(
            Fault::Internal,
            format!(
                "{routine}: LAPACK rejected argument {} that the emulation's checks passed",
                -info
            ),
        );
    }
    Ok(())
}

/// A workspace query's answer (LAPACK writes it as a real number in `work[0]`), at least 1.
fn query_answer<T: Scalar>(work: T) -> c_int {
    work.parts().0.ceil().clamp(1.0, c_int::MAX as f64) as c_int
}

/// The elements a column-major `rows`×`cols` matrix with leading dimension `ld` touches.
pub(crate) fn span(rows: c_int, cols: c_int, ld: c_int) -> usize {
    if rows <= 0 || cols <= 0 {
        0
    } else {
        ld as usize * (cols as usize - 1) + rows as usize
    }
}

/// One device operand of a routine: `bytes` at `ptr`, which the routine writes or only reads.
pub(crate) struct Extent {
    pub name: &'static str,
    /// The matrix of a batch it belongs to.
    pub index: Option<usize>,
    pub ptr: usize,
    pub bytes: usize,
    pub written: bool,
}

impl Extent {
    pub(crate) fn read<T>(name: &'static str, ptr: *const T, elements: usize) -> Self {
        Self::new(name, None, ptr, elements, false)
    }
    pub(crate) fn written<T>(name: &'static str, ptr: *const T, elements: usize) -> Self {
        Self::new(name, None, ptr, elements, true)
    }
    pub(crate) fn new<T>(
        name: &'static str,
        index: Option<usize>,
        ptr: *const T,
        elements: usize,
        written: bool,
    ) -> Self {
        Extent {
            name,
            index,
            ptr: ptr as usize,
            bytes: elements * std::mem::size_of::<T>(),
            written,
        }
    }
    fn label(&self) -> String {
        match self.index {
            Some(i) => format!("{} {i}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// Checks each operand lies in one device allocation, and that none the routine writes
/// overlaps another.
pub(crate) fn check_extents(routine: &str, extents: &[Extent]) -> Outcome {
    for e in extents {
        if !memory::check(
            e.ptr as *const c_void,
            e.bytes,
            &format!("{routine} {}", e.label()),
        ) {
            return Err(Fault::ExecutionFailed);
        }
    }
    let mut order: Vec<&Extent> = extents.iter().filter(|e| e.bytes > 0).collect();
    order.sort_by_key(|e| e.ptr);
    // Against every earlier extent still open: the one reaching furthest, and the furthest
    // written one (a read-only pair may overlap).
    let (mut furthest, mut furthest_written): (Option<&Extent>, Option<&Extent>) = (None, None);
    for e in order {
        let end = |x: &Extent| x.ptr + x.bytes;
        let clash = if e.written {
            furthest
        } else {
            furthest_written
        };
        if let Some(other) = clash.filter(|o| end(o) > e.ptr) {
            return fail(
                Fault::ExecutionFailed,
                format!(
                    "{routine}: {} ({} bytes at {:#x}) overlaps {} ({} bytes at {:#x})",
                    e.label(),
                    e.bytes,
                    e.ptr,
                    other.label(),
                    other.bytes,
                    other.ptr
                ),
            );
        }
        if furthest.is_none_or(|o| end(o) < end(e)) {
            furthest = Some(e);
        }
        if e.written && furthest_written.is_none_or(|o| end(o) < end(e)) {
            furthest_written = Some(e);
        }
    }
    Ok(())
}

/// The `batch` device pointers of a batched routine's array (checked to lie in device memory).
///
/// # Safety
/// None beyond the check: the array is read only once it is known to be in an allocation.
pub(crate) unsafe fn pointer_array<T>(
    routine: &str,
    name: &str,
    array: *const *mut T,
    batch: usize,
) -> Result<Vec<*mut T>, Fault> {
    let what = format!("{routine} {name} (the array of {batch} device pointers)");
    if !memory::check(array.cast(), batch * 8, &what) {
        return Err(Fault::ExecutionFailed);
    }
    Ok((0..batch).map(|i| array.add(i).read_unaligned()).collect())
}

/// A host out-parameter: not null, and not device memory (on a GPU, the library's host code
/// writing there would fault).
pub(crate) fn host_pointer<T>(routine: &str, name: &str, ptr: *mut T) -> Outcome {
    if ptr.is_null() {
        return fail(Fault::InvalidValue, format!("{routine}: {name} is null"));
    }
    if memory::remaining(ptr.cast()).is_some() {
        return fail(
            Fault::InvalidValue,
            format!("{routine}: {name} must be a host pointer, got device memory {ptr:?}"),
        );
    }
    Ok(())
}

/// Fills a workspace with NaN before a routine runs, as its contents are undefined after it:
/// a workspace that aliases an operand corrupts it, as it would on a GPU.
///
/// # Safety
/// `work` holds `len` elements (checked).
pub(crate) unsafe fn poison<T: Scalar>(work: *mut T, len: usize) {
    for i in 0..len {
        work.add(i).write(T::nan());
    }
}

/// Householder QR's workspace, from LAPACK's query for the shape.
pub(crate) fn geqrf_lwork<T: Scalar>(
    routine: &str,
    m: c_int,
    n: c_int,
    lda: c_int,
) -> Result<c_int, Fault> {
    let geqrf = lapack(routine, T::geqrf)?;
    let (mut a, mut tau, mut work, mut info) = (T::default(), T::default(), T::default(), 0);
    // SAFETY: a workspace query (lwork = -1) reads no matrix; the arguments are checked valid.
    single_threaded(|| unsafe { geqrf(&m, &n, &mut a, &lda, &mut tau, &mut work, &-1, &mut info) });
    lapack_info(routine, info)?;
    Ok(query_answer(work))
}

/// Checks the shape arguments of geqrf (cuSOLVER's and cuBLAS's batched one): m, n ≥ 0 and
/// lda ≥ max(1, m).
pub(crate) fn geqrf_arguments(routine: &str, m: c_int, n: c_int, lda: c_int) -> Outcome {
    require(m >= 0, routine, || format!("m = {m} < 0"))?;
    require(n >= 0, routine, || format!("n = {n} < 0"))?;
    require(lda >= m.max(1), routine, || {
        format!("lda = {lda} < max(1, m = {m})")
    })
}

/// A library's statuses for each [`Fault`] (success first), its `run` (the guard with them),
/// its handle table and its exported `Create`, `Destroy` and `SetStream`.
macro_rules! library {
    ($name:literal, [$ok:expr, $not_initialized:expr, $invalid:expr, $failed:expr, $internal:expr],
     $create:ident, $destroy:ident, $set_stream:ident) => {
        fn status(fault: Option<Fault>) -> Status {
            match fault {
                None => $ok,
                Some(Fault::NotInitialized) => $not_initialized,
                Some(Fault::InvalidValue) => $invalid,
                Some(Fault::ExecutionFailed) => $failed,
                Some(Fault::Internal) => $internal,
            }
        }

        fn run(routine: &str, body: impl FnOnce() -> Outcome) -> Status {
            guard(routine, status, body)
        }

        static HANDLES: Handles = Handles::new($name);

        /// # Safety
        /// `handle` is null or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $create(handle: *mut Handle) -> Status {
            run(stringify!($create), || {
                HANDLES.create(stringify!($create), handle)
            })
        }

        #[no_mangle]
        pub extern "C" fn $destroy(handle: Handle) -> Status {
            run(stringify!($destroy), || {
                HANDLES.destroy(stringify!($destroy), handle)
            })
        }

        #[no_mangle]
        pub extern "C" fn $set_stream(handle: Handle, stream: *mut c_void) -> Status {
            run(stringify!($set_stream), || {
                HANDLES.set_stream(stringify!($set_stream), handle, stream)
            })
        }
    };
}
pub(crate) use library;

// ---------------------------------------------------------------------------------------------
// cuSOLVER.
// ---------------------------------------------------------------------------------------------

pub type Handle = *mut c_void;
/// `cusolverStatus_t`.
pub type Status = u32;
pub const CUSOLVER_STATUS_SUCCESS: Status = 0;
pub const CUSOLVER_STATUS_NOT_INITIALIZED: Status = 1;
pub const CUSOLVER_STATUS_INVALID_VALUE: Status = 3;
pub const CUSOLVER_STATUS_EXECUTION_FAILED: Status = 6;
pub const CUSOLVER_STATUS_INTERNAL_ERROR: Status = 7;

/// `cublasFillMode_t`, `cublasSideMode_t` and `cublasOperation_t`, as cuSOLVER takes them
/// (taken as plain integers: an unknown value must be rejected, not be undefined behavior).
pub const CUBLAS_FILL_MODE_LOWER: c_int = 0;
pub const CUBLAS_FILL_MODE_UPPER: c_int = 1;
pub const CUBLAS_SIDE_LEFT: c_int = 0;
pub const CUBLAS_SIDE_RIGHT: c_int = 1;
pub const CUBLAS_OP_N: c_int = 0;
pub const CUBLAS_OP_T: c_int = 1;
pub const CUBLAS_OP_C: c_int = 2;

library!(
    "cuSOLVER",
    [
        CUSOLVER_STATUS_SUCCESS,
        CUSOLVER_STATUS_NOT_INITIALIZED,
        CUSOLVER_STATUS_INVALID_VALUE,
        CUSOLVER_STATUS_EXECUTION_FAILED,
        CUSOLVER_STATUS_INTERNAL_ERROR
    ],
    cusolverDnCreate,
    cusolverDnDestroy,
    cusolverDnSetStream
);

/// `uplo` as LAPACK's character.
fn fill(routine: &str, uplo: c_int) -> Result<c_char, Fault> {
    match uplo {
        CUBLAS_FILL_MODE_LOWER => Ok(b'L' as c_char),
        CUBLAS_FILL_MODE_UPPER => Ok(b'U' as c_char),
        _ => fail(
            Fault::InvalidValue,
            format!("{routine}: uplo = {uplo}, not CUBLAS_FILL_MODE_LOWER (0) or _UPPER (1)"),
        ),
    }
}

/// LAPACK's getrf and potrf take no workspace, so there is no LAPACK query to answer their
/// `bufferSize` from: the emulation answers a blocked algorithm's panel, this many columns
/// of the order, so that a caller allocating less than the answer is caught.
const PANEL: i64 = 32;

fn panel_lwork(order: c_int) -> c_int {
    (order.max(1) as i64 * PANEL).min(c_int::MAX as i64) as c_int
}

fn getrf_arguments(routine: &str, m: c_int, n: c_int, lda: c_int) -> Outcome {
    geqrf_arguments(routine, m, n, lda)
}

fn getrf_buffer_size(
    routine: &str,
    h: Handle,
    m: c_int,
    n: c_int,
    lda: c_int,
    lwork: *mut c_int,
) -> Outcome {
    HANDLES.known(routine, h)?;
    getrf_arguments(routine, m, n, lda)?;
    host_pointer(routine, "lwork", lwork)?;
    // SAFETY: a host integer (checked).
    unsafe { *lwork = panel_lwork(m.max(n)) };
    Ok(())
}

/// # Safety
/// As cuSOLVER's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn getrf<T: Scalar>(
    routine: &str,
    h: Handle,
    m: c_int,
    n: c_int,
    a: *mut T,
    lda: c_int,
    work: *mut T,
    ipiv: *mut c_int,
    info: *mut c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    getrf_arguments(routine, m, n, lda)?;
    // No lwork argument: the workspace must hold what getrf_bufferSize answers.
    let lwork = panel_lwork(m.max(n)) as usize;
    let k = m.min(n) as usize;
    check_extents(
        routine,
        &[
            Extent::written("A", a, span(m, n, lda)),
            Extent::written("workspace (getrf_bufferSize's answer)", work, lwork),
            Extent::written("ipiv", ipiv, k),
            Extent::written("info", info, 1),
        ],
    )?;
    let getrf = lapack(routine, T::getrf)?;
    poison(work, lwork);
    single_threaded(|| getrf(&m, &n, a, &lda, ipiv, info));
    lapack_info(routine, *info)
}

fn potrf_arguments(routine: &str, uplo: c_int, n: c_int, lda: c_int) -> Result<c_char, Fault> {
    let uplo = fill(routine, uplo)?;
    require(n >= 0, routine, || format!("n = {n} < 0"))?;
    require(lda >= n.max(1), routine, || {
        format!("lda = {lda} < max(1, n = {n})")
    })?;
    Ok(uplo)
}

fn potrf_buffer_size(
    routine: &str,
    h: Handle,
    uplo: c_int,
    n: c_int,
    lda: c_int,
    lwork: *mut c_int,
) -> Outcome {
    HANDLES.known(routine, h)?;
    potrf_arguments(routine, uplo, n, lda)?;
    host_pointer(routine, "lwork", lwork)?;
    // SAFETY: a host integer (checked).
    unsafe { *lwork = panel_lwork(n) };
    Ok(())
}

/// `lwork` against the routine's `bufferSize` answer for the same arguments.
fn enough_workspace(routine: &str, lwork: c_int, needed: c_int) -> Outcome {
    require(lwork >= needed, routine, || {
        format!(
            "lwork = {lwork}, less than the {needed} its bufferSize answers for these arguments"
        )
    })
}

/// # Safety
/// As cuSOLVER's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn potrf<T: Scalar>(
    routine: &str,
    h: Handle,
    uplo: c_int,
    n: c_int,
    a: *mut T,
    lda: c_int,
    work: *mut T,
    lwork: c_int,
    info: *mut c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    let uplo = potrf_arguments(routine, uplo, n, lda)?;
    enough_workspace(routine, lwork, panel_lwork(n))?;
    check_extents(
        routine,
        &[
            Extent::written("A", a, span(n, n, lda)),
            Extent::written("workspace", work, lwork as usize),
            Extent::written("info", info, 1),
        ],
    )?;
    let potrf = lapack(routine, T::potrf)?;
    poison(work, lwork as usize);
    single_threaded(|| potrf(&uplo, &n, a, &lda, info));
    lapack_info(routine, *info)
}

/// # Safety
/// As cuSOLVER's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn potrf_batched<T: Scalar>(
    routine: &str,
    h: Handle,
    uplo: c_int,
    n: c_int,
    a: *mut *mut T,
    lda: c_int,
    info: *mut c_int,
    batch: c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    let uplo_char = potrf_arguments(routine, uplo, n, lda)?;
    require(batch >= 0, routine, || format!("batchSize = {batch} < 0"))?;
    let batch = batch as usize;
    let matrices = pointer_array(routine, "Aarray", a, batch)?;
    let mut extents = vec![
        Extent::read("Aarray", a, batch),
        Extent::written("infoArray", info, batch),
    ];
    let elements = span(n, n, lda);
    extents.extend((0..batch).map(|i| Extent::new("matrix", Some(i), matrices[i], elements, true)));
    check_extents(routine, &extents)?;
    let potrf = lapack(routine, T::potrf)?;
    let (order, ld) = (n as usize, lda as usize);
    for (i, &matrix) in matrices.iter().enumerate() {
        single_threaded(|| potrf(&uplo_char, &n, matrix, &lda, info.add(i)));
        lapack_info(routine, *info.add(i))?;
        // The real potrfBatched overwrites the other triangle: a caller that reads it (rather
        // than the factor's triangle only) reads NaN here.
        for col in 0..order {
            for row in 0..order {
                let other = if uplo == CUBLAS_FILL_MODE_LOWER {
                    row < col
                } else {
                    row > col
                };
                if other {
                    matrix.add(row + col * ld).write(T::nan());
                }
            }
        }
    }
    Ok(())
}

fn geqrf_buffer_size<T: Scalar>(
    routine: &str,
    h: Handle,
    m: c_int,
    n: c_int,
    lda: c_int,
    lwork: *mut c_int,
) -> Outcome {
    HANDLES.known(routine, h)?;
    geqrf_arguments(routine, m, n, lda)?;
    host_pointer(routine, "lwork", lwork)?;
    let answer = geqrf_lwork::<T>(routine, m, n, lda)?;
    // SAFETY: a host integer (checked).
    unsafe { *lwork = answer };
    Ok(())
}

/// # Safety
/// As cuSOLVER's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn geqrf<T: Scalar>(
    routine: &str,
    h: Handle,
    m: c_int,
    n: c_int,
    a: *mut T,
    lda: c_int,
    tau: *mut T,
    work: *mut T,
    lwork: c_int,
    info: *mut c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    geqrf_arguments(routine, m, n, lda)?;
    enough_workspace(routine, lwork, geqrf_lwork::<T>(routine, m, n, lda)?)?;
    check_extents(
        routine,
        &[
            Extent::written("A", a, span(m, n, lda)),
            Extent::written("tau", tau, m.min(n) as usize),
            Extent::written("workspace", work, lwork as usize),
            Extent::written("info", info, 1),
        ],
    )?;
    let geqrf = lapack(routine, T::geqrf)?;
    poison(work, lwork as usize);
    single_threaded(|| geqrf(&m, &n, a, &lda, tau, work, &lwork, info));
    lapack_info(routine, *info)
}

fn orgqr_arguments(routine: &str, m: c_int, n: c_int, k: c_int, lda: c_int) -> Outcome {
    require(m >= 0, routine, || format!("m = {m} < 0"))?;
    require((0..=m).contains(&n), routine, || {
        format!("n = {n} is not in [0, m = {m}]")
    })?;
    require((0..=n).contains(&k), routine, || {
        format!("k = {k} is not in [0, n = {n}]")
    })?;
    require(lda >= m.max(1), routine, || {
        format!("lda = {lda} < max(1, m = {m})")
    })
}

fn orgqr_lwork<T: Scalar>(
    routine: &str,
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
) -> Result<c_int, Fault> {
    let orgqr = lapack(routine, T::orgqr)?;
    let (mut a, tau, mut work, mut info) = (T::default(), T::default(), T::default(), 0);
    // SAFETY: a workspace query (lwork = -1) reads no matrix; the arguments are checked valid.
    single_threaded(|| unsafe { orgqr(&m, &n, &k, &mut a, &lda, &tau, &mut work, &-1, &mut info) });
    lapack_info(routine, info)?;
    Ok(query_answer(work))
}

#[allow(clippy::too_many_arguments)]
fn orgqr_buffer_size<T: Scalar>(
    routine: &str,
    h: Handle,
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
    lwork: *mut c_int,
) -> Outcome {
    HANDLES.known(routine, h)?;
    orgqr_arguments(routine, m, n, k, lda)?;
    host_pointer(routine, "lwork", lwork)?;
    let answer = orgqr_lwork::<T>(routine, m, n, k, lda)?;
    // SAFETY: a host integer (checked).
    unsafe { *lwork = answer };
    Ok(())
}

/// # Safety
/// As cuSOLVER's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn orgqr<T: Scalar>(
    routine: &str,
    h: Handle,
    m: c_int,
    n: c_int,
    k: c_int,
    a: *mut T,
    lda: c_int,
    tau: *const T,
    work: *mut T,
    lwork: c_int,
    info: *mut c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    orgqr_arguments(routine, m, n, k, lda)?;
    enough_workspace(routine, lwork, orgqr_lwork::<T>(routine, m, n, k, lda)?)?;
    check_extents(
        routine,
        &[
            Extent::written("A", a, span(m, n, lda)),
            Extent::read("tau", tau, k as usize),
            Extent::written("workspace", work, lwork as usize),
            Extent::written("info", info, 1),
        ],
    )?;
    let orgqr = lapack(routine, T::orgqr)?;
    poison(work, lwork as usize);
    single_threaded(|| orgqr(&m, &n, &k, a, &lda, tau, work, &lwork, info));
    lapack_info(routine, *info)
}

/// ormqr's arguments checked: LAPACK's `side` and `trans` characters and Q's order.
#[allow(clippy::too_many_arguments)]
fn ormqr_arguments<T: Scalar>(
    routine: &str,
    side: c_int,
    trans: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
    ldc: c_int,
) -> Result<(c_char, c_char, c_int), Fault> {
    let (side_char, q_order) = match side {
        CUBLAS_SIDE_LEFT => (b'L', m),
        CUBLAS_SIDE_RIGHT => (b'R', n),
        _ => {
            return fail(
                Fault::InvalidValue,
                format!("{routine}: side = {side}, not CUBLAS_SIDE_LEFT (0) or _RIGHT (1)"),
            )
        }
    };
    // Real ormqr takes N or T, complex unmqr N or C.
    let trans_char = match (trans, T::COMPLEX) {
        (CUBLAS_OP_N, _) => b'N',
        (CUBLAS_OP_T, false) => b'T',
        (CUBLAS_OP_C, true) => b'C',
        _ => {
            let allowed = if T::COMPLEX {
                "CUBLAS_OP_N (0) or _C (2)"
            } else {
                "CUBLAS_OP_N (0) or _T (1)"
            };
            return fail(
                Fault::InvalidValue,
                format!("{routine}: trans = {trans}, not {allowed}"),
            );
        }
    };
    require(m >= 0, routine, || format!("m = {m} < 0"))?;
    require(n >= 0, routine, || format!("n = {n} < 0"))?;
    require((0..=q_order).contains(&k), routine, || {
        format!("k = {k} is not in [0, {q_order}] (Q's order)")
    })?;
    require(lda >= q_order.max(1), routine, || {
        format!("lda = {lda} < max(1, {q_order}) (Q's order)")
    })?;
    require(ldc >= m.max(1), routine, || {
        format!("ldc = {ldc} < max(1, m = {m})")
    })?;
    Ok((side_char as c_char, trans_char as c_char, q_order))
}

#[allow(clippy::too_many_arguments)]
fn ormqr_lwork<T: Scalar>(
    routine: &str,
    (side, trans): (c_char, c_char),
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
    ldc: c_int,
) -> Result<c_int, Fault> {
    let ormqr = lapack(routine, T::ormqr)?;
    let (a, tau, mut c, mut work, mut info) =
        (T::default(), T::default(), T::default(), T::default(), 0);
    // SAFETY: a workspace query (lwork = -1) reads no matrix; the arguments are checked valid.
    single_threaded(|| unsafe {
        ormqr(
            &side, &trans, &m, &n, &k, &a, &lda, &tau, &mut c, &ldc, &mut work, &-1, &mut info,
        )
    });
    lapack_info(routine, info)?;
    Ok(query_answer(work))
}

#[allow(clippy::too_many_arguments)]
fn ormqr_buffer_size<T: Scalar>(
    routine: &str,
    h: Handle,
    side: c_int,
    trans: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
    ldc: c_int,
    lwork: *mut c_int,
) -> Outcome {
    HANDLES.known(routine, h)?;
    let (side, trans, _) = ormqr_arguments::<T>(routine, side, trans, m, n, k, lda, ldc)?;
    host_pointer(routine, "lwork", lwork)?;
    let answer = ormqr_lwork::<T>(routine, (side, trans), m, n, k, lda, ldc)?;
    // SAFETY: a host integer (checked).
    unsafe { *lwork = answer };
    Ok(())
}

/// # Safety
/// As cuSOLVER's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn ormqr<T: Scalar>(
    routine: &str,
    h: Handle,
    side: c_int,
    trans: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    a: *const T,
    lda: c_int,
    tau: *const T,
    c: *mut T,
    ldc: c_int,
    work: *mut T,
    lwork: c_int,
    info: *mut c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    let (side, trans, q_order) = ormqr_arguments::<T>(routine, side, trans, m, n, k, lda, ldc)?;
    let needed = ormqr_lwork::<T>(routine, (side, trans), m, n, k, lda, ldc)?;
    enough_workspace(routine, lwork, needed)?;
    check_extents(
        routine,
        &[
            Extent::read("A (the reflectors)", a, span(q_order, k, lda)),
            Extent::read("tau", tau, k as usize),
            Extent::written("C", c, span(m, n, ldc)),
            Extent::written("workspace", work, lwork as usize),
            Extent::written("info", info, 1),
        ],
    )?;
    let ormqr = lapack(routine, T::ormqr)?;
    poison(work, lwork as usize);
    single_threaded(|| {
        ormqr(
            &side, &trans, &m, &n, &k, a, &lda, tau, c, &ldc, work, &lwork, info,
        )
    });
    lapack_info(routine, *info)
}

/// The exported routines of one scalar, by their cuSOLVER names.
macro_rules! dense {
    ($t:ty, $getrf_bs:ident, $getrf:ident, $potrf_bs:ident, $potrf:ident, $potrf_batched:ident,
     $geqrf_bs:ident, $geqrf:ident, $orgqr_bs:ident, $orgqr:ident, $ormqr_bs:ident,
     $ormqr:ident) => {
        #[no_mangle]
        pub extern "C" fn $getrf_bs(
            h: Handle,
            m: c_int,
            n: c_int,
            _a: *mut $t,
            lda: c_int,
            lwork: *mut c_int,
        ) -> Status {
            let r = stringify!($getrf_bs);
            run(r, || getrf_buffer_size(r, h, m, n, lda, lwork))
        }

        /// # Safety
        /// As cuSOLVER's.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $getrf(
            h: Handle,
            m: c_int,
            n: c_int,
            a: *mut $t,
            lda: c_int,
            work: *mut $t,
            ipiv: *mut c_int,
            info: *mut c_int,
        ) -> Status {
            let r = stringify!($getrf);
            run(r, || getrf::<$t>(r, h, m, n, a, lda, work, ipiv, info))
        }

        #[no_mangle]
        pub extern "C" fn $potrf_bs(
            h: Handle,
            uplo: c_int,
            n: c_int,
            _a: *mut $t,
            lda: c_int,
            lwork: *mut c_int,
        ) -> Status {
            let r = stringify!($potrf_bs);
            run(r, || potrf_buffer_size(r, h, uplo, n, lda, lwork))
        }

        /// # Safety
        /// As cuSOLVER's.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $potrf(
            h: Handle,
            uplo: c_int,
            n: c_int,
            a: *mut $t,
            lda: c_int,
            work: *mut $t,
            lwork: c_int,
            info: *mut c_int,
        ) -> Status {
            let r = stringify!($potrf);
            run(r, || potrf::<$t>(r, h, uplo, n, a, lda, work, lwork, info))
        }

        /// # Safety
        /// As cuSOLVER's.
        #[no_mangle]
        pub unsafe extern "C" fn $potrf_batched(
            h: Handle,
            uplo: c_int,
            n: c_int,
            a: *mut *mut $t,
            lda: c_int,
            info: *mut c_int,
            batch: c_int,
        ) -> Status {
            let r = stringify!($potrf_batched);
            run(r, || {
                potrf_batched::<$t>(r, h, uplo, n, a, lda, info, batch)
            })
        }

        #[no_mangle]
        pub extern "C" fn $geqrf_bs(
            h: Handle,
            m: c_int,
            n: c_int,
            _a: *mut $t,
            lda: c_int,
            lwork: *mut c_int,
        ) -> Status {
            let r = stringify!($geqrf_bs);
            run(r, || geqrf_buffer_size::<$t>(r, h, m, n, lda, lwork))
        }

        /// # Safety
        /// As cuSOLVER's.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $geqrf(
            h: Handle,
            m: c_int,
            n: c_int,
            a: *mut $t,
            lda: c_int,
            tau: *mut $t,
            work: *mut $t,
            lwork: c_int,
            info: *mut c_int,
        ) -> Status {
            let r = stringify!($geqrf);
            run(r, || {
                geqrf::<$t>(r, h, m, n, a, lda, tau, work, lwork, info)
            })
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn $orgqr_bs(
            h: Handle,
            m: c_int,
            n: c_int,
            k: c_int,
            _a: *const $t,
            lda: c_int,
            _tau: *const $t,
            lwork: *mut c_int,
        ) -> Status {
            let r = stringify!($orgqr_bs);
            run(r, || orgqr_buffer_size::<$t>(r, h, m, n, k, lda, lwork))
        }

        /// # Safety
        /// As cuSOLVER's.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $orgqr(
            h: Handle,
            m: c_int,
            n: c_int,
            k: c_int,
            a: *mut $t,
            lda: c_int,
            tau: *const $t,
            work: *mut $t,
            lwork: c_int,
            info: *mut c_int,
        ) -> Status {
            let r = stringify!($orgqr);
            run(r, || {
                orgqr::<$t>(r, h, m, n, k, a, lda, tau, work, lwork, info)
            })
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn $ormqr_bs(
            h: Handle,
            side: c_int,
            trans: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            _a: *const $t,
            lda: c_int,
            _tau: *const $t,
            _c: *const $t,
            ldc: c_int,
            lwork: *mut c_int,
        ) -> Status {
            let r = stringify!($ormqr_bs);
            run(r, || {
                ormqr_buffer_size::<$t>(r, h, side, trans, m, n, k, lda, ldc, lwork)
            })
        }

        /// # Safety
        /// As cuSOLVER's.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $ormqr(
            h: Handle,
            side: c_int,
            trans: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            a: *const $t,
            lda: c_int,
            tau: *const $t,
            c: *mut $t,
            ldc: c_int,
            work: *mut $t,
            lwork: c_int,
            info: *mut c_int,
        ) -> Status {
            let r = stringify!($ormqr);
            run(r, || {
                ormqr::<$t>(
                    r, h, side, trans, m, n, k, a, lda, tau, c, ldc, work, lwork, info,
                )
            })
        }

        #[cfg(test)]
        impl tests::Exports for $t {
            const DENSE: tests::Dense<$t> = tests::Dense {
                getrf_buffer_size: $getrf_bs,
                getrf: $getrf,
                potrf_buffer_size: $potrf_bs,
                potrf: $potrf,
                potrf_batched: $potrf_batched,
                geqrf_buffer_size: $geqrf_bs,
                geqrf: $geqrf,
                orgqr_buffer_size: $orgqr_bs,
                orgqr: $orgqr,
                ormqr_buffer_size: $ormqr_bs,
                ormqr: $ormqr,
            };
        }
    };
}

dense!(
    f32,
    cusolverDnSgetrf_bufferSize,
    cusolverDnSgetrf,
    cusolverDnSpotrf_bufferSize,
    cusolverDnSpotrf,
    cusolverDnSpotrfBatched,
    cusolverDnSgeqrf_bufferSize,
    cusolverDnSgeqrf,
    cusolverDnSorgqr_bufferSize,
    cusolverDnSorgqr,
    cusolverDnSormqr_bufferSize,
    cusolverDnSormqr
);
dense!(
    f64,
    cusolverDnDgetrf_bufferSize,
    cusolverDnDgetrf,
    cusolverDnDpotrf_bufferSize,
    cusolverDnDpotrf,
    cusolverDnDpotrfBatched,
    cusolverDnDgeqrf_bufferSize,
    cusolverDnDgeqrf,
    cusolverDnDorgqr_bufferSize,
    cusolverDnDorgqr,
    cusolverDnDormqr_bufferSize,
    cusolverDnDormqr
);
dense!(
    Complex<f32>,
    cusolverDnCgetrf_bufferSize,
    cusolverDnCgetrf,
    cusolverDnCpotrf_bufferSize,
    cusolverDnCpotrf,
    cusolverDnCpotrfBatched,
    cusolverDnCgeqrf_bufferSize,
    cusolverDnCgeqrf,
    cusolverDnCungqr_bufferSize,
    cusolverDnCungqr,
    cusolverDnCunmqr_bufferSize,
    cusolverDnCunmqr
);
dense!(
    Complex<f64>,
    cusolverDnZgetrf_bufferSize,
    cusolverDnZgetrf,
    cusolverDnZpotrf_bufferSize,
    cusolverDnZpotrf,
    cusolverDnZpotrfBatched,
    cusolverDnZgeqrf_bufferSize,
    cusolverDnZgeqrf,
    cusolverDnZungqr_bufferSize,
    cusolverDnZungqr,
    cusolverDnZunmqr_bufferSize,
    cusolverDnZunmqr
);

/// What the unit tests of this file and of [`crate::blas`] share: one test at a time (the logs
/// are global), device buffers, matrices, and the logs read back.
#[cfg(test)]
pub(crate) mod testing {
    use super::Scalar;
    use crate::memory::{ferrax_emulated_alloc, ferrax_emulated_free};
    use std::ffi::{c_char, CStr};
    use std::sync::{Mutex, MutexGuard};

    static SERIAL: Mutex<()> = Mutex::new(());

    /// Runs one test at a time, with the logs emptied; needs `FERRAX_TEST_LAPACK`.
    pub fn serial() -> MutexGuard<'static, ()> {
        let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            std::env::var_os("FERRAX_TEST_LAPACK").is_some(),
            "set FERRAX_TEST_LAPACK to scipy-openblas32's libscipy_openblas.so"
        );
        problems();
        calls();
        guard
    }

    fn lines(take: unsafe extern "C" fn(*mut c_char, usize) -> usize) -> Vec<String> {
        let mut buffer = vec![0 as c_char; 1 << 20];
        // SAFETY: a writable buffer of its length.
        let count = unsafe { take(buffer.as_mut_ptr(), buffer.len()) };
        // SAFETY: NUL-terminated by `take`.
        let text = unsafe { CStr::from_ptr(buffer.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let lines: Vec<String> = if count == 0 {
            vec![]
        } else {
            text.lines().map(String::from).collect()
        };
        assert_eq!(lines.len(), count, "log lines: {text}");
        lines
    }

    /// Takes the problems recorded so far.
    pub fn problems() -> Vec<String> {
        lines(crate::ferrax_emulated_problems)
    }

    /// Takes the calls recorded so far.
    pub fn calls() -> Vec<String> {
        lines(crate::ferrax_emulated_calls)
    }

    /// Asserts no problem was recorded.
    pub fn no_problems() {
        let found = problems();
        assert!(found.is_empty(), "problems: {found:#?}");
    }

    /// Asserts the call failed with `want` and recorded exactly one problem containing
    /// `needle`.
    pub fn rejected(status: u32, want: u32, needle: &str) {
        let found = problems();
        assert_eq!(status, want, "status (problems: {found:#?})");
        assert!(
            found.len() == 1 && found[0].contains(needle),
            "expected one problem containing {needle:?}, got {found:#?}"
        );
    }

    /// A device buffer of exactly `len` elements (past it: an inaccessible page).
    pub struct Device<T> {
        pub ptr: *mut T,
        pub len: usize,
    }

    impl<T: Copy> Device<T> {
        pub fn new(len: usize) -> Self {
            let ptr = ferrax_emulated_alloc(len * std::mem::size_of::<T>()).cast::<T>();
            assert!(!ptr.is_null());
            Device { ptr, len }
        }
        pub fn from(values: &[T]) -> Self {
            let device = Self::new(values.len());
            // SAFETY: the buffer holds `len` elements.
            unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), device.ptr, values.len()) };
            device
        }
        pub fn to_vec(&self) -> Vec<T> {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
        }
    }

    impl<T> Drop for Device<T> {
        fn drop(&mut self) {
            ferrax_emulated_free(self.ptr.cast());
        }
    }

    /// `len` pseudo-random scalars in [-1, 1) (both parts for complex ones).
    pub fn random<T: Scalar>(len: usize, seed: u64) -> Vec<T> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        (0..len).map(|_| T::from_parts(next(), next())).collect()
    }

    /// Asserts `got` is `want` to a few roundoffs (the same LAPACK on the same input; exact
    /// but for SIMD paths that may differ with alignment).
    pub fn assert_close<T: Scalar>(what: &str, got: &[T], want: &[T]) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let ((gr, gi), (wr, wi)) = (g.parts(), w.parts());
            let size = if w.parts().0.is_nan() {
                0.0
            } else {
                wr.abs() + wi.abs()
            };
            let tolerance = 64.0 * T::EPS * (1.0 + size);
            let close = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || (a - b).abs() <= tolerance;
            assert!(
                close(gr, wr) && close(gi, wi),
                "{what}[{i}]: got {g:?}, want {w:?}"
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::testing::*;
    use super::*;
    use crate::driver::ferrax_emulated_stream;
    use std::ptr::null_mut;

    /// The exported routines of one scalar (their signatures checked against these types).
    #[allow(clippy::type_complexity)]
    pub struct Dense<T> {
        pub getrf_buffer_size:
            unsafe extern "C" fn(Handle, c_int, c_int, *mut T, c_int, *mut c_int) -> Status,
        pub getrf: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            *mut T,
            c_int,
            *mut T,
            *mut c_int,
            *mut c_int,
        ) -> Status,
        pub potrf_buffer_size:
            unsafe extern "C" fn(Handle, c_int, c_int, *mut T, c_int, *mut c_int) -> Status,
        pub potrf: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            *mut T,
            c_int,
            *mut T,
            c_int,
            *mut c_int,
        ) -> Status,
        pub potrf_batched: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            *mut *mut T,
            c_int,
            *mut c_int,
            c_int,
        ) -> Status,
        pub geqrf_buffer_size:
            unsafe extern "C" fn(Handle, c_int, c_int, *mut T, c_int, *mut c_int) -> Status,
        pub geqrf: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            *mut T,
            c_int,
            *mut T,
            *mut T,
            c_int,
            *mut c_int,
        ) -> Status,
        pub orgqr_buffer_size: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            c_int,
            *const T,
            c_int,
            *const T,
            *mut c_int,
        ) -> Status,
        pub orgqr: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            c_int,
            *mut T,
            c_int,
            *const T,
            *mut T,
            c_int,
            *mut c_int,
        ) -> Status,
        pub ormqr_buffer_size: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            c_int,
            c_int,
            c_int,
            *const T,
            c_int,
            *const T,
            *const T,
            c_int,
            *mut c_int,
        ) -> Status,
        pub ormqr: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            c_int,
            c_int,
            c_int,
            *const T,
            c_int,
            *const T,
            *mut T,
            c_int,
            *mut T,
            c_int,
            *mut c_int,
        ) -> Status,
    }

    pub trait Exports: Scalar {
        const DENSE: Dense<Self>;
    }

    /// A handle bound to a fresh stream.
    fn solver() -> Handle {
        let mut h = null_mut();
        assert_eq!(unsafe { cusolverDnCreate(&mut h) }, CUSOLVER_STATUS_SUCCESS);
        assert_eq!(
            cusolverDnSetStream(h, ferrax_emulated_stream()),
            CUSOLVER_STATUS_SUCCESS
        );
        h
    }

    fn table<F>(get: fn() -> Result<F, Missing>) -> F {
        lapack("test", get).expect("LAPACK from FERRAX_TEST_LAPACK")
    }

    /// A Hermitian positive definite n×n matrix with leading dimension lda (B^H B + n I),
    /// its padding random.
    fn positive_definite<T: Scalar>(n: usize, lda: usize, seed: u64) -> Vec<T> {
        let b = random::<T>(n * n, seed);
        let mut a = random::<T>(lda * (n - 1) + n, seed + 1);
        for j in 0..n {
            for i in 0..n {
                let (mut re, mut im) = (if i == j { n as f64 } else { 0.0 }, 0.0);
                for k in 0..n {
                    let ((xr, xi), (yr, yi)) = (b[k + i * n].parts(), b[k + j * n].parts());
                    // conj(x) y
                    re += xr * yr + xi * yi;
                    im += xr * yi - xi * yr;
                }
                a[i + j * lda] = T::from_parts(re, if T::COMPLEX && i != j { im } else { 0.0 });
            }
        }
        a
    }

    fn getrf_case<T: Exports>(m: c_int, n: c_int, lda: c_int, singular: bool) {
        let h = solver();
        let mut a = random::<T>(span(m, n, lda), 7);
        if singular {
            for i in 0..m as usize {
                a[i + lda as usize] = T::default(); // column 1 zero
            }
        }
        let k = m.min(n) as usize;
        unsafe {
            let mut lwork = 0;
            let status = (T::DENSE.getrf_buffer_size)(h, m, n, null_mut(), lda, &mut lwork);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            assert!(lwork >= 1);
            let (da, work) = (Device::from(&a), Device::<T>::new(lwork as usize));
            let (ipiv, info) = (Device::<c_int>::new(k), Device::<c_int>::new(1));
            let status = (T::DENSE.getrf)(h, m, n, da.ptr, lda, work.ptr, ipiv.ptr, info.ptr);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            no_problems();
            let (mut want_ipiv, mut want_info) = (vec![0; k], 0);
            table(T::getrf)(
                &m,
                &n,
                a.as_mut_ptr(),
                &lda,
                want_ipiv.as_mut_ptr(),
                &mut want_info,
            );
            assert_close("LU", &da.to_vec(), &a);
            assert_eq!(ipiv.to_vec(), want_ipiv);
            assert_eq!(info.to_vec(), [want_info]);
            assert_eq!(want_info > 0, singular);
        }
    }

    fn potrf_case<T: Exports>(n: c_int, lda: c_int, uplo: c_int, definite: bool) {
        let h = solver();
        let mut a = positive_definite::<T>(n as usize, lda as usize, 11);
        if !definite {
            a[1 + lda as usize] = T::from_parts(-100.0, 0.0);
        }
        unsafe {
            let mut lwork = 0;
            let status = (T::DENSE.potrf_buffer_size)(h, uplo, n, null_mut(), lda, &mut lwork);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            let (da, work, info) = (
                Device::from(&a),
                Device::<T>::new(lwork as usize),
                Device::<c_int>::new(1),
            );
            let status = (T::DENSE.potrf)(h, uplo, n, da.ptr, lda, work.ptr, lwork, info.ptr);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            no_problems();
            let (uplo_char, mut want_info) = (fill("test", uplo).unwrap(), 0);
            table(T::potrf)(&uplo_char, &n, a.as_mut_ptr(), &lda, &mut want_info);
            assert_close("Cholesky factor", &da.to_vec(), &a);
            assert_eq!(info.to_vec(), [want_info]);
            assert_eq!(want_info == 0, definite);
        }
    }

    fn potrf_batched_case<T: Exports>(uplo: c_int) {
        let h = solver();
        let (n, lda, batch) = (5, 7, 3usize);
        let stride = (lda * n) as usize;
        let mut all = Vec::new();
        for b in 0..batch {
            let mut a = positive_definite::<T>(n as usize, lda as usize, 20 + b as u64);
            if b == 1 {
                a[2 + 2 * lda as usize] = T::from_parts(-100.0, 0.0);
            }
            a.resize(stride, T::from_parts(0.5, 0.5));
            all.extend(a);
        }
        unsafe {
            let da = Device::from(&all);
            let pointers: Vec<*mut T> = (0..batch).map(|b| da.ptr.add(b * stride)).collect();
            let (array, info) = (Device::from(&pointers), Device::<c_int>::new(batch));
            let status =
                (T::DENSE.potrf_batched)(h, uplo, n, array.ptr, lda, info.ptr, batch as c_int);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            no_problems();
            let (got, infos) = (da.to_vec(), info.to_vec());
            let uplo_char = fill("test", uplo).unwrap();
            for b in 0..batch {
                let mut want = all[b * stride..(b + 1) * stride].to_vec();
                let mut want_info = 0;
                table(T::potrf)(&uplo_char, &n, want.as_mut_ptr(), &lda, &mut want_info);
                assert_eq!(infos[b], want_info, "info of matrix {b}");
                assert_eq!(want_info > 0, b == 1);
                // The factor's triangle as LAPACK's, the other NaN, the padding untouched.
                for (i, value) in want.iter_mut().enumerate() {
                    let (row, col) = (i % lda as usize, i / lda as usize);
                    let other = if uplo == CUBLAS_FILL_MODE_LOWER {
                        row < col
                    } else {
                        row > col
                    };
                    if row < n as usize && col < n as usize && other {
                        *value = T::nan();
                    }
                }
                assert_close(
                    "batched Cholesky factor",
                    &got[b * stride..(b + 1) * stride],
                    &want,
                );
            }
        }
    }

    fn geqrf_orgqr_case<T: Exports>(m: c_int, n: c_int, lda: c_int) {
        let h = solver();
        let mut a = random::<T>(span(m, n, lda), 31);
        let k = m.min(n);
        unsafe {
            let mut lwork = 0;
            let status = (T::DENSE.geqrf_buffer_size)(h, m, n, null_mut(), lda, &mut lwork);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            let (da, tau) = (Device::from(&a), Device::<T>::new(k as usize));
            let (work, info) = (Device::<T>::new(lwork as usize), Device::<c_int>::new(1));
            let status = (T::DENSE.geqrf)(h, m, n, da.ptr, lda, tau.ptr, work.ptr, lwork, info.ptr);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            no_problems();
            let mut want_tau = vec![T::default(); k as usize];
            let mut want_work = vec![T::default(); lwork as usize];
            let mut want_info = 0;
            table(T::geqrf)(
                &m,
                &n,
                a.as_mut_ptr(),
                &lda,
                want_tau.as_mut_ptr(),
                want_work.as_mut_ptr(),
                &lwork,
                &mut want_info,
            );
            assert_close("QR reflectors", &da.to_vec(), &a);
            assert_close("tau", &tau.to_vec(), &want_tau);
            assert_eq!(info.to_vec(), [0]);

            // Q's first q columns (q ≤ m) from the k reflectors, in place.
            let q = n.min(m);
            let mut lwork = 0;
            let status = (T::DENSE.orgqr_buffer_size)(h, m, q, k, da.ptr, lda, tau.ptr, &mut lwork);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            let work = Device::<T>::new(lwork as usize);
            let status =
                (T::DENSE.orgqr)(h, m, q, k, da.ptr, lda, tau.ptr, work.ptr, lwork, info.ptr);
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            no_problems();
            let mut want_work = vec![T::default(); lwork as usize];
            table(T::orgqr)(
                &m,
                &q,
                &k,
                a.as_mut_ptr(),
                &lda,
                want_tau.as_ptr(),
                want_work.as_mut_ptr(),
                &lwork,
                &mut want_info,
            );
            assert_eq!(want_info, 0);
            assert_close("Q", &da.to_vec()[..span(m, q, lda)], &a[..span(m, q, lda)]);
            assert_eq!(info.to_vec(), [0]);
        }
    }

    fn ormqr_case<T: Exports>(side: c_int, transpose: bool) {
        let h = solver();
        let (m, n) = (6, 4);
        let q_order = if side == CUBLAS_SIDE_LEFT { m } else { n };
        let (k, lda, ldc) = (q_order - 1, q_order + 2, m + 1);
        let trans = match (transpose, T::COMPLEX) {
            (false, _) => CUBLAS_OP_N,
            (true, false) => CUBLAS_OP_T,
            (true, true) => CUBLAS_OP_C,
        };
        // Reflectors from LAPACK's QR of a random q_order×k matrix.
        let mut a = random::<T>(span(q_order, k, lda), 41);
        let mut tau = vec![T::default(); k as usize];
        let mut scratch = vec![T::default(); 4096];
        let mut info = 0;
        unsafe {
            table(T::geqrf)(
                &q_order,
                &k,
                a.as_mut_ptr(),
                &lda,
                tau.as_mut_ptr(),
                scratch.as_mut_ptr(),
                &4096,
                &mut info,
            );
        }
        assert_eq!(info, 0);
        let mut c = random::<T>(span(m, n, ldc), 43);
        unsafe {
            let (da, dtau, dc) = (Device::from(&a), Device::from(&tau), Device::from(&c));
            let mut lwork = 0;
            let status = (T::DENSE.ormqr_buffer_size)(
                h, side, trans, m, n, k, da.ptr, lda, dtau.ptr, dc.ptr, ldc, &mut lwork,
            );
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            let (work, dinfo) = (Device::<T>::new(lwork as usize), Device::<c_int>::new(1));
            let status = (T::DENSE.ormqr)(
                h, side, trans, m, n, k, da.ptr, lda, dtau.ptr, dc.ptr, ldc, work.ptr, lwork,
                dinfo.ptr,
            );
            assert_eq!(status, CUSOLVER_STATUS_SUCCESS);
            no_problems();
            let (side_char, trans_char, _) =
                ormqr_arguments::<T>("test", side, trans, m, n, k, lda, ldc).unwrap();
            let mut want_work = vec![T::default(); lwork as usize];
            table(T::ormqr)(
                &side_char,
                &trans_char,
                &m,
                &n,
                &k,
                a.as_ptr(),
                &lda,
                tau.as_ptr(),
                c.as_mut_ptr(),
                &ldc,
                want_work.as_mut_ptr(),
                &lwork,
                &mut info,
            );
            assert_eq!(info, 0);
            assert_close("Q c", &dc.to_vec(), &c);
            assert_eq!(dinfo.to_vec(), [0]);
            assert_close("reflectors (read only)", &da.to_vec(), &a);
        }
    }

    macro_rules! per_scalar {
        ($($name:ident: $t:ty;)*) => {$(
            mod $name {
                use super::*;
                type T = $t;

                #[test]
                fn getrf_matches_lapack() {
                    let _serial = serial();
                    getrf_case::<T>(6, 4, 8, false);
                    getrf_case::<T>(4, 6, 4, false);
                    getrf_case::<T>(5, 5, 5, true);
                    let calls = calls();
                    let name = format!("cusolverDn{}getrf", stringify!($name).to_uppercase());
                    assert_eq!(calls, [name.as_str(); 3], "the calls log");
                }

                #[test]
                fn potrf_matches_lapack() {
                    let _serial = serial();
                    for uplo in [CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER] {
                        potrf_case::<T>(6, 7, uplo, true);
                        potrf_case::<T>(5, 5, uplo, false);
                    }
                }

                #[test]
                fn potrf_batched_matches_lapack_and_poisons_the_other_triangle() {
                    let _serial = serial();
                    potrf_batched_case::<T>(CUBLAS_FILL_MODE_LOWER);
                    potrf_batched_case::<T>(CUBLAS_FILL_MODE_UPPER);
                }

                #[test]
                fn geqrf_and_orgqr_match_lapack() {
                    let _serial = serial();
                    geqrf_orgqr_case::<T>(7, 5, 9);
                    geqrf_orgqr_case::<T>(4, 6, 4);
                    geqrf_orgqr_case::<T>(40, 40, 40);
                }

                #[test]
                fn ormqr_matches_lapack() {
                    let _serial = serial();
                    for side in [CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT] {
                        ormqr_case::<T>(side, false);
                        ormqr_case::<T>(side, true);
                    }
                }
            }
        )*};
    }

    per_scalar! {
        s: f32;
        d: f64;
        c: Complex<f32>;
        z: Complex<f64>;
    }

    #[test]
    fn a_too_small_lwork_is_rejected() {
        let _serial = serial();
        let h = solver();
        let (m, n) = (8, 6);
        let a = Device::from(&random::<f64>(48, 1));
        let info = Device::<c_int>::new(1);
        unsafe {
            let mut lwork = 0;
            assert_eq!(
                cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, a.ptr, m, &mut lwork),
                0
            );
            let work = Device::<f64>::new(lwork as usize);
            let status = cusolverDnDpotrf(
                h,
                CUBLAS_FILL_MODE_LOWER,
                n,
                a.ptr,
                m,
                work.ptr,
                lwork - 1,
                info.ptr,
            );
            rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "lwork");

            assert_eq!(
                cusolverDnDgeqrf_bufferSize(h, m, n, a.ptr, m, &mut lwork),
                0
            );
            let (tau, work) = (Device::<f64>::new(6), Device::<f64>::new(lwork as usize));
            let status =
                cusolverDnDgeqrf(h, m, n, a.ptr, m, tau.ptr, work.ptr, lwork - 1, info.ptr);
            rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "lwork");

            let mut lwork = 0;
            let reflectors = Device::from(&random::<Complex<f64>>(48, 2));
            let c = Device::from(&random::<Complex<f64>>(48, 3));
            let ztau = Device::<Complex<f64>>::new(6);
            let status = cusolverDnZunmqr_bufferSize(
                h,
                CUBLAS_SIDE_LEFT,
                CUBLAS_OP_C,
                m,
                n,
                6,
                reflectors.ptr,
                m,
                ztau.ptr,
                c.ptr,
                m,
                &mut lwork,
            );
            assert_eq!(status, 0);
            let work = Device::<Complex<f64>>::new(lwork as usize);
            let status = cusolverDnZunmqr(
                h,
                CUBLAS_SIDE_LEFT,
                CUBLAS_OP_C,
                m,
                n,
                6,
                reflectors.ptr,
                m,
                ztau.ptr,
                c.ptr,
                m,
                work.ptr,
                lwork - 1,
                info.ptr,
            );
            rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "lwork");
        }
    }

    #[test]
    fn a_too_small_workspace_allocation_is_rejected() {
        let _serial = serial();
        let h = solver();
        let (m, n) = (8, 6);
        let a = Device::from(&random::<f32>(48, 1));
        let info = Device::<c_int>::new(1);
        unsafe {
            let mut lwork = 0;
            assert_eq!(
                cusolverDnSgeqrf_bufferSize(h, m, n, a.ptr, m, &mut lwork),
                0
            );
            let (tau, work) = (
                Device::<f32>::new(6),
                Device::<f32>::new(lwork as usize - 1),
            );
            let status = cusolverDnSgeqrf(h, m, n, a.ptr, m, tau.ptr, work.ptr, lwork, info.ptr);
            rejected(status, CUSOLVER_STATUS_EXECUTION_FAILED, "workspace");

            // getrf has no lwork: its workspace must hold what getrf_bufferSize answers.
            assert_eq!(
                cusolverDnSgetrf_bufferSize(h, m, n, a.ptr, m, &mut lwork),
                0
            );
            let (ipiv, work) = (
                Device::<c_int>::new(6),
                Device::<f32>::new(lwork as usize - 1),
            );
            let status = cusolverDnSgetrf(h, m, n, a.ptr, m, work.ptr, ipiv.ptr, info.ptr);
            rejected(status, CUSOLVER_STATUS_EXECUTION_FAILED, "workspace");
        }
    }

    #[test]
    fn a_bad_leading_dimension_is_rejected() {
        let _serial = serial();
        let h = solver();
        let a = Device::from(&random::<f64>(48, 1));
        let (ipiv, info) = (Device::<c_int>::new(6), Device::<c_int>::new(1));
        unsafe {
            let mut lwork = 0;
            let status = cusolverDnDgetrf_bufferSize(h, 8, 6, a.ptr, 7, &mut lwork);
            rejected(
                status,
                CUSOLVER_STATUS_INVALID_VALUE,
                "lda = 7 < max(1, m = 8)",
            );
            let work = Device::<f64>::new(1000);
            let status = cusolverDnDgetrf(h, 8, 6, a.ptr, 7, work.ptr, ipiv.ptr, info.ptr);
            rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "lda");
            let status = cusolverDnDorgqr_bufferSize(h, 8, 6, 6, a.ptr, 0, a.ptr, &mut lwork);
            rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "lda");
            let status = cusolverDnDormqr_bufferSize(
                h,
                CUBLAS_SIDE_RIGHT,
                CUBLAS_OP_T,
                8,
                6,
                6,
                a.ptr,
                6,
                a.ptr,
                a.ptr,
                7,
                &mut lwork,
            );
            rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "ldc");
        }
    }

    #[test]
    fn an_operand_past_its_allocation_is_rejected() {
        let _serial = serial();
        let h = solver();
        // A 6×6 matrix with lda 8 spans 8·5 + 6 = 46 elements.
        let a = Device::from(&random::<f64>(45, 1));
        let info = Device::<c_int>::new(1);
        unsafe {
            let mut lwork = 0;
            assert_eq!(
                cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_UPPER, 6, a.ptr, 8, &mut lwork),
                0
            );
            let work = Device::<f64>::new(lwork as usize);
            let status = cusolverDnDpotrf(
                h,
                CUBLAS_FILL_MODE_UPPER,
                6,
                a.ptr,
                8,
                work.ptr,
                lwork,
                info.ptr,
            );
            rejected(status, CUSOLVER_STATUS_EXECUTION_FAILED, "A: 368 bytes");
            // A host integer where device memory is due.
            let mut host_info = 0;
            let a = Device::from(&random::<f64>(46, 1));
            let status = cusolverDnDpotrf(
                h,
                CUBLAS_FILL_MODE_UPPER,
                6,
                a.ptr,
                8,
                work.ptr,
                lwork,
                &mut host_info,
            );
            rejected(status, CUSOLVER_STATUS_EXECUTION_FAILED, "info");
        }
    }

    #[test]
    fn a_workspace_overlapping_an_operand_is_rejected() {
        let _serial = serial();
        let h = solver();
        let (m, n) = (8, 6);
        unsafe {
            let mut lwork = 0;
            assert_eq!(
                cusolverDnDgeqrf_bufferSize(h, m, n, null_mut(), m, &mut lwork),
                0
            );
            let buffer = Device::<f64>::new(48 + lwork as usize);
            let (tau, info) = (Device::<f64>::new(6), Device::<c_int>::new(1));
            let status = cusolverDnDgeqrf(
                h,
                m,
                n,
                buffer.ptr,
                m,
                tau.ptr,
                buffer.ptr.add(47),
                lwork,
                info.ptr,
            );
            rejected(status, CUSOLVER_STATUS_EXECUTION_FAILED, "overlaps");
        }
    }

    #[test]
    fn handles_must_be_live_and_bound_to_a_known_stream() {
        let _serial = serial();
        let a = Device::from(&random::<f64>(16, 1));
        let (ipiv, info, work) = (
            Device::<c_int>::new(4),
            Device::<c_int>::new(1),
            Device::<f64>::new(1000),
        );
        unsafe {
            let mut h = null_mut();
            assert_eq!(cusolverDnCreate(&mut h), 0);
            let status = cusolverDnDgetrf(h, 4, 4, a.ptr, 4, work.ptr, ipiv.ptr, info.ptr);
            rejected(
                status,
                CUSOLVER_STATUS_NOT_INITIALIZED,
                "bound to no stream",
            );

            let mut not_a_stream = 0u64;
            let status = cusolverDnSetStream(h, (&mut not_a_stream as *mut u64).cast());
            rejected(
                status,
                CUSOLVER_STATUS_INVALID_VALUE,
                "is not one of the device's",
            );

            let mut not_a_handle = 0u64;
            let fake = (&mut not_a_handle as *mut u64).cast();
            let status = cusolverDnDgetrf(fake, 4, 4, a.ptr, 4, work.ptr, ipiv.ptr, info.ptr);
            rejected(
                status,
                CUSOLVER_STATUS_NOT_INITIALIZED,
                "is no live cuSOLVER handle",
            );
            let mut lwork = 0;
            let status = cusolverDnDgetrf_bufferSize(fake, 4, 4, a.ptr, 4, &mut lwork);
            rejected(
                status,
                CUSOLVER_STATUS_NOT_INITIALIZED,
                "is no live cuSOLVER handle",
            );

            // A cuBLAS handle is not a cuSOLVER one.
            let mut blas = null_mut();
            assert_eq!(crate::blas::cublasCreate_v2(&mut blas), 0);
            let status = cusolverDnSetStream(blas, ferrax_emulated_stream());
            rejected(
                status,
                CUSOLVER_STATUS_NOT_INITIALIZED,
                "is no live cuSOLVER handle",
            );

            assert_eq!(cusolverDnSetStream(h, ferrax_emulated_stream()), 0);
            assert_eq!(
                cusolverDnDgetrf(h, 4, 4, a.ptr, 4, work.ptr, ipiv.ptr, info.ptr),
                0
            );
            no_problems();
            assert_eq!(cusolverDnDestroy(h), 0);
            let status = cusolverDnDgetrf(h, 4, 4, a.ptr, 4, work.ptr, ipiv.ptr, info.ptr);
            rejected(
                status,
                CUSOLVER_STATUS_NOT_INITIALIZED,
                "is no live cuSOLVER handle",
            );
        }
    }

    #[test]
    fn operations_and_sides_are_checked() {
        let _serial = serial();
        let h = solver();
        let a = Device::from(&random::<f32>(16, 1));
        let z = Device::from(&random::<Complex<f32>>(16, 1));
        let mut lwork = 0;
        let status = cusolverDnSormqr_bufferSize(
            h,
            CUBLAS_SIDE_LEFT,
            CUBLAS_OP_C,
            4,
            4,
            4,
            a.ptr,
            4,
            a.ptr,
            a.ptr,
            4,
            &mut lwork,
        );
        rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "trans = 2");
        let status = cusolverDnCunmqr_bufferSize(
            h,
            CUBLAS_SIDE_LEFT,
            CUBLAS_OP_T,
            4,
            4,
            4,
            z.ptr,
            4,
            z.ptr,
            z.ptr,
            4,
            &mut lwork,
        );
        rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "trans = 1");
        let status = cusolverDnCunmqr_bufferSize(
            h,
            2,
            CUBLAS_OP_N,
            4,
            4,
            4,
            z.ptr,
            4,
            z.ptr,
            z.ptr,
            4,
            &mut lwork,
        );
        rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "side = 2");
        let status = cusolverDnSpotrf_bufferSize(h, 2, 4, a.ptr, 4, &mut lwork);
        rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "uplo = 2");
        // lwork is a host pointer.
        let device_lwork = Device::<c_int>::new(1);
        let status = cusolverDnSpotrf_bufferSize(h, 0, 4, a.ptr, 4, device_lwork.ptr);
        rejected(status, CUSOLVER_STATUS_INVALID_VALUE, "host pointer");
    }

    #[test]
    fn empty_matrices_touch_nothing() {
        let _serial = serial();
        let h = solver();
        let info = Device::<c_int>::new(1);
        unsafe {
            let mut lwork = 0;
            assert_eq!(
                cusolverDnZgeqrf_bufferSize(h, 0, 3, null_mut(), 1, &mut lwork),
                0
            );
            let work = Device::<Complex<f64>>::new(lwork as usize);
            let status = cusolverDnZgeqrf(
                h,
                0,
                3,
                null_mut(),
                1,
                null_mut(),
                work.ptr,
                lwork,
                info.ptr,
            );
            assert_eq!(status, 0);
            assert_eq!(
                cusolverDnDpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, 3, null_mut(), 3, null_mut(), 0),
                0
            );
            no_problems();
        }
    }
}
