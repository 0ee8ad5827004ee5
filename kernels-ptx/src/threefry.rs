//! Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
//! SC 2011), bit-exact with `jax._src.prng.threefry2x32_p`.

use crate::grid::{global_idx_x, grid_size_x};
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig};

const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];
const KEY_PARITY: u32 = 0x1BD1_1BDA;

/// Hashes one counter pair `x` under `key`.
#[inline(always)]
pub fn threefry2x32(key: [u32; 2], x: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], key[0] ^ key[1] ^ KEY_PARITY];
    let mut x0 = x[0].wrapping_add(ks[0]);
    let mut x1 = x[1].wrapping_add(ks[1]);
    for block in 0..5u32 {
        for &r in &ROTATIONS[(block % 2) as usize] {
            x0 = x0.wrapping_add(x1);
            x1 = x1.rotate_left(r) ^ x0;
        }
        let b = block as usize + 1;
        x0 = x0.wrapping_add(ks[b % 3]);
        x1 = x1.wrapping_add(ks[(b + 1) % 3]).wrapping_add(block + 1);
    }
    [x0, x1]
}

/// Element-wise hash of four equally long arrays, as `cu_threefry2x32_ffi` defines it.
/// Written as one flat loop so that the compiler vectorizes it.
#[inline(always)]
pub fn threefry2x32_slices(
    key0: &[u32],
    key1: &[u32],
    x0: &[u32],
    x1: &[u32],
    out0: &mut [u32],
    out1: &mut [u32],
) {
    let n = out0.len();
    let (key0, key1, x0, x1, out1) = (&key0[..n], &key1[..n], &x0[..n], &x1[..n], &mut out1[..n]);
    for i in 0..n {
        let [y0, y1] = threefry2x32([key0[i], key1[i]], [x0[i], x1[i]]);
        out0[i] = y0;
        out1[i] = y1;
    }
}

const BLOCK: u32 = 256;

/// The four words of a 16-byte load, in memory order (nvptx and the hosts are little-endian).
#[inline(always)]
fn words(quad: u128) -> [u32; 4] {
    [
        quad as u32,
        (quad >> 32) as u32,
        (quad >> 64) as u32,
        (quad >> 96) as u32,
    ]
}

/// The inverse of [`words`].
#[inline(always)]
fn quad(w: [u32; 4]) -> u128 {
    u128::from(w[0]) | u128::from(w[1]) << 32 | u128::from(w[2]) << 64 | u128::from(w[3]) << 96
}

kernel_args! {
    /// The arguments of `ferrax_threefry2x32`: `(out0, out1)[i] = threefry2x32((key0,
    /// key1)[i], (x0, x1)[i])` for `i < n`.
    pub struct ThreefryArgs {
        pub key0: *const u32,
        pub key1: *const u32,
        pub x0: *const u32,
        pub x1: *const u32,
        pub out0: *mut u32,
        pub out1: *mut u32,
        pub n: u64,
    }
}

/// Body of `ferrax_threefry2x32`: [`threefry2x32_slices`] over raw device arrays of length `n`
/// in a grid-stride loop. Each step hashes four elements with 16-byte loads and stores when
/// every array is 16-byte aligned (XLA's buffers are), so the kernel streams at copy speed.
///
/// # Safety
/// The inputs must be readable and the outputs writable for `n` elements each.
#[inline(always)]
pub unsafe fn threefry2x32_kernel(args: ThreefryArgs) {
    let ThreefryArgs {
        key0,
        key1,
        x0,
        x1,
        out0,
        out1,
        n,
    } = args;
    let (start, stride) = (global_idx_x(), grid_size_x());
    let addresses = key0 as usize | key1 as usize | x0 as usize | x1 as usize;
    let aligned = (addresses | out0 as usize | out1 as usize) % 16 == 0;
    let quads = if aligned { n / 4 } else { 0 };
    let mut q = start;
    while q < quads {
        let load = |p: *const u32| words(p.cast::<u128>().add(q as usize).read());
        let (k0, k1, c0, c1) = (load(key0), load(key1), load(x0), load(x1));
        let hash = |j: usize| threefry2x32([k0[j], k1[j]], [c0[j], c1[j]]);
        let (a, b, c, d) = (hash(0), hash(1), hash(2), hash(3));
        let out = |p: *mut u32, y: [u32; 4]| p.cast::<u128>().add(q as usize).write(quad(y));
        out(out0, [a[0], b[0], c[0], d[0]]);
        out(out1, [a[1], b[1], c[1], d[1]]);
        q += stride;
    }
    let mut i = 4 * quads + start;
    while i < n {
        let i_ = i as usize;
        [*out0.add(i_), *out1.add(i_)] =
            threefry2x32([*key0.add(i_), *key1.add(i_)], [*x0.add(i_), *x1.add(i_)]);
        i += stride;
    }
}

kernel_entries! {
    /// `cu_threefry2x32_ffi`'s element-wise hash.
    pub const THREEFRY: Kernels<(), ThreefryArgs>;
    (()) [threefry2x32]: ThreefryArgs = threefry2x32_kernel;
}

/// Launch of `ferrax_threefry2x32` on `n` elements: enough blocks to fill every
/// multiprocessor (2048 threads each), fewer for small `n`.
pub fn launch_config(n: u64, multiprocessors: u32) -> LaunchConfig<ThreefryArgs> {
    let grid = grid_for(n.div_ceil(4), multiprocessors);
    THREEFRY.launch((), grid, BLOCK, 0).expect("the one entry")
}

fn grid_for(items: u64, multiprocessors: u32) -> u32 {
    let full = u64::from(multiprocessors.max(1)) * u64::from(2048 / BLOCK);
    items.div_ceil(u64::from(BLOCK)).clamp(1, full) as u32
}

/// The output words of `jax.random.bits`: u8, u16, u32 and u64.
pub trait Bits: Copy {
    const ZERO: Self;
    /// The word made of the two hash words `y`.
    fn from_hash(y: [u32; 2]) -> Self;
    /// The word's bits, zero-extended.
    fn widen(self) -> u128;
}

macro_rules! xor_bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn from_hash(y: [u32; 2]) -> Self {
                (y[0] ^ y[1]) as $t
            }
            #[inline(always)]
            fn widen(self) -> u128 {
                self.into()
            }
        }
    )*};
}
xor_bits!(u8, u16, u32);

impl Bits for u64 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn from_hash(y: [u32; 2]) -> Self {
        (u64::from(y[0]) << 32) | u64::from(y[1])
    }
    #[inline(always)]
    fn widen(self) -> u128 {
        self.into()
    }
}

/// Element `c` of the stream of `key`: counter `c` split into its high and low words.
#[inline(always)]
fn bits_at<T: Bits>(key: [u32; 2], c: u64) -> T {
    T::from_hash(threefry2x32(key, [(c >> 32) as u32, c as u32]))
}

/// The key pair `k` of `keys`.
#[inline(always)]
unsafe fn key_at(keys: *const u32, k: u64) -> [u32; 2] {
    keys.cast::<[u32; 2]>().add(k as usize).read()
}

kernel_args! {
    /// The arguments of `ferrax_threefry2x32_bits{8,16,32,64}`: `total` words into `out`,
    /// `per_key` from each key pair of `keys`.
    pub struct BitsArgs<T> {
        pub keys: *const u32,
        pub per_key: u64,
        pub total: u64,
        pub out: *mut T,
    }
}

/// Body of `ferrax_threefry2x32_bits{8,16,32,64}`: `jax.random.bits` under
/// `jax_threefry_partitionable` for a run of keys, `per_key` words each, `total` in all.
/// Element `e` is word `e % per_key` of key pair `e / per_key` of `keys`: the hash of the
/// counter `e % per_key` (as two 32-bit words, high first), its two words joined for u64 and
/// xor-ed (then truncated) otherwise. The counters are made here, so only the output is
/// written to memory: one hash per word.
///
/// Each thread makes 16 bytes of words per step (one aligned store) and tracks its key and
/// counter incrementally instead of dividing for every word.
///
/// # Safety
/// `keys` must hold `2 * total.div_ceil(per_key)` words and `out` `total` writable words.
#[inline(always)]
pub unsafe fn threefry2x32_bits_kernel<T: Bits, const N: usize>(args: BitsArgs<T>) {
    let BitsArgs {
        keys,
        per_key,
        total,
        out,
    } = args;
    const { assert!(N * core::mem::size_of::<T>() == 16) };
    let bits = 128 / N as u32;
    if per_key == 0 {
        return;
    }
    let (start, stride) = (global_idx_x(), grid_size_x());
    let groups = if out as usize % 16 == 0 {
        total / N as u64
    } else {
        0
    };
    if start < groups {
        let first = start * N as u64;
        let (mut k, mut c) = (first / per_key, first % per_key);
        let step = stride * N as u64;
        let (step_k, step_c) = (step / per_key, step % per_key);
        let mut g = start;
        loop {
            // The group's words are shifted in from the top of one 16-byte register, so that
            // the first ends up at the lowest address (no indexed array, no local memory).
            let push = |quad: u128, word: T| (quad >> bits) | (word.widen() << (128 - bits));
            let mut quad = 0u128;
            let mut key = key_at(keys, k);
            if c + N as u64 <= per_key {
                for j in 0..N as u64 {
                    quad = push(quad, bits_at(key, c + j));
                }
            } else {
                // The group runs into the next key(s).
                let (mut kj, mut cj) = (k, c);
                for j in 0..N {
                    quad = push(quad, bits_at(key, cj));
                    cj += 1;
                    // The next key only while the group has words left: after the last key's
                    // last word there is no next key to read.
                    if cj == per_key && j + 1 < N {
                        (kj, cj) = (kj + 1, 0);
                        key = key_at(keys, kj);
                    }
                }
            }
            out.cast::<u128>().add(g as usize).write(quad);
            g += stride;
            if g >= groups {
                break;
            }
            (k, c) = (k + step_k, c + step_c);
            if c >= per_key {
                (k, c) = (k + 1, c - per_key);
            }
        }
    }
    let mut e = groups * N as u64 + start;
    while e < total {
        *out.add(e as usize) = bits_at(key_at(keys, e / per_key), e % per_key);
        e += stride;
    }
}

kernel_entries! {
    /// `jax.random.bits` by word size in bits; each thread makes 16 bytes of words a step.
    pub const BITS: Kernels<u32, BitsArgs<AnyElement>>;
    (8) [threefry2x32_bits8]: BitsArgs<u8> = threefry2x32_bits_kernel::<u8, 16>;
    (16) [threefry2x32_bits16]: BitsArgs<u16> = threefry2x32_bits_kernel::<u16, 8>;
    (32) [threefry2x32_bits32]: BitsArgs<u32> = threefry2x32_bits_kernel::<u32, 4>;
    (64) [threefry2x32_bits64]: BitsArgs<u64> = threefry2x32_bits_kernel::<u64, 2>;
}

/// Launch of `ferrax_threefry2x32_bits{bits}` making `total` words.
pub fn bits_launch_config(
    bits: u32,
    total: u64,
    multiprocessors: u32,
) -> LaunchConfig<BitsArgs<AnyElement>> {
    let grid = grid_for(
        total.div_ceil(u64::from(128 / bits.max(1))),
        multiprocessors,
    );
    BITS.launch(bits, grid, BLOCK, 0)
        .unwrap_or_else(|| panic!("jax.random.bits makes 8, 16, 32 or 64-bit words, not {bits}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::run_on_host;
    use crate::test_buffer::Buffer;

    // Known-answer vectors from the Random123 distribution (kat_vectors, threefry2x32_20).
    #[test]
    fn random123_known_answers() {
        assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(
            threefry2x32([u32::MAX, u32::MAX], [u32::MAX, u32::MAX]),
            [0x1cb9_96fc, 0xbb00_2be7]
        );
        assert_eq!(
            threefry2x32([0x1319_8a2e, 0x0370_7344], [0x243f_6a88, 0x85a3_08d3]),
            [0xc492_3a9c, 0x483d_f7a0]
        );
    }

    #[test]
    fn slices_match_scalar() {
        let n = 37;
        let mut state = 0x1234_5678u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let mut inputs = [[0u32; 37]; 4];
        for row in inputs.iter_mut() {
            for v in row.iter_mut() {
                *v = next();
            }
        }
        let (mut out0, mut out1) = ([0u32; 37], [0u32; 37]);
        threefry2x32_slices(
            &inputs[0], &inputs[1], &inputs[2], &inputs[3], &mut out0, &mut out1,
        );
        for i in 0..n {
            let want = threefry2x32([inputs[0][i], inputs[1][i]], [inputs[2][i], inputs[3][i]]);
            assert_eq!([out0[i], out1[i]], want);
        }
    }

    extern crate std;

    fn random_words(n: usize, mut state: u32) -> std::vec::Vec<u32> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state
            })
            .collect()
    }

    #[test]
    fn kernel_matches_slices() {
        let n = 39;
        let inputs: std::vec::Vec<_> = (0..4).map(|r| random_words(n, 0x9e37 + r)).collect();
        let (mut want0, mut want1) = (std::vec![0; n], std::vec![0; n]);
        threefry2x32_slices(
            &inputs[0], &inputs[1], &inputs[2], &inputs[3], &mut want0, &mut want1,
        );
        // Aligned (16-byte steps and a scalar tail) and misaligned (scalar only) arrays, with
        // fewer threads than steps so that the grid-stride loops wrap.
        for offset in [0, 1] {
            let mut ins: std::vec::Vec<_> = inputs.iter().map(|v| Buffer::new(v, offset)).collect();
            let zeros = std::vec![0u32; n];
            let (mut out0, mut out1) = (Buffer::new(&zeros, offset), Buffer::new(&zeros, offset));
            let p: std::vec::Vec<usize> = ins.iter_mut().map(|b| b.ptr()).collect();
            let (o0, o1) = (out0.ptr(), out1.ptr());
            let args = ThreefryArgs {
                key0: p[0] as _,
                key1: p[1] as _,
                x0: p[2] as _,
                x1: p[3] as _,
                out0: o0 as _,
                out1: o1 as _,
                n: n as u64,
            };
            unsafe { run_on_host("ferrax_threefry2x32", 2, 3, 0, args) };
            assert_eq!(out0.as_mut_slice(), &want0[..], "offset {offset}");
            assert_eq!(out1.as_mut_slice(), &want1[..], "offset {offset}");
        }
    }

    fn run_bits<T: Bits + PartialEq + core::fmt::Debug + 'static>(
        keys: &[u32],
        per_key: u64,
        total: usize,
        offset: usize,
        (grid, block): (u32, u32),
    ) -> std::vec::Vec<T> {
        let mut out = Buffer::new(&std::vec![T::ZERO; total], offset);
        let o = out.ptr();
        let args = BitsArgs {
            keys: keys.as_ptr(),
            per_key,
            total: total as u64,
            out: o as *mut T,
        };
        let kernel = BITS.name(8 * core::mem::size_of::<T>() as u32).unwrap();
        unsafe { run_on_host(kernel, grid, block, 0, args) };
        out.as_mut_slice().to_vec()
    }

    // Produced with jax 0.10.2 on the CPU:
    //   jax.config.update('jax_threefry_partitionable', True)
    //   jax.config.update('jax_enable_x64', True)
    //   jax.random.bits(jax.random.PRNGKey(seed), shape, dtype).ravel()
    // for (seed, shape, dtype) = (0, (5,), uint32), (42, (2, 3), uint8), (7, (4,), uint16),
    // (123, (3,), uint64); PRNGKey(s) is the key pair (0, s).
    #[test]
    fn bits_match_jax() {
        let one = (1, 32);
        assert_eq!(
            run_bits::<u32>(&[0, 0], 5, 5, 0, one),
            [0xf29a4fa7, 0xfa843692, 0x55110e28, 0x77faa835, 0x91e43bb7]
        );
        assert_eq!(
            run_bits::<u8>(&[0, 42], 6, 6, 0, one),
            [0xa2, 0xd9, 0xf9, 0xd7, 0x15, 0xd8]
        );
        assert_eq!(
            run_bits::<u16>(&[0, 7], 4, 4, 0, one),
            [0x290b, 0x7e00, 0x29aa, 0x4530]
        );
        assert_eq!(
            run_bits::<u64>(&[0, 123], 3, 3, 0, one),
            [0x39c79149cb311f01, 0x7ce2bffdb05f591f, 0x7109a0d2f34bc24c]
        );
        // jax.vmap(lambda k: jax.random.bits(k, (2,), jnp.uint32))(jax.random.split(
        //     jax.random.PRNGKey(5), 3)): three keys, two words each.
        let keys = [
            2724472204, 3573582090, 202567368, 3886822060, 3594430910, 1784718894,
        ];
        assert_eq!(
            run_bits::<u32>(&keys, 2, 6, 0, one),
            [0xa9396d5f, 0xe0008156, 0x1574cb01, 0x3aadb840, 0xf4d2d654, 0xc2320b65]
        );
    }

    fn check_bits<T: Bits + PartialEq + core::fmt::Debug + 'static>() {
        let keys = random_words(2 * 40, 0xbeef);
        for per_key in [1, 2, 3, 7, 16, 17, 40, 1 << 40] {
            let total = 61.min(40 * per_key) as usize;
            let want: std::vec::Vec<T> = (0..total as u64)
                .map(|e| bits_at(key_at_slice(&keys, e / per_key), e % per_key))
                .collect();
            for offset in [0, 1] {
                for shape in [(1, 1), (2, 3), (3, 32)] {
                    assert_eq!(
                        run_bits::<T>(&keys, per_key, total, offset, shape),
                        want,
                        "per_key {per_key}, offset {offset}, launch {shape:?}"
                    );
                }
            }
        }
    }

    fn key_at_slice(keys: &[u32], k: u64) -> [u32; 2] {
        [keys[2 * k as usize], keys[2 * k as usize + 1]]
    }

    #[test]
    fn bits_walk_keys_and_counters() {
        check_bits::<u8>();
        check_bits::<u16>();
        check_bits::<u32>();
        check_bits::<u64>();
        assert_eq!(bits_at::<u64>([3, 4], (9 << 32) | 5), {
            let [y0, y1] = threefry2x32([3, 4], [9, 5]);
            (u64::from(y0) << 32) | u64::from(y1)
        });
    }

    #[test]
    fn launch_shapes() {
        let config = launch_config(1 << 30, 132);
        assert_eq!((config.grid, config.block), (132 * 8, 256));
        assert_eq!(launch_config(0, 132).grid, 1);
        assert_eq!(launch_config(4 * 256 * 3, 132).grid, 3);
        let bits = bits_launch_config(8, 16 * 256 * 5 + 1, 132);
        assert_eq!((bits.kernel, bits.grid), ("ferrax_threefry2x32_bits8", 6));
    }
}
