//! `threefry2x32`: the contract of jaxlib's `cu_threefry2x32_ffi` (four u32 arrays of one
//! shape in, two out), bit-exact with `jax.random`'s threefry.

use crate::ffi::{Buffer, DataType, Result, ThreadPool};
use crate::ffi_handler;
use std::ffi::CStr;

pub const TARGET: &CStr = c"ferrax_threefry2x32";

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
    let shape = out0.dims();
    for buffer in [&key0, &key1, &x0, &x1, &out0, &out1] {
        buffer.expect_dtype(DataType::U32)?;
        buffer.expect_dims(shape)?;
    }
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
                std::slice::from_raw_parts_mut(y0.at(range.start), range.len()),
                std::slice::from_raw_parts_mut(y1.at(range.start), range.len()),
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
