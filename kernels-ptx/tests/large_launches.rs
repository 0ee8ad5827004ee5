//! Launch sizes for batches and lengths far past 2^32 elements, computed without memory: every
//! grid stays within CUDA's 2^31 - 1 blocks (the kernels that loop over their batch are capped,
//! the warp kernels that do not are refused past it), so no size wraps into a short grid that
//! would leave matrices undone.

use ferrax_kernels::launch::ScalarKind::{self, *};
use ferrax_kernels::small::{self, qr, Variant};
use ferrax_kernels::{cholesky_update, pivots, rnn, threefry};

const SMS: u32 = 132;
const OPT_IN_SHARED: usize = 227 << 10;
const GRID_MAX: u32 = i32::MAX as u32;
const KINDS: [ScalarKind; 4] = [F32, F64, C64, C128];

#[test]
fn grid_stride_kernels_are_capped_for_any_length() {
    for length in [1u64 << 31, 1 << 40, u64::MAX / 2] {
        let grid = threefry::launch_config(length, SMS).grid;
        assert!((1..=64 * SMS).contains(&grid), "threefry, {length}: {grid}");
        for bits in [8, 16, 32, 64] {
            let grid = threefry::bits_launch_config(bits, length, SMS).grid;
            assert!(
                (1..=64 * SMS).contains(&grid),
                "bits {bits}, {length}: {grid}"
            );
        }
        let grid = pivots::launch_config(length, 4, 4, SMS, OPT_IN_SHARED).grid;
        assert!(
            (1..=32 * SMS).contains(&grid),
            "pivots, batch {length}: {grid}"
        );
        for kind in [F32, F64] {
            let grids = [
                rnn::forward_step_launch(kind, rnn::Mode::Lstm, length).map(|l| l.grid),
                rnn::backward_step_launch(kind, rnn::Mode::Gru, length).map(|l| l.grid),
                rnn::finish_launch(kind, length).map(|l| l.grid),
                rnn::column_sums_launch(kind, length).map(|l| l.grid),
            ];
            for grid in grids {
                let grid = grid.expect("an entry per real dtype");
                assert!(
                    (1..=8 * SMS).contains(&grid),
                    "rnn {kind:?}, {length}: {grid}"
                );
            }
        }
        for kind in KINDS {
            for n in [4, 64, 1000] {
                let grid = cholesky_update::launch_config(kind, n, length, SMS).0.grid;
                assert!(
                    (1..=64 * SMS).contains(&grid),
                    "{kind:?} update, n {n}: {grid}"
                );
            }
        }
    }
}

#[test]
fn block_kernels_loop_over_any_batch() {
    for kind in KINDS {
        for n in [48, 100] {
            let batch = 1u64 << 40;
            let getrf = small::getrf_launch(kind, n, n, batch, OPT_IN_SHARED);
            assert!(
                n > 48 || getrf.is_some(),
                "getrf {kind:?} {n}×{n}: no block kernel"
            );
            let geqrf = qr::geqrf_launch(kind, n, n, batch, OPT_IN_SHARED);
            for (what, grid) in [
                ("getrf", getrf.map(|l| l.grid)),
                ("geqrf", geqrf.map(|l| l.grid)),
            ] {
                if let Some(grid) = grid {
                    assert_eq!(grid, 1 << 20, "{what} {kind:?} {n}×{n}");
                }
            }
        }
        if let Some(ormqr) = qr::ormqr_launch(kind, 16, 16, 16, 1 << 40, OPT_IN_SHARED) {
            assert_eq!(ormqr.grid, 1 << 20, "ormqr {kind:?}");
        }
    }
}

/// The warp kernels take one matrix group per block: up to 2^31 - 1 blocks, and no plan past
/// it (the handlers then take the libraries' path, which refuses a batch past 32 bits).
#[test]
fn warp_kernels_stop_at_the_largest_grid() {
    // 4×4 f32: 32 matrices per 128-thread block.
    let fits = 32 * u64::from(GRID_MAX);
    let plan = small::plan(F32, 4, 4, fits, None, OPT_IN_SHARED).unwrap();
    assert_eq!((plan.0, plan.1), (Variant::Rows(4), GRID_MAX));
    assert!(small::plan(F32, 4, 4, fits + 1, None, OPT_IN_SHARED).is_none());
    assert!(small::getrf_launch(F32, 4, 4, fits + 1, OPT_IN_SHARED).is_none());
    let plan = qr::plan(F32, 4, 4, fits, None).unwrap();
    assert_eq!((plan.0, plan.1), (Variant::Rows(4), GRID_MAX));
    assert!(qr::plan(F32, 4, 4, fits + 1, None).is_none());
    // geqrf has a block kernel for every order: past the warp grid, it loops there.
    let geqrf = qr::geqrf_launch(F32, 4, 4, fits + 1, OPT_IN_SHARED).unwrap();
    assert_eq!(geqrf.grid, 1 << 20);
}
