//! Cholesky factorization: LAPACK's `?potrf` on a batch in any layout, and jax's whole
//! `cholesky` (symmetrize, factor, NaN where it fails, `tril`) on its row-major arrays.

use super::flags::Uplo;
use super::matrix::InOut;
use super::parallel::{
    by_simd_groups, for_each_chunk, one_matrix_over_pool, parallel_chunks, Pool, SharedMatrix,
    SharedMut, PANEL, SIMD_GROUP,
};
use super::underflow::GradualUnderflow;
use super::vector_unit::simd_dispatch;
use super::{lapack_int, routine, LapackScalar};
use crate::error::{Error, Result};
use crate::memory;
use faer::dyn_stack::MemStack;
use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
use faer::linalg::matmul::matmul_with_conj;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_solve::solve_lower_triangular_in_place_with_conj;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, Conj, MatMut, Par};
use ferrax_cpu_fallback::Potrf;
use ferrax_kernels::scalar::{Real, Scalar};
use ferrax_kernels::small::potf2;
use ferrax_kernels::small::simd::{self, LANES};
use std::ffi::c_char;
use std::ops::Range;

/// Up to this order the matrices are factored in Rust, [`SIMD_GROUP`] at a time
/// ([`simd::potf2`]; [`potf2`] for the rest): there one OpenBLAS call costs more than the
/// factorization (per 16×16 f64 matrix, one core: OpenBLAS 470 ns, `potf2` 740 ns,
/// `simd::potf2` 376 ns; at 32 OpenBLAS is faster).
pub const SMALL_MAX: usize = 16;

/// Past [`SMALL_MAX`] and up to this order, jax's whole `cholesky` is faer's blocked
/// Cholesky (its own SIMD kernels) first, LAPACK where faer stops. Per matrix, 2 cores,
/// ~2 MB batches, against OpenBLAS's `?potrf`: f64 0.68 (n = 17) to 0.75 (64-96) the time,
/// c128 0.7-0.8 (0.45 at 48-64); at 128 f64 1.15, c128 1.0.
const FAER_MAX: usize = 96;

/// Factors every `n × n` matrix of `a` into `a.output`, in its `uplo` triangle (the other
/// keeps the input), with LAPACK's `info` per matrix (`i > 0`: the leading minor of order `i`
/// is not positive definite).
pub fn potrf<T: LapackScalar>(
    pool: &dyn Pool,
    a: InOut<T>,
    uplo: Uplo,
    info: &mut [i32],
) -> Result<()> {
    let (count, n) = (a.input.count(), a.input.rows());
    if a.input.cols() != n || info.len() != count {
        return Err(Error::internal(format!(
            "potrf: {count} matrices of {n}×{} and {} infos",
            a.input.cols(),
            info.len()
        )));
    }
    let info = SharedMut(info.as_mut_ptr());
    // SAFETY: each task's own infos.
    let done = |b: usize, status: i32| unsafe { *info.at(b) = status };
    factor_batch(pool, count, n, uplo.is_lower(), InPlaceFactors(a), &done)
}

/// jax's `cholesky(x, symmetrize_input)` of the `count` row-major `n × n` matrices in `x`:
/// `tril(L)` of `(x + xᴴ)/2` (or of `x`'s lower triangle) in `l`, or NaN on and below the
/// diagonal (zeros above) where the factorization fails. One matrix at a time in cache, where
/// jax's rule makes an XLA pass over the batch for each step; by [`one_matrix_over_pool`],
/// each over the whole pool ([`pooled_cholesky`]), where OpenBLAS's `?potrf` keeps to one core
/// inside jax's process.
pub fn cholesky<T: LapackScalar>(
    pool: &dyn Pool,
    x: &[T],
    l: &mut [T],
    [count, n]: [usize; 2],
    symmetrize: bool,
) -> Result<()> {
    if x.len() != count * n * n || l.len() != x.len() {
        return Err(Error::internal(format!(
            "cholesky: {count} matrices of {n}×{n} in {} and {} elements",
            x.len(),
            l.len()
        )));
    }
    let out = SharedMut(l.as_mut_ptr());
    // A row-major Hermitian A, read column-major, is Aᵀ = conj(A) = (Lᵀ)ᴴ·Lᵀ: LAPACK's upper
    // factor of the row-major lower triangle is Lᵀ, which read row-major is L itself.
    let fused = FusedCholesky {
        x,
        out,
        n,
        symmetrize,
    };
    let done = |b: usize, status: i32| {
        if status != 0 {
            // SAFETY: matrix `b` of the result, which only this task writes.
            failed(unsafe { out.slice(b * n * n, n * n) }, n);
        }
    };
    if n > SMALL_MAX && n <= FAER_MAX {
        return faer_cholesky(pool, fused, count, &done);
    }
    if one_matrix_over_pool(pool, count, n, n) {
        let potrf = routine(T::potrf())?;
        for b in 0..count {
            // SAFETY: the matrices are factored one after the other, each over the pool.
            let status = unsafe { pooled_cholesky(pool, potrf, fused, b)? };
            done(b, status);
        }
        return Ok(());
    }
    factor_batch(pool, count, n, false, fused, &done)
}

/// Matrix `b` of [`cholesky`] over the pool, in place in the row-major result, right-looking
/// by steps of [`PANEL`] columns: the diagonal block (a column-major copy) by faer's
/// Cholesky on the calling thread, then in row blocks the solve for the columns below it, and
/// in column blocks the update of the lower triangle right of them, one task each. Where faer
/// stops (a pivot not positive, or not finite), LAPACK factors the matrix from the start, as
/// [`factor_batch`] does (it goes on past an infinite pivot). Its `info`.
///
/// # Safety
/// Matrix `b` of the result belongs to this call alone.
unsafe fn pooled_cholesky<T: LapackScalar>(
    pool: &dyn Pool,
    potrf: Potrf<T>,
    fused: FusedCholesky<T>,
    b: usize,
) -> Result<i32> {
    let n = fused.n;
    let (x, out) = (
        &fused.x[b * n * n..(b + 1) * n * n],
        SharedMut(fused.out.at(b * n * n)),
    );
    let matrix = SharedMatrix::new(out.0, [n, n], [n, 1]);
    parallel_chunks(pool, n, PANEL, &|rows| {
        lower_triangle(
            x,
            out.slice(rows.start * n, rows.len() * n),
            n,
            rows,
            fused.symmetrize,
        );
        Ok(())
    })?;
    let request = cholesky_in_place_scratch::<T>(PANEL, Par::Seq, Default::default());
    let mut scratch = memory::faer_scratch(request, "cholesky")?;
    let mut diagonal = memory::vec_of(PANEL * PANEL, <T as Scalar>::ZERO)?;
    let _gradual = GradualUnderflow::new();
    for start in (0..n).step_by(PANEL) {
        let width = PANEL.min(n - start);
        let below = start + width;
        let diagonal = &mut diagonal[..width * width];
        let mut block = MatMut::from_column_major_slice_mut(diagonal, width, width);
        block.copy_from_triangular_lower(matrix.read(start, start, width, width));
        let stack = MemStack::new(&mut scratch);
        let factored = cholesky_in_place(
            block.rb_mut(),
            Default::default(),
            Par::Seq,
            stack,
            Default::default(),
        );
        if factored.is_err() {
            let whole = out.slice(0, n * n);
            lower_triangle(x, whole, n, 0..n, fused.symmetrize);
            let order = lapack_int("order", n)?;
            return Ok(lapack_potrf(potrf, b'U' as c_char, order, whole, n));
        }
        matrix
            .write(start, start, width, width)
            .copy_from_triangular_lower(block.rb());
        let lower = block.rb();
        // The columns below: X = A21·L11⁻ᴴ, that is conj(L11)·Xᵀ = A21ᵀ, in row blocks.
        parallel_chunks(pool, n - below, PANEL / 2, &|rows| {
            let _gradual = GradualUnderflow::new();
            let block = matrix.write(below + rows.start, start, rows.len(), width);
            solve_lower_triangular_in_place_with_conj(
                lower,
                Conj::Yes,
                block.transpose_mut(),
                Par::Seq,
            );
            Ok(())
        })?;
        // The lower triangle right of them: A22 -= X·Xᴴ, in column blocks.
        parallel_chunks(pool, n - below, PANEL / 2, &|columns| {
            let (c, w) = (below + columns.start, columns.len());
            let x_rows = |r: usize, h: usize| matrix.read(r, start, h, width);
            let mut diagonal = matrix.write(c, c, w, w);
            triangular::matmul_with_conj(
                diagonal.rb_mut(),
                BlockStructure::TriangularLower,
                Accum::Add,
                x_rows(c, w),
                BlockStructure::Rectangular,
                Conj::No,
                x_rows(c, w).transpose(),
                BlockStructure::Rectangular,
                Conj::Yes,
                -<T as Scalar>::ONE,
                Par::Seq,
            );
            // faer 0.24's product into a lower triangle also writes above it for complex f64
            // on AVX2 without AVX-512 (in this row-major block: entries (4i, 4i+2) and
            // (4i, 4i+3)); the result has zeros there.
            for i in 0..w {
                for j in i + 1..w {
                    diagonal[(i, j)] = <T as Scalar>::ZERO;
                }
            }
            if c + w < n {
                // (The last block has no rows below: the views would start past the matrix.)
                matmul_with_conj(
                    matrix.write(c + w, c, n - c - w, w),
                    Accum::Add,
                    x_rows(c + w, n - c - w),
                    Conj::No,
                    x_rows(c, w).transpose(),
                    Conj::Yes,
                    -<T as Scalar>::ONE,
                    Par::Seq,
                );
            }
            Ok(())
        })?;
    }
    Ok(0)
}

/// [`cholesky`] by faer's Cholesky on the column-major lower triangle, where its kernels run
/// along columns: the row-major upper triangle of the result gets `conj(A)`'s lower one
/// (column-major), faer factors it, `conj(A) = conj(L)·conj(L)ᴴ`, and `L` is that factor's
/// conjugate transpose. Where faer stops, the matrix is factored as [`factor_batch`] does.
fn faer_cholesky<T: LapackScalar>(
    pool: &dyn Pool,
    fused: FusedCholesky<T>,
    count: usize,
    done: &(dyn Fn(usize, i32) + Sync),
) -> Result<()> {
    let n = fused.n;
    let (order, potrf) = (lapack_int("order", n)?, routine(T::potrf())?);
    let request = cholesky_in_place_scratch::<T>(n, Par::Seq, Default::default());
    for_each_chunk(pool, count, n.pow(3) / 3, &|range| {
        let mut scratch = memory::faer_scratch(request, "cholesky")?;
        let _gradual = GradualUnderflow::new();
        for b in range {
            let x = &fused.x[b * n * n..(b + 1) * n * n];
            // SAFETY: matrix `b` of the result, which only this task writes.
            let out = unsafe { fused.out.slice(b * n * n, n * n) };
            upper_triangle(x, out, n, fused.symmetrize);
            let lower = MatMut::from_column_major_slice_mut(out, n, n);
            let stack = MemStack::new(&mut scratch);
            if cholesky_in_place(
                lower,
                Default::default(),
                Par::Seq,
                stack,
                Default::default(),
            )
            .is_ok()
            {
                upper_to_lower(out, n);
                done(b, 0);
            } else {
                lower_triangle(x, out, n, 0..n, fused.symmetrize);
                done(b, lapack_potrf(potrf, b'U' as c_char, order, out, n));
            }
        }
        Ok(())
    })
}

/// Where [`factor_batch`] finds the matrices it factors, column-major: one (with its leading
/// dimension) or a packed group of [`SIMD_GROUP`].
trait Factors<T>: Copy {
    /// Runs `f(a, ld)` on matrix `b`.
    ///
    /// # Safety
    /// Matrix `b` belongs to the calling task alone.
    unsafe fn one(
        &self,
        b: usize,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T], usize) -> i32,
    ) -> Result<i32>;
    /// Runs `f(group)` on matrices `first..first + SIMD_GROUP`, packed column-major.
    ///
    /// # Safety
    /// As [`Factors::one`], for each.
    unsafe fn group(
        &self,
        first: usize,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T]) -> [i32; LANES],
    ) -> Result<[i32; LANES]>;
}

/// The operand's matrices, factored in the result (LAPACK's in-place contract).
#[derive(Clone, Copy)]
struct InPlaceFactors<T>(InOut<T>);

impl<T: Copy> Factors<T> for InPlaceFactors<T> {
    unsafe fn one(
        &self,
        b: usize,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T], usize) -> i32,
    ) -> Result<i32> {
        self.0.column_major(b, scratch, f)
    }
    unsafe fn group(
        &self,
        first: usize,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T]) -> [i32; LANES],
    ) -> Result<[i32; LANES]> {
        // simd::potf2 reads column-major groups only.
        self.0
            .packed(first, SIMD_GROUP, false, scratch, |group, _| f(group))
    }
}

/// jax's `cholesky`: each matrix's (symmetrized) lower triangle written to the result, which
/// is then factored there.
#[derive(Clone, Copy)]
struct FusedCholesky<'x, T> {
    x: &'x [T],
    out: SharedMut<T>,
    n: usize,
    symmetrize: bool,
}

impl<T: LapackScalar> FusedCholesky<'_, T> {
    /// Matrix `b` of the result, holding its operand's lower triangle.
    ///
    /// # Safety
    /// Matrix `b` of the result belongs to the calling task alone.
    unsafe fn prepare<'s>(&self, b: usize) -> &'s mut [T] {
        let len = self.n * self.n;
        let out = self.out.slice(b * len, len);
        lower_triangle(
            &self.x[b * len..(b + 1) * len],
            out,
            self.n,
            0..self.n,
            self.symmetrize,
        );
        out
    }
}

impl<T: LapackScalar> Factors<T> for FusedCholesky<'_, T> {
    unsafe fn one(
        &self,
        b: usize,
        _: &mut Vec<T>,
        f: impl FnOnce(&mut [T], usize) -> i32,
    ) -> Result<i32> {
        Ok(f(self.prepare(b), self.n.max(1)))
    }
    unsafe fn group(
        &self,
        first: usize,
        _: &mut Vec<T>,
        f: impl FnOnce(&mut [T]) -> [i32; LANES],
    ) -> Result<[i32; LANES]> {
        (first..first + SIMD_GROUP).for_each(|b| {
            self.prepare(b);
        });
        let len = self.n * self.n;
        Ok(f(self.out.slice(first * len, SIMD_GROUP * len)))
    }
}

/// Factors matrices `0..count` (order `n`, the `lower` or upper triangle) of `matrices` on
/// `pool`, handing each one's `info` to `done(b, info)`.
fn factor_batch<T: LapackScalar, F: Factors<T> + Sync>(
    pool: &dyn Pool,
    count: usize,
    n: usize,
    lower: bool,
    matrices: F,
    done: &(dyn Fn(usize, i32) + Sync),
) -> Result<()> {
    if count == 0 || n == 0 {
        // Nothing to factor (LAPACK's quick return); an empty matrix's info is 0.
        (0..count).for_each(|b| done(b, 0));
        return Ok(());
    }
    let order = lapack_int("order", n)?;
    let lapack = if n > SMALL_MAX {
        Some(routine(T::potrf())?)
    } else {
        None
    };
    let uplo = if lower { b'L' } else { b'U' } as c_char;
    let flops = (n.pow(3) / 3).max(1);
    for_each_chunk(pool, count, flops, &|range| {
        let mut staged = Vec::new();
        // SAFETY (each closure): the chunk's matrices belong to this task alone.
        let one = |b: usize, staged: &mut Vec<T>| unsafe {
            matrices.one(b, staged, |a, ld| match lapack {
                Some(potrf) => lapack_potrf(potrf, uplo, order, a, ld),
                None => potf2(a, n, ld, lower),
            })
        };
        if lapack.is_some() {
            return range.into_iter().try_for_each(|b| {
                done(b, one(b, &mut staged)?);
                Ok(())
            });
        }
        let mut lane_scratch = vec![<T as Scalar>::ZERO; SIMD_GROUP * n * n];
        let mut staged_group = Vec::new();
        by_simd_groups(
            range,
            |first| {
                // SAFETY: as above.
                let info = unsafe {
                    matrices.group(first, &mut staged_group, |group| {
                        let mut info = [0; LANES];
                        potf2_lanes(group, n, lower, &mut info, &mut lane_scratch);
                        info
                    })
                }?;
                (0..SIMD_GROUP).for_each(|lane| done(first + lane, info[lane]));
                Ok(())
            },
            |b| {
                done(b, one(b, &mut staged)?);
                Ok(())
            },
        )
    })
}

fn lapack_potrf<T>(potrf: Potrf<T>, uplo: c_char, n: i32, a: &mut [T], ld: usize) -> i32 {
    let mut info = 0;
    // SAFETY: LAPACK reads and writes the n×n matrix `a` (leading dimension ld) and info.
    unsafe { potrf(&uplo, &n, a.as_mut_ptr(), &(ld as i32), &mut info) };
    info
}

/// Writes rows `rows` of the lower triangle of `(x + xᴴ)/2` (or of `x`) to `out` (those rows)
/// and zeros above it, both row-major `n×n`: jax's `symmetrize`, element for element.
fn lower_triangle<T: LapackScalar>(
    x: &[T],
    out: &mut [T],
    n: usize,
    rows: Range<usize>,
    symmetrize: bool,
) {
    for (i, row) in rows.zip(out.chunks_exact_mut(n)) {
        let (lower, upper) = row.split_at_mut(i + 1);
        for (j, element) in lower.iter_mut().enumerate() {
            *element = input(x, n, [i, j], symmetrize);
        }
        upper.fill(T::ZERO);
    }
}

/// The conjugate transpose of [`lower_triangle`]'s triangle, in `out`'s upper triangle (its
/// strict lower one as it was).
fn upper_triangle<T: LapackScalar>(x: &[T], out: &mut [T], n: usize, symmetrize: bool) {
    for (i, row) in out.chunks_exact_mut(n).enumerate() {
        for (j, element) in row.iter_mut().enumerate().skip(i) {
            *element = input(x, n, [j, i], symmetrize).conj();
        }
    }
}

/// Element `(i, j)` (`j ≤ i`) of what jax factors: `(x + xᴴ)/2`, or `x`.
fn input<T: LapackScalar>(x: &[T], n: usize, [i, j]: [usize; 2], symmetrize: bool) -> T {
    if !symmetrize {
        return x[i * n + j];
    }
    let one = <<T as Scalar>::Real as Real>::ONE;
    (x[i * n + j] + x[j * n + i].conj()).scale(one / (one + one))
}

/// The conjugate transpose of `out`'s upper triangle in its lower one, zeros above.
fn upper_to_lower<T: LapackScalar>(out: &mut [T], n: usize) {
    for i in 0..n {
        for j in 0..i {
            out[i * n + j] = out[j * n + i].conj();
            out[j * n + i] = T::ZERO;
        }
    }
}

/// jax's result where the factorization fails: NaN on and below the diagonal, zeros above.
fn failed<T: LapackScalar>(out: &mut [T], n: usize) {
    for (i, row) in out.chunks_exact_mut(n).enumerate() {
        let (lower, upper) = row.split_at_mut(i + 1);
        lower.fill(T::from_real(<<T as Scalar>::Real as Real>::NAN));
        upper.fill(T::ZERO);
    }
}

simd_dispatch! {
    /// [`simd::potf2`], compiled for the widest vector unit.
    fn potf2_lanes<T: Scalar>(
        a: &mut [T],
        n: usize,
        lower: bool,
        info: &mut [i32; LANES],
        scratch: &mut [T],
    ) {
        simd::potf2(a, n, lower, info, scratch)
    }
}
