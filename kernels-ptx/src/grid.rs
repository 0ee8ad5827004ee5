//! Thread and block indices, block and warp barriers, warp votes, matching and sums, and
//! dynamic shared memory: the hardware on nvptx, an emulation on the host (each block's
//! threads are real OS threads meeting at a `Barrier`) so that kernel bodies are unit-tested
//! on the CPU with the code that runs on the GPU.

#[cfg(target_arch = "nvptx64")]
mod imp {
    use core::arch::nvptx;

    core::arch::global_asm!(".extern .shared .align 16 .b8 FERRAX_DYNAMIC_SHARED[];");

    #[inline(always)]
    pub fn thread_idx_x() -> u32 {
        // SAFETY: reads a special register.
        unsafe { nvptx::_thread_idx_x() as u32 }
    }
    #[inline(always)]
    pub fn block_idx_x() -> u32 {
        // SAFETY: reads a special register.
        unsafe { nvptx::_block_idx_x() as u32 }
    }
    #[inline(always)]
    pub fn block_dim_x() -> u32 {
        // SAFETY: reads a special register.
        unsafe { nvptx::_block_dim_x() as u32 }
    }
    #[inline(always)]
    pub fn grid_dim_x() -> u32 {
        // SAFETY: reads a special register.
        unsafe { nvptx::_grid_dim_x() as u32 }
    }
    /// `__syncthreads()`: every thread of the block must reach it.
    #[inline(always)]
    pub fn sync_threads() {
        // SAFETY: a block-wide barrier; callers keep it in uniform control flow.
        unsafe { nvptx::_syncthreads() }
    }
    /// `__syncwarp()`: orders the shared-memory accesses of the warp's lanes; all 32 lanes
    /// must reach it.
    #[inline(always)]
    pub fn sync_warp() {
        // SAFETY: a warp-wide barrier; callers keep it in uniform control flow. Not `nomem`:
        // it must also keep the compiler from moving memory accesses across it.
        unsafe { core::arch::asm!("bar.warp.sync 0xffffffff;", options(nostack)) }
    }
    /// `__match_any_sync(0xffffffff, value)`: the lanes of the warp holding the same `value`
    /// as this lane, as a bit mask; all 32 lanes must reach it.
    #[inline(always)]
    pub fn match_any(value: u32) -> u32 {
        let mask: u32;
        // SAFETY: a warp-wide exchange of registers; callers keep it in uniform control flow.
        unsafe {
            core::arch::asm!("match.any.sync.b32 {m}, {v}, 0xffffffff;", m = out(reg32) mask,
                v = in(reg32) value, options(nostack));
        }
        mask
    }
    /// `__ballot_sync(0xffffffff, predicate)`: bit `l` set where lane `l` holds `true`; all 32
    /// lanes must reach it.
    #[inline(always)]
    pub fn ballot(predicate: bool) -> u32 {
        let mask: u32;
        // SAFETY: a warp-wide exchange of registers; callers keep it in uniform control flow.
        unsafe {
            core::arch::asm!("{{ .reg .pred p; setp.ne.u32 p, {v}, 0; \
                vote.sync.ballot.b32 {m}, p, 0xffffffff; }}", m = out(reg32) mask,
                v = in(reg32) u32::from(predicate), options(nostack));
        }
        mask
    }
    /// `__reduce_add_sync(0xffffffff, value)` (sm_80): the sum of `value` over the warp's
    /// lanes (wrapping); all 32 lanes must reach it.
    #[inline(always)]
    pub fn redux_add(value: u32) -> u32 {
        let sum: u32;
        // SAFETY: a warp-wide exchange of registers; callers keep it in uniform control flow.
        unsafe {
            core::arch::asm!("redux.sync.add.u32 {s}, {v}, 0xffffffff;", s = out(reg32) sum,
                v = in(reg32) value, options(nostack));
        }
        sum
    }
    /// `x`, through a register copy the compiler cannot see through or move: values a loop
    /// derives from it are recomputed in the loop instead of hoisted into registers.
    #[inline(always)]
    pub fn opaque(x: u32) -> u32 {
        let y: u32;
        // SAFETY: copies a register (not `pure`, so that it stays where it is).
        unsafe {
            core::arch::asm!("mov.b32 {y}, {x};", y = out(reg32) y, x = in(reg32) x,
                options(nomem, nostack));
        }
        y
    }
    /// `__shfl_sync(0xffffffff, value, src)`: lane `src`'s `value`; all 32 lanes must reach it.
    #[inline(always)]
    pub fn shfl(value: u32, src: u32) -> u32 {
        let out: u32;
        // SAFETY: a warp-wide exchange of registers; callers keep it in uniform control flow.
        // Not `pure`, so LLVM neither sinks it into a branch nor drops it.
        unsafe {
            core::arch::asm!("shfl.sync.idx.b32 {o}, {v}, {s}, 31, -1;", o = out(reg32) out,
                v = in(reg32) value, s = in(reg32) src, options(nomem, nostack));
        }
        out
    }
    /// Start of the block's dynamic shared memory (sized by the launch), as a generic pointer.
    #[inline(always)]
    pub fn dynamic_shared<T>() -> *mut T {
        let p: u64;
        // SAFETY: converts the shared-window address of the extern array to a generic one.
        unsafe {
            core::arch::asm!("cvta.shared.u64 {p}, FERRAX_DYNAMIC_SHARED;", p = out(reg64) p,
                options(pure, nomem, nostack));
        }
        p as *mut T
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod imp {
    extern crate std;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Barrier;
    use std::vec::Vec;

    #[derive(Clone, Copy)]
    struct Position {
        thread: u32,
        block: u32,
        block_dim: u32,
        grid_dim: u32,
        barrier: *const Barrier,
        warp: *const Warp,
        shared: *mut u8,
    }

    /// What the lanes of one emulated warp (32 consecutive threads of a block, fewer in a
    /// last partial warp) meet at and exchange values through.
    struct Warp {
        barrier: Barrier,
        lanes: u32,
        values: [AtomicU32; 32],
    }

    std::thread_local! {
        static POSITION: Cell<Option<Position>> = const { Cell::new(None) };
    }

    fn position() -> Position {
        POSITION
            .with(Cell::get)
            .expect("grid indices read outside grid::launch")
    }

    pub fn thread_idx_x() -> u32 {
        position().thread
    }
    pub fn block_idx_x() -> u32 {
        position().block
    }
    pub fn block_dim_x() -> u32 {
        position().block_dim
    }
    pub fn grid_dim_x() -> u32 {
        position().grid_dim
    }
    pub fn sync_threads() {
        // SAFETY: the barrier outlives every thread of the block (scoped threads in `launch`).
        unsafe { (*position().barrier).wait() };
    }
    pub fn sync_warp() {
        // SAFETY: the warps outlive every thread of the block (scoped threads in `launch`).
        unsafe { (*position().warp).barrier.wait() };
    }
    pub fn match_any(value: u32) -> u32 {
        let (all, lanes) = exchange(value);
        (0..lanes)
            .filter(|&l| all[l as usize] == value)
            .fold(0, |m, l| m | 1 << l)
    }
    /// Every lane's `value` of this lane's warp, in lane order (a warp-wide exchange).
    fn exchange(value: u32) -> ([u32; 32], u32) {
        let here = position();
        // SAFETY: as in `sync_warp`.
        let warp = unsafe { &*here.warp };
        warp.values[(here.thread % 32) as usize].store(value, Ordering::Relaxed);
        warp.barrier.wait();
        let mut all = [0; 32];
        for (lane, v) in all.iter_mut().enumerate().take(warp.lanes as usize) {
            *v = warp.values[lane].load(Ordering::Relaxed);
        }
        // No lane may store its next value before every lane has read this one.
        warp.barrier.wait();
        (all, warp.lanes)
    }
    pub fn ballot(predicate: bool) -> u32 {
        let (all, lanes) = exchange(u32::from(predicate));
        (0..lanes)
            .filter(|&l| all[l as usize] != 0)
            .fold(0, |m, l| m | 1 << l)
    }
    pub fn redux_add(value: u32) -> u32 {
        let (all, lanes) = exchange(value);
        all[..lanes as usize]
            .iter()
            .fold(0u32, |s, &v| s.wrapping_add(v))
    }
    pub fn opaque(x: u32) -> u32 {
        x
    }
    pub fn shfl(value: u32, src: u32) -> u32 {
        let (all, lanes) = exchange(value);
        all[(src % lanes) as usize]
    }
    pub fn dynamic_shared<T>() -> *mut T {
        position().shared.cast()
    }

    struct SendPtr<T>(*const T);
    unsafe impl<T> Send for SendPtr<T> {}
    unsafe impl<T> Sync for SendPtr<T> {}
    impl<T> SendPtr<T> {
        fn get(&self) -> *const T {
            self.0
        }
    }

    /// Runs `body` as a 1-D launch of `grid` blocks of `block` threads with `shared_bytes` of
    /// dynamic shared memory (zeroed, 16-byte aligned), one block after another; the threads
    /// of a block run concurrently so that `sync_threads` behaves as on the GPU.
    pub fn launch(grid: u32, block: u32, shared_bytes: usize, body: impl Fn() + Sync) {
        for b in 0..grid {
            let barrier = Barrier::new(block as usize);
            let warps: Vec<Warp> = (0..block.div_ceil(32))
                .map(|w| {
                    let lanes = (block - 32 * w).min(32);
                    Warp {
                        barrier: Barrier::new(lanes as usize),
                        lanes,
                        values: Default::default(),
                    }
                })
                .collect();
            let mut shared: Vec<u128> = std::vec![0; shared_bytes.div_ceil(16)];
            let (barrier_ptr, warps_ptr, shared_ptr) = (
                SendPtr(&barrier as *const Barrier),
                SendPtr(warps.as_ptr()),
                SendPtr(shared.as_mut_ptr() as *const u8),
            );
            std::thread::scope(|scope| {
                for t in 0..block {
                    let (body, barrier_ptr, warps_ptr, shared_ptr) =
                        (&body, &barrier_ptr, &warps_ptr, &shared_ptr);
                    std::thread::Builder::new()
                        .stack_size(256 << 10)
                        .spawn_scoped(scope, move || {
                            POSITION.with(|p| {
                                p.set(Some(Position {
                                    thread: t,
                                    block: b,
                                    block_dim: block,
                                    grid_dim: grid,
                                    barrier: barrier_ptr.get(),
                                    // SAFETY: `t / 32` indexes `warps`, which has a warp
                                    // for every 32 threads.
                                    warp: unsafe { warps_ptr.get().add((t / 32) as usize) },
                                    shared: shared_ptr.get() as *mut u8,
                                }))
                            });
                            body();
                            POSITION.with(|p| p.set(None));
                        })
                        .expect("spawn an emulated GPU thread");
                }
            });
        }
    }
}

pub use imp::*;

/// Index of this thread in the whole 1-D grid.
#[inline(always)]
pub fn global_idx_x() -> u64 {
    block_idx_x() as u64 * block_dim_x() as u64 + thread_idx_x() as u64
}

/// Number of threads in the whole 1-D grid (the stride of a grid-stride loop).
#[inline(always)]
pub fn grid_size_x() -> u64 {
    grid_dim_x() as u64 * block_dim_x() as u64
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn every_thread_runs_once_with_its_indices() {
        let seen: [AtomicU32; 12] = Default::default();
        launch(3, 4, 0, || {
            assert_eq!((block_dim_x(), grid_dim_x()), (4, 3));
            seen[global_idx_x() as usize].fetch_add(1, Ordering::Relaxed);
        });
        assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn match_any_groups_lanes_of_a_warp() {
        // Two warps (the second partial) holding value lane % 3 in their own lanes.
        let masks: [AtomicU32; 40] = core::array::from_fn(|_| AtomicU32::new(0));
        launch(1, 40, 0, || {
            let t = thread_idx_x();
            masks[t as usize].store(match_any(t % 32 % 3), Ordering::Relaxed);
            sync_warp();
        });
        let want = |lanes: u32, lane: u32| {
            (0..lanes)
                .filter(|l| l % 3 == lane % 3)
                .fold(0u32, |m, l| m | 1 << l)
        };
        for (t, m) in masks.iter().enumerate() {
            let lanes = if t < 32 { 32 } else { 8 };
            assert_eq!(
                m.load(Ordering::Relaxed),
                want(lanes, t as u32 % 32),
                "thread {t}"
            );
        }
    }

    #[test]
    fn ballot_and_redux_add_span_a_warp() {
        // Two warps (the second partial): odd lanes vote; lanes sum their lane numbers.
        let out: [AtomicU32; 80] = core::array::from_fn(|_| AtomicU32::new(0));
        launch(1, 40, 0, || {
            let t = thread_idx_x();
            let (b, s) = (ballot(t % 2 == 1), redux_add(t % 32));
            out[2 * t as usize].store(b, Ordering::Relaxed);
            out[2 * t as usize + 1].store(s, Ordering::Relaxed);
        });
        for t in 0..40 {
            let (b, s) = if t < 32 {
                (0xaaaa_aaaa, 496)
            } else {
                (0xaa, 28)
            };
            assert_eq!(out[2 * t].load(Ordering::Relaxed), b, "thread {t}");
            assert_eq!(out[2 * t + 1].load(Ordering::Relaxed), s, "thread {t}");
        }
    }

    #[test]
    fn barrier_orders_shared_memory() {
        // Each thread writes its slot, then reads its neighbour's after the barrier.
        let sums: [AtomicU32; 8] = Default::default();
        launch(2, 8, 8 * 4, || {
            let shared = dynamic_shared::<u32>();
            let t = thread_idx_x();
            unsafe { *shared.add(t as usize) = t + 10 * block_idx_x() };
            sync_threads();
            let neighbour = unsafe { *shared.add(((t + 1) % 8) as usize) };
            if block_idx_x() == 1 {
                sums[t as usize].store(neighbour, Ordering::Relaxed);
            }
        });
        for (t, s) in sums.iter().enumerate() {
            assert_eq!(s.load(Ordering::Relaxed), (t as u32 + 1) % 8 + 10);
        }
    }
}
