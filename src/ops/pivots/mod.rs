//! `lu_pivots_to_permutation`: 0-based LAPACK row swaps `pivots` `[..., k]` to permutations
//! `permutation` `[..., p]` (p read from the result's shape), as jaxlib's
//! `cu_lu_pivots_to_permutation`.

pub mod cpu;
pub mod cuda;

use crate::ffi::{Array, Result};
use std::ffi::CStr;

pub const LU_PIVOTS_TO_PERMUTATION: &CStr = c"ferrax_lu_pivots_to_permutation";

crate::ffi_operands! {
    /// The target's operands.
    pub struct Pivots<'a> {
        arg pivots: Array<'a, i32>,
        ret permutation: Array<'a, i32>,
    }
}

impl Pivots<'_> {
    /// Checks the operands and returns (batch, k, permutation size).
    pub(crate) fn dimensions(&self) -> Result<(usize, usize, usize)> {
        dimensions(&self.pivots, &self.permutation)
    }
}

fn dimensions(
    pivots: &Array<'_, i32>,
    permutation: &Array<'_, i32>,
) -> Result<(usize, usize, usize)> {
    pivots.buffer.expect_rank_at_least(1)?;
    let rank = pivots.dims().len();
    let (batch_dims, k) = pivots.dims().split_at(rank - 1);
    if permutation.dims().len() != rank || &permutation.dims()[..batch_dims.len()] != batch_dims {
        return Err(permutation.mismatch(
            format!("shape {batch_dims:?} + [permutation_size]"),
            format!("shape {:?}", permutation.dims()),
        ));
    }
    let (k, p) = (
        k[0] as usize,
        *permutation.dims().last().unwrap_or(&0) as usize,
    );
    if p < k {
        return Err(permutation.mismatch(
            format!("permutation_size >= {k} (the number of pivots)"),
            format!("{p}"),
        ));
    }
    // Each entry is an int32 row index.
    if p > i32::MAX as usize {
        return Err(permutation.mismatch(
            format!("permutation_size <= {} (int32 indices)", i32::MAX),
            format!("{p}"),
        ));
    }
    let batch = permutation.len().checked_div(p).unwrap_or(0);
    Ok((batch, k, p))
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
