//! OpenBLAS's own threads, turned off where ferrax already runs LAPACK calls in parallel.
//!
//! Each LAPACK call on a large enough matrix would otherwise start OpenBLAS's thread pool, and
//! with XLA's pool running several calls at once the cores are oversubscribed (OpenBLAS's
//! threads spin while they wait). OpenBLAS >= 0.3.27 has `openblas_set_num_threads_local`,
//! which sets the count for the calling thread only; SciPy's bundled OpenBLAS exports it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The name `register` takes for it.
pub const SET_NUM_THREADS_LOCAL: &str = "openblas_set_num_threads_local";

static SET_LOCAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

pub(crate) fn register(function: *mut c_void) {
    SET_LOCAL.store(function, Ordering::Release);
}

/// Runs `body` with OpenBLAS limited to the calling thread (when the loaded OpenBLAS can be
/// told so; otherwise `body` runs as it is).
pub fn single_threaded<R>(body: impl FnOnce() -> R) -> R {
    let function = SET_LOCAL.load(Ordering::Acquire);
    if function.is_null() {
        return body();
    }
    // SAFETY: registered as OpenBLAS's `int openblas_set_num_threads_local(int)`, which returns
    // the previous count.
    let set: unsafe extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(function) };
    let previous = unsafe { set(1) };
    struct Restore(unsafe extern "C" fn(c_int) -> c_int, c_int);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: as above.
            unsafe { (self.0)(self.1) };
        }
    }
    let _restore = Restore(set, previous);
    body()
}
