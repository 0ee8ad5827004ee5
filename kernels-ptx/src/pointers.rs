//! Arrays of per-matrix device pointers for the library routines that take one pointer per
//! matrix (cuBLAS `getrfBatched`/`geqrfBatched`, cuSOLVER `potrfBatched`). Built by a kernel
//! on the call's stream, so the host never waits for the device to fill them.

use crate::grid::{global_idx_x, grid_size_x};
use crate::launch::{kernel_args, kernel_entries, LaunchConfig};

kernel_args! {
    /// The arguments of `ferrax_batch_pointers`: `pointers[i] = base + i·stride` (addresses in
    /// bytes) for `i < count`.
    pub struct BatchPointersArgs {
        pub pointers: *mut u64,
        pub base: u64,
        pub stride: u64,
        pub count: u64,
    }
}

/// `pointers[i] = base + i·stride` (addresses in bytes) for `i < count`.
///
/// # Safety
/// `pointers` holds `count` words.
#[inline(always)]
pub unsafe fn batch_pointers_kernel(args: BatchPointersArgs) {
    let BatchPointersArgs {
        pointers,
        base,
        stride,
        count,
    } = args;
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

kernel_entries! {
    pub const BATCH_POINTERS: Kernels<(), BatchPointersArgs>;
    (()) [batch_pointers]: BatchPointersArgs = batch_pointers_kernel;
}

/// The launch of `ferrax_batch_pointers` for `count` pointers.
pub fn batch_pointers_launch(count: u64) -> LaunchConfig<BatchPointersArgs> {
    let grid = count.div_ceil(BLOCK as u64).min(MAX_GRID) as u32;
    BATCH_POINTERS
        .launch((), grid, BLOCK, 0)
        .expect("the one entry")
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    extern crate std;
    use super::*;
    use crate::launch::run_on_host;
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
            let args = BatchPointersArgs {
                pointers: out as *mut u64,
                base,
                stride,
                count,
            };
            unsafe { run_on_host(config.kernel, config.grid.min(2), config.block, 0, args) };
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
