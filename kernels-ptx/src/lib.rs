//! Kernel arithmetic shared by the CPU handlers and (compiled to PTX) the GPU kernels.
//!
//! Everything here is `no_std`, allocation-free and works on slices, so the same code is
//! unit-tested on the host and compiled for `nvptx64-nvidia-cuda`.
#![no_std]

pub mod pivots;
pub mod threefry;
pub mod tridiagonal;
