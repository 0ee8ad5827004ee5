//! LAPACK-style row swaps (`ipiv`, 0-based) to a permutation, as `lu_pivots_to_permutation`.

use crate::grid::{
    ballot, block_dim_x, block_idx_x, dynamic_shared, global_idx_x, grid_dim_x, grid_size_x,
    opaque, redux_add, sync_threads, thread_idx_x,
};
use crate::launch::{kernel_args, kernel_entries, LaunchConfig};

/// Writes into `permutation` the row order produced by applying the swaps `i <-> pivots[i]`
/// in turn to the identity. Pivots outside `0..permutation.len()` (never produced by a
/// successful factorization) leave the row in place instead of indexing out of bounds.
#[inline]
pub fn pivots_to_permutation(pivots: &[i32], permutation: &mut [i32]) {
    for (i, p) in permutation.iter_mut().enumerate() {
        *p = i as i32;
    }
    let size = permutation.len();
    for (i, &pivot) in pivots.iter().enumerate().take(size) {
        if let Ok(j) = usize::try_from(pivot) {
            if j < size {
                permutation.swap(i, j);
            }
        }
    }
}

/// An entry of the batched kernel's shared-memory rows: a byte where every row index and
/// `size` (the no-op pivot) fit in one (`size < 256`: a quarter of the shared memory a matrix takes as words, so four times
/// the matrices, and the threads working on them, an SM holds), else a word.
trait Slot: Copy {
    fn pack(v: u32) -> Self;
    fn unpack(self) -> u32;
}
impl Slot for u8 {
    #[inline(always)]
    fn pack(v: u32) -> Self {
        v as u8
    }
    #[inline(always)]
    fn unpack(self) -> u32 {
        u32::from(self)
    }
}
impl Slot for u32 {
    #[inline(always)]
    fn pack(v: u32) -> Self {
        v
    }
    #[inline(always)]
    fn unpack(self) -> u32 {
        self
    }
}

/// Whether the batched kernel keeps its rows in bytes (see [`Slot`]).
#[inline(always)]
fn byte_slots(size: u32) -> bool {
    size < 256
}

/// Shared-memory slot of entry `i` of a block of rows (`bytes`-sized entries): a pad word
/// after every 128 bytes spreads the threads' walks along their own rows (stride `k` or `size`
/// entries) over the banks.
#[inline(always)]
fn padded(i: u32, bytes: u32) -> u32 {
    let per_line = 128 / bytes;
    i + i / per_line * (4 / bytes)
}

/// Shared-memory bytes that hold `n` entries of `bytes` bytes at [`padded`] slots.
const fn padded_len(n: u64, bytes: u64) -> u64 {
    bytes * n + 4 * n.div_ceil(128 / bytes)
}

/// Reads `count` words of global memory at `src` into `put(index, word)`, the block's threads
/// striding through them: 16-byte loads, four in flight per thread, where `src` is aligned.
#[inline(always)]
unsafe fn stage_in(src: *const i32, count: u32, mut put: impl FnMut(u32, i32)) {
    let (t, threads) = (thread_idx_x(), block_dim_x());
    let mut scalar_from = 0;
    if src as usize % 16 == 0 {
        let quads = count / 4;
        let load = |q: u32| src.cast::<u128>().add(q as usize).read();
        let mut put4 = |q: u32, v: u128| {
            for j in 0..4 {
                put(4 * q + j, (v >> (32 * j)) as i32);
            }
        };
        let mut q = t;
        while q + 3 * threads < quads {
            let (a, b) = (load(q), load(q + threads));
            let (c, d) = (load(q + 2 * threads), load(q + 3 * threads));
            put4(q, a);
            put4(q + threads, b);
            put4(q + 2 * threads, c);
            put4(q + 3 * threads, d);
            q += 4 * threads;
        }
        while q < quads {
            put4(q, load(q));
            q += threads;
        }
        scalar_from = 4 * quads;
    }
    let mut i = scalar_from + t;
    while i < count {
        put(i, *src.add(i as usize));
        i += threads;
    }
}

/// Writes `get(index)` for `count` words to global memory at `dst`, the block's threads
/// striding through them, with 16-byte stores where `dst` is aligned.
#[inline(always)]
unsafe fn stage_out(dst: *mut i32, count: u32, get: impl Fn(u32) -> i32) {
    let (t, threads) = (thread_idx_x(), block_dim_x());
    let mut scalar_from = 0;
    if dst as usize % 16 == 0 {
        let quads = count / 4;
        let mut q = t;
        while q < quads {
            let v = (0..4).fold(0u128, |v, j| {
                v | u128::from(get(4 * q + j) as u32) << (32 * j)
            });
            dst.cast::<u128>().add(q as usize).write(v);
            q += threads;
        }
        scalar_from = 4 * quads;
    }
    let mut i = scalar_from + t;
    while i < count {
        *dst.add(i as usize) = get(i);
        i += threads;
    }
}

kernel_args! {
    /// The arguments of every `ferrax_lu_pivots_to_permutation` entry: `batch` rows of `k`
    /// row swaps (0-based, as [`pivots_to_permutation`]) into `batch` permutations of `size`
    /// entries.
    pub struct PivotsArgs {
        pub pivots: *const i32,
        pub permutation: *mut i32,
        pub batch: u64,
        pub k: u32,
        pub size: u32,
    }
}

/// Body of `ferrax_lu_pivots_to_permutation`, for many small matrices: each block stages the
/// pivots of `block_dim` consecutive matrices in shared memory (coalesced reads), each thread
/// permutes one matrix there, and the block writes the permutations back (coalesced writes).
/// Dynamic shared memory: [`batched_shared_bytes`].
///
/// # Safety
/// `pivots` must hold `batch * k` words and `permutation` `batch * size` writable words.
#[inline(always)]
pub unsafe fn batched_kernel(args: PivotsArgs) {
    let PivotsArgs {
        pivots,
        permutation,
        batch,
        k,
        size,
    } = args;
    if byte_slots(size) {
        batched_rows::<u8>(pivots, permutation, batch, k, size)
    } else {
        batched_rows::<u32>(pivots, permutation, batch, k, size)
    }
}

/// [`batched_kernel`] with its shared-memory rows of `S` entries.
#[inline(always)]
unsafe fn batched_rows<S: Slot>(
    pivots: *const i32,
    permutation: *mut i32,
    batch: u64,
    k: u32,
    size: u32,
) {
    let (t, per_block) = (thread_idx_x(), block_dim_x());
    let bytes = core::mem::size_of::<S>() as u32;
    let piv_s = dynamic_shared::<u8>();
    let perm_s = piv_s
        .add(padded_len(u64::from(per_block * k), u64::from(bytes)).next_multiple_of(4) as usize);
    let at = |base: *mut u8, i: u32| base.cast::<S>().add(padded(i, bytes) as usize);
    let swaps = k.min(size);
    let mut first = u64::from(block_idx_x()) * u64::from(per_block);
    let step = u64::from(grid_dim_x()) * u64::from(per_block);
    while first < batch {
        let rows = (batch - first).min(u64::from(per_block)) as u32;
        let src = pivots.add((first * u64::from(k)) as usize);
        // Pivots out of range (negative ones wrap past `size` too) become `size`, a no-op swap
        // below, which fits a byte slot.
        stage_in(src, rows * k, |i, p| {
            *at(piv_s, i) = S::pack((p as u32).min(size))
        });
        sync_threads();
        if t < rows {
            let (piv, perm) = (t * k, t * size);
            for j in 0..size {
                *at(perm_s, perm + j) = S::pack(j);
            }
            for i in 0..swaps {
                let p = (*at(piv_s, piv + i)).unpack();
                if p < size {
                    let (a, b) = (at(perm_s, perm + i), at(perm_s, perm + p));
                    (*a, *b) = (*b, *a);
                }
            }
        }
        sync_threads();
        let dst = permutation.add((first * u64::from(size)) as usize);
        stage_out(dst, rows * size, |i| (*at(perm_s, i)).unpack() as i32);
        // The next matrices' pivots overwrite the shared memory.
        sync_threads();
        first += step;
    }
}

/// Dynamic shared memory of `ferrax_lu_pivots_to_permutation` with `per_block` threads.
pub fn batched_shared_bytes(per_block: u32, k: u32, size: u32) -> u64 {
    let bytes = if byte_slots(size) { 1 } else { 4 };
    let rows = |n: u32| padded_len(u64::from(per_block) * u64::from(n), bytes);
    // The permutations start at a word boundary.
    rows(k).next_multiple_of(4) + rows(size)
}

/// Most swaps per thread that [`large_kernel`]'s sort holds in registers: enough for every
/// launch [`launch_config`] makes (1024 threads when `size > 992`, and `k.min(size) + size`
/// words in [`LARGE_SHARED_MAX`] keep `k.min(size)` under 20480).
const ITEMS: usize = 20;

/// Body of `ferrax_lu_pivots_to_permutation_large`: one matrix per block (`block_dim` a
/// multiple of 32), its pivots and permutation in shared memory ([`large_shared_bytes`]).
///
/// When every swap `i <-> p[i]` has `p[i] >= i` (LAPACK's pivots do; out-of-range ones are
/// no-op swaps `p[i] = i`), position `i` is final after swap `i`, which gives a parallel
/// form. Let `V(j)` be the value at position `j` just before swap `j` (at the end for
/// `j >= k`). Position `j` is written before that only by swaps `s < j` with `p[s] = j`, the
/// last of which, `last(j)`, leaves `V(last(j))` there; so `V(j)` is the root of the chain
/// `j -> last(j) -> ...`, found by pointer jumping. Swap `i` takes the value at `q = p[i]`,
/// which is `V(prev(i))` with `prev(i)` the previous swap with `p = q`, or `q` itself if none.
/// `prev` and `last` come from the swaps sorted by target (stable, so each target's swaps
/// stay in order): a block-wide radix sort of `p[i] << 16 | i`, `log2(size)` passes of
/// `O(k / threads)` each. Pivots that point backwards (or launches the sort cannot hold) take
/// a sequential walk instead.
///
/// # Safety
/// As [`batched_kernel`].
#[inline(always)]
pub unsafe fn large_kernel(args: PivotsArgs) {
    let PivotsArgs {
        pivots,
        permutation,
        batch,
        k,
        size,
    } = args;
    let (t, threads) = (thread_idx_x(), block_dim_x());
    // Words 0..3: `changed` flags of the pointer jumping's rounds (one written, one read, one
    // reset per round); word 3: some pivot points backwards; words 4..36: the sort's warp
    // counts.
    let flags = dynamic_shared::<i32>();
    let backwards = flags.add(3);
    let counts = flags.add(4).cast::<u32>();
    let swaps = k.min(size);
    // 16-bit targets and indices (with a spare bit, see `link_swaps`), whole warps, and at
    // most ITEMS swaps a thread in the sort.
    let sortable =
        size < 1 << 16 && swaps < 1 << 15 && threads % 32 == 0 && swaps <= ITEMS as u32 * threads;
    // `piv[i]`: the normalized pivot `q` (as `q << 16 | i` where `sortable`), then where swap
    // `i`'s value comes from: `!q` for the literal `q`, else a position whose chain root it is.
    let piv = flags.add(36);
    // `tab[j]`: `last(j)` (-1 if none), then the chain root (-1 if `j` is its own).
    let tab = piv.add(swaps as usize);
    let root = |j: u32| match *tab.add(j as usize) {
        r if r < 0 => j as i32,
        r => r,
    };
    let target = |e: i32| if sortable { e as u32 >> 16 } else { e as u32 };
    if t == 0 {
        for w in 0..4 {
            *flags.add(w) = 0;
        }
    }
    sync_threads();
    let mut m = u64::from(block_idx_x());
    while m < batch {
        let src = pivots.add((m * u64::from(k)) as usize);
        let mut back = false;
        stage_in(src, swaps, |i, p| {
            let p = if (p as u32) < size { p as u32 } else { i };
            *piv.add(i as usize) = if sortable { p << 16 | i } else { p } as i32;
            back |= p < i;
        });
        if back {
            *backwards = 1;
        }
        let mut j = t;
        while j < size {
            *tab.add(j as usize) = -1;
            j += threads;
        }
        sync_threads();
        let dst = permutation.add((m * u64::from(size)) as usize);
        if *backwards != 0 || !sortable {
            let mut j = t;
            while j < size {
                *tab.add(j as usize) = j as i32;
                j += threads;
            }
            sync_threads();
            if t == 0 {
                for i in 0..swaps as usize {
                    let (a, b) = (tab.add(i), tab.add(target(*piv.add(i)) as usize));
                    (*a, *b) = (*b, *a);
                }
            }
            sync_threads();
            stage_out(dst, size, |j| *tab.add(j as usize));
        } else {
            let bits = u32::BITS - size.saturating_sub(1).leading_zeros();
            sort_by_target(piv.cast(), swaps, bits, counts);
            link_swaps(piv, tab, swaps);
            let mut round = 0;
            loop {
                if t == 0 {
                    *flags.add((round + 1) % 3) = 0;
                }
                let mut changed = false;
                let mut j = t;
                while j < size {
                    let p = *tab.add(j as usize);
                    if p >= 0 {
                        let pp = *tab.add(p as usize);
                        if pp >= 0 {
                            *tab.add(j as usize) = pp;
                            changed = true;
                        }
                    }
                    j += threads;
                }
                if changed {
                    *flags.add(round % 3) = 1;
                }
                sync_threads();
                if *flags.add(round % 3) == 0 {
                    break;
                }
                round += 1;
            }
            stage_out(dst, size, |i| {
                if i < swaps {
                    match *piv.add(i as usize) {
                        e if e < 0 => !e,
                        e => root(e as u32),
                    }
                } else {
                    root(i)
                }
            });
        }
        // Every flag has been read (the one read last is zero): ready for the next matrix.
        if t == 0 {
            for w in 0..4 {
                *flags.add(w) = 0;
            }
        }
        sync_threads();
        m += u64::from(grid_dim_x());
    }
}

/// Where [`sort_by_target`] and [`link_swaps`] put the `count.div_ceil(threads)` words
/// (`per`) this thread holds: warp `w` holds a run of `32 * per` consecutive words, its lanes
/// adjacent words (conflict-free shared-memory accesses). Returns (position of the first, lane
/// mask of the lanes below this one, `per`, how many of its words are below `count`).
#[inline(always)]
fn sort_layout(count: u32) -> (u32, u32, u32, u32) {
    let (t, threads) = (thread_idx_x(), block_dim_x());
    let per = count.div_ceil(threads);
    let lane = t % 32;
    let first = (t - lane) * per + lane;
    let valid = per.min(count.saturating_sub(first).div_ceil(32));
    (first, (1 << lane) - 1, per, valid)
}

/// Runs `$body` for `$j` in `0..ITEMS`, written out: arrays indexed by `$j` then stay in
/// registers (LLVM leaves such loops rolled, with the arrays in local memory).
macro_rules! for_each_item {
    ($j:ident => $body:block) => {
        for_each_item!(@ $j $body 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19)
    };
    (@ $j:ident $body:block $($n:literal)*) => {{
        const _: () = assert!([$($n),*].len() == ITEMS);
        $({
            let $j: usize = $n;
            $body
        })*
    }};
}

/// Stable sort of the `count` words at `keys` by their bits `16..16 + bits`: one radix bit a
/// pass, each thread holding its words in registers between the pass's two block barriers.
/// `counts` has a word per warp. Needs `count <= ITEMS * threads` and whole warps.
#[inline(always)]
unsafe fn sort_by_target(keys: *mut u32, count: u32, bits: u32, counts: *mut u32) {
    let (first, below, per, valid) = sort_layout(count);
    let (t, warps) = (thread_idx_x(), block_dim_x() / 32);
    let (warp, lane) = (t / 32, t % 32);
    for bit in 16..16 + bits {
        // This thread's words at `at[32 * j]`, the address recomputed each pass (20 addresses
        // kept from pass to pass would not fit in 64 registers).
        let at = keys.add(opaque(first) as usize);
        let (per, valid) = (opaque(per), opaque(valid));
        // Words past `count` sort last (all ones) and are never stored.
        let mut word = [u32::MAX; ITEMS];
        let mut zeros = 0;
        for_each_item!(j => {
            if (j as u32) < per {
                if (j as u32) < valid {
                    word[j] = *at.add(32 * j);
                }
                zeros += (!ballot(word[j] >> bit & 1 != 0)).count_ones();
            }
        });
        if lane == 0 {
            *counts.add(warp as usize) = zeros;
        }
        sync_threads();
        let c = if lane < warps {
            *counts.add(lane as usize)
        } else {
            0
        };
        // Zeros in the warps before this one, and in all.
        let mut zeros_before = redux_add(if lane < warp { c } else { 0 });
        let all_zeros = redux_add(c);
        let (first, per, valid) = (opaque(first), opaque(per), opaque(valid));
        for_each_item!(j => {
            if (j as u32) < per {
                let (pos, w) = (first + 32 * j as u32, word[j]);
                let one = w >> bit & 1 != 0;
                let zero_lanes = !ballot(one);
                let before = zeros_before + (zero_lanes & below).count_ones();
                if (j as u32) < valid {
                    // Zeros keep their order at the front, ones after them (`pos - before`
                    // ones come before this word).
                    let to = if one { all_zeros + pos - before } else { before };
                    *keys.add(to as usize) = w;
                }
                zeros_before += zero_lanes.count_ones();
            }
        });
        sync_threads();
    }
}

/// From the swaps sorted by target (`q << 16 | i` words at `piv`, each target's swaps in
/// order), writes `tab[q] = last(q)` and replaces `piv` by [`large_kernel`]'s sources:
/// `prev(i)`, `!q` for the first swap into `q`, `i` for a no-op swap. Ends at a block barrier.
#[inline(always)]
unsafe fn link_swaps(piv: *mut i32, tab: *mut i32, count: u32) {
    let (first, _, _, valid) = sort_layout(count);
    let word = |pos: u32| *piv.cast::<u32>().add(pos as usize);
    // `i << 17 | literal << 16 | source`: every swap's source, held until all have read the
    // sorted words (`i < 2^15`, `source < 2^16`).
    let mut source = [0u32; ITEMS];
    for_each_item!(j => {
        if (j as u32) < valid {
            let pos = first + 32 * j as u32;
            let e = word(pos);
            let (q, i) = (e >> 16, e & 0xffff);
            source[j] = i << 17
                | if q == i {
                    i
                } else {
                    // The target's no-op swap (index `q`, after all others) is not `last(q)`.
                    let next = if pos + 1 < count { word(pos + 1) } else { u32::MAX };
                    if next >> 16 != q || next & 0xffff == q {
                        *tab.add(q as usize) = i as i32;
                    }
                    match pos.checked_sub(1).map(word) {
                        Some(e) if e >> 16 == q => e & 0xffff,
                        _ => 1 << 16 | q,
                    }
                };
        }
    });
    sync_threads();
    let valid = opaque(valid);
    for_each_item!(j => {
        if (j as u32) < valid {
            let (s, v) = (source[j], (source[j] & 0xffff) as i32);
            *piv.add((s >> 17) as usize) = if s >> 16 & 1 != 0 { !v } else { v };
        }
    });
    sync_threads();
}

/// Dynamic shared memory of `ferrax_lu_pivots_to_permutation_large`.
pub fn large_shared_bytes(k: u32, size: u32) -> u64 {
    4 * (36 + u64::from(k.min(size)) + u64::from(size))
}

/// Body of `ferrax_lu_pivots_to_permutation_global`, for matrices too large for shared memory:
/// one thread per matrix, in place in the output.
///
/// # Safety
/// As [`batched_kernel`].
#[inline(always)]
pub unsafe fn global_kernel(args: PivotsArgs) {
    let PivotsArgs {
        pivots,
        permutation,
        batch,
        k,
        size,
    } = args;
    let mut m = global_idx_x();
    while m < batch {
        let src = core::slice::from_raw_parts(pivots.add((m * u64::from(k)) as usize), k as usize);
        let dst = core::slice::from_raw_parts_mut(
            permutation.add((m * u64::from(size)) as usize),
            size as usize,
        );
        pivots_to_permutation(src, dst);
        m += grid_size_x();
    }
}

/// Dynamic shared memory a block gets without opting in.
const SHARED_DEFAULT: u64 = 48 << 10;
/// Most shared memory [`large_kernel`] takes: its sort holds the swaps of up to
/// `k.min(size) + size` words in this many bytes ([`ITEMS`] per thread).
const LARGE_SHARED_MAX: u64 = 160 << 10;

/// The kernels of `lu_pivots_to_permutation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PivotsKernel {
    /// [`batched_kernel`]: many small matrices a block.
    Batched,
    /// [`large_kernel`]: one matrix a block.
    Large,
    /// [`global_kernel`]: one thread a matrix, in global memory.
    Global,
}

kernel_entries! {
    pub const ENTRIES: Kernels<PivotsKernel, PivotsArgs>;
    (PivotsKernel::Batched) [lu_pivots_to_permutation]: PivotsArgs = batched_kernel;
    (PivotsKernel::Large) [lu_pivots_to_permutation large]: PivotsArgs = large_kernel;
    (PivotsKernel::Global) [lu_pivots_to_permutation global]: PivotsArgs = global_kernel;
}

fn launch(kernel: PivotsKernel, grid: u32, block: u32, shared: u64) -> LaunchConfig<PivotsArgs> {
    ENTRIES
        .launch(kernel, grid, block, shared as u32)
        .expect("every kernel has an entry")
}

/// The launch of `lu_pivots_to_permutation` for `batch` matrices of `k` pivots and
/// permutations of length `size`: the batched kernel while 32 matrices fit in 48 KiB of shared
/// memory, else one block per matrix while it fits in [`LARGE_SHARED_MAX`] and `max_shared`
/// bytes (the device's opt-in limit per block: 227 KiB on Hopper, 163 KiB on A100, 99 KiB on
/// Ada; the host opts in above 48 KiB), else one thread per matrix in global memory.
pub fn launch_config(
    batch: u64,
    k: u32,
    size: u32,
    multiprocessors: u32,
    max_shared: usize,
) -> LaunchConfig<PivotsArgs> {
    let blocks = |n: u64| n.clamp(1, 32 * u64::from(multiprocessors.max(1))) as u32;
    for per_block in [128, 64, 32] {
        let shared = batched_shared_bytes(per_block, k, size);
        if shared <= SHARED_DEFAULT {
            let grid = blocks(batch.div_ceil(u64::from(per_block)));
            return launch(PivotsKernel::Batched, grid, per_block, shared);
        }
    }
    let shared = large_shared_bytes(k, size);
    if shared <= LARGE_SHARED_MAX.min(max_shared as u64) {
        let block = size.next_multiple_of(32).clamp(32, 1024);
        launch(PivotsKernel::Large, blocks(batch), block, shared)
    } else {
        launch(PivotsKernel::Global, blocks(batch.div_ceil(128)), 128, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_swaps_in_order() {
        // Swaps (0,2), (1,2), (2,2) on [0,1,2,3]: [2,1,0,3] -> [2,0,1,3].
        let mut perm = [0; 4];
        pivots_to_permutation(&[2, 2, 2], &mut perm);
        assert_eq!(perm, [2, 0, 1, 3]);
    }

    #[test]
    fn out_of_range_pivots_are_ignored() {
        let mut perm = [0; 3];
        pivots_to_permutation(&[-1, 7, 1], &mut perm);
        assert_eq!(perm, [0, 2, 1]);
    }

    #[test]
    fn empty_inputs() {
        let mut perm: [i32; 0] = [];
        pivots_to_permutation(&[], &mut perm);
        let mut perm = [0; 2];
        pivots_to_permutation(&[], &mut perm);
        assert_eq!(perm, [0, 1]);
    }

    extern crate std;
    use crate::grid::launch;
    use crate::launch::run_on_host;
    use crate::test_buffer::Buffer;
    use std::vec::Vec;

    /// `kernel` run on `batch` matrices as a `grid` x `block` launch, against the host function.
    #[allow(clippy::too_many_arguments)]
    fn check(
        kernel: PivotsKernel,
        shared_bytes: u64,
        pivots: &[i32],
        batch: usize,
        k: usize,
        size: usize,
        (grid, block): (u32, u32),
        offset: usize,
    ) {
        let mut want = std::vec![0; batch * size];
        for m in 0..batch {
            pivots_to_permutation(&pivots[m * k..][..k], &mut want[m * size..][..size]);
        }
        let mut input = Buffer::new(pivots, offset);
        let mut output = Buffer::new(&std::vec![-7; batch * size], offset);
        let (src, dst) = (input.ptr(), output.ptr());
        let args = PivotsArgs {
            pivots: src as _,
            permutation: dst as _,
            batch: batch as u64,
            k: k as u32,
            size: size as u32,
        };
        let name = ENTRIES.name(kernel).unwrap();
        unsafe { run_on_host(name, grid, block, shared_bytes as usize, args) };
        assert_eq!(
            output.as_mut_slice(),
            &want[..],
            "batch {batch}, k {k}, size {size}, launch {grid}x{block}, offset {offset}"
        );
    }

    struct Random(u64);
    impl Random {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n as u64) as usize
        }
    }

    /// Pivots of every kind the kernels tell apart, one row per matrix.
    fn pivot_rows(batch: usize, k: usize, size: usize, kind: usize, rng: &mut Random) -> Vec<i32> {
        let mut rows = Vec::with_capacity(batch * k);
        for _ in 0..batch {
            let mut targets: Vec<usize> = Vec::new();
            for i in 0..k {
                let forward = |rng: &mut Random| i + rng.below(size.max(i + 1) - i);
                let p = match kind {
                    // LAPACK-like: no-op swaps, fresh targets and repeated ones.
                    0 => match rng.below(4) {
                        0 => i,
                        1 => match targets.iter().rev().find(|&&q| q >= i) {
                            Some(&q) => q,
                            None => forward(rng),
                        },
                        _ => forward(rng),
                    },
                    // One long chain: every row moves one down.
                    1 => i + 1,
                    // Every swap with the last row.
                    2 => size - 1,
                    // Out-of-range pivots among forward ones.
                    3 => match rng.below(3) {
                        0 => [usize::MAX, size, size + 5][rng.below(3)],
                        _ => forward(rng),
                    },
                    // Arbitrary, backwards too.
                    _ => rng.below(size + 2),
                };
                targets.push(p);
                rows.push(p as i32);
            }
        }
        rows
    }

    #[test]
    fn batched_kernel_matches_host() {
        let mut rng = Random(1);
        for (k, size) in [
            (5, 5),
            (32, 32),
            (7, 9),
            (33, 40),
            (0, 3),
            (6, 4),
            (1, 1),
            (255, 255),
            (40, 256),
            (260, 300),
        ] {
            for kind in 0..5 {
                if kind == 1 && size <= k || kind == 2 && size == 0 {
                    continue;
                }
                let batch = 70;
                let pivots = pivot_rows(batch, k, size, kind, &mut rng);
                for (shape, offset) in [((2, 32), 0), ((1, 64), 1), ((3, 32), 0)] {
                    let shared = batched_shared_bytes(shape.1, k as u32, size as u32);
                    check(
                        PivotsKernel::Batched,
                        shared,
                        &pivots,
                        batch,
                        k,
                        size,
                        shape,
                        offset,
                    );
                }
            }
        }
    }

    #[test]
    fn large_kernel_matches_host() {
        let mut rng = Random(2);
        for (k, size) in [
            (100, 100),
            (64, 64),
            (70, 130),
            (1, 1),
            (0, 5),
            (50, 40),
            (31, 33),
        ] {
            for kind in 0..5 {
                if kind == 1 && size <= k || kind == 2 && size == 0 {
                    continue;
                }
                let batch = 3;
                let pivots = pivot_rows(batch, k, size, kind, &mut rng);
                for (shape, offset) in [((2, 32), 0), ((1, 64), 1), ((3, 96), 0)] {
                    let shared = large_shared_bytes(k as u32, size as u32);
                    check(
                        PivotsKernel::Large,
                        shared,
                        &pivots,
                        batch,
                        k,
                        size,
                        shape,
                        offset,
                    );
                }
            }
        }
    }

    #[test]
    fn large_kernel_at_the_sort_capacity() {
        // ITEMS swaps a thread (sorted) and one more (sequential), several warps, and a full
        // 1024-thread block.
        let mut rng = Random(4);
        for (threads, k, size) in [
            (32, 640, 643),
            (32, 641, 643),
            (96, 1920, 1920),
            (64, 1000, 70_000),
            (1024, 5000, 5000),
        ] {
            for kind in 0..5 {
                let pivots = pivot_rows(2, k, size, kind, &mut rng);
                let shared = large_shared_bytes(k as u32, size as u32);
                check(
                    PivotsKernel::Large,
                    shared,
                    &pivots,
                    2,
                    k,
                    size,
                    (1, threads),
                    0,
                );
            }
        }
    }

    #[test]
    fn sort_by_target_is_a_stable_sort() {
        let mut rng = Random(5);
        for (threads, count, bits) in [(32, 100, 3), (64, 1280, 16), (96, 7, 1), (32, 0, 4)] {
            let keys: Vec<u32> = (0..count)
                .map(|i| (rng.below(1 << bits) as u32) << 16 | i)
                .collect();
            let mut want = keys.clone();
            want.sort_by_key(|k| k >> 16);
            let (mut shared, mut counts) = (Buffer::new(&keys, 0), Buffer::new(&[0u32; 32], 0));
            let (keys_s, counts_s) = (shared.ptr(), counts.ptr());
            launch(1, threads, 0, || unsafe {
                sort_by_target(keys_s as _, count, bits, counts_s as _)
            });
            assert_eq!(
                shared.as_mut_slice(),
                &want[..],
                "{threads} threads, {count} keys"
            );
        }
    }

    #[test]
    fn global_kernel_matches_host() {
        let mut rng = Random(3);
        let (batch, k, size) = (9, 20, 25);
        for kind in 0..5 {
            let pivots = pivot_rows(batch, k, size, kind, &mut rng);
            check(PivotsKernel::Global, 0, &pivots, batch, k, size, (2, 3), 0);
        }
    }

    /// Hopper's opt-in shared memory per block.
    const HOPPER_SHARED: usize = 227 << 10;

    #[test]
    fn launch_shapes() {
        let many = launch_config(1 << 20, 32, 32, 132, HOPPER_SHARED);
        assert_eq!(
            (many.kernel, many.block, many.shared_bytes),
            ("ferrax_lu_pivots_to_permutation", 128, 8448)
        );
        let k128 = launch_config(1 << 16, 128, 128, 132, HOPPER_SHARED);
        assert_eq!((k128.block, k128.shared_bytes), (128, 33792));
        let words = launch_config(1 << 16, 64, 300, 132, HOPPER_SHARED);
        assert_eq!(
            (words.block, words.shared_bytes),
            (32, 4 * (2048 + 64) + 4 * (9600 + 300))
        );
        assert_eq!(many.grid, 132 * 32);
        let one = launch_config(1, 16384, 16384, 132, HOPPER_SHARED);
        assert_eq!(
            (one.kernel, one.grid, one.block, one.shared_bytes),
            ("ferrax_lu_pivots_to_permutation_large", 1, 1024, 131216)
        );
        // Past the device's opt-in limit (Ada's 99 KiB): the global-memory kernel.
        let one = launch_config(1, 16384, 16384, 132, 99 << 10);
        assert_eq!(one.kernel, "ferrax_lu_pivots_to_permutation_global");
        let mid = launch_config(5, 300, 300, 132, HOPPER_SHARED);
        assert_eq!(
            (mid.kernel, mid.grid, mid.block),
            ("ferrax_lu_pivots_to_permutation_large", 5, 320)
        );
        let huge = launch_config(2, 30000, 30000, 132, HOPPER_SHARED);
        assert_eq!(
            (huge.kernel, huge.grid),
            ("ferrax_lu_pivots_to_permutation_global", 1)
        );
        assert_eq!(launch_config(0, 4, 4, 132, HOPPER_SHARED).grid, 1);
    }
}
