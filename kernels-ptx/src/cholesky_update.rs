//! Rank-1 Cholesky update, replacing jaxlib's `cu_cholesky_update_ffi`: in place, `R` (upper
//! triangular, row-major, real non-negative diagonal) becomes `R'` with
//! `R'^H R' = R^H R + w w^H`, for a batch of matrices and all four scalar types.
//!
//! jaxlib applies one Givens rotation per row, each needing the previous one (`2n` grid-wide
//! syncs). This kernel uses the closed form of that same rotation sequence, so that the only
//! sequential chain is a triangular solve, which blocks well. With `p = R^{-H} w`,
//! `t_0 = 1`, `t_{k+1}^2 = t_k^2 + |p_k|^2` and the partial residuals
//! `s_j^{(k)} = w_j - sum_{i<k} conj(R_ij) p_i` (so `p_k = s_k^{(k)} / R_kk`), rotation `k`
//! (which zeroes `w_k`) maps row `k` to
//!
//! ```text
//! R'_kj = α_k R_kj + β_k conj(s_j^{(k)}),   α_k = t_k / t_{k+1},   β_k = p_k / (t_k t_{k+1}),
//! R'_kk = R_kk t_{k+1} / t_k,
//! ```
//!
//! because the Givens rotation's `w` after `k` steps is `w^{(k)} = s^{(k)} / t_k` (induction
//! on `k`). For a real `R_kk < 0` the row is also multiplied by `-1`, as jaxlib's `c = r / R_kk`
//! does, so the new diagonal is non-negative. Only the real part of the diagonal is read.
//!
//! For `n <= 32`, `grouped` gives each matrix `G` lanes (`G` = 4, 8, 16 or 32, a lane per
//! column, `32 / G` matrices per warp) holding their columns in registers: one round of loads,
//! `n` dependent shuffle steps for `p`, each lane's own row coefficients, then `n`
//! independent steps applying them.
//!
//! Larger orders are split in panels of 32 columns, one warp per panel, a lane per column.
//! Panel `q` walks its row blocks `0..q` applying published `(p, α, β)`, then solves its
//! diagonal block (one lane per row, results broadcast by shuffles), publishes that block's
//! coefficients and applies them. `small` runs all panels of a matrix in one warp (coefficients in shared
//! memory, batched small matrices); `large` hands panels to warps in ticket order from a
//! global counter, so a warp only ever waits on panels that running warps own (no
//! co-residency assumption), with coefficients and flags in the scratch buffer.
//!
//! Measured on an H200 (kernel only), before `grouped` and `large`'s hoisted coefficient loads
//! and deferred stores (not measured yet): batched `small` reaches 40-79% of the 4.13 TB/s copy
//! bandwidth (f64 n=128 x 16384: 0.78 ms, 68%); `large` at n=4096 f64 takes 1.2 ms (jaxlib:
//! 20.7 ms), bound by ~9 us per 32-row hop of the panel chain, not by bandwidth.

use crate::grid;
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig, ScalarKind};
use crate::scalar::{Real, Scalar, WarpExchange};

/// Columns per panel: one per lane of a warp.
pub const WARP: usize = 32;
/// Default dynamic shared memory limit without an opt-in attribute.
const SHARED_LIMIT: usize = 48 << 10;

/// Warp-level primitives: shuffles and `bar.warp.sync` on the GPU; on the host the grid
/// emulator's warp exchange and warp barrier.
mod warp {
    #[cfg(target_arch = "nvptx64")]
    mod imp {
        use crate::scalar::WarpExchange;
        use core::arch::asm;

        #[inline(always)]
        pub fn lane() -> u32 {
            crate::grid::thread_idx_x() & 31
        }
        /// Memory ordering among the warp's lanes (no `nomem`: also a compiler barrier).
        #[inline(always)]
        pub fn sync() {
            // SAFETY: every lane of the warp calls this in uniform control flow.
            unsafe { asm!("bar.warp.sync -1;", options(nostack)) }
        }
        #[inline(always)]
        fn shfl(v: u32, src: u32) -> u32 {
            let out: u32;
            // SAFETY: full-warp shuffle; callers keep it in uniform control flow. Not `pure`,
            // so LLVM neither sinks it into a branch nor drops it.
            unsafe {
                asm!("shfl.sync.idx.b32 {o}, {v}, {s}, 31, -1;", o = out(reg32) out,
                    v = in(reg32) v, s = in(reg32) src, options(nostack));
            }
            out
        }
        #[inline(always)]
        pub unsafe fn broadcast<T: WarpExchange>(v: T, src: u32) -> T {
            v.map_words(|x| shfl(x, src))
        }
        /// Makes this lane's earlier writes visible GPU-wide before a later flag store.
        #[inline(always)]
        pub fn fence() {
            // SAFETY: a memory fence.
            unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) }
        }
        #[inline(always)]
        pub unsafe fn load_acquire(p: *const u32) -> u32 {
            let v: u32;
            asm!("ld.acquire.gpu.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p,
                options(nostack));
            v
        }
        #[inline(always)]
        pub unsafe fn store_release(p: *mut u32, v: u32) {
            asm!("st.release.gpu.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v,
                options(nostack));
        }
        #[inline(always)]
        pub fn spin_pause() {}
        /// Starts pulling the line holding `p` into L2 (no register is tied up).
        #[inline(always)]
        pub unsafe fn prefetch<T>(p: *const T) {
            asm!("prefetch.L2 [{p}];", p = in(reg64) p, options(nostack, readonly));
        }
        /// `x`, hidden from LLVM (and not `pure`, so never hoisted out of a loop): a loop bounded
        /// by it is not unrolled, and addresses derived from it are recomputed per chunk.
        /// Otherwise every chunk's loads and row offsets are hoisted and registers run out.
        #[inline(always)]
        pub fn opaque(x: usize) -> usize {
            let y: usize;
            // SAFETY: a register move.
            unsafe {
                asm!("mov.b64 {y}, {x};", y = out(reg64) y, x = in(reg64) x,
                    options(nostack));
            }
            y
        }
    }

    #[cfg(not(target_arch = "nvptx64"))]
    mod imp {
        use crate::grid;
        use crate::scalar::WarpExchange;
        use core::sync::atomic::{fence as atomic_fence, AtomicU32, Ordering};

        pub fn lane() -> u32 {
            grid::thread_idx_x() & 31
        }
        pub fn sync() {
            grid::sync_warp()
        }
        /// The warp's exchange through the grid emulator's per-warp slots, a 32-bit word at a
        /// time as the GPU shuffles, so that blocks of several warps run on the host too.
        pub unsafe fn broadcast<T: WarpExchange>(v: T, src: u32) -> T {
            v.map_words(|x| grid::shfl(x, src))
        }
        pub fn fence() {
            atomic_fence(Ordering::SeqCst)
        }
        pub unsafe fn load_acquire(p: *const u32) -> u32 {
            AtomicU32::from_ptr(p.cast_mut()).load(Ordering::Acquire)
        }
        pub unsafe fn store_release(p: *mut u32, v: u32) {
            AtomicU32::from_ptr(p).store(v, Ordering::Release)
        }
        pub fn spin_pause() {
            extern crate std;
            std::thread::yield_now();
        }
        pub fn opaque(x: usize) -> usize {
            x
        }
        pub unsafe fn prefetch<T>(_p: *const T) {}
    }

    pub use imp::*;
}

/// Expands `$body` once per listed constant bound to `$m`, so per-row registers (`x[m]`) are
/// indexed statically and never go to local memory.
macro_rules! unroll {
    ($m:ident in [$($i:literal)*] => $body:block) => {
        $({
            let $m: usize = $i;
            $body
        })*
    };
}

/// Rows per chunk: a panel's 32-row block is streamed 8 rows at a time, the next chunk's
/// loads in flight while the current one is applied (32 rows at once need too many registers).
const CHUNK: usize = 8;

/// Rows `8c..8c+8` of the block column at `base` (row stride `n`); rows past `last`, or all
/// when `!active`, read as zero.
#[inline(always)]
unsafe fn load_chunk<T: Scalar>(
    base: *const T,
    n: usize,
    c: usize,
    last: usize,
    active: bool,
) -> [T; CHUNK] {
    let mut x = [T::ZERO; CHUNK];
    let n = warp::opaque(n);
    unroll!(m in [0 1 2 3 4 5 6 7] => {
        let row = c * CHUNK + m;
        if active && row <= last {
            x[m] = *base.add(row * n);
        }
    });
    x
}

/// Applies the published rotations of rows `8c..8c+8` (those below `end`) to the chunk `x` of
/// this lane's column: each entry is rotated with the residual `s`, which then drops the row.
#[allow(clippy::too_many_arguments)] // all scalars of one inlined step
#[inline(always)]
unsafe fn apply_chunk<T: Scalar>(
    hoist: bool,
    x: &[T; CHUNK],
    base: *mut T,
    n: usize,
    c: usize,
    end: usize,
    coef: *const T,
    s: &mut T,
) {
    let n = warp::opaque(n);
    // α is real: read only its real part (the first field of a complex).
    let load = |row: usize| {
        let at = coef.add(3 * row);
        (*at, *at.add(1).cast::<T::Real>(), *at.add(2))
    };
    if hoist {
        // Every coefficient load before the first store: LLVM keeps generic loads after
        // earlier generic stores, so interleaved, each row waits a full L2 latency.
        let mut k = [(T::ZERO, <T::Real as Real>::ZERO, T::ZERO); CHUNK];
        unroll!(m in [0 1 2 3 4 5 6 7] => {
            if c * CHUNK + m < end {
                k[m] = load(c * CHUNK + m);
            }
        });
        unroll!(m in [0 1 2 3 4 5 6 7] => {
            let row = c * CHUNK + m;
            if row < end {
                let (p, alpha, beta) = k[m];
                *base.add(row * n) = T::fused_rotate(x[m], alpha, beta, *s);
                *s = s.fused_sub_conj_mul(x[m], p);
            }
        });
    } else {
        unroll!(m in [0 1 2 3 4 5 6 7] => {
            let row = c * CHUNK + m;
            if row < end {
                let (p, alpha, beta) = load(row);
                *base.add(row * n) = T::fused_rotate(x[m], alpha, beta, *s);
                *s = s.fused_sub_conj_mul(x[m], p);
            }
        });
    }
}

/// Applies rows `0..end` of a 32-row block (coefficients at `coef`) to this lane's column,
/// streaming chunks; `first` is chunk 0, already loaded.
#[inline(always)]
unsafe fn apply_block<T: Scalar>(
    hoist: bool,
    first: [T; CHUNK],
    base: *mut T,
    n: usize,
    end: usize,
    coef: *const T,
    s: &mut T,
) {
    let mut cur = first;
    for c in 0..warp::opaque(WARP / CHUNK) {
        let next = if c + 1 < WARP / CHUNK {
            load_chunk(base, n, c + 1, end.saturating_sub(1), true)
        } else {
            cur
        };
        apply_chunk(hoist, &cur, base, n, c, end, coef, s);
        cur = next;
    }
}

/// The residual update of a full 32-row block alone (as [`apply_block`] does it, without the
/// rotations and their stores); `first` is chunk 0, already loaded.
#[inline(always)]
unsafe fn residual_block<T: Scalar>(
    first: [T; CHUNK],
    base: *const T,
    n: usize,
    coef: *const T,
    s: &mut T,
) {
    let mut cur = first;
    for c in 0..warp::opaque(WARP / CHUNK) {
        let next = if c + 1 < WARP / CHUNK {
            load_chunk(base, n, c + 1, WARP - 1, true)
        } else {
            cur
        };
        let mut p = [T::ZERO; CHUNK];
        unroll!(m in [0 1 2 3 4 5 6 7] => {
            p[m] = *coef.add(3 * (c * CHUNK + m));
        });
        unroll!(m in [0 1 2 3 4 5 6 7] => {
            *s = s.fused_sub_conj_mul(cur[m], p[m]);
        });
        cur = next;
    }
}

/// How a panel waits for earlier panels' coefficients and publishes its own.
trait Exchange {
    /// Whether to pull the next row block into L2 before waiting. Measured on an H200: it
    /// shortens `large`'s flag-to-flag hops a little (n = 4096: f64 -5%, c128 -13%) but
    /// slows the batched `small` kernel by 10-20%, whose latency other warps already hide.
    const PREFETCH: bool;
    /// Whether to load a chunk's coefficients before applying any of its rows. It shortens
    /// `large`'s panel chain (coefficients in L2: one latency per chunk, not per row); `small`
    /// reads shared memory with other warps hiding the latency, where registers matter more.
    const HOIST: bool;
    /// Whether to store the last row block's rotations only after publishing: the publishing
    /// fence waits for this lane's outstanding stores, which then are old ones only.
    const DEFER: bool;
    /// Returns once panel `block`'s coefficients are readable.
    unsafe fn wait(&self, block: usize);
    /// Makes this warp's coefficient writes for panel `q` readable (by the warp, and for
    /// `Global` by every later panel).
    unsafe fn publish(&self, q: usize);
}

/// `small`: one warp runs every panel of its matrix in order, so nothing is waited for.
struct Local;
impl Exchange for Local {
    const PREFETCH: bool = false;
    const HOIST: bool = false;
    const DEFER: bool = false;
    #[inline(always)]
    unsafe fn wait(&self, _block: usize) {}
    #[inline(always)]
    unsafe fn publish(&self, _q: usize) {
        warp::sync();
    }
}

/// `large`: a flag per panel in global memory, set with release semantics after a fence by
/// every lane, polled with acquire loads.
struct Global {
    flags: *mut u32,
}
impl Exchange for Global {
    const PREFETCH: bool = true;
    const HOIST: bool = true;
    const DEFER: bool = true;
    #[inline(always)]
    unsafe fn wait(&self, block: usize) {
        let flag = self.flags.add(block);
        while warp::load_acquire(flag) == 0 {
            warp::spin_pause();
        }
    }
    #[inline(always)]
    unsafe fn publish(&self, q: usize) {
        warp::fence();
        warp::sync();
        if warp::lane() == 0 {
            warp::store_release(self.flags.add(q), 1);
        }
    }
}

/// Length in elements of one matrix's coefficient area: `(p_k, α_k, β_k)` for each row, then
/// `t^2` after each panel.
#[inline(always)]
pub const fn coefficients_len(n: usize) -> usize {
    3 * n + n.div_ceil(WARP)
}

/// Panel `q` (columns `32q..32q+32`) of one matrix, executed by a whole warp (lane = column;
/// lanes past `n` take part in the shuffles only). `coef` is the matrix's coefficient area.
// The unrolled loops' last residual update is never read.
#[allow(unused_assignments)]
#[inline(always)]
unsafe fn panel<T: Scalar, X: Exchange>(
    r: *mut T,
    w: *const T,
    n: usize,
    q: usize,
    coef: *mut T,
    exchange: &X,
) {
    let l = warp::lane() as usize;
    let j = q * WARP + l;
    let active = j < n;
    let mut s = if active { *w.add(j) } else { T::ZERO };
    let mut deferred_s = s;

    // Row blocks above the diagonal: all 32 rows exist (32(blk+1) <= 32q < n).
    for blk in 0..q {
        let base = r.add(blk * WARP * n + j);
        // Issued before the wait, so the loads are in flight while the flag is polled.
        let first = load_chunk(base, n, 0, WARP - 1, active);
        if X::PREFETCH && active {
            // The next block (the diagonal one last) is on the critical path once its flag
            // is up: pull it into L2 now, so its chunks are not each a DRAM round trip.
            let next = (blk + 1) * WARP;
            for m in 0..WARP.min(n - next) {
                warp::prefetch(r.add((next + m) * n + j));
            }
        }
        exchange.wait(blk);
        if active {
            let coef = coef.add(3 * blk * WARP);
            if X::DEFER && blk + 1 == q {
                deferred_s = s;
                residual_block(first, base, n, coef, &mut s);
            } else {
                apply_block(X::HOIST, first, base, n, WARP, coef, &mut s);
            }
        }
    }

    // Diagonal block: lane l uses rows 0..=l of its column (row l is its diagonal).
    let k0 = q * WARP;
    let base = r.add(k0 * n + j);
    let a = if active {
        (*base.add(l * n)).re()
    } else {
        <T::Real as Real>::ONE
    };
    let s_start = s;
    let mut tsq = if q == 0 {
        <T::Real as Real>::ONE
    } else {
        (*coef.add(3 * n + q - 1)).re()
    };
    let inv_a = if active {
        <T::Real as Real>::ONE / a
    } else {
        <T::Real as Real>::ZERO
    };
    // Forward substitution: at step m lane m's residual is final and gives p_{k0+m}; every
    // lane tracks t^2 (same operations, same bits) and keeps its own row's t before/after.
    let (mut my_p, mut t0sq, mut t1sq) = (T::ZERO, tsq, tsq);
    let mut cur = load_chunk(base, n, 0, l, active);
    for c in 0..warp::opaque(WARP / CHUNK) {
        let next = if c + 1 < WARP / CHUNK {
            load_chunk(base, n, c + 1, l, active)
        } else {
            cur
        };
        unroll!(m in [0 1 2 3 4 5 6 7] => {
            let row = c * CHUNK + m;
            let p = warp::broadcast(s.scale(inv_a), row as u32);
            if l == row {
                my_p = p;
                t0sq = tsq;
            }
            tsq = tsq + p.fused_norm_sqr();
            if l == row {
                t1sq = tsq;
            }
            if row < l {
                s = s.fused_sub_conj_mul(cur[m], p);
            }
        });
        cur = next;
    }
    let mut diagonal = T::ZERO;
    if active {
        let (t0, t1) = (t0sq.sqrt(), t1sq.sqrt());
        let sign = if a < <T::Real as Real>::ZERO {
            -<T::Real as Real>::ONE
        } else {
            <T::Real as Real>::ONE
        };
        let c = coef.add(3 * j);
        *c = my_p;
        *c.add(1) = T::from_real(sign * t0 / t1);
        *c.add(2) = my_p.scale(sign / (t0 * t1));
        diagonal = T::from_real(a.abs() * t1 / t0);
    }
    if l == 0 {
        *coef.add(3 * n + q) = T::from_real(tsq);
    }
    exchange.publish(q);

    if X::DEFER && q > 0 && active {
        // Block q-1's rotations, replaying its residual (same operations, same bits).
        let (blk, mut s) = (q - 1, deferred_s);
        let base = r.add(blk * WARP * n + j);
        let first = load_chunk(base, n, 0, WARP - 1, true);
        apply_block(
            X::HOIST,
            first,
            base,
            n,
            WARP,
            coef.add(3 * blk * WARP),
            &mut s,
        );
    }
    // Apply the block's rotations to this column, replaying the residual from the block start.
    if active {
        s = s_start;
        let first = load_chunk(base, n, 0, l, true);
        apply_block(X::HOIST, first, base, n, l, coef.add(3 * k0), &mut s);
        *base.add(l * n) = diagonal;
    }
}

kernel_args! {
    /// The arguments of every rank-1 update entry (`small`, `large`, `grouped`): `R'` in place
    /// of the `batch` `n×n` matrices `r` and the vectors `w` (overwritten).
    pub struct CholeskyUpdateArgs<T> {
        pub r: *mut T,
        pub w: *mut T,
        pub n: u32,
        pub batch: u64,
        /// [`large`]'s [`large_scratch_bytes`] zeroed bytes; the other kernels take none and
        /// ignore it (null).
        pub scratch: *mut u8,
    }
}

/// Shared memory of a `small` block: each warp's coefficients
/// (16-byte aligned).
pub const fn small_shared_bytes(kind: ScalarKind, n: u32, warps_per_block: u32) -> usize {
    let per_warp = (coefficients_len(n as usize) * kind.bytes()).next_multiple_of(16);
    warps_per_block as usize * per_warp
}

/// The `large` scratch buffer (zeroed by the host) holds a u64 ticket counter, a u32 flag per
/// (matrix, panel), then each matrix's coefficients, which start at this 16-aligned offset.
const fn large_coefficients_offset(n: usize, batch: u64) -> usize {
    16 + (batch as usize * n.div_ceil(WARP) * 4).next_multiple_of(16)
}

/// Scratch bytes the `large` kernel needs (zeroed by the host before the launch).
pub const fn large_scratch_bytes(kind: ScalarKind, n: u32, batch: u64) -> usize {
    let n = n as usize;
    large_coefficients_offset(n, batch) + batch as usize * coefficients_len(n) * kind.bytes()
}

/// One warp per matrix, grid-striding over the batch; each warp's coefficients live in its
/// slice of the block's shared memory (sized by [`small_shared_bytes`]).
///
/// # Safety
/// `r` and `w` hold `batch` contiguous `n x n` matrices and `n`-vectors; the launch has
/// blocks of a multiple of 32 threads and the shared memory of [`small_shared_bytes`].
#[inline(always)]
pub unsafe fn small<T: Scalar>(args: CholeskyUpdateArgs<T>) {
    let CholeskyUpdateArgs { r, w, n, batch, .. } = args;
    let n = n as usize;
    if n == 0 {
        return;
    }
    let warps_per_block = grid::block_dim_x() as usize / WARP;
    let warp = grid::thread_idx_x() as usize / WARP;
    let shared = grid::dynamic_shared::<u8>();
    let per_warp = (coefficients_len(n) * core::mem::size_of::<T>()).next_multiple_of(16);
    let coef = shared.add(warp * per_warp).cast::<T>();
    let stride = grid::grid_dim_x() as u64 * warps_per_block as u64;
    let mut b = grid::block_idx_x() as u64 * warps_per_block as u64 + warp as u64;
    while b < batch {
        // The previous matrix's coefficient reads are done before they are overwritten.
        warp::sync();
        let (rb, wb) = (r.add(b as usize * n * n), w.add(b as usize * n));
        for q in 0..n.div_ceil(WARP) {
            panel(rb, wb, n, q, coef, &Local);
        }
        b += stride;
    }
}

/// Panels handed out in ticket order (matrix-major) to whichever warp asks next; a panel only
/// waits on lower panels of its matrix, whose tickets went to warps already running, so any
/// grid size is deadlock-free. `scratch` is [`large_scratch_bytes`] zeroed bytes.
///
/// # Safety
/// As [`small`], plus `scratch` as above and blocks of a multiple of 32 threads with at least
/// 16 bytes of shared memory.
#[inline(always)]
pub unsafe fn large<T: Scalar>(args: CholeskyUpdateArgs<T>) {
    let CholeskyUpdateArgs {
        r,
        w,
        n,
        batch,
        scratch,
    } = args;
    let n = n as usize;
    if n == 0 || batch == 0 {
        return;
    }
    let panels = n.div_ceil(WARP) as u64;
    let tickets = batch * panels;
    let coef_offset = large_coefficients_offset(n, batch);
    let counter = scratch.cast::<u64>();
    let flags = scratch.add(16).cast::<u32>();
    let coefs = scratch.add(coef_offset).cast::<T>();
    loop {
        let mut ticket = 0u64;
        if warp::lane() == 0 {
            ticket = core::sync::atomic::AtomicU64::from_ptr(counter)
                .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        }
        let ticket = warp::broadcast(ticket, 0);
        if ticket >= tickets {
            return;
        }
        let (b, q) = ((ticket / panels) as usize, (ticket % panels) as usize);
        let exchange = Global {
            flags: flags.add(b * panels as usize),
        };
        panel(
            r.add(b * n * n),
            w.add(b * n),
            n,
            q,
            coefs.add(b * coefficients_len(n)),
            &exchange,
        );
    }
}

/// `T`, moved between lanes one 32-bit word at a time.
#[inline(always)]
fn shfl<T: WarpExchange>(v: T, src: u32) -> T {
    v.map_words(|x| grid::shfl(x, src))
}

/// Group widths of [`grouped`]: the order `n` rounds up to one of these.
pub const GROUPS: [usize; 4] = [4, 8, 16, 32];

/// Matrices of order `n <= G` (`G` a power of two, at most 32): `G` lanes per matrix (lane =
/// column), `32 / G` matrices per warp, each lane's column in registers, so a matrix costs
/// one round of loads, `n` dependent shuffle steps and `n` independent ones. Warps take
/// consecutive matrices (their rows are adjacent in memory) and grid-stride over the batch.
///
/// # Safety
/// `r` and `w` hold `batch` contiguous `n x n` matrices and `n`-vectors; blocks are a multiple
/// of 32 threads.
// The unrolled loops' last residual update is never read.
#[allow(unused_assignments)]
#[inline(always)]
pub unsafe fn grouped<T: Scalar, const G: usize>(args: CholeskyUpdateArgs<T>) {
    let CholeskyUpdateArgs { r, w, n, batch, .. } = args;
    let n = n as usize;
    if n == 0 || n > G {
        return;
    }
    let lane = grid::thread_idx_x() % 32;
    let l = (lane as usize) % G;
    let lead = lane - l as u32;
    let per_block = grid::block_dim_x() as u64 / G as u64;
    let stride = grid::grid_dim_x() as u64 * per_block;
    let mut b = grid::block_idx_x() as u64 * per_block + (grid::thread_idx_x() as u64 / G as u64);
    // The warp's first matrix: the loop condition must be the same in all 32 lanes.
    let mut first = b - (lead as u64 / G as u64);
    let (one, zero) = (<T::Real as Real>::ONE, <T::Real as Real>::ZERO);
    while first < batch {
        let active = b < batch && l < n;
        // Row offsets from an opaque `n`: otherwise LLVM hoists all G of them out of the loop
        // and keeps them live (64-bit each) for the whole kernel.
        let nn = warp::opaque(n);
        let col = r.add(b as usize * n * n + l);
        let mut x = [T::ZERO; G];
        // All loads first: a matrix then costs one memory latency.
        unroll!(i in [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31] => {
            if i < G && active && i <= l {
                x[i] = *col.add(i * nn);
            }
        });
        let (a, s0) = if active {
            ((*col.add(l * nn)).re(), *w.add(b as usize * n + l))
        } else {
            (one, T::ZERO)
        };
        let inv_a = if active { one / a } else { zero };

        // Forward substitution: at step i lane i's residual is final and gives p_i; every lane
        // tracks t^2 (same operations, same bits) and keeps its own row's t before/after.
        let mut s = s0;
        let (mut my_p, mut tsq, mut t0sq, mut t1sq) = (T::ZERO, one, one, one);
        unroll!(i in [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31] => {
            if i < G && i < n {
                let p = shfl(s.scale(inv_a), lead + i as u32);
                if l == i {
                    my_p = p;
                    t0sq = tsq;
                }
                tsq = tsq + p.fused_norm_sqr();
                if l == i {
                    t1sq = tsq;
                }
                if i < l {
                    s = s.fused_sub_conj_mul(x[i], p);
                }
            }
        });

        // This lane's row: α (sign included) and β = p γ with γ = sign / (t0 t1).
        let (t0, t1) = (t0sq.sqrt(), t1sq.sqrt());
        let sign = if a < zero { -one } else { one };
        let alpha = sign * t0 / t1;
        let gamma = sign / (t0 * t1);
        let diagonal = T::from_real(a.abs() * t1 / t0);

        // Rotate the column's entries above the diagonal, replaying the residual. Addresses
        // from a fresh opaque `n`, so that the load phase's G addresses are not kept live
        // through the forward pass.
        let nn = warp::opaque(n);
        s = s0;
        unroll!(i in [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31] => {
            if i < G && i < n {
                let src = lead + i as u32;
                let (p, alpha, gamma) = (shfl(my_p, src), shfl(alpha, src), shfl(gamma, src));
                if active && i < l {
                    *col.add(i * nn) = T::fused_rotate(x[i], alpha, p.scale(gamma), s);
                    s = s.fused_sub_conj_mul(x[i], p);
                }
            }
        });
        if active {
            *col.add(l * nn) = diagonal;
        }
        b += stride;
        first += stride;
    }
}

/// The update kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// [`small`]: one warp per matrix.
    Small,
    /// [`large`]: a matrix's panels spread over warps.
    Large,
    /// [`grouped`] with `G` lanes per matrix (one of [`GROUPS`]).
    Grouped(u32),
}

kernel_entries! {
    /// `ferrax_cholesky_update_<kernel>_<dtype>`, `g<G>` for [`Kernel::Grouped`]`(G)`.
    pub const ENTRIES: Kernels<(ScalarKind, Kernel), CholeskyUpdateArgs<_>>;
    names [cholesky_update] variant dtype;
    variants {
        small => (Kernel::Small, small),
        large => (Kernel::Large, large),
        g4 => (Kernel::Grouped(4), grouped::<_, 4>),
        g8 => (Kernel::Grouped(8), grouped::<_, 8>),
        g16 => (Kernel::Grouped(16), grouped::<_, 16>),
        g32 => (Kernel::Grouped(32), grouped::<_, 32>),
    }
    f32: small large g4 g8 g16 g32;
    f64: small large g4 g8 g16 g32;
    c64: small large g4 g8 g16 g32;
    c128: small large g4 g8 g16 g32;
}

/// Threads per [`grouped`] block.
const GROUPED_BLOCK: u32 = 128;

/// The launch for `batch` updates of order `n` on a device with `multiprocessors` SMs, and
/// the scratch bytes to zero before it. `n <= 32` takes `grouped` (G lanes per matrix);
/// larger batches that fill the GPU with one warp per matrix (and fit shared memory) take
/// `small`; otherwise `large` spreads each matrix's panels over warps.
pub fn launch_config(
    kind: ScalarKind,
    n: u32,
    batch: u64,
    multiprocessors: u32,
) -> (LaunchConfig<CholeskyUpdateArgs<AnyElement>>, usize) {
    let launch = |kernel, grid: u64, block: u32, shared: usize| {
        ENTRIES
            .launch((kind, kernel), grid as u32, block, shared as u32)
            .expect("every kernel has an entry per dtype")
    };
    let sms = multiprocessors.max(1) as u64;
    if let Some(g) = GROUPS.iter().position(|&g| n as usize <= g) {
        let per_block = (GROUPED_BLOCK as usize / GROUPS[g]) as u64;
        // Enough blocks for every matrix, up to 64 warps per SM (the rest grid-stride).
        let blocks = batch
            .div_ceil(per_block)
            .clamp(1, 64 * 32 / GROUPED_BLOCK as u64 * sms);
        let config = launch(Kernel::Grouped(GROUPS[g] as u32), blocks, GROUPED_BLOCK, 0);
        return (config, 0);
    }
    let fits_small = small_shared_bytes(kind, n, 1) <= SHARED_LIMIT;
    if fits_small && (n as usize <= WARP || batch >= 8 * sms) {
        let warps_per_block = [4u32, 2, 1]
            .into_iter()
            .find(|&k| small_shared_bytes(kind, n, k) <= SHARED_LIMIT)
            .unwrap_or(1);
        let warps = batch.clamp(1, 64 * sms);
        let config = launch(
            Kernel::Small,
            warps.div_ceil(warps_per_block as u64),
            warps_per_block * WARP as u32,
            small_shared_bytes(kind, n, warps_per_block),
        );
        return (config, 0);
    }
    let tickets = batch * (n as u64).div_ceil(WARP as u64);
    let warps = tickets.clamp(1, 16 * sms);
    let config = launch(Kernel::Large, warps.div_ceil(4), 4 * WARP as u32, 0);
    (config, large_scratch_bytes(kind, n, batch))
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    extern crate std;
    use super::*;
    use num_complex::Complex;
    use std::vec::Vec;

    /// xorshift64 draws in [-1, 1), never zero in practice.
    struct Draws(u64);
    impl Draws {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        }
    }

    /// Test-side view of the element types, in c128 for the reference arithmetic.
    trait TestElem: Scalar + Send + Sync + 'static {
        const EPS: f64;
        fn make(re: f64, im: f64) -> Self;
        fn wide(self) -> Complex<f64>;
    }
    impl TestElem for f32 {
        const EPS: f64 = f32::EPSILON as f64;
        fn make(re: f64, _: f64) -> Self {
            re as f32
        }
        fn wide(self) -> Complex<f64> {
            Complex::new(self as f64, 0.0)
        }
    }
    impl TestElem for f64 {
        const EPS: f64 = f64::EPSILON;
        fn make(re: f64, _: f64) -> Self {
            re
        }
        fn wide(self) -> Complex<f64> {
            Complex::new(self, 0.0)
        }
    }
    impl TestElem for Complex<f32> {
        const EPS: f64 = f32::EPSILON as f64;
        fn make(re: f64, im: f64) -> Self {
            Complex::new(re as f32, im as f32)
        }
        fn wide(self) -> Complex<f64> {
            Complex::new(self.re as f64, self.im as f64)
        }
    }
    impl TestElem for Complex<f64> {
        const EPS: f64 = f64::EPSILON;
        fn make(re: f64, im: f64) -> Self {
            Complex::new(re, im)
        }
        fn wide(self) -> Complex<f64> {
            self
        }
    }

    /// A batch of well-conditioned upper factors (diagonal in [2, 3), off-diagonal entries
    /// O(1/n)) with random strictly lower "garbage" that must survive, and random `w`.
    fn inputs<T: TestElem>(n: usize, batch: usize, seed: u64) -> (Vec<T>, Vec<T>) {
        let mut d = Draws(seed);
        let mut r = Vec::with_capacity(batch * n * n);
        for _ in 0..batch {
            for i in 0..n {
                for j in 0..n {
                    let (re, im) = (d.next(), d.next());
                    r.push(if i == j {
                        T::make(2.5 + 0.5 * re, 0.0)
                    } else if i < j {
                        T::make(re / n as f64, im / n as f64)
                    } else {
                        T::make(re + 7.0, im - 7.0)
                    });
                }
            }
        }
        let w = (0..batch * n)
            .map(|_| T::make(d.next(), d.next()))
            .collect();
        (r, w)
    }

    /// jaxlib's sequential Givens form in c128 (`c = r / R_kk`, `s = w_k / R_kk` for real data;
    /// its complex analogue `R'_kj = (a R_kj + w_k conj(w_j)) / r`,
    /// `w'_j = (a w_j - w_k conj(R_kj)) / r` otherwise).
    fn reference(r: &mut [Complex<f64>], w: &mut [Complex<f64>], n: usize) {
        for k in 0..n {
            let a = r[k * n + k].re;
            let wk = w[k];
            let rr = (a * a + wk.norm_sqr()).sqrt();
            r[k * n + k] = Complex::new(rr, 0.0);
            for j in k + 1..n {
                let rkj = r[k * n + j];
                r[k * n + j] = (rkj * a + wk * w[j].conj()) / rr;
                w[j] = (w[j] * a - wk * rkj.conj()) / rr;
            }
        }
    }

    /// `sum_k conj(R_ki) R_kj` over the upper triangle only.
    fn gram(r: &[Complex<f64>], n: usize) -> Vec<Complex<f64>> {
        let mut g = std::vec![Complex::new(0.0, 0.0); n * n];
        for i in 0..n {
            for j in 0..n {
                for k in 0..=i.min(j) {
                    g[i * n + j] += r[k * n + i].conj() * r[k * n + j];
                }
            }
        }
        g
    }

    fn norm(z: Complex<f64>) -> f64 {
        z.norm_sqr().sqrt()
    }

    /// `kernel` on `r` and `w` through its host entry: [`Kernel::Small`] and
    /// [`Kernel::Large`] on 2 blocks of one warp, [`Kernel::Grouped`] on 2 blocks of 2 warps
    /// (the batch grid-strides).
    fn launch<T: TestElem>(
        kernel: Kernel,
        kind: ScalarKind,
        (grid, block): (u32, u32),
        r: &mut [T],
        w: &mut [T],
        n: u32,
        batch: u64,
    ) {
        let mut scratch = std::vec![0u128; large_scratch_bytes(kind, n, batch).div_ceil(16) + 1];
        let shared = match kernel {
            Kernel::Small => small_shared_bytes(kind, n, 1),
            Kernel::Large => 0,
            Kernel::Grouped(_) => 0,
        };
        let args = CholeskyUpdateArgs {
            r: r.as_mut_ptr(),
            w: w.as_mut_ptr(),
            n,
            batch,
            scratch: match kernel {
                Kernel::Large => scratch.as_mut_ptr().cast::<u8>(),
                _ => core::ptr::null_mut(),
            },
        };
        let name = ENTRIES.name((kind, kernel)).unwrap();
        unsafe { crate::launch::run_on_host(name, grid, block, shared, args) };
    }

    fn run<T: TestElem>(kernel: Kernel, n: usize, batch: usize, seed: u64) {
        let (r0, w0) = inputs::<T>(n, batch, seed);
        let (mut r, mut w) = (r0.clone(), w0.clone());
        let kind = match (T::COMPLEX, T::EPS == f64::EPSILON) {
            (false, false) => ScalarKind::F32,
            (false, true) => ScalarKind::F64,
            (true, false) => ScalarKind::C64,
            (true, true) => ScalarKind::C128,
        };
        let shape = match kernel {
            Kernel::Grouped(_) => (2, 64),
            _ => (2, 32),
        };
        launch(kernel, kind, shape, &mut r, &mut w, n as u32, batch as u64);
        let tol = 50.0 * T::EPS;
        for b in 0..batch {
            let m = b * n * n;
            let wide = |v: &[T]| v.iter().map(|x| x.wide()).collect::<Vec<_>>();
            let (before, after) = (wide(&r0[m..m + n * n]), wide(&r[m..m + n * n]));
            let wb = wide(&w0[b * n..(b + 1) * n]);
            let (mut expected, mut w_ref) = (before.clone(), wb.clone());
            reference(&mut expected, &mut w_ref, n);
            let (g0, g1) = (gram(&before, n), gram(&after, n));
            for i in 0..n {
                for j in 0..n {
                    let at = i * n + j;
                    if i > j {
                        assert_eq!(
                            after[at], before[at],
                            "lower ({i},{j}) of matrix {b} changed"
                        );
                        continue;
                    }
                    let want = g0[at] + wb[i] * wb[j].conj();
                    let scale = 1.0 + norm(want);
                    assert!(
                        norm(g1[at] - want) <= tol * scale * n as f64,
                        "identity ({i},{j}) matrix {b} n {n}: {} vs {want}",
                        g1[at]
                    );
                    assert!(
                        norm(after[at] - expected[at]) <= tol * (1.0 + norm(expected[at])),
                        "reference ({i},{j}) matrix {b} n {n}: {} vs {}",
                        after[at],
                        expected[at]
                    );
                }
                assert!(after[i * n + i].im == 0.0 && after[i * n + i].re > 0.0);
            }
        }
    }

    fn all_dtypes(kernel: Kernel, n: usize, batch: usize, seed: u64) {
        run::<f32>(kernel, n, batch, seed);
        run::<f64>(kernel, n, batch, seed + 1);
        run::<Complex<f32>>(kernel, n, batch, seed + 2);
        run::<Complex<f64>>(kernel, n, batch, seed + 3);
    }

    #[test]
    fn small_kernel_matches_reference() {
        // Within a panel, a partial last panel, exact multiples, batch above the warp count.
        for (n, batch) in [(1, 3), (5, 4), (32, 2), (45, 3), (64, 1), (70, 2)] {
            all_dtypes(Kernel::Small, n, batch, 0x9e37_79b9_7f4a_7c15 ^ n as u64);
        }
    }

    #[test]
    fn large_kernel_matches_reference() {
        for (n, batch) in [(1, 2), (7, 1), (32, 1), (33, 2), (96, 1), (100, 2)] {
            all_dtypes(Kernel::Large, n, batch, 0x2545_f491_4f6c_dd1d ^ n as u64);
        }
    }

    #[test]
    fn grouped_kernel_matches_reference() {
        // The launch grid-strides over 4 warps; batches leave groups, warps and blocks partly
        // filled, or need several rounds; n below and at each width.
        for (g, n, batches) in [
            (4, 1, &[0, 1, 37][..]),
            (4, 3, &[5, 40]),
            (4, 4, &[33]),
            (8, 5, &[3]),
            (8, 8, &[1, 19]),
            (16, 16, &[2, 9]),
            (32, 3, &[2]),
            (32, 17, &[5]),
            (32, 32, &[1, 6]),
        ] {
            for &batch in batches {
                all_dtypes(Kernel::Grouped(g), n, batch, 0x51_7cc1_b727_220a ^ n as u64);
            }
        }
    }

    #[test]
    fn grouped_kernel_handles_every_order_up_to_its_width() {
        for n in 1..=32 {
            let g = GROUPS.into_iter().find(|&g| n <= g).unwrap();
            run::<f64>(Kernel::Grouped(g as u32), n, 3, 0x1234 ^ n as u64);
        }
    }

    #[test]
    fn negative_diagonal_gives_the_positive_factor() {
        // Flipping row signs leaves R^T R unchanged; the update still returns the factor with
        // a positive diagonal (jaxlib's c = r / R_kk does the same).
        for (kernel, n) in [
            (Kernel::Small, 40),
            (Kernel::Large, 40),
            (Kernel::Grouped(32), 29),
            (Kernel::Grouped(8), 7),
        ] {
            let (mut r, mut w) = inputs::<f64>(n, 1, 77);
            let mut expected = r.clone();
            let mut w_expected = w.clone();
            for i in (0..n).step_by(3) {
                for j in i..n {
                    r[i * n + j] = -r[i * n + j];
                }
            }
            let f64 = ScalarKind::F64;
            launch(kernel, f64, (1, 32), &mut r, &mut w, n as u32, 1);
            let (e, we) = (&mut expected, &mut w_expected);
            launch(Kernel::Small, f64, (1, 32), e, we, n as u32, 1);
            for (i, (x, y)) in r.iter().zip(&expected).enumerate() {
                assert!((x - y).abs() <= 1e-13, "{i}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn empty_inputs_are_harmless() {
        let mut r = [1.0f64; 4];
        let mut w = [1.0f64; 2];
        for kernel in [
            Kernel::Small,
            Kernel::Large,
            Kernel::Grouped(4),
            Kernel::Grouped(32),
        ] {
            for (n, batch) in [(0, 3), (2, 0)] {
                launch(kernel, ScalarKind::F64, (1, 32), &mut r, &mut w, n, batch);
            }
        }
        assert_eq!((r, w), ([1.0; 4], [1.0; 2]));
    }

    #[test]
    fn plan_picks_a_kernel_that_fits() {
        let (c, scratch) = launch_config(ScalarKind::F64, 4096, 1, 132);
        assert_eq!(c.kernel, "ferrax_cholesky_update_large_f64");
        assert_eq!((c.block, c.grid), (128, 32)); // 128 panels, one warp each
        assert_eq!(scratch, large_scratch_bytes(ScalarKind::F64, 4096, 1));
        assert!(scratch >= 16 + 128 * 4 + (3 * 4096 + 128) * 8);

        let (c, scratch) = launch_config(ScalarKind::C128, 128, 65536, 132);
        assert_eq!(c.kernel, "ferrax_cholesky_update_small_c128");
        assert_eq!(scratch, 0);
        assert!(c.shared_bytes as usize <= SHARED_LIMIT && c.block % 32 == 0);
        assert_eq!(
            c.shared_bytes as usize,
            small_shared_bytes(ScalarKind::C128, 128, c.block / 32)
        );
        assert!(c.grid as u64 * (c.block as u64 / 32) <= 64 * 132);

        for kind in [
            ScalarKind::F32,
            ScalarKind::F64,
            ScalarKind::C64,
            ScalarKind::C128,
        ] {
            for (n, batch) in [(0, 0), (0, 5), (3, 0), (1, 1), (32, 1), (33, 1), (1000, 4)] {
                let (c, _) = launch_config(kind, n, batch, 132);
                assert!(
                    c.grid >= 1 && c.block >= 32 && c.block % 32 == 0,
                    "{n} {batch}"
                );
                assert!(c.shared_bytes as usize <= SHARED_LIMIT);
            }
        }
        // Small batches of mid-size matrices use the panel-parallel kernel.
        assert!(launch_config(ScalarKind::F32, 100, 4, 132)
            .0
            .kernel
            .contains("large"));
        assert!(launch_config(ScalarKind::F32, 100, 4096, 132)
            .0
            .kernel
            .contains("small"));
        // n <= 32: the narrowest group that holds n.
        for (n, name) in [
            (1, "g4"),
            (4, "g4"),
            (5, "g8"),
            (16, "g16"),
            (17, "g32"),
            (32, "g32"),
        ] {
            for batch in [0, 1, 1 << 20] {
                let (c, scratch) = launch_config(ScalarKind::C64, n, batch, 132);
                assert_eq!(c.kernel, std::format!("ferrax_cholesky_update_{name}_c64"));
                assert_eq!((scratch, c.shared_bytes, c.block), (0, 0, GROUPED_BLOCK));
                assert!(c.grid >= 1 && c.grid as u64 <= 16 * 132);
            }
        }
    }
}
