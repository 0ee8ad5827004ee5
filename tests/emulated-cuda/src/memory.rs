//! Device memory: host memory mapped with an inaccessible page on each side, each buffer placed
//! to end exactly at the page after it (to its 16-byte alignment), so that a kernel that reads
//! or writes past the end of a buffer (or before its first page) faults. The allocations are
//! recorded, so that copies, memsets and library operands can be checked against them.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// One live allocation: the mapping and the buffer inside it.
struct Allocation {
    map: usize,
    map_len: usize,
    len: usize,
}

/// Live allocations by the buffer's start address.
static LIVE: Mutex<BTreeMap<usize, Allocation>> = Mutex::new(BTreeMap::new());

fn page() -> usize {
    // SAFETY: a plain query.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// The alignment every buffer gets (XLA's: 16 bytes at least).
const ALIGN: usize = 16;

/// Allocates `bytes` of device memory (the test host's XLA buffers and scratch): null if the
/// mapping fails. The buffer ends at most `ALIGN - 1` bytes before an inaccessible page.
#[no_mangle]
pub extern "C" fn ferrax_emulated_alloc(bytes: usize) -> *mut c_void {
    let page = page();
    let len = bytes.max(1).div_ceil(ALIGN) * ALIGN;
    let data_pages = len.div_ceil(page);
    let map_len = (data_pages + 2) * page;
    // SAFETY: a fresh anonymous mapping, none of whose pages we touch yet.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let data = map as usize + page;
    // SAFETY: the data pages, inside the mapping.
    if unsafe {
        libc::mprotect(
            data as *mut c_void,
            data_pages * page,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    } != 0
    {
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(map, map_len) };
        return std::ptr::null_mut();
    }
    let start = data + data_pages * page - len;
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).insert(
        start,
        Allocation {
            map: map as usize,
            map_len,
            len: bytes,
        },
    );
    start as *mut c_void
}

/// Frees memory from [`ferrax_emulated_alloc`]; a pointer that is not a live buffer is a
/// problem.
#[no_mangle]
pub extern "C" fn ferrax_emulated_free(ptr: *mut c_void) {
    let removed = LIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ptr as usize));
    match removed {
        // SAFETY: the mapping of this allocation, no longer referenced.
        Some(a) => unsafe {
            libc::munmap(a.map as *mut c_void, a.map_len);
        },
        None => crate::problem(format!("free of {ptr:?}, which is no live allocation")),
    }
}

/// The live allocation holding `[ptr, ptr + len)`: its start and length, if there is one.
fn containing(ptr: usize, len: usize) -> Option<(usize, usize)> {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let (&start, allocation) = live.range(..=ptr).next_back()?;
    let end = ptr.checked_add(len)?;
    (end <= start + allocation.len).then_some((start, allocation.len))
}

/// Checks that `len` bytes at `ptr` lie in one live allocation (nothing to check for
/// `len == 0`); records a problem naming `what` otherwise.
pub fn check(ptr: *const c_void, len: usize, what: &str) -> bool {
    if len == 0 || containing(ptr as usize, len).is_some() {
        return true;
    }
    let near = {
        let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.range(..=ptr as usize)
            .next_back()
            .map(|(&start, a)| {
                format!(" (the allocation before it: {} bytes at {start:#x})", a.len)
            })
            .unwrap_or_default()
    };
    crate::problem(format!(
        "{what}: {len} bytes at {:#x} are not in one device allocation{near}",
        ptr as usize
    ));
    false
}

/// Bytes of the live allocation from `ptr` to its end, if `ptr` lies in one.
pub fn remaining(ptr: *const c_void) -> Option<usize> {
    let (start, len) = containing(ptr as usize, 0)?;
    Some(start + len - ptr as usize)
}
