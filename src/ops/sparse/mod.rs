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
pub mod cuda;

use crate::error::Error;
use crate::ffi::{Buffer, DataType, NativeType, Result};
use crate::linalg::sparse::SparseIndex;
use crate::linalg::LapackScalar;
use num_complex::Complex;
use std::ffi::CStr;

pub const CSR_SPARSE_DENSE: &CStr = c"ferrax_csr_sparse_dense";
pub const COO_SPARSE_DENSE: &CStr = c"ferrax_coo_sparse_dense";
pub const SPSOLVE: &CStr = c"ferrax_spsolve";

/// The shapes of a sparse times dense product.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProductShape {
    /// Entries of the sparse matrix (padding included).
    pub nnz: usize,
    /// The sparse matrix's rows and columns (CSR: rhs's rows are the columns).
    pub rows: usize,
    pub cols: usize,
    /// Columns of rhs and out (1 for vectors).
    pub n: usize,
}

fn vector_len(b: &Buffer<'_>, what: &str) -> Result<usize> {
    match b.dims() {
        &[len] => Ok(len as usize),
        dims => Err(b.mismatch(format!("shape [{what}]"), format!("shape {dims:?}"))),
    }
}

crate::ffi_operands! {
    /// `csr_sparse_dense`'s operands, untyped (six element types, two index types).
    pub struct CsrProduct<'a> {
        arg lhs_data: Buffer<'a>,
        arg lhs_outer_indices: Buffer<'a>,
        arg lhs_inner_indices: Buffer<'a>,
        arg rhs: Buffer<'a>,
        ret out: Buffer<'a>,
    }
}

impl CsrProduct<'_> {
    /// Checks the shapes (module docs).
    pub(crate) fn shape(&self) -> Result<ProductShape> {
        let nnz = vector_len(&self.lhs_data, "nnz")?;
        let outer = &self.lhs_outer_indices;
        let rows = match vector_len(outer, "rows + 1")? {
            0 => return Err(outer.mismatch("shape [rows + 1]".into(), "shape [0]".into())),
            len => len - 1,
        };
        self.lhs_inner_indices.expect_dims(&[nnz as i64])?;
        let rhs = &self.rhs;
        let (cols, n, out_dims) = match *rhs.dims() {
            [k] => (k as usize, 1, vec![rows as i64]),
            [k, n] => (k as usize, n as usize, vec![rows as i64, n]),
            _ => {
                return Err(rhs.mismatch(
                    "shape [k] or [k, n]".into(),
                    format!("shape {:?}", rhs.dims()),
                ))
            }
        };
        self.out.expect_dims(&out_dims)?;
        // Sizes the kernels index with must fit in memory.
        self.out.element_count()?;
        rhs.element_count()?;
        Ok(ProductShape { nnz, rows, cols, n })
    }
}

crate::ffi_operands! {
    /// `coo_sparse_dense`'s operands, untyped (six element types, two index types).
    pub struct CooProduct<'a> {
        arg data: Buffer<'a>,
        arg indices: Buffer<'a>,
        arg rhs: Buffer<'a>,
        ret out: Buffer<'a>,
        attr rows: i64,
        attr cols: i64,
        attr transpose: bool,
    }
}

impl CooProduct<'_> {
    /// Checks the attributes and shapes (module docs).
    pub(crate) fn shape(&self) -> Result<ProductShape> {
        let [Ok(rows), Ok(cols)] = [self.rows, self.cols].map(usize::try_from) else {
            return Err(Error::invalid_argument(format!(
                "{}: attributes rows and cols: expected sizes of at least 0, got {} and {}",
                COO_SPARSE_DENSE.to_string_lossy(),
                self.rows,
                self.cols
            )));
        };
        let nnz = vector_len(&self.data, "nnz")?;
        self.indices.expect_dims(&[nnz as i64, 2])?;
        let transpose = self.transpose;
        let (m, k) = if transpose { (cols, rows) } else { (rows, cols) };
        let (m, k) = (m as i64, k as i64);
        let (n, out_dims) = match *self.rhs.dims() {
            [len] if len == k => (1, vec![m]),
            [len, n] if len == k => (n as usize, vec![m, n]),
            _ => {
                return Err(self.rhs.mismatch(
                    format!("shape [{k}] or [{k}, n] (rows {rows}, cols {cols}, transpose {transpose})"),
                    format!("shape {:?}", self.rhs.dims()),
                ))
            }
        };
        self.out.expect_dims(&out_dims)?;
        self.out.element_count()?;
        Ok(ProductShape { nnz, rows, cols, n })
    }
}

crate::ffi_operands! {
    /// `spsolve`'s operands, untyped (four element types, two index types): what both
    /// platforms' handlers take, checked and dispatched by [`Spsolve::dispatch`].
    pub struct Spsolve<'a> {
        arg data: Buffer<'a>,
        arg indices: Buffer<'a>,
        arg indptr: Buffer<'a>,
        arg b: Buffer<'a>,
        ret x: Buffer<'a>,
    }
}

/// How many systems a spsolve call solves, and how many matrices it factors (1: one for all).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SolveShape {
    pub systems: usize,
    pub matrices: usize,
}

/// A platform's spsolve for one element and index type (the operands' dtypes checked).
pub(crate) trait SolveTyped {
    fn solve<T, I>(self, ops: Spsolve<'_>, shape: SolveShape) -> Result<()>
    where
        T: LapackScalar,
        I: SparseIndex + NativeType + Default;
}

impl Spsolve<'_> {
    /// Checks the shapes (module docs) and the dtypes, then runs `platform`'s solve for them.
    pub(crate) fn dispatch(self, platform: impl SolveTyped) -> Result<()> {
        let shape = self.shape()?;
        match self.b.dtype() {
            DataType::F32 => self.by_index::<f32>(platform, shape),
            DataType::F64 => self.by_index::<f64>(platform, shape),
            DataType::C64 => self.by_index::<Complex<f32>>(platform, shape),
            DataType::C128 => self.by_index::<Complex<f64>>(platform, shape),
            other => Err(self
                .b
                .mismatch("dtype f32, f64, c64 or c128".into(), other.to_string())),
        }
    }

    fn by_index<T>(self, platform: impl SolveTyped, shape: SolveShape) -> Result<()>
    where
        T: LapackScalar,
    {
        for buffer in [&self.data, &self.x] {
            buffer.expect_dtype(T::DTYPE)?;
        }
        let solve = |index: DataType| {
            self.indices.expect_dtype(index)?;
            match index {
                DataType::S32 => platform.solve::<T, i32>(self, shape),
                _ => platform.solve::<T, i64>(self, shape),
            }
        };
        match self.indptr.dtype() {
            index @ (DataType::S32 | DataType::S64) => solve(index),
            other => Err(self
                .indptr
                .mismatch("dtype s32 or s64".into(), other.to_string())),
        }
    }

    fn shape(&self) -> Result<SolveShape> {
        let Spsolve {
            data,
            indices,
            indptr,
            b,
            x,
        } = self;
        let n = match indptr.dims() {
            &[len] if len > 0 => len - 1,
            dims => return Err(indptr.mismatch("shape [n + 1]".into(), format!("shape {dims:?}"))),
        };
        let Some((&len, batch)) = b.dims().split_last() else {
            return Err(b.mismatch("shape [..., n]".into(), "shape []".into()));
        };
        if len != n {
            return Err(b.mismatch(format!("shape [..., {n}]"), format!("shape {:?}", b.dims())));
        }
        let nnz = match data.dims().split_last() {
            Some((&nnz, data_batch)) if data_batch.is_empty() || data_batch == batch => nnz,
            _ => {
                return Err(data.mismatch(
                    format!(
                        "shape [nnz] or [{}nnz]",
                        batch.iter().map(|d| format!("{d}, ")).collect::<String>()
                    ),
                    format!("shape {:?}", data.dims()),
                ))
            }
        };
        indices.expect_dims(&[nnz])?;
        x.expect_dims(b.dims())?;
        let batch: Vec<usize> = batch.iter().map(|&d| d as usize).collect();
        let systems = crate::memory::product("b's batch", &batch)?;
        let matrices = if data.dims().len() == 1 { 1 } else { systems };
        Ok(SolveShape { systems, matrices })
    }
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
