//! An emulated CUDA device for ferrax's tests: the CUDA driver, cuBLAS and cuSOLVER entry
//! points that ferrax loads at run time (through cudarc's dynamic loading), implemented on the
//! host, so that every CUDA handler runs unchanged in CI on a machine without a GPU.
//!
//! One shared library serves as `libcuda.so`, `libcublas.so` and `libcusolver.so` (the test
//! process puts links by those names first on its library path):
//! - [`memory`]: device memory is host memory, every allocation guarded by inaccessible pages
//!   on both sides, so that a kernel reading or writing past a buffer crashes the test, and
//!   every copy, memset and library operand is checked against the allocations it must lie in.
//! - [`driver`]: one device and context, streams that run their work at once (stream order is
//!   program order), `cuModuleLoadData` on ferrax's PTX, `cuModuleGetFunction` by entry name
//!   (it must be in the PTX and in the kernels crate's host tables), and `cuLaunchKernel`
//!   running the host build of the entry on the kernels crate's grid emulator with the launch's
//!   grid, block, shared memory and argument struct; entries of code ferrax did not build (a
//!   kernel call's) run their host builds in [`user_kernels`], also through
//!   `cuLaunchKernelEx` with clusters; events time the host's work between them, and the test
//!   host can make streams report a graph capture.
//! - [`blas`], [`solver`]: the cuBLAS and cuSOLVER routines ferrax calls, on host memory, with
//!   LAPACK (the `ferrax-cpu-fallback` table, filled from `FERRAX_TEST_LAPACK`) underneath;
//!   they check what NVIDIA's check (leading dimensions, workspace sizes against their own
//!   `bufferSize` answers, handles bound to a stream, device pointers).
//!
//! What it cannot show: PTX code generation and ptxas (`scripts/check-ptx` and the GPU check
//! cover those), the device's timing, blocks running concurrently, and driver quirks. Every
//! problem it finds is recorded ([`ferrax_emulated_problems`]) as well as returned as a CUDA
//! error.

pub mod blas;
pub mod driver;
pub mod memory;
pub mod solver;
pub mod user_kernels;

use std::ffi::c_char;
use std::sync::Mutex;

/// What the emulation found wrong, in order; the tests assert it stays empty.
static PROBLEMS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records a problem (a call that the real driver or library would reject, or that would
/// touch memory outside its buffers).
pub(crate) fn problem(message: String) {
    eprintln!("emulated CUDA: {message}");
    PROBLEMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(message);
}

/// Every kernel launched and library routine called, in order: the tests check which paths
/// ran.
static CALLS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn record_call(name: &str) {
    CALLS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(name.to_string());
}

/// Takes the log of calls (kernel entry names, library routine names) recorded so far, as
/// [`ferrax_emulated_problems`] takes the problems.
///
/// # Safety
/// As [`ferrax_emulated_problems`].
#[no_mangle]
pub unsafe extern "C" fn ferrax_emulated_calls(out: *mut c_char, len: usize) -> usize {
    take_lines(&CALLS, out, len)
}

/// Takes the problems recorded so far, one per line, into `out` (at most `len` bytes with
/// the NUL); returns how many there were.
///
/// # Safety
/// `out` points to `len` writable bytes (or is null with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn ferrax_emulated_problems(out: *mut c_char, len: usize) -> usize {
    take_lines(&PROBLEMS, out, len)
}

/// Empties `log` into `out` as lines (at most `len` bytes with the NUL); returns the count.
unsafe fn take_lines(log: &Mutex<Vec<String>>, out: *mut c_char, len: usize) -> usize {
    let taken = std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
    if len > 0 && !out.is_null() {
        let text = taken.join("\n");
        let bytes = &text.as_bytes()[..text.len().min(len - 1)];
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast(), bytes.len());
        *out.add(bytes.len()) = 0;
    }
    taken.len()
}
