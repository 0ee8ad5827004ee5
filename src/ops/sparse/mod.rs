//! CSR sparse matrix times dense matrix or vector, jaxlib's `cpu_csr_sparse_dense_ffi` contract
//! (row-major, no aliasing, no attributes): `lhs_data` `[nnz]`, `lhs_outer_indices`
//! `[rows + 1]` (row offsets into the entries), `lhs_inner_indices` `[nnz]` (column of each
//! entry; S32 or S64, the same as the offsets) and `rhs` `[k]` or `[k, n]` in; `out` `[rows]` or
//! `[rows, n]` out. Dtypes S32, S64, F32, F64, C64, C128 (one for data, rhs and out).
//!
//! jaxlib's kernel (Eigen) reads the indices unchecked; here every offset and column is checked
//! before it is used, and a bad one is an error naming the operand. Entries past
//! `outer[rows]` (jax pads BCSR there) are never read.

pub mod cpu;

use std::ffi::CStr;

pub const CSR_SPARSE_DENSE: &CStr = c"ferrax_csr_sparse_dense";

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
