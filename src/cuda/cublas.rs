//! cuBLAS's batched factorizations (`libcublas`, loaded at run time through cudarc): one call
//! for a whole batch of matrices given as an array of device pointers, which beats a loop of
//! cuSOLVER calls for many mid-size matrices. Handles are pooled per context as cuSOLVER's.

use super::runtime::{Bound, HandlePool, Library};
use cudarc::cublas::sys;
use num_complex::Complex;
use std::ffi::c_int;
use std::sync::OnceLock;

pub type Handle = sys::cublasHandle_t;
pub type Status = sys::cublasStatus_t;

pub enum Cublas {}

impl Library for Cublas {
    const NAME: &'static str = "cuBLAS (libcublas.so)";
    type Context = sys::cublasContext;
    type Status = Status;
    const SUCCESS: Status = Status::CUBLAS_STATUS_SUCCESS;
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
        sys::cublasCreate_v2(handle)
    }
    unsafe fn set_stream(handle: Handle, stream: cudarc::driver::sys::CUstream) -> Status {
        sys::cublasSetStream_v2(handle, stream as sys::cudaStream_t)
    }
}

/// A cuBLAS handle bound to XLA's stream for one call.
pub type Blas<'a> = Bound<'a, Cublas>;

/// The batched routines of one element type (raw calls; `a` and `tau` are device arrays of
/// device pointers, one per matrix).
#[allow(clippy::too_many_arguments, clippy::missing_safety_doc)] // cuBLAS's signatures
pub trait Batched: Copy + 'static {
    /// `ipiv` (1-based, `n` per matrix) and `info` (one per matrix) are device arrays.
    unsafe fn getrf_batched(
        h: Handle,
        n: c_int,
        a: *const *mut Self,
        lda: c_int,
        ipiv: *mut c_int,
        info: *mut c_int,
        batch: c_int,
    ) -> Status;
    /// `info` is one host integer: non-zero for an invalid argument.
    unsafe fn geqrf_batched(
        h: Handle,
        m: c_int,
        n: c_int,
        a: *const *mut Self,
        lda: c_int,
        tau: *const *mut Self,
        info: *mut c_int,
        batch: c_int,
    ) -> Status;
}

macro_rules! batched {
    ($t:ty, $raw:ty, $getrf:ident, $geqrf:ident) => {
        impl Batched for $t {
            unsafe fn getrf_batched(
                h: Handle,
                n: c_int,
                a: *const *mut Self,
                lda: c_int,
                ipiv: *mut c_int,
                info: *mut c_int,
                batch: c_int,
            ) -> Status {
                sys::$getrf(h, n, a.cast::<*mut $raw>(), lda, ipiv, info, batch)
            }
            unsafe fn geqrf_batched(
                h: Handle,
                m: c_int,
                n: c_int,
                a: *const *mut Self,
                lda: c_int,
                tau: *const *mut Self,
                info: *mut c_int,
                batch: c_int,
            ) -> Status {
                sys::$geqrf(
                    h,
                    m,
                    n,
                    a.cast::<*mut $raw>(),
                    lda,
                    tau.cast::<*mut $raw>(),
                    info,
                    batch,
                )
            }
        }
    };
}

batched!(f32, f32, cublasSgetrfBatched, cublasSgeqrfBatched);
batched!(f64, f64, cublasDgetrfBatched, cublasDgeqrfBatched);
batched!(
    Complex<f32>,
    sys::cuComplex,
    cublasCgetrfBatched,
    cublasCgeqrfBatched
);
batched!(
    Complex<f64>,
    sys::cuDoubleComplex,
    cublasZgetrfBatched,
    cublasZgeqrfBatched
);
