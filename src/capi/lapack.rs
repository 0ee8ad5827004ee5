//! Filling the LAPACK table from C (the Python package passes SciPy's capsule pointers).

use std::ffi::{c_char, c_int, c_void, CStr};

/// Stores `function` as LAPACK routine `name` (e.g. "dgetrf"); the function must have the LP64
/// reference signature without hidden string lengths, as `scipy.linalg.cython_lapack` exports.
/// Returns 1 when stored, 0 when ferrax does not use that routine (or an argument is null).
///
/// # Safety
/// `name` must be null or a NUL-terminated string; `function` must have that signature.
#[no_mangle]
pub unsafe extern "C" fn ferrax_lapack_register(
    name: *const c_char,
    function: *mut c_void,
) -> c_int {
    if name.is_null() {
        return 0;
    }
    let Ok(name) = CStr::from_ptr(name).to_str() else {
        return 0;
    };
    ferrax_cpu_fallback::register(name, function) as c_int
}

/// Fills the LAPACK table by dlopen of `path` (e.g. scipy-openblas32's `libscipy_openblas.so`).
/// Returns the number of routines found, or -1 with a message in `error` (NUL-terminated,
/// truncated to `error_len` bytes).
///
/// # Safety
/// `path` must be a NUL-terminated string; `error` null or writable for `error_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrax_lapack_load_library(
    path: *const c_char,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    let outcome = if path.is_null() {
        Err("null path".to_string())
    } else {
        let path = CStr::from_ptr(path).to_string_lossy().into_owned();
        ferrax_cpu_fallback::load_library(std::path::Path::new(&path))
    };
    match outcome {
        Ok(found) => found as c_int,
        Err(message) => {
            if !error.is_null() && error_len > 0 {
                let bytes = message.as_bytes();
                let len = bytes.len().min(error_len - 1);
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), error.cast::<u8>(), len);
                *error.add(len) = 0;
            }
            -1
        }
    }
}

/// Number of LAPACK routines ferrax uses that have no pointer yet (0 when the table is full).
#[no_mangle]
pub extern "C" fn ferrax_lapack_missing_count() -> usize {
    ferrax_cpu_fallback::missing().len()
}
