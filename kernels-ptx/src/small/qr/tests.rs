extern crate std;

use super::*;
use crate::launch::{run_on_host, KernelArgs, Kernels};
use crate::small::tests::{assert_same, Rng, TestScalar};
use crate::small::HOST_EXCHANGE_BYTES_PER_THREAD;
use num_complex::Complex;
use std::vec;
use std::vec::Vec;

trait QrTest: TestScalar {}
impl<T: TestScalar> QrTest for T {}

/// Runs `table`'s entry for `T` on the emulated grid with `args`: the warp kernel the plan
/// picks for `m×cols` matrices with `threads` per block, if the table has one, else the block
/// kernel on a grid of at most two blocks (so that blocks loop over the batch).
fn run<T: QrTest, A>(
    table: &Kernels<(ScalarKind, Variant), A>,
    (m, cols, batch): (u32, u32, u64),
    threads: u32,
    args: impl KernelArgs,
) {
    let warps = plan(T::KIND, m, cols, batch, Some(threads))
        .and_then(|p| Some((table.name((T::KIND, p.0))?, p)));
    let (kernel, grid_dim, block, shared) = match warps {
        Some((kernel, (_, grid_dim, block, shared))) => (
            kernel,
            grid_dim,
            block,
            shared + block as usize * HOST_EXCHANGE_BYTES_PER_THREAD,
        ),
        None => {
            let (_, grid_dim, block, shared) =
                block_plan(T::KIND, m, cols, batch, usize::MAX).unwrap();
            let kernel = table.name((T::KIND, Variant::Block)).unwrap();
            (kernel, grid_dim.min(2), block, shared)
        }
    };
    unsafe { run_on_host(kernel, grid_dim, block, shared, args) };
}

/// geqrf by the kernel `geqrf_launch` would pick: a warp kernel (with `threads` per block) or
/// the block kernel.
fn run_geqrf<T: QrTest>(a: &mut [T], m: u32, n: u32, batch: u64, threads: u32) -> Vec<T> {
    let mut tau =
        vec![<T as TestScalar>::from_parts(-7.0, 0.5); batch as usize * m.min(n) as usize];
    let args = GeqrfArgs {
        a: a.as_mut_ptr(),
        tau: tau.as_mut_ptr(),
        m,
        n,
        batch,
    };
    run::<T, _>(&GEQRF, (m, n, batch), threads, args);
    tau
}

fn run_orgqr<T: QrTest>(a: &mut [T], tau: &[T], m: u32, n: u32, k: u32, batch: u64, threads: u32) {
    let args = OrgqrArgs {
        a: a.as_mut_ptr(),
        tau: tau.as_ptr(),
        m,
        n,
        k,
        batch,
    };
    run::<T, _>(&ORGQR, (m, n, batch), threads, args);
}

/// jax's `qr` of the row-major matrices `a` by the kernel `qr_launch` would pick (a warp
/// kernel with `threads` per block, or the block kernel); returns Q and R, row-major.
fn run_qr<T: QrTest>(
    a: &[T],
    m: u32,
    n: u32,
    batch: u64,
    threads: u32,
    full_matrices: bool,
) -> (Vec<T>, Vec<T>) {
    let mq = qr_q_columns(m, n, full_matrices);
    let junk = <T as TestScalar>::from_parts(-7.0, 0.5);
    let mut q = vec![junk; (batch * (m * mq) as u64) as usize];
    let mut r = vec![junk; (batch * (mq * n) as u64) as usize];
    let args = QrArgs {
        a: a.as_ptr(),
        q: q.as_mut_ptr(),
        r: r.as_mut_ptr(),
        m,
        n,
        batch,
        full_matrices: full_matrices as u32,
    };
    run::<T, _>(&QR, (m, n.max(mq), batch), threads, args);
    (q, r)
}

/// Reference xLARFG on `x` (`x[0]` = alpha), for mid-range data: plain sequential norms (the
/// kernels' overflow/underflow guards are checked separately, by scaled inputs).
fn ref_larfg<T: QrTest>(x: &mut [T]) -> T {
    type R<T> = <T as Scalar>::Real;
    let zero = <R<T> as Real>::ZERO;
    if x.len() <= 1 && !T::COMPLEX {
        return T::ZERO;
    }
    let mut ssq = zero;
    for v in &x[1..] {
        ssq = ssq + v.re() * v.re();
        if T::COMPLEX {
            ssq = ssq + v.im() * v.im();
        }
    }
    let xnorm = ssq.sqrt();
    let (alphr, alphi) = (x[0].re(), x[0].im());
    if xnorm == zero && alphi == zero {
        return T::ZERO;
    }
    let beta = -lapy::<T>(alphr, alphi, xnorm).copysign(alphr);
    assert!(
        beta.abs() >= <R<T> as Real>::LARFG_SAFMIN,
        "test data out of range"
    );
    let tau = T::from_re_im((beta - alphr) / beta, -alphi / beta);
    let s = T::ONE.quotient(x[0] - T::from_real(beta));
    for v in &mut x[1..] {
        *v = s * *v;
    }
    x[0] = T::from_real(beta);
    tau
}

/// xGEQR2 on one column-major `m×n` matrix; returns tau.
fn ref_geqrf<T: QrTest>(a: &mut [T], m: usize, n: usize) -> Vec<T> {
    let mut tau = Vec::new();
    for i in 0..m.min(n) {
        let t = ref_larfg(&mut a[i * m + i..(i + 1) * m]);
        tau.push(t);
        let v: Vec<T> = a[i * m + i..(i + 1) * m].to_vec();
        for j in i + 1..n {
            larf(&v, t.conj(), &mut a[j * m + i..(j + 1) * m]);
        }
    }
    tau
}

fn c(x: impl TestScalar) -> Complex<f64> {
    x.c128()
}

/// Checks QᴴQ = I (`q` m×p) and Q·R = A (`r` the geqrf output, its upper triangle).
fn check_qr<T: QrTest>(a: &[T], q: &[T], r: &[T], m: usize, n: usize, p: usize, what: &str) {
    let tol = 60.0 * T::EPS * m.max(n) as f64;
    for i in 0..p {
        for j in 0..p {
            let mut s = Complex::new(0.0, 0.0);
            for t in 0..m {
                s += c(q[i * m + t]).conj() * c(q[j * m + t]);
            }
            let want = if i == j { 1.0 } else { 0.0 };
            let err = (s - want).norm_sqr().sqrt();
            assert!(err <= tol, "{what}: QᴴQ - I at ({i},{j}): {err}");
        }
    }
    let scale = a
        .iter()
        .map(|x| c(*x).norm_sqr().sqrt())
        .fold(0.0, f64::max);
    for i in 0..m {
        for j in 0..n {
            let mut s = Complex::new(0.0, 0.0);
            for t in 0..=j.min(p - 1) {
                s += c(q[t * m + i]) * c(r[j * m + t]);
            }
            let err = (s - c(a[j * m + i])).norm_sqr().sqrt();
            assert!(err <= tol * scale, "{what}: Q·R - A at ({i},{j}): {err}");
        }
    }
}

/// geqrf then orgqr with every reflector (Q: m×min(m, n)), against the references bit for
/// bit, and the factorization itself.
fn qr_case<T: QrTest>(input: &[T], m: u32, n: u32, batch: u64, threads: u32) {
    let (mu, nu) = (m as usize, n as usize);
    let (p, size) = (mu.min(nu), mu * nu);
    let mut got = input.to_vec();
    let tau = run_geqrf(&mut got, m, n, batch, threads);
    // Q from the first p columns (all of them when m ≥ n).
    let mut q: Vec<T> = (0..batch as usize)
        .flat_map(|b| got[b * size..b * size + p * mu].to_vec())
        .collect();
    run_orgqr(&mut q, &tau, m, p as u32, p as u32, batch, threads);
    for b in 0..batch as usize {
        let what = std::format!("{:?} {m}x{n} matrix {b}", T::KIND);
        let range = b * size..(b + 1) * size;
        let mut want = input[range.clone()].to_vec();
        let want_tau = ref_geqrf(&mut want, mu, nu);
        assert_same(&got[range.clone()], &want, &what);
        assert_same(
            &tau[b * p..(b + 1) * p],
            &want_tau,
            &std::format!("{what}: tau"),
        );
        let mut want_q = want[..p * mu].to_vec();
        org2r(&mut want_q, mu, p, mu, p, &want_tau);
        let got_q = &q[b * p * mu..(b + 1) * p * mu];
        assert_same(got_q, &want_q, &std::format!("{what}: Q"));
        check_qr(
            &input[range.clone()],
            got_q,
            &got[range.clone()],
            mu,
            nu,
            p,
            &what,
        );
        fused_qr_matches(
            &input[range.clone()],
            &want,
            &want_tau,
            m,
            n,
            threads,
            &what,
        );
        for t in &want_tau {
            // LAPACK's tau: 1 ≤ re ≤ 2, |tau - 1| ≤ 1 (or 0 for H = I).
            let t = c(*t);
            assert!(
                t == Complex::new(0.0, 0.0) || (t - 1.0).norm_sqr().sqrt() <= 1.0 + 1e-6,
                "{what}: tau {t}"
            );
        }
    }
}

/// The fused kernels (`qr_launch`) on one matrix (`a`, column-major) and two copies of it, both
/// `full_matrices`, against geqrf's output `factored` and `tau` (the references): R its upper
/// triangle, Q [`org2r`] of its reflectors, bit for bit.
fn fused_qr_matches<T: QrTest>(
    a: &[T],
    factored: &[T],
    tau: &[T],
    m: u32,
    n: u32,
    threads: u32,
    what: &str,
) {
    let (mu, nu, k) = (m as usize, n as usize, m.min(n) as usize);
    let rows = crate::small::tests::transposed(a, mu, nu);
    let batch: Vec<T> = rows.iter().chain(&rows).chain(&rows).copied().collect();
    for full in [false, true] {
        let mq = qr_q_columns(m, n, full) as usize;
        let (q, r) = run_qr(&batch, m, n, 3, threads, full);
        let mut want_q = vec![T::ZERO; mu * mq];
        want_q[..mu * k].copy_from_slice(&factored[..mu * k]);
        org2r(&mut want_q, mu, mq, mu, k, tau);
        let want_q = crate::small::tests::transposed(&want_q, mu, mq);
        let want_r: Vec<T> = (0..mq * nu)
            .map(|e| {
                let (i, j) = (e / nu, e % nu);
                if i <= j {
                    factored[j * mu + i]
                } else {
                    T::ZERO
                }
            })
            .collect();
        for b in 0..3 {
            let what = std::format!("{what}: fused qr (full {full}) copy {b}");
            assert_same(
                &q[b * mu * mq..(b + 1) * mu * mq],
                &want_q,
                &std::format!("{what}: Q"),
            );
            assert_same(
                &r[b * mq * nu..(b + 1) * mq * nu],
                &want_r,
                &std::format!("{what}: R"),
            );
        }
    }
}

const SHAPES: [(u32, u32, u64, u32); 15] = [
    (1, 1, 3, 32),
    (2, 2, 5, 32),
    (4, 4, 9, 32),
    (3, 2, 7, 32),
    (2, 3, 4, 32),
    (5, 5, 6, 32),
    (8, 3, 5, 64),
    (3, 8, 4, 32),
    (12, 12, 3, 32),
    (16, 9, 5, 64),
    (9, 16, 2, 32),
    (20, 13, 2, 32),
    (13, 20, 1, 32),
    (31, 31, 3, 64),
    (32, 32, 3, 64),
];

/// Past the warp kernels: the block kernels (whose threads are the plan's, one per column;
/// the thread counts here serve the warp orgqr of the wide 17×40's Q).
const BLOCK_SHAPES: [(u32, u32, u64, u32); 6] = [
    (33, 33, 3, 64),
    (40, 17, 3, 64),
    (17, 40, 2, 64),
    (64, 64, 2, 64),
    (100, 70, 2, 64),
    (128, 128, 1, 64),
];

fn qr_all<T: QrTest>() {
    for (i, &(m, n, batch, threads)) in SHAPES.iter().chain(&BLOCK_SHAPES).enumerate() {
        let input =
            Rng(0x1234_5678_9abc_def1 + i as u64).matrices::<T>((batch * (m * n) as u64) as usize);
        qr_case::<T>(&input, m, n, batch, threads);
    }
}

#[test]
fn qr_f32() {
    qr_all::<f32>();
}
#[test]
fn qr_f64() {
    qr_all::<f64>();
}
#[test]
fn qr_c64() {
    qr_all::<Complex<f32>>();
}
#[test]
fn qr_c128() {
    qr_all::<Complex<f64>>();
}

/// orgqr with fewer reflectors than columns (k < n ≤ m), including k = 0 (the identity).
fn orgqr_partial<T: QrTest>() {
    for (i, &(m, n, k, batch)) in [
        (6u32, 4u32, 2u32, 3u64),
        (9, 9, 5, 2),
        (17, 11, 0, 2),
        (32, 20, 7, 3),
        (70, 50, 20, 3), // the block kernel
    ]
    .iter()
    .enumerate()
    {
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let mut rng = Rng(77 + i as u64);
        let mut a = rng.matrices::<T>(batch as usize * mu * nu);
        // The reflectors from the reference (there is no c128 geqrf kernel above 16).
        let tau: Vec<T> = a
            .chunks_mut(mu * nu)
            .flat_map(|x| ref_geqrf(x, mu, nu))
            .collect();
        let tau_k: Vec<T> = (0..batch as usize)
            .flat_map(|b| tau[b * nu..b * nu + ku].to_vec())
            .collect();
        let mut q = a.clone();
        run_orgqr(&mut q, &tau_k, m, n, k, batch, 64);
        for b in 0..batch as usize {
            let r = b * mu * nu..(b + 1) * mu * nu;
            let mut want = a[r.clone()].to_vec();
            org2r(&mut want, mu, nu, mu, ku, &tau_k[b * ku..(b + 1) * ku]);
            let what = std::format!("{:?} orgqr {m}x{n} k={k} matrix {b}", T::KIND);
            assert_same(&q[r], &want, &what);
        }
    }
}

#[test]
fn orgqr_partial_all() {
    orgqr_partial::<f32>();
    orgqr_partial::<f64>();
    orgqr_partial::<Complex<f32>>();
    orgqr_partial::<Complex<f64>>();
}

/// Zero columns (tau = 0 there, H = I) and a column zero below the diagonal.
fn zero_columns<T: QrTest>() {
    let (m, n, batch) = (7u32, 5u32, 3u64);
    let (mu, nu) = (m as usize, n as usize);
    let mut input = Rng(99).matrices::<T>(batch as usize * mu * nu);
    for r in 0..mu {
        input[r] = T::ZERO; // matrix 0, column 0
        input[mu * nu + 2 * mu + r] = T::ZERO; // matrix 1, column 2
    }
    for r in 4..mu {
        input[2 * mu * nu + 3 * mu + r] = T::ZERO; // matrix 2, column 3 below the diagonal
    }
    let mut got = input.clone();
    let tau = run_geqrf(&mut got, m, n, batch, 32);
    assert_eq!(c(tau[0]), Complex::new(0.0, 0.0));
    qr_case::<T>(&input, m, n, batch, 32);
}

#[test]
fn zero_columns_all() {
    zero_columns::<f32>();
    zero_columns::<f64>();
    zero_columns::<Complex<f32>>();
    zero_columns::<Complex<f64>>();
}

/// Inputs scaled by `2^e` for exponents whose squares overflow or underflow (the scaled norm
/// and xLARFG's rescaling): R scales with the input, tau and the reflectors do not.
fn scaled<T: QrTest>(exponents: &[i32]) {
    let (m, n, batch) = (9u32, 6u32, 2u64);
    let size = (m * n) as usize;
    let input = Rng(5).matrices::<T>(batch as usize * size);
    let mut base = input.clone();
    let base_tau = run_geqrf(&mut base, m, n, batch, 32);
    for &e in exponents {
        let f = 2f64.powi(e);
        let scaled: Vec<T> = input
            .iter()
            .map(|x| <T as TestScalar>::from_parts(c(*x).re * f, c(*x).im * f))
            .collect();
        let mut got = scaled.clone();
        let tau = run_geqrf(&mut got, m, n, batch, 32);
        for (t, w) in tau.iter().zip(&base_tau) {
            assert!(
                (c(*t) - c(*w)).norm_sqr().sqrt() <= 8.0 * T::EPS,
                "2^{e}: tau {t:?} != {w:?}"
            );
        }
        for (idx, (g, w)) in got.iter().zip(&base).enumerate() {
            let (i, j) = (idx % m as usize, (idx / m as usize) % n as usize);
            let want = if i <= j { c(*w) * f } else { c(*w) };
            let unit = if i <= j { f } else { 1.0 };
            assert!(
                (c(*g) - want).norm_sqr().sqrt() <= 64.0 * T::EPS * unit,
                "2^{e}: element {idx}: {g:?} vs {want}"
            );
        }
    }
}

#[test]
fn scaled_inputs() {
    scaled::<f32>(&[100, -100, -120]);
    scaled::<Complex<f32>>(&[100, -100, -120]);
    scaled::<f64>(&[600, -600, -1000]);
    scaled::<Complex<f64>>(&[600, -1000]);
}

/// Hopper's opt-in shared memory per block, and Ada's.
const HOPPER_SHARED: usize = 227 << 10;
const ADA_SHARED: usize = 99 << 10;

#[test]
fn plans() {
    let g = geqrf_launch(ScalarKind::F32, 32, 32, 16384, HOPPER_SHARED).unwrap();
    assert_eq!(
        (g.kernel, g.grid, g.block),
        ("ferrax_geqrf_small_f32_w32", 4096, 128)
    );
    let o = orgqr_launch(ScalarKind::C128, 32, 32, 32, 3, HOPPER_SHARED).unwrap();
    assert_eq!(
        (o.kernel, o.grid, o.block),
        ("ferrax_orgqr_small_c128_w32", 2, 64)
    );
    assert!(o.shared_bytes as usize <= MAX_SHARED_BYTES);
    assert_eq!(
        geqrf_launch(ScalarKind::C64, 3, 7, 5, HOPPER_SHARED)
            .unwrap()
            .kernel,
        "ferrax_geqrf_small_c64_w8"
    );
    assert_eq!(
        orgqr_launch(ScalarKind::F64, 4, 4, 2, 5, HOPPER_SHARED)
            .unwrap()
            .kernel,
        "ferrax_orgqr_small_f64_w4"
    );
    assert_eq!(
        geqrf_launch(ScalarKind::F64, 16, 2, 0, HOPPER_SHARED)
            .unwrap()
            .grid,
        0,
        "batch 0"
    );
    assert!(
        orgqr_launch(ScalarKind::F32, 8, 9, 8, 1, HOPPER_SHARED).is_none(),
        "n > m"
    );
    assert!(
        orgqr_launch(ScalarKind::F32, 8, 4, 5, 1, HOPPER_SHARED).is_none(),
        "k > n"
    );
}

#[test]
fn block_plans() {
    // c128 past 16 (no warp geqrf) and everything past 32: one block per matrix, a thread
    // per column (rounded up to a warp), the padded matrix and the taus in shared memory.
    let g = geqrf_launch(ScalarKind::C128, 17, 3, 5, HOPPER_SHARED).unwrap();
    assert_eq!(
        (g.kernel, g.grid, g.block),
        ("ferrax_geqrf_small_c128_block", 5, 32)
    );
    let g = geqrf_launch(ScalarKind::F32, 128, 128, 1024, HOPPER_SHARED).unwrap();
    assert_eq!(
        (g.kernel, g.grid, g.block),
        ("ferrax_geqrf_small_f32_block", 1024, 128)
    );
    assert_eq!(g.shared_bytes as usize, 129 * 128 * 4 + 128 * 4);
    let o = orgqr_launch(ScalarKind::F64, 100, 70, 70, 1 << 30, HOPPER_SHARED).unwrap();
    assert_eq!(
        (o.kernel, o.grid, o.block),
        ("ferrax_orgqr_small_f64_block", 1 << 20, 96)
    );
    // Past the shared memory of the device, or past 128: the libraries.
    assert!(geqrf_launch(ScalarKind::F64, 128, 128, 1, HOPPER_SHARED).is_some());
    assert!(geqrf_launch(ScalarKind::F64, 128, 128, 1, ADA_SHARED).is_none());
    assert!(geqrf_launch(ScalarKind::C128, 128, 128, 1, HOPPER_SHARED).is_none());
    assert!(geqrf_launch(ScalarKind::C128, 100, 100, 1, HOPPER_SHARED).is_some());
    assert!(geqrf_launch(ScalarKind::F32, 129, 8, 1, HOPPER_SHARED).is_none());
    assert!(orgqr_launch(ScalarKind::F32, 129, 8, 8, 1, HOPPER_SHARED).is_none());
}

/// `c ← op(Q)·c` or `c·op(Q)` by the ormqr kernel (its plan's block and shared memory, at most
/// two blocks, so that blocks loop over the batch).
#[allow(clippy::too_many_arguments)]
fn run_ormqr<T: QrTest>(
    a: &[T],
    a_cols: u32,
    tau: &[T],
    k: u32,
    operands: &[T],
    q: u32,
    vectors: u32,
    batch: u64,
    left: bool,
) -> [Vec<T>; 2] {
    let config = ormqr_launch(T::KIND, q, k, vectors, batch, usize::MAX).unwrap();
    [false, true].map(|transpose| {
        let mut out = operands.to_vec();
        let args = OrmqrArgs {
            a: a.as_ptr(),
            tau: tau.as_ptr(),
            c: out.as_mut_ptr(),
            q,
            a_cols,
            k,
            vectors,
            batch,
            left: left as u32,
            transpose: transpose as u32,
        };
        let shared = config.shared_bytes as usize;
        unsafe {
            run_on_host(
                config.kernel,
                config.grid.min(2),
                config.block,
                shared,
                args,
            )
        };
        out
    })
}

/// `op(Q)·c` (left) or `c·op(Q)` with Q (`q×q`, column-major) formed in full, in complex f64.
fn multiply_by_q<T: QrTest>(
    full_q: &[T],
    operand: &[T],
    rows: usize,
    cols: usize,
    left: bool,
    transpose: bool,
) -> Vec<Complex<f64>> {
    let q = if left { rows } else { cols };
    let op = |i: usize, j: usize| {
        if transpose {
            c(full_q[i * q + j]).conj()
        } else {
            c(full_q[j * q + i])
        }
    };
    let mut out = vec![Complex::new(0.0, 0.0); rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            out[j * rows + i] = (0..q)
                .map(|t| {
                    if left {
                        op(i, t) * c(operand[j * rows + t])
                    } else {
                        c(operand[t * rows + i]) * op(t, j)
                    }
                })
                .sum();
        }
    }
    out
}

/// The ormqr kernel against [`orm2r`] bit for bit, every side and `transpose`, and `orm2r`
/// against Q formed in full by [`org2r`]: reflectors from the reference geqrf of random
/// `q×a_cols` matrices, `k ≤ min(q, a_cols)` of them (a_cols > k: the kernel skips columns).
fn ormqr_case<T: QrTest>(seed: u64, q: u32, a_cols: u32, k: u32, vectors: u32, batch: u64) {
    let (qu, au, ku, vu) = (q as usize, a_cols as usize, k as usize, vectors as usize);
    let mut rng = Rng(seed);
    let mut a = rng.matrices::<T>(batch as usize * qu * au);
    let taus: Vec<T> = a
        .chunks_mut(qu * au)
        .flat_map(|x| ref_geqrf(x, qu, au)[..ku].to_vec())
        .collect();
    let operands = rng.matrices::<T>(batch as usize * qu * vu);
    for left in [true, false] {
        let (rows, cols) = if left { (qu, vu) } else { (vu, qu) };
        let got = run_ormqr(&a, a_cols, &taus, k, &operands, q, vectors, batch, left);
        for (transpose, got) in [false, true].into_iter().zip(got) {
            for b in 0..batch as usize {
                let what = std::format!(
                    "{:?} ormqr q={q} a_cols={a_cols} k={k} vectors={vectors} left={left} \
                     transpose={transpose} matrix {b}",
                    T::KIND
                );
                let (a_b, tau_b) = (&a[b * qu * au..], &taus[b * ku..(b + 1) * ku]);
                let c_b = &operands[b * qu * vu..(b + 1) * qu * vu];
                let mut want = c_b.to_vec();
                orm2r(a_b, qu, tau_b, ku, &mut want, rows, cols, left, transpose);
                assert_same(&got[b * qu * vu..(b + 1) * qu * vu], &want, &what);

                let mut full_q = vec![T::ZERO; qu * qu];
                full_q[..qu * ku].copy_from_slice(&a_b[..qu * ku]);
                org2r(&mut full_q, qu, qu, qu, ku, tau_b);
                let exact = multiply_by_q(&full_q, c_b, rows, cols, left, transpose);
                let tol = 60.0 * T::EPS * qu.max(1) as f64;
                for (e, (w, x)) in want.iter().zip(&exact).enumerate() {
                    let err = (c(*w) - x).norm_sqr().sqrt();
                    assert!(err <= tol, "{what}: element {e}: {w:?} vs {x}");
                }
            }
        }
    }
}

/// Q of orders 1-128, few vectors (many matrices per block) and many, no reflectors (Q = I),
/// fewer reflectors than columns of `a`, and a block that loops over the batch.
fn ormqr_all<T: QrTest>() {
    for (i, &(q, a_cols, k, vectors, batch)) in [
        (1u32, 1u32, 1u32, 1u32, 5u64),
        (4, 4, 4, 3, 70),
        (8, 8, 8, 8, 40),
        (6, 6, 0, 5, 3),
        (12, 9, 9, 1, 300),
        (16, 20, 16, 16, 9),
        (33, 40, 20, 17, 9),
        (70, 50, 50, 100, 3),
        (128, 128, 128, 128, 1),
    ]
    .iter()
    .enumerate()
    {
        ormqr_case::<T>(0x0e3 + i as u64, q, a_cols, k, vectors, batch);
    }
}

#[test]
fn ormqr_all_types() {
    ormqr_all::<f32>();
    ormqr_all::<f64>();
    ormqr_all::<Complex<f32>>();
    ormqr_all::<Complex<f64>>();
}

#[test]
fn ormqr_plans() {
    // A thread per vector of C, as many matrices per block as fill 128 threads within 48 KiB.
    let o = ormqr_launch(ScalarKind::F32, 8, 8, 8, 16384, HOPPER_SHARED).unwrap();
    assert_eq!(
        (o.kernel, o.grid, o.block),
        ("ferrax_ormqr_small_f32_block", 1024, 128)
    );
    let o = ormqr_launch(ScalarKind::F64, 32, 32, 32, 16384, HOPPER_SHARED).unwrap();
    // 4 matrices take (64·33 + 32)·8·4 = 68 KiB: 2 fit.
    assert_eq!((o.grid, o.block), (8192, 64));
    assert_eq!(o.shared_bytes as usize, 2 * (64 * 33 + 32) * 8);
    let o = ormqr_launch(ScalarKind::C128, 64, 64, 100, 5, HOPPER_SHARED).unwrap();
    assert_eq!(
        (o.kernel, o.grid, o.block),
        ("ferrax_ormqr_small_c128_block", 5, 128)
    );
    assert_eq!(o.shared_bytes as usize, (164 * 65 + 64) * 16);
    // Past the device's shared memory, past 128 or with k > q: cuSOLVER.
    assert!(ormqr_launch(ScalarKind::C128, 64, 64, 100, 5, ADA_SHARED).is_none());
    assert!(ormqr_launch(ScalarKind::F64, 128, 128, 128, 1, HOPPER_SHARED).is_none());
    assert!(ormqr_launch(ScalarKind::F32, 129, 8, 8, 1, HOPPER_SHARED).is_none());
    assert!(ormqr_launch(ScalarKind::F32, 8, 8, 129, 1, HOPPER_SHARED).is_none());
    assert!(ormqr_launch(ScalarKind::F32, 8, 9, 8, 1, HOPPER_SHARED).is_none());
    assert_eq!(
        ormqr_launch(ScalarKind::F32, 8, 8, 8, 0, HOPPER_SHARED)
            .unwrap()
            .grid,
        0
    );
}

#[test]
fn empty_matrices() {
    let mut a: Vec<f64> = Vec::new();
    assert!(run_geqrf(&mut a, 0, 3, 2, 32).is_empty());
    let mut a: Vec<f32> = Vec::new();
    run_orgqr(&mut a, &[], 3, 0, 0, 2, 32);
}

/// The sequential `geqr2` (the CPU handlers' path) against the reference, bit for bit, and the
/// kernels' QR identities for its results with `org2r`.
fn sequential_qr<T: QrTest>() {
    for (i, &(m, n, batch, _)) in SHAPES.iter().enumerate() {
        let (mu, nu) = (m as usize, n as usize);
        let size = mu * nu;
        let input = Rng(0x5e9_0000 + i as u64).matrices::<T>(batch as usize * size);
        for b in 0..batch as usize {
            let what = std::format!("{:?} {m}x{n} matrix {b}", T::KIND);
            let a = &input[b * size..(b + 1) * size];
            let (mut got, mut want) = (a.to_vec(), a.to_vec());
            let mut tau = vec![T::ZERO; mu.min(nu)];
            geqr2(&mut got, mu, nu, &mut tau);
            let want_tau = ref_geqrf(&mut want, mu, nu);
            assert_same(&got, &want, &what);
            assert_same(&tau, &want_tau, &std::format!("{what}: tau"));
            let p = mu.min(nu);
            let mut q = got[..p * mu].to_vec();
            org2r(&mut q, mu, p, mu, p, &tau);
            check_qr(a, &q, &got, mu, nu, p, &what);
        }
    }
}

#[test]
fn sequential_qr_all_types() {
    sequential_qr::<f32>();
    sequential_qr::<f64>();
    sequential_qr::<Complex<f32>>();
    sequential_qr::<Complex<f64>>();
}
