//! Batched small Householder QR in LAPACK's formats: `geqrf` (R above the diagonal, the
//! reflectors below it, `tau`) and `orgqr`/`ungqr` (the first `n` columns of Q from them),
//! column-major matrices back to back as in the parent module.
//!
//! Two shapes. **Columns** (`max(m, n) ≤ 32`): a group of `W` lanes per matrix, lane `j` holding
//! column `j` in registers. Unlike LU, every reduction of a Householder step runs down a
//! column (the norm of the pivot column, the `vᴴ·A(:, j)` of each trailing column), so with a
//! column per lane they are sequential sums inside one lane, in the order of LAPACK's
//! reference `xNRM2`/`xGEMV`/`xGER`; the only traffic is broadcasting the reflector (one
//! shuffle per element). The results equal a sequential `xGEQR2`/`xORG2R` bit for bit (the
//! tests check this); they differ from an optimized LAPACK or cuSOLVER by rounding only.
//! **Block** (up to 128, and complex128 past 16, whose 32 registers columns do not fit): one
//! block per matrix in shared memory, a thread per column, the same operations in the same
//! order ([`geqrf_block`], [`orgqr_block`]).

use super::{
    dynamic_shared, lane_group, launch, padded_bytes, shfl, stage, Keep, LaneGroup, Staging,
    Variant, MAX_SHARED_BYTES,
};
use crate::grid::{block_dim_x, block_idx_x, grid_dim_x, sync_threads, thread_idx_x};
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig, ScalarKind};
use crate::scalar::{Real, Scalar};

/// A column the Householder helpers ([`larfg`]) work on: `W` registers (`[T; W]`), whose rows
/// are visited by `unrolled!` so that every index is a constant after inlining, or memory (a
/// slice), visited by a plain loop. Both see the same operations in the same order.
pub trait Column<T: Copy> {
    /// `f(self, r)` for each row `r` in `lo..m`, in order.
    fn each_row(&mut self, lo: usize, m: u32, f: impl FnMut(&mut Self, usize));
    fn at(&self, r: usize) -> T;
    fn put(&mut self, r: usize, value: T);
}

impl<T: Copy, const W: usize> Column<T> for [T; W] {
    #[inline(always)]
    fn each_row(&mut self, lo: usize, m: u32, mut f: impl FnMut(&mut Self, usize)) {
        unrolled!(r in 0..W, {
            if r >= lo && (r as u32) < m {
                f(self, r);
            }
        });
    }
    #[inline(always)]
    fn at(&self, r: usize) -> T {
        self[r]
    }
    #[inline(always)]
    fn put(&mut self, r: usize, value: T) {
        self[r] = value;
    }
}

impl<T: Copy> Column<T> for [T] {
    #[inline(always)]
    fn each_row(&mut self, lo: usize, m: u32, mut f: impl FnMut(&mut Self, usize)) {
        for r in lo..m as usize {
            f(self, r);
        }
    }
    #[inline(always)]
    fn at(&self, r: usize) -> T {
        self[r]
    }
    #[inline(always)]
    fn put(&mut self, r: usize, value: T) {
        self[r] = value;
    }
}

/// `xNRM2` of `x[lo..m]` (`lo` a constant after inlining for registers): the plain sum of
/// squares of the parts in order (Blue's algorithm for mid-range values, LAPACK ≥ 3.10); when
/// that overflows or underflows, the sum again with the parts scaled by an exact power of two.
#[inline(always)]
fn nrm2<T: Scalar, C: Column<T> + ?Sized>(x: &mut C, lo: usize, m: u32) -> T::Real {
    let zero = <T::Real as Real>::ZERO;
    let mut ssq = zero;
    x.each_row(lo, m, |x, r| {
        let (re, im) = (x.at(r).re(), x.at(r).im());
        ssq = ssq + re * re;
        if T::COMPLEX {
            ssq = ssq + im * im;
        }
    });
    let tiny = <T::Real as Real>::SAFE_MIN * <T::Real as Real>::UNDERFLOW_LIFT;
    if ssq >= tiny && ssq < <T::Real as Real>::INFINITY {
        return ssq.sqrt();
    }
    if ssq.is_nan() {
        // A NaN part: the norm is NaN, as LAPACK's. (The rescaling below skips NaN parts, so a
        // column of nothing but NaN would come out as a zero norm, i.e. H = I.)
        return ssq;
    }
    // Rare (and lane-local: no shuffles, so divergence is harmless).
    let mut big = zero;
    x.each_row(lo, m, |x, r| {
        let (re, im) = (x.at(r).re().abs(), x.at(r).im().abs());
        big = if re > big { re } else { big };
        big = if im > big { im } else { big };
    });
    if big == zero || big == <T::Real as Real>::INFINITY {
        // All zero, or an infinity (big is never NaN: there is none here).
        return big;
    }
    let p = big.recip_pow2();
    let mut ssq = zero;
    x.each_row(lo, m, |x, r| {
        let (re, im) = (x.at(r).re() * p, x.at(r).im() * p);
        ssq = ssq + re * re;
        if T::COMPLEX {
            ssq = ssq + im * im;
        }
    });
    ssq.sqrt() / p
}

/// `xLAPY2(x, y)`: `sqrt(x² + y²)` without unnecessary overflow, NaN if either is NaN.
#[inline(always)]
pub(crate) fn lapy2<R: Real>(x: R, y: R) -> R {
    if x.is_nan() {
        return x;
    }
    if y.is_nan() {
        return y;
    }
    let (xa, ya) = (x.abs(), y.abs());
    let (w, v) = if xa < ya { (ya, xa) } else { (xa, ya) };
    if v == R::ZERO || w > R::HUGE {
        return w;
    }
    let q = v / w;
    w * (R::ONE + q * q).sqrt()
}

/// `xLAPY2(x, z)` (real) or `xLAPY3(x, y, z)` (complex): `sqrt(x² + y² + z²)` without
/// unnecessary overflow, in LAPACK's formulas.
#[inline(always)]
pub(crate) fn lapy<T: Scalar>(x: T::Real, y: T::Real, z: T::Real) -> T::Real {
    if !T::COMPLEX {
        return lapy2(x, z);
    }
    let zero = <T::Real as Real>::ZERO;
    let (xa, ya, za) = (x.abs(), y.abs(), z.abs());
    let w = if xa < ya { ya } else { xa };
    let w = if w < za { za } else { w };
    if w == zero || w > <T::Real as Real>::HUGE {
        return xa + ya + za;
    }
    let (p, q, r) = (xa / w, ya / w, za / w);
    w * (p * p + q * q + r * r).sqrt()
}

/// `xLARFG` on the column `x[i..m]` (`alpha = x[i]`; `i` a constant after inlining for
/// registers): leaves `beta` in `x[i]`, `v` below it, and returns `tau`.
#[inline(always)]
pub(crate) fn larfg<T: Scalar, C: Column<T> + ?Sized>(x: &mut C, i: usize, m: u32) -> T {
    let zero = <T::Real as Real>::ZERO;
    // DLARFG returns for a column of one element (N ≤ 1); ZLARFG still makes it real.
    if !T::COMPLEX && i as u32 + 1 >= m {
        return T::ZERO;
    }
    let mut xnorm = nrm2(x, i + 1, m);
    let (mut alphr, mut alphi) = (x.at(i).re(), x.at(i).im());
    if xnorm == zero && alphi == zero {
        return T::ZERO; // H = I
    }
    let mut beta = -lapy::<T>(alphr, alphi, xnorm).copysign(alphr);
    let (safmin, rsafmn) = (
        <T::Real as Real>::LARFG_SAFMIN,
        <T::Real as Real>::LARFG_RSAFMN,
    );
    let mut knt = 0;
    if beta.abs() < safmin {
        // xNORM, BETA may be inaccurate; scale X and recompute them.
        loop {
            knt += 1;
            x.each_row(i + 1, m, |x, r| x.put(r, x.at(r).scale(rsafmn)));
            beta = beta * rsafmn;
            alphi = alphi * rsafmn;
            alphr = alphr * rsafmn;
            if !(beta.abs() < safmin && knt < 20) {
                break;
            }
        }
        xnorm = nrm2(x, i + 1, m);
        beta = -lapy::<T>(alphr, alphi, xnorm).copysign(alphr);
    }
    let tau = T::from_re_im((beta - alphr) / beta, -alphi / beta);
    let alpha = T::from_re_im(alphr, alphi);
    // DSCAL by ONE / (ALPHA - BETA); ZSCAL by ZLADIV(ONE, ALPHA - BETA).
    let s = T::ONE.quotient(alpha - T::from_real(beta));
    x.each_row(i + 1, m, |x, r| x.put(r, s * x.at(r)));
    for _ in 0..knt {
        beta = beta * safmin;
    }
    x.put(i, T::from_real(beta));
    tau
}

/// `xLARF('Left')` of the reflector `(1, v[1..])` and `tau` to the column `c` (as long as `v`),
/// as the kernels apply it: `w = Σ conj(c[r])·v[r]` in order, then `c[r] += v[r]·(-tau·conj(w))`
/// unless `tau` or `w` is zero.
pub fn larf<T: Scalar>(v: &[T], tau: T, c: &mut [T]) {
    if tau == T::ZERO {
        return;
    }
    let vr = |r: usize| if r == 0 { T::ONE } else { v[r] };
    let mut w = T::ZERO;
    for (r, x) in c.iter().enumerate() {
        w = w + x.conj() * vr(r);
    }
    if w != T::ZERO {
        let temp = -tau * w.conj();
        for (r, x) in c.iter_mut().enumerate() {
            *x = *x + vr(r) * temp;
        }
    }
}

/// `xGEQR2` on one column-major `m×n` matrix (leading dimension `m`) as the GPU kernels
/// compute it (their `xLARFG`, then [`larf`] on each trailing column), for the CPU handlers'
/// tiny matrices and as the kernels' reference: R on and above the diagonal, the reflectors
/// below it, and `tau[..min(m, n)]`.
///
/// # Panics
/// If a slice is too short.
pub fn geqr2<T: Scalar>(a: &mut [T], m: usize, n: usize, tau: &mut [T]) {
    let a = &mut a[..m * n];
    for i in 0..m.min(n) {
        let (left, right) = a.split_at_mut((i + 1) * m);
        let col = &mut left[i * m..];
        tau[i] = larfg(col, i, m as u32);
        for c in right.chunks_exact_mut(m) {
            larf(&col[i..], tau[i].conj(), &mut c[i..]);
        }
    }
}

/// `xORG2R`/`xUNG2R` on one column-major `m×n` matrix (leading dimension `lda ≥ m`) with `k`
/// reflectors from [`geqr2`] and their `tau`, as the GPU kernels compute it: the first `n`
/// columns of `Q = H(1)⋯H(k)`.
///
/// # Panics
/// If a slice is too short.
pub fn org2r<T: Scalar>(a: &mut [T], m: usize, n: usize, lda: usize, k: usize, tau: &[T]) {
    if n == 0 {
        return;
    }
    let a = &mut a[..(n - 1) * lda + m];
    for (j, col) in a.chunks_mut(lda).enumerate().skip(k) {
        for (r, x) in col[..m].iter_mut().enumerate() {
            *x = if r == j { T::ONE } else { T::ZERO };
        }
    }
    for i in (0..k).rev() {
        let (col, right) = a[i * lda..].split_at_mut(m);
        // Each chunk of `right` ends with the next column's m rows.
        for c in right.chunks_mut(lda).map(|c| &mut c[lda - m..]) {
            larf(&col[i..], tau[i], &mut c[i..m]);
        }
        for x in &mut col[i + 1..] {
            *x = -tau[i] * *x;
        }
        col[i] = T::ONE - tau[i];
        col[..i].fill(T::ZERO);
    }
}

/// `xLARF('Right')` of the reflector `(1, v[1..])` and `tau` to one row `x` of a matrix (element
/// `r` at `x[r·stride]`, as long as `v`), as LAPACK applies it to each row: `w = Σ x[r]·v[r]`
/// in order (xGEMV), then `x[r] += w·(-tau·conj(v[r]))` (xGERC) unless `tau` or `w` is zero.
pub fn larf_row<T: Scalar>(v: &[T], tau: T, x: &mut [T], stride: usize) {
    if tau == T::ZERO {
        return;
    }
    let vr = |r: usize| if r == 0 { T::ONE } else { v[r] };
    let mut w = T::ZERO;
    for r in 0..v.len() {
        w = w + x[r * stride] * vr(r);
    }
    if w != T::ZERO {
        for r in 0..v.len() {
            x[r * stride] = x[r * stride] + w * (-tau * vr(r).conj());
        }
    }
}

/// `xORM2R`/`xUNM2R`'s loop on one vector of C (element `r` at `x[r·stride]`): a column
/// (`left`, contiguous: `stride` 1) or a row, given `reflector(i)`, reflector `i` from its
/// diagonal down (`v`, the diagonal not read) and its `tau`. The reflectors go first to last
/// for `Qᴴ·C` and `C·Q`, last to first for `Q·C` and `C·Qᴴ`, with `conj(tau)` for `Qᴴ`.
pub fn orm2r_vector<'a, T: Scalar + 'a>(
    x: &mut [T],
    stride: usize,
    k: usize,
    left: bool,
    transpose: bool,
    reflector: impl Fn(usize) -> (&'a [T], T),
) {
    for s in 0..k {
        let i = if left == transpose { s } else { k - 1 - s };
        let (v, tau) = reflector(i);
        let tau = if transpose { tau.conj() } else { tau };
        if left {
            larf(v, tau, &mut x[i..]);
        } else {
            larf_row(v, tau, &mut x[i * stride..], stride);
        }
    }
}

/// `xORM2R`/`xUNM2R` on one column-major `m×n` matrix `c` (leading dimension `m`): `op(Q)·c`
/// (`left`) or `c·op(Q)`, `op(Q) = Qᴴ` when `transpose`, with `Q = H(0)⋯H(k-1)` from the
/// `k` reflectors in the columns of `a` (leading dimension `lda ≥` Q's order, `m` or `n`; rows
/// on and above each diagonal not read) and their `tau`, as the GPU kernels compute it
/// ([`orm2r_vector`] on each column or row).
///
/// # Panics
/// If a slice is too short.
#[allow(clippy::too_many_arguments)] // LAPACK's argument list
pub fn orm2r<T: Scalar>(
    a: &[T],
    lda: usize,
    tau: &[T],
    k: usize,
    c: &mut [T],
    m: usize,
    n: usize,
    left: bool,
    transpose: bool,
) {
    let order = if left { m } else { n };
    let reflector = |i: usize| (&a[i * lda + i..i * lda + order], tau[i]);
    if left {
        for col in c.chunks_exact_mut(m).take(n) {
            orm2r_vector(col, 1, k, left, transpose, reflector);
        }
    } else {
        for row in 0..m {
            orm2r_vector(&mut c[row..], m, k, left, transpose, reflector);
        }
    }
}

/// Elements of the reflector kept in registers by the lanes that apply it: all of it while the
/// copy fits (then each element is shuffled once per step); else it is shuffled again for the
/// update (c128 at `W = 32`, whose column alone takes 128 registers).
const fn keep_reflector<T>(w: usize) -> bool {
    core::mem::size_of::<T>() * w <= 256
}

/// `xLARF('Left')` of the reflector held by lane `i` of the group (`v = x[i+1..m]` there, with
/// an implicit 1 at `i`) and `tau_l` to this lane's column `x[i..m]` when `apply`:
/// `w = Σ conj(x[r])·v[r]` (xGEMV, in order), then `x[r] += v[r]·(-tau_l·conj(w))` (xGER/xGERC,
/// skipped for `w = 0`). Every lane of the warp must call it (shuffles).
#[inline(always)]
unsafe fn larf_left<T: Scalar, const W: usize>(
    x: &mut [T; W],
    i: usize,
    m: u32,
    tau_l: T,
    apply: bool,
    src: u32,
    ex: *mut u8,
) {
    let keep = keep_reflector::<T>(W);
    let mut v = [T::ZERO; W];
    let mut w = T::ZERO;
    unrolled!(r in 0..W, {
        if r >= i && (r as u32) < m {
            let vr = if r == i { T::ONE } else { shfl(x[r], src, ex) };
            if keep {
                v[r] = vr;
            }
            w = w + x[r].conj() * vr;
        }
    });
    // Uniform per group (tau is), so the shuffles below stay out of divergent branches when
    // they run at all.
    let temp = -tau_l * w.conj();
    let apply = apply && tau_l != T::ZERO && w != T::ZERO;
    unrolled!(r in 0..W, {
        if r >= i && (r as u32) < m {
            let vr = if r == i {
                T::ONE
            } else if keep {
                v[r]
            } else {
                shfl(x[r], src, ex)
            };
            if apply {
                x[r] = x[r] + vr * temp;
            }
        }
    });
}

/// The padded column length: odd, so that the lanes of a group reading their columns' `r`-th
/// elements hit distinct banks.
const fn ld(m: u32) -> u32 {
    (m + 1) | 1
}

/// Column-major `rows×cols` matrices staged with the QR kernels' odd padding for `m` rows.
const fn staging(rows: u32, cols: u32, m: u32) -> Staging {
    Staging {
        rows,
        cols,
        ld: ld(m),
        row_major: false,
        keep: Keep::All,
    }
}

/// `xGEQR2`'s loop over the group's `m×n` matrix, lane = column (`col`, of `W` registers):
/// leaves R and the reflectors in the columns and returns this lane's `tau` (zero past
/// `min(m, n)`).
// Inlined on the GPU (the columns must stay in registers); a call of its own on the host,
// where the unrolled body is compiled once for the three kernels that share it (inlined
// there, the tests' build takes many times as long).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(never))]
unsafe fn geqr2_lanes<T: Scalar, const W: usize>(
    col: &mut [T; W],
    lane: u32,
    lead: u32,
    m: u32,
    n: u32,
    ex: *mut u8,
) -> T {
    let mut my_tau = T::ZERO;
    unrolled!(i in 0..W, {
        if (i as u32) < m.min(n) {
            if lane == i as u32 {
                my_tau = larfg(col, i, m);
            }
            let ti = shfl(my_tau, lead + i as u32, ex);
            // ZGEQR2 applies H(i)ᴴ: xLARF with conj(tau).
            larf_left(col, i, m, ti.conj(), lane > i as u32, lead + i as u32, ex);
        }
    });
    my_tau
}

/// `xORG2R`'s loop, lane = column: the group's columns hold the first `n` columns of
/// `Q = H(0)·…·H(k-1)` afterwards, given lane `j < k` holding reflector `j` (below its
/// diagonal; its rows above are not read) and its `tau`, the other lanes the identity's
/// columns.
// Inlined on the GPU (the columns must stay in registers); a call of its own on the host,
// where the unrolled body is compiled once for the three kernels that share it (inlined
// there, the tests' build takes many times as long).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(never))]
unsafe fn org2r_lanes<T: Scalar, const W: usize>(
    col: &mut [T; W],
    my_tau: T,
    lane: u32,
    lead: u32,
    m: u32,
    k: u32,
    ex: *mut u8,
) {
    unrolled!(s in 0..W, {
        let i = W - 1 - s;
        if (i as u32) < k {
            let ti = shfl(my_tau, lead + i as u32, ex);
            larf_left(col, i, m, ti, lane > i as u32, lead + i as u32, ex);
            if lane == i as u32 {
                let minus = -ti;
                unrolled!(r in 0..W, {
                    if (r as u32) < m {
                        col[r] = if r > i {
                            minus * col[r]
                        } else if r == i {
                            T::ONE - ti
                        } else {
                            T::ZERO
                        };
                    }
                });
            }
        }
    });
}

/// The `m` rows of a lane's staged column at `mine` (zeros unless `live`), into registers.
#[inline(always)]
unsafe fn load_column<T: Scalar, const W: usize>(mine: *const T, live: bool, m: u32) -> [T; W] {
    let mut col = [T::ZERO; W];
    unrolled!(r in 0..W, {
        if live && (r as u32) < m {
            col[r] = *mine.add(r);
        }
    });
    col
}

/// The first `m` rows of `col` back to its staged column at `mine`.
#[inline(always)]
unsafe fn store_column<T: Copy, const W: usize>(col: &[T; W], mine: *mut T, m: u32) {
    unrolled!(r in 0..W, {
        if (r as u32) < m {
            *mine.add(r) = col[r];
        }
    });
}

/// Column `lane` of the identity (`m` rows).
#[inline(always)]
fn identity_column<T: Scalar, const W: usize>(col: &mut [T; W], lane: u32, m: u32) {
    unrolled!(r in 0..W, {
        if (r as u32) < m {
            col[r] = if r as u32 == lane { T::ONE } else { T::ZERO };
        }
    });
}

kernel_args! {
    /// The arguments of the geqrf entries ([`geqrf_rows`], [`geqrf_block`]): the `batch`
    /// column-major `m×n` matrices `a` factored in place, `min(m, n)` taus each into `tau`.
    pub struct GeqrfArgs<T> {
        pub a: *mut T,
        pub tau: *mut T,
        pub m: u32,
        pub n: u32,
        pub batch: u64,
    }
}

kernel_args! {
    /// The arguments of the orgqr/ungqr entries ([`orgqr_rows`], [`orgqr_block`]): the first
    /// `n` columns of Q in place of the `batch` column-major `m×n` matrices `a` holding `k`
    /// reflectors, with their `k` taus each in `tau`.
    pub struct OrgqrArgs<T> {
        pub a: *mut T,
        pub tau: *const T,
        pub m: u32,
        pub n: u32,
        pub k: u32,
        pub batch: u64,
    }
}

kernel_args! {
    /// The arguments of the ormqr/unmqr entries ([`ormqr_block`]): `c`'s `batch` matrices of
    /// `vectors` vectors of `q` elements multiplied by Q (`transpose != 0`: Qᴴ) from the left
    /// (`left != 0`, C `q×vectors`) or the right (C `vectors×q`), Q of order `q` from the `k`
    /// reflectors in the first columns of `a`'s `q×a_cols` matrices and their taus in `tau`.
    pub struct OrmqrArgs<T> {
        pub a: *const T,
        pub tau: *const T,
        pub c: *mut T,
        pub q: u32,
        pub a_cols: u32,
        pub k: u32,
        pub vectors: u32,
        pub batch: u64,
        pub left: u32,
        pub transpose: u32,
    }
}

kernel_args! {
    /// The arguments of jax's whole `qr` ([`qr_rows`], [`qr_block`]): the `batch` row-major
    /// `m×n` matrices `a`, Q (`m×mq`) written to `q` and R (`mq×n`) to `r`, row-major, with
    /// `mq = m` when `full_matrices != 0`, else `min(m, n)`.
    pub struct QrArgs<T> {
        pub a: *const T,
        pub q: *mut T,
        pub r: *mut T,
        pub m: u32,
        pub n: u32,
        pub batch: u64,
        pub full_matrices: u32,
    }
}

/// `xGEQR2` of the `m×n` matrices (`max(m, n) ≤ W`), `W` lanes per matrix, lane = column.
///
/// # Safety
/// `a` holds `batch·m·n` elements, `tau` `batch·min(m, n)`; the launch is [`geqrf_launch`]'s.
#[inline(always)]
pub unsafe fn geqrf_rows<T: Scalar, const W: usize>(args: GeqrfArgs<T>) {
    let GeqrfArgs {
        a,
        tau,
        m,
        n,
        batch,
    } = args;
    let Some(LaneGroup {
        groups,
        g,
        lane,
        lead,
        first,
        count,
    }) = lane_group::<W>(batch)
    else {
        return; // the whole block: no barrier is left waiting
    };
    let (mn, ld, kmin) = (m * n, ld(m), m.min(n));
    let shared = dynamic_shared::<T>();
    let ex = shared
        .cast::<u8>()
        .add(padded_bytes(groups, ld, n, core::mem::size_of::<T>()));
    let global = a.add((first * mn as u64) as usize);
    stage::<T, true>(global, shared, count, staging(m, n, m));
    sync_threads();

    // Lanes past n and groups past the batch's end run on zeros (their shuffles pair with
    // live lanes') and store nothing.
    let live = g < count && lane < n;
    let mine = shared.add(((g * n + lane) * ld) as usize);
    let mut col = load_column::<T, W>(mine, live, m);

    let my_tau = geqr2_lanes(&mut col, lane, lead, m, n, ex);

    if live {
        store_column(&col, mine, m);
    }
    if g < count && lane < kmin {
        *tau.add(((first + g as u64) * kmin as u64 + lane as u64) as usize) = my_tau;
    }
    sync_threads();
    stage::<T, false>(global, shared, count, staging(m, n, m));
}

/// `xORG2R`/`xUNG2R`: the first `n` columns of `Q = H(0)·…·H(k-1)` from `geqrf`'s reflectors
/// (`k ≤ n ≤ m ≤ W`), `W` lanes per matrix, lane = column.
///
/// # Safety
/// `a` holds `batch·m·n` elements, `tau` `batch·k`; the launch is [`orgqr_launch`]'s.
#[inline(always)]
pub unsafe fn orgqr_rows<T: Scalar, const W: usize>(args: OrgqrArgs<T>) {
    let OrgqrArgs {
        a,
        tau,
        m,
        n,
        k,
        batch,
    } = args;
    let Some(LaneGroup {
        groups,
        g,
        lane,
        lead,
        first,
        count,
    }) = lane_group::<W>(batch)
    else {
        return; // the whole block: no barrier is left waiting
    };
    let (mn, ld) = (m * n, ld(m));
    let shared = dynamic_shared::<T>();
    let ex = shared
        .cast::<u8>()
        .add(padded_bytes(groups, ld, n, core::mem::size_of::<T>()));
    let global = a.add((first * mn as u64) as usize);
    stage::<T, true>(global, shared, count, staging(m, n, m));
    sync_threads();

    let live = g < count && lane < n;
    let mine = shared.add(((g * n + lane) * ld) as usize);
    // Columns k.. start as those of the identity; the others hold their reflectors.
    let reflector = lane < k;
    let mut col = load_column::<T, W>(mine, live && reflector, m);
    if !reflector {
        identity_column(&mut col, lane, m);
    }
    let my_tau = if g < count && reflector {
        *tau.add(((first + g as u64) * k as u64 + lane as u64) as usize)
    } else {
        T::ZERO
    };

    org2r_lanes(&mut col, my_tau, lane, lead, m, k, ex);

    if live {
        store_column(&col, mine, m);
    }
    sync_threads();
    stage::<T, false>(global, shared, count, staging(m, n, m));
}

/// jax's whole `qr` (no pivoting) of the row-major `m×n` matrices `a` (`max(m, n) ≤ W`), `W`
/// lanes per matrix, lane = column: [`geqrf_rows`]' loop, R stored (row-major `mq×n`, zeros
/// below the diagonal), then [`orgqr_rows`]' loop on the reflectors still in the lanes'
/// registers, Q stored (row-major `m×mq`); `mq` is `m` when `full_matrices != 0`, else
/// `min(m, n)`. One pass over memory where jax's steps take four, and equal to them bit for
/// bit.
///
/// # Safety
/// `a` holds `batch·m·n` elements, `q` `batch·m·mq`, `r` `batch·mq·n`; the launch is
/// [`qr_launch`]'s.
#[inline(always)]
pub unsafe fn qr_rows<T: Scalar, const W: usize>(args: QrArgs<T>) {
    let QrArgs {
        a,
        q,
        r,
        m,
        n,
        batch,
        full_matrices,
    } = args;
    let Some(LaneGroup {
        groups,
        g,
        lane,
        lead,
        first,
        count,
    }) = lane_group::<W>(batch)
    else {
        return; // the whole block: no barrier is left waiting
    };
    let (kmin, ld) = (m.min(n), ld(m));
    let mq = qr_q_columns(m, n, full_matrices != 0);
    let shared = dynamic_shared::<T>();
    let ex = shared.cast::<u8>().add(padded_bytes(
        groups,
        ld,
        n.max(mq),
        core::mem::size_of::<T>(),
    ));
    let input = Staging {
        row_major: true,
        ..staging(m, n, m)
    };
    let first = first as usize;
    stage::<T, true>(
        a.add(first * (m * n) as usize) as *mut T,
        shared,
        count,
        input,
    );
    sync_threads();

    let live = g < count && lane < n;
    let mine = shared.add(((g * n + lane) * ld) as usize);
    let mut col = load_column::<T, W>(mine, live, m);
    let my_tau = geqr2_lanes(&mut col, lane, lead, m, n, ex);

    // R: this lane's column, down to the diagonal (the staging zeroes the rest).
    if live {
        unrolled!(i in 0..W, {
            if (i as u32) < mq && i as u32 <= lane {
                *mine.add(i) = col[i];
            }
        });
    }
    sync_threads();
    let r_out = Staging {
        rows: mq,
        keep: Keep::Upper,
        ..input
    };
    stage::<T, false>(r.add(first * (mq * n) as usize), shared, count, r_out);
    sync_threads();

    if lane >= kmin {
        identity_column(&mut col, lane, m);
    }
    org2r_lanes(&mut col, my_tau, lane, lead, m, kmin, ex);
    // Q's columns, packed per group as m×mq.
    if g < count && lane < mq {
        store_column(&col, shared.add(((g * mq + lane) * ld) as usize), m);
    }
    sync_threads();
    let q_out = Staging { cols: mq, ..input };
    stage::<T, false>(q.add(first * (m * mq) as usize), shared, count, q_out);
}

/// Column `j` of the block kernels' matrix in shared memory (`m` rows, `ld` apart).
///
/// # Safety
/// The matrix spans `n·ld` elements from `shared`, `j < n`, and no other thread writes the
/// column while the slice lives.
#[inline(always)]
unsafe fn shared_column<'a, T>(shared: *mut T, ld: u32, m: u32, j: u32) -> &'a mut [T] {
    core::slice::from_raw_parts_mut(shared.add((j * ld) as usize), m as usize)
}

/// `xGEQR2` of the block's `m×n` matrix in shared memory (columns `ld` apart, `ld` odd, so
/// they sit in distinct banks): the thread owning column `i` runs `xLARFG` on it, then each
/// trailing column gets [`larf`] from a thread of its own; `taus[i]` (shared) gets `tau`.
/// The same operations in the same order as [`geqr2`].
#[inline(always)]
unsafe fn geqr2_block<T: Scalar>(shared: *mut T, taus: *mut T, ld: u32, m: u32, n: u32) {
    let (t, nb) = (thread_idx_x(), block_dim_x());
    for i in 0..m.min(n) {
        if t == i {
            *taus.add(i as usize) = larfg(shared_column(shared, ld, m, i), i as usize, m);
        }
        sync_threads();
        // ZGEQR2 applies H(i)ᴴ: xLARF with conj(tau).
        let ti = (*taus.add(i as usize)).conj();
        let v = &shared_column(shared, ld, m, i)[i as usize..];
        let mut j = i + 1 + t;
        while j < n {
            larf(v, ti, &mut shared_column(shared, ld, m, j)[i as usize..]);
            j += nb;
        }
        sync_threads();
    }
}

/// `xORG2R` of the block's matrix in shared memory (as [`geqr2_block`]): its first `n`
/// columns become those of `Q = H(0)·…·H(k-1)` from the `k ≤ n ≤ m` reflectors in its first
/// columns, `tau(i)` their taus: the trailing columns get [`larf`] from a thread each, then
/// the reflector's own column is scaled in parallel over its rows. Equal to [`org2r`].
#[inline(always)]
unsafe fn org2r_block<T: Scalar>(
    shared: *mut T,
    ld: u32,
    m: u32,
    n: u32,
    k: u32,
    tau: impl Fn(u32) -> T,
) {
    let (t, nb) = (thread_idx_x(), block_dim_x());
    // Columns k.. start as those of the identity.
    let mut e = t;
    while e < (n - k) * m {
        let (r, j) = (e % m, k + e / m);
        *shared.add((j * ld + r) as usize) = if r == j { T::ONE } else { T::ZERO };
        e += nb;
    }
    sync_threads();
    for i in (0..k).rev() {
        let ti = tau(i);
        let v = &shared_column(shared, ld, m, i)[i as usize..];
        let mut j = i + 1 + t;
        while j < n {
            larf(v, ti, &mut shared_column(shared, ld, m, j)[i as usize..]);
            j += nb;
        }
        sync_threads();
        let mut r = t;
        while r < m {
            let x = shared.add((i * ld + r) as usize);
            *x = if r > i {
                -ti * *x
            } else if r == i {
                T::ONE - ti
            } else {
                T::ZERO
            };
            r += nb;
        }
        sync_threads();
    }
}

/// `xGEQR2` with one block per `m×n` matrix (the **block** shape, past the warp kernels: up
/// to 128 rows and columns as shared memory allows), the matrix in shared memory
/// ([`geqr2_block`]), so the results equal [`geqr2`] bit for bit.
///
/// # Safety
/// `a` holds `batch·m·n` elements, `tau` `batch·min(m, n)`; the launch is [`geqrf_launch`]'s.
#[inline(always)]
pub unsafe fn geqrf_block<T: Scalar>(args: GeqrfArgs<T>) {
    let GeqrfArgs {
        a,
        tau,
        m,
        n,
        batch,
    } = args;
    let (t, nb) = (thread_idx_x(), block_dim_x());
    let (mn, ld, kmin) = (m * n, ld(m), m.min(n));
    let shared = dynamic_shared::<T>();
    let taus = shared
        .cast::<u8>()
        .add(padded_bytes(1, ld, n, core::mem::size_of::<T>()))
        .cast::<T>();
    let mut b = block_idx_x() as u64;
    while b < batch {
        let global = a.add((b * mn as u64) as usize);
        stage::<T, true>(global, shared, 1, staging(m, n, m));
        sync_threads();
        geqr2_block(shared, taus, ld, m, n);
        let mut i = t;
        while i < kmin {
            *tau.add((b * kmin as u64 + i as u64) as usize) = *taus.add(i as usize);
            i += nb;
        }
        stage::<T, false>(global, shared, 1, staging(m, n, m));
        sync_threads(); // before the next matrix overwrites shared memory
        b += grid_dim_x() as u64;
    }
}

/// `xORG2R`/`xUNG2R` with one block per `m×n` matrix (`k ≤ n ≤ m`), as [`geqrf_block`]
/// ([`org2r_block`]). Equal to [`org2r`] bit for bit.
///
/// # Safety
/// `a` holds `batch·m·n` elements, `tau` `batch·k`; the launch is [`orgqr_launch`]'s.
#[inline(always)]
pub unsafe fn orgqr_block<T: Scalar>(args: OrgqrArgs<T>) {
    let OrgqrArgs {
        a,
        tau,
        m,
        n,
        k,
        batch,
    } = args;
    let (mn, ld) = (m * n, ld(m));
    let shared = dynamic_shared::<T>();
    let mut b = block_idx_x() as u64;
    while b < batch {
        let global = a.add((b * mn as u64) as usize);
        stage::<T, true>(global, shared, 1, staging(m, n, m));
        sync_threads();
        let taus = tau.add((b * k as u64) as usize);
        org2r_block(shared, ld, m, n, k, |i| *taus.add(i as usize));
        stage::<T, false>(global, shared, 1, staging(m, n, m));
        sync_threads();
        b += grid_dim_x() as u64;
    }
}

/// Threads per block of the ormqr kernel, at most (rounded up to whole warps for few vectors).
const ORMQR_THREADS: u32 = 128;

/// Shared bytes of the ormqr kernel for `group` matrices: their `k` reflectors and `vectors`
/// vectors of C as padded columns of `q` elements, then the `k` taus of each.
const fn ormqr_shared_bytes(group: u32, q: u32, k: u32, vectors: u32, size: usize) -> usize {
    let elements = group as usize * ((k + vectors) as usize * ld(q) as usize + k as usize);
    (elements * size).div_ceil(16) * 16
}

/// Matrices each block of the ormqr kernel takes at once: a thread per vector of C, up to
/// [`ORMQR_THREADS`], as many as fit the default 48 KiB of shared memory (one at least,
/// however much it needs). A function of the shape alone, so kernel and plan agree on it.
const fn ormqr_group(q: u32, k: u32, vectors: u32, size: usize) -> u32 {
    let per = if vectors == 0 { 1 } else { vectors };
    let mut group = if per >= ORMQR_THREADS {
        1
    } else {
        ORMQR_THREADS / per
    };
    while group > 1 && ormqr_shared_bytes(group, q, k, vectors, size) > MAX_SHARED_BYTES {
        group -= 1;
    }
    group
}

/// `xORM2R`/`xUNM2R` ([`orm2r`]) on the column-major matrices `c`, a thread per vector of C
/// the reflectors act on: its columns (`left`, `c` `q×vectors`) or rows (`c` `vectors×q`, staged
/// transposed so that a row, too, is a padded column in shared memory). The `k` reflectors of
/// each matrix (the first columns of `a`'s `q×a_cols` matrix) and its taus are staged once; each
/// thread then applies all of them to its vector with no barrier between. A block takes
/// [`ormqr_group`] matrices at a time, looping over the batch.
///
/// # Safety
/// `a` holds `batch·q·a_cols` elements (`k ≤ min(q, a_cols)`), `tau` `batch·k`, `c`
/// `batch·q·vectors`; the launch is [`ormqr_launch`]'s.
#[inline(always)]
pub unsafe fn ormqr_block<T: Scalar>(args: OrmqrArgs<T>) {
    let OrmqrArgs {
        a,
        tau,
        c,
        q,
        a_cols,
        k,
        vectors,
        batch,
        left,
        transpose,
    } = args;
    let (t, nb) = (thread_idx_x(), block_dim_x());
    let (left, transpose) = (left != 0, transpose != 0);
    let (group, ldq) = (ormqr_group(q, k, vectors, core::mem::size_of::<T>()), ld(q));
    let shared = dynamic_shared::<T>();
    let reflectors = shared;
    let vecs = shared.add((group * k * ldq) as usize);
    let taus = vecs.add((group * vectors * ldq) as usize);
    let c_staging = Staging {
        row_major: !left,
        ..staging(q, vectors, q)
    };
    let (g, j) = (t / vectors.max(1), t % vectors.max(1));
    let a_len = q as usize * a_cols as usize;
    let mut first = block_idx_x() as u64 * group as u64;
    while first < batch {
        let count = (batch - first).min(group as u64) as u32;
        let a_first = a.add(first as usize * a_len) as *mut T;
        if a_cols == k {
            stage::<T, true>(a_first, reflectors, count, staging(q, k, q));
        } else {
            // Each matrix's first k columns, the rest skipped.
            for h in 0..count {
                let matrix = a_first.add(h as usize * a_len);
                let into = reflectors.add((h * k * ldq) as usize);
                stage::<T, true>(matrix, into, 1, staging(q, k, q));
            }
        }
        let global = c.add((first * (q * vectors) as u64) as usize);
        stage::<T, true>(global, vecs, count, c_staging);
        let mut e = t;
        while e < count * k {
            *taus.add(e as usize) = *tau.add((first * k as u64) as usize + e as usize);
            e += nb;
        }
        sync_threads();
        if g < count {
            let x = shared_column(vecs, ldq, q, g * vectors + j);
            orm2r_vector(x, 1, k as usize, left, transpose, |i| {
                let column = shared_column(reflectors, ldq, q, g * k + i as u32);
                (&column[i..], *taus.add((g * k) as usize + i))
            });
        }
        sync_threads();
        stage::<T, false>(global, vecs, count, c_staging);
        sync_threads(); // before the next matrices overwrite shared memory
        first += grid_dim_x() as u64 * group as u64;
    }
}

/// [`qr_rows`] with one block per matrix (past the warp kernels, as [`geqrf_block`]): the
/// row-major matrix staged in, [`geqr2_block`], R staged out, [`org2r_block`] on the same
/// shared copy, Q staged out.
///
/// # Safety
/// As [`qr_rows`], with [`qr_launch`]'s block launch.
#[inline(always)]
pub unsafe fn qr_block<T: Scalar>(args: QrArgs<T>) {
    let QrArgs {
        a,
        q,
        r,
        m,
        n,
        batch,
        full_matrices,
    } = args;
    let (kmin, ld) = (m.min(n), ld(m));
    let mq = qr_q_columns(m, n, full_matrices != 0);
    let shared = dynamic_shared::<T>();
    let taus = shared
        .cast::<u8>()
        .add(padded_bytes(1, ld, n.max(mq), core::mem::size_of::<T>()))
        .cast::<T>();
    let input = Staging {
        row_major: true,
        ..staging(m, n, m)
    };
    let r_out = Staging {
        rows: mq,
        keep: Keep::Upper,
        ..input
    };
    let q_out = Staging { cols: mq, ..input };
    let mut b = block_idx_x() as usize;
    while (b as u64) < batch {
        stage::<T, true>(a.add(b * (m * n) as usize) as *mut T, shared, 1, input);
        sync_threads();
        geqr2_block(shared, taus, ld, m, n);
        stage::<T, false>(r.add(b * (mq * n) as usize), shared, 1, r_out);
        sync_threads(); // R is out before Q's identity columns overwrite A's
        org2r_block(shared, ld, m, mq, kmin, |i| *taus.add(i as usize));
        stage::<T, false>(q.add(b * (m * mq) as usize), shared, 1, q_out);
        sync_threads();
        b += grid_dim_x() as usize;
    }
}

/// The largest order of the block kernels: one thread per column in a block of at most this
/// many threads.
pub const BLOCK_MAX_ORDER: u32 = 128;

/// `(Variant::Block, grid, block, shared bytes)` of the block kernels for `m×n` matrices, or
/// `None` past [`BLOCK_MAX_ORDER`] or past `max_shared` bytes of shared memory (the device's
/// opt-in limit per block: 227 KiB on Hopper, 163 KiB on A100, 99 KiB on Ada), which then
/// leave the matrices to the libraries.
pub fn block_plan(
    kind: ScalarKind,
    m: u32,
    n: u32,
    batch: u64,
    max_shared: usize,
) -> Option<(Variant, u32, u32, usize)> {
    if m.max(n) > BLOCK_MAX_ORDER {
        return None;
    }
    let size = kind.bytes();
    // The matrix, then geqrf's taus.
    let shared = padded_bytes(1, ld(m), n, size) + (m.min(n) as usize * size).div_ceil(16) * 16;
    if shared > max_shared {
        return None;
    }
    let threads = n.max(1).div_ceil(32) * 32;
    // The kernels loop over the batch, so the grid can be capped.
    Some((Variant::Block, batch.min(1 << 20) as u32, threads, shared))
}

/// `(Variant::Rows(W), grid, block, shared bytes)` of the QR kernels for `m×n` matrices,
/// `threads` per block (`None`: 128, fewer while the staged matrices exceed 48 KiB). The host
/// emulation needs [`super::HOST_EXCHANGE_BYTES_PER_THREAD`] more shared bytes per thread.
pub fn plan(
    kind: ScalarKind,
    m: u32,
    n: u32,
    batch: u64,
    threads: Option<u32>,
) -> Option<(Variant, u32, u32, usize)> {
    let variant @ Variant::Rows(w) = Variant::for_size(m.max(n))? else {
        return None;
    };
    let size = kind.bytes();
    let mut threads = threads.unwrap_or(128);
    while threads > 32 && padded_bytes(threads / w, ld(m), n, size) > MAX_SHARED_BYTES {
        threads /= 2;
    }
    let shared = padded_bytes(threads / w, ld(m), n, size);
    if shared > MAX_SHARED_BYTES {
        return None;
    }
    let grid = u32::try_from(batch.div_ceil((threads / w) as u64))
        .ok()
        .filter(|&g| g <= i32::MAX as u32)?;
    Some((variant, grid, threads, shared))
}

kernel_entries! {
    /// The geqrf entries, `ferrax_geqrf_small_<dtype>_<w4|w8|w16|w32|block>`: no c128 at
    /// `W = 32`, where its 32 columns of 16 bytes plus xLARFG's temporaries exceed 255
    /// registers (ptxas spills); [`geqrf_launch`] gives those sizes to the block kernel.
    pub const GEQRF: Kernels<(ScalarKind, Variant), GeqrfArgs<_>>;
    names [geqrf small] dtype variant;
    variants = small(geqrf_rows, geqrf_block);
    f32: w4 w8 w16 w32 block;
    f64: w4 w8 w16 w32 block;
    c64: w4 w8 w16 w32 block;
    c128: w4 w8 w16 block;
}

kernel_entries! {
    /// The orgqr/ungqr entries, `ferrax_orgqr_small_<dtype>_<w4|w8|w16|w32|block>` (every
    /// size: unlike geqrf, complex128 fits at `W = 32`).
    pub const ORGQR: Kernels<(ScalarKind, Variant), OrgqrArgs<_>>;
    names [orgqr small] dtype variant;
    variants = small(orgqr_rows, orgqr_block);
    f32: w4 w8 w16 w32 block;
    f64: w4 w8 w16 w32 block;
    c64: w4 w8 w16 w32 block;
    c128: w4 w8 w16 w32 block;
}

kernel_entries! {
    /// The ormqr/unmqr entries, `ferrax_ormqr_small_<dtype>_block`.
    pub const ORMQR: Kernels<(ScalarKind, Variant), OrmqrArgs<_>>;
    names [ormqr small] dtype variant;
    variants {
        block => (Variant::Block, ormqr_block),
    }
    f32: block;
    f64: block;
    c64: block;
    c128: block;
}

kernel_entries! {
    /// jax's whole `qr`, `ferrax_qr_small_<dtype>_<w4|w8|w16|w32|block>`: no c128 at `W = 32`
    /// (as [`GEQRF`]).
    pub const QR: Kernels<(ScalarKind, Variant), QrArgs<_>>;
    names [qr small] dtype variant;
    variants = small(qr_rows, qr_block);
    f32: w4 w8 w16 w32 block;
    f64: w4 w8 w16 w32 block;
    c64: w4 w8 w16 w32 block;
    c128: w4 w8 w16 block;
}

/// The launch of `ferrax_geqrf_small_<dtype>_<w4|w8|w16|w32|block>` ([`GeqrfArgs`]): the warp
/// kernels up to 32 (16 for c128, see [`GEQRF`]), the block kernel up to [`BLOCK_MAX_ORDER`]
/// within `max_shared` bytes of shared memory per block; `None` past those (use cuSOLVER).
/// `grid == 0` (batch 0) means there is nothing to launch.
pub fn geqrf_launch(
    kind: ScalarKind,
    m: u32,
    n: u32,
    batch: u64,
    max_shared: usize,
) -> Option<LaunchConfig<GeqrfArgs<AnyElement>>> {
    plan(kind, m, n, batch, None)
        .and_then(|warps| launch(&GEQRF, kind, warps))
        .or_else(|| launch(&GEQRF, kind, block_plan(kind, m, n, batch, max_shared)?))
}

/// The launch of `ferrax_orgqr_small_<dtype>_<w4|w8|w16|w32|block>` ([`OrgqrArgs`]; complex:
/// `ungqr`), sized as [`geqrf_launch`], or `None` when the arguments break `k ≤ n ≤ m`.
pub fn orgqr_launch(
    kind: ScalarKind,
    m: u32,
    n: u32,
    k: u32,
    batch: u64,
    max_shared: usize,
) -> Option<LaunchConfig<OrgqrArgs<AnyElement>>> {
    if k > n || n > m {
        return None;
    }
    plan(kind, m, n, batch, None)
        .and_then(|warps| launch(&ORGQR, kind, warps))
        .or_else(|| launch(&ORGQR, kind, block_plan(kind, m, n, batch, max_shared)?))
}

/// The launch of `ferrax_ormqr_small_<dtype>_block` ([`OrmqrArgs`], [`ormqr_block`]) for Q of
/// order `q ≤` [`BLOCK_MAX_ORDER`] from `k` reflectors acting on `vectors ≤ 128` vectors of C
/// per matrix (its columns from the left, its rows from the right), as many matrices per block
/// as fit 128 threads and `max_shared` bytes; `None` past those (use cuSOLVER) or for `k > q`.
/// `grid == 0` (batch 0) means nothing to launch.
pub fn ormqr_launch(
    kind: ScalarKind,
    q: u32,
    k: u32,
    vectors: u32,
    batch: u64,
    max_shared: usize,
) -> Option<LaunchConfig<OrmqrArgs<AnyElement>>> {
    if q > BLOCK_MAX_ORDER || vectors > BLOCK_MAX_ORDER || k > q {
        return None;
    }
    let group = ormqr_group(q, k, vectors, kind.bytes());
    let shared = ormqr_shared_bytes(group, q, k, vectors, kind.bytes());
    if shared > max_shared {
        return None;
    }
    ORMQR.launch(
        (kind, Variant::Block),
        batch.div_ceil(group as u64).min(1 << 20) as u32,
        (group * vectors.max(1)).div_ceil(32) * 32,
        shared as u32,
    )
}

/// Columns of Q for jax's `qr` of `m×n` matrices: `m` with `full_matrices`, else `min(m, n)`.
pub const fn qr_q_columns(m: u32, n: u32, full_matrices: bool) -> u32 {
    if full_matrices || m < n {
        m
    } else {
        n
    }
}

/// The launch of `ferrax_qr_small_<dtype>_<w4|w8|w16|w32|block>` ([`QrArgs`]; row-major
/// matrices, jax's `qr`), sized as [`geqrf_launch`] for matrices as wide as A and Q together;
/// `None` past the kernels.
pub fn qr_launch(
    kind: ScalarKind,
    m: u32,
    n: u32,
    batch: u64,
    full_matrices: bool,
    max_shared: usize,
) -> Option<LaunchConfig<QrArgs<AnyElement>>> {
    // The staged columns: A's, then Q's in the same place.
    let cols = n.max(qr_q_columns(m, n, full_matrices));
    plan(kind, m, cols, batch, None)
        .and_then(|warps| launch(&QR, kind, warps))
        .or_else(|| launch(&QR, kind, block_plan(kind, m, cols, batch, max_shared)?))
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests;
