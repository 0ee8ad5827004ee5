//! The table of (target name, platform, handler) that `ferrax.register()` walks.

use crate::ffi::sys::XLA_FFI_Handler;
use crate::ops;
use std::ffi::c_char;

#[repr(C)]
pub struct FerraxTarget {
    /// NUL-terminated target name, e.g. `ferrax_getrf`.
    pub name: *const c_char,
    /// NUL-terminated JAX platform name: `cpu` or `CUDA`.
    pub platform: *const c_char,
    pub handler: XLA_FFI_Handler,
}

// The table only holds pointers to static strings and functions.
unsafe impl Sync for FerraxTarget {}

macro_rules! targets {
    ($(($name:path, $platform:literal, $handler:path)),* $(,)?) => {
        static TARGETS: &[FerraxTarget] = &[$(FerraxTarget {
            name: $name.as_ptr(),
            platform: concat!($platform, "\0").as_ptr() as *const c_char,
            handler: $handler,
        }),*];
    };
}

targets!(
    (
        ops::threefry::TARGET,
        "cpu",
        ops::threefry::ferrax_cpu_threefry2x32
    ),
    (
        ops::pivots::TARGET,
        "cpu",
        ops::pivots::ferrax_cpu_lu_pivots_to_permutation
    ),
    (ops::getrf::TARGET, "cpu", ops::getrf::ferrax_cpu_getrf),
    (
        ops::getrf::ROW_MAJOR_TARGET,
        "cpu",
        ops::getrf::ferrax_cpu_getrf_row_major
    ),
    (ops::potrf::TARGET, "cpu", ops::potrf::ferrax_cpu_potrf),
    (
        ops::potrf::FUSED_TARGET,
        "cpu",
        ops::potrf::ferrax_cpu_cholesky
    ),
    (ops::trsm::TARGET, "cpu", ops::trsm::ferrax_cpu_trsm),
    (ops::qr::GEQRF_TARGET, "cpu", ops::qr::ferrax_cpu_geqrf),
    (ops::qr::QR_TARGET, "cpu", ops::qr::ferrax_cpu_qr),
    (ops::qr::ORGQR_TARGET, "cpu", ops::qr::ferrax_cpu_orgqr),
    (ops::qr::ORMQR_TARGET, "cpu", ops::qr::ferrax_cpu_ormqr),
    (ops::qr::GEQP3_TARGET, "cpu", ops::qr::ferrax_cpu_geqp3),
    (ops::eigh::TARGET, "cpu", ops::eigh::ferrax_cpu_syevd),
    (
        ops::hessenberg::TARGET,
        "cpu",
        ops::hessenberg::ferrax_cpu_gehrd
    ),
    (
        ops::tridiagonal::TARGET,
        "cpu",
        ops::tridiagonal::ferrax_cpu_sytrd
    ),
    (ops::svd::GESDD_TARGET, "cpu", ops::svd::ferrax_cpu_gesdd),
    (ops::svd::GESVD_TARGET, "cpu", ops::svd::ferrax_cpu_gesvd),
    (ops::eig::TARGET, "cpu", ops::eig::ferrax_cpu_geev),
    (ops::schur::TARGET, "cpu", ops::schur::ferrax_cpu_gees),
    (
        ops::tridiagonal_solve::GTSV_TARGET,
        "cpu",
        ops::tridiagonal_solve::ferrax_cpu_gtsv
    ),
    (
        ops::tridiagonal_solve::PERTURBED_TARGET,
        "cpu",
        ops::tridiagonal_solve::ferrax_cpu_tridiagonal_solve_perturbed
    ),
    (
        ops::sparse::TARGET,
        "cpu",
        ops::sparse::ferrax_cpu_csr_sparse_dense
    ),
    (
        ops::threefry::TARGET,
        "CUDA",
        ops::threefry::ferrax_cuda_threefry2x32
    ),
    (
        ops::threefry::BITS_TARGET,
        "CUDA",
        ops::threefry::ferrax_cuda_threefry2x32_bits
    ),
    (
        ops::pivots::TARGET,
        "CUDA",
        ops::pivots::ferrax_cuda_lu_pivots_to_permutation
    ),
    (ops::getrf::TARGET, "CUDA", ops::getrf::ferrax_cuda_getrf),
    (
        ops::getrf::ROW_MAJOR_TARGET,
        "CUDA",
        ops::getrf::ferrax_cuda_getrf_row_major
    ),
    (ops::potrf::TARGET, "CUDA", ops::potrf::ferrax_cuda_potrf),
    (
        ops::potrf::FUSED_TARGET,
        "CUDA",
        ops::potrf::ferrax_cuda_cholesky
    ),
    (ops::qr::GEQRF_TARGET, "CUDA", ops::qr::ferrax_cuda_geqrf),
    (ops::qr::QR_TARGET, "CUDA", ops::qr::ferrax_cuda_qr),
    (ops::qr::ORGQR_TARGET, "CUDA", ops::qr::ferrax_cuda_orgqr),
    (ops::qr::ORMQR_TARGET, "CUDA", ops::qr::ferrax_cuda_ormqr),
    (
        ops::cholesky_update::TARGET,
        "CUDA",
        ops::cholesky_update::ferrax_cuda_cholesky_update
    ),
);

/// Returns the target table and writes its length to `count`.
///
/// # Safety
/// `count` must be null or point to writable memory.
#[no_mangle]
pub unsafe extern "C" fn ferrax_targets(count: *mut usize) -> *const FerraxTarget {
    if let Some(count) = count.as_mut() {
        *count = TARGETS.len();
    }
    TARGETS.as_ptr()
}
