extern crate std;

use super::*;
use crate::launch::run_on_host;
use num_complex::Complex;
use std::vec;
use std::vec::Vec;

/// Element types under test: their kind, random values and an exact comparison.
pub(super) trait TestScalar: Scalar + core::fmt::Debug + Send + Sync + 'static {
    const KIND: ScalarKind;
    const EPS: f64;
    fn from_parts(re: f64, im: f64) -> Self;
    fn c128(self) -> Complex<f64>;
    fn bits(self) -> (u64, u64);
    /// Same bits, or NaN in the same parts (NaN payloads are not compared).
    fn same(self, other: Self) -> bool {
        let (x, y) = (self.c128(), other.c128());
        let part = |a: f64, b: f64, ab: u64, bb: u64| (a.is_nan() && b.is_nan()) || ab == bb;
        let (sb, ob) = (self.bits(), other.bits());
        part(x.re, y.re, sb.0, ob.0) && part(x.im, y.im, sb.1, ob.1)
    }
}

impl TestScalar for f32 {
    const KIND: ScalarKind = ScalarKind::F32;
    const EPS: f64 = f32::EPSILON as f64;
    fn from_parts(re: f64, _: f64) -> Self {
        re as f32
    }
    fn c128(self) -> Complex<f64> {
        Complex::new(self as f64, 0.0)
    }
    fn bits(self) -> (u64, u64) {
        (self.to_bits() as u64, 0)
    }
}
impl TestScalar for f64 {
    const KIND: ScalarKind = ScalarKind::F64;
    const EPS: f64 = f64::EPSILON;
    fn from_parts(re: f64, _: f64) -> Self {
        re
    }
    fn c128(self) -> Complex<f64> {
        Complex::new(self, 0.0)
    }
    fn bits(self) -> (u64, u64) {
        (self.to_bits(), 0)
    }
}
impl TestScalar for Complex<f32> {
    const KIND: ScalarKind = ScalarKind::C64;
    const EPS: f64 = f32::EPSILON as f64;
    fn from_parts(re: f64, im: f64) -> Self {
        Complex::new(re as f32, im as f32)
    }
    fn c128(self) -> Complex<f64> {
        Complex::new(self.re as f64, self.im as f64)
    }
    fn bits(self) -> (u64, u64) {
        (self.re.to_bits() as u64, self.im.to_bits() as u64)
    }
}
impl TestScalar for Complex<f64> {
    const KIND: ScalarKind = ScalarKind::C128;
    const EPS: f64 = f64::EPSILON;
    fn from_parts(re: f64, im: f64) -> Self {
        Complex::new(re, im)
    }
    fn c128(self) -> Complex<f64> {
        self
    }
    fn bits(self) -> (u64, u64) {
        (self.re.to_bits(), self.im.to_bits())
    }
}

/// xorshift64 values in ±[0.05, 1), never zero.
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let x = 0.05 + 0.95 * ((self.0 >> 11) as f64 / (1u64 << 53) as f64);
        if self.0 & 1 == 0 {
            x
        } else {
            -x
        }
    }
    pub(super) fn value<T: TestScalar>(&mut self) -> T {
        T::from_parts(self.unit(), self.unit())
    }
    pub(super) fn matrices<T: TestScalar>(&mut self, len: usize) -> Vec<T> {
        (0..len).map(|_| self.value()).collect()
    }
}

/// The `batch` column-major `rows×cols` matrices of `a`, each transposed: row-major, or (with
/// `rows` and `cols` swapped) back to column-major.
pub(super) fn transposed<T: Copy>(a: &[T], rows: usize, cols: usize) -> Vec<T> {
    let len = rows * cols;
    let mut out = a.to_vec();
    for (src, dst) in a
        .chunks_exact(len.max(1))
        .zip(out.chunks_exact_mut(len.max(1)))
    {
        for j in 0..cols {
            for i in 0..rows {
                dst[i * cols + j] = src[j * rows + i];
            }
        }
    }
    out
}

/// Runs the kernel the plan picks (with `threads` per block) on the emulated grid, on
/// column-major matrices: in place, or (`row_major`) out of place from a row-major copy into
/// `a`, transposed back here.
fn run_getrf<T: TestScalar>(
    a: &mut [T],
    m: u32,
    n: u32,
    batch: u64,
    threads: u32,
    row_major: bool,
) -> (Vec<i32>, Vec<i32>) {
    let source = if row_major {
        let rows = transposed(a, m as usize, n as usize);
        a.fill(T::from_parts(-7.0, 3.0)); // every element must be written
        rows
    } else {
        Vec::new()
    };
    let (variant, grid_dim, block, shared) =
        plan(T::KIND, m, n, batch, Some(threads), HOPPER_SHARED).unwrap();
    let mut ipiv = vec![-7; batch as usize * m.min(n) as usize];
    let mut info = vec![-7; batch as usize];
    let factors = a.as_mut_ptr();
    let args = GetrfArgs {
        // Out of place from the row-major copy, or in place.
        src: if row_major { source.as_ptr() } else { factors },
        a: factors,
        ipiv: ipiv.as_mut_ptr(),
        info: info.as_mut_ptr(),
        m,
        n,
        batch,
        row_major: row_major as u32,
    };
    let scratch = shared + block as usize * HOST_EXCHANGE_BYTES_PER_THREAD;
    let kernel = GETRF.name((T::KIND, variant)).unwrap();
    unsafe { run_on_host(kernel, grid_dim, block, scratch, args) };
    if row_major {
        a.copy_from_slice(&transposed(a, n as usize, m as usize));
    }
    (ipiv, info)
}

fn run_potrf<T: TestScalar>(
    a: &mut [T],
    n: u32,
    batch: u64,
    lower: bool,
    threads: u32,
) -> Vec<i32> {
    let (variant, grid_dim, block, shared) =
        plan(T::KIND, n, n, batch, Some(threads), HOPPER_SHARED).unwrap();
    let mut info = vec![-7; batch as usize];
    let args = PotrfArgs {
        a: a.as_mut_ptr(),
        info: info.as_mut_ptr(),
        n,
        batch,
        lower: lower as u32,
    };
    let scratch = shared + block as usize * HOST_EXCHANGE_BYTES_PER_THREAD;
    let kernel = POTRF.name((T::KIND, variant)).unwrap();
    unsafe { run_on_host(kernel, grid_dim, block, scratch, args) };
    info
}

/// The library's sequential xGETF2 (the CPU handlers' small path): returns (ipiv, info).
fn reference_getrf<T: Scalar>(a: &mut [T], m: usize, n: usize) -> (Vec<i32>, i32) {
    let mut ipiv = vec![0; m.min(n)];
    let info = getf2(a, m, n, m.max(1), &mut ipiv);
    (ipiv, info)
}

/// The library's sequential right-looking Cholesky, the kernels' operation order; returns info.
fn reference_potrf<T: Scalar>(a: &mut [T], n: usize, lower: bool) -> i32 {
    potf2(a, n, n.max(1), lower)
}

/// The sequential routines with `lda > m`: same results as packed, padding and (potf2) the
/// other triangle untouched, LAPACK's info for singular and indefinite input.
fn sequential_strided<T: TestScalar>() {
    let pad = T::from_parts(-123.0, 45.0);
    for &(m, n) in &[(1usize, 1usize), (3, 2), (2, 3), (5, 5), (16, 16), (9, 4)] {
        let lda = m + 3;
        let packed = Rng(m as u64 * 31 + n as u64).matrices::<T>(m * n);
        let mut strided = vec![pad; lda * n];
        for j in 0..n {
            strided[j * lda..j * lda + m].copy_from_slice(&packed[j * m..(j + 1) * m]);
        }
        let (want_ipiv, want_info) = reference_getrf(&mut packed.clone(), m, n);
        let mut want = packed.clone();
        reference_getrf(&mut want, m, n);
        let mut ipiv = vec![0; m.min(n)];
        assert_eq!(getf2(&mut strided, m, n, lda, &mut ipiv), want_info);
        assert_eq!(ipiv, want_ipiv);
        for j in 0..n {
            assert_same(
                &strided[j * lda..j * lda + m],
                &want[j * m..(j + 1) * m],
                "getf2",
            );
            assert_same(&strided[j * lda + m..(j + 1) * lda], &[pad; 3], "padding");
        }
    }
    // Column 1 zero: info 2, column 3 zero as well: still 2.
    let mut a = Rng(5).matrices::<T>(16);
    for i in 0..4 {
        a[4 + i] = T::ZERO;
        a[12 + i] = T::ZERO;
    }
    assert_eq!(getf2(&mut a, 4, 4, 4, &mut [0; 4]), 2);

    for lower in [true, false] {
        for n in [1usize, 2, 4, 7, 16] {
            let lda = n + 2;
            // B·Bᴴ + n·I: Hermitian positive definite.
            let b = Rng(n as u64 + 77).matrices::<T>(n * n);
            let mut spd = vec![pad; lda * n];
            for i in 0..n {
                for k in 0..n {
                    let mut s = if i == k {
                        T::from_parts(n as f64, 0.0)
                    } else {
                        T::ZERO
                    };
                    for t in 0..n {
                        s = s + b[t * n + i] * b[t * n + k].conj();
                    }
                    spd[k * lda + i] = s;
                }
            }
            let mut packed: Vec<T> = (0..n * n).map(|e| spd[(e / n) * lda + e % n]).collect();
            let want_info = reference_potrf(&mut packed, n, lower);
            assert_eq!(want_info, 0);
            let input = spd.clone();
            assert_eq!(potf2(&mut spd, n, lda, lower), 0);
            for k in 0..n {
                for i in 0..lda {
                    let (g, w) = (spd[k * lda + i], input[k * lda + i]);
                    let factor = i < n && if lower { i >= k } else { i <= k };
                    let w = if factor { packed[k * n + i] } else { w };
                    assert!(
                        g.same(w),
                        "potf2 lower={lower} n={n} ({i},{k}): {g:?} != {w:?}"
                    );
                }
            }
            // Indefinite at column n: info n, the updated diagonal left in place.
            if n > 1 {
                let mut bad = input.clone();
                let last = (n - 1) * lda + n - 1;
                bad[last] = T::from_parts(-1e3, 0.0);
                assert_eq!(potf2(&mut bad, n, lda, lower), n as i32);
                assert!(bad[last].c128().re < 0.0);
                bad[0] = T::from_parts(f64::NAN, 0.0);
                assert_eq!(potf2(&mut bad, n, lda, lower), 1);
            }
        }
    }
}

#[test]
fn sequential_strided_all_types() {
    sequential_strided::<f32>();
    sequential_strided::<f64>();
    sequential_strided::<Complex<f32>>();
    sequential_strided::<Complex<f64>>();
}

pub(super) fn assert_same<T: TestScalar>(got: &[T], want: &[T], what: &str) {
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.same(*w), "{what}: element {e}: {g:?} != {w:?}");
    }
}

/// Checks P·A = L·U for one matrix (column-major, ipiv 1-based).
fn check_lu<T: TestScalar>(a: &[T], lu: &[T], ipiv: &[i32], m: usize, n: usize) {
    let mut pa: Vec<Complex<f64>> = a.iter().map(|x| x.c128()).collect();
    for (j, &p) in ipiv.iter().enumerate() {
        for k in 0..n {
            pa.swap(k * m + j, k * m + p as usize - 1);
        }
    }
    let scale = a.iter().map(|x| x.c128().l1_norm()).fold(0.0, f64::max);
    for i in 0..m {
        for k in 0..n {
            let mut s = Complex::new(0.0, 0.0);
            for t in 0..=i.min(k).min(m.min(n) - 1) {
                let l = if t == i {
                    Complex::new(1.0, 0.0)
                } else {
                    lu[t * m + i].c128()
                };
                s += l * lu[k * m + t].c128();
            }
            let err = (s - pa[k * m + i]).l1_norm();
            assert!(
                err <= 50.0 * T::EPS * scale * n as f64,
                "P·A != L·U at ({i},{k}): {err}"
            );
        }
    }
}

fn getrf_case<T: TestScalar>(m: u32, n: u32, batch: u64, threads: u32, seed: u64, row_major: bool) {
    let (mu, nu) = (m as usize, n as usize);
    let input = Rng(seed).matrices::<T>(batch as usize * mu * nu);
    let mut got = input.clone();
    let (ipiv, info) = run_getrf(&mut got, m, n, batch, threads, row_major);
    let k = mu.min(nu);
    for b in 0..batch as usize {
        let r = b * mu * nu..(b + 1) * mu * nu;
        let mut want = input[r.clone()].to_vec();
        let (want_ipiv, want_info) = reference_getrf(&mut want, mu, nu);
        let what = std::format!("{:?} {m}x{n} matrix {b}, row-major {row_major}", T::KIND);
        assert_same(&got[r.clone()], &want, &what);
        assert_eq!(&ipiv[b * k..(b + 1) * k], &want_ipiv[..], "{what}: ipiv");
        assert_eq!(info[b], want_info, "{what}: info");
        assert_eq!(info[b], 0, "{what}: random matrices are regular");
        check_lu(&input[r.clone()], &got[r], &want_ipiv, mu, nu);
    }
}

fn getrf_all_sizes<T: TestScalar>() {
    // Every variant, square and rectangular, with partly filled blocks.
    for (i, &(m, n, batch, threads)) in [
        (1, 1, 3, 32),
        (2, 3, 5, 32),
        (4, 4, 9, 32),
        (5, 5, 6, 32),
        (7, 3, 5, 64),
        (3, 7, 4, 32),
        (8, 8, 5, 32),
        (12, 12, 3, 32),
        (16, 16, 5, 64),
        (20, 13, 2, 32),
        (13, 20, 1, 32),
        (32, 32, 3, 64),
        (33, 33, 2, 64),
        (64, 64, 1, 64),
        (45, 17, 2, 64),
        (17, 45, 1, 64),
        (100, 100, 2, 128),
        (128, 70, 1, 128),
        (70, 128, 1, 128),
    ]
    .iter()
    .enumerate()
    {
        if plan(T::KIND, m, n, batch, Some(threads), HOPPER_SHARED).is_some() {
            for row_major in [false, true] {
                let seed = 0x9e37_79b9_7f4a_7c15 + i as u64;
                getrf_case::<T>(m, n, batch, threads, seed, row_major);
            }
        }
    }
}

#[test]
fn getrf_f32() {
    getrf_all_sizes::<f32>();
}
#[test]
fn getrf_f64() {
    getrf_all_sizes::<f64>();
}
#[test]
fn getrf_c64() {
    getrf_all_sizes::<Complex<f32>>();
}
#[test]
fn getrf_c128() {
    getrf_all_sizes::<Complex<f64>>();
}

/// Singular and NaN inputs: identical to xGETF2 (info, pivots, no extra NaN), and no hang.
fn getrf_special<T: TestScalar>() {
    for &(m, n, threads) in &[(6u32, 6u32, 32u32), (24, 24, 32), (40, 40, 64)] {
        let (mu, nu) = (m as usize, n as usize);
        let mut rng = Rng(7 + m as u64);
        // Matrix 0: column 2 zero; matrix 1: columns 0 and 3 zero (info = first);
        // matrix 2: a NaN inside; matrix 3: NaN as the first pivot candidate;
        // matrix 4: two equal columns (an exact zero pivot need not appear, info may be 0).
        let mut input = rng.matrices::<T>(5 * mu * nu);
        let at = |b: usize, i: usize, j: usize| b * mu * nu + j * mu + i;
        for i in 0..mu {
            input[at(0, i, 2)] = T::ZERO;
            input[at(1, i, 0)] = T::ZERO;
            input[at(1, i, 3)] = T::ZERO;
            input[at(4, i, 4)] = input[at(4, i, 1)];
        }
        input[at(2, 3, 1)] = T::from_parts(f64::NAN, 0.0);
        input[at(3, 0, 0)] = T::from_parts(f64::NAN, f64::NAN);
        let mut got = input.clone();
        let (ipiv, info) = run_getrf(&mut got, m, n, 5, threads, false);
        for b in 0..5 {
            let r = b * mu * nu..(b + 1) * mu * nu;
            let mut want = input[r.clone()].to_vec();
            let (want_ipiv, want_info) = reference_getrf(&mut want, mu, nu);
            let what = std::format!("{:?} {m}x{n} special {b}", T::KIND);
            assert_same(&got[r.clone()], &want, &what);
            assert_eq!(&ipiv[b * mu..(b + 1) * mu], &want_ipiv[..], "{what}: ipiv");
            assert_eq!(info[b], want_info, "{what}: info");
        }
        assert_eq!(info[0], 3);
        assert_eq!(info[1], 1);
        for x in &got[..2 * mu * nu] {
            let c = x.c128();
            assert!(
                c.re.is_finite() && c.im.is_finite(),
                "singular input made {c}"
            );
        }
        check_lu(&input[..mu * nu], &got[..mu * nu], &ipiv[..mu], mu, nu);
    }
}

#[test]
fn getrf_special_f32() {
    getrf_special::<f32>();
}
#[test]
fn getrf_special_f64() {
    getrf_special::<f64>();
}
#[test]
fn getrf_special_c64() {
    getrf_special::<Complex<f32>>();
}
#[test]
fn getrf_special_c128() {
    getrf_special::<Complex<f64>>();
}

/// Hermitian positive definite matrices B·Bᴴ + n·I, the unused triangle filled with markers.
fn spd<T: TestScalar>(rng: &mut Rng, n: usize, batch: usize) -> Vec<T> {
    let mut out = Vec::new();
    for _ in 0..batch {
        let b: Vec<Complex<f64>> = (0..n * n).map(|_| rng.value::<T>().c128()).collect();
        for j in 0..n {
            for i in 0..n {
                let mut s = Complex::new(if i == j { n as f64 } else { 0.0 }, 0.0);
                for k in 0..n {
                    s += b[k * n + i] * b[k * n + j].conj();
                }
                if i == j {
                    s.im = 0.0;
                }
                out.push(T::from_parts(s.re, s.im));
            }
        }
    }
    out
}

/// Overwrites the triangle the factorization must not read or write with markers.
fn mark_other_triangle<T: TestScalar>(a: &mut [T], n: usize, lower: bool) {
    for (e, x) in a.iter_mut().enumerate() {
        let (i, j) = (e % n, (e / n) % n);
        if (lower && i < j) || (!lower && i > j) {
            *x = T::from_parts(1000.0 + e as f64, -(e as f64));
        }
    }
}

fn check_cholesky<T: TestScalar>(a: &[T], f: &[T], n: usize, lower: bool) {
    // L(i, k) from the factor's triangle; then L·Lᴴ against A's triangle.
    let l = |i: usize, k: usize| {
        if k > i {
            Complex::new(0.0, 0.0)
        } else if lower {
            f[k * n + i].c128()
        } else {
            f[i * n + k].c128().conj()
        }
    };
    let scale = a.iter().map(|x| x.c128().l1_norm()).fold(0.0, f64::max);
    for i in 0..n {
        for j in 0..=i {
            let mut s = Complex::new(0.0, 0.0);
            for k in 0..=j {
                s += l(i, k) * l(j, k).conj();
            }
            let want = if lower {
                a[j * n + i].c128()
            } else {
                a[i * n + j].c128().conj()
            };
            let err = (s - want).l1_norm();
            assert!(
                err <= 50.0 * T::EPS * scale * n as f64,
                "L·Lᴴ != A at ({i},{j}): {err}"
            );
        }
    }
}

fn potrf_all<T: TestScalar>() {
    for (c, &(n, batch, threads)) in [
        (1u32, 3u64, 32u32),
        (3, 9, 32),
        (4, 2, 32),
        (6, 7, 32),
        (8, 4, 64),
        (13, 3, 32),
        (16, 2, 32),
        (25, 3, 64),
        (32, 2, 32),
        (40, 2, 64),
        (64, 1, 64),
        (100, 2, 128),
        (128, 1, 128),
    ]
    .iter()
    .enumerate()
    {
        if plan(T::KIND, n, n, batch, Some(threads), HOPPER_SHARED).is_none() {
            continue;
        }
        let nu = n as usize;
        for lower in [true, false] {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d + c as u64);
            let mut input = spd::<T>(&mut rng, nu, batch as usize);
            mark_other_triangle(&mut input, nu, lower);
            // The last matrix fails at column n/2 (a very negative diagonal entry), or is
            // NaN there for odd batches.
            let bad = (batch as usize - 1) * nu * nu + (nu / 2) * (nu + 1);
            if batch > 1 {
                input[bad] = T::from_parts(if batch % 2 == 1 { f64::NAN } else { -1e3 }, 0.0);
            }
            let mut got = input.clone();
            let info = run_potrf(&mut got, n, batch, lower, threads);
            for (b, &info) in info.iter().enumerate() {
                let r = b * nu * nu..(b + 1) * nu * nu;
                let mut want = input[r.clone()].to_vec();
                let want_info = reference_potrf(&mut want, nu, lower);
                let what = std::format!("{:?} n={n} lower={lower} matrix {b}", T::KIND);
                // Bitwise equal, the other triangle (markers) included.
                assert_same(&got[r.clone()], &want, &what);
                assert_eq!(info, want_info, "{what}: info");
                if batch > 1 && b == batch as usize - 1 {
                    assert_eq!(info, nu as i32 / 2 + 1, "{what}: info");
                } else {
                    assert_eq!(info, 0, "{what}: info");
                    check_cholesky(&input[r.clone()], &got[r], nu, lower);
                }
            }
        }
    }
}

/// jax's whole cholesky (`cholesky_rows`, or `cholesky_block` on at most two blocks) of the
/// row-major matrices `a`; returns L row-major.
fn run_cholesky<T: TestScalar>(
    a: &[T],
    n: u32,
    batch: u64,
    symmetrize: bool,
    threads: u32,
) -> Vec<T> {
    let (variant, grid_dim, block, shared) =
        plan(T::KIND, n, n, batch, Some(threads), MAX_SHARED_BYTES).unwrap();
    let grid_dim = if variant == Variant::Block {
        grid_dim.min(2)
    } else {
        grid_dim
    };
    let mut l = vec![T::from_parts(-7.0, 3.0); a.len()];
    let args = CholeskyArgs {
        a: a.as_ptr(),
        l: l.as_mut_ptr(),
        n,
        batch,
        symmetrize: symmetrize as u32,
    };
    let scratch = shared + block as usize * HOST_EXCHANGE_BYTES_PER_THREAD;
    let kernel = CHOLESKY.name((T::KIND, variant)).unwrap();
    unsafe { run_on_host(kernel, grid_dim, block, scratch, args) };
    l
}

/// The fused kernels against the sequential xPOTF2 of jax's symmetrized lower triangle, bit
/// for bit: zeros above the diagonal, NaN on and below it for a matrix that fails. Past 32 the
/// block kernel (its plan's 64 threads), on two blocks that loop over the batch.
fn cholesky_fused_all<T: TestScalar>() {
    for (c, &(n, batch, threads)) in [
        (1u32, 3u64, 32u32),
        (3, 9, 32),
        (6, 7, 32),
        (8, 4, 64),
        (13, 3, 32),
        (16, 2, 32),
        (25, 3, 64),
        (32, 2, 32),
        (33, 3, 64),
        (48, 5, 64),
    ]
    .iter()
    .enumerate()
    {
        let nu = n as usize;
        for symmetrize in [true, false] {
            let mut rng = Rng(0x5851_f42d_4c95_7f2d + c as u64);
            let mut input = spd::<T>(&mut rng, nu, batch as usize);
            // Not Hermitian: the upper triangle off by a few percent, so symmetrizing counts.
            for (e, x) in input.iter_mut().enumerate() {
                let (i, j) = (e % nu, (e / nu) % nu);
                if i < j {
                    let z = x.c128() * Complex::new(1.03, 0.02);
                    *x = T::from_parts(z.re, z.im);
                }
            }
            if batch > 1 {
                let bad = (batch as usize - 1) * nu * nu + (nu / 2) * (nu + 1);
                input[bad] = T::from_parts(-1e3, 0.0);
            }
            let got = run_cholesky(&transposed(&input, nu, nu), n, batch, symmetrize, threads);
            let half = T::from_parts(0.5, 0.0);
            for b in 0..batch as usize {
                let a = &input[b * nu * nu..(b + 1) * nu * nu];
                let mut lower = a.to_vec();
                if symmetrize {
                    for k in 0..nu {
                        for i in k..nu {
                            lower[k * nu + i] = (a[k * nu + i] + a[i * nu + k].conj()) * half;
                        }
                    }
                }
                let info = reference_potrf(&mut lower, nu, true);
                let want: Vec<T> = (0..nu * nu)
                    .map(|e| {
                        let (i, k) = (e / nu, e % nu);
                        if k > i {
                            T::ZERO
                        } else if info != 0 {
                            T::from_parts(f64::NAN, 0.0)
                        } else {
                            lower[k * nu + i]
                        }
                    })
                    .collect();
                let what = std::format!("{:?} n={n} symmetrize={symmetrize} matrix {b}", T::KIND);
                assert_same(&got[b * nu * nu..(b + 1) * nu * nu], &want, &what);
                assert_eq!(
                    info != 0,
                    batch > 1 && b == batch as usize - 1,
                    "{what}: info"
                );
            }
        }
    }
}

#[test]
fn cholesky_fused_all_types() {
    cholesky_fused_all::<f32>();
    cholesky_fused_all::<f64>();
    cholesky_fused_all::<Complex<f32>>();
    cholesky_fused_all::<Complex<f64>>();
}

#[test]
fn potrf_f32() {
    potrf_all::<f32>();
}
#[test]
fn potrf_f64() {
    potrf_all::<f64>();
}
#[test]
fn potrf_c64() {
    potrf_all::<Complex<f32>>();
}
#[test]
fn potrf_c128() {
    potrf_all::<Complex<f64>>();
}

/// Hopper's opt-in shared memory per block.
const HOPPER_SHARED: usize = 227 << 10;

#[test]
fn fused_cholesky_plans() {
    // The block kernel up to 48 in every dtype, within the default shared memory.
    for kind in [
        ScalarKind::F32,
        ScalarKind::F64,
        ScalarKind::C64,
        ScalarKind::C128,
    ] {
        let chol = cholesky_launch(kind, FUSED_CHOLESKY_BLOCK_MAX, 1000).unwrap();
        assert!(chol.kernel.ends_with("_block"), "{}", chol.kernel);
        assert_eq!((chol.grid, chol.block), (1000, 64));
        assert!(chol.shared_bytes as usize <= MAX_SHARED_BYTES);
        assert!(cholesky_launch(kind, FUSED_CHOLESKY_BLOCK_MAX + 1, 1).is_none());
        assert!(cholesky_launch(kind, 32, 1)
            .unwrap()
            .kernel
            .ends_with("_w32"));
    }
}

#[test]
fn plans() {
    let lu = getrf_launch(ScalarKind::F32, 32, 32, 16384, HOPPER_SHARED).unwrap();
    assert_eq!(lu.kernel, "ferrax_getrf_small_f32_w32");
    assert_eq!((lu.grid, lu.block), (4096, 128));
    let chol = potrf_launch(ScalarKind::C128, 32, 3, HOPPER_SHARED).unwrap();
    assert_eq!(
        (chol.kernel, chol.grid, chol.block),
        ("ferrax_potrf_small_c128_w32", 2, 64)
    );
    assert!(chol.shared_bytes as usize <= MAX_SHARED_BYTES);
    assert_eq!(
        getrf_launch(ScalarKind::F64, 3, 40, 5, HOPPER_SHARED)
            .unwrap()
            .kernel,
        "ferrax_getrf_small_f64_block"
    );
    assert_eq!(
        potrf_launch(ScalarKind::C64, 1, 0, HOPPER_SHARED)
            .unwrap()
            .grid,
        0,
        "batch 0: nothing to launch"
    );
    // The block kernels: 64 threads up to 64, then 128, within the device's shared memory.
    let lu = getrf_launch(ScalarKind::F64, 128, 128, 1024, HOPPER_SHARED).unwrap();
    assert_eq!(
        (lu.kernel, lu.grid, lu.block),
        ("ferrax_getrf_small_f64_block", 1024, 128)
    );
    assert_eq!(
        getrf_launch(ScalarKind::F32, 65, 8, 1, HOPPER_SHARED)
            .unwrap()
            .block,
        128
    );
    assert!(getrf_launch(ScalarKind::F32, 129, 8, 1, HOPPER_SHARED).is_none());
    assert!(getrf_launch(ScalarKind::C128, 128, 128, 1, HOPPER_SHARED).is_none());
    assert!(
        potrf_launch(ScalarKind::C128, 64, 1, 48 << 10).is_none(),
        "64 KiB of shared memory"
    );
    assert!(potrf_launch(ScalarKind::C128, 64, 1, HOPPER_SHARED).is_some());
    assert!(potrf_launch(ScalarKind::F64, 64, 1, 48 << 10).is_some());
}

#[test]
fn empty_matrices_report_success() {
    let mut a: Vec<f64> = Vec::new();
    let (ipiv, info) = run_getrf(&mut a, 0, 3, 2, 32, true);
    assert!(ipiv.is_empty());
    assert_eq!(info, [0, 0]);
}

/// `trsm` for every side, triangle, transpose and diagonal, with leading dimensions above the
/// row counts: op(A)·X (or X·op(A)) must give back B, and nothing outside X may change.
fn trsm_all<T: TestScalar>() {
    let mut rng = Rng(0x7215);
    for (m, n) in [(1, 1), (4, 3), (3, 7), (16, 16), (9, 2)] {
        for &left in &[true, false] {
            for &lower in &[true, false] {
                for trans in [Transpose::No, Transpose::Yes, Transpose::Conjugate] {
                    for &unit in &[false, true] {
                        let k = if left { m } else { n };
                        let (lda, ldb) = (k + 2, m + 1);
                        let mut a: Vec<T> = rng.matrices(lda * k);
                        for j in 0..k {
                            a[j * lda + j] = T::from_parts(2.0 + k as f64, 0.5);
                            // well conditioned
                        }
                        let b: Vec<T> = rng.matrices(ldb * n);
                        let mut x = b.clone();
                        trsm(left, lower, trans, unit, m, n, &a, lda, &mut x, ldb);
                        // op(A)(i, j) as a full matrix, zero outside the triangle.
                        let op = |i: usize, j: usize| {
                            let (r, c) = if trans == Transpose::No {
                                (i, j)
                            } else {
                                (j, i)
                            };
                            let v = if r == c && unit {
                                Complex::new(1.0, 0.0)
                            } else if (lower && r >= c) || (!lower && r <= c) {
                                a[c * lda + r].c128()
                            } else {
                                Complex::new(0.0, 0.0)
                            };
                            if trans == Transpose::Conjugate {
                                v.conj()
                            } else {
                                v
                            }
                        };
                        let xs = |i: usize, j: usize| x[j * ldb + i].c128();
                        for i in 0..m {
                            for j in 0..n {
                                let mut s = Complex::new(0.0, 0.0);
                                for l in 0..k {
                                    s += if left {
                                        op(i, l) * xs(l, j)
                                    } else {
                                        xs(i, l) * op(l, j)
                                    };
                                }
                                let err = (s - b[j * ldb + i].c128()).l1_norm();
                                assert!(
                                    err <= 100.0 * T::EPS * k as f64,
                                    "{m}x{n} left {left} lower {lower} {trans:?} unit {unit}: \
                                     residual {err} at ({i},{j})"
                                );
                            }
                        }
                        for j in 0..n {
                            let padding = j * ldb + m;
                            assert!(padding >= x.len() || x[padding].same(b[padding]));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn trsm_all_types() {
    trsm_all::<f32>();
    trsm_all::<f64>();
    trsm_all::<Complex<f32>>();
    trsm_all::<Complex<f64>>();
}

#[test]
fn trsm_singular_spreads_non_finite_values() {
    // A zero pivot in row 1 of a lower A: x1 = b1·∞, and x2, x3 depend on it, x0 does not.
    let mut a = vec![0.0f64; 16];
    for j in 0..4 {
        for i in j..4 {
            a[j * 4 + i] = 1.0 + (i + j) as f64;
        }
    }
    a[5] = 0.0;
    let mut b = vec![1.0, 2.0, 3.0, 4.0];
    trsm(true, true, Transpose::No, false, 4, 1, &a, 4, &mut b, 4);
    assert!(b[0].is_finite() && !b[1].is_finite() && !b[2].is_finite() && !b[3].is_finite());
}

/// `simd::getf2` and `simd::potf2` against the one-matrix routines, bit for bit, on
/// random matrices with special ones mixed in: singular (zero columns, equal rows), NaN, tiny
/// pivots, and Cholesky failures at different steps in different lanes. `getf2` in both
/// layouts: row-major matrices give the row-major image of the column-major result.
fn lanes_match_one_matrix_routines<T: TestScalar>() {
    use super::simd::{self, Layout, LANES};
    let mut rng = Rng(0x1a2e5);
    for (m, n) in [
        (0, 0),
        (0, 3),
        (1, 1),
        (2, 2),
        (4, 4),
        (5, 3),
        (3, 6),
        (8, 3),
        (4, 6),
        (3, 8),
        (8, 8),
        (16, 16),
        (13, 16),
    ] {
        let (len, k) = (m * n, m.min(n));
        let mut a: Vec<T> = rng.matrices(LANES * len);
        if len == 0 {
            let mut info = [7; LANES];
            for layout in [Layout::ColumnMajor, Layout::RowMajor] {
                simd::getf2(None, &mut a, m, n, layout, &mut [], &mut info, &mut []);
                assert_eq!(info, [0; LANES]);
            }
            simd::potf2(&mut a, 0, true, &mut info, &mut []);
            assert_eq!(info, [0; LANES]);
            continue;
        }
        let special = |a: &mut [T], lane: usize, e: usize, v: T| a[lane * len + e] = v;
        special(&mut a, 1, 0, T::ZERO); // a zero first pivot candidate
        for i in 0..m {
            special(&mut a, 2, i, T::ZERO); // zero first column: info 1, no swap
        }
        special(&mut a, 3, len - 1, T::from_parts(f64::NAN, 0.0));
        // Subnormal entries: pivots below the safe minimum, divided by instead of inverted.
        let subnormal = if T::EPS > 1e-10 { 1e-39 } else { 1e-310 };
        for e in 0..len {
            let x = a[4 * len + e];
            a[4 * len + e] = x * T::from_parts(subnormal, 0.0);
        }
        if m > 1 {
            for j in 0..n {
                let x = a[5 * len + j * m];
                a[5 * len + j * m + 1] = x; // rows 0 and 1 equal: singular
            }
        }
        let mut expected = a.clone();
        let mut expected_ipiv = vec![0; LANES * k];
        let mut expected_info = [0; LANES];
        for l in 0..LANES {
            expected_info[l] = getf2(
                &mut expected[l * len..(l + 1) * len],
                m,
                n,
                m,
                &mut expected_ipiv[l * k..(l + 1) * k],
            );
        }
        // The same matrices row-major: element (i, j) of matrix l at l·len + i·n + j.
        let row_major = |column_major: &[T]| -> Vec<T> {
            (0..LANES * len)
                .map(|e| {
                    let (l, i, j) = (e / len, e % len / n, e % n);
                    column_major[l * len + j * m + i]
                })
                .collect()
        };
        for (layout, input, expected) in [
            (Layout::ColumnMajor, a.clone(), expected.clone()),
            (Layout::RowMajor, row_major(&a), row_major(&expected)),
        ] {
            // In place, and from a source into a result that holds anything.
            for from_source in [false, true] {
                let mut got = if from_source {
                    rng.matrices(LANES * len)
                } else {
                    input.clone()
                };
                let source = from_source.then_some(&input[..]);
                let (mut ipiv, mut info) = (vec![0; LANES * k], [0; LANES]);
                let mut scratch = vec![T::ZERO; LANES * len];
                simd::getf2(
                    source,
                    &mut got,
                    m,
                    n,
                    layout,
                    &mut ipiv,
                    &mut info,
                    &mut scratch,
                );
                assert_eq!(
                    (info, &ipiv),
                    (expected_info, &expected_ipiv),
                    "getrf {m}x{n} {layout:?} from source {from_source}"
                );
                for (e, (x, y)) in got.iter().zip(&expected).enumerate() {
                    assert!(
                        x.same(*y),
                        "getrf {m}x{n} {layout:?} from source {from_source}: element {e}: \
                         {x:?} != {y:?}"
                    );
                }
            }
        }

        if m != n {
            continue;
        }
        for lower in [true, false] {
            let mut a = spd::<T>(&mut rng, n, LANES);
            for l in 0..LANES {
                mark_other_triangle(&mut a[l * len..(l + 1) * len], n, lower);
            }
            // Lanes 1..: a non-positive diagonal after (lane - 1) steps; lane 7 a NaN.
            for lane in 1..LANES.min(n + 1) {
                let d = (lane - 1) * (n + 1);
                a[lane * len + d] = T::from_parts(-1.0, 0.0);
            }
            a[7 * len] = T::from_parts(f64::NAN, 0.0);
            let mut expected = a.clone();
            let mut expected_info = [0; LANES];
            for l in 0..LANES {
                expected_info[l] = potf2(&mut expected[l * len..(l + 1) * len], n, n, lower);
            }
            let mut got = a;
            let (mut info, mut scratch) = ([0; LANES], vec![T::ZERO; LANES * len]);
            simd::potf2(&mut got, n, lower, &mut info, &mut scratch);
            assert_eq!(info, expected_info, "potrf {n} lower {lower}");
            for (e, (x, y)) in got.iter().zip(&expected).enumerate() {
                assert!(
                    x.same(*y),
                    "potrf {n} lower {lower}: element {e}: {x:?} != {y:?}"
                );
            }
        }
    }
}

/// Sizes whose element count overflows are refused before any pointer loop walks them (a
/// wrapped `LANES·m·n` of 8 would pass every length check).
#[test]
#[should_panic(expected = "overflow")]
fn lanes_refuse_sizes_that_overflow() {
    use super::simd::{self, Layout, LANES};
    let (mut a, mut scratch, mut ipiv) = ([0.0f64; LANES], [0.0f64; LANES], [0; LANES]);
    let m = usize::MAX / LANES + 2;
    simd::getf2(
        None,
        &mut a,
        m,
        1,
        Layout::ColumnMajor,
        &mut ipiv,
        &mut [0; LANES],
        &mut scratch,
    );
}

#[test]
fn lanes_match_one_matrix_routines_all_types() {
    lanes_match_one_matrix_routines::<f32>();
    lanes_match_one_matrix_routines::<f64>();
    lanes_match_one_matrix_routines::<Complex<f32>>();
    lanes_match_one_matrix_routines::<Complex<f64>>();
}
