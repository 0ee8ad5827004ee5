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

/// cuBLAS's matrix products of one real element type (the RNN's GEMMs).
#[allow(clippy::too_many_arguments, clippy::missing_safety_doc)] // cuBLAS's signature
pub trait Gemm: Copy + 'static {
    /// `C_i = alpha·op(A_i)·op(B_i) + beta·C_i`, column-major, `X_i = X + i·stride_x`, for
    /// `i < batch`; `alpha` and `beta` are host values.
    unsafe fn gemm_strided_batched(
        h: Handle,
        transa: sys::cublasOperation_t,
        transb: sys::cublasOperation_t,
        mnk: [c_int; 3],
        alpha: *const Self,
        a: *const Self,
        lda: c_int,
        stride_a: i64,
        b: *const Self,
        ldb: c_int,
        stride_b: i64,
        beta: *const Self,
        c: *mut Self,
        ldc: c_int,
        stride_c: i64,
        batch: c_int,
    ) -> Status;
}

macro_rules! gemm {
    ($t:ty, $gemm:ident) => {
        impl Gemm for $t {
            unsafe fn gemm_strided_batched(
                h: Handle,
                transa: sys::cublasOperation_t,
                transb: sys::cublasOperation_t,
                [m, n, k]: [c_int; 3],
                alpha: *const Self,
                a: *const Self,
                lda: c_int,
                stride_a: i64,
                b: *const Self,
                ldb: c_int,
                stride_b: i64,
                beta: *const Self,
                c: *mut Self,
                ldc: c_int,
                stride_c: i64,
                batch: c_int,
            ) -> Status {
                sys::$gemm(
                    h, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                    ldc, stride_c, batch,
                )
            }
        }
    };
}

gemm!(f32, cublasSgemmStridedBatched);
gemm!(f64, cublasDgemmStridedBatched);

impl Blas<'_> {
    /// Lets cuBLAS use TF32 tensor cores for f32 products (`allowed`), or not. A pooled handle
    /// keeps its mode: every call sets it.
    pub fn tf32(&self, allowed: bool) -> crate::ffi::Result<()> {
        let mode = if allowed {
            sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: a live handle.
        self.run("cublasSetMathMode", |h| unsafe {
            sys::cublasSetMathMode(h, mode)
        })
    }
}
