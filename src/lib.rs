//! ferrax: JAX's custom-call kernels as typed XLA FFI handlers.
//!
//! - [`ffi`]: the XLA FFI C API (raw mirror and safe layer, `ffi_handler!`).
//! - [`ops`]: one module per op family, each with its handlers.
//! - [`capi`]: the other exported C symbols (target table, LAPACK table fillers).

pub mod capi;
pub mod cuda;
pub mod ffi;
pub mod ops;
