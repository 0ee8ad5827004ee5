//! Arrays of per-matrix device pointers for the library routines that take one pointer per
//! matrix (cuBLAS `getrfBatched`/`geqrfBatched`, cuSOLVER `potrfBatched`). Built by a kernel
//! on the call's stream, so the host never waits for the device to fill them.

use crate::grid::{global_idx_x, grid_size_x};
use crate::launch::LaunchConfig;

/// `pointers[i] = base + i·stride` (addresses in bytes) for `i < count`.
///
/// # Safety
/// `pointers` holds `count` words.
pub unsafe fn batch_pointers_kernel(pointers: *mut u64, base: u64, stride: u64, count: u64) {
    let mut i = global_idx_x();
    while i < count {
        *pointers.add(i as usize) = base + i * stride;
        i += grid_size_x();
    }
}

const BLOCK: u32 = 256;
/// A grid-stride loop: this many blocks write 262 144 pointers at a time, more than enough to
/// keep the copy engines' bandwidth for an array this small.
const MAX_GRID: u64 = 1024;

/// The launch of `ferrax_batch_pointers` for `count` pointers.
pub fn batch_pointers_launch(count: u64) -> LaunchConfig {
    LaunchConfig {
        kernel: "ferrax_batch_pointers",
        grid: count.div_ceil(BLOCK as u64).min(MAX_GRID) as u32,
        block: BLOCK,
        shared_bytes: 0,
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    extern crate std;
    use super::*;
    use crate::grid::launch;
    use crate::test_buffer::Buffer;

    #[test]
    fn every_pointer_is_base_plus_its_stride() {
        for count in [1u64, 5, 256, 257, 1000] {
            let config = batch_pointers_launch(count);
            assert!(config.grid as u64 * config.block as u64 >= count);
            let mut pointers = Buffer::new(&std::vec![u64::MAX; count as usize + 1], 0);
            let out = pointers.ptr();
            let (base, stride) = (0x7f00_1234_5000u64, 4096 * 8 + 48);
            // Fewer blocks than the plan, so the grid-stride loop is exercised too.
            launch(config.grid.min(2), config.block, 0, || unsafe {
                batch_pointers_kernel(out as *mut u64, base, stride, count)
            });
            let written = pointers.as_mut_slice();
            for (i, &p) in written[..count as usize].iter().enumerate() {
                assert_eq!(p, base + i as u64 * stride, "pointer {i} of {count}");
            }
            assert_eq!(written[count as usize], u64::MAX, "wrote past {count}");
        }
    }

    #[test]
    fn the_grid_is_capped() {
        assert_eq!(batch_pointers_launch(1 << 30).grid, MAX_GRID as u32);
        assert_eq!(batch_pointers_launch(0).grid, 0);
    }
}
