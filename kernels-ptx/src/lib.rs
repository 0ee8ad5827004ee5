//! Kernel arithmetic shared by the CPU handlers and (compiled to PTX) the GPU kernels.
//!
//! Everything here is `no_std`, allocation-free and works on slices or raw pointers, so the
//! same code is unit-tested on the host and compiled for `nvptx64-nvidia-cuda`. Kernel bodies
//! read their position through [`grid`]. Each kernel family declares its argument struct and
//! its entry points next to its plans, with the macros of [`launch`]: on nvptx the
//! `extern "ptx-kernel"` entries, each a call into a host-testable body, and on the host the
//! same entries run on the grid emulator.
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, core_float_math, asm_experimental_arch)
)]

pub mod cholesky_update;
pub mod grid;
pub mod launch;
pub mod pivots;
pub mod pointers;
pub mod relayout;
pub mod rnn;
pub mod scalar;
pub mod small;
pub mod sparse;
pub mod threefry;
pub mod tridiagonal;

#[cfg(test)]
mod test_buffer;

#[cfg(feature = "std")]
extern crate std;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: aborts the kernel; the launch then reports an error to the host.
    unsafe { core::arch::nvptx::trap() }
}
