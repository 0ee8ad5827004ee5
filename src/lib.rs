//! ferrax: JAX's custom-call kernels as typed XLA FFI handlers.
//!
//! - [`ffi`]: the XLA FFI binding (the C API's mirror, typed operands and attributes, the
//!   handler declarations and the registration table).
//! - [`linalg`]: the CPU computations, typed cores over strided batch views.
//! - [`ops`]: one module per op family: its targets and shape rules, then its CPU handlers
//!   (over [`linalg`]) and CUDA handlers (over [`cuda`]), in their own files.
//! - [`cuda`]: the CUDA runtime, cuSOLVER and cuBLAS.
//! - [`memory`]: allocation sized by inputs, fallible and overflow-checked.
//! - [`capi`]: the other exported C symbols (target table, LAPACK table fillers, the C ABI
//!   over the cores, Catalyst's symbols).

pub mod capi;
pub mod cuda;
pub mod error;
pub mod ffi;
pub mod linalg;
pub mod memory;
pub mod ops;
