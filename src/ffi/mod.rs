//! The XLA FFI C API in Rust: the raw `#[repr(C)]` mirror (`sys`) and a safe layer over it.
//!
//! A handler is declared with [`ffi_handler!`](crate::ffi_handler): a signature (context
//! values, operands, results and attributes, decoded by type) bound to one function that
//! returns [`Result`]. Decoding failures become `INVALID_ARGUMENT` errors that name the
//! target, the operand and what was expected; panics become `INTERNAL` errors.

mod attrs;
mod buffer;
mod context;
mod dtype;
mod handler;
pub mod sys;

pub use crate::error::{Error, ErrorCode, Result};
pub use attrs::{Attr, Attrs, FromAttr, Span};
pub use buffer::{checked_product, Array, Buffer, Matrices, MatrixBatch, Operand};
pub use context::{
    Buffers, DeviceOrdinal, FromContext, RunId, ScratchAllocator, Stage, Stream, ThreadPool,
};
pub use dtype::{DataType, NativeType};
pub use handler::{
    invoke, unsupported_dtype, CallFrame, FromBuffer, Platform, Registration, Signature,
};
pub use num_complex::Complex;
