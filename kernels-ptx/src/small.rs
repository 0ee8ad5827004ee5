//! Batched small-matrix LU (`getrf`, partial pivoting) and Cholesky (`potrf`) in LAPACK's output
//! format, in place: matrices column-major (element `(i, j)` of matrix `b` at
//! `a[b·m·n + j·m + i]`), the batch contiguous.
//!
//! Two kernel shapes:
//! * **rows**, the warp kernels (`max(m, n) ≤ 32`): a group of `W` lanes (`W` = 4, 8, 16 or
//!   32, inside one warp) per matrix, lane `i` holding row `i` in registers (`[T; W]`, indexed
//!   only by unrolled constants). Pivot search, pivot-row and column broadcasts are warp
//!   shuffles. Row swaps are not data movement: each lane tracks the position its row currently
//!   holds, and the row is stored at its final position. The block's matrices are staged
//!   through shared memory so that global loads and stores are contiguous.
//! * **block** (`max(m, n) ≤ 128`): one block per matrix, the matrix in shared memory (as
//!   much as the device lets a block opt in to).
//!
//! Both follow LAPACK's unblocked algorithms operation for operation (`xGETF2`: pivot = first
//! max of `|re| + |im|`, scale by the reciprocal unless the pivot is below the safe minimum,
//! zero pivots recorded in `info` and skipped, the rank-1 update skipping zero multipliers as
//! `xGER` does; `xPOTF2`: right-looking, with `info` the first non-positive or NaN diagonal), so
//! results equal a sequential reference bit for bit (the tests check this).

use crate::grid::{
    block_dim_x, block_idx_x, dynamic_shared, grid_dim_x, sync_threads, thread_idx_x,
};
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig, ScalarKind};
use crate::scalar::{Real, Scalar, WarpExchange};

/// Runs `$body` once for each `$i` in `0..$w` (`$w ≤ 32`), `$i` a literal in each copy: the
/// rows' register arrays must only see constant indices, and LLVM does not fully unroll the
/// nested loops by itself (the arrays then land in local memory). No `break` in `$body`.
macro_rules! unrolled {
    ($i:ident in 0..$w:expr, $body:block) => {
        unrolled!(@ $i, $w, $body, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23
            24 25 26 27 28 29 30 31)
    };
    (@ $i:ident, $w:expr, $body:block, $($n:literal)*) => {
        $(if $n < $w {
            let $i: usize = $n;
            $body
        })*
    };
}

#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn shfl_u32(v: u32, src: u32) -> u32 {
    let r: u32;
    // SAFETY: every lane of the warp executes this (the kernels keep shuffles out of
    // data-dependent branches). Not `pure`, so LLVM neither sinks it into a branch nor drops it.
    unsafe {
        core::arch::asm!("shfl.sync.idx.b32 {r}, {v}, {s}, 31, -1;", r = out(reg32) r,
            v = in(reg32) v, s = in(reg32) src & 31, options(nomem, nostack));
    }
    r
}

/// Bytes of host-only exchange scratch per thread (the largest scalar); see [`shfl`].
pub const HOST_EXCHANGE_BYTES_PER_THREAD: usize = 16;

/// The value `v` of thread `src` (an index in the block, in the caller's own warp): a warp
/// shuffle per 32-bit word on the GPU; on the host (which runs a block's threads as OS
/// threads) a round trip through a per-thread slot of `_exchange` (scratch shared memory)
/// between two block barriers. Every thread of the warp (on the host: of the block) must call
/// it at the same point.
#[inline(always)]
unsafe fn shfl<T: WarpExchange>(v: T, src: u32, _exchange: *mut u8) -> T {
    #[cfg(target_arch = "nvptx64")]
    {
        v.map_words(|w| shfl_u32(w, src))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let slots = _exchange.cast::<T>();
        slots.add(thread_idx_x() as usize).write(v);
        sync_threads();
        let r = slots.add(src as usize).read();
        sync_threads();
        r
    }
}

/// How whole matrices lie in global memory and in their padded copy in shared memory, where
/// column `j` of the block's matrix `b` starts at element `(b·cols + j)·ld`.
#[derive(Clone, Copy)]
pub(crate) struct Staging {
    pub rows: u32,
    pub cols: u32,
    /// Shared elements from one column to the next (≥ `rows`): `rows + 1` lets lanes reading a
    /// row and lanes reading a column both hit distinct banks; the QR kernels need it odd.
    pub ld: u32,
    /// Global matrices row-major (jax's own layout) rather than column-major (LAPACK's).
    pub row_major: bool,
    /// Copying out, the elements taken from shared memory; the others are zeroed.
    pub keep: Keep,
}

/// The part of each matrix a copy out of shared memory takes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    All,
    /// On and above the diagonal (R of a QR).
    Upper,
    /// On and below the diagonal (L of a Cholesky factorization).
    Lower,
}

impl Staging {
    /// Column-major matrices padded to `rows + 1`: the LU and Cholesky kernels' staging.
    pub(crate) const fn column_major(rows: u32, cols: u32) -> Staging {
        Staging {
            rows,
            cols,
            ld: rows + 1,
            row_major: false,
            keep: Keep::All,
        }
    }
}

/// Copies `matrices` whole matrices between global memory (back to back) and their padded copy
/// in shared memory (`IN`: to shared), as `s` lays them out. Consecutive threads take
/// consecutive global elements (coalesced).
#[inline(always)]
unsafe fn stage<T: Scalar, const IN: bool>(
    global: *mut T,
    shared: *mut T,
    matrices: u32,
    s: Staging,
) {
    let (t, nb) = (thread_idx_x(), block_dim_x());
    let per = s.rows * s.cols;
    let total = matrices * per;
    if t >= total {
        return;
    }
    // Element e of the global array is (x0 + x1·inner) of matrix b, x0 along the contiguous
    // dimension; the three advance incrementally instead of dividing per element.
    let (inner, outer) = if s.row_major {
        (s.cols, s.rows)
    } else {
        (s.rows, s.cols)
    };
    let (step_b, rest) = (nb / per, nb % per);
    let (step1, step0) = (rest / inner, rest % inner);
    let (mut e, mut b, mut x1, mut x0) = (t, t / per, t % per / inner, t % inner);
    while e < total {
        let (i, j) = if s.row_major { (x1, x0) } else { (x0, x1) };
        let (g, sh) = (
            global.add(e as usize),
            shared.add(((b * s.cols + j) * s.ld + i) as usize),
        );
        if IN {
            *sh = *g;
        } else {
            let zero = match s.keep {
                Keep::All => false,
                Keep::Upper => i > j,
                Keep::Lower => i < j,
            };
            *g = if zero { T::ZERO } else { *sh };
        }
        e += nb;
        x0 += step0;
        if x0 >= inner {
            x0 -= inner;
            x1 += 1;
        }
        x1 += step1;
        if x1 >= outer {
            x1 -= outer;
            b += 1;
        }
        b += step_b;
    }
}

/// Shared bytes of `matrices` padded `m×n` matrices, rounded up to 16.
const fn staged_bytes(matrices: u32, m: u32, n: u32, size: usize) -> usize {
    padded_bytes(matrices, m + 1, n, size)
}

/// Shared bytes of `matrices` matrices of `n` columns of `ld` elements, rounded up to 16.
const fn padded_bytes(matrices: u32, ld: u32, n: u32, size: usize) -> usize {
    (matrices as usize * n as usize * ld as usize * size).div_ceil(16) * 16
}

/// The pivot key of LAPACK's `IxAMAX` made order-independent: `IxAMAX` returns the first index
/// whose magnitude beats every earlier one, so a NaN is chosen only as the first candidate
/// (nothing beats it) and is skipped elsewhere. Mapping the first candidate's NaN to +inf
/// (ties go to the smaller position) and any other NaN to -1 (below every magnitude) gives
/// the same pivot from a maximum taken in any order.
#[inline(always)]
fn pivot_key<R: Real>(magnitude: R, first: bool) -> R {
    if !magnitude.is_nan() {
        magnitude
    } else if first {
        R::INFINITY
    } else {
        R::ZERO - R::ONE
    }
}

/// Maximum of `key` over the `W` lanes of a group, ties to the smallest `pos`; returns the
/// winner's `(pos, lane)` to every lane. Keys are never NaN, so the result does not depend on
/// the order of the butterfly.
#[inline(always)]
unsafe fn group_argmax<R: Real, const W: usize>(
    key: R,
    pos: u32,
    lane: u32,
    ex: *mut u8,
) -> (u32, u32) {
    let t = thread_idx_x();
    let (mut key, mut tag) = (key, pos << 8 | lane);
    let mut offset = W as u32 / 2;
    while offset > 0 {
        let other_key = shfl(key, t ^ offset, ex);
        let other_tag = shfl(tag, t ^ offset, ex);
        if other_key > key || (other_key == key && other_tag < tag) {
            key = other_key;
            tag = other_tag;
        }
        offset /= 2;
    }
    (tag >> 8, tag & 0xff)
}

kernel_args! {
    /// The arguments of the LU entries (`ferrax_getrf_small_*`, [`getrf_rows`] and
    /// [`getrf_block`]): the `batch` `m×n` matrices read from `src` and their factors written
    /// to `a` (the same array to factor in place), column-major, or row-major (jax's layout)
    /// when `row_major != 0`; `ipiv` gets `batch·min(m, n)` pivots, `info` one per matrix.
    pub struct GetrfArgs<T> {
        pub src: *const T,
        pub a: *mut T,
        pub ipiv: *mut i32,
        pub info: *mut i32,
        pub m: u32,
        pub n: u32,
        pub batch: u64,
        pub row_major: u32,
    }
}

kernel_args! {
    /// The arguments of the Cholesky entries (`ferrax_potrf_small_*`, [`potrf_rows`] and
    /// [`potrf_block`]): the `batch` column-major `n×n` matrices `a` factored in place, their
    /// lower triangle (`lower != 0`) or upper; `info` one per matrix.
    pub struct PotrfArgs<T> {
        pub a: *mut T,
        pub info: *mut i32,
        pub n: u32,
        pub batch: u64,
        pub lower: u32,
    }
}

kernel_args! {
    /// The arguments of jax's whole `cholesky` (`ferrax_cholesky_small_*`, [`cholesky_rows`]
    /// and [`cholesky_block`]): the `batch` row-major `n×n` matrices `a` (symmetrized when
    /// `symmetrize != 0`), their lower factors written row-major to `l`.
    pub struct CholeskyArgs<T> {
        pub a: *const T,
        pub l: *mut T,
        pub n: u32,
        pub batch: u64,
        pub symmetrize: u32,
    }
}

/// Where a thread sits in a launch of `W`-lane groups, one matrix per group.
pub(crate) struct LaneGroup {
    /// Matrices (groups) per block.
    pub groups: u32,
    /// This thread's group in the block, its lane in the group, and the group's first thread.
    pub g: u32,
    pub lane: u32,
    pub lead: u32,
    /// The block's first matrix and how many of its groups have one.
    pub first: u64,
    pub count: u32,
}

/// This thread's [`LaneGroup`] over `batch` matrices, or `None` in a block past the batch.
#[inline(always)]
pub(crate) fn lane_group<const W: usize>(batch: u64) -> Option<LaneGroup> {
    let (t, nb) = (thread_idx_x(), block_dim_x());
    let groups = nb / W as u32;
    let lane = t % W as u32;
    let first = block_idx_x() as u64 * groups as u64;
    (first < batch).then(|| LaneGroup {
        groups,
        g: t / W as u32,
        lane,
        lead: t - lane,
        first,
        count: (batch - first).min(groups as u64) as u32,
    })
}

/// LU of the `m×n` matrices (`max(m, n) ≤ W`), `W` lanes per matrix, lane = row: read from
/// `src`, the factors written to `a` (the same array to factor in place); the matrices
/// column-major, or row-major (jax's layout) when `row_major != 0`.
///
/// # Safety
/// `src` and `a` hold `batch·m·n` elements (one array, or two that do not overlap), `ipiv`
/// `batch·min(m, n)`, `info` `batch`; the launch is [`getrf_launch`]'s (`block_dim` a
/// multiple of `W`, the shared memory it sizes).
#[inline(always)]
pub unsafe fn getrf_rows<T: Scalar, const W: usize>(args: GetrfArgs<T>) {
    let GetrfArgs {
        src,
        a,
        ipiv,
        info,
        m,
        n,
        batch,
        row_major,
    } = args;
    let Some(LaneGroup {
        groups,
        g,
        lane,
        lead,
        first,
        count,
    }) = lane_group::<W>(batch)
    else {
        return; // the whole block: no barrier is left waiting
    };
    let (mn, ld, kmin) = (m * n, m + 1, m.min(n));
    let shared = dynamic_shared::<T>();
    let ex = shared
        .cast::<u8>()
        .add(staged_bytes(groups, m, n, core::mem::size_of::<T>()));
    let staging = Staging {
        row_major: row_major != 0,
        ..Staging::column_major(m, n)
    };
    let offset = (first * mn as u64) as usize;
    stage::<T, true>(src.add(offset) as *mut T, shared, count, staging);
    sync_threads();

    // Groups past the batch's end still run (their shuffles pair with live groups' in the
    // warp) on zeros, and store nothing.
    let live = g < count && lane < m;
    let mine = shared.add((g * n * ld + lane) as usize);
    let mut row = [T::ZERO; W];
    unrolled!(k in 0..W, {
        if live && (k as u32) < n {
            row[k] = *mine.add(k * ld as usize);
        }
    });

    let (mut pos, mut first_zero, mut pivot) = (lane, 0u32, 0u32);
    unrolled!(j in 0..W, {
        let j32 = j as u32;
        if j32 < kmin {
            let candidate = lane < m && pos >= j32;
            let key = if candidate {
                pivot_key(row[j].abs1(), pos == j32)
            } else {
                <T::Real as Real>::NEG_INFINITY
            };
            let (p_pos, p_lane) = group_argmax::<T::Real, W>(key, pos, lane, ex);
            if lane == j32 {
                pivot = p_pos + 1;
            }
            let pv = shfl(row[j], lead + p_lane, ex);
            let nonzero = pv != T::ZERO;
            if !nonzero && first_zero == 0 {
                first_zero = j32 + 1;
            }
            // The swap of positions j and p_pos (a no-op for a zero pivot: then p_pos == j).
            pos = if lane == p_lane {
                j32
            } else if pos == j32 {
                p_pos
            } else {
                pos
            };
            let below = lane < m && pos > j32;
            if nonzero && below {
                row[j] = if pv.modulus_at_least(<T::Real as Real>::SAFE_MIN) {
                    row[j] * T::ONE.quotient(pv)
                } else {
                    row[j].quotient(pv)
                };
            }
            let l = row[j];
            unrolled!(k in 0..W, {
                if k > j && (k as u32) < n {
                    let u = shfl(row[k], lead + p_lane, ex);
                    // xGER skips a zero entry of the pivot row (keeps -0 and avoids 0·inf).
                    if below && u != T::ZERO {
                        row[k] = row[k] - l * u;
                    }
                }
            });
        }
    });

    // Each row goes to the position it ended in.
    if live {
        let out = shared.add((g * n * ld + pos) as usize);
        unrolled!(k in 0..W, {
            if (k as u32) < n {
                *out.add(k * ld as usize) = row[k];
            }
        });
    }
    if g < count {
        let b = first + g as u64;
        if lane < kmin {
            *ipiv.add((b * kmin as u64 + lane as u64) as usize) = pivot as i32;
        }
        if lane == 0 {
            *info.add(b as usize) = first_zero as i32;
        }
    }
    sync_threads();
    stage::<T, false>(a.add(offset), shared, count, staging);
}

/// Cholesky of the `n×n` matrices (`n ≤ W`), `W` lanes per matrix, lane `i` holding row `i`
/// of `L` (for `lower == 0`, column `i` of `U = Lᴴ`, conjugated).
///
/// # Safety
/// `a` holds `batch·n·n` elements, `info` `batch`; the launch is [`potrf_launch`]'s.
#[inline(always)]
pub unsafe fn potrf_rows<T: Scalar, const W: usize>(args: PotrfArgs<T>) {
    let PotrfArgs {
        a,
        info,
        n,
        batch,
        lower,
    } = args;
    let Some(LaneGroup {
        groups,
        g,
        lane,
        lead,
        first,
        count,
    }) = lane_group::<W>(batch)
    else {
        return; // the whole block: no barrier is left waiting
    };
    let (nn, ld, lower) = (n * n, n + 1, lower != 0);
    let shared = dynamic_shared::<T>();
    let ex = shared
        .cast::<u8>()
        .add(staged_bytes(groups, n, n, core::mem::size_of::<T>()));
    let global = a.add((first * nn as u64) as usize);
    stage::<T, true>(global, shared, count, Staging::column_major(n, n));
    sync_threads();

    // L(lane, k) is at (lane, k) for lower, conj of (k, lane) for upper (the diagonal as is,
    // so that its imaginary part and zero signs round-trip untouched).
    let base = shared.add((g * n * ld) as usize);
    let at = |k: usize| -> *mut T {
        if lower {
            base.add(k * ld as usize + lane as usize)
        } else {
            base.add(lane as usize * ld as usize + k)
        }
    };
    let live = g < count && lane < n;
    let mut row = [T::ZERO; W];
    unrolled!(k in 0..W, {
        if live && (k as u32) <= lane {
            let v = *at(k);
            row[k] = if lower || k as u32 == lane { v } else { v.conj() };
        }
    });

    let failed_at = potf2_lanes(&mut row, lane, lead, n, ex);

    // Only the factor's triangle is written; the other one stays as loaded.
    if live {
        unrolled!(k in 0..W, {
            if (k as u32) <= lane {
                let x = row[k];
                *at(k) = if lower || k as u32 == lane { x } else { x.conj() };
            }
        });
    }
    if g < count && lane == 0 {
        *info.add((first + g as u64) as usize) = failed_at as i32;
    }
    sync_threads();
    stage::<T, false>(global, shared, count, Staging::column_major(n, n));
}

/// `xPOTF2`'s loop over the group's `n×n` matrix, lane `i` holding row `i` of `L` (on and
/// below the diagonal) in `row`; returns `info` (0, or the first non-positive or NaN pivot's
/// 1-based column), the same in every lane.
// Inlined on the GPU (the row must stay in registers); a call of its own on the host, which
// compiles the unrolled body once for the kernels sharing it.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(never))]
unsafe fn potf2_lanes<T: Scalar, const W: usize>(
    row: &mut [T; W],
    lane: u32,
    lead: u32,
    n: u32,
    ex: *mut u8,
) -> u32 {
    let mut failed_at = 0u32;
    unrolled!(j in 0..W, {
        let j32 = j as u32;
        if j32 < n {
            let d = shfl(row[j], lead + j32, ex).re();
            // Uniform over the group, so no shuffle below sits in a divergent branch.
            let ok = failed_at == 0 && d > <T::Real as Real>::ZERO;
            if failed_at == 0 && !ok {
                failed_at = j32 + 1;
                if lane == j32 {
                    row[j] = T::from_real(d); // xPOTF2 leaves the failed pivot in place
                }
            }
            let s = d.sqrt();
            let r = <T::Real as Real>::ONE / s;
            if ok {
                if lane == j32 {
                    row[j] = T::from_real(s);
                } else if lane > j32 {
                    row[j] = row[j].scale(r);
                }
            }
            let l = row[j];
            unrolled!(k in 0..W, {
                if k > j && (k as u32) < n {
                    let lk = shfl(row[j], lead + k as u32, ex);
                    if ok && lane >= k as u32 && lane < n {
                        row[k] = row[k] - l * lk.conj();
                    }
                }
            });
        }
    });
    failed_at
}

/// jax's whole `cholesky` of the row-major `n×n` matrices `a` (`n ≤ W`), `W` lanes per
/// matrix, lane `i` holding row `i`: the lower factor of `(A + Aᴴ)/2` (`symmetrize != 0`) or
/// of A's lower triangle, written row-major to `l` with zeros above the diagonal, or NaN on and
/// below it where the factorization fails. One pass over memory where jax's steps take
/// five (symmetrize, two transposes, the NaN select, `tril`); the factor equals
/// [`potrf_rows`]' on the symmetrized matrix bit for bit.
///
/// # Safety
/// `a` and `l` hold `batch·n·n` elements each; the launch is [`cholesky_launch`]'s.
#[inline(always)]
pub unsafe fn cholesky_rows<T: Scalar, const W: usize>(args: CholeskyArgs<T>) {
    let CholeskyArgs {
        a,
        l,
        n,
        batch,
        symmetrize,
    } = args;
    let Some(LaneGroup {
        groups,
        g,
        lane,
        lead,
        first,
        count,
    }) = lane_group::<W>(batch)
    else {
        return; // the whole block: no barrier is left waiting
    };
    let (nn, ld) = (n * n, n + 1);
    let shared = dynamic_shared::<T>();
    let ex = shared
        .cast::<u8>()
        .add(staged_bytes(groups, n, n, core::mem::size_of::<T>()));
    let staging = Staging {
        row_major: true,
        ..Staging::column_major(n, n)
    };
    let offset = (first * nn as u64) as usize;
    stage::<T, true>(a.add(offset) as *mut T, shared, count, staging);
    sync_threads();

    let base = shared.add((g * n * ld) as usize);
    let at = |i: u32, k: u32| base.add((k * ld + i) as usize);
    let live = g < count && lane < n;
    let half = <T::Real as Real>::ONE / (<T::Real as Real>::ONE + <T::Real as Real>::ONE);
    let mut row = [T::ZERO; W];
    unrolled!(k in 0..W, {
        let k32 = k as u32;
        if live && k32 <= lane {
            let x = *at(lane, k32);
            // jax's symmetrize, (x + xᴴ) / 2 (halving is exact: the same as its division).
            row[k] = if symmetrize != 0 { (x + (*at(k32, lane)).conj()).scale(half) } else { x };
        }
    });

    let failed_at = potf2_lanes(&mut row, lane, lead, n, ex);

    if live {
        let nan = T::from_real(<T::Real as Real>::NAN);
        unrolled!(k in 0..W, {
            if (k as u32) <= lane {
                *at(lane, k as u32) = if failed_at == 0 { row[k] } else { nan };
            }
        });
    }
    sync_threads();
    let out = Staging {
        keep: Keep::Lower,
        ..staging
    };
    stage::<T, false>(l.add(offset), shared, count, out);
}

/// Threads of the block kernels: a power of two, at least 64 and at least `max(m, n)`.
pub const fn block_threads(m: u32, n: u32) -> u32 {
    let order = if m > n { m } else { n };
    if order <= 64 {
        64
    } else {
        order.next_power_of_two()
    }
}

/// Shared layout of the block kernels: the padded matrix, then per-thread keys and tags.
fn block_layout(m: u32, n: u32, size: usize, real: usize, threads: u32) -> (usize, usize, usize) {
    let keys = staged_bytes(1, m, n, size);
    let tags = keys + (threads as usize * real).div_ceil(16) * 16;
    (keys, tags, tags + threads as usize * 4)
}

/// LU of one `m×n` matrix per block (`max(m, n) ≤ block_dim`), the matrix in shared memory;
/// arrays and layouts as [`getrf_rows`].
///
/// # Safety
/// As [`getrf_rows`], with [`getrf_launch`]'s block launch (`block_dim` a power of two ≥ 32
/// and ≥ `m`).
#[inline(always)]
pub unsafe fn getrf_block<T: Scalar>(args: GetrfArgs<T>) {
    let GetrfArgs {
        src,
        a,
        ipiv,
        info,
        m,
        n,
        batch,
        row_major,
    } = args;
    let (t, nb) = (thread_idx_x(), block_dim_x());
    let (mn, ld, kmin) = (m * n, m as usize + 1, m.min(n));
    let shared = dynamic_shared::<T>();
    let (keys_at, tags_at, _) = block_layout(
        m,
        n,
        core::mem::size_of::<T>(),
        core::mem::size_of::<T::Real>(),
        nb,
    );
    let keys = shared.cast::<u8>().add(keys_at).cast::<T::Real>();
    let tags = shared.cast::<u8>().add(tags_at).cast::<u32>();
    let at = |i: u32, k: u32| shared.add(k as usize * ld + i as usize);
    // The update's thread layout: 32 consecutive rows per warp (conflict-free), warps over columns.
    let (ti, tk, col_step) = (t % 32, t / 32, nb / 32);
    let staging = Staging {
        row_major: row_major != 0,
        ..Staging::column_major(m, n)
    };

    let mut b = block_idx_x() as u64;
    while b < batch {
        let offset = (b * mn as u64) as usize;
        stage::<T, true>(src.add(offset) as *mut T, shared, 1, staging);
        sync_threads();
        let mut first_zero = 0u32;
        for j in 0..kmin {
            let key = if t >= j && t < m {
                pivot_key((*at(t, j)).abs1(), t == j)
            } else {
                <T::Real as Real>::NEG_INFINITY
            };
            *keys.add(t as usize) = key;
            *tags.add(t as usize) = t;
            sync_threads();
            let mut half = nb / 2;
            while half > 0 {
                if t < half {
                    let (k0, k1) = (*keys.add(t as usize), *keys.add((t + half) as usize));
                    let (t0, t1) = (*tags.add(t as usize), *tags.add((t + half) as usize));
                    if k1 > k0 || (k1 == k0 && t1 < t0) {
                        *keys.add(t as usize) = k1;
                        *tags.add(t as usize) = t1;
                    }
                }
                sync_threads();
                half /= 2;
            }
            let p = *tags;
            let pv = *at(p, j);
            let nonzero = pv != T::ZERO;
            if !nonzero && first_zero == 0 {
                first_zero = j + 1;
            }
            if t == 0 {
                *ipiv.add((b * kmin as u64 + j as u64) as usize) = p as i32 + 1;
            }
            sync_threads(); // everyone has read p and the pivot before rows move
            if nonzero && p != j {
                let mut k = t;
                while k < n {
                    // Not ptr::swap: for 16-byte elements that goes through a stack slot.
                    let (x, y) = (*at(j, k), *at(p, k));
                    *at(j, k) = y;
                    *at(p, k) = x;
                    k += nb;
                }
            }
            sync_threads();
            let i = j + 1 + t;
            if nonzero && i < m {
                let x = at(i, j);
                *x = if pv.modulus_at_least(<T::Real as Real>::SAFE_MIN) {
                    *x * T::ONE.quotient(pv)
                } else {
                    (*x).quotient(pv)
                };
            }
            sync_threads();
            let mut k = j + 1 + tk;
            while k < n {
                let u = *at(j, k);
                if u != T::ZERO {
                    let mut i = j + 1 + ti;
                    while i < m {
                        *at(i, k) = *at(i, k) - *at(i, j) * u;
                        i += 32;
                    }
                }
                k += col_step;
            }
            sync_threads();
        }
        if t == 0 {
            *info.add(b as usize) = first_zero as i32;
        }
        stage::<T, false>(a.add(offset), shared, 1, staging);
        sync_threads(); // before the next matrix overwrites shared memory
        b += grid_dim_x() as u64;
    }
}

/// `xPOTF2` of the block's `n×n` matrix in shared memory (column-major, leading dimension
/// `n + 1`; its lower triangle, or its upper when `!lower`), right-looking: the diagonal by
/// thread 0, the column scaled a row per thread, the trailing update in 32-row strips.
/// Returns `info`: 0, or `j + 1` for the first diagonal `j` not positive (or NaN), left as it
/// was (the rest of the matrix as the failing step found it).
#[inline(always)]
unsafe fn potf2_block<T: Scalar>(shared: *mut T, n: u32, lower: bool) -> u32 {
    let (t, nb) = (thread_idx_x(), block_dim_x());
    let ld = n as usize + 1;
    // Element (i, k) of L: (i, k) itself, or conj of (k, i) for upper off the diagonal.
    let at = |i: u32, k: u32| {
        if lower {
            shared.add(k as usize * ld + i as usize)
        } else {
            shared.add(i as usize * ld + k as usize)
        }
    };
    let get = |i: u32, k: u32| {
        let v = *at(i, k);
        if lower || i == k {
            v
        } else {
            v.conj()
        }
    };
    let set = |i: u32, k: u32, v: T| *at(i, k) = if lower || i == k { v } else { v.conj() };
    let (ti, tk, col_step) = (t % 32, t / 32, nb / 32);
    for j in 0..n {
        let d = (*at(j, j)).re();
        sync_threads(); // everyone has read d before it is overwritten
        let positive = d > <T::Real as Real>::ZERO; // false for NaN too
        if !positive {
            // Uniform: every thread read the same d.
            if t == 0 {
                *at(j, j) = T::from_real(d);
            }
            return j + 1;
        }
        let s = d.sqrt();
        let r = <T::Real as Real>::ONE / s;
        if t == 0 {
            *at(j, j) = T::from_real(s);
        }
        let i = j + 1 + t;
        if i < n {
            set(i, j, get(i, j).scale(r));
        }
        sync_threads();
        let mut k = j + 1 + tk;
        while k < n {
            let lk = get(k, j).conj();
            let mut i = k + ti;
            while i < n {
                set(i, k, get(i, k) - get(i, j) * lk);
                i += 32;
            }
            k += col_step;
        }
        sync_threads();
    }
    0
}

/// Cholesky of one `n×n` matrix per block (`n ≤ block_dim`), the matrix in shared memory
/// ([`potf2_block`]).
///
/// # Safety
/// As [`potrf_rows`], with [`potrf_launch`]'s block launch.
#[inline(always)]
pub unsafe fn potrf_block<T: Scalar>(args: PotrfArgs<T>) {
    let PotrfArgs {
        a,
        info,
        n,
        batch,
        lower,
    } = args;
    let nn = n * n;
    let shared = dynamic_shared::<T>();
    let mut b = block_idx_x() as u64;
    while b < batch {
        let global = a.add((b * nn as u64) as usize);
        stage::<T, true>(global, shared, 1, Staging::column_major(n, n));
        sync_threads();
        let failed_at = potf2_block(shared, n, lower != 0);
        if thread_idx_x() == 0 {
            *info.add(b as usize) = failed_at as i32;
        }
        sync_threads();
        stage::<T, false>(global, shared, 1, Staging::column_major(n, n));
        sync_threads();
        b += grid_dim_x() as u64;
    }
}

/// `f(element, i, k)` for each element `(i, k)` on and below the diagonal of the block's
/// padded `n×n` matrix in shared memory, spread over the block's threads.
#[inline(always)]
unsafe fn each_lower<T>(shared: *mut T, n: u32, mut f: impl FnMut(*mut T, u32, u32)) {
    let (mut e, nb) = (thread_idx_x(), block_dim_x());
    while e < n * n {
        let (i, k) = (e % n, e / n);
        if i >= k {
            f(shared.add((k * (n + 1) + i) as usize), i, k);
        }
        e += nb;
    }
}

/// [`cholesky_rows`] with one block per matrix (`n ≤` [`FUSED_CHOLESKY_BLOCK_MAX`]): the
/// row-major matrix staged in, symmetrized in place (each element on and below the diagonal
/// from itself and its mirror above, which nothing writes), [`potf2_block`], NaN on and below
/// the diagonal if it failed, staged out with zeros above the diagonal.
///
/// # Safety
/// As [`cholesky_rows`], with [`cholesky_launch`]'s block launch.
#[inline(always)]
pub unsafe fn cholesky_block<T: Scalar>(args: CholeskyArgs<T>) {
    let CholeskyArgs {
        a,
        l,
        n,
        batch,
        symmetrize,
    } = args;
    let (nn, ld) = (n * n, n + 1);
    let shared = dynamic_shared::<T>();
    let input = Staging {
        row_major: true,
        ..Staging::column_major(n, n)
    };
    let out = Staging {
        keep: Keep::Lower,
        ..input
    };
    let half = <T::Real as Real>::ONE / (<T::Real as Real>::ONE + <T::Real as Real>::ONE);
    let mut b = block_idx_x() as u64;
    while b < batch {
        let offset = (b * nn as u64) as usize;
        stage::<T, true>(a.add(offset) as *mut T, shared, 1, input);
        sync_threads();
        if symmetrize != 0 {
            // jax's (x + xᴴ) / 2, as the warp kernels compute it.
            each_lower(shared, n, |x, i, k| {
                *x = (*x + (*shared.add((i * ld + k) as usize)).conj()).scale(half)
            });
            sync_threads();
        }
        let failed = potf2_block(shared, n, true) != 0;
        sync_threads(); // the failing diagonal's write (thread 0) lands before the NaNs
        if failed {
            let nan = T::from_real(<T::Real as Real>::NAN);
            each_lower(shared, n, |x, _, _| *x = nan);
        }
        sync_threads();
        stage::<T, false>(l.add(offset), shared, 1, out);
        sync_threads(); // before the next matrix overwrites shared memory
        b += grid_dim_x() as u64;
    }
}

/// Which kernel shape serves a matrix of at most `size` rows and columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// [`getrf_rows`] / [`potrf_rows`] with `W` lanes per matrix.
    Rows(u32),
    /// [`getrf_block`] / [`potrf_block`].
    Block,
}

impl Variant {
    pub const fn for_size(size: u32) -> Option<Variant> {
        Some(match size {
            0..=4 => Variant::Rows(4),
            5..=8 => Variant::Rows(8),
            9..=16 => Variant::Rows(16),
            17..=32 => Variant::Rows(32),
            33..=128 => Variant::Block,
            _ => return None,
        })
    }
}

/// Dynamic shared memory a launch may use without the opt-in attribute.
pub const MAX_SHARED_BYTES: usize = 48 << 10;

/// `(variant, grid, block, shared bytes)` for `(m, n, batch)` with `threads` per block (`None`:
/// the default; tests use small blocks). The warp kernels keep to [`MAX_SHARED_BYTES`]; the
/// block kernels (one matrix per block, up to 128×128) to `max_shared`, the device's opt-in
/// limit per block. The host emulation needs [`HOST_EXCHANGE_BYTES_PER_THREAD`] more shared
/// bytes per thread.
pub fn plan(
    kind: ScalarKind,
    m: u32,
    n: u32,
    batch: u64,
    threads: Option<u32>,
    max_shared: usize,
) -> Option<(Variant, u32, u32, usize)> {
    let variant = Variant::for_size(m.max(n))?;
    let size = kind.bytes();
    let real = match kind {
        ScalarKind::F32 | ScalarKind::C64 => 4,
        _ => 8,
    };
    let (threads, matrices_per_block, shared, limit) = match variant {
        Variant::Rows(w) => {
            // 128 threads, fewer while the staged matrices exceed the default shared memory
            // limit (c128 at 32×32: 64 threads, two matrices).
            let mut threads = threads.unwrap_or(128);
            while threads > 32 && staged_bytes(threads / w, m, n, size) > MAX_SHARED_BYTES {
                threads /= 2;
            }
            let shared = staged_bytes(threads / w, m, n, size);
            (threads, threads / w, shared, MAX_SHARED_BYTES)
        }
        Variant::Block => {
            let threads = threads.unwrap_or(block_threads(m, n));
            (
                threads,
                1,
                block_layout(m, n, size, real, threads).2,
                max_shared,
            )
        }
    };
    if shared > limit {
        return None;
    }
    let blocks = batch.div_ceil(matrices_per_block as u64);
    // The block kernels loop over the batch, so their grid can be capped.
    let grid = match variant {
        Variant::Rows(_) => u32::try_from(blocks)
            .ok()
            .filter(|&g| g <= i32::MAX as u32)?,
        Variant::Block => blocks.min(1 << 20) as u32,
    };
    Some((variant, grid, threads, shared))
}

kernel_entries! {
    /// The LU entries, `ferrax_getrf_small_<dtype>_<w4|w8|w16|w32|block>`.
    pub const GETRF: Kernels<(ScalarKind, Variant), GetrfArgs<_>>;
    names [getrf small] dtype variant;
    variants = small(getrf_rows, getrf_block);
    f32: w4 w8 w16 w32 block;
    f64: w4 w8 w16 w32 block;
    c64: w4 w8 w16 w32 block;
    c128: w4 w8 w16 w32 block;
}

kernel_entries! {
    /// The Cholesky entries, `ferrax_potrf_small_<dtype>_<w4|w8|w16|w32|block>`.
    pub const POTRF: Kernels<(ScalarKind, Variant), PotrfArgs<_>>;
    names [potrf small] dtype variant;
    variants = small(potrf_rows, potrf_block);
    f32: w4 w8 w16 w32 block;
    f64: w4 w8 w16 w32 block;
    c64: w4 w8 w16 w32 block;
    c128: w4 w8 w16 w32 block;
}

kernel_entries! {
    /// jax's whole `cholesky`, `ferrax_cholesky_small_<dtype>_<w4|w8|w16|w32|block>`.
    pub const CHOLESKY: Kernels<(ScalarKind, Variant), CholeskyArgs<_>>;
    names [cholesky small] dtype variant;
    variants = small(cholesky_rows, cholesky_block);
    f32: w4 w8 w16 w32 block;
    f64: w4 w8 w16 w32 block;
    c64: w4 w8 w16 w32 block;
    c128: w4 w8 w16 w32 block;
}

/// The launch of `table`'s entry for `kind` and `plan` (a [`plan`] result: variant, grid,
/// block, shared bytes), if the table has one.
pub(crate) fn launch<A>(
    table: &crate::launch::Kernels<(ScalarKind, Variant), A>,
    kind: ScalarKind,
    (variant, grid, block, shared): (Variant, u32, u32, usize),
) -> Option<LaunchConfig<A>> {
    table.launch((kind, variant), grid, block, shared as u32)
}

/// The launch of `ferrax_getrf_small_<dtype>_<variant>` ([`GetrfArgs`]), or `None` when
/// `max(m, n) > 128` or the matrix does not fit in `max_shared` bytes of shared memory (the
/// device's opt-in limit per block; c128 128×128 never does): use cuSOLVER. `grid == 0`
/// (batch 0) means there is nothing to launch.
pub fn getrf_launch(
    kind: ScalarKind,
    m: u32,
    n: u32,
    batch: u64,
    max_shared: usize,
) -> Option<LaunchConfig<GetrfArgs<AnyElement>>> {
    launch(&GETRF, kind, plan(kind, m, n, batch, None, max_shared)?)
}

/// The launch of `ferrax_potrf_small_<dtype>_<variant>` ([`PotrfArgs`]), or `None` as for
/// [`getrf_launch`].
pub fn potrf_launch(
    kind: ScalarKind,
    n: u32,
    batch: u64,
    max_shared: usize,
) -> Option<LaunchConfig<PotrfArgs<AnyElement>>> {
    launch(&POTRF, kind, plan(kind, n, n, batch, None, max_shared)?)
}

/// The largest order of the fused Cholesky block kernel: its block layout fits every device's
/// default 48 KiB of shared memory in every dtype (complex128: 38 KiB), so whether the kernel
/// takes a shape depends on the order alone (`ferrax.install()` routes by it).
pub const FUSED_CHOLESKY_BLOCK_MAX: u32 = 48;

/// The launch of `ferrax_cholesky_small_<dtype>_<w4|w8|w16|w32|block>` ([`CholeskyArgs`];
/// row-major, jax's whole `cholesky`): the warp kernels up to 32, the block kernel up to
/// [`FUSED_CHOLESKY_BLOCK_MAX`]; `None` past it (jax's steps and [`potrf_launch`]'s kernels
/// serve those).
pub fn cholesky_launch(
    kind: ScalarKind,
    n: u32,
    batch: u64,
) -> Option<LaunchConfig<CholeskyArgs<AnyElement>>> {
    if n > FUSED_CHOLESKY_BLOCK_MAX {
        return None;
    }
    launch(
        &CHOLESKY,
        kind,
        plan(kind, n, n, batch, None, MAX_SHARED_BYTES)?,
    )
}

pub mod eigh;
pub mod jacobi;
pub mod qr;
mod sequential;
pub mod simd;
pub use sequential::{getf2, potf2, trsm, Transpose};

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests;
