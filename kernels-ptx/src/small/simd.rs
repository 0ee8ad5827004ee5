//! CPU only: [`getf2`](super::getf2) and [`potf2`](super::potf2) for [`LANES`] matrices at
//! once, one per SIMD lane, for the CPU handlers' batches of tiny matrices: there the
//! per-matrix loops are a few elements long, so loop overhead and latency, not arithmetic, set
//! the time of the one-matrix routines. Here the matrices are interleaved element by element in
//! a scratch buffer and every step runs across the lanes (fixed-length loops the compiler
//! vectorizes). (The GPU's small kernels are `super`'s warp kernels, lanes of a warp.)
//!
//! Each lane performs exactly the operations of the one-matrix routine in the same order
//! (lane-wise selects where that routine branches), so the results are bit for bit the same,
//! `info` and pivots included (the tests check this).

use crate::scalar::{Real, Scalar};

/// Matrices factored together (8 f64 lanes fill an AVX-512 register; the loops vectorize to
/// the target's width).
pub const LANES: usize = 8;

/// How the elements of an `m×n` matrix lie in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Fortran order (LAPACK's, and jaxlib's custom-call contract): `(i, j)` at `j·m + i`.
    ColumnMajor,
    /// C order (jax arrays as they are): `(i, j)` at `i·n + j`.
    RowMajor,
}

/// Copies the `LANES` consecutive `len`-element matrices of `a` into `scratch`, element `e` of
/// matrix `l` at `e·LANES + l`.
#[inline(always)] // compiled with the caller's vector unit
fn interleave<T: Scalar>(a: &[T], len: usize, scratch: &mut [T]) {
    interleave_from(a, len, 1, Layout::ColumnMajor, scratch)
}

/// The inverse of [`interleave`].
#[inline(always)] // compiled with the caller's vector unit
fn deinterleave<T: Scalar>(scratch: &[T], len: usize, a: &mut [T]) {
    deinterleave_to(scratch, len, 1, Layout::ColumnMajor, a)
}

/// Elements of a matrix moved together, and matrices moved together, by [`move_matrices`].
const BLOCK: usize = 4;
const _: () = assert!(LANES % BLOCK == 0);

/// The runs of adjacent elements of an `m×n` matrix stored in `layout`: `runs` rows (a
/// column-major matrix: one run of all its elements, which keep their order in the scratch) of
/// `run` elements.
#[inline(always)]
fn runs(m: usize, n: usize, layout: Layout) -> (usize, usize) {
    match layout {
        Layout::ColumnMajor => (1, m * n),
        Layout::RowMajor => (m, n),
    }
}

/// The column-major index (place in the interleaved scratch) of element `k` of run `o` (see
/// [`runs`]) of an `m`-row matrix stored in `layout`.
#[inline(always)]
fn run_element(m: usize, layout: Layout, o: usize, k: usize) -> usize {
    match layout {
        Layout::ColumnMajor => k,
        Layout::RowMajor => k * m + o,
    }
}

/// Whether [`move_block`] may take AVX's shuffles (8-byte elements: f64, complex f32, on a
/// CPU with AVX). Element by element the compiler keeps every load and store scalar.
#[inline(always)]
fn avx_blocks<T>() -> bool {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    {
        core::mem::size_of::<T>() == 8 && std::is_x86_feature_detected!("avx")
    }
    #[cfg(not(all(target_arch = "x86_64", feature = "std")))]
    {
        false
    }
}

/// Element `d` of the run at `from[q]` to element `q` of the run at `to[d]`, runs of [`BLOCK`]:
/// a transpose.
///
/// # Safety
/// Every pointer is valid for [`BLOCK`] elements, the runs of `from` and of `to` do not
/// overlap, and `avx` is what [`avx_blocks`] says.
#[inline(always)]
unsafe fn move_block<T: Copy>(from: [*const T; BLOCK], to: [*mut T; BLOCK], avx: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx && core::mem::size_of::<T>() == 8 {
        let from = [
            from[0].cast(),
            from[1].cast(),
            from[2].cast(),
            from[3].cast(),
        ];
        return transpose_8_byte(
            from,
            [to[0].cast(), to[1].cast(), to[2].cast(), to[3].cast()],
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = avx;
    for (q, from) in from.iter().enumerate() {
        for (d, to) in to.iter().enumerate() {
            *to.add(q) = *from.add(d);
        }
    }
}

/// [`move_block`] of 8-byte elements (moved as f64 bit patterns, unchanged).
///
/// # Safety
/// As [`move_block`]; the CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn transpose_8_byte(from: [*const f64; BLOCK], to: [*mut f64; BLOCK]) {
    use core::arch::x86_64::*;
    let (a, b) = (_mm256_loadu_pd(from[0]), _mm256_loadu_pd(from[1]));
    let (c, d) = (_mm256_loadu_pd(from[2]), _mm256_loadu_pd(from[3]));
    let (ab_even, ab_odd) = (_mm256_unpacklo_pd(a, b), _mm256_unpackhi_pd(a, b));
    let (cd_even, cd_odd) = (_mm256_unpacklo_pd(c, d), _mm256_unpackhi_pd(c, d));
    _mm256_storeu_pd(to[0], _mm256_permute2f128_pd(ab_even, cd_even, 0x20));
    _mm256_storeu_pd(to[1], _mm256_permute2f128_pd(ab_odd, cd_odd, 0x20));
    _mm256_storeu_pd(to[2], _mm256_permute2f128_pd(ab_even, cd_even, 0x31));
    _mm256_storeu_pd(to[3], _mm256_permute2f128_pd(ab_odd, cd_odd, 0x31));
}

/// The [`LANES`] `m×n` matrices stored in `layout` at `matrices` moved into the interleaved
/// scratch at `scratch`, column-major (`into_lanes`), or back. Where the [`runs`] split into
/// runs of [`BLOCK`], [`BLOCK`] elements of [`BLOCK`] matrices move at once, a small transpose
/// in vector registers; element by element the loads and stores stay scalar (those were about
/// half of the lane LU's time, a quarter of `jax.lax.linalg.lu`'s, f64 8192×8×8). One loop
/// for both directions: only the roles of the two sides swap.
///
/// # Safety
/// `matrices` and `scratch` are valid for `LANES·m·n` elements each and do not overlap; the
/// side moved to (`scratch` if `into_lanes`, else `matrices`) is valid for writes, the other
/// only read.
#[inline(always)] // compiled with the caller's vector unit; `into_lanes` folds away
unsafe fn move_matrices<T: Scalar>(
    m: usize,
    n: usize,
    layout: Layout,
    matrices: *mut T,
    scratch: *mut T,
    into_lanes: bool,
) {
    let ((runs, run), len) = (runs(m, n, layout), m * n);
    // SAFETY (below, with the caller's): every index is below `len` in a matrix, below
    // `LANES·len` in the scratch; a block's runs of `BLOCK` from such an index stay within
    // them too (`run % BLOCK == 0`, `LANES % BLOCK == 0`).
    if run % BLOCK != 0 {
        // One element of every matrix at a time, a fixed-length inner loop: matrix by matrix,
        // the compiler vectorized the variable-length loop into more code, slower on tiny runs.
        for o in 0..runs {
            for k in 0..run {
                let (source, element) = (o * run + k, run_element(m, layout, o, k));
                for q in 0..LANES {
                    let matrix = matrices.add(q * len + source);
                    let lane = scratch.add(element * LANES + q);
                    if into_lanes {
                        *lane = *matrix;
                    } else {
                        *matrix = *lane;
                    }
                }
            }
        }
        return;
    }
    let avx = avx_blocks::<T>();
    for o in 0..runs {
        for first in (0..run).step_by(BLOCK) {
            let source = o * run + first;
            let element =
                core::array::from_fn::<_, BLOCK, _>(|d| run_element(m, layout, o, first + d));
            for q0 in (0..LANES).step_by(BLOCK) {
                let matrix_run = |q: usize| matrices.add((q0 + q) * len + source);
                let lane_run = |d: usize| scratch.add(element[d] * LANES + q0);
                let matrix_runs = [matrix_run(0), matrix_run(1), matrix_run(2), matrix_run(3)];
                let lane_runs = [lane_run(0), lane_run(1), lane_run(2), lane_run(3)];
                let (from, to) = if into_lanes {
                    (matrix_runs, lane_runs)
                } else {
                    (lane_runs, matrix_runs)
                };
                move_block(from.map(|p| p.cast_const()), to, avx);
            }
        }
    }
}

/// `LANES·m·n`, the elements [`move_matrices`] touches on each side; panics where that
/// overflows (its pointer loops walk `m` and `n`, not a wrapped length).
#[inline(always)]
fn moved_elements(m: usize, n: usize) -> usize {
    m.checked_mul(n)
        .and_then(|len| len.checked_mul(LANES))
        .expect("the lanes' matrices overflow usize")
}

/// [`interleave`] of `m×n` matrices stored in `layout`: in `scratch` they are column-major.
#[inline(always)] // compiled with the caller's vector unit
fn interleave_from<T: Scalar>(a: &[T], m: usize, n: usize, layout: Layout, scratch: &mut [T]) {
    let total = moved_elements(m, n);
    let (a, scratch) = (&a[..total], &mut scratch[..total]);
    // SAFETY: both slices hold `LANES·m·n` elements, one `&`, one `&mut` (disjoint); `a` is
    // only read.
    unsafe {
        move_matrices(
            m,
            n,
            layout,
            a.as_ptr().cast_mut(),
            scratch.as_mut_ptr(),
            true,
        )
    }
}

/// The inverse of [`interleave_from`].
#[inline(always)] // compiled with the caller's vector unit
fn deinterleave_to<T: Scalar>(scratch: &[T], m: usize, n: usize, layout: Layout, a: &mut [T]) {
    let total = moved_elements(m, n);
    let (a, scratch) = (&mut a[..total], &scratch[..total]);
    // SAFETY: both slices hold `LANES·m·n` elements, one `&`, one `&mut` (disjoint);
    // `scratch` is only read.
    unsafe {
        move_matrices(
            m,
            n,
            layout,
            a.as_mut_ptr(),
            scratch.as_ptr().cast_mut(),
            false,
        )
    }
}

/// [`interleave`] of the conjugate transposes of `n×n` matrices, their diagonals as they are
/// (what [`potf2`](super::potf2) reads of an upper triangle as the lower one).
fn interleave_adjoint<T: Scalar>(a: &[T], n: usize, scratch: &mut [T]) {
    for (l, matrix) in a.chunks_exact(n * n).take(LANES).enumerate() {
        for j in 0..n {
            for i in 0..n {
                let x = matrix[i * n + j];
                scratch[(j * n + i) * LANES + l] = if i == j { x } else { x.conj() };
            }
        }
    }
}

/// The inverse of [`interleave_adjoint`].
fn deinterleave_adjoint<T: Scalar>(scratch: &[T], n: usize, a: &mut [T]) {
    for (l, matrix) in a.chunks_exact_mut(n * n).take(LANES).enumerate() {
        for j in 0..n {
            for i in 0..n {
                let x = scratch[(j * n + i) * LANES + l];
                matrix[i * n + j] = if i == j { x } else { x.conj() };
            }
        }
    }
}

/// The lanes of element `e` (the element's index in one matrix).
#[inline(always)]
fn lanes<T>(s: &[T], e: usize) -> &[T; LANES] {
    s[e * LANES..(e + 1) * LANES].try_into().unwrap()
}

/// The lanes of element `target`, writable, and those of an earlier element `source`.
#[inline(always)]
fn lanes_pair<T>(s: &mut [T], target: usize, source: usize) -> (&mut [T; LANES], &[T; LANES]) {
    debug_assert!(source < target);
    let (head, tail) = s.split_at_mut(target * LANES);
    (
        (&mut tail[..LANES]).try_into().unwrap(),
        head[source * LANES..(source + 1) * LANES]
            .try_into()
            .unwrap(),
    )
}

fn check_sizes<T>(a: &[T], m: usize, n: usize, scratch: &[T]) {
    let total = moved_elements(m, n);
    assert!(
        a.len() >= total && scratch.len() >= total,
        "lanes need {LANES}·{m}·{n} elements in the matrices and the scratch"
    );
}

/// [`potf2`](super::potf2) for the `LANES` consecutive `n×n` matrices of `a` (column-major,
/// leading dimension `n`), in their `lower` or upper triangle: writes each matrix's `info` to
/// `info[lane]`. `scratch` holds at least `LANES·n²` elements (its contents are overwritten).
///
/// # Panics
/// If `a` or `scratch` is shorter than `LANES·n²`.
#[inline(always)]
pub fn potf2<T: Scalar>(
    a: &mut [T],
    n: usize,
    lower: bool,
    info: &mut [i32; LANES],
    scratch: &mut [T],
) {
    check_sizes(a, n, n, scratch);
    let len = n * n;
    *info = [0; LANES];
    if len == 0 {
        return;
    }
    // An upper triangle is factored as potf2 does it: as the lower triangle of the adjoint.
    if lower {
        interleave(a, len, scratch);
    } else {
        interleave_adjoint(a, n, scratch);
    }
    let s = &mut scratch[..LANES * len];
    let at = |i: usize, j: usize| j * n + i;
    // A lane stops at its first non-positive diagonal, as potf2 returns there: it keeps what it
    // had, later steps leave it alone.
    let mut alive = [true; LANES];
    for j in 0..n {
        let mut r = [<T::Real as Real>::ZERO; LANES];
        let diagonal: &mut [T; LANES] = (&mut s[at(j, j) * LANES..][..LANES]).try_into().unwrap();
        for l in 0..LANES {
            if !alive[l] {
                continue;
            }
            let d = diagonal[l].re();
            if d > <T::Real as Real>::ZERO {
                let root = d.sqrt();
                r[l] = <T::Real as Real>::ONE / root;
                diagonal[l] = T::from_real(root);
            } else {
                diagonal[l] = T::from_real(d);
                alive[l] = false;
                info[l] = j as i32 + 1;
            }
        }
        // Lane-wise selects only once a lane has stopped (rare): they cost more than the
        // arithmetic.
        let all_alive = alive.iter().all(|&a| a);
        for i in j + 1..n {
            let x: &mut [T; LANES] = (&mut s[at(i, j) * LANES..][..LANES]).try_into().unwrap();
            for l in 0..LANES {
                let v = x[l].scale(r[l]);
                x[l] = if all_alive || alive[l] { v } else { x[l] };
            }
        }
        for k in j + 1..n {
            let lk: [T; LANES] = core::array::from_fn(|l| lanes(s, at(k, j))[l].conj());
            for i in k..n {
                let (x, li) = lanes_pair(s, at(i, k), at(i, j));
                if all_alive {
                    for l in 0..LANES {
                        x[l] = x[l] - li[l] * lk[l];
                    }
                } else {
                    for l in 0..LANES {
                        let v = x[l] - li[l] * lk[l];
                        x[l] = if alive[l] { v } else { x[l] };
                    }
                }
            }
        }
    }
    if lower {
        deinterleave(s, len, a);
    } else {
        deinterleave_adjoint(s, n, a);
    }
}

/// [`getf2`](super::getf2) for the `LANES` consecutive `m×n` matrices of `a`, each stored
/// contiguously in `layout` (the packed result stays in that layout), or of `source` (laid out
/// as `a`, which then only takes the result): matrix `l`'s pivots go to
/// `ipiv[l·min(m, n)..]` and its `info` to `info[l]`. `scratch` holds at least `LANES·m·n`
/// elements (its contents are overwritten).
///
/// # Panics
/// If `a`, `source` or `scratch` is shorter than `LANES·m·n`, or `ipiv` than
/// `LANES·min(m, n)`.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // LAPACK's arguments, the source and the scratch
pub fn getf2<T: Scalar>(
    source: Option<&[T]>,
    a: &mut [T],
    m: usize,
    n: usize,
    layout: Layout,
    ipiv: &mut [i32],
    info: &mut [i32; LANES],
    scratch: &mut [T],
) {
    check_sizes(a, m, n, scratch);
    let (len, k) = (m * n, m.min(n));
    assert!(ipiv.len() >= LANES * k, "ipiv needs {LANES}·{k} elements");
    *info = [0; LANES];
    if len == 0 {
        return;
    }
    let source = source.unwrap_or(a);
    check_sizes(source, m, n, scratch);
    interleave_from(source, m, n, layout, scratch);
    let s = &mut scratch[..LANES * len];
    let at = |i: usize, j: usize| j * m + i;
    let zero = T::ZERO;
    for j in 0..k {
        // The first largest |re| + |im| at or below the diagonal (a NaN is never exceeded).
        let mut pivot_row = [j; LANES];
        // Loops, not `core::array::from_fn`: that one stayed a call, compiled for the baseline
        // x86-64 rather than the caller's vector unit (the complex reciprocals: 10% of an 8×8
        // batch's time, scalar and branching).
        let mut largest = [<T::Real as Real>::ZERO; LANES];
        for (l, x) in largest.iter_mut().zip(lanes(s, at(j, j))) {
            *l = x.abs1();
        }
        for i in j + 1..m {
            let x = lanes(s, at(i, j));
            for l in 0..LANES {
                let v = x[l].abs1();
                if v > largest[l] {
                    (pivot_row[l], largest[l]) = (i, v);
                }
            }
        }
        let mut pivot = [zero; LANES];
        for l in 0..LANES {
            pivot[l] = lanes(s, at(pivot_row[l], j))[l];
        }
        for l in 0..LANES {
            ipiv[l * k + j] = pivot_row[l] as i32 + 1;
            if pivot[l] == zero && info[l] == 0 {
                info[l] = j as i32 + 1;
            }
        }
        // Row j with each lane's pivot row, a column at a time: a gather of the pivot rows'
        // lanes and a scatter of row j's (a lane that keeps row j reads and writes it; a zero
        // pivot is only ever row j's own, as no zero exceeds another). About a quarter of an
        // 8×8 f64 batch's time, yet lane selects in the loops below in place of the scatter
        // were 1.25–1.6× slower overall (LLVM made them masked or scalar stores).
        if pivot_row.iter().any(|&r| r != j) {
            let mut offset = [0usize; LANES];
            for l in 0..LANES {
                offset[l] = pivot_row[l] * LANES + l;
            }
            for c in 0..n {
                let column = &mut s[at(0, c) * LANES..at(0, c + 1) * LANES];
                let row_j = *lanes(column, j);
                let mut taken = row_j;
                for l in 0..LANES {
                    taken[l] = column[offset[l]];
                }
                for l in 0..LANES {
                    column[offset[l]] = row_j[l];
                }
                column[j * LANES..(j + 1) * LANES].copy_from_slice(&taken);
            }
        }
        // Below the pivot: times its reciprocal, or divided by it where the pivot is below the
        // safe minimum; untouched in lanes whose pivot is zero.
        let mut reciprocal = [zero; LANES];
        for l in 0..LANES {
            reciprocal[l] = T::ONE.quotient(pivot[l]);
        }
        let tiny = pivot
            .iter()
            .any(|p| *p != zero && !p.modulus_at_least(<T::Real as Real>::SAFE_MIN));
        // Lane-wise selects only where some lane needs them (rare): they cost more than the
        // arithmetic.
        let all_nonzero = pivot.iter().all(|p| *p != zero);
        for i in j + 1..m {
            let x: &mut [T; LANES] = (&mut s[at(i, j) * LANES..][..LANES]).try_into().unwrap();
            if tiny {
                for l in 0..LANES {
                    if pivot[l] != zero {
                        x[l] = if pivot[l].modulus_at_least(<T::Real as Real>::SAFE_MIN) {
                            x[l] * reciprocal[l]
                        } else {
                            x[l].quotient(pivot[l])
                        };
                    }
                }
            } else if all_nonzero {
                for l in 0..LANES {
                    x[l] = x[l] * reciprocal[l];
                }
            } else {
                for l in 0..LANES {
                    let v = x[l] * reciprocal[l];
                    x[l] = if pivot[l] != zero { v } else { x[l] };
                }
            }
        }
        // The rank-1 update, skipping zero multipliers as xGER does.
        for c in j + 1..n {
            let u = *lanes(s, at(j, c));
            let all_nonzero = u.iter().all(|x| *x != zero);
            for i in j + 1..m {
                let (x, lx) = lanes_pair(s, at(i, c), at(i, j));
                if all_nonzero {
                    for l in 0..LANES {
                        x[l] = x[l] - lx[l] * u[l];
                    }
                } else {
                    for l in 0..LANES {
                        let v = x[l] - lx[l] * u[l];
                        x[l] = if u[l] != zero { v } else { x[l] };
                    }
                }
            }
        }
    }
    deinterleave_to(s, m, n, layout, a);
}
