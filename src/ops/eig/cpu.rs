//! The CPU handler of `geev`: [`crate::linalg::eig::geev`] on XLA's arrays and thread pool.

use super::{expect_shapes, CONTRACT, TARGET};
use crate::ffi::sys::{XLA_FFI_CallFrame, XLA_FFI_Error};
use crate::ffi::{Array, Buffer, Matrices, NativeType, Platform, Registration, Result, ThreadPool};
use crate::ffi_handler;
use crate::linalg::eig::{self, Geev};
use crate::linalg::flags::Vectors;
use crate::linalg::matrix::{Batch, Layout};
use crate::ops::eigenvalues::{by_result_count, eigenvalue_results};

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

pub(crate) const HANDLERS: &[Registration] = &[Registration {
    target: TARGET,
    platform: Platform::Cpu,
    handler: ferrax_cpu_geev,
}];

ffi_handler! {
    /// `ferrax_geev` for real input: eigenvalues as real and imaginary parts.
    fn ferrax_cpu_geev_real(TARGET) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret wr: Buffer;
        ret wi: Buffer;
        ret vl: Matrices<T::Complex>;
        ret vr: Matrices<T::Complex>;
        ret info: Array<i32>;
        attr compute_left: Vectors;
        attr compute_right: Vectors;
        dtype T: Geev = x;
        body = |pool, x, wr, wi, vl, vr, info, left, right| {
            geev_cpu(pool, x, &[wr, wi], [vl, vr], info, [left, right])
        };
    }
}

ffi_handler! {
    /// `ferrax_geev` for complex input: complex eigenvalues.
    fn ferrax_cpu_geev_complex(TARGET) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret w: Buffer;
        ret vl: Matrices<T::Complex>;
        ret vr: Matrices<T::Complex>;
        ret info: Array<i32>;
        attr compute_left: Vectors;
        attr compute_right: Vectors;
        dtype T: Geev = x;
        body = |pool, x, w, vl, vr, info, left, right| {
            geev_cpu(pool, x, &[w], [vl, vr], info, [left, right])
        };
    }
}

fn geev_cpu<T: Geev>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    eigvals: &[Buffer<'_>],
    [vl, vr]: [Matrices<'_, T::Complex>; 2],
    info: Array<'_, i32>,
    [left, right]: [Vectors; 2],
) -> Result<()> {
    // SAFETY: the results are distinct buffers, written by the core alone. The other results:
    // vl, vr, info.
    let w = unsafe { eigenvalue_results(&x, eigvals, CONTRACT, 3)? };
    expect_shapes(&x, &vl, &vr, &info)?;
    // SAFETY: as the eigenvalues.
    let info = unsafe { info.as_mut_slice() };
    let (vl, vr) = (asked_for(vl, left), asked_for(vr, right));
    eig::geev(&pool, x.view(Layout::ColumnMajor), w, vl, vr, info)
}

/// The eigenvectors to compute, or none; jax ignores the vectors it did not ask for, but they
/// should not be uninitialized memory: they are zero.
fn asked_for<V: NativeType + Default>(v: Matrices<'_, V>, job: Vectors) -> Option<Batch<V>> {
    if job.computed() {
        return Some(v.view(Layout::ColumnMajor));
    }
    // SAFETY: a distinct result buffer, which nothing else writes.
    unsafe { v.array.as_mut_slice() }.fill(V::default());
    None
}
