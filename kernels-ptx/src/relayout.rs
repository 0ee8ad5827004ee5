//! Batched matrix copies between layouts: how the GPU targets on jax's row-major arrays reach
//! cuSOLVER and cuBLAS (column-major) for matrices past ferrax's own kernels, which read and
//! write row-major matrices themselves.

use crate::grid::{global_idx_x, grid_size_x};
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig};

/// Where element `(i, j)` of matrix `b` of a batch lies: `b·matrix + i·row + j·col` elements
/// from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strides {
    pub matrix: u64,
    pub row: u64,
    pub col: u64,
}

impl Strides {
    /// Contiguous row-major `rows×cols` matrices, back to back.
    pub const fn row_major(rows: u64, cols: u64) -> Strides {
        Strides {
            matrix: rows * cols,
            row: cols,
            col: 1,
        }
    }

    /// Column-major matrices of leading dimension `ld`, `matrix` elements apart.
    pub const fn column_major(ld: u64, matrix: u64) -> Strides {
        Strides {
            matrix,
            row: 1,
            col: ld,
        }
    }
}

kernel_args! {
    /// The arguments of `ferrax_copy_matrices_b{4,8,16}`: the `batch` `rows×cols` matrices of
    /// `src`, laid out as the `from_*` strides say, copied to `dst` as the `to_*` strides say
    /// (see [`Strides`]; flat, one `ld.param` a field).
    pub struct CopyMatricesArgs<T> {
        pub src: *const T,
        pub dst: *mut T,
        pub rows: u64,
        pub cols: u64,
        pub batch: u64,
        pub from_matrix: u64,
        pub from_row: u64,
        pub from_col: u64,
        pub to_matrix: u64,
        pub to_row: u64,
        pub to_col: u64,
        /// Nonzero: zeros below the diagonal instead of `src`'s elements.
        pub upper: u32,
    }
}

/// `dst(b, i, j) = src(b, i, j)` for the `batch` `rows×cols` matrices, or zero below the
/// diagonal (`i > j`) when `upper != 0`. Consecutive threads take consecutive destination
/// elements along `dst`'s unit stride (the writes coalesce; the reads stride).
///
/// # Safety
/// Both arrays span every element their strides reach; they do not overlap.
#[inline(always)]
pub unsafe fn copy_matrices_kernel<T: Copy + Default>(args: CopyMatricesArgs<T>) {
    let CopyMatricesArgs {
        src,
        dst,
        rows,
        cols,
        batch,
        upper,
        ..
    } = args;
    let from = Strides {
        matrix: args.from_matrix,
        row: args.from_row,
        col: args.from_col,
    };
    let to = Strides {
        matrix: args.to_matrix,
        row: args.to_row,
        col: args.to_col,
    };
    let per = rows * cols;
    let total = per * batch;
    let mut e = global_idx_x();
    while e < total {
        let (b, r) = (e / per, e % per);
        let (i, j) = if to.col == 1 {
            (r / cols, r % cols)
        } else {
            (r % rows, r / rows)
        };
        let at = |s: Strides| (b * s.matrix + i * s.row + j * s.col) as usize;
        *dst.add(at(to)) = if upper != 0 && i > j {
            T::default()
        } else {
            *src.add(at(from))
        };
        e += grid_size_x();
    }
}

const BLOCK: u32 = 256;
/// A grid-stride loop: more blocks than this only add scheduling.
const MAX_GRID: u64 = 1 << 16;

kernel_entries! {
    /// The copies by element size in bytes; the 16-byte element is two words.
    pub const COPY_MATRICES: Kernels<usize, CopyMatricesArgs<AnyElement>>;
    (4) [copy_matrices b4]: CopyMatricesArgs<u32> = copy_matrices_kernel;
    (8) [copy_matrices b8]: CopyMatricesArgs<u64> = copy_matrices_kernel;
    (16) [copy_matrices b16]: CopyMatricesArgs<[u64; 2]> = copy_matrices_kernel;
}

/// The launch of `ferrax_copy_matrices_b<bytes>` ([`CopyMatricesArgs`]) for `elements`
/// elements of `bytes` bytes (4, 8 or 16; `None` otherwise).
pub fn copy_matrices_launch(
    bytes: usize,
    elements: u64,
) -> Option<LaunchConfig<CopyMatricesArgs<AnyElement>>> {
    let grid = elements.div_ceil(BLOCK as u64).min(MAX_GRID) as u32;
    COPY_MATRICES.launch(bytes, grid, BLOCK, 0)
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    extern crate std;
    use super::*;
    use crate::launch::run_on_host;
    use std::vec::Vec;

    fn copy(
        src: &[u64],
        dst: &mut [u64],
        (rows, cols, batch): (u64, u64, u64),
        from: Strides,
        to: Strides,
        upper: bool,
    ) {
        let config = copy_matrices_launch(8, rows * cols * batch).unwrap();
        let args = CopyMatricesArgs {
            src: src.as_ptr(),
            dst: dst.as_mut_ptr(),
            rows,
            cols,
            batch,
            from_matrix: from.matrix,
            from_row: from.row,
            from_col: from.col,
            to_matrix: to.matrix,
            to_row: to.row,
            to_col: to.col,
            upper: upper as u32,
        };
        // Fewer blocks than planned, so that the grid-stride loop runs too.
        unsafe { run_on_host(config.kernel, config.grid.min(2), 64, 0, args) };
    }

    #[test]
    fn row_major_to_padded_column_major_and_back() {
        let (rows, cols, batch, wide) = (5u64, 3u64, 4u64, 7u64);
        let src: Vec<u64> = (1..=rows * cols * batch).collect();
        // Into column-major matrices rows·wide apart (columns 3..7 untouched).
        let mut mid = std::vec![0u64; (rows * wide * batch) as usize];
        let to = Strides::column_major(rows, rows * wide);
        copy(
            &src,
            &mut mid,
            (rows, cols, batch),
            Strides::row_major(rows, cols),
            to,
            false,
        );
        for b in 0..batch {
            for i in 0..rows {
                for j in 0..wide {
                    let got = mid[(b * rows * wide + j * rows + i) as usize];
                    let want = if j < cols {
                        src[(b * rows * cols + i * cols + j) as usize]
                    } else {
                        0
                    };
                    assert_eq!(got, want, "matrix {b} ({i}, {j})");
                }
            }
        }
        // Back, R-style: the upper triangle only.
        let mut back = std::vec![u64::MAX; src.len()];
        copy(
            &mid,
            &mut back,
            (rows, cols, batch),
            to,
            Strides::row_major(rows, cols),
            true,
        );
        for (e, (&got, &want)) in back.iter().zip(&src).enumerate() {
            let (i, j) = ((e as u64 % (rows * cols)) / cols, e as u64 % cols);
            assert_eq!(got, if i > j { 0 } else { want }, "element {e}");
        }
    }

    #[test]
    fn launch_sizes() {
        assert_eq!(copy_matrices_launch(16, 1).unwrap().grid, 1);
        assert_eq!(
            copy_matrices_launch(4, 1 << 40).unwrap().grid,
            MAX_GRID as u32
        );
        assert_eq!(copy_matrices_launch(4, 0).unwrap().grid, 0);
        assert!(copy_matrices_launch(2, 8).is_none());
    }
}
