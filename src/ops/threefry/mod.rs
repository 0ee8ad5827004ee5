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

crate::ffi_operands! {
    /// `threefry2x32`'s operands.
    pub struct Threefry<'a> {
        arg key0: Array<'a, u32>,
        arg key1: Array<'a, u32>,
        arg x0: Array<'a, u32>,
        arg x1: Array<'a, u32>,
        ret out0: Array<'a, u32>,
        ret out1: Array<'a, u32>,
    }
}

impl Threefry<'_> {
    /// The contract of `cu_threefry2x32_ffi`: every operand of one shape (jax broadcasts the
    /// keys before the call); returns the element count.
    pub(crate) fn len(&self) -> Result<usize> {
        let shape = self.out0.dims();
        for array in [&self.key0, &self.key1, &self.x0, &self.x1, &self.out0, &self.out1] {
            array.expect_dims(shape)?;
        }
        Ok(self.out0.len())
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
