//! The CPU handler of threefry: the kernels crate's hash, vectorized, split across XLA's
//! thread pool.

use super::{Threefry, THREEFRY2X32};
use crate::ffi::{Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::parallel::{parallel_chunks, SharedMut};

/// Elements per pool task: enough to amortize scheduling (~20 ns of hashing each).
const ELEMENTS_PER_TASK: usize = 1 << 16;

ffi_handlers! {
    /// Threefry-2x32 hash on the host, vectorized and split across XLA's thread pool.
    pub fn ferrax_cpu_threefry2x32(THREEFRY2X32, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Threefry;
        body = threefry_cpu;
    }
}

fn threefry_cpu(pool: ThreadPool<'_>, ops: Threefry<'_>) -> Result<()> {
    let n = ops.len()?;
    // SAFETY: results are distinct from arguments and each other (no aliasing declared).
    let (k0, k1, a, b, y0, y1) = unsafe {
        (
            ops.key0.as_slice(),
            ops.key1.as_slice(),
            ops.x0.as_slice(),
            ops.x1.as_slice(),
            ops.out0.as_mut_slice(),
            ops.out1.as_mut_slice(),
        )
    };
    let (y0, y1) = (SharedMut(y0.as_mut_ptr()), SharedMut(y1.as_mut_ptr()));
    parallel_chunks(&pool, n, ELEMENTS_PER_TASK, &|range| {
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
