//! Address space without memory behind it, for tests of sizes that cannot be met.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

extern "C" {
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
}

/// `bytes` of address space: readable and writable, but no memory behind it
/// until touched (MAP_NORESERVE), so an op that touched it first would show up as the test's
/// own memory growing, not as a passing test.
pub struct Reserved {
    ptr: *mut c_void,
    bytes: usize,
}

impl Reserved {
    pub fn new(bytes: usize) -> Reserved {
        const PROT_READ_WRITE: c_int = 0x1 | 0x2;
        const MAP_PRIVATE_ANONYMOUS_NORESERVE: c_int = 0x02 | 0x20 | 0x4000;
        // SAFETY: a fresh anonymous mapping, unmapped on drop.
        let ptr = unsafe {
            mmap(
                null_mut(),
                bytes,
                PROT_READ_WRITE,
                MAP_PRIVATE_ANONYMOUS_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            ptr as isize != -1,
            "could not reserve {bytes} bytes of address space"
        );
        Reserved { ptr, bytes }
    }
    pub fn at<T>(&self) -> *mut T {
        self.ptr.cast()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { munmap(self.ptr, self.bytes) };
    }
}

/// This process's resident memory.
pub fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether an allocation larger than the machine fails at once: under the kernel's default
/// overcommit heuristic (0) or strict accounting (2), not where every allocation "succeeds"
/// and fails only when touched (1), which is said on stderr.
pub fn allocations_past_memory_fail() -> bool {
    let mode = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    if mode.trim() == "1" {
        eprintln!("skipped: vm.overcommit_memory = 1");
        return false;
    }
    true
}
