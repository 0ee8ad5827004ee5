//! The CUDA platform: the driver API loaded at run time through `cudarc` (so builds and
//! CPU-only machines need no CUDA), XLA's stream and its context adopted, ferrax's PTX module
//! loaded once per context, and launches whose failures become FFI errors naming the kernel
//! (`runtime`); cuSOLVER and cuBLAS (also loaded at run time, from the libraries jax's CUDA
//! plugin brings), one module each, for the matrices ferrax's kernels do not take. The CUDA
//! handlers themselves live with their op families (`ops::*::cuda`).
//!
//! CUDA 12 users: the driver API used here (module loading, launches, memset/memcpy, stream
//! context) is unchanged between CUDA 12 and 13 and `libcuda.so.1` comes with the driver, so
//! the same build runs on either; the PTX targets sm_80 and is JIT-compiled for newer GPUs.

pub mod cublas;
pub mod cusolver;
mod kernels;
mod library;
mod runtime;

pub(crate) use kernels::{small_kernel, GpuScalar};
pub(crate) use library::{library_dims, library_int, GpuLibrary};
pub use runtime::{Bound, GpuStream, HandlePool, LaunchShape, Library, KERNELS_PTX};
