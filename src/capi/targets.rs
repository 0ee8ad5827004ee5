//! The table of (target name, platform, handler) that `ferrax.register()` walks.

use crate::ffi::sys::XLA_FFI_Handler;
use crate::ops;
use std::ffi::c_char;
use std::sync::OnceLock;

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
unsafe impl Send for FerraxTarget {}

/// The table, built once from the op families' declarations.
fn table() -> &'static [FerraxTarget] {
    static TABLE: OnceLock<Vec<FerraxTarget>> = OnceLock::new();
    TABLE.get_or_init(|| {
        ops::handlers()
            .map(|h| FerraxTarget {
                name: h.target.as_ptr(),
                platform: h.platform.name().as_ptr(),
                handler: h.handler,
            })
            .collect()
    })
}

/// Returns the target table and writes its length to `count`.
///
/// # Safety
/// `count` must be null or point to writable memory.
#[no_mangle]
pub unsafe extern "C" fn ferrax_targets(count: *mut usize) -> *const FerraxTarget {
    if let Some(count) = count.as_mut() {
        *count = table().len();
    }
    table().as_ptr()
}
