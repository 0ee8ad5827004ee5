//! Threefry-2x32: the contract of jaxlib's `cu_threefry2x32_ffi` (four u32 arrays of one
//! shape in, two out), bit-exact with `jax.random`'s threefry; and on the GPU random bits
//! with the counters made inside the kernel.

pub mod cpu;
pub mod cuda;

use crate::ffi::{Array, Result};
use std::ffi::CStr;

pub const THREEFRY2X32: &CStr = c"ferrax_threefry2x32";
/// Random bits with the counters made inside the kernel (GPU only).
pub const THREEFRY2X32_BITS: &CStr = c"ferrax_threefry2x32_bits";

/// The contract of `cu_threefry2x32_ffi`: every operand of one shape (jax broadcasts the keys
/// before the call).
pub(crate) fn expect_same_shape(arrays: [&Array<'_, u32>; 6]) -> Result<()> {
    let shape = arrays[4].dims();
    for array in arrays {
        array.expect_dims(shape)?;
    }
    Ok(())
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
