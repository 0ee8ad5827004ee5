extern crate std;

use super::*;
use crate::small::eigh;
use crate::small::tests::{Rng, TestScalar};
use num_complex::Complex;
use std::vec;
use std::vec::Vec;

/// Each lane's results in c128: `U` (`m × n`), `σ`, `V` (`n × n`), column-major.
struct Results {
    u: Vec<Vec<Complex<f64>>>,
    s: Vec<Vec<f64>>,
    v: Vec<Vec<Complex<f64>>>,
    finite: Vec<bool>,
    converged: Vec<bool>,
}

/// Decomposes the column-major `m × n` matrices `a` (one per lane, at most [`LANES`]).
fn decompose<T: TestScalar>(a: &[Vec<T>], m: usize, n: usize, vectors: bool) -> Results {
    let mut scratch = vec![<T::Real as Real>::NAN; scratch_len(T::COMPLEX, m, n) + 3];
    let mut lanes = Lanes::<T>::new(m, n, &mut scratch);
    for (l, matrix) in a.iter().enumerate() {
        lanes.load(l, |i, j| matrix[j * m + i]);
    }
    lanes.run(vectors);
    let real = |x: T::Real| T::from_real(x).c128().re;
    Results {
        u: (0..LANES)
            .map(|l| {
                (0..m * n)
                    .map(|e| lanes.u(l, e % m, e / m).c128())
                    .collect()
            })
            .collect(),
        s: (0..LANES)
            .map(|l| (0..n).map(|j| real(lanes.singular_value(l, j))).collect())
            .collect(),
        v: (0..LANES)
            .map(|l| {
                (0..n * n)
                    .map(|e| lanes.v(l, e % n, e / n).c128())
                    .collect()
            })
            .collect(),
        finite: (0..LANES).map(|l| lanes.finite(l)).collect(),
        converged: (0..LANES).map(|l| lanes.converged(l)).collect(),
    }
}

fn modulus(z: Complex<f64>) -> f64 {
    libm::hypot(z.re, z.im)
}

/// `Qᴴ·Q = I` for the `rows × cols` column-major `q`, to `tol`.
fn orthonormal(q: &[Complex<f64>], rows: usize, cols: usize, tol: f64, what: &str) {
    for i in 0..cols {
        for j in 0..cols {
            let g: Complex<f64> = (0..rows)
                .map(|k| q[i * rows + k].conj() * q[j * rows + k])
                .sum();
            let want = if i == j { 1.0 } else { 0.0 };
            assert!(modulus(g - want) <= tol, "{what}: (QᴴQ)({i},{j}) = {g}");
        }
    }
}

/// `A = U·Σ·Vᴴ` to `30·n·ε·‖A‖_F`, `U` and `V` orthonormal, `σ` descending and non-negative;
/// `σ²` equal to the eigenvalues of `AᴴA` (computed independently, in f64) to `30·n·ε·‖A‖²`.
fn check<T: TestScalar>(a: &[Complex<f64>], r: &Results, l: usize, m: usize, n: usize, what: &str) {
    assert!(r.finite[l] && r.converged[l], "{what}: finite, converged");
    let norm = a.iter().map(|x| x.norm_sqr()).sum::<f64>().sqrt();
    let tol = 30.0 * n.max(1) as f64 * T::EPS;
    let (u, s, v) = (&r.u[l], &r.s[l], &r.v[l]);
    assert!(
        s.windows(2).all(|p| p[0] >= p[1]) && s.iter().all(|&x| x >= 0.0),
        "{what}: σ {s:?}"
    );
    for j in 0..n {
        for i in 0..m {
            let usv: Complex<f64> = (0..n)
                .map(|k| u[k * m + i] * s[k] * v[k * n + j].conj())
                .sum();
            let err = modulus(usv - a[j * m + i]);
            assert!(
                err <= tol * norm,
                "{what}: (A - UΣVᴴ)({i},{j}) = {err:e}, ‖A‖ {norm:e}"
            );
        }
    }
    orthonormal(u, m, n, tol, &std::format!("{what}: U"));
    orthonormal(v, n, n, tol, &std::format!("{what}: V"));
    // The eigenvalues of the Gram matrix of A/‖A‖ (which cannot overflow), ascending.
    let unit = if norm > 0.0 { 1.0 / norm } else { 1.0 };
    let mut gram: Vec<Complex<f64>> = (0..n * n)
        .map(|e| {
            (0..m)
                .map(|k| (a[(e % n) * m + k] * unit).conj() * a[(e / n) * m + k] * unit)
                .sum()
        })
        .collect();
    let mut w = vec![0.0; n];
    let mut off = vec![0.0; n];
    let mut scratch = vec![Complex::new(0.0, 0.0); eigh::scratch_len(n)];
    assert_eq!(
        eigh::eigh(&mut gram, n, true, false, &mut w, &mut off, &mut scratch),
        0
    );
    for j in 0..n {
        let sigma = s[j] * unit;
        let err = (sigma * sigma - w[n - 1 - j]).abs();
        assert!(
            err <= tol,
            "{what}: (σ{j}/‖A‖)² {} vs λ {}",
            sigma * sigma,
            w[n - 1 - j]
        );
    }
}

fn random<T: TestScalar>(rng: &mut Rng, m: usize, n: usize, scale: f64) -> Vec<T> {
    (0..m * n)
        .map(|_| T::from_parts(rng.unit() * scale, rng.unit() * scale))
        .collect()
}

fn c128<T: TestScalar>(a: &[T]) -> Vec<Complex<f64>> {
    a.iter().map(|x| x.c128()).collect()
}

fn identities<T: TestScalar>() {
    let mut rng = Rng(0x0ac0b1);
    for (m, n) in [
        (1, 1),
        (2, 2),
        (3, 2),
        (5, 5),
        (8, 8),
        (9, 4),
        (16, 16),
        (32, 32),
        (33, 17),
    ] {
        for scale in [1.0, 1e-30, 1e30] {
            // The last lane is left out: it stays a zero matrix.
            let a: Vec<Vec<T>> = (0..LANES - 1)
                .map(|_| random(&mut rng, m, n, scale))
                .collect();
            let r = decompose(&a, m, n, true);
            let values = decompose(&a, m, n, false);
            for (l, matrix) in a.iter().enumerate() {
                let what = std::format!("{m}×{n} scale {scale} lane {l}");
                check::<T>(&c128(matrix), &r, l, m, n, &what);
                for (x, y) in values.s[l].iter().zip(&r.s[l]) {
                    assert!(
                        (x - y).abs() <= 30.0 * n as f64 * T::EPS * y.max(r.s[l][0]),
                        "{what}"
                    );
                }
            }
            check::<T>(
                &vec![Complex::new(0.0, 0.0); m * n],
                &r,
                LANES - 1,
                m,
                n,
                "zero lane",
            );
            assert!(r.s[LANES - 1].iter().all(|&x| x == 0.0));
        }
    }
}

#[test]
fn svd_identities_all_types() {
    identities::<f32>();
    identities::<f64>();
    identities::<Complex<f32>>();
    identities::<Complex<f64>>();
}

fn special<T: TestScalar>() {
    let mut rng = Rng(0xdeed);
    let (m, n) = (6, 5);
    let cplx = |x: f64| T::from_parts(x, 0.0);
    let mut lanes: Vec<Vec<T>> = vec![];
    // Rank 2: a product of 6×2 and 2×5 factors.
    let (x, y) = (
        random::<T>(&mut rng, m, 2, 1.0),
        random::<T>(&mut rng, 2, n, 1.0),
    );
    lanes.push(
        (0..m * n)
            .map(|e| (0..2).fold(T::ZERO, |s, k| s + x[k * m + e % m] * y[(e / m) * 2 + k]))
            .collect(),
    );
    // Two equal columns.
    let mut equal = random::<T>(&mut rng, m, n, 1.0);
    equal.copy_within(0..m, m);
    lanes.push(equal);
    // Graded columns, from 1 to 1e-6 (single) or 1e-12 (double).
    let step: f64 = if T::EPS > 1e-10 { 1e-1 } else { 1e-3 };
    let mut graded = random::<T>(&mut rng, m, n, 1.0);
    for (e, x) in graded.iter_mut().enumerate() {
        *x = *x * cplx(step.powi((e / m) as i32));
    }
    lanes.push(graded);
    // Known answer: a diagonal with signs (and one zero) has σ = |d| sorted.
    let d = [3.0, -1.0, 0.0, -7.0, 2.5];
    lanes.push(
        (0..m * n)
            .map(|e| {
                if e % m == e / m {
                    cplx(d[e / m])
                } else {
                    T::ZERO
                }
            })
            .collect(),
    );
    // Non-finite lanes, and a huge (but finite) one next to them.
    let mut nan = random::<T>(&mut rng, m, n, 1.0);
    nan[7] = cplx(f64::NAN);
    lanes.push(nan);
    let mut inf = random::<T>(&mut rng, m, n, 1.0);
    inf[3] = cplx(f64::NEG_INFINITY);
    lanes.push(inf);
    let huge = if T::EPS > 1e-10 { 1e37 } else { 1e300 };
    lanes.push(random(&mut rng, m, n, huge));
    let r = decompose(&lanes, m, n, true);
    for l in [0, 1, 2, 3, 6] {
        check::<T>(
            &c128(&lanes[l]),
            &r,
            l,
            m,
            n,
            &std::format!("special lane {l}"),
        );
    }
    assert_eq!(r.s[3], [7.0, 3.0, 2.5, 1.0, 0.0]);
    assert!(
        r.s[0][2..]
            .iter()
            .all(|&x| x <= 30.0 * n as f64 * T::EPS * r.s[0][0]),
        "rank 2: {:?}",
        r.s[0]
    );
    assert!(
        r.s[1][n - 1] <= 30.0 * n as f64 * T::EPS * r.s[1][0],
        "equal columns"
    );
    for l in [4, 5] {
        assert!(
            !r.finite[l] && r.s[l].iter().all(|&x| x == 0.0),
            "non-finite lane {l}"
        );
    }
}

#[test]
fn svd_special_inputs_all_types() {
    special::<f32>();
    special::<f64>();
    special::<Complex<f32>>();
    special::<Complex<f64>>();
}
