//! Sparse direct solve `A x = b` for square CSR matrices (jax's `spsolve`, which stock jax runs
//! on the CPU as a Python callback into scipy): faer's sparse Cholesky (AMD ordering) where the
//! matrix is Hermitian with a positive diagonal and that succeeds, else its sparse LU (COLAMD
//! column ordering, partial pivoting); each supernodal or simplicial by faer's own flop estimate.
//! The CSR arrays of `A` are the CSC arrays of `Aᵀ`, so `Aᵀ` is factored and its transpose solve
//! gives `x`: no transposed copy.
//!
//! One sparsity pattern serves the whole batch (what `vmap` over the values gives): it is
//! checked, sorted and its duplicates summed once (as scipy sums them), and analysed once; each
//! matrix is then factored on its own (in parallel), or a single matrix once for all the
//! right-hand sides. A singular matrix (no pivot, or a solution that is not finite) gives a
//! NaN solution, as scipy's (which warns).

use super::parallel::{for_each_chunk, Pool, SharedMut};
use super::sparse::{mismatch, SparseIndex};
use super::underflow::GradualUnderflow;
use super::LapackScalar;
use crate::error::{Error, Result};
use crate::memory::{self, grow, vec_of};
use faer::dyn_stack::MemStack;
use faer::sparse::linalg::cholesky::{
    factorize_symbolic_cholesky, LltRef, SymbolicCholesky, SymmetricOrdering,
};
use faer::sparse::linalg::lu::{factorize_symbolic_lu, LuRef, NumericLu, SymbolicLu};
use faer::sparse::linalg::LuError;
use faer::sparse::{SparseColMatRef, SymbolicSparseColMatRef};
use faer::{Conj, MatMut, Par, Side};
use ferrax_kernels::scalar::{Real, Scalar};
use std::sync::OnceLock;

/// The names errors give the index operands (jax's `spsolve` operands, in order).
const INDICES: &str = "operand 1 'indices'";
const INDPTR: &str = "operand 2 'indptr'";

/// `matrices` square CSR matrices of order `indptr.len() - 1` with one pattern: matrix `m`'s
/// entries are `data[m * nnz..][..nnz]` (`nnz = indices.len()`), row `r`'s those from
/// `indptr[r]` to `indptr[r + 1]`, in the columns `indices` gives. Entries past `indptr[n]`
/// (padding) are never read.
#[derive(Clone, Copy)]
pub struct CsrBatch<'a, T, I> {
    pub data: &'a [T],
    pub indices: &'a [I],
    pub indptr: &'a [I],
    pub matrices: usize,
}

/// Solves `A_s x_s = b_s` for each of the `systems` right-hand sides `b` `[systems, n]`
/// (row-major) into `x` (the same shape): `A_s` is matrix `s` of `a`, or its one matrix for all
/// (`a.matrices` is `systems` or 1). A bad offset or column is an error naming its operand.
pub fn spsolve<T: LapackScalar, I: SparseIndex>(
    pool: &dyn Pool,
    a: CsrBatch<'_, T, I>,
    b: &[T],
    x: &mut [T],
    systems: usize,
) -> Result<()> {
    let n = a.indptr.len().saturating_sub(1);
    let nnz = a.indices.len();
    if a.indptr.is_empty()
        || !(a.matrices == systems || a.matrices == 1)
        || a.data.len() != a.matrices * nnz
        || b.len() != systems * n
        || x.len() != b.len()
    {
        return Err(Error::internal(format!(
            "spsolve: {} offsets, {nnz} columns, {} values for {} matrices, b of {} and x of {} \
             elements for {systems} systems",
            a.indptr.len(),
            a.data.len(),
            a.matrices,
            b.len(),
            x.len()
        )));
    }
    let pattern = Pattern::new(a.indptr, a.indices)?;
    if systems == 0 || n == 0 {
        return Ok(());
    }
    let solver = Solver::new(&pattern)?;
    // A factorization costs far more than its entries; this only decides how to split.
    let flops_per_solve = 4 * pattern.row_idx.len() + n;
    let x = SharedMut(x.as_mut_ptr());
    if a.matrices == 1 {
        let factor = solver.factor(a.data)?;
        return for_each_chunk(pool, systems, flops_per_solve, &|range| {
            // SAFETY: chunks are disjoint runs of whole systems of `x`.
            let x = unsafe { x.slice(range.start * n, range.len() * n) };
            x.copy_from_slice(&b[range.start * n..range.end * n]);
            solver.solve(&factor, x, range.len())
        });
    }
    for_each_chunk(pool, systems, 64 * flops_per_solve, &|range| {
        for s in range {
            let factor = solver.factor(&a.data[s * nnz..][..nnz])?;
            // SAFETY: each system writes its own `n` elements of `x`.
            let x = unsafe { x.slice(s * n, n) };
            x.copy_from_slice(&b[s * n..][..n]);
            solver.solve(&factor, x, 1)?;
        }
        Ok(())
    })
}

/// The pattern as CSC of `Aᵀ` (row `r` of `A` is column `r`), each column's rows ascending and
/// unique; input entry `k` (below `indptr[n]`) adds into value `slot[k]`.
struct Pattern {
    col_ptr: Vec<usize>,
    row_idx: Vec<usize>,
    slot: Vec<usize>,
}

impl Pattern {
    fn new<I: SparseIndex>(indptr: &[I], indices: &[I]) -> Result<Self> {
        let (n, nnz) = (indptr.len() - 1, indices.len());
        let mut col_ptr = vec_of(n + 1, 0usize)?;
        let mut row_idx = Vec::new();
        let mut slot = Vec::new();
        // Reserved up front so that the per-row pushes below cannot fail.
        grow(&mut slot, nnz, 0)?;
        grow(&mut row_idx, nnz, 0)?;
        row_idx.clear();
        let mut row: Vec<(usize, usize)> = Vec::new();
        if indptr[0].to_usize() != Some(0) {
            return Err(mismatch(
                INDPTR,
                "0 at index 0".into(),
                indptr[0].to_string(),
            ));
        }
        let mut start = 0;
        for r in 0..n {
            let end = indptr[r + 1]
                .to_usize()
                .filter(|&e| (start..=nnz).contains(&e));
            let end = end.ok_or_else(|| {
                mismatch(
                    INDPTR,
                    format!("non-decreasing row offsets within 0..={nnz}"),
                    format!("{} at index {}", indptr[r + 1], r + 1),
                )
            })?;
            row.clear();
            grow(&mut row, end - start, (0, 0))?;
            for (k, entry) in (start..end).zip(row.iter_mut()) {
                let column = indices[k].to_usize().filter(|&c| c < n).ok_or_else(|| {
                    mismatch(
                        INDICES,
                        format!("columns within 0..{n}"),
                        format!("{} at index {k}", indices[k]),
                    )
                })?;
                *entry = (column, k);
            }
            row.sort_unstable();
            for &(column, k) in row.iter() {
                if row_idx.len() == col_ptr[r] || row_idx.last() != Some(&column) {
                    row_idx.push(column);
                }
                slot[k] = row_idx.len() - 1;
            }
            col_ptr[r + 1] = row_idx.len();
            start = end;
        }
        // Entries past indptr[n] are padding.
        slot.truncate(start);
        Ok(Self {
            col_ptr,
            row_idx,
            slot,
        })
    }

    /// The matrices' order.
    fn n(&self) -> usize {
        self.col_ptr.len() - 1
    }

    fn structure(&self) -> SymbolicSparseColMatRef<'_, usize> {
        let n = self.n();
        SymbolicSparseColMatRef::new_checked(n, n, &self.col_ptr, None, &self.row_idx)
    }

    /// Where the pattern is symmetric, each entry's mirror image's position: walking the
    /// columns in order meets each column's mirrored entries in its own (ascending) order.
    fn mirror(&self) -> Result<Option<Vec<usize>>> {
        let mut next = self.col_ptr[..self.n()].to_vec();
        let mut mirror = vec_of(self.row_idx.len(), 0usize)?;
        for j in 0..self.n() {
            let column = self.col_ptr[j]..self.col_ptr[j + 1];
            for (p, &i) in column.clone().zip(&self.row_idx[column]) {
                let q = next[i];
                if q == self.col_ptr[i + 1] || self.row_idx[q] != j {
                    return Ok(None);
                }
                mirror[p] = q;
                next[i] += 1;
            }
        }
        Ok(Some(mirror))
    }
}

/// What every factorization and solve of one batch shares: the pattern and its analyses, each
/// made the first time a matrix needs it.
struct Solver<'a> {
    pattern: &'a Pattern,
    structure: SymbolicSparseColMatRef<'a, usize>,
    /// Where the pattern is symmetric: for each value, the position of its mirror image.
    mirror: Option<Vec<usize>>,
    cholesky: OnceLock<Result<SymbolicCholesky<usize>>>,
    lu: OnceLock<Result<SymbolicLu<usize>>>,
}

/// One matrix factored.
enum Factor<T> {
    /// Hermitian positive definite: `Aᵀ = L Lᴴ` (the values of L).
    Cholesky(Vec<T>),
    /// `Aᵀ = P L U Q` by faer's sparse LU.
    Lu(Box<NumericLu<usize, T>>),
    /// No pivot: the solutions are NaN.
    Singular,
}

impl<'a> Solver<'a> {
    fn new(pattern: &'a Pattern) -> Result<Self> {
        Ok(Self {
            pattern,
            structure: pattern.structure(),
            mirror: pattern.mirror()?,
            cholesky: OnceLock::new(),
            lu: OnceLock::new(),
        })
    }

    /// Sums one matrix's entries into the pattern's values and factors it: by Cholesky where
    /// it is Hermitian with a positive diagonal and that succeeds (as MATLAB's backslash
    /// chooses; half LU's work and fill), else by LU.
    fn factor<T: LapackScalar>(&self, data: &[T]) -> Result<Factor<T>> {
        let _gradual = GradualUnderflow::new();
        let mut values = vec_of(self.pattern.row_idx.len(), T::ZERO)?;
        for (&slot, &value) in self.pattern.slot.iter().zip(data) {
            values[slot] += value;
        }
        if self.hermitian_positive_diagonal(&values) {
            let symbolic = self.cholesky.get_or_init(|| {
                factorize_symbolic_cholesky(
                    self.structure,
                    Side::Lower,
                    SymmetricOrdering::Amd,
                    Default::default(),
                )
                .map_err(faer_error)
            });
            let symbolic = symbolic.as_ref().map_err(Clone::clone)?;
            let mut l = vec_of(symbolic.len_val(), T::ZERO)?;
            let request = symbolic.factorize_numeric_llt_scratch::<T>(Par::Seq, Default::default());
            let mut buffer = memory::faer_scratch(request, "spsolve")?;
            let factored = symbolic.factorize_numeric_llt(
                &mut l,
                SparseColMatRef::new(self.structure, &values),
                Side::Lower,
                Default::default(),
                Par::Seq,
                MemStack::new(&mut buffer),
                Default::default(),
            );
            // Else not positive definite: LU.
            if factored.is_ok() {
                return Ok(Factor::Cholesky(l));
            }
        }
        let symbolic = self.lu.get_or_init(|| {
            factorize_symbolic_lu(self.structure, Default::default()).map_err(faer_error)
        });
        let symbolic = symbolic.as_ref().map_err(Clone::clone)?;
        let request = symbolic.factorize_numeric_lu_scratch::<T>(Par::Seq, Default::default());
        let mut buffer = memory::faer_scratch(request, "spsolve")?;
        let mut lu = NumericLu::new();
        match symbolic.factorize_numeric_lu(
            &mut lu,
            SparseColMatRef::new(self.structure, &values),
            Par::Seq,
            MemStack::new(&mut buffer),
            Default::default(),
        ) {
            Ok(_) => Ok(Factor::Lu(Box::new(lu))),
            Err(LuError::SymbolicSingular { .. }) => Ok(Factor::Singular),
            Err(LuError::Generic(error)) => Err(faer_error(error)),
        }
    }

    /// Whether `values` (of `Aᵀ`) are Hermitian, exactly, with a real positive diagonal.
    fn hermitian_positive_diagonal<T: LapackScalar>(&self, values: &[T]) -> bool {
        let Some(mirror) = &self.mirror else {
            return false;
        };
        let (col_ptr, row_idx) = (&self.pattern.col_ptr, &self.pattern.row_idx);
        (0..self.pattern.n()).all(|j| {
            (col_ptr[j]..col_ptr[j + 1]).all(|p| {
                let (v, w) = (values[p], values[mirror[p]]);
                let diagonal = row_idx[p] == j;
                v == w.conj() && (!diagonal || v.real_f64() > 0.0)
            })
        })
    }

    /// Solves `A x = rhs` in place for `count` right-hand sides (`x` `[count, n]` row-major,
    /// i.e. `n × count` column-major); a system whose solution is not finite becomes NaN.
    fn solve<T: LapackScalar>(&self, factor: &Factor<T>, x: &mut [T], count: usize) -> Result<()> {
        let _gradual = GradualUnderflow::new();
        let n = self.pattern.n();
        let rhs = MatMut::from_column_major_slice_mut(&mut *x, n, count);
        match factor {
            Factor::Cholesky(l) => {
                // Hermitian A: the factored Aᵀ is conj(A).
                let symbolic = analysis(&self.cholesky)?;
                let request = symbolic.solve_in_place_scratch::<T>(count, Par::Seq);
                let mut buffer = memory::faer_scratch(request, "spsolve")?;
                LltRef::new(symbolic, l).solve_in_place_with_conj(
                    Conj::Yes,
                    rhs,
                    Par::Seq,
                    MemStack::new(&mut buffer),
                );
            }
            Factor::Lu(numeric) => {
                let symbolic = analysis(&self.lu)?;
                let request = symbolic.solve_transpose_in_place_scratch::<T>(count, Par::Seq);
                let mut buffer = memory::faer_scratch(request, "spsolve")?;
                LuRef::new_unchecked(symbolic, numeric).solve_transpose_in_place_with_conj(
                    Conj::No,
                    rhs,
                    Par::Seq,
                    MemStack::new(&mut buffer),
                );
            }
            Factor::Singular => {}
        }
        let nan = T::from_real(<<T as Scalar>::Real as Real>::NAN);
        let singular = matches!(factor, Factor::Singular);
        for system in x.chunks_exact_mut(n) {
            if singular || !system.iter().all(|v| v.is_finite()) {
                system.fill(nan);
            }
        }
        Ok(())
    }
}

/// An analysis the factorization made (and succeeded at) before the solve.
fn analysis<S>(made: &OnceLock<Result<S>>) -> Result<&S> {
    made.get()
        .and_then(|analysis| analysis.as_ref().ok())
        .ok_or_else(|| Error::internal("spsolve: solving before the analysis"))
}

fn faer_error(error: faer::sparse::FaerError) -> Error {
    match error {
        faer::sparse::FaerError::OutOfMemory => {
            Error::resource_exhausted("spsolve: cannot allocate the sparse factorization")
        }
        other => Error::internal(format!("spsolve: faer: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::linalg::parallel::Serial;
    use num_complex::Complex;

    /// [[4, 1, 0], [1, 3, 0], [0, 0, 2]] with row 0's columns unsorted and its (0, 1) entry
    /// split in two, then one padding entry past indptr[3] (a column no row has).
    const DATA: [f64; 7] = [0.5, 4.0, 0.5, 3.0, 1.0, 2.0, 99.0];
    const INDICES: [i32; 7] = [1, 0, 1, 1, 0, 2, 7];
    const INDPTR: [i32; 4] = [0, 3, 5, 6];

    fn solve<T: LapackScalar>(
        data: &[T],
        indptr: &[i32],
        b: &[T],
        matrices: usize,
    ) -> Result<Vec<T>> {
        let mut x = vec![T::ZERO; b.len()];
        let a = CsrBatch {
            data,
            indices: &INDICES,
            indptr,
            matrices,
        };
        spsolve(&Serial, a, b, &mut x, b.len() / 3)?;
        Ok(x)
    }

    #[test]
    fn duplicates_are_summed_and_padding_is_ignored() {
        // A · [1, 2, 3] and A · [-1, 0, 1], one matrix for both systems.
        let x = solve(&DATA, &INDPTR, &[6.0, 7.0, 6.0, -4.0, -1.0, 2.0], 1).unwrap();
        let expected = [1.0, 2.0, 3.0, -1.0, 0.0, 1.0];
        assert!(
            x.iter().zip(expected).all(|(x, e)| (x - e).abs() < 1e-14),
            "{x:?}"
        );
        // Complex values, a matrix per system: the second is i·A.
        let c = |re, im| Complex::new(re, im);
        let mut data: Vec<_> = DATA.iter().map(|&v| c(v as f32, 0.0)).collect();
        data.extend(DATA.iter().map(|&v| c(0.0, v as f32)));
        let b = [
            c(6.0, 0.0),
            c(7.0, 0.0),
            c(6.0, 0.0),
            c(0.0, 6.0),
            c(0.0, 7.0),
            c(0.0, 6.0),
        ];
        let x = solve(&data, &INDPTR, &b, 2).unwrap();
        let expected = [1.0, 2.0, 3.0, 1.0, 2.0, 3.0];
        assert!(
            x.iter()
                .zip(expected)
                .all(|(x, e)| (x - c(e, 0.0)).norm() < 1e-5),
            "{x:?}"
        );
    }

    #[test]
    fn hermitian_positive_definite_matrices_take_cholesky() {
        // [[4, 1 - i, 0], [1 + i, 3, 0], [0, 0, 2]] (row 0 unsorted, (0, 1) split) and b = A ·
        // [1, i, 2]; then the same with a negative diagonal entry (indefinite: LU).
        let c = |re, im| Complex::new(re, im);
        let mut data = [
            c(0.5, -0.5),
            c(4.0, 0.0),
            c(0.5, -0.5),
            c(3.0, 0.0),
            c(1.0, 1.0),
        ];
        let mut rows = data.to_vec();
        rows.extend([c(2.0, 0.0), c(0.0, 0.0)]);
        let (indptr, b) = (INDPTR, [c(5.0, 1.0), c(1.0, 4.0), c(4.0, 0.0)]);
        let pattern = Pattern::new(&indptr, &INDICES).unwrap();
        let solver = Solver::new(&pattern).unwrap();
        assert!(matches!(solver.factor(&rows).unwrap(), Factor::Cholesky(_)));
        let x: Vec<Complex<f64>> = solve(&rows, &indptr, &b, 1).unwrap();
        let expected = [c(1.0, 0.0), c(0.0, 1.0), c(2.0, 0.0)];
        assert!(
            x.iter().zip(expected).all(|(x, e)| (x - e).norm() < 1e-14),
            "{x:?}"
        );
        data[3] = c(-3.0, 0.0);
        rows[3] = data[3];
        assert!(matches!(solver.factor(&rows).unwrap(), Factor::Lu(_)));
        let b = [c(5.0, 1.0), c(1.0, -2.0), c(4.0, 0.0)];
        let x: Vec<Complex<f64>> = solve(&rows, &indptr, &b, 1).unwrap();
        assert!(
            x.iter().zip(expected).all(|(x, e)| (x - e).norm() < 1e-14),
            "{x:?}"
        );
    }

    #[test]
    fn singular_matrices_give_nan_solutions() {
        // Row 2 without entries (structurally singular), then a stored zero as its entry.
        let x = solve(&DATA, &[0, 3, 5, 5], &[1.0; 3], 1).unwrap();
        assert!(x.iter().all(|v| v.is_nan()), "{x:?}");
        let mut zero = DATA;
        zero[5] = 0.0;
        let x = solve(&zero, &INDPTR, &[1.0; 3], 1).unwrap();
        assert!(x.iter().all(|v| v.is_nan()), "{x:?}");
    }

    #[test]
    fn bad_offsets_and_columns_are_errors() {
        let message = |indptr: &[i32], indices: &[i32]| {
            let a = CsrBatch {
                data: &DATA,
                indices,
                indptr,
                matrices: 1,
            };
            let error = spsolve(&Serial, a, &[1.0; 3], &mut [0.0; 3], 1).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArgument);
            error.message
        };
        assert_eq!(
            message(&[1, 3, 5, 6], &INDICES),
            "operand 2 'indptr': expected 0 at index 0, got 1"
        );
        assert_eq!(
            message(&[0, 3, 2, 6], &INDICES),
            "operand 2 'indptr': expected non-decreasing row offsets within 0..=7, got 2 at index 2"
        );
        assert_eq!(
            message(&INDPTR, &[1, 0, 1, 1, 3, 2, 7]),
            "operand 1 'indices': expected columns within 0..3, got 3 at index 4"
        );
    }
}
