//! Out-of-place transposition of one matrix: the row-major ↔ column-major staging of the CPU
//! routines. LLVM does not vectorize a transposition (it moves element by element, about
//! 0.9 ns each for a 128 × 128 f64 matrix on this project's machine); the blocks here load
//! whole rows into registers and shuffle them into columns.

/// Rows of the source that one pass keeps in L1 while its columns are written out in strips.
const TILE_ROWS: usize = 64;

/// One matrix to transpose: `dst[j * dst_ld + i] = src[i * src_ld + j]` for `i < rows`,
/// `j < cols`, the row-major `src` to the column-major `dst` (equally, column-major to
/// row-major); leading dimensions in elements.
#[derive(Clone, Copy)]
pub struct Transposition<T> {
    pub src: *const T,
    pub src_ld: usize,
    pub dst: *mut T,
    pub dst_ld: usize,
    pub rows: usize,
    pub cols: usize,
}

/// Writes every element of the transposition.
///
/// # Safety
/// `src` is readable at those offsets, `dst` writable at those, and the two do not overlap.
pub unsafe fn transpose<T: Copy>(whole: Transposition<T>) {
    #[cfg(target_arch = "x86_64")]
    let (done_rows, done_cols) = x86::leading_blocks(whole);
    #[cfg(not(target_arch = "x86_64"))]
    let (done_rows, done_cols) = (0, 0);
    let Transposition {
        src,
        src_ld,
        dst,
        dst_ld,
        rows,
        cols,
    } = whole;
    for i in 0..rows {
        let from = if i < done_rows { done_cols } else { 0 };
        for j in from..cols {
            *dst.add(j * dst_ld + i) = *src.add(i * src_ld + j);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Transposition, TILE_ROWS};
    use std::arch::x86_64::*;

    /// A square block of `SIDE × SIDE` elements, transposed in registers; its element size is
    /// the one `leading_blocks` picks it for.
    trait Block {
        const SIDE: usize;
        /// # Safety
        /// The block lies inside both matrices (strides in bytes); the CPU has the kernel's
        /// instructions.
        unsafe fn transpose(src: *const u8, src_ld: usize, dst: *mut u8, dst_ld: usize);
    }

    /// The leading blocks of whole kernel blocks for `T` (none where no kernel takes its
    /// size); returns how many rows and columns they cover.
    pub unsafe fn leading_blocks<T>(whole: Transposition<T>) -> (usize, usize) {
        let avx = std::is_x86_feature_detected!("avx");
        let blocks = match (std::mem::size_of::<T>(), avx) {
            (4, _) => blocks::<T, Sse4x4>,
            (8, false) => blocks::<T, Sse2x2Of64>,
            (8, true) => blocks_avx::<T, Avx4x4Of64>,
            (16, true) => blocks_avx::<T, Avx2x2Of128>,
            _ => return (0, 0),
        };
        blocks(whole)
    }

    /// The leading blocks of whole `B`s, tile by tile; returns how many rows and columns that
    /// covers.
    #[inline(always)]
    unsafe fn blocks<T, B: Block>(whole: Transposition<T>) -> (usize, usize) {
        let (side, bytes) = (B::SIDE, std::mem::size_of::<T>());
        let (rows, cols) = (whole.rows / side * side, whole.cols / side * side);
        let (src, dst) = (whole.src.cast::<u8>(), whole.dst.cast::<u8>());
        let (src_ld, dst_ld) = (whole.src_ld * bytes, whole.dst_ld * bytes);
        for i0 in (0..rows).step_by(TILE_ROWS) {
            let tile_end = (i0 + TILE_ROWS).min(rows);
            for j in (0..cols).step_by(side) {
                for i in (i0..tile_end).step_by(side) {
                    let (from, to) = (
                        src.add(i * src_ld + j * bytes),
                        dst.add(j * dst_ld + i * bytes),
                    );
                    B::transpose(from, src_ld, to, dst_ld);
                }
            }
        }
        (rows, cols)
    }

    /// [`blocks`] compiled with AVX enabled, so that `B`'s AVX kernel inlines into the loop.
    #[target_feature(enable = "avx")]
    unsafe fn blocks_avx<T, B: Block>(whole: Transposition<T>) -> (usize, usize) {
        blocks::<T, B>(whole)
    }

    /// Declares a [`Block`] kernel: `load(k)` reads row `k` of the block into a register,
    /// `store(k, v)` writes `v` as its column `k`, and the body shuffles between them.
    macro_rules! block {
        ($(#[$doc:meta])* $name:ident: $side:literal square,
         $load:ident => $load_fn:ident, $store:ident => $store_fn:ident, $body:block) => {
            $(#[$doc])*
            struct $name;
            impl Block for $name {
                const SIDE: usize = $side;
                #[inline(always)]
                unsafe fn transpose(src: *const u8, src_ld: usize, dst: *mut u8, dst_ld: usize) {
                    let $load = |k: usize| $load_fn(src.add(k * src_ld).cast());
                    let $store = |k: usize, v| $store_fn(dst.add(k * dst_ld).cast(), v);
                    $body
                }
            }
        };
    }

    block!(
        /// 4-byte elements (f32): SSE's classic shuffle transposition.
        Sse4x4: 4 square, load => _mm_loadu_ps, store => _mm_storeu_ps, {
            let (r0, r1, r2, r3) = (load(0), load(1), load(2), load(3));
            let (t0, t1) = (_mm_unpacklo_ps(r0, r1), _mm_unpacklo_ps(r2, r3));
            let (t2, t3) = (_mm_unpackhi_ps(r0, r1), _mm_unpackhi_ps(r2, r3));
            store(0, _mm_movelh_ps(t0, t1));
            store(1, _mm_movehl_ps(t1, t0));
            store(2, _mm_movelh_ps(t2, t3));
            store(3, _mm_movehl_ps(t3, t2));
        }
    );

    block!(
        /// 8-byte elements (f64, c64) with SSE2, for CPUs without AVX.
        Sse2x2Of64: 2 square, load => _mm_loadu_pd, store => _mm_storeu_pd, {
            let (r0, r1) = (load(0), load(1));
            store(0, _mm_unpacklo_pd(r0, r1));
            store(1, _mm_unpackhi_pd(r0, r1));
        }
    );

    block!(
        /// 8-byte elements (f64, c64) with AVX.
        Avx4x4Of64: 4 square, load => _mm256_loadu_pd, store => _mm256_storeu_pd, {
            let (r0, r1, r2, r3) = (load(0), load(1), load(2), load(3));
            let (t0, t1) = (_mm256_unpacklo_pd(r0, r1), _mm256_unpackhi_pd(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_pd(r2, r3), _mm256_unpackhi_pd(r2, r3));
            store(0, _mm256_permute2f128_pd::<0x20>(t0, t2));
            store(1, _mm256_permute2f128_pd::<0x20>(t1, t3));
            store(2, _mm256_permute2f128_pd::<0x31>(t0, t2));
            store(3, _mm256_permute2f128_pd::<0x31>(t1, t3));
        }
    );

    block!(
        /// 16-byte elements (c128) with AVX.
        Avx2x2Of128: 2 square, load => _mm256_loadu_pd, store => _mm256_storeu_pd, {
            let (r0, r1) = (load(0), load(1));
            store(0, _mm256_permute2f128_pd::<0x20>(r0, r1));
            store(1, _mm256_permute2f128_pd::<0x31>(r0, r1));
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;

    /// Every element lands where the naive loop puts it, for each element size's kernel, block
    /// multiples and ragged edges, a source with a leading dimension past its columns, and an
    /// element size without a kernel.
    fn lands<T: Copy + PartialEq + std::fmt::Debug>(value: impl Fn(usize) -> T) {
        for (rows, cols) in [
            (0, 5),
            (5, 0),
            (1, 1),
            (3, 7),
            (4, 4),
            (8, 8),
            (17, 9),
            (64, 64),
            (130, 67),
        ] {
            for pad in [0, 3] {
                let src_ld = cols + pad;
                let src: Vec<T> = (0..rows * src_ld).map(&value).collect();
                let dst_ld = rows + 1;
                let mut dst = vec![value(usize::MAX); cols * dst_ld];
                unsafe {
                    transpose(Transposition {
                        src: src.as_ptr(),
                        src_ld,
                        dst: dst.as_mut_ptr(),
                        dst_ld,
                        rows,
                        cols,
                    })
                };
                for i in 0..rows {
                    for j in 0..cols {
                        assert_eq!(
                            dst[j * dst_ld + i],
                            src[i * src_ld + j],
                            "{rows}x{cols} ({i}, {j})"
                        );
                    }
                }
                for j in 0..cols {
                    assert_eq!(
                        dst[j * dst_ld + rows],
                        value(usize::MAX),
                        "{rows}x{cols} padding"
                    );
                }
            }
        }
    }

    #[test]
    fn every_element_size_lands_where_the_naive_loop_puts_it() {
        lands(|k| k as f32);
        lands(|k| k as f64);
        lands(|k| Complex::new(k as f32, -(k as f32)));
        lands(|k| Complex::new(k as f64, 0.5 - k as f64));
        lands(|k| k as u16);
    }
}
