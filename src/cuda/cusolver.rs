//! cuSOLVER's dense routines (`libcusolver`, loaded at run time through cudarc) for the
//! matrices ferrax's own kernels do not take. A [`Solver`] is a handle from a per-context pool
//! bound to XLA's stream; [`Dense`] maps each of the four element types to its routines.

use super::runtime::{Bound, HandlePool, Library};
use crate::ffi::{Error, Result};
use cudarc::cusolver::sys;
use num_complex::Complex;
use std::ffi::c_int;
use std::sync::OnceLock;

pub use sys::{cublasFillMode_t as Fill, cublasOperation_t as Op, cublasSideMode_t as Side};
pub type Handle = sys::cusolverDnHandle_t;
pub type Status = sys::cusolverStatus_t;

pub enum Cusolver {}

impl Library for Cusolver {
    const NAME: &'static str = "cuSOLVER (libcusolver.so)";
    type Context = sys::cusolverDnContext;
    type Status = Status;
    const SUCCESS: Status = Status::CUSOLVER_STATUS_SUCCESS;
    fn handles() -> &'static HandlePool {
        static HANDLES: HandlePool = HandlePool::new();
        &HANDLES
    }
    fn present() -> bool {
        static PRESENT: OnceLock<bool> = OnceLock::new();
        // SAFETY: probes for the library without resolving any symbol.
        *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
    }
    unsafe fn create(handle: *mut Handle) -> Status {
        sys::cusolverDnCreate(handle)
    }
    unsafe fn set_stream(handle: Handle, stream: cudarc::driver::sys::CUstream) -> Status {
        sys::cusolverDnSetStream(handle, stream as sys::cudaStream_t)
    }
}

/// A cuSOLVER handle bound to XLA's stream for one call.
pub type Solver<'a> = Bound<'a, Cusolver>;

impl Solver<'_> {
    /// A workspace size query: `query(handle, &mut lwork)`.
    pub fn lwork(
        &self,
        routine: &str,
        query: impl FnOnce(Handle, *mut c_int) -> Status,
    ) -> Result<c_int> {
        let mut lwork: c_int = 0;
        self.run(routine, |h| query(h, &mut lwork))?;
        workspace_len(routine, lwork)
    }
}

/// A queried `lwork` as the workspace's length (at least 1). The 32-bit API reports a
/// workspace past `i32::MAX` elements as a wrapped, negative size: an error, never a
/// 1-element workspace that the routine would overrun.
fn workspace_len(routine: &str, lwork: c_int) -> Result<c_int> {
    if lwork < 0 {
        return Err(Error::invalid_argument(format!(
            "cuSOLVER's {routine} reports a workspace of {lwork} elements: the matrices are \
             past its 32-bit API"
        )));
    }
    Ok(lwork.max(1))
}

/// The routines of one element type, with ferrax's element types in place of cuSOLVER's
/// (`Complex<f32>` for `cuComplex`: the same layout). Raw calls: every pointer is device memory
/// the routine may read or write as cuSOLVER documents.
#[allow(clippy::too_many_arguments, clippy::missing_safety_doc)] // cuSOLVER's signatures
pub trait Dense: Copy + 'static {
    unsafe fn getrf_buffer_size(
        h: Handle,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        lwork: *mut c_int,
    ) -> Status;
    unsafe fn getrf(
        h: Handle,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        work: *mut Self,
        ipiv: *mut c_int,
        info: *mut c_int,
    ) -> Status;
    unsafe fn potrf_buffer_size(
        h: Handle,
        uplo: Fill,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        lwork: *mut c_int,
    ) -> Status;
    unsafe fn potrf(
        h: Handle,
        uplo: Fill,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        work: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> Status;
    unsafe fn potrf_batched(
        h: Handle,
        uplo: Fill,
        n: c_int,
        a: *mut *mut Self,
        lda: c_int,
        info: *mut c_int,
        batch: c_int,
    ) -> Status;
    unsafe fn geqrf_buffer_size(
        h: Handle,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        lwork: *mut c_int,
    ) -> Status;
    unsafe fn geqrf(
        h: Handle,
        m: c_int,
        n: c_int,
        a: *mut Self,
        lda: c_int,
        tau: *mut Self,
        work: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> Status;
    unsafe fn orgqr_buffer_size(
        h: Handle,
        m: c_int,
        n: c_int,
        k: c_int,
        a: *const Self,
        lda: c_int,
        tau: *const Self,
        lwork: *mut c_int,
    ) -> Status;
    unsafe fn orgqr(
        h: Handle,
        m: c_int,
        n: c_int,
        k: c_int,
        a: *mut Self,
        lda: c_int,
        tau: *const Self,
        work: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> Status;
    unsafe fn ormqr_buffer_size(
        h: Handle,
        side: Side,
        trans: Op,
        m: c_int,
        n: c_int,
        k: c_int,
        a: *const Self,
        lda: c_int,
        tau: *const Self,
        c: *const Self,
        ldc: c_int,
        lwork: *mut c_int,
    ) -> Status;
    unsafe fn ormqr(
        h: Handle,
        side: Side,
        trans: Op,
        m: c_int,
        n: c_int,
        k: c_int,
        a: *const Self,
        lda: c_int,
        tau: *const Self,
        c: *mut Self,
        ldc: c_int,
        work: *mut Self,
        lwork: c_int,
        info: *mut c_int,
    ) -> Status;
}

macro_rules! dense {
    ($t:ty, $raw:ty, $getrf_bs:ident, $getrf:ident, $potrf_bs:ident,
     $potrf:ident, $potrf_batched:ident, $geqrf_bs:ident, $geqrf:ident, $orgqr_bs:ident,
     $orgqr:ident, $ormqr_bs:ident, $ormqr:ident) => {
        impl Dense for $t {
            unsafe fn getrf_buffer_size(
                h: Handle,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                lwork: *mut c_int,
            ) -> Status {
                sys::$getrf_bs(h, m, n, a.cast::<$raw>(), lda, lwork)
            }
            unsafe fn getrf(
                h: Handle,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                work: *mut Self,
                ipiv: *mut c_int,
                info: *mut c_int,
            ) -> Status {
                sys::$getrf(
                    h,
                    m,
                    n,
                    a.cast::<$raw>(),
                    lda,
                    work.cast::<$raw>(),
                    ipiv,
                    info,
                )
            }
            unsafe fn potrf_buffer_size(
                h: Handle,
                uplo: Fill,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                lwork: *mut c_int,
            ) -> Status {
                sys::$potrf_bs(h, uplo, n, a.cast::<$raw>(), lda, lwork)
            }
            unsafe fn potrf(
                h: Handle,
                uplo: Fill,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                work: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> Status {
                sys::$potrf(
                    h,
                    uplo,
                    n,
                    a.cast::<$raw>(),
                    lda,
                    work.cast::<$raw>(),
                    lwork,
                    info,
                )
            }
            unsafe fn potrf_batched(
                h: Handle,
                uplo: Fill,
                n: c_int,
                a: *mut *mut Self,
                lda: c_int,
                info: *mut c_int,
                batch: c_int,
            ) -> Status {
                sys::$potrf_batched(h, uplo, n, a.cast::<*mut $raw>(), lda, info, batch)
            }
            unsafe fn geqrf_buffer_size(
                h: Handle,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                lwork: *mut c_int,
            ) -> Status {
                sys::$geqrf_bs(h, m, n, a.cast::<$raw>(), lda, lwork)
            }
            unsafe fn geqrf(
                h: Handle,
                m: c_int,
                n: c_int,
                a: *mut Self,
                lda: c_int,
                tau: *mut Self,
                work: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> Status {
                sys::$geqrf(
                    h,
                    m,
                    n,
                    a.cast::<$raw>(),
                    lda,
                    tau.cast::<$raw>(),
                    work.cast::<$raw>(),
                    lwork,
                    info,
                )
            }
            unsafe fn orgqr_buffer_size(
                h: Handle,
                m: c_int,
                n: c_int,
                k: c_int,
                a: *const Self,
                lda: c_int,
                tau: *const Self,
                lwork: *mut c_int,
            ) -> Status {
                sys::$orgqr_bs(h, m, n, k, a.cast::<$raw>(), lda, tau.cast::<$raw>(), lwork)
            }
            unsafe fn orgqr(
                h: Handle,
                m: c_int,
                n: c_int,
                k: c_int,
                a: *mut Self,
                lda: c_int,
                tau: *const Self,
                work: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> Status {
                sys::$orgqr(
                    h,
                    m,
                    n,
                    k,
                    a.cast::<$raw>(),
                    lda,
                    tau.cast::<$raw>(),
                    work.cast::<$raw>(),
                    lwork,
                    info,
                )
            }
            unsafe fn ormqr_buffer_size(
                h: Handle,
                side: Side,
                trans: Op,
                m: c_int,
                n: c_int,
                k: c_int,
                a: *const Self,
                lda: c_int,
                tau: *const Self,
                c: *const Self,
                ldc: c_int,
                lwork: *mut c_int,
            ) -> Status {
                sys::$ormqr_bs(
                    h,
                    side,
                    trans,
                    m,
                    n,
                    k,
                    a.cast::<$raw>(),
                    lda,
                    tau.cast::<$raw>(),
                    c.cast::<$raw>(),
                    ldc,
                    lwork,
                )
            }
            unsafe fn ormqr(
                h: Handle,
                side: Side,
                trans: Op,
                m: c_int,
                n: c_int,
                k: c_int,
                a: *const Self,
                lda: c_int,
                tau: *const Self,
                c: *mut Self,
                ldc: c_int,
                work: *mut Self,
                lwork: c_int,
                info: *mut c_int,
            ) -> Status {
                sys::$ormqr(
                    h,
                    side,
                    trans,
                    m,
                    n,
                    k,
                    a.cast::<$raw>(),
                    lda,
                    tau.cast::<$raw>(),
                    c.cast::<$raw>(),
                    ldc,
                    work.cast::<$raw>(),
                    lwork,
                    info,
                )
            }
        }
    };
}

dense!(
    f32,
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
    sys::cuComplex,
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
    sys::cuDoubleComplex,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_workspace_size_is_an_error() {
        assert_eq!(workspace_len("getrf_bufferSize", 0).ok(), Some(1));
        assert_eq!(workspace_len("getrf_bufferSize", 4096).ok(), Some(4096));
        let error = workspace_len("geqrf_bufferSize", i32::MIN + 7).unwrap_err();
        assert!(
            error.message.contains("geqrf_bufferSize") && error.message.contains("32-bit"),
            "{}",
            error.message
        );
    }
}
