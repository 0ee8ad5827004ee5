//! cuBLAS's batched factorizations (`libcublas`, loaded at run time through cudarc): one call
//! for a whole batch of matrices given as an array of device pointers, which beats a loop of
//! cuSOLVER calls for many mid-size matrices. Handles are pooled per context as cuSOLVER's.

use super::runtime::{GpuStream, HandlePool};
use crate::ffi::{Error, Result};
use cudarc::cublas::sys;
use num_complex::Complex;
use std::ffi::c_int;
use std::sync::OnceLock;

pub type Handle = sys::cublasHandle_t;
pub type Status = sys::cublasStatus_t;

static HANDLES: HandlePool = HandlePool::new();

pub fn check(routine: &str, status: Status) -> Result<()> {
    if status == Status::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "cuBLAS {routine} failed: {status:?}"
        )))
    }
}

fn ensure_library() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: probes for the library without resolving any symbol.
    if *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() }) {
        Ok(())
    } else {
        Err(Error::failed_precondition(
            "cuBLAS (libcublas.so) could not be loaded; jax's CUDA plugin brings it (the nvidia \
             cublas wheel) and loads it when jax starts its CUDA backend",
        ))
    }
}

/// A cuBLAS handle bound to XLA's stream for one call; back to the pool when dropped.
pub struct Blas<'a> {
    handle: Handle,
    gpu: &'a GpuStream,
}

impl<'a> Blas<'a> {
    pub fn on(gpu: &'a GpuStream) -> Result<Self> {
        ensure_library()?;
        let handle = HANDLES.take(gpu.context_key(), || {
            let mut handle: Handle = std::ptr::null_mut();
            // SAFETY: an out-parameter; the stream's context is current.
            check("cublasCreate", unsafe { sys::cublasCreate_v2(&mut handle) })?;
            Ok(handle as usize)
        })? as Handle;
        let blas = Blas { handle, gpu };
        // SAFETY: a live handle and XLA's live stream of the same context.
        check("cublasSetStream", unsafe {
            sys::cublasSetStream_v2(handle, gpu.raw() as sys::cudaStream_t)
        })?;
        Ok(blas)
    }

    pub fn run(&self, routine: &str, call: impl FnOnce(Handle) -> Status) -> Result<()> {
        check(routine, call(self.handle))
    }
}

impl Drop for Blas<'_> {
    fn drop(&mut self) {
        HANDLES.give_back(self.gpu.context_key(), self.handle as usize);
    }
}

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
