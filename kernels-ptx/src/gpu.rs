//! The PTX entry points: `#[no_mangle] extern "ptx-kernel"` functions, each a thin call into a
//! body that is unit-tested on the host. Their names and parameters are the contract with the
//! launches in `src/cuda/` of the host crate.

use crate::threefry;

/// `cu_threefry2x32_ffi`: `(out0, out1)[i] = threefry2x32((key0, key1)[i], (x0, x1)[i])`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32(
    key0: *const u32,
    key1: *const u32,
    x0: *const u32,
    x1: *const u32,
    out0: *mut u32,
    out1: *mut u32,
    n: u64,
) {
    threefry::threefry2x32_kernel(key0, key1, x0, x1, out0, out1, n)
}

/// `jax.random.bits` (partitionable threefry) for `total / per_key` keys, 8-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits8(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u8,
) {
    threefry::threefry2x32_bits_kernel::<u8, 16>(keys, per_key, total, out)
}

/// As `ferrax_threefry2x32_bits8`, 16-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits16(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u16,
) {
    threefry::threefry2x32_bits_kernel::<u16, 8>(keys, per_key, total, out)
}

/// As `ferrax_threefry2x32_bits8`, 32-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits32(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u32,
) {
    threefry::threefry2x32_bits_kernel::<u32, 4>(keys, per_key, total, out)
}

/// As `ferrax_threefry2x32_bits8`, 64-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits64(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u64,
) {
    threefry::threefry2x32_bits_kernel::<u64, 2>(keys, per_key, total, out)
}

use crate::pivots;

/// `cu_lu_pivots_to_permutation` for many small matrices; see `pivots::launch_config`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_lu_pivots_to_permutation(
    pivots: *const i32,
    permutation: *mut i32,
    batch: u64,
    k: u32,
    size: u32,
) {
    pivots::batched_kernel(pivots, permutation, batch, k, size)
}

/// `cu_lu_pivots_to_permutation`, one block per matrix.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_lu_pivots_to_permutation_large(
    pivots: *const i32,
    permutation: *mut i32,
    batch: u64,
    k: u32,
    size: u32,
) {
    pivots::large_kernel(pivots, permutation, batch, k, size)
}

/// `cu_lu_pivots_to_permutation`, one thread per matrix in global memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_lu_pivots_to_permutation_global(
    pivots: *const i32,
    permutation: *mut i32,
    batch: u64,
    k: u32,
    size: u32,
) {
    pivots::global_kernel(pivots, permutation, batch, k, size)
}
