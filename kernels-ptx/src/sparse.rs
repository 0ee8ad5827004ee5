//! Sparse matrix times dense matrix or vector on the GPU, the dense operands row-major:
//! CSR (jaxlib's `cpu_csr_sparse_dense_ffi` contract) and COO (jax's BCOO semantics).
//!
//! CSR: each output element `out[r, j]` is one work item, summed by `lanes` lanes of a warp
//! (a power of two up to 32: one lane per item for matrix products, whose neighbouring items
//! read neighbouring `rhs` elements; for a vector, as many lanes as the rows hold entries on
//! average, so that long rows are read by a whole warp at once). No atomics: each element is
//! written once, in one order of summation.
//!
//! COO: each (entry, column of `rhs`) pair adds its product into `out` (zeroed before the
//! launch) atomically, as XLA's scatter-add does; the order of the sums is unspecified.
//!
//! Neither kernel can report bad indices (that would make the host wait for the GPU); both
//! instead never touch memory outside the operands. CSR: offsets are clamped to `[0, nnz]` (a
//! row ending before it starts is empty) and an entry whose column is outside the matrix is
//! dropped. COO: jax's rules, a negative index counts from the end once and an entry still
//! outside the matrix is dropped (jax's padding); duplicates add up.

use crate::grid::{global_idx_x, grid_size_x, shfl};
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig, ScalarKind};
use crate::scalar::{Real, Scalar};

/// The index types of the sparse operands (jax's `int32` and `int64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    I32,
    I64,
}

impl IndexKind {
    pub const fn bytes(self) -> usize {
        match self {
            IndexKind::I32 => 4,
            IndexKind::I64 => 8,
        }
    }
}

/// A sparse index as the kernels read it.
pub trait Index: Copy {
    fn get(self) -> i64;
}

impl Index for i32 {
    #[inline(always)]
    fn get(self) -> i64 {
        self as i64
    }
}

impl Index for i64 {
    #[inline(always)]
    fn get(self) -> i64 {
        self
    }
}

/// Reals that the GPU adds to memory atomically (`red.add`; a compare-and-swap loop on the
/// host, whose emulated threads run concurrently).
pub trait AtomicAdd: Real {
    /// `*p += v`, atomically.
    ///
    /// # Safety
    /// `p` is valid for reads and writes and aligned.
    unsafe fn atomic_add(p: *mut Self, v: Self);
}

impl AtomicAdd for f32 {
    #[inline(always)]
    unsafe fn atomic_add(p: *mut f32, v: f32) {
        #[cfg(target_arch = "nvptx64")]
        core::arch::asm!("red.add.f32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v.to_bits(),
            options(nostack));
        #[cfg(not(target_arch = "nvptx64"))]
        {
            use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
            let _ = AtomicU32::from_ptr(p.cast()).fetch_update(Relaxed, Relaxed, |b| {
                Some((f32::from_bits(b) + v).to_bits())
            });
        }
    }
}

impl AtomicAdd for f64 {
    #[inline(always)]
    unsafe fn atomic_add(p: *mut f64, v: f64) {
        #[cfg(target_arch = "nvptx64")]
        core::arch::asm!("red.add.f64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v.to_bits(),
            options(nostack));
        #[cfg(not(target_arch = "nvptx64"))]
        {
            use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
            let _ = AtomicU64::from_ptr(p.cast()).fetch_update(Relaxed, Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            });
        }
    }
}

/// `*p += v`, atomically in each part (a complex sum is two real ones).
#[inline(always)]
unsafe fn add_atomically<T: Scalar>(p: *mut T, v: T)
where
    T::Real: AtomicAdd,
{
    let parts = p.cast::<T::Real>();
    T::Real::atomic_add(parts, v.re());
    if T::COMPLEX {
        T::Real::atomic_add(parts.add(1), v.im());
    }
}

kernel_args! {
    /// The arguments of every `ferrax_csr_sparse_dense` entry: a `rows x cols` CSR matrix
    /// (`outer` `[rows + 1]` offsets into `data` and `inner` `[nnz]`, the column of each entry;
    /// indices of the entry's index type) times `rhs` `[cols, n]` into `out` `[rows, n]`, with
    /// `lanes` lanes (a power of two up to 32) summing each element of `out`.
    pub struct CsrArgs<T> {
        pub data: *const T,
        pub outer: *const u8,
        pub inner: *const u8,
        pub rhs: *const T,
        pub out: *mut T,
        pub rows: u64,
        pub cols: u64,
        pub n: u64,
        pub nnz: u64,
        pub lanes: u64,
    }
}

const WARP: u64 = 32;

/// Body of every `ferrax_csr_sparse_dense` entry (module docs), grid-striding over the
/// elements of `out`, `lanes` threads each.
#[inline(always)]
unsafe fn csr_kernel<T: Scalar, I: Index>(args: CsrArgs<T>) {
    let CsrArgs {
        data,
        outer,
        inner,
        rhs,
        out,
        rows,
        cols,
        n,
        nnz,
        lanes,
    } = args;
    let (outer, inner) = (outer.cast::<I>(), inner.cast::<I>());
    let (items, thread) = (rows * n, global_idx_x());
    let (lane, per_pass) = (thread % lanes, grid_size_x() / lanes);
    let mut item = thread / lanes;
    // The warp's first item: every lane runs the same passes, as the shuffles need.
    let mut first = (thread - thread % WARP) / lanes;
    let offset = |i: u64| (*outer.add(i as usize)).get().clamp(0, nnz as i64) as u64;
    while first < items {
        let mut sum = T::ZERO;
        if item < items {
            let (row, j) = (item / n, item % n);
            let (start, end) = (offset(row), offset(row + 1));
            let mut e = start + lane;
            while e < end {
                let col = (*inner.add(e as usize)).get();
                if 0 <= col && (col as u64) < cols {
                    sum = sum + *data.add(e as usize) * *rhs.add((col as u64 * n + j) as usize);
                }
                e += lanes;
            }
        }
        let mut distance = lanes / 2;
        while distance > 0 {
            let source = ((thread % WARP) ^ distance) as u32;
            sum = sum + sum.map_words(|w| shfl(w, source));
            distance /= 2;
        }
        if lane == 0 && item < items {
            *out.add(item as usize) = sum;
        }
        item += per_pass;
        first += per_pass;
    }
}

kernel_args! {
    /// The arguments of every `ferrax_coo_sparse_dense` entry: a `rows x cols` COO matrix
    /// (`nnz` entries: `data`, and the row and column of entry `e` at `row[e * index_stride]`
    /// and `col[e * index_stride]`, of the entry's index type; jax's `[nnz, 2]` indices are
    /// `col = row + 1` with stride 2) times `rhs` `[k, n]` added into `out` `[m, n]`: `k x m`
    /// is `cols x rows`, or `rows x cols` where `transpose` is 1 (`out += Aᵀ rhs`).
    pub struct CooArgs<T> {
        pub data: *const T,
        pub row: *const u8,
        pub col: *const u8,
        pub rhs: *const T,
        pub out: *mut T,
        pub index_stride: u64,
        pub nnz: u64,
        pub rows: u64,
        pub cols: u64,
        pub n: u64,
        pub transpose: u64,
    }
}

/// `index` within `[0, len)` by jax's rules (a negative one counts from the end, once), or
/// None for an entry to drop.
#[inline(always)]
fn within(index: i64, len: u64) -> Option<u64> {
    let index = if index < 0 { index + len as i64 } else { index };
    (0 <= index && (index as u64) < len).then_some(index as u64)
}

/// Body of every `ferrax_coo_sparse_dense` entry (module docs): a thread per (entry, column
/// of `rhs`), grid-striding.
#[inline(always)]
unsafe fn coo_kernel<T: Scalar, I: Index>(args: CooArgs<T>)
where
    T::Real: AtomicAdd,
{
    let CooArgs {
        data,
        row,
        col,
        rhs,
        out,
        index_stride,
        nnz,
        rows,
        cols,
        n,
        transpose,
    } = args;
    let (row, col) = (row.cast::<I>(), col.cast::<I>());
    let mut item = global_idx_x();
    while item < nnz * n {
        let (e, j) = (item / n, item % n);
        let at = (e * index_stride) as usize;
        let position = (
            within((*row.add(at)).get(), rows),
            within((*col.add(at)).get(), cols),
        );
        if let (Some(r), Some(c)) = position {
            let (to, from) = if transpose != 0 { (c, r) } else { (r, c) };
            let product = *data.add(e as usize) * *rhs.add((from * n + j) as usize);
            add_atomically(out.add((to * n + j) as usize), product);
        }
        item += grid_size_x();
    }
}

kernel_entries! {
    /// `ferrax_csr_sparse_dense_<dtype>_<index>`.
    pub const CSR: Kernels<(ScalarKind, IndexKind), CsrArgs<_>>;
    names [csr_sparse_dense] dtype variant;
    variants {
        i32 => (IndexKind::I32, csr_kernel::<_, i32>),
        i64 => (IndexKind::I64, csr_kernel::<_, i64>),
    }
    f32: i32 i64;
    f64: i32 i64;
    c64: i32 i64;
    c128: i32 i64;
}

kernel_entries! {
    /// `ferrax_coo_sparse_dense_<dtype>_<index>`.
    pub const COO: Kernels<(ScalarKind, IndexKind), CooArgs<_>>;
    names [coo_sparse_dense] dtype variant;
    variants {
        i32 => (IndexKind::I32, coo_kernel::<_, i32>),
        i64 => (IndexKind::I64, coo_kernel::<_, i64>),
    }
    f32: i32 i64;
    f64: i32 i64;
    c64: i32 i64;
    c128: i32 i64;
}

/// Threads per block of both kernels.
const BLOCK: u64 = 256;

/// A grid of whole blocks for `threads` threads, at most 32 blocks per SM (more would only
/// wait; the kernels grid-stride).
fn grid(threads: u64, multiprocessors: u32) -> u32 {
    threads
        .div_ceil(BLOCK)
        .clamp(1, 32 * u64::from(multiprocessors.max(1))) as u32
}

/// The launch of the CSR product of a `rows`-row matrix with `nnz` entries (past padding
/// included) and `n` right-hand columns on a device with `multiprocessors` SMs, and its
/// `lanes` argument.
pub fn csr_launch_config(
    kind: ScalarKind,
    index: IndexKind,
    rows: u64,
    nnz: u64,
    n: u64,
    multiprocessors: u32,
) -> (LaunchConfig<CsrArgs<AnyElement>>, u64) {
    let lanes = if n == 1 {
        // The largest power of two not above the mean row length, from 1 to a warp.
        let mean = (nnz / rows.max(1)).clamp(1, WARP);
        1 << mean.ilog2()
    } else {
        1
    };
    let threads = rows.saturating_mul(n).saturating_mul(lanes);
    let config = CSR
        .launch(
            (kind, index),
            grid(threads, multiprocessors),
            BLOCK as u32,
            0,
        )
        .expect("every dtype has both index types");
    (config, lanes)
}

/// The launch of the COO product of `nnz` entries and `n` right-hand columns on a device with
/// `multiprocessors` SMs.
pub fn coo_launch_config(
    kind: ScalarKind,
    index: IndexKind,
    nnz: u64,
    n: u64,
    multiprocessors: u32,
) -> LaunchConfig<CooArgs<AnyElement>> {
    let threads = nnz.saturating_mul(n);
    COO.launch(
        (kind, index),
        grid(threads, multiprocessors),
        BLOCK as u32,
        0,
    )
    .expect("every dtype has both index types")
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use num_complex::Complex;
    use std::vec::Vec;

    /// Deterministic values in [-1, 1) (xorshift).
    struct Values(u64);
    impl Values {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        }
        fn below(&mut self, n: u64) -> u64 {
            ((self.next() + 1.0) / 2.0 * n as f64) as u64 % n.max(1)
        }
    }

    /// `|got - want| <= tol · (1 + |want|)` elementwise, in the modulus.
    fn close<T: Scalar>(got: &[T], want: &[T], tol: f64, what: &str)
    where
        T::Real: Into<f64>,
    {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let (err, size): (f64, f64) = ((g - w).cabs().into(), w.cabs().into());
            assert!(err <= tol * (1.0 + size), "{what}: element {i}: {err}");
        }
    }

    /// A random CSR matrix with rows of 0 to `max_row` entries, and `pad` entries past the end
    /// (as jax pads BCSR), whose columns are garbage.
    fn random_csr(
        values: &mut Values,
        rows: u64,
        cols: u64,
        max_row: u64,
        pad: u64,
    ) -> (Vec<i64>, Vec<i64>) {
        let mut outer = std::vec![0i64];
        let mut inner = Vec::new();
        for _ in 0..rows {
            for _ in 0..values.below(max_row + 1) {
                inner.push(values.below(cols) as i64);
            }
            outer.push(inner.len() as i64);
        }
        inner.extend((0..pad).map(|p| 1_000_000 + p as i64));
        (outer, inner)
    }

    /// The product of a CSR matrix with `rhs` `[cols, n]`, summed entry by entry, skipping
    /// columns outside the matrix and clamping offsets as the kernel does.
    fn csr_reference<T: Scalar>(
        data: &[T],
        outer: &[i64],
        inner: &[i64],
        cols: u64,
        rhs: &[T],
        n: usize,
    ) -> Vec<T> {
        let rows = outer.len() - 1;
        let clamp = |o: i64| o.clamp(0, data.len() as i64) as usize;
        let mut out = std::vec![T::ZERO; rows * n];
        for r in 0..rows {
            for e in clamp(outer[r])..clamp(outer[r + 1]).max(clamp(outer[r])) {
                if (0..cols as i64).contains(&inner[e]) {
                    for j in 0..n {
                        out[r * n + j] = out[r * n + j] + data[e] * rhs[inner[e] as usize * n + j];
                    }
                }
            }
        }
        out
    }

    fn index_bytes(v: &[i64], index: IndexKind) -> Vec<u8> {
        match index {
            IndexKind::I32 => v.iter().flat_map(|&i| (i as i32).to_ne_bytes()).collect(),
            IndexKind::I64 => v.iter().flat_map(|&i| i.to_ne_bytes()).collect(),
        }
    }

    /// Indices as an aligned buffer of the index type (bytes in u64 words).
    fn aligned(bytes: Vec<u8>) -> Vec<u64> {
        let mut words = std::vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: the words hold at least `bytes.len()` bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast(), bytes.len())
        };
        words
    }

    fn check_csr<T: Scalar + 'static>(kind: ScalarKind, make: impl Fn(f64, f64) -> T, tol: f64)
    where
        T::Real: Into<f64>,
    {
        let mut values = Values(0x5eed + kind.bytes() as u64);
        let draw = |len: usize, values: &mut Values| -> Vec<T> {
            (0..len)
                .map(|_| make(values.next(), values.next()))
                .collect()
        };
        // (rows, cols, longest row, padding, n): short and long rows for each lane count.
        for (rows, cols, max_row, pad, n) in [
            (9, 7, 3, 0, 1),
            (40, 50, 70, 5, 1),
            (5, 200, 190, 0, 1),
            (33, 12, 6, 3, 3),
            (7, 9, 4, 0, 40),
            (0, 4, 0, 2, 1),
        ] {
            let (mut outer, mut inner) = random_csr(&mut values, rows, cols, max_row, pad);
            if inner.len() > 3 && rows > 2 {
                // A column outside the matrix, a negative one, offsets out of order.
                inner[0] = cols as i64;
                inner[1] = -1;
                outer[2] = outer[1] - 1;
            }
            let data = draw(inner.len(), &mut values);
            let rhs = draw((cols * n) as usize, &mut values);
            let want = csr_reference(&data, &outer, &inner, cols, &rhs, n as usize);
            for index in [IndexKind::I32, IndexKind::I64] {
                let (outer_words, inner_words) = (
                    aligned(index_bytes(&outer, index)),
                    aligned(index_bytes(&inner, index)),
                );
                let (config, lanes) =
                    csr_launch_config(kind, index, rows, inner.len() as u64, n, 1);
                // The plan's grid, and a smaller one that must stride.
                for grid in [config.grid, 1] {
                    let mut out = std::vec![make(9.0, 9.0); (rows * n) as usize];
                    let args = CsrArgs {
                        data: data.as_ptr(),
                        outer: outer_words.as_ptr().cast(),
                        inner: inner_words.as_ptr().cast(),
                        rhs: rhs.as_ptr(),
                        out: out.as_mut_ptr(),
                        rows,
                        cols,
                        n,
                        nnz: inner.len() as u64,
                        lanes,
                    };
                    unsafe {
                        crate::launch::run_on_host(config.kernel, grid, config.block, 0, args)
                    };
                    close(
                        &out,
                        &want,
                        tol,
                        &std::format!(
                            "{kind:?} {index:?} {rows}x{cols} n={n} lanes={lanes} grid={grid}"
                        ),
                    );
                }
            }
        }
    }

    #[test]
    fn csr_products_match_the_sequential_sum() {
        check_csr(ScalarKind::F32, |re, _| re as f32, 1e-5);
        check_csr(ScalarKind::F64, |re, _| re, 1e-13);
        check_csr(
            ScalarKind::C64,
            |re, im| Complex::new(re as f32, im as f32),
            1e-5,
        );
        check_csr(ScalarKind::C128, Complex::new, 1e-13);
    }

    #[test]
    fn lanes_follow_the_mean_row_length() {
        let lanes =
            |rows, nnz, n| csr_launch_config(ScalarKind::F32, IndexKind::I32, rows, nnz, n, 132).1;
        assert_eq!(lanes(100, 500, 1), 4);
        assert_eq!(lanes(10, 10_000, 1), 32);
        assert_eq!(lanes(100, 10, 1), 1);
        assert_eq!(lanes(0, 10, 1), 8);
        assert_eq!(lanes(100, 10_000, 8), 1);
    }

    fn check_coo<T: Scalar + 'static>(kind: ScalarKind, make: impl Fn(f64, f64) -> T, tol: f64)
    where
        T::Real: Into<f64> + AtomicAdd,
    {
        let mut values = Values(0xc00 + kind.bytes() as u64);
        let draw = |len: usize, values: &mut Values| -> Vec<T> {
            (0..len)
                .map(|_| make(values.next(), values.next()))
                .collect()
        };
        for (rows, cols, nnz, n) in [
            (6, 5, 20, 1),
            (30, 17, 300, 4),
            (3, 40, 0, 2),
            (8, 8, 50, 33),
        ] {
            // Row-major [nnz, 2] indices, some negative (from the end), some outside (dropped),
            // duplicates likely.
            let mut indices = Vec::new();
            for e in 0..nnz {
                let (r, c) = (values.below(rows) as i64, values.below(cols) as i64);
                let (r, c) = match e % 7 {
                    3 => (r - rows as i64, c),
                    5 => (r, c + cols as i64),
                    6 => (-(rows as i64) - 1, c),
                    _ => (r, c),
                };
                indices.extend([r, c]);
            }
            let data = draw(nnz as usize, &mut values);
            for transpose in [false, true] {
                let (m, k) = if transpose {
                    (cols, rows)
                } else {
                    (rows, cols)
                };
                let rhs = draw((k * n) as usize, &mut values);
                let mut want = std::vec![T::ZERO; (m * n) as usize];
                for e in 0..nnz as usize {
                    let fix = |i: i64, len: u64| if i < 0 { i + len as i64 } else { i };
                    let (r, c) = (fix(indices[2 * e], rows), fix(indices[2 * e + 1], cols));
                    if !((0..rows as i64).contains(&r) && (0..cols as i64).contains(&c)) {
                        continue;
                    }
                    let (to, from) = if transpose { (c, r) } else { (r, c) };
                    for j in 0..n as usize {
                        let at = to as usize * n as usize + j;
                        want[at] = want[at] + data[e] * rhs[from as usize * n as usize + j];
                    }
                }
                for index in [IndexKind::I32, IndexKind::I64] {
                    let words = aligned(index_bytes(&indices, index));
                    let bytes = index.bytes();
                    let config = coo_launch_config(kind, index, nnz, n, 1);
                    for grid in [config.grid, 1] {
                        let mut out = std::vec![T::ZERO; (m * n) as usize];
                        let row = words.as_ptr().cast::<u8>();
                        let args = CooArgs {
                            data: data.as_ptr(),
                            row,
                            col: row.wrapping_add(bytes),
                            rhs: rhs.as_ptr(),
                            out: out.as_mut_ptr(),
                            index_stride: 2,
                            nnz,
                            rows,
                            cols,
                            n,
                            transpose: transpose as u64,
                        };
                        unsafe {
                            crate::launch::run_on_host(config.kernel, grid, config.block, 0, args)
                        };
                        close(&out, &want, tol, &std::format!("{kind:?} {index:?} {rows}x{cols} nnz={nnz} n={n} transpose={transpose}"));
                    }
                }
            }
        }
    }

    #[test]
    fn coo_products_match_the_sequential_sum() {
        check_coo(ScalarKind::F32, |re, _| re as f32, 1e-5);
        check_coo(ScalarKind::F64, |re, _| re, 1e-13);
        check_coo(
            ScalarKind::C64,
            |re, im| Complex::new(re as f32, im as f32),
            1e-5,
        );
        check_coo(ScalarKind::C128, Complex::new, 1e-13);
    }
}
