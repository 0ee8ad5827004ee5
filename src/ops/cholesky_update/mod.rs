//! `cholesky_update`: the rank-1 update of an upper Cholesky factor, `R'ᴴR' = RᴴR + wwᴴ`, as
//! jaxlib's `cu_cholesky_update_ffi` (R row-major, results aliased to the operands), but
//! batched (`r` `[..., n, n]` with `w` `[..., n]`) and for all four dtypes. CUDA only: on the
//! CPU ferrax lowers it to the same rotations in jax.

pub mod cuda;

use std::ffi::CStr;

pub const CHOLESKY_UPDATE: &CStr = c"ferrax_cholesky_update";

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cuda::HANDLERS];
