//! OpenBLAS's own threads, turned off where ferrax already runs LAPACK calls in parallel.
//!
//! Each LAPACK call on a large enough matrix would otherwise start OpenBLAS's thread pool, and
//! with XLA's pool running several calls at once the cores are oversubscribed (OpenBLAS's
//! threads spin while they wait). OpenBLAS >= 0.3.27 has `openblas_set_num_threads_local`,
//! which SciPy's bundled OpenBLAS exports. Despite its name, in those (pthreads) builds it
//! sets the process-wide count (it calls `openblas_set_num_threads`) and returns the
//! process-wide one: so the count is lowered once for all the threads inside
//! [`single_threaded`] and restored when the last of them leaves. Each thread restoring the
//! count it was handed left OpenBLAS on one thread for good whenever two interleaved (one
//! 512×512 complex SVD after a batched one: 125 -> 165 ms on 2 cores).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// The name `register` takes for it.
pub const SET_NUM_THREADS_LOCAL: &str = "openblas_set_num_threads_local";

static SET_LOCAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// How many threads are inside [`single_threaded`], and the count to restore when none is.
static INSIDE: Mutex<(usize, c_int)> = Mutex::new((0, 0));

pub(crate) fn register(function: *mut c_void) {
    SET_LOCAL.store(function, Ordering::Release);
}

/// Runs `body` with OpenBLAS limited to one thread (when the loaded OpenBLAS can be told so;
/// otherwise `body` runs as it is).
pub fn single_threaded<R>(body: impl FnOnce() -> R) -> R {
    let function = SET_LOCAL.load(Ordering::Acquire);
    if function.is_null() {
        return body();
    }
    // SAFETY: registered as OpenBLAS's `int openblas_set_num_threads_local(int)`, which returns
    // the previous count.
    let set: unsafe extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(function) };
    {
        let mut inside = INSIDE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if inside.0 == 0 {
            // SAFETY: as above.
            inside.1 = unsafe { set(1) };
        }
        inside.0 += 1;
    }
    struct Leave(unsafe extern "C" fn(c_int) -> c_int);
    impl Drop for Leave {
        fn drop(&mut self) {
            let mut inside = INSIDE
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            inside.0 -= 1;
            if inside.0 == 0 {
                // SAFETY: as above.
                unsafe { (self.0)(inside.1) };
            }
        }
    }
    let _leave = Leave(set);
    body()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI32;
    use std::sync::Barrier;

    /// OpenBLAS's process-wide count, as the pthreads builds keep it.
    static COUNT: AtomicI32 = AtomicI32::new(4);

    extern "C" fn set_process_wide(threads: c_int) -> c_int {
        COUNT.swap(threads, Ordering::SeqCst)
    }

    /// Two threads enter, the first leaves while the second is still inside, then the second
    /// leaves: OpenBLAS is on one thread while either is inside and back on its own count after
    /// (each restoring what it was handed would leave it on one).
    #[test]
    fn interleaved_threads_leave_openblas_its_own_count() {
        register(set_process_wide as *mut c_void);
        let (entered, first_left) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                single_threaded(|| {
                    entered.wait();
                    assert_eq!(COUNT.load(Ordering::SeqCst), 1);
                });
                first_left.wait();
            });
            scope.spawn(|| {
                single_threaded(|| {
                    entered.wait();
                    first_left.wait();
                    assert_eq!(COUNT.load(Ordering::SeqCst), 1);
                });
            });
        });
        assert_eq!(COUNT.load(Ordering::SeqCst), 4);
        assert_eq!(single_threaded(|| COUNT.load(Ordering::SeqCst)), 1);
        assert_eq!(COUNT.load(Ordering::SeqCst), 4);
    }
}
