//! The CPU handler of `gees`: [`crate::linalg::schur::gees`] on XLA's arrays and thread pool.

use super::{expect_shapes, expect_unsorted, CONTRACT, TARGET};
use crate::ffi::sys::{XLA_FFI_CallFrame, XLA_FFI_Error};
use crate::ffi::{Array, Buffer, Matrices, Platform, Registration, Result, ThreadPool};
use crate::ffi_handler;
use crate::linalg::flags::{Sort, Vectors};
use crate::linalg::matrix::{InOut, Layout};
use crate::linalg::schur::{self, Gees};
use crate::ops::eigenvalues::{by_result_count, eigenvalue_results};

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

pub(crate) const HANDLERS: &[Registration] = &[Registration {
    target: TARGET,
    platform: Platform::Cpu,
    handler: ferrax_cpu_gees,
}];

ffi_handler! {
    /// `ferrax_gees` for real input: eigenvalues as real and imaginary parts.
    fn ferrax_cpu_gees_real(TARGET) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret schur_vectors: Matrices<T>;
        ret eigvals_real: Buffer;
        ret eigvals_imag: Buffer;
        ret selected_eigvals: Array<i32>;
        ret info: Array<i32>;
        attr mode: Vectors;
        attr sort: Sort;
        dtype T: Gees = x;
        body = |pool, x, x_out, vs, wr, wi, sdim, info, mode, sort| {
            gees_cpu(pool, x, Results { x_out, vs, eigvals: &[wr, wi], sdim, info }, mode, sort)
        };
    }
}

ffi_handler! {
    /// `ferrax_gees` for complex input: complex eigenvalues.
    fn ferrax_cpu_gees_complex(TARGET) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret schur_vectors: Matrices<T>;
        ret eigvals: Buffer;
        ret selected_eigvals: Array<i32>;
        ret info: Array<i32>;
        attr mode: Vectors;
        attr sort: Sort;
        dtype T: Gees = x;
        body = |pool, x, x_out, vs, w, sdim, info, mode, sort| {
            gees_cpu(pool, x, Results { x_out, vs, eigvals: &[w], sdim, info }, mode, sort)
        };
    }
}

/// The results of either signature.
struct Results<'a, 'b, T> {
    x_out: Matrices<'a, T>,
    vs: Matrices<'a, T>,
    /// `[eigvals_real, eigvals_imag]` or `[eigvals]`.
    eigvals: &'b [Buffer<'a>],
    sdim: Array<'a, i32>,
    info: Array<'a, i32>,
}

fn gees_cpu<T: Gees>(
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    out: Results<'_, '_, T>,
    mode: Vectors,
    sort: Sort,
) -> Result<()> {
    expect_unsorted(sort)?;
    // SAFETY: the results are distinct buffers, written by the core alone. The other results:
    // x_out, schur_vectors, selected_eigvals, info.
    let w = unsafe { eigenvalue_results(&x, out.eigvals, CONTRACT, 4)? };
    expect_shapes(&x, &out.x_out, &out.vs, &out.sdim, &out.info)?;
    // SAFETY: as the eigenvalues.
    let (sdim, info) = unsafe { (out.sdim.as_mut_slice(), out.info.as_mut_slice()) };
    let vs = if mode.computed() {
        Some(out.vs.view(Layout::ColumnMajor))
    } else {
        // jax ignores the Schur vectors it did not ask for, but they should not be
        // uninitialized memory.
        // SAFETY: as the eigenvalues.
        unsafe { out.vs.array.as_mut_slice() }.fill(T::default());
        None
    };
    let a = InOut {
        input: x.view(Layout::ColumnMajor),
        output: out.x_out.view(Layout::ColumnMajor),
    };
    schur::gees(&pool, a, w, vs, sdim, info)
}
