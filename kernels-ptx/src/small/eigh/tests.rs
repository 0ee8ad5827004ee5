extern crate std;

use super::*;
use crate::small::tests::{Rng, TestScalar};
use num_complex::Complex;
use std::vec;
use std::vec::Vec;

trait EighTest: TestScalar {}
impl<T: TestScalar> EighTest for T {}

/// A random Hermitian matrix (real diagonal), column-major, entries scaled by `scale`.
fn hermitian<T: EighTest>(rng: &mut Rng, n: usize, scale: f64) -> Vec<Complex<f64>> {
    let mut h = vec![Complex::new(0.0, 0.0); n * n];
    for j in 0..n {
        for i in j..n {
            let x = rng.value::<T>().c128() * scale;
            let x = if i == j { Complex::new(x.re, 0.0) } else { x };
            h[j * n + i] = x;
            h[i * n + j] = x.conj();
        }
    }
    h
}

/// `h` with the triangle that must not be read replaced by markers, and a nonzero imaginary
/// part on the diagonal (ignored as by LAPACK).
fn stored<T: EighTest>(h: &[Complex<f64>], n: usize, lower: bool) -> Vec<T> {
    (0..n * n)
        .map(|e| {
            let (i, j) = (e % n, e / n);
            if (lower && i < j) || (!lower && i > j) {
                T::from_parts(1000.0 + e as f64, -(e as f64))
            } else if i == j {
                T::from_parts(h[e].re, 0.25)
            } else {
                T::from_parts(h[e].re, h[e].im)
            }
        })
        .collect()
}

struct Solution<T: EighTest> {
    z: Vec<T>,
    w: Vec<T::Real>,
    info: i32,
}

fn solve<T: EighTest>(a: &[T], n: usize, lower: bool, vectors: bool) -> Solution<T> {
    let mut z = a.to_vec();
    let mut w = vec![<T::Real as Real>::ZERO; n];
    let mut e = vec![<T::Real as Real>::ZERO; n];
    let mut scratch = vec![T::ZERO; scratch_len(n)];
    let info = eigh(&mut z, n, lower, vectors, &mut w, &mut e, &mut scratch);
    Solution { z, w, info }
}

fn as_f64<T: EighTest>(x: T::Real) -> f64 {
    T::from_real(x).c128().re
}

fn modulus(z: Complex<f64>) -> f64 {
    libm::hypot(z.re, z.im)
}

/// `H·Z = Z·diag(w)`, `Zᴴ·Z = I`, `w` ascending, to `c·n·eps` relative to `‖H‖`.
fn check<T: EighTest>(h: &[Complex<f64>], s: &Solution<T>, n: usize, what: &str) {
    assert_eq!(s.info, 0, "{what}: info");
    let w: Vec<f64> = s.w.iter().map(|&x| as_f64::<T>(x)).collect();
    let z: Vec<Complex<f64>> = s.z.iter().map(|x| x.c128()).collect();
    let norm = h
        .iter()
        .map(|&x| modulus(x))
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let tol = 30.0 * n as f64 * T::EPS;
    assert!(
        w.windows(2).all(|p| p[0] <= p[1]),
        "{what}: w not ascending: {w:?}"
    );
    for j in 0..n {
        for i in 0..n {
            let hz: Complex<f64> = (0..n).map(|k| h[k * n + i] * z[j * n + k]).sum();
            let err = modulus(hz - z[j * n + i] * w[j]) / norm;
            assert!(err <= tol, "{what}: (H·Z - Z·W)({i},{j}) = {err:e}");
            let g: Complex<f64> = (0..n).map(|k| z[i * n + k].conj() * z[j * n + k]).sum();
            let want = if i == j { 1.0 } else { 0.0 };
            assert!(modulus(g - want) <= tol, "{what}: (Zᴴ·Z)({i},{j}) = {g}");
        }
    }
}

fn identities<T: EighTest>() {
    let mut rng = Rng(0x5eed_e16b);
    for n in [1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 25, 32] {
        for scale in [1.0, 1e-30, 1e30] {
            let h = hermitian::<T>(&mut rng, n, scale);
            let mut values = vec![];
            for lower in [true, false] {
                let a = stored::<T>(&h, n, lower);
                let s = solve(&a, n, lower, true);
                check(
                    &h,
                    &s,
                    n,
                    &std::format!("n={n} scale={scale} lower={lower}"),
                );
                // Eigenvalues alone: the same up to rounding.
                let only = solve(&a, n, lower, false);
                assert_eq!(only.info, 0);
                for (x, y) in only.w.iter().zip(&s.w) {
                    let (x, y) = (as_f64::<T>(*x), as_f64::<T>(*y));
                    assert!((x - y).abs() <= 30.0 * n as f64 * T::EPS * scale);
                }
                values.push(s.w);
            }
            for (x, y) in values[0].iter().zip(&values[1]) {
                let (x, y) = (as_f64::<T>(*x), as_f64::<T>(*y));
                assert!((x - y).abs() <= 30.0 * n as f64 * T::EPS * scale);
            }
        }
    }
}

#[test]
fn eigh_identities_all_types() {
    identities::<f32>();
    identities::<f64>();
    identities::<Complex<f32>>();
    identities::<Complex<f64>>();
}

fn special<T: EighTest>() {
    let n = 6;
    // Diagonal: exact eigenvalues, sorted, with unit vectors permuted along.
    let diagonal: Vec<f64> = vec![3.0, -1.0, 2.5, -7.0, 0.0, 1.0];
    let mut h = vec![Complex::new(0.0, 0.0); n * n];
    for (i, &x) in diagonal.iter().enumerate() {
        h[i * n + i] = Complex::new(x, 0.0);
    }
    let s = solve(&stored::<T>(&h, n, true), n, true, true);
    check(&h, &s, n, "diagonal");
    let w: Vec<f64> = s.w.iter().map(|&x| as_f64::<T>(x)).collect();
    assert_eq!(w, [-7.0, -1.0, 0.0, 1.0, 2.5, 3.0]);

    // Known answer: [2 1; 1 2] has eigenvalues 1 and 3.
    let h2 = [2.0, 1.0, 1.0, 2.0].map(|x| Complex::new(x, 0.0));
    let s = solve(&stored::<T>(&h2, 2, false), 2, false, true);
    check(&h2, &s, 2, "2x2");
    let w: Vec<f64> = s.w.iter().map(|&x| as_f64::<T>(x)).collect();
    assert!((w[0] - 1.0).abs() <= 4.0 * T::EPS && (w[1] - 3.0).abs() <= 8.0 * T::EPS);

    // Zero matrix: zero eigenvalues, Z = I.
    let zero = vec![Complex::new(0.0, 0.0); n * n];
    let s = solve(&stored::<T>(&zero, n, true), n, true, true);
    check(&zero, &s, n, "zero");

    // Graded (entries from 1 to 1e-12 along the diagonal and off it).
    let mut rng = Rng(77);
    let mut graded = hermitian::<T>(&mut rng, n, 1.0);
    for j in 0..n {
        for i in 0..n {
            graded[j * n + i] *= 10f64.powi(-((i + j) as i32));
        }
    }
    let s = solve(&stored::<T>(&graded, n, true), n, true, true);
    check(&graded, &s, n, "graded");

    // An infinite element: xSYEVD scales by 0, so every eigenvalue is NaN and Z = I.
    let mut inf = hermitian::<T>(&mut rng, n, 1.0);
    inf[0] = Complex::new(f64::INFINITY, 0.0);
    let s = solve(&stored::<T>(&inf, n, true), n, true, true);
    assert!(s.w.iter().all(|x| x.is_nan()));
    for (e, x) in s.z.iter().enumerate() {
        let want = if e % n == e / n { 1.0 } else { 0.0 };
        assert_eq!(x.c128(), Complex::new(want, 0.0));
    }

    // NaN: no convergence reported, or NaN eigenvalues; never a finite wrong answer.
    let mut nan = hermitian::<T>(&mut rng, n, 1.0);
    nan[n + 2] = Complex::new(f64::NAN, 0.0);
    nan[2 * n + 1] = nan[n + 2];
    let s = solve(&stored::<T>(&nan, n, true), n, true, true);
    assert!(s.info > 0 || s.w.iter().any(|x| x.is_nan()), "NaN input");
}

#[test]
fn eigh_special_inputs_all_types() {
    special::<f32>();
    special::<f64>();
    special::<Complex<f32>>();
    special::<Complex<f64>>();
}

/// `Q·T·Qᴴ = A` with `Q` rebuilt from `sytd2`'s reflectors in LAPACK's format, for both
/// triangles and orders past [`MAX_ORDER`] (which bounds `eigh` only); the other triangle is
/// left alone.
fn sytd2_reduces<T: EighTest>() {
    let mut rng = Rng(0x7d2);
    for n in [1, 2, 3, 5, 8, 16, 31, 32, 33, 64, 97] {
        let h = hermitian::<T>(&mut rng, n, 1.0);
        for lower in [true, false] {
            let a = stored::<T>(&h, n, lower);
            let mut out = a.clone();
            let zero = <T::Real as Real>::ZERO;
            let (mut d, mut e) = (vec![zero; n], vec![zero; n.max(1) - 1]);
            let mut tau = vec![T::ZERO; n.max(1) - 1];
            let mut scratch = vec![T::ZERO; sytd2_scratch_len(n)];
            sytd2(&mut out, n, lower, &mut d, &mut e, &mut tau, &mut scratch);
            let c = |x: T| x.c128();
            let mut q: Vec<Complex<f64>> = (0..n * n)
                .map(|e| Complex::new(if e % n == e / n { 1.0 } else { 0.0 }, 0.0))
                .collect();
            // Q·H(k) for k in the product's order: Q = H(0)⋯H(n-2) (lower), H(n-2)⋯H(0) (upper).
            let order: Vec<usize> = if lower {
                (0..n.max(1) - 1).collect()
            } else {
                (0..n.max(1) - 1).rev().collect()
            };
            for k in order {
                let mut v = vec![Complex::new(0.0, 0.0); n];
                if lower {
                    v[k + 1] = Complex::new(1.0, 0.0);
                    for i in k + 2..n {
                        v[i] = c(out[k * n + i]);
                    }
                } else {
                    v[k] = Complex::new(1.0, 0.0);
                    for i in 0..k {
                        v[i] = c(out[(k + 1) * n + i]);
                    }
                }
                let t = c(tau[k]);
                for r in 0..n {
                    let qv: Complex<f64> = (0..n).map(|j| q[j * n + r] * v[j]).sum();
                    for j in 0..n {
                        q[j * n + r] -= qv * t * v[j].conj();
                    }
                }
            }
            let tri = |i: usize, j: usize| -> f64 {
                if i == j {
                    as_f64::<T>(d[i])
                } else if i == j + 1 {
                    as_f64::<T>(e[j])
                } else if j == i + 1 {
                    as_f64::<T>(e[i])
                } else {
                    0.0
                }
            };
            // Q·T column by column (T has three diagonals), then (Q·T)·Qᴴ.
            let mut qt = vec![Complex::new(0.0, 0.0); n * n];
            for l in 0..n {
                for k in l.saturating_sub(1)..(l + 2).min(n) {
                    for i in 0..n {
                        qt[l * n + i] += q[k * n + i] * tri(k, l);
                    }
                }
            }
            for j in 0..n {
                for i in 0..n {
                    let qtq: Complex<f64> =
                        (0..n).map(|l| qt[l * n + i] * q[l * n + j].conj()).sum();
                    let err = modulus(qtq - h[j * n + i]);
                    assert!(
                        err <= 30.0 * n as f64 * T::EPS,
                        "n={n} lower={lower} ({i},{j}): {err:e}"
                    );
                    let other = if lower { i < j } else { i > j };
                    if other {
                        assert!(out[j * n + i].same(a[j * n + i]), "other triangle written");
                    } else if i == j {
                        assert_eq!(c(out[j * n + i]), Complex::new(as_f64::<T>(d[i]), 0.0));
                    }
                }
            }
        }
    }
}

#[test]
fn sytd2_reduces_all_types() {
    sytd2_reduces::<f32>();
    sytd2_reduces::<f64>();
    sytd2_reduces::<Complex<f32>>();
    sytd2_reduces::<Complex<f64>>();
}
