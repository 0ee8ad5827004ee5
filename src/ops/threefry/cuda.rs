//! The CUDA handlers of threefry: ferrax's PTX kernels on XLA's stream.

use super::{Threefry, THREEFRY2X32, THREEFRY2X32_BITS};
use crate::cuda::GpuStream;
use crate::ffi::{Array, Buffer, DataType, Error, Result, Stream};
use crate::ffi_handlers;

ffi_handlers! {
    /// Threefry-2x32 hash on the GPU (element-wise over four materialized arrays).
    pub fn ferrax_cuda_threefry2x32(THREEFRY2X32, Cuda) {
        ctx stream: Stream;
        operands ops: Threefry;
        body = threefry_cuda;
    }

    /// `jax.random.bits` for threefry keys (`jax_threefry_partitionable` semantics): keys
    /// `uint32[..., 2]`, bits `uint{8,16,32,64}[..., *shape]`; element `e` of a key's block is
    /// the hash of the 64-bit counter `e`, made in the kernel instead of read from memory.
    pub fn ferrax_cuda_threefry2x32_bits(THREEFRY2X32_BITS, Cuda) {
        ctx stream: Stream;
        arg keys: Array<u32>;
        ret bits: Buffer;
        body = bits_cuda;
    }
}
fn threefry_cuda(stream: Stream, ops: Threefry<'_>) -> Result<()> {
    let n = ops.len()? as u64;
    if n == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    let config = ferrax_kernels::threefry::launch_config(n, gpu.multiprocessors()?);
    let args = ferrax_kernels::threefry::ThreefryArgs {
        key0: ops.key0.ptr().cast_const(),
        key1: ops.key1.ptr().cast_const(),
        x0: ops.x0.ptr().cast_const(),
        x1: ops.x1.ptr().cast_const(),
        out0: ops.out0.ptr(),
        out1: ops.out1.ptr(),
        n,
    };
    // SAFETY: six device buffers of n uint32 each.
    unsafe { gpu.launch(&config, args) }
}


fn bits_cuda(stream: Stream, keys: Array<'_, u32>, bits: Buffer<'_>) -> Result<()> {
    keys.buffer.expect_rank_at_least(1)?;
    let (key_batch, pair) = keys.dims().split_at(keys.dims().len() - 1);
    if pair != [2] || bits.dims().get(..key_batch.len()) != Some(key_batch) {
        return Err(bits.mismatch(
            format!(
                "keys of shape [..., 2] with bits of shape keys.shape[:-1] + shape; keys {:?}",
                keys.dims()
            ),
            format!("bits {:?}", bits.dims()),
        ));
    }
    let width = match bits.dtype() {
        DataType::U8 => 8,
        DataType::U16 => 16,
        DataType::U32 => 32,
        DataType::U64 => 64,
        other => {
            return Err(bits.mismatch("dtype u8, u16, u32 or u64".into(), format!("{other:?}")))
        }
    };
    let total = bits.element_count()? as u64;
    let key_count = keys.len() as u64 / 2;
    if total == 0 {
        return Ok(());
    }
    if key_count == 0 {
        return Err(Error::invalid_argument(format!(
            "{}: no keys for {total} random bits",
            THREEFRY2X32_BITS.to_string_lossy()
        )));
    }
    let per_key = total / key_count;
    let gpu = GpuStream::adopt(stream)?;
    let config = ferrax_kernels::threefry::bits_launch_config(width, total, gpu.multiprocessors()?);
    let args = ferrax_kernels::threefry::BitsArgs {
        keys: keys.ptr().cast_const(),
        per_key,
        total,
        out: bits.data_ptr().cast(),
    };
    // SAFETY: key_count key pairs and `total` outputs of the declared width.
    unsafe { gpu.launch(&config, args) }
}
