//! A GPU kernel written in Rust and called from JAX with `ferrax.kernel_call` (`axpy.py`):
//! `out = a·x + y` over `n` elements, one per thread, for f32 and f64.
//!
//! The arithmetic is a plain generic function, tested on the host like any Rust code; on
//! `nvptx64` each entry computes its thread's element and calls it. Built to PTX (`axpy.ptx`,
//! committed) with ferrax's recipe:
//!
//! ```text
//! scripts/build-ptx examples/rust-kernel/axpy.ptx target/example-nvptx examples/rust-kernel
//! ```
//!
//! Each entry's parameters are what `ferrax.kernel_call` passes, in order: the array
//! arguments' addresses and scalars by value, then the result's address.
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx))]

use core::ops::{Add, Mul};

/// Element `i` of `a·x + y`, written to `out`, where `i < n` (threads past `n` do nothing).
///
/// # Safety
/// `x`, `y` and `out` point to at least `n` elements.
#[inline(always)]
pub unsafe fn axpy<T>(i: usize, x: *const T, y: *const T, a: T, n: u32, out: *mut T)
where
    T: Copy + Mul<Output = T> + Add<Output = T>,
{
    if i < n as usize {
        *out.add(i) = a * *x.add(i) + *y.add(i);
    }
}

#[cfg(target_arch = "nvptx64")]
mod entries {
    use core::arch::nvptx;

    /// This thread's element: one per thread along x.
    fn element() -> usize {
        // SAFETY: special registers, readable by every thread.
        unsafe {
            nvptx::_block_idx_x() as usize * nvptx::_block_dim_x() as usize
                + nvptx::_thread_idx_x() as usize
        }
    }

    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn axpy_f32(
        x: *const f32,
        y: *const f32,
        a: f32,
        n: u32,
        out: *mut f32,
    ) {
        super::axpy(element(), x, y, a, n, out)
    }

    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn axpy_f64(
        x: *const f64,
        y: *const f64,
        a: f64,
        n: u32,
        out: *mut f64,
    ) {
        super::axpy(element(), x, y, a, n, out)
    }

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo) -> ! {
        // SAFETY: aborts the kernel; the launch then reports an error to the host.
        unsafe { nvptx::trap() }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn axpy_writes_the_elements_below_n() {
        let x = [1.0f64, 2.0, 3.0, 4.0];
        let y = [0.5f64, -1.0, 2.0, 8.0];
        let mut out = [0.0f64; 4];
        for i in 0..6 {
            // SAFETY: four elements each; threads at or past n = 3 write nothing.
            unsafe { super::axpy(i, x.as_ptr(), y.as_ptr(), 2.0, 3, out.as_mut_ptr()) };
        }
        assert_eq!(out, [2.5, 3.0, 8.0, 0.0]);
    }
}
