//! LAPACK's unblocked `xGETF2` and the kernels' right-looking `xPOTF2` for one matrix, run
//! sequentially on the host: the CPU handlers use them for tiny matrices (where a LAPACK call
//! costs more than the factorization) and the GPU kernels' tests as their bit-exact reference,
//! so the two paths share this one implementation.
//!
//! Matrices are column-major with leading dimension `lda` (element `(i, j)` at `a[j·lda + i]`);
//! results are LAPACK's: packed `L\U` with 1-based pivots, or the Cholesky factor in one
//! triangle, and `info`. Nothing outside the `m×n` (or the `uplo` triangle) is written.

use crate::scalar::{Real, Scalar};

/// Checks that `a` holds an `m×n` column-major matrix with leading dimension `lda`.
fn check_len<T>(a: &[T], m: usize, n: usize, lda: usize) {
    assert!(lda >= m.max(1), "lda {lda} < max(1, m = {m})");
    assert!(
        m == 0 || n == 0 || a.len() >= (n - 1) * lda + m,
        "{}-element slice too short for {m}x{n} with lda {lda}",
        a.len()
    );
}

/// LU with partial pivoting, operation for operation LAPACK's `xGETF2` with reference BLAS:
/// the pivot is the first maximum of `|re| + |im|` (`IxAMAX`; a NaN there is never exceeded),
/// the column is scaled by the pivot's reciprocal unless the pivot's modulus is below the safe
/// minimum (then divided), a zero pivot sets `info` (the first one) and is skipped, and the
/// rank-1 update skips zero multipliers as `xGER` does.
///
/// Writes `ipiv[..min(m, n)]` (1-based) and returns `info` (0, or the 1-based first zero pivot).
///
/// # Panics
/// If `a` or `ipiv` is too short or `lda < max(1, m)`.
pub fn getf2<T: Scalar>(a: &mut [T], m: usize, n: usize, lda: usize, ipiv: &mut [i32]) -> i32 {
    let k = m.min(n);
    check_len(a, m, n, lda);
    let ipiv = &mut ipiv[..k];
    let mut info = 0;
    for j in 0..k {
        let col = &a[j * lda..j * lda + m];
        let (mut jp, mut dmax) = (j, col[j].abs1());
        for (i, x) in col.iter().enumerate().skip(j + 1) {
            let v = x.abs1();
            if v > dmax {
                (jp, dmax) = (i, v);
            }
        }
        ipiv[j] = jp as i32 + 1;
        let pv = col[jp];
        if pv != T::ZERO {
            if jp != j {
                for c in 0..n {
                    a.swap(c * lda + j, c * lda + jp);
                }
            }
            let below = &mut a[j * lda + j + 1..j * lda + m];
            if pv.modulus_at_least(<T::Real as Real>::SAFE_MIN) {
                let r = T::ONE.quotient(pv);
                for x in below {
                    *x = *x * r;
                }
            } else {
                for x in below {
                    *x = x.quotient(pv);
                }
            }
        } else if info == 0 {
            info = j as i32 + 1;
        }
        if j + 1 < n {
            let (left, right) = a.split_at_mut((j + 1) * lda);
            let l = &left[j * lda + j + 1..j * lda + m];
            for c in 0..n - j - 1 {
                let col = &mut right[c * lda..c * lda + m];
                let u = col[j];
                if u != T::ZERO {
                    for (x, &lx) in col[j + 1..].iter_mut().zip(l) {
                        *x = *x - lx * u;
                    }
                }
            }
        }
    }
    info
}

/// Cholesky `A = L·Lᴴ` of the `n×n` Hermitian matrix in `a`, right-looking as the GPU kernels
/// (`xPOTF2`'s results): `lower` reads and writes the lower triangle (`L`), else the upper one
/// (`U = Lᴴ`); the other triangle is never touched, and only the real part of the diagonal
/// is read. Returns `info`: 0, or the 1-based first column whose updated diagonal is not
/// positive (or NaN), which is left there as LAPACK leaves it, the factorization stopped.
///
/// # Panics
/// If `a` is too short or `lda < max(1, n)`.
pub fn potf2<T: Scalar>(a: &mut [T], n: usize, lda: usize, lower: bool) -> i32 {
    check_len(a, n, n, lda);
    // Monomorphized per triangle so that the element mapping is resolved at compile time.
    if lower {
        potf2_in::<T, true>(a, n, lda)
    } else {
        potf2_in::<T, false>(a, n, lda)
    }
}

fn potf2_in<T: Scalar, const LOWER: bool>(a: &mut [T], n: usize, lda: usize) -> i32 {
    // L(i, k), i ≥ k: (i, k) itself for lower, conj of U(k, i) = (k, i) for upper (the
    // diagonal as is, so that its zero signs round-trip untouched).
    let at = |i: usize, k: usize| if LOWER { k * lda + i } else { i * lda + k };
    let get = |a: &[T], i: usize, k: usize| {
        let v = a[at(i, k)];
        if LOWER || i == k {
            v
        } else {
            v.conj()
        }
    };
    let set = |a: &mut [T], i: usize, k: usize, v: T| {
        a[at(i, k)] = if LOWER || i == k { v } else { v.conj() }
    };
    for j in 0..n {
        let d = a[at(j, j)].re();
        let positive = d > <T::Real as Real>::ZERO; // false for NaN too
        if !positive {
            a[at(j, j)] = T::from_real(d);
            return j as i32 + 1;
        }
        let s = d.sqrt();
        let r = <T::Real as Real>::ONE / s;
        a[at(j, j)] = T::from_real(s);
        for i in j + 1..n {
            let v = get(a, i, j).scale(r);
            set(a, i, j, v);
        }
        // The trailing update L(i, k) -= L(i, j)·conj(L(k, j)) for j < k ≤ i, each element
        // once, so the loop order does not change the result: it follows the storage (down
        // the columns for lower, along the stored columns of U for upper).
        if LOWER {
            // Column slices (the same operations as get/set, without index arithmetic).
            if j + 1 < n {
                let (left, right) = a.split_at_mut((j + 1) * lda);
                let l = &left[j * lda + j + 1..j * lda + n]; // L(j+1.., j)
                for c in 0..n - j - 1 {
                    let k = j + 1 + c;
                    let lk = l[c].conj();
                    let col = &mut right[c * lda + k..c * lda + n];
                    for (x, &li) in col.iter_mut().zip(&l[c..]) {
                        *x = *x - li * lk;
                    }
                }
            }
        } else {
            for i in j + 1..n {
                let lij = get(a, i, j);
                for k in j + 1..=i {
                    let v = get(a, i, k) - lij * get(a, k, j).conj();
                    set(a, i, k, v);
                }
            }
        }
    }
    0
}

/// Which matrix a triangular solve applies: `A`, `Aᵀ` or `Aᴴ` (BLAS's `transa` 'N', 'T', 'C').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transpose {
    No,
    Yes,
    Conjugate,
}

/// The triangular solve BLAS `xTRSM` makes with alpha = 1, for small matrices: `B ← op(A)⁻¹·B`
/// (`left`) or `B ← B·op(A)⁻¹`, with `B` `m×n` and `A` `k×k` (`k = m` for `left`, else `n`),
/// of which only the `lower` (else upper) triangle is read, and not its diagonal if `unit`.
///
/// Arithmetic as OpenBLAS's kernels, whose NaN and infinity patterns callers compare with:
/// each diagonal element is applied as its reciprocal, and no product is skipped for a zero
/// factor, so a singular `A` spreads infinities and NaNs to every element that depends on it.
///
/// # Panics
/// If a slice is too short for its matrix or a leading dimension is below the row count.
#[allow(clippy::too_many_arguments)] // BLAS's argument list
pub fn trsm<T: Scalar>(
    left: bool,
    lower: bool,
    trans: Transpose,
    unit: bool,
    m: usize,
    n: usize,
    a: &[T],
    lda: usize,
    b: &mut [T],
    ldb: usize,
) {
    let k = if left { m } else { n };
    check_len(a, k, k, lda);
    check_len(b, m, n, ldb);
    if m == 0 || n == 0 {
        return;
    }
    // op(A)(i, j), read from the stored triangle.
    let op = |i: usize, j: usize| match trans {
        Transpose::No => a[j * lda + i],
        Transpose::Yes => a[i * lda + j],
        Transpose::Conjugate => a[i * lda + j].conj(),
    };
    let reciprocal = |j: usize| (!unit).then(|| T::ONE.quotient(op(j, j)));
    // Transposing swaps the triangle op(A) has its entries in.
    let op_lower = lower == (trans == Transpose::No);
    if left {
        // Substitution in op(A)'s order, each step across the columns of B (independent of each
        // other), so that each diagonal's reciprocal is computed once.
        let conj = trans == Transpose::Conjugate;
        for step in 0..m {
            let j = if op_lower { step } else { m - 1 - step };
            let r = reciprocal(j);
            for c in 0..n {
                let col = &mut b[c * ldb..c * ldb + m];
                if trans == Transpose::No {
                    // x_j, then removed from the rows still to solve with column j of A
                    // (contiguous).
                    if let Some(r) = r {
                        col[j] = col[j] * r;
                    }
                    let x = col[j];
                    let rows = if op_lower { j + 1..m } else { 0..j };
                    let a_col = &a[j * lda + rows.start..j * lda + rows.end];
                    for (y, &l) in col[rows].iter_mut().zip(a_col) {
                        *y = *y - l * x;
                    }
                } else {
                    // op(A)'s row j is A's column j: x_j is its dot product with the solved x's.
                    let solved = if op_lower { 0..j } else { j + 1..m };
                    let a_col = &a[j * lda + solved.start..j * lda + solved.end];
                    let mut y = col[j];
                    for (&l, &x) in a_col.iter().zip(&col[solved]) {
                        y = y - if conj { l.conj() } else { l } * x;
                    }
                    col[j] = match r {
                        Some(r) => y * r,
                        None => y,
                    };
                }
            }
        }
    } else {
        // Column j of X needs the columns of X that op(A)'s column j reaches: the earlier ones
        // for an upper op(A), the later ones for a lower one; solved, column j then updates
        // the columns that still need it.
        let order = |j: usize| if op_lower { n - 1 - j } else { j };
        for step in 0..n {
            let j = order(step);
            if let Some(r) = reciprocal(j) {
                for x in &mut b[j * ldb..j * ldb + m] {
                    *x = *x * r;
                }
            }
            for later in step + 1..n {
                let l = order(later);
                let f = op(j, l);
                let (solved, target) = if j < l {
                    let (head, tail) = b.split_at_mut(l * ldb);
                    (&head[j * ldb..j * ldb + m], &mut tail[..m])
                } else {
                    let (head, tail) = b.split_at_mut(j * ldb);
                    (&tail[..m], &mut head[l * ldb..l * ldb + m])
                };
                for (y, &x) in target.iter_mut().zip(solved) {
                    *y = *y - x * f;
                }
            }
        }
    }
}
