//! `threefry2x32`: the contract of jaxlib's `cu_threefry2x32_ffi` (four u32 arrays of one
//! shape in, two out), bit-exact with `jax.random`'s threefry.

use crate::cuda::GpuStream;
use crate::ffi::{Buffer, DataType, Error, Result, Stream, ThreadPool};
use crate::ffi_handler;
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_threefry2x32";
/// Random bits with the counters made inside the kernel (GPU only).
pub const BITS_TARGET: &CStr = c"ferrax_threefry2x32_bits";

/// Elements per pool task: enough to amortize scheduling (~20 ns of hashing each).
const ELEMENTS_PER_TASK: usize = 1 << 16;

ffi_handler! {
    /// Threefry-2x32 hash on the host, vectorized and split across XLA's thread pool.
    pub fn ferrax_cpu_threefry2x32 = TARGET;
    ctx pool: ThreadPool;
    arg key0: Buffer;
    arg key1: Buffer;
    arg x0: Buffer;
    arg x1: Buffer;
    ret out0: Buffer;
    ret out1: Buffer;
    traits = 0;
    body = threefry_cpu;
}

fn threefry_cpu(
    pool: ThreadPool<'_>,
    key0: Buffer<'_>,
    key1: Buffer<'_>,
    x0: Buffer<'_>,
    x1: Buffer<'_>,
    out0: Buffer<'_>,
    out1: Buffer<'_>,
) -> Result<()> {
    expect_same_u32_shape([&key0, &key1, &x0, &x1, &out0, &out1])?;
    // SAFETY: results are distinct from arguments and each other (no aliasing declared).
    let (k0, k1, a, b, y0, y1) = unsafe {
        (
            key0.as_slice::<u32>()?,
            key1.as_slice::<u32>()?,
            x0.as_slice::<u32>()?,
            x1.as_slice::<u32>()?,
            out0.as_mut_slice::<u32>()?,
            out1.as_mut_slice::<u32>()?,
        )
    };
    let n = y0.len();
    let (y0, y1) = (
        crate::ops::SharedMut(y0.as_mut_ptr()),
        crate::ops::SharedMut(y1.as_mut_ptr()),
    );
    pool.parallel_chunks(n, ELEMENTS_PER_TASK, &|range| {
        // SAFETY: chunks are disjoint ranges of the outputs.
        let (o0, o1) = unsafe {
            (
                y0.slice(range.start, range.len()),
                y1.slice(range.start, range.len()),
            )
        };
        hash(
            &k0[range.clone()],
            &k1[range.clone()],
            &a[range.clone()],
            &b[range],
            o0,
            o1,
        );
        Ok(())
    })
}

/// Picks the widest vector unit the CPU has; the baseline x86-64 build only assumes SSE2.
fn hash(k0: &[u32], k1: &[u32], x0: &[u32], x1: &[u32], y0: &mut [u32], y1: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present.
        return unsafe { hash_avx2(k0, k1, x0, x1, y0, y1) };
    }
    ferrax_kernels::threefry::threefry2x32_slices(k0, k1, x0, x1, y0, y1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hash_avx2(
    k0: &[u32],
    k1: &[u32],
    x0: &[u32],
    x1: &[u32],
    y0: &mut [u32],
    y1: &mut [u32],
) {
    ferrax_kernels::threefry::threefry2x32_slices(k0, k1, x0, x1, y0, y1)
}

/// The contract of `cu_threefry2x32_ffi`: every operand uint32 and of one shape (jax
/// broadcasts the keys before the call).
fn expect_same_u32_shape(buffers: [&Buffer<'_>; 6]) -> Result<()> {
    let shape = buffers[4].dims();
    for buffer in buffers {
        buffer.expect_dtype(DataType::U32)?;
        buffer.expect_dims(shape)?;
    }
    Ok(())
}

ffi_handler! {
    /// Threefry-2x32 hash on the GPU (element-wise over four materialized arrays).
    pub fn ferrax_cuda_threefry2x32 = TARGET;
    ctx stream: Stream;
    arg key0: Buffer;
    arg key1: Buffer;
    arg x0: Buffer;
    arg x1: Buffer;
    ret out0: Buffer;
    ret out1: Buffer;
    traits = 0;
    body = threefry_cuda;
}

fn threefry_cuda(
    stream: Stream,
    key0: Buffer<'_>,
    key1: Buffer<'_>,
    x0: Buffer<'_>,
    x1: Buffer<'_>,
    out0: Buffer<'_>,
    out1: Buffer<'_>,
) -> Result<()> {
    expect_same_u32_shape([&key0, &key1, &x0, &x1, &out0, &out1])?;
    let n = out0.element_count()? as u64;
    if n == 0 {
        return Ok(());
    }
    let gpu = GpuStream::adopt(stream)?;
    let config = ferrax_kernels::threefry::launch_config(n, gpu.multiprocessors()?);
    let args = ferrax_kernels::threefry::ThreefryArgs {
        key0: key0.data_ptr().cast_const().cast(),
        key1: key1.data_ptr().cast_const().cast(),
        x0: x0.data_ptr().cast_const().cast(),
        x1: x1.data_ptr().cast_const().cast(),
        out0: out0.data_ptr().cast(),
        out1: out1.data_ptr().cast(),
        n,
    };
    // SAFETY: six device buffers of n uint32 each.
    unsafe { gpu.launch(&config, args) }
}

ffi_handler! {
    /// `jax.random.bits` for threefry keys (`jax_threefry_partitionable` semantics): keys
    /// `uint32[..., 2]`, bits `uint{8,16,32,64}[..., *shape]`; element `e` of a key's block is
    /// the hash of the 64-bit counter `e`, made in the kernel instead of read from memory.
    pub fn ferrax_cuda_threefry2x32_bits = BITS_TARGET;
    ctx stream: Stream;
    arg keys: Buffer;
    ret bits: Buffer;
    traits = 0;
    body = bits_cuda;
}

fn bits_cuda(stream: Stream, keys: Buffer<'_>, bits: Buffer<'_>) -> Result<()> {
    keys.expect_dtype(DataType::U32)?;
    keys.expect_rank_at_least(1)?;
    let (key_batch, pair) = keys.dims().split_at(keys.rank() - 1);
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
    let key_count = keys.element_count()? as u64 / 2;
    if total == 0 {
        return Ok(());
    }
    if key_count == 0 {
        return Err(Error::invalid_argument(format!(
            "{}: no keys for {total} random bits",
            BITS_TARGET.to_string_lossy()
        )));
    }
    let per_key = total / key_count;
    let gpu = GpuStream::adopt(stream)?;
    let config = ferrax_kernels::threefry::bits_launch_config(width, total, gpu.multiprocessors()?);
    let args = ferrax_kernels::threefry::BitsArgs {
        keys: keys.data_ptr().cast_const().cast(),
        per_key,
        total,
        out: bits.data_ptr().cast(),
    };
    // SAFETY: key_count key pairs and `total` outputs of the declared width.
    unsafe { gpu.launch(&config, args) }
}
