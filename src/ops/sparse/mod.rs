//! Sparse targets.
//!
//! `csr_sparse_dense`: CSR sparse matrix times dense matrix or vector, jaxlib's
//! `cpu_csr_sparse_dense_ffi` contract
//! (row-major, no aliasing, no attributes): `lhs_data` `[nnz]`, `lhs_outer_indices`
//! `[rows + 1]` (row offsets into the entries), `lhs_inner_indices` `[nnz]` (column of each
//! entry; S32 or S64, the same as the offsets) and `rhs` `[k]` or `[k, n]` in; `out` `[rows]` or
//! `[rows, n]` out. Dtypes S32, S64, F32, F64, C64, C128 (one for data, rhs and out).
//!
//! jaxlib's kernel (Eigen) reads the indices unchecked; here every offset and column is checked
//! before it is used, and a bad one is an error naming the operand. Entries past
//! `outer[rows]` (jax pads BCSR there) are never read.
//!
//! `coo_sparse_dense`: COO sparse matrix (BCOO's layout) times dense matrix or vector, jax's
//! BCOO `dot_general` of a plain `rows × cols` sparse matrix (no batch or dense dimensions),
//! which stock jax lowers to XLA's gather and scatter-add: `data` `[nnz]`, `indices` `[nnz, 2]`
//! (row and column of each entry; S32 or S64) and `rhs` `[k]` or `[k, n]` in; `out` `[m]` or
//! `[m, n]` out, row-major. Attributes `rows`, `cols` (i64: the sparse matrix's shape) and
//! `transpose` (bool: `out = Aᵀ rhs`, contracting the rows; `k × m` is then `rows × cols`,
//! else `cols × rows`). Dtypes S32, S64, F32, F64, C64, C128 (one for data, rhs and out).
//! Indices follow jax's rules: a negative one counts from the end, once; one still outside the
//! matrix drops its entry (padding); duplicates add up.
//!
//! `spsolve`: `A x = b` for square CSR matrices (jax's `spsolve` primitive, whose CPU lowering
//! in stock jax is a Python callback into scipy; jaxlib's CUDA target `cusolver_csrlsvqr_ffi`
//! takes the same four operands). `data` `[..., nnz]` (one matrix per system, or `[nnz]`: one
//! for all), `indices` `[nnz]`, `indptr` `[n + 1]` (S32 or S64, the same), `b` `[..., n]` in; `x`
//! `[..., n]` out (b's dtype and shape). Dtypes F32, F64, C64, C128. No attributes (jax's
//! `tol` and `reorder` are cuSOLVER's). A singular matrix gives a NaN solution, as scipy's.

pub mod cpu;

use std::ffi::CStr;

pub const CSR_SPARSE_DENSE: &CStr = c"ferrax_csr_sparse_dense";
pub const COO_SPARSE_DENSE: &CStr = c"ferrax_coo_sparse_dense";
pub const SPSOLVE: &CStr = c"ferrax_spsolve";

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS];
