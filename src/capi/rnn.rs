//! The sizes of the RNN targets' operands, for their callers: the Python package sizes the
//! packed weights and the reserve at trace time from here, not from a copy of the layout.

use super::linalg::guard;
use std::ffi::c_int;

/// The packed weight vector's length and the reserve's length, in scalars of the computation
/// (an f32 reserve array holds twice as many f32 for an f64 computation), at which the CPU
/// targets keep what the backward pass needs.
///
/// # Safety
/// `weights` and `reserve` point to writable `u64`s.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the network's and the call's sizes
pub unsafe extern "C" fn ferrax_rnn_sizes(
    mode: c_int,
    input_size: i64,
    hidden_size: i64,
    num_layers: i64,
    bidirectional: c_int,
    batch: i64,
    steps: i64,
    weights: *mut u64,
    reserve: *mut u64,
) -> c_int {
    guard(|| {
        let prefix = |e: crate::error::Error| format!("ferrax_rnn_sizes: {}", e.message);
        let sizes = [
            ("input_size", input_size),
            ("hidden_size", hidden_size),
            ("num_layers", num_layers),
        ];
        let config =
            crate::ops::rnn::config(mode, sizes, bidirectional != 0, 0.0).map_err(prefix)?;
        let [batch, steps] = [("batch", batch), ("steps", steps)].map(|(name, value)| {
            usize::try_from(value)
                .map_err(|_| format!("ferrax_rnn_sizes: {name}: expected at least 0, got {value}"))
        });
        let dims = crate::linalg::rnn::Dims {
            config,
            batch: batch?,
            steps: steps?,
        };
        let layout = config.weights().map_err(prefix)?;
        let reserve_len = dims.reserve_len().map_err(prefix)?;
        if weights.is_null() || reserve.is_null() {
            return Err("ferrax_rnn_sizes: weights and reserve must not be null".into());
        }
        *weights = layout.len as u64;
        *reserve = reserve_len as u64;
        Ok(())
    })
}
