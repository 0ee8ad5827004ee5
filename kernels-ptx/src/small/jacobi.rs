//! CPU only: the singular value decomposition of [`LANES`] small matrices at once, one per SIMD
//! lane, by one-sided (Hestenes) Jacobi: column pairs of each matrix are rotated until every
//! pair is orthogonal to working precision (LAPACK's `xGESVJ` criterion, `|aₚᴴa_q| ≤
//! √m·ε·‖aₚ‖‖a_q‖`); the singular values are then the column norms, `U` the normalized
//! columns and `V` the product of the rotations. For the CPU handlers' batches of small
//! matrices, where one `?gesdd` call per matrix spends more on its fixed costs than on
//! arithmetic: here every step runs across the lanes (fixed-length loops the compiler
//! vectorizes), each lane with its own rotation angles.
//!
//! The matrices are tall (`m ≥ n`; the caller passes `Aᴴ` of a wide `A`). Real and imaginary
//! parts lie in separate planes of the scratch, element `(i, j)` of lane `l` at
//! `(j·m + i)·LANES + l`, so that complex arithmetic vectorizes as real arithmetic does.
//! One-sided Jacobi computes small singular values to high relative accuracy; a column that
//! ends up zero (rank deficiency) has no direction of its own, and `U` gets an orthonormal
//! completion there (Gram–Schmidt from unit vectors). `U` is `m × n`: a full `U` of a tall
//! matrix is the caller's to get elsewhere.

use super::simd::LANES;
use crate::scalar::{Real, Scalar};

/// Sweeps over all column pairs before a lane that still rotates reports failure (`xGESVJ`'s
/// `NSWEEP`); random matrices take 7 at n = 8 and 10 at n = 32, the last rotating nothing.
pub const MAX_SWEEPS: usize = 30;

/// Real elements of scratch that [`Lanes::new`] takes for `m × n` matrices (`m ≥ n`),
/// complex or real.
pub const fn scratch_len(complex: bool, m: usize, n: usize) -> usize {
    let planes = if complex { 2 } else { 1 };
    planes * LANES * (m * n + n * n) + LANES * n
}

/// [`LANES`] matrices being decomposed, in a caller's scratch.
pub struct Lanes<'s, T: Scalar> {
    m: usize,
    n: usize,
    /// `A`, then `U` (`m × n`): the real plane, then (complex `T`) the imaginary plane.
    a: &'s mut [T::Real],
    /// `V` (`n × n`), planes as `a`.
    v: &'s mut [T::Real],
    /// The squared column norms during the sweeps, then the singular values.
    norms: &'s mut [T::Real],
    /// Each lane's power-of-two scale, which brings its largest element to `[1, 2)`.
    scale: [T::Real; LANES],
    finite: [bool; LANES],
    converged: [bool; LANES],
}

impl<'s, T: Scalar> Lanes<'s, T> {
    /// Takes `scratch` (at least [`scratch_len`] elements) for `m × n` matrices, `m ≥ n`.
    /// Every lane starts as a zero matrix.
    ///
    /// # Panics
    /// If `m < n` or `scratch` is too short.
    pub fn new(m: usize, n: usize, scratch: &'s mut [T::Real]) -> Self {
        assert!(m >= n, "tall matrices");
        let len = scratch_len(T::COMPLEX, m, n);
        assert!(scratch.len() >= len, "the scratch needs {len} elements");
        let planes = if T::COMPLEX { 2 } else { 1 };
        let (a, rest) = scratch[..len].split_at_mut(planes * LANES * m * n);
        let (v, norms) = rest.split_at_mut(planes * LANES * n * n);
        a.fill(<T::Real as Real>::ZERO);
        Lanes {
            m,
            n,
            a,
            v,
            norms,
            scale: [<T::Real as Real>::ONE; LANES],
            finite: [true; LANES],
            converged: [true; LANES],
        }
    }

    /// Sets lane `lane`'s matrix: element `(i, j)` is `element(i, j)`.
    #[inline(always)]
    pub fn load(&mut self, lane: usize, mut element: impl FnMut(usize, usize) -> T) {
        let (m, n) = (self.m, self.n);
        let imaginary = LANES * m * n;
        for j in 0..n {
            for i in 0..m {
                let x = element(i, j);
                let e = (j * m + i) * LANES + lane;
                self.a[e] = x.re();
                if T::COMPLEX {
                    self.a[imaginary + e] = x.im();
                }
            }
        }
    }

    /// Decomposes every lane, with `V` if `vectors` (else only the singular values and, if
    /// asked for later, `U`).
    #[inline(always)]
    pub fn run(&mut self, vectors: bool) {
        self.scale_lanes();
        if vectors {
            self.set_v_identity();
        }
        self.sweeps(vectors);
        self.finish();
    }

    /// Whether lane `lane`'s matrix had only finite elements (else its results are zeros).
    pub fn finite(&self, lane: usize) -> bool {
        self.finite[lane]
    }

    /// Whether lane `lane` converged within [`MAX_SWEEPS`] (a non-finite lane counts as
    /// converged).
    pub fn converged(&self, lane: usize) -> bool {
        self.converged[lane]
    }

    /// Singular value `j` of lane `lane` (descending in `j`).
    pub fn singular_value(&self, lane: usize, j: usize) -> T::Real {
        self.norms[j * LANES + lane]
    }

    /// Element `(i, j)` of lane `lane`'s `U` (`m × n`, orthonormal columns).
    #[inline(always)]
    pub fn u(&self, lane: usize, i: usize, j: usize) -> T {
        let e = (j * self.m + i) * LANES + lane;
        self.element(self.a, LANES * self.m * self.n, e)
    }

    /// Element `(i, j)` of lane `lane`'s `V` (`n × n`, unitary; `A = U·Σ·Vᴴ`).
    #[inline(always)]
    pub fn v(&self, lane: usize, i: usize, j: usize) -> T {
        let e = (j * self.n + i) * LANES + lane;
        self.element(self.v, LANES * self.n * self.n, e)
    }

    #[inline(always)]
    fn element(&self, planes: &[T::Real], imaginary: usize, e: usize) -> T {
        if T::COMPLEX {
            T::from_re_im(planes[e], planes[imaginary + e])
        } else {
            T::from_real(planes[e])
        }
    }

    /// Scales each lane by the power of two that brings its largest `|re|`, `|im|` to
    /// `[1, 2)` (exact, and the squared norms can neither overflow nor lose the small
    /// columns to underflow first); a lane with a non-finite element becomes zero.
    #[inline(always)]
    #[allow(clippy::eq_op, clippy::needless_range_loop)] // `x - x`; lanes index two arrays
    fn scale_lanes(&mut self) {
        let zero = <T::Real as Real>::ZERO;
        let len = self.a.len();
        let mut largest = [zero; LANES];
        for chunk in self.a.chunks_exact(LANES) {
            for l in 0..LANES {
                let x = chunk[l];
                // NaN propagates through `x - x`, and so does infinity.
                if x - x != zero {
                    self.finite[l] = false;
                } else if x.abs() > largest[l] {
                    largest[l] = x.abs();
                }
            }
        }
        for l in 0..LANES {
            self.scale[l] = if largest[l] > zero {
                largest[l].recip_pow2()
            } else {
                <T::Real as Real>::ONE
            };
            if !self.finite[l] {
                self.scale[l] = zero;
            }
        }
        let scale = self.scale;
        for chunk in self.a[..len].chunks_exact_mut(LANES) {
            for l in 0..LANES {
                // A non-finite lane's scale is zero: NaN · 0 is NaN, so select instead.
                chunk[l] = if scale[l] == zero {
                    zero
                } else {
                    chunk[l] * scale[l]
                };
            }
        }
    }

    #[inline(always)]
    fn set_v_identity(&mut self) {
        let n = self.n;
        self.v.fill(<T::Real as Real>::ZERO);
        for j in 0..n {
            self.v[(j * n + j) * LANES..][..LANES].fill(<T::Real as Real>::ONE);
        }
    }

    /// The squared norms of the first `n` columns of `a`.
    #[inline(always)]
    fn column_norms(&mut self) {
        let (m, n) = (self.m, self.n);
        let imaginary = LANES * m * n;
        for j in 0..n {
            let mut sum = [<T::Real as Real>::ZERO; LANES];
            for i in 0..m {
                let e = (j * m + i) * LANES;
                let re = lanes(self.a, e);
                for l in 0..LANES {
                    sum[l] = sum[l] + re[l] * re[l];
                }
                if T::COMPLEX {
                    let im = lanes(self.a, imaginary + e);
                    for l in 0..LANES {
                        sum[l] = sum[l] + im[l] * im[l];
                    }
                }
            }
            self.norms[j * LANES..][..LANES].copy_from_slice(&sum);
        }
    }

    /// Cyclic-by-rows sweeps until a sweep rotates no lane (or [`MAX_SWEEPS`]).
    #[inline(always)]
    fn sweeps(&mut self, vectors: bool) {
        let (m, n) = (self.m, self.n);
        let zero = <T::Real as Real>::ZERO;
        let one = <T::Real as Real>::ONE;
        let mut tolerance = <T::Real as Real>::EPSILON;
        // √m·ε, without a square root of an integer in `Real`: the smallest power of two whose
        // square is at least m, a bound within a factor √2.
        let mut root = 1;
        while root * root < m {
            root *= 2;
            tolerance = tolerance * <T::Real as Real>::TWO;
        }
        let a_im = LANES * m * n;
        let v_im = LANES * n * n;
        let mut rotated_in_sweep = [true; LANES];
        for _ in 0..MAX_SWEEPS {
            if !rotated_in_sweep.iter().any(|&r| r) {
                break;
            }
            rotated_in_sweep = [false; LANES];
            // Fresh norms each sweep: within one they are updated in closed form.
            self.column_norms();
            for p in 0..n {
                for q in p + 1..n {
                    // g = aₚᴴ·a_q.
                    let (mut g_re, mut g_im) = ([zero; LANES], [zero; LANES]);
                    for i in 0..m {
                        let (ep, eq) = ((p * m + i) * LANES, (q * m + i) * LANES);
                        let (pr, qr) = (lanes(self.a, ep), lanes(self.a, eq));
                        for l in 0..LANES {
                            g_re[l] = g_re[l] + pr[l] * qr[l];
                        }
                        if T::COMPLEX {
                            let (pi, qi) = (lanes(self.a, a_im + ep), lanes(self.a, a_im + eq));
                            for l in 0..LANES {
                                g_re[l] = g_re[l] + pi[l] * qi[l];
                                g_im[l] = g_im[l] + (pr[l] * qi[l] - pi[l] * qr[l]);
                            }
                        }
                    }
                    // Per lane: the rotation [aₚ, a_q] ← [c·aₚ − w·a_q, s·aₚ + z·a_q] with
                    // w = s·conj(e), z = c·conj(e), e = g/|g| (the identity where the pair is
                    // orthogonal already).
                    let mut c = [one; LANES];
                    let mut s = [zero; LANES];
                    let (mut w_re, mut w_im) = ([zero; LANES], [zero; LANES]);
                    let (mut z_re, mut z_im) = ([one; LANES], [zero; LANES]);
                    // Branch-free across the lanes (selects), so that it vectorizes.
                    let mut rotate = [false; LANES];
                    for l in 0..LANES {
                        let (alpha, beta) = (self.norms[p * LANES + l], self.norms[q * LANES + l]);
                        let g = if T::COMPLEX {
                            modulus(g_re[l], g_im[l])
                        } else {
                            g_re[l].abs()
                        };
                        // Negated so that a NaN g (a non-finite lane) counts as orthogonal.
                        #[allow(clippy::neg_cmp_op_on_partial_ord)]
                        let orthogonal = !(g > tolerance * alpha.sqrt() * beta.sqrt());
                        let g = if orthogonal { one } else { g };
                        let zeta = (beta - alpha) / (g + g);
                        // A huge ζ (ζ² = ∞) gives t = 0: an angle below ε is no rotation.
                        let t = one / (zeta.abs() + (one + zeta * zeta).sqrt());
                        let t = if zeta < zero { -t } else { t };
                        let cos = one / (one + t * t).sqrt();
                        let sin = cos * t;
                        rotate[l] = !orthogonal && sin != zero;
                        let (e_re, e_im) = (g_re[l] / g, g_im[l] / g);
                        if rotate[l] {
                            (c[l], s[l]) = (cos, sin);
                            (w_re[l], w_im[l]) = (sin * e_re, -(sin * e_im));
                            (z_re[l], z_im[l]) = (cos * e_re, -(cos * e_im));
                            self.norms[p * LANES + l] = max(alpha - t * g, zero);
                            self.norms[q * LANES + l] = beta + t * g;
                        }
                    }
                    let any = rotate.iter().any(|&r| r);
                    for l in 0..LANES {
                        rotated_in_sweep[l] |= rotate[l];
                    }
                    if !any {
                        continue;
                    }
                    let rotation = Rotation {
                        c,
                        s,
                        w_re,
                        w_im,
                        z_re,
                        z_im,
                    };
                    rotation.apply::<T>(self.a, m, a_im, p, q);
                    if vectors {
                        rotation.apply::<T>(self.v, n, v_im, p, q);
                    }
                }
            }
        }
        self.converged = core::array::from_fn(|l| !rotated_in_sweep[l]);
    }

    /// Singular values from fresh column norms, sorted descending with their columns of `U`
    /// and `V`; `U`'s columns normalized, and completed where they are (all but) zero.
    #[inline(always)]
    fn finish(&mut self) {
        let (m, n) = (self.m, self.n);
        let zero = <T::Real as Real>::ZERO;
        self.column_norms();
        for e in 0..n * LANES {
            self.norms[e] = self.norms[e].sqrt();
        }
        for l in 0..LANES {
            // Selection sort: n ≤ a few dozen, and it moves each column once.
            for j in 0..n {
                let mut largest = j;
                for k in j + 1..n {
                    if self.norms[k * LANES + l] > self.norms[largest * LANES + l] {
                        largest = k;
                    }
                }
                if largest != j {
                    self.norms.swap(j * LANES + l, largest * LANES + l);
                    swap_columns::<T>(self.a, m, LANES * m * n, l, j, largest);
                    swap_columns::<T>(self.v, n, LANES * n * n, l, j, largest);
                }
            }
        }
        let a_im = LANES * m * n;
        let threshold = <T::Real as Real>::SAFE_MIN.sqrt();
        for j in 0..n {
            let sigma = lanes(self.norms, j * LANES);
            let inverse: [T::Real; LANES] = core::array::from_fn(|l| {
                if sigma[l] >= threshold {
                    <T::Real as Real>::ONE / sigma[l]
                } else {
                    zero
                }
            });
            for i in 0..m {
                let e = (j * m + i) * LANES;
                for plane in [0, a_im].into_iter().take(if T::COMPLEX { 2 } else { 1 }) {
                    let x = &mut self.a[plane + e..][..LANES];
                    for l in 0..LANES {
                        x[l] = x[l] * inverse[l];
                    }
                }
            }
        }
        // A column whose squared norm could underflow has no reliable direction. The values
        // are sorted, so such columns come last, after the unit ones.
        for l in 0..LANES {
            for j in (0..n).filter(|&j| self.norms[j * LANES + l] < threshold) {
                complete_column::<T>(self.a, m, a_im, l, j);
            }
        }
        for l in 0..LANES {
            let unscale = if self.scale[l] == zero {
                zero
            } else {
                <T::Real as Real>::ONE / self.scale[l]
            };
            for j in 0..n {
                self.norms[j * LANES + l] = self.norms[j * LANES + l] * unscale;
            }
        }
    }
}

/// One rotation per lane of columns `p` and `q` (`len` rows; imaginary plane at `imaginary`).
struct Rotation<R> {
    c: [R; LANES],
    s: [R; LANES],
    w_re: [R; LANES],
    w_im: [R; LANES],
    z_re: [R; LANES],
    z_im: [R; LANES],
}

impl<R: Real> Rotation<R> {
    #[inline(always)]
    fn apply<T: Scalar<Real = R>>(
        &self,
        planes: &mut [R],
        len: usize,
        imaginary: usize,
        p: usize,
        q: usize,
    ) {
        let Rotation {
            c,
            s,
            w_re,
            w_im,
            z_re,
            z_im,
        } = self;
        for i in 0..len {
            let (ep, eq) = ((p * len + i) * LANES, (q * len + i) * LANES);
            let pr = *lanes(planes, ep);
            let qr = *lanes(planes, eq);
            if T::COMPLEX {
                let pi = *lanes(planes, imaginary + ep);
                let qi = *lanes(planes, imaginary + eq);
                let mut out = [[R::ZERO; LANES]; 4];
                for l in 0..LANES {
                    out[0][l] = c[l] * pr[l] - (w_re[l] * qr[l] - w_im[l] * qi[l]);
                    out[1][l] = c[l] * pi[l] - (w_re[l] * qi[l] + w_im[l] * qr[l]);
                    out[2][l] = s[l] * pr[l] + (z_re[l] * qr[l] - z_im[l] * qi[l]);
                    out[3][l] = s[l] * pi[l] + (z_re[l] * qi[l] + z_im[l] * qr[l]);
                }
                planes[ep..ep + LANES].copy_from_slice(&out[0]);
                planes[imaginary + ep..][..LANES].copy_from_slice(&out[1]);
                planes[eq..eq + LANES].copy_from_slice(&out[2]);
                planes[imaginary + eq..][..LANES].copy_from_slice(&out[3]);
            } else {
                let mut out = [[R::ZERO; LANES]; 2];
                for l in 0..LANES {
                    out[0][l] = c[l] * pr[l] - w_re[l] * qr[l];
                    out[1][l] = s[l] * pr[l] + z_re[l] * qr[l];
                }
                planes[ep..ep + LANES].copy_from_slice(&out[0]);
                planes[eq..eq + LANES].copy_from_slice(&out[1]);
            }
        }
    }
}

/// Swaps columns `j` and `k` (`len` rows) of lane `l`.
fn swap_columns<T: Scalar>(
    planes: &mut [T::Real],
    len: usize,
    imaginary: usize,
    l: usize,
    j: usize,
    k: usize,
) {
    for i in 0..len {
        let (ej, ek) = ((j * len + i) * LANES + l, (k * len + i) * LANES + l);
        planes.swap(ej, ek);
        if T::COMPLEX {
            planes.swap(imaginary + ej, imaginary + ek);
        }
    }
}

/// `|re + i·im|` without squaring the parts: the product of two columns as small as a graded
/// single-precision matrix's last ones (norms 1e-8 and 1e-12) has parts whose squares
/// underflow (and XLA flushes subnormals), which made such a pair look orthogonal and left
/// `U`'s and `V`'s columns far from it (c64, 5×4: ‖UᴴU − I‖ up to 0.5 where its singular
/// values spread past 1/ε; none in 300 such batches since). Infinite where a part is; a NaN
/// part gives NaN or zero: either way the pair is not rotated (the lane is reported
/// non-finite apart).
#[inline(always)]
fn modulus<R: Real>(re: R, im: R) -> R {
    let (re, im) = (re.abs(), im.abs());
    let (big, small) = if re > im { (re, im) } else { (im, re) };
    let ratio = small / big;
    if big == R::ZERO || big == R::INFINITY {
        big
    } else {
        big * (R::ONE + ratio * ratio).sqrt()
    }
}

/// Makes column `j` of lane `l` (of `m` rows) a unit vector orthogonal to columns `0..j`
/// (unit vectors already): the first unit vector `e_r` whose part orthogonal to them keeps at
/// least half its length (one exists: they span fewer than `m` dimensions), by Gram–Schmidt
/// twice.
fn complete_column<T: Scalar>(
    planes: &mut [T::Real],
    m: usize,
    imaginary: usize,
    l: usize,
    j: usize,
) {
    let zero = <T::Real as Real>::ZERO;
    let half = <T::Real as Real>::ONE / <T::Real as Real>::TWO;
    let at = |i: usize, k: usize| (k * m + i) * LANES + l;
    let get = |planes: &[T::Real], i: usize, k: usize| {
        T::from_re_im(
            planes[at(i, k)],
            if T::COMPLEX {
                planes[imaginary + at(i, k)]
            } else {
                zero
            },
        )
    };
    let set = |planes: &mut [T::Real], i: usize, k: usize, x: T| {
        planes[at(i, k)] = x.re();
        if T::COMPLEX {
            planes[imaginary + at(i, k)] = x.im();
        }
    };
    for r in 0..m {
        for i in 0..m {
            set(planes, i, j, if i == r { T::ONE } else { T::ZERO });
        }
        for _ in 0..2 {
            for k in 0..j {
                // x ← x − u_k·(u_kᴴ·x).
                let mut dot = T::ZERO;
                for i in 0..m {
                    dot = dot + get(planes, i, k).conj() * get(planes, i, j);
                }
                for i in 0..m {
                    let x = get(planes, i, j) - get(planes, i, k) * dot;
                    set(planes, i, j, x);
                }
            }
        }
        let norm = (0..m)
            .fold(zero, |s, i| s + get(planes, i, j).fused_norm_sqr())
            .sqrt();
        if norm > half {
            for i in 0..m {
                let x = get(planes, i, j).scale(<T::Real as Real>::ONE / norm);
                set(planes, i, j, x);
            }
            return;
        }
    }
}

#[inline(always)]
fn lanes<R>(s: &[R], e: usize) -> &[R; LANES] {
    s[e..e + LANES].try_into().unwrap()
}

#[inline(always)]
fn max<R: Real>(x: R, y: R) -> R {
    if x > y {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests;
