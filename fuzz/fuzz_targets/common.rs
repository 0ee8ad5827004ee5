#![allow(dead_code)] // each target uses part of it
//! What the fuzz targets share: the C ABI and LAPACK loaded once (so that calls reach the LAPACK
//! paths), the input as a stream of choices, the rule that a caught panic is a finding, and
//! the values that integers are drawn from.

#[path = "../../tests/common/capi.rs"]
pub mod capi;

/// The input read as a stream of choices (zeros once it runs out).
pub struct Choices<'a>(pub &'a [u8]);

impl Choices<'_> {
    pub fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }
    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, _| v << 8 | u64::from(self.byte()))
    }
}

/// Aborts (a finding) where ferrax caught a panic: its guards keep the process alive, but a
/// panic is a bug all the same (an index out of range, an overflow, an `expect`).
pub fn no_panic(message: &str) {
    assert!(!message.contains("panic"), "ferrax panicked: {message}");
}

/// A dimension: mostly small (what runs), sometimes an edge (0, past i32, negative).
pub fn dim(selector: u8) -> i64 {
    match selector {
        0..=199 => i64::from(selector % 9),
        200..=219 => i64::from(selector - 200) + 9,
        220 => -1,
        221 => i64::from(i32::MIN),
        222 => i64::from(i32::MAX),
        223 => 1 << 31,
        224 => 1 << 40,
        225 => 1 << 62,
        226 => i64::MAX,
        227 => i64::MIN,
        _ => i64::from(selector % 4),
    }
}

/// Whether a call with these sizes may be made on buffers of `capacity` elements: every
/// array a valid call could touch fits (`batch` matrices of at most the largest size squared;
/// a negative size is refused or unused), or the batch is refused before anything is touched
/// (negative, or past the address space in its `info` alone).
pub fn callable(batch: i64, dims: &[i64], capacity: usize) -> bool {
    if !(0..=1 << 61).contains(&batch) {
        return true;
    }
    let largest = dims.iter().copied().filter(|&d| d >= 0).max().unwrap_or(0).max(1) as u128;
    (batch as u128) * (largest + 1) * (largest + 1) <= capacity as u128
}
