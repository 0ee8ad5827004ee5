//! Eigendecomposition of one small symmetric / Hermitian matrix as LAPACK's `xSYEVD`/`xHEEVD`
//! computes it for `n ≤ 25` (where its divide and conquer hands the tridiagonal problem to
//! `xSTEQR`): scale into the safe range, reduce to a real tridiagonal `T = Qᴴ·A·Q` with
//! `xSYTD2`/`xHETD2`'s reflectors, form `Q`, run `xSTEQR`'s implicit QL/QR on `T`
//! accumulating its rotations into `Q`, sort. The CPU handler uses it for batches of tiny
//! matrices, where a LAPACK call (and its allocator lock) costs more than the arithmetic.
//!
//! Following LAPACK step by step (not just an equivalent algorithm) keeps the eigenvectors'
//! signs and phases those of stock jax in all but near-degenerate cases; the values differ by
//! rounding only.

use super::qr::{lapy, lapy2, larfg};
use crate::scalar::{Real, Scalar};

/// The largest order [`eigh`] takes (one column of the reduction is held in an array).
pub const MAX_ORDER: usize = 32;

/// Scratch elements of `T` that [`eigh`] needs for order `n`: the reduced matrix, `Q` before
/// it is mirrored (upper triangle only) and the reflectors' `tau`.
pub const fn scratch_len(n: usize) -> usize {
    2 * n * n + n
}

/// The constants of `xSYEVD` and `xSTEQR`, derived as LAPACK derives them.
struct Constants<R> {
    zero: R,
    one: R,
    two: R,
    half: R,
    /// `xLAMCH('E')` and its square.
    eps: R,
    eps2: R,
    /// `xLAMCH('S')` and its reciprocal.
    safmin: R,
    safmax: R,
    /// `xLARTG`'s range where `f² + g²` needs no scaling.
    rtmin: R,
    rtmax: R,
    /// `xSTEQR`'s scaling bounds for an unreduced block.
    ssfmax: R,
    ssfmin: R,
    /// `xSYEVD`'s scaling bounds for the whole matrix.
    rmin: R,
    rmax: R,
}

impl<R: Real> Constants<R> {
    fn new() -> Self {
        let (zero, one) = (R::ZERO, R::ONE);
        let two = one + one;
        let half = one / two;
        let eps = R::EPSILON * half;
        let safmin = R::SAFE_MIN;
        let safmax = one / safmin;
        let smlnum = safmin / R::EPSILON;
        Constants {
            zero,
            one,
            two,
            half,
            eps,
            eps2: eps * eps,
            safmin,
            safmax,
            rtmin: safmin.sqrt(),
            rtmax: (safmax * half).sqrt(),
            ssfmax: safmax.sqrt() / (two + one),
            ssfmin: safmin.sqrt() / (eps * eps),
            rmin: smlnum.sqrt(),
            rmax: (one / smlnum).sqrt(),
        }
    }
}

/// Fortran's `MAX` as LAPACK's norms use it: `sum` replaces `value` when larger or NaN, so a
/// NaN sticks.
fn max_nan<R: Real>(value: R, sum: R) -> R {
    if value < sum || sum.is_nan() {
        sum
    } else {
        value
    }
}

/// Eigenvalues (ascending, into `w[..n]`) and, when `vectors`, orthonormal eigenvectors (the
/// columns of `a`, column-major `n×n`) of the Hermitian matrix whose `lower` (else upper)
/// triangle `a` holds; the imaginary part of the diagonal is ignored. Without `vectors` `a` is
/// left undefined, as by LAPACK. `off_diagonal` takes `n` reals and `scratch`
/// [`scratch_len`]`(n)` elements.
///
/// Returns `info`: 0, or the number of off-diagonal elements that had not converged after
/// `30·n` QL/QR sweeps (then `w` holds what it reached).
///
/// # Panics
/// If `n > MAX_ORDER` or a slice is too short.
pub fn eigh<T: Scalar>(
    a: &mut [T],
    n: usize,
    lower: bool,
    vectors: bool,
    w: &mut [T::Real],
    off_diagonal: &mut [T::Real],
    scratch: &mut [T],
) -> i32 {
    assert!(n <= MAX_ORDER, "eigh takes at most {MAX_ORDER} rows");
    let a = &mut a[..n * n];
    let (d, e) = (&mut w[..n], &mut off_diagonal[..n]);
    let k = Constants::<T::Real>::new();
    if n == 0 {
        return 0;
    }
    if n == 1 {
        d[0] = a[0].re();
        if vectors {
            a[0] = T::ONE;
        }
        return 0;
    }
    let (h, rest) = scratch[..scratch_len(n)].split_at_mut(n * n);
    let (q, tau) = rest.split_at_mut(n * n);
    let at = |i: usize, j: usize| j * n + i;
    load_lower(a, n, lower, h);
    let mut anrm = k.zero;
    for j in 0..n {
        for x in &h[at(j, j)..at(n, j)] {
            anrm = max_nan(anrm, lapy::<T>(x.re(), x.im(), k.zero));
        }
    }
    // xSYEVD: scale the matrix into [rmin, rmax] by its largest element (an infinite one makes
    // sigma 0 and the results NaN, as in LAPACK).
    let sigma = if anrm > k.zero && anrm < k.rmin {
        Some(k.rmin / anrm)
    } else if anrm > k.rmax {
        Some(k.rmax / anrm)
    } else {
        None
    };
    if let Some(sigma) = sigma {
        for j in 0..n {
            for x in &mut h[at(j, j)..at(n, j)] {
                *x = x.scale(sigma);
            }
        }
    }

    let mut work = [T::ZERO; MAX_ORDER];
    hetd2_lower(h, n, d, &mut e[..n - 1], &mut tau[..n - 1], &mut work);
    if vectors {
        // Q = H(1)⋯H(n-1) in the trailing (n-1)×(n-1) block, first row and column e₁
        // (xORGTR); P·Q·P for an upper A.
        let z: &mut [T] = if lower { a } else { q };
        z.fill(T::ZERO);
        z[0] = T::ONE;
        for j in 0..n - 1 {
            z[at(j + 2, j + 1)..at(n, j + 1)].copy_from_slice(&h[at(j + 2, j)..at(n, j)]);
        }
        super::qr::org2r(&mut z[n + 1..], n - 1, n - 1, n, n - 1, tau);
        if !lower {
            for j in 0..n {
                for i in 0..n {
                    a[stored_at(n, false, i, j)] = q[at(i, j)];
                }
            }
        }
    }
    if !lower {
        d.reverse();
        e[..n - 1].reverse();
    }
    let info = steqr(d, e, vectors.then_some(a), n, &k);
    if let Some(sigma) = sigma {
        let unscale = k.one / sigma;
        for x in d {
            *x = *x * unscale;
        }
    }
    info
}

/// Where element `(i, j)` of the matrix the reduction works on lies in the column-major `n×n`
/// `a`: `(i, j)` itself for a `lower` `a`, else `(n-1-i, n-1-j)`, that is element `(i, j)` of
/// `P·A·P` with `P` the reversal permutation. `xSYTD2('U')` is `xSYTD2('L')` on `P·A·P` (its
/// reflectors run bottom-up and end at the bottom element), so both triangles share one
/// reduction.
fn stored_at(n: usize, lower: bool, i: usize, j: usize) -> usize {
    if lower {
        j * n + i
    } else {
        (n - 1 - j) * n + (n - 1 - i)
    }
}

/// The lower triangle of the Hermitian matrix to reduce into `h` (diagonal made real): `a`'s,
/// or for an upper `a` the lower one of `P·A·P` ([`stored_at`]).
fn load_lower<T: Scalar>(a: &[T], n: usize, lower: bool, h: &mut [T]) {
    for j in 0..n {
        for i in j..n {
            let x = a[stored_at(n, lower, i, j)];
            h[j * n + i] = if i == j { T::from_real(x.re()) } else { x };
        }
    }
}

/// Scratch elements of `T` that [`sytd2`] needs for order `n`: the lower triangle it reduces
/// and a column of work.
pub const fn sytd2_scratch_len(n: usize) -> usize {
    n * n + n
}

/// LAPACK's `xSYTD2`/`xHETD2` on one column-major `n×n` matrix, of any order: the
/// `lower` (else upper) triangle of `a` becomes the real tridiagonal `T = Qᴴ·A·Q` and the
/// reflectors of `Q` in LAPACK's format, the other triangle untouched; `d[..n]`,
/// `e[..n-1]`, `tau[..n-1]`. `scratch` takes [`sytd2_scratch_len`]`(n)` elements.
///
/// # Panics
/// If a slice is too short.
pub fn sytd2<T: Scalar>(
    a: &mut [T],
    n: usize,
    lower: bool,
    d: &mut [T::Real],
    e: &mut [T::Real],
    tau: &mut [T],
    scratch: &mut [T],
) {
    if n == 0 {
        return;
    }
    let (h, work) = scratch[..sytd2_scratch_len(n)].split_at_mut(n * n);
    let a = &mut a[..n * n];
    let (d, e, tau) = (&mut d[..n], &mut e[..n - 1], &mut tau[..n - 1]);
    load_lower(a, n, lower, h);
    hetd2_lower(h, n, d, e, tau, work);
    for j in 0..n {
        for i in j..n {
            a[stored_at(n, lower, i, j)] = h[j * n + i];
        }
    }
    if !lower {
        d.reverse();
        e.reverse();
        tau.reverse();
    }
}

/// `xSYTD2`/`xHETD2('L')` on the lower triangle of `h` (real diagonal): `d`, `e[..n-1]`, and
/// the reflectors below the subdiagonal with their `tau`; `x` takes `n` elements of work.
fn hetd2_lower<T: Scalar>(
    h: &mut [T],
    n: usize,
    d: &mut [T::Real],
    e: &mut [T::Real],
    tau: &mut [T],
    x: &mut [T],
) {
    let at = |i: usize, j: usize| j * n + i;
    let half = <T::Real as Real>::ONE / (<T::Real as Real>::ONE + <T::Real as Real>::ONE);
    for i in 0..n - 1 {
        // xLARFG on h(i+1.., i): beta (real) at i+1, v below it.
        let taui = larfg(&mut h[at(0, i)..at(n, i)], i + 1, n as u32);
        e[i] = h[at(i + 1, i)].re();
        if taui != T::ZERO {
            // Apply H(i) from both sides to the trailing block A22 = h(i+1.., i+1..), only its
            // lower triangle stored: x = taui·A22·v (xHEMV), then
            // A22 -= v·wᴴ + w·vᴴ with w = x - ½·taui·(xᴴv)·v (xHER2).
            let m = n - i - 1;
            h[at(i + 1, i)] = T::ONE;
            // v ends column i, where the trailing columns begin.
            let (left, trailing) = h.split_at_mut(at(0, i + 1));
            let v = &left[at(i + 1, i)..];
            let a22 = &mut trailing[i + 1..];
            let x = &mut x[..m];
            hemv_lower(a22, n, m, taui, v, x);
            let mut dot = T::ZERO;
            for r in 0..m {
                dot = dot + x[r].conj() * v[r];
            }
            let alpha = -(taui.scale(half) * dot);
            for r in 0..m {
                x[r] = x[r] + alpha * v[r];
            }
            her2_lower(a22, n, m, v, x);
        }
        h[at(i + 1, i)] = T::from_real(e[i]);
        d[i] = h[at(i, i)].re();
        tau[i] = taui;
    }
    d[n - 1] = h[at(n - 1, n - 1)].re();
}

/// `x = taui·A·v` (`xHEMV`) for the `m×m` Hermitian `A` whose lower triangle `a` holds
/// (column-major, leading dimension `ld`, real diagonal). Separate slices (arguments, so that
/// the compiler knows they do not overlap) let its loops vectorize.
fn hemv_lower<T: Scalar>(a: &[T], ld: usize, m: usize, taui: T, v: &[T], x: &mut [T]) {
    let (v, x) = (&v[..m], &mut x[..m]);
    x.fill(T::ZERO);
    for c in 0..m {
        let column = &a[c * ld..c * ld + m];
        let temp1 = taui * v[c];
        let mut temp2 = T::ZERO;
        x[c] = x[c] + temp1.scale(column[c].re());
        for r in c + 1..m {
            x[r] = x[r] + temp1 * column[r];
            temp2 = temp2 + column[r].conj() * v[r];
        }
        x[c] = x[c] + taui * temp2;
    }
}

/// `A -= v·xᴴ + x·vᴴ` (`xHER2`) on the lower triangle of the `m×m` Hermitian `A` in `a`
/// (as in [`hemv_lower`]), its diagonal kept real.
fn her2_lower<T: Scalar>(a: &mut [T], ld: usize, m: usize, v: &[T], x: &[T]) {
    let (v, x) = (&v[..m], &x[..m]);
    for c in 0..m {
        if v[c] != T::ZERO || x[c] != T::ZERO {
            let column = &mut a[c * ld..c * ld + m];
            let temp1 = -x[c].conj();
            let temp2 = -v[c].conj();
            let diag = column[c].re() + (v[c] * temp1 + x[c] * temp2).re();
            column[c] = T::from_real(diag);
            for r in c + 1..m {
                column[r] = column[r] + v[r] * temp1 + x[r] * temp2;
            }
        }
    }
}

/// `xLASCL('G')` of a real vector from `cfrom` to `cto`: multiplied by `cto/cfrom` in steps
/// that neither overflow nor underflow.
fn lascl<R: Real>(cfrom: R, cto: R, x: &mut [R], k: &Constants<R>) {
    let (smlnum, bignum) = (k.safmin, k.safmax);
    let (mut cfromc, mut ctoc) = (cfrom, cto);
    loop {
        let cfrom1 = cfromc * smlnum;
        let (mul, done) = if cfrom1 == cfromc {
            // cfromc is ±inf: multiply by a correctly signed zero or NaN.
            (ctoc / cfromc, true)
        } else {
            let cto1 = ctoc / bignum;
            if cto1 == ctoc {
                // ctoc is zero or ±inf.
                cfromc = k.one;
                (ctoc, true)
            } else if cfrom1.abs() > ctoc.abs() && ctoc != k.zero {
                cfromc = cfrom1;
                (smlnum, false)
            } else if cto1.abs() > cfromc.abs() {
                ctoc = cto1;
                (bignum, false)
            } else {
                (ctoc / cfromc, true)
            }
        };
        for v in x.iter_mut() {
            *v = *v * mul;
        }
        if done {
            return;
        }
    }
}

/// `xLARTG` (LAPACK ≥ 3.10): `(c, s, r)` with `[c s; -s c]·[f; g] = [r; 0]`, `c ≥ 0` and `r`
/// carrying the sign of `f`.
fn lartg<R: Real>(f: R, g: R, k: &Constants<R>) -> (R, R, R) {
    let (f1, g1) = (f.abs(), g.abs());
    if g == k.zero {
        (k.one, k.zero, f)
    } else if f == k.zero {
        (k.zero, k.one.copysign(g), g1)
    } else if f1 > k.rtmin && f1 < k.rtmax && g1 > k.rtmin && g1 < k.rtmax {
        let d = (f * f + g * g).sqrt();
        let r = d.copysign(f);
        (f1 / d, g / r, r)
    } else {
        let big = if f1 < g1 { g1 } else { f1 };
        let big = if big < k.safmin { k.safmin } else { big };
        let u = if k.safmax < big { k.safmax } else { big };
        let (fs, gs) = (f / u, g / u);
        let d = (fs * fs + gs * gs).sqrt();
        let r = d.copysign(f);
        (fs.abs() / d, gs / r, r * u)
    }
}

/// `xLAEV2(a, b, c)`: the eigenvalues `rt1` (larger in magnitude) and `rt2` of
/// `[a b; b c]`, and `(cs1, sn1)`, the unit eigenvector of `rt1`.
fn laev2<R: Real>(a: R, b: R, c: R, k: &Constants<R>) -> (R, R, R, R) {
    let sm = a + c;
    let df = a - c;
    let adf = df.abs();
    let tb = b + b;
    let ab = tb.abs();
    let (acmx, acmn) = if a.abs() > c.abs() { (a, c) } else { (c, a) };
    let rt = if adf > ab {
        let q = ab / adf;
        adf * (k.one + q * q).sqrt()
    } else if adf < ab {
        let q = adf / ab;
        ab * (k.one + q * q).sqrt()
    } else {
        ab * k.two.sqrt()
    };
    let (rt1, rt2, sgn1) = if sm < k.zero {
        let rt1 = k.half * (sm - rt);
        (rt1, (acmx / rt1) * acmn - (b / rt1) * b, -1)
    } else if sm > k.zero {
        let rt1 = k.half * (sm + rt);
        (rt1, (acmx / rt1) * acmn - (b / rt1) * b, 1)
    } else {
        (k.half * rt, -(k.half * rt), 1)
    };
    let (cs, sgn2) = if df >= k.zero {
        (df + rt, 1)
    } else {
        (df - rt, -1)
    };
    let (mut cs1, mut sn1) = if cs.abs() > ab {
        let ct = -tb / cs;
        let sn1 = k.one / (k.one + ct * ct).sqrt();
        (ct * sn1, sn1)
    } else if ab == k.zero {
        (k.one, k.zero)
    } else {
        let tn = -cs / tb;
        let cs1 = k.one / (k.one + tn * tn).sqrt();
        (cs1, tn * cs1)
    };
    if sgn1 == sgn2 {
        (cs1, sn1) = (-sn1, cs1);
    }
    (rt1, rt2, cs1, sn1)
}

/// `xLASR('R', 'V', ·)` for one plane: columns `j` and `j+1` of `z` (`n` rows) become
/// `(s·z₊ + c·zⱼ, c·z₊ - s·zⱼ)`.
fn rotate<T: Scalar>(z: &mut [T], n: usize, j: usize, c: T::Real, s: T::Real) {
    if c == <T::Real as Real>::ONE && s == <T::Real as Real>::ZERO {
        return;
    }
    let (left, right) = z.split_at_mut((j + 1) * n);
    for (zj, zj1) in left[j * n..].iter_mut().zip(&mut right[..n]) {
        let temp = *zj1;
        *zj1 = temp.scale(c) - zj.scale(s);
        *zj = temp.scale(s) + zj.scale(c);
    }
}

/// `xLANST('M')` of a block: the largest `|d|`, `|e|` (NaN if any is NaN).
fn lanst<R: Real>(d: &[R], e: &[R]) -> R {
    d.iter().chain(e).fold(R::ZERO, |m, x| max_nan(m, x.abs()))
}

/// `xSTEQR` with `COMPZ = 'V'` (`z` given: its columns are rotated along) or `'N'`: the
/// eigenvalues of the symmetric tridiagonal `(d, e[..n-1])` into `d`, ascending.
fn steqr<T: Scalar>(
    d: &mut [T::Real],
    e: &mut [T::Real],
    mut z: Option<&mut [T]>,
    n: usize,
    k: &Constants<T::Real>,
) -> i32 {
    let nmaxit = 30 * n;
    let mut jtot = 0;
    let mut l1 = 0;
    while l1 < n {
        if l1 > 0 {
            e[l1 - 1] = k.zero;
        }
        // The end of the unreduced block starting at l1.
        let mut m = n - 1;
        for mm in l1..n - 1 {
            let tst = e[mm].abs();
            if tst == k.zero {
                m = mm;
                break;
            }
            if tst <= (d[mm].abs().sqrt() * d[mm + 1].abs().sqrt()) * k.eps {
                e[mm] = k.zero;
                m = mm;
                break;
            }
        }
        let (mut l, lsv) = (l1, l1);
        let (mut lend, lendsv) = (m, m);
        l1 = m + 1;
        if lend == l {
            continue;
        }
        // Scale the block [l, lend].
        let anorm = lanst(&d[l..=lend], &e[l..lend]);
        let scaled_to = if anorm == k.zero {
            continue;
        } else if anorm > k.ssfmax {
            Some(k.ssfmax)
        } else if anorm < k.ssfmin {
            Some(k.ssfmin)
        } else {
            None
        };
        if let Some(to) = scaled_to {
            lascl(anorm, to, &mut d[l..=lend], k);
            lascl(anorm, to, &mut e[l..lend], k);
        }
        // QL if the bottom end is the larger, else QR.
        if d[lend].abs() < d[l].abs() {
            (l, lend) = (lendsv, lsv);
        }
        if lend > l {
            // QL iteration.
            loop {
                let mut m = lend;
                for mm in l..lend {
                    let tst = e[mm].abs() * e[mm].abs();
                    if tst <= (k.eps2 * d[mm].abs()) * d[mm + 1].abs() + k.safmin {
                        m = mm;
                        break;
                    }
                }
                if m < lend {
                    e[m] = k.zero;
                }
                let mut p = d[l];
                if m == l {
                    // An eigenvalue found.
                    d[l] = p;
                    l += 1;
                    if l <= lend {
                        continue;
                    }
                    break;
                }
                if m == l + 1 {
                    // A 2×2 block: solved directly.
                    let (rt1, rt2, c, s) = laev2(d[l], e[l], d[l + 1], k);
                    if let Some(z) = z.as_deref_mut() {
                        rotate(z, n, l, c, s);
                    }
                    (d[l], d[l + 1], e[l]) = (rt1, rt2, k.zero);
                    l += 2;
                    if l <= lend {
                        continue;
                    }
                    break;
                }
                if jtot == nmaxit {
                    break;
                }
                jtot += 1;
                // Wilkinson shift.
                let g = (d[l + 1] - p) / (k.two * e[l]);
                let r = lapy2(g, k.one);
                let mut g = d[m] - p + (e[l] / (g + r.copysign(g)));
                let (mut s, mut c) = (k.one, k.one);
                p = k.zero;
                for i in (l..m).rev() {
                    let f = s * e[i];
                    let b = c * e[i];
                    let r;
                    (c, s, r) = lartg(g, f, k);
                    if i != m - 1 {
                        e[i + 1] = r;
                    }
                    g = d[i + 1] - p;
                    let r = (d[i] - g) * s + k.two * c * b;
                    p = s * r;
                    d[i + 1] = g + p;
                    g = c * r - b;
                    // xLASR('R', 'V', 'B') applies the saved rotations in this same order.
                    if let Some(z) = z.as_deref_mut() {
                        rotate(z, n, i, c, -s);
                    }
                }
                d[l] = d[l] - p;
                e[l] = g;
            }
        } else {
            // QR iteration.
            loop {
                let mut m = lend;
                for mm in (lend + 1..=l).rev() {
                    let tst = e[mm - 1].abs() * e[mm - 1].abs();
                    if tst <= (k.eps2 * d[mm].abs()) * d[mm - 1].abs() + k.safmin {
                        m = mm;
                        break;
                    }
                }
                if m > lend {
                    e[m - 1] = k.zero;
                }
                let mut p = d[l];
                if m == l {
                    d[l] = p;
                    if l > lend {
                        l -= 1;
                        continue;
                    }
                    break;
                }
                if m + 1 == l {
                    let (rt1, rt2, c, s) = laev2(d[l - 1], e[l - 1], d[l], k);
                    if let Some(z) = z.as_deref_mut() {
                        rotate(z, n, l - 1, c, s);
                    }
                    (d[l - 1], d[l], e[l - 1]) = (rt1, rt2, k.zero);
                    if l >= lend + 2 {
                        l -= 2;
                        continue;
                    }
                    break;
                }
                if jtot == nmaxit {
                    break;
                }
                jtot += 1;
                let g = (d[l - 1] - p) / (k.two * e[l - 1]);
                let r = lapy2(g, k.one);
                let mut g = d[m] - p + (e[l - 1] / (g + r.copysign(g)));
                let (mut s, mut c) = (k.one, k.one);
                p = k.zero;
                for i in m..l {
                    let f = s * e[i];
                    let b = c * e[i];
                    let r;
                    (c, s, r) = lartg(g, f, k);
                    if i != m {
                        e[i - 1] = r;
                    }
                    g = d[i] - p;
                    let r = (d[i + 1] - g) * s + k.two * c * b;
                    p = s * r;
                    d[i] = g + p;
                    g = c * r - b;
                    if let Some(z) = z.as_deref_mut() {
                        rotate(z, n, i, c, s);
                    }
                }
                d[l] = d[l] - p;
                e[l - 1] = g;
            }
        }
        if let Some(to) = scaled_to {
            lascl(to, anorm, &mut d[lsv..=lendsv], k);
            lascl(to, anorm, &mut e[lsv..lendsv], k);
        }
        if jtot == nmaxit {
            return e[..n - 1].iter().filter(|&&x| x != k.zero).count() as i32;
        }
    }
    // Selection sort, ascending: the fewest eigenvector swaps.
    for i in 0..n - 1 {
        let mut kmin = i;
        let mut p = d[i];
        for (j, &x) in d.iter().enumerate().skip(i + 1) {
            if x < p {
                (kmin, p) = (j, x);
            }
        }
        if kmin != i {
            d[kmin] = d[i];
            d[i] = p;
            if let Some(z) = z.as_deref_mut() {
                for r in 0..n {
                    z.swap(i * n + r, kmin * n + r);
                }
            }
        }
    }
    0
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests;
