//! Tridiagonal solve by Gaussian elimination with partial pivoting that perturbs tiny pivots
//! instead of failing: LAPACK's xLAGTF (factor) and xLAGTS (solve) fused, as TensorFlow's
//! `tridiagonal_solve(perturb_singular=True)` and jaxlib's `tridiagonal_solve_perturbed_ffi`.
//! A numerically singular system, such as `(T - λI) x = b` in inverse iteration with `λ` an
//! eigenvalue of `T`, gets a finite solution instead of Inf/NaN.

use crate::grid::{global_idx_x, grid_size_x};
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig, ScalarKind};
use crate::scalar::{Real, Scalar};

/// `sqrt(a² + b²)` without undue overflow or underflow, rounded as glibc's `hypot`: the square
/// root of the rounded sum of squares, corrected by its residual as in C. F. Borges, "An
/// Improved Algorithm for hypot(a, b)" (2019, arXiv:1904.09481), which is correctly rounded in
/// all but rare cases. Power-of-two scaling (exact) keeps the squares in range.
pub fn hypot(a: f64, b: f64) -> f64 {
    /// 2^k.
    const fn pow2(k: i64) -> f64 {
        f64::from_bits(((1023 + k) as u64) << 52)
    }
    let (a, b) = (a.abs(), b.abs());
    if a == f64::INFINITY || b == f64::INFINITY {
        return f64::INFINITY;
    }
    let (big, small) = if a < b { (b, a) } else { (a, b) };
    let unscale = if big > pow2(511) {
        pow2(600)
    } else if small < pow2(-511) {
        pow2(-600)
    } else {
        1.0
    };
    let (big, small) = (big / unscale, small / unscale);
    // NaN fails the comparison and propagates through the sum.
    if small <= big * pow2(-54) {
        // `small` is below half an ulp of `big`.
        return (big + small) * unscale;
    }
    // The instruction on the GPU (libm's needs a table PTX cannot reference); both correctly
    // rounded.
    let h = Real::sqrt(big * big + small * small);
    // `h² - big² - small²`, evaluated without cancellation whichever leg is closer to `h`.
    let excess = if h <= 2.0 * small {
        let delta = h - small;
        big * (2.0 * delta - big) + (delta - 2.0 * (big - small)) * delta
    } else {
        let delta = h - big;
        2.0 * delta * (big - 2.0 * small) + ((4.0 * delta - small) * small + delta * delta)
    };
    (h - excess / (2.0 * h)) * unscale
}

/// `hypot` for f32, as glibc's `hypotf`: the squares are exact in f64 and their sum is rounded
/// once, so the result is correctly rounded in all but rare double-rounding cases.
pub fn hypotf(a: f32, b: f32) -> f32 {
    if a.abs() == f32::INFINITY || b.abs() == f32::INFINITY {
        return f32::INFINITY;
    }
    let (a, b) = (f64::from(a), f64::from(b));
    Real::sqrt(a * a + b * b) as f32
}

/// `std::max`'s rule (the first argument unless the second is larger), which decides how a
/// NaN propagates.
fn max<R: Real>(a: R, b: R) -> R {
    if a < b {
        b
    } else {
        a
    }
}

/// Elements of `workspace` that [`solve_perturbed`] and [`solve_in_place`] need for `m`
/// equations and `nrhs` right-hand sides: U's three diagonals and one row of the right-hand
/// side.
pub const fn workspace_len(m: usize, nrhs: usize) -> usize {
    3 * m + nrhs
}

/// Solves `A x = b` for the `m x m` tridiagonal `A` with sub-diagonal `dl` (`dl[i] = A[i, i-1]`,
/// `dl[0]` unused), diagonal `d` and super-diagonal `du` (`du[i] = A[i, i+1]`, `du[m-1]`
/// unused), all of length `m`. `b` and `x` are column-major `m x nrhs`; `workspace` holds at
/// least [`workspace_len`]`(m, nrhs)` elements.
///
/// The LU factorization with row interchanges is formed and applied to `b` in one sweep (no L
/// or pivots are stored). Back substitution then perturbs every pivot of U small enough for
/// `row / pivot` to overflow by multiples of `eps * max |U|`, or scales it and its row up
/// together when it is subnormal, so a singular `A` still gives a finite `x`.
pub fn solve_perturbed<T: Scalar>(
    dl: &[T],
    d: &[T],
    du: &[T],
    b: &[T],
    x: &mut [T],
    workspace: &mut [T],
) {
    x.copy_from_slice(b);
    solve_in_place(dl, d, du, x, workspace, Pivots::Perturb);
}

/// What [`solve_in_place`] does with the pivots of U.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pivots {
    /// Perturbs those too small for their row ([`solve_perturbed`]'s rule).
    Perturb,
    /// Divides by them as they are; an exactly zero one (a singular `A`) makes the whole
    /// solution NaN, the NaN jax gives where LAPACK's `?gtsv` reports `info > 0`.
    Exact,
}

/// [`solve_perturbed`]'s elimination in place: `x` holds `b` on entry and the solution on
/// return, with the pivots of U treated as `pivots` says. Returns false where a zero pivot
/// (with [`Pivots::Exact`]) left `x` NaN.
pub fn solve_in_place<T: Scalar>(
    dl: &[T],
    d: &[T],
    du: &[T],
    x: &mut [T],
    workspace: &mut [T],
    pivots: Pivots,
) -> bool {
    let m = d.len();
    if m == 0 {
        return true;
    }
    let nrhs = x.len() / m;
    let (u, row) = workspace.split_at_mut(3 * m);
    let row = &mut row[..nrhs];
    let eps = T::Real::EPSILON;
    let nan = T::from_real(T::Real::NAN);
    // Makes `row / pivot` safe, or says the system is singular.
    let settle = |perturb: T::Real, pivot: &mut T, row: &mut [T]| match pivots {
        Pivots::Perturb => {
            perturb_pivot(perturb, pivot, row);
            true
        }
        Pivots::Exact => *pivot != T::ZERO,
    };

    if m == 1 {
        let mut pivot = d[0];
        row.copy_from_slice(&x[..nrhs]);
        if !settle(eps * pivot.cabs(), &mut pivot, row) {
            x.fill(nan);
            return false;
        }
        for (x, r) in x.iter_mut().zip(row.iter()) {
            *x = r.quotient(pivot);
        }
        return true;
    }

    // U has at most two super-diagonals once rows are interchanged.
    u.fill(T::ZERO);
    let (diag, rest) = u.split_at_mut(m);
    let (sup1, sup2) = rest.split_at_mut(m);
    diag[0] = d[0];
    sup1[0] = du[0];
    let mut max_u = max(diag[0].cabs(), sup1[0].cabs());
    // The 1-norm of the current pivot row, against which the pivots are compared.
    let mut scale = diag[0].cabs() + sup1[0].cabs();

    for k in 0..m - 1 {
        let next = k + 1;
        // The last row has no super-diagonal inside A.
        let last = next == m - 1;
        diag[next] = d[next];
        let mut next_scale = dl[next].cabs() + d[next].cabs();
        if !last {
            next_scale = next_scale + du[next].cabs();
        }
        if dl[next] == T::ZERO {
            // Nothing to eliminate below this pivot.
            scale = next_scale;
            sup1[next] = du[next];
            sup2[k] = T::ZERO;
        } else {
            let pivot_here = if diag[k] == T::ZERO {
                T::Real::ZERO
            } else {
                diag[k].cabs() / scale
            };
            let pivot_next = dl[next].cabs() / next_scale;
            if pivot_next <= pivot_here {
                // Eliminate `dl[next]` with row k.
                scale = next_scale;
                let factor = dl[next].quotient(diag[k]);
                diag[next] = diag[next] - factor * sup1[k];
                sup1[next] = du[next];
                sup2[k] = T::ZERO;
                for j in 0..nrhs {
                    x[next + j * m] = x[next + j * m] - factor * x[k + j * m];
                }
            } else {
                // Interchange rows k and k+1, then eliminate.
                let factor = diag[k].quotient(dl[next]);
                let upper = sup1[k];
                diag[k] = dl[next];
                diag[next] = upper - factor * d[next];
                sup1[k] = d[next];
                if !last {
                    sup2[k] = du[next];
                    sup1[next] = -factor * du[next];
                }
                for j in 0..nrhs {
                    let rhs = x[next + j * m];
                    x[next + j * m] = x[k + j * m] - factor * rhs;
                    x[k + j * m] = rhs;
                }
                scale = diag[next].cabs() + sup1[next].cabs();
            }
        }
        // As xLAGTF (and jaxlib): row m-2 of U does not enter the perturbation's scale.
        if !last {
            for entry in [diag[k], sup1[k], sup2[k]] {
                max_u = max(max_u, entry.cabs());
            }
        }
    }
    max_u = max(max_u, diag[m - 1].cabs());

    // L z = P b is done (z in x); now U x = z from the bottom up.
    let perturb = eps * max_u;
    for k in (0..m).rev() {
        for (j, r) in row.iter_mut().enumerate() {
            let mut value = x[k + j * m];
            if k + 1 < m {
                value = value - sup1[k] * x[k + 1 + j * m];
            }
            if k + 2 < m {
                value = value - sup2[k] * x[k + 2 + j * m];
            }
            *r = value;
        }
        let mut pivot = diag[k];
        if !settle(perturb, &mut pivot, row) {
            x.fill(nan);
            return false;
        }
        let inverse = T::ONE.quotient(pivot);
        for (j, r) in row.iter().enumerate() {
            x[k + j * m] = *r * inverse;
        }
    }
    true
}

/// Makes `row / pivot` and `1 / pivot` safe from overflow (xLAGTS's rule): while `|pivot| < 1`
/// and the row's largest entry would overflow, `pivot` moves away from zero by `perturb`
/// (at least the safe minimum, with the sign of `pivot`'s real part), doubling each time; a
/// subnormal `pivot` that is not too small for the row is instead scaled up with its row.
fn perturb_pivot<T: Scalar>(perturb: T::Real, pivot: &mut T, row: &mut [T]) {
    let (one, safe_min) = (T::Real::ONE, T::Real::SAFE_MIN);
    let big = one / safe_min;
    let mut size = pivot.cabs();
    if size >= one {
        return;
    }
    let mut step = max(perturb.abs(), safe_min).copysign(pivot.re());
    let largest = row.iter().fold(T::Real::ZERO, |acc, r| max(acc, r.cabs()));
    // NaN sizes end the loop.
    while size < one {
        let grow = if size < safe_min {
            size == T::Real::ZERO || largest * safe_min > size
        } else {
            largest > size * big
        };
        if grow {
            *pivot = pivot.add_real(step);
            step = step * T::Real::TWO;
        } else {
            if size < safe_min {
                *pivot = pivot.scale(big);
                row.iter_mut().for_each(|r| *r = r.scale(big));
            }
            return;
        }
        size = pivot.cabs();
    }
}

kernel_args! {
    /// The arguments of every `ferrax_tridiagonal_solve` entry: `batch` systems of `m`
    /// equations (diagonals `[batch, m]`, as [`solve_perturbed`] reads them) with `nrhs`
    /// right-hand sides each (`b` and `x` `[batch, nrhs, m]`: column-major `m x nrhs`). `x` may
    /// be `b` (solved in place). `workspace` holds [`workspace_len`]`(m, nrhs)` elements for
    /// each thread of the launch.
    pub struct TridiagonalArgs<T> {
        pub dl: *const T,
        pub d: *const T,
        pub du: *const T,
        pub b: *const T,
        pub x: *mut T,
        pub workspace: *mut T,
        pub batch: u64,
        pub m: u64,
        pub nrhs: u64,
    }
}

/// Body of every `ferrax_tridiagonal_solve` entry: one thread per system, grid-striding over
/// the batch with its own workspace, as jaxlib's perturbed kernel (the sweep is sequential in
/// the rows; the batch is the parallelism).
#[inline(always)]
unsafe fn solve_kernel<T: Scalar, const PERTURB: bool>(args: TridiagonalArgs<T>) {
    let TridiagonalArgs {
        dl,
        d,
        du,
        b,
        x,
        workspace,
        batch,
        m,
        nrhs,
    } = args;
    let pivots = if PERTURB {
        Pivots::Perturb
    } else {
        Pivots::Exact
    };
    let (m, nrhs) = (m as usize, nrhs as usize);
    let (len, thread) = (workspace_len(m, nrhs), global_idx_x());
    let work = core::slice::from_raw_parts_mut(workspace.add(thread as usize * len), len);
    let mut system = thread;
    while system < batch {
        let at = system as usize;
        let diagonal = |p: *const T| core::slice::from_raw_parts(p.add(at * m), m);
        let solution = x.add(at * m * nrhs);
        let rhs = b.add(at * m * nrhs);
        if !core::ptr::eq(rhs, solution) {
            core::ptr::copy_nonoverlapping(rhs, solution, m * nrhs);
        }
        let solution = core::slice::from_raw_parts_mut(solution, m * nrhs);
        solve_in_place(
            diagonal(dl),
            diagonal(d),
            diagonal(du),
            solution,
            work,
            pivots,
        );
        system += grid_size_x();
    }
}

kernel_entries! {
    /// `ferrax_tridiagonal_solve_<pivots>_<dtype>`: `exact` (jax's `tridiagonal_solve`, NaN
    /// for a singular system) and `perturbed` (`perturb_singular=True`).
    pub const ENTRIES: Kernels<(ScalarKind, Pivots), TridiagonalArgs<_>>;
    names [tridiagonal_solve] variant dtype;
    variants {
        exact => (Pivots::Exact, solve_kernel::<_, false>),
        perturbed => (Pivots::Perturb, solve_kernel::<_, true>),
    }
    f32: exact perturbed;
    f64: exact perturbed;
    c64: exact perturbed;
    c128: exact perturbed;
}

/// Threads per block of the solve kernels.
const BLOCK: u64 = 128;
/// About this many bytes of workspace for the launch at most (whole blocks): past it, fewer
/// threads, each taking more systems (a batch of long systems would otherwise ask gigabytes of
/// scratch), but at least a warp where the batch has that many (then the workspace is below
/// the systems' own size).
pub const WORKSPACE_BUDGET: u64 = 256 << 20;
const WARP: u64 = 32;

/// The launch that solves `batch` systems of `m` equations with `nrhs` right-hand sides on a
/// device with `multiprocessors` SMs, and the workspace bytes it needs (the launch's threads
/// times [`workspace_len`] elements), or None where that is past the address space.
pub fn launch_config(
    kind: ScalarKind,
    pivots: Pivots,
    batch: u64,
    m: u64,
    nrhs: u64,
    multiprocessors: u32,
) -> Option<(LaunchConfig<TridiagonalArgs<AnyElement>>, usize)> {
    let per_thread = m
        .checked_mul(3)?
        .checked_add(nrhs)?
        .checked_mul(kind.bytes() as u64)?;
    // Up to 16 blocks per SM are resident at once; more would only wait.
    let threads = batch
        .min(16 * BLOCK * u64::from(multiprocessors.max(1)))
        .min((WORKSPACE_BUDGET / per_thread.max(1)).max(WARP))
        .max(1);
    let block = threads.min(BLOCK).next_multiple_of(32);
    let grid = threads.div_ceil(block);
    let bytes = usize::try_from(grid.checked_mul(block)?.checked_mul(per_thread)?).ok()?;
    let config = ENTRIES
        .launch((kind, pivots), grid as u32, block as u32, 0)
        .expect("every dtype has both entries");
    Some((config, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;

    const M: usize = 7;
    const NRHS: usize = 3;

    /// Deterministic values in [-1, 1) (xorshift), never exactly zero in practice.
    struct Values(u64);
    impl Values {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        }
        fn fill<T: Scalar>(&mut self, out: &mut [T], make: impl Fn(f64, f64) -> T) {
            for v in out.iter_mut() {
                let (re, im) = (self.next(), self.next());
                *v = make(re, im);
            }
        }
    }

    /// max |A x - b| over all entries, relative to 1 + max |x| (the entries of A are at most 1
    /// in modulus, so a backward-stable solve leaves a few eps of it).
    fn residual<T: Scalar>(dl: &[T], d: &[T], du: &[T], x: &[T], b: &[T]) -> T::Real {
        let m = d.len();
        let (mut worst, mut x_max) = (T::Real::ZERO, T::Real::ZERO);
        for j in 0..b.len() / m {
            let col = |i: usize| x[i + j * m];
            for i in 0..m {
                let mut ax = d[i] * col(i);
                if i > 0 {
                    ax = ax + dl[i] * col(i - 1);
                }
                if i + 1 < m {
                    ax = ax + du[i] * col(i + 1);
                }
                worst = max(worst, (ax - b[i + j * m]).cabs());
                x_max = max(x_max, col(i).cabs());
            }
        }
        worst / (T::Real::ONE + x_max)
    }

    #[derive(Clone, Copy)]
    struct System<T> {
        dl: [T; M],
        d: [T; M],
        du: [T; M],
        b: [T; M * NRHS],
    }

    fn random_system<T: Scalar>(seed: u64, make: impl Fn(f64, f64) -> T + Copy) -> System<T> {
        let mut values = Values(seed);
        let mut s = System {
            dl: [T::ZERO; M],
            d: [T::ZERO; M],
            du: [T::ZERO; M],
            b: [T::ZERO; M * NRHS],
        };
        values.fill(&mut s.dl, make);
        values.fill(&mut s.d, make);
        values.fill(&mut s.du, make);
        values.fill(&mut s.b, make);
        s
    }

    fn solve<T: Scalar>(s: &System<T>) -> [T; M * NRHS] {
        let mut x = [T::ZERO; M * NRHS];
        let mut workspace = [T::ZERO; workspace_len(M, NRHS)];
        solve_perturbed(&s.dl, &s.d, &s.du, &s.b, &mut x, &mut workspace);
        x
    }

    fn check_random<T: Scalar>(make: impl Fn(f64, f64) -> T + Copy, tol: T::Real) {
        for seed in 1..50 {
            let s = random_system(seed * 7919, make);
            let x = solve(&s);
            assert!(residual(&s.dl, &s.d, &s.du, &x, &s.b) < tol, "seed {seed}");
        }
    }

    #[test]
    fn random_systems_solve() {
        check_random(|re, _| re, 1e-14f64);
        check_random(|re, _| re as f32, 1e-5f32);
        check_random(Complex::new, 1e-14f64);
        check_random(|re, im| Complex::new(re as f32, im as f32), 1e-5f32);
    }

    #[test]
    fn zero_diagonal_needs_row_interchanges() {
        let mut s = random_system(3, |re, _| re);
        s.d[0] = 0.0;
        s.d[3] = 0.0;
        let x = solve(&s);
        assert!(residual(&s.dl, &s.d, &s.du, &x, &s.b) < 1e-14);
    }

    #[test]
    fn unused_corners_are_ignored() {
        let s = random_system(5, Complex::new);
        let mut corners = s;
        corners.dl[0] = Complex::new(f64::NAN, 1.0);
        corners.du[M - 1] = Complex::new(f64::NAN, 1.0);
        assert_eq!(solve(&s), solve(&corners));
    }

    #[test]
    fn singular_system_gives_a_finite_null_vector_direction() {
        // 2 - 2cos(pi/(M+1)) is an eigenvalue of the second-difference matrix [-1, 2, -1];
        // shifting by it makes the system singular up to rounding.
        let shift = 2.0 - 2.0 * libm::cos(core::f64::consts::FRAC_PI_8);
        let mut s = random_system(11, |re, _| re);
        s.dl = [-1.0; M];
        s.du = [-1.0; M];
        s.d = [2.0 - shift; M];
        let x = solve(&s);
        assert!(x.iter().all(|v| v.is_finite()));
        // Inverse iteration: the solution is dominated by the eigenvector sin(k pi / (M+1)).
        for j in 0..NRHS {
            let col = &x[j * M..(j + 1) * M];
            let ratio = col[0] / libm::sin(core::f64::consts::FRAC_PI_8);
            for (k, v) in col.iter().enumerate() {
                let expected = ratio * libm::sin((k + 1) as f64 * core::f64::consts::FRAC_PI_8);
                assert!((v - expected).abs() <= 1e-6 * ratio.abs(), "{j} {k}");
            }
        }
    }

    #[test]
    fn exactly_singular_systems_stay_finite() {
        // All-zero and rank-one matrices: every pivot is perturbed.
        let b = [1.0f32, -2.0, 3.0];
        for value in [0.0f32, 1.0] {
            let (dl, d, du) = ([value; 3], [value; 3], [value; 3]);
            let mut x = [0.0f32; 3];
            let mut workspace = [0.0f32; workspace_len(3, 1)];
            solve_perturbed(&dl, &d, &du, &b, &mut x, &mut workspace);
            assert!(x.iter().all(|v| v.is_finite()), "{value}: {x:?}");
        }
    }

    #[test]
    fn one_by_one() {
        let mut workspace = [Complex::new(0.0, 0.0); workspace_len(1, 2)];
        let mut x = [Complex::new(0.0, 0.0); 2];
        let b = [Complex::new(3.0, 1.0), Complex::new(-1.0, 2.0)];
        let d = [Complex::new(0.5, -2.0)];
        solve_perturbed(&d, &d, &d, &b, &mut x, &mut workspace);
        for (x, b) in x.iter().zip(&b) {
            assert!((*x * d[0] - *b).cabs() < 1e-15);
        }
        // A zero pivot becomes the safe minimum: finite, if huge.
        let mut x = [0.0f64];
        solve_perturbed(&[0.0], &[0.0], &[0.0], &[1.0], &mut x, &mut [0.0; 4]);
        assert_eq!(x[0], 1.0 / f64::MIN_POSITIVE);
    }

    #[test]
    fn subnormal_pivot_is_scaled_with_its_row() {
        let mut pivot = 1e-310f64;
        let mut row = [1e-300f64, -2e-300];
        perturb_pivot(0.0, &mut pivot, &mut row);
        let big = 1.0 / f64::MIN_POSITIVE;
        assert_eq!((pivot, row), (1e-310 * big, [1e-300 * big, -2e-300 * big]));
        // A subnormal pivot too small for its row is perturbed instead.
        let (mut pivot, mut row) = (-1e-310f64, [1.0f64]);
        perturb_pivot(0.0, &mut pivot, &mut row);
        assert!(pivot < 0.0 && (row[0] / pivot).is_finite() && row == [1.0]);
    }

    #[test]
    fn smith_division_avoids_overflow_and_underflow() {
        let huge = Complex::new(1e300, 1e300);
        assert_eq!(huge.quotient(huge), Complex::new(1.0, 0.0));
        let tiny = Complex::new(1e-300, -1e-300);
        let q = Complex::new(1.0, 0.0).quotient(tiny);
        assert!((q - Complex::new(5e299, 5e299)).cabs() < 1e285);
    }

    #[test]
    fn hypot_special_values() {
        for (a, b, expected) in [
            (3.0, 4.0, 5.0),
            (-3e300, 4e300, 5e300),
            (3e-310, -4e-310, 5e-310),
            (1e300, 1e-300, 1e300),
            (0.0, -0.0, 0.0),
            (f64::NAN, f64::INFINITY, f64::INFINITY),
            (f64::NEG_INFINITY, 1.0, f64::INFINITY),
        ] {
            assert_eq!(hypot(a, b), expected, "{a} {b}");
            assert_eq!(hypotf(a as f32, b as f32), expected as f32, "{a} {b}");
        }
        assert!(hypot(f64::NAN, 1.0).is_nan() && hypotf(1.0, f32::NAN).is_nan());
    }

    /// Bit for bit the `cabs` that jaxlib's kernel calls, over ordinary and extreme exponents.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn hypot_matches_glibc() {
        extern crate std;
        let mut values = Values(0x2545_f491_4f6c_dd1d);
        for i in 0..200_000 {
            let (mut a, mut b) = (values.next(), values.next());
            if i % 2 == 1 {
                let exponent = (values.next() * 1000.0) as i32;
                a = libm::scalbn(a, exponent);
                b = libm::scalbn(b, exponent + (values.next() * 80.0) as i32);
            }
            assert_eq!(hypot(a, b), std::primitive::f64::hypot(a, b), "{a:e} {b:e}");
            let (a, b) = (a as f32, b as f32);
            assert_eq!(
                hypotf(a, b),
                std::primitive::f32::hypot(a, b),
                "{a:e} {b:e}"
            );
        }
    }

    #[test]
    fn empty_system_is_a_no_op() {
        let mut x: [f64; 0] = [];
        solve_perturbed(&[], &[], &[], &[], &mut x, &mut []);
    }

    /// The entries on the host grid: batches of random systems (some with zero diagonals,
    /// which need interchanges), against the sequential solve per system and the residual;
    /// out of place and in place; grids smaller than the batch stride over it.
    #[test]
    fn entries_solve_every_system_of_a_batch() {
        extern crate std;
        use std::vec::Vec;
        fn check<T: Scalar + 'static>(
            kind: ScalarKind,
            make: impl Fn(f64, f64) -> T + Copy,
            tol: T::Real,
        ) {
            for (batch, m, nrhs, grid, block) in [
                (5, 7, 1, 1, 32),
                (70, 4, 3, 2, 32),
                (3, 1, 2, 1, 32),
                (33, 2, 1, 1, 64),
            ] {
                let mut values = Values(batch * 31 + m * 7 + nrhs);
                let mut draw = |len: u64| {
                    let mut v = std::vec![T::ZERO; len as usize];
                    values.fill(&mut v, make);
                    v
                };
                let (dl, mut d, du) = (draw(batch * m), draw(batch * m), draw(batch * m));
                if m > 1 {
                    d[0] = T::ZERO;
                }
                let b = draw(batch * m * nrhs);
                for pivots in [Pivots::Exact, Pivots::Perturb] {
                    for in_place in [false, true] {
                        let mut x = if in_place {
                            b.clone()
                        } else {
                            std::vec![T::ZERO; b.len()]
                        };
                        let threads = u64::from(grid * block);
                        let mut work = std::vec![T::ZERO; (threads * (3 * m + nrhs)) as usize];
                        let args = TridiagonalArgs {
                            dl: dl.as_ptr(),
                            d: d.as_ptr(),
                            du: du.as_ptr(),
                            b: if in_place { x.as_ptr() } else { b.as_ptr() },
                            x: x.as_mut_ptr(),
                            workspace: work.as_mut_ptr(),
                            batch,
                            m,
                            nrhs,
                        };
                        let name = ENTRIES.name((kind, pivots)).unwrap();
                        unsafe { crate::launch::run_on_host(name, grid, block, 0, args) };
                        let (m, nrhs) = (m as usize, nrhs as usize);
                        for s in 0..batch as usize {
                            let diagonal = |v: &Vec<T>| v[s * m..(s + 1) * m].to_vec();
                            let (sdl, sd, sdu) = (diagonal(&dl), diagonal(&d), diagonal(&du));
                            let rhs = &b[s * m * nrhs..(s + 1) * m * nrhs];
                            let mut want = rhs.to_vec();
                            let mut w = std::vec![T::ZERO; workspace_len(m, nrhs)];
                            solve_in_place(&sdl, &sd, &sdu, &mut want, &mut w, pivots);
                            let got = &x[s * m * nrhs..(s + 1) * m * nrhs];
                            assert!(got == &want[..], "{kind:?} {pivots:?} system {s}");
                            assert!(residual(&sdl, &sd, &sdu, got, rhs) < tol, "{kind:?} {s}");
                        }
                    }
                }
            }
        }
        check(ScalarKind::F32, |re, _| re as f32, 1e-5);
        check(ScalarKind::F64, |re, _| re, 1e-13);
        check(
            ScalarKind::C64,
            |re, im| Complex::new(re as f32, im as f32),
            1e-5,
        );
        check(ScalarKind::C128, Complex::new, 1e-13);
    }

    #[test]
    fn exact_pivots_make_a_singular_system_nan() {
        // Rows 1 and 2 equal: singular, and exactly so in floating point.
        let (dl, d, du) = ([0.0, 1.0, 1.0], [1.0, 2.0, 2.0], [3.0, 0.0, 0.0]);
        let mut dl2 = dl;
        dl2[2] = 0.0;
        let mut d2 = d;
        d2[2] = 0.0;
        let mut workspace = [0.0f64; workspace_len(3, 2)];
        let mut x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert!(!solve_in_place(
            &dl2,
            &d2,
            &du,
            &mut x,
            &mut workspace,
            Pivots::Exact
        ));
        assert!(x.iter().all(|v| v.is_nan()));
        // The same system perturbed is finite; a regular one solves exactly as perturbed.
        let mut x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert!(solve_in_place(
            &dl2,
            &d2,
            &du,
            &mut x,
            &mut workspace,
            Pivots::Perturb
        ));
        assert!(x.iter().all(|v| v.is_finite()));
        let mut exact = [1.0, 2.0, 3.0];
        let mut perturbed = exact;
        assert!(solve_in_place(
            &dl,
            &d,
            &du,
            &mut exact,
            &mut workspace,
            Pivots::Exact
        ));
        solve_in_place(
            &dl,
            &d,
            &du,
            &mut perturbed,
            &mut workspace,
            Pivots::Perturb,
        );
        assert_eq!(exact, perturbed);
        // One equation: a zero pivot.
        let mut x = [Complex::new(1.0f32, 0.0)];
        let zero = [Complex::new(0.0f32, 0.0)];
        assert!(!solve_in_place(
            &zero,
            &zero,
            &zero,
            &mut x,
            &mut [zero[0]; 4],
            Pivots::Exact
        ));
        assert!(x[0].re.is_nan());
    }

    #[test]
    fn launch_stays_within_the_workspace_budget() {
        for kind in [ScalarKind::F32, ScalarKind::C128] {
            for (batch, m, nrhs) in [(0, 5, 1), (1, 5, 1), (1000, 3, 2), (1 << 24, 64, 1)] {
                let (c, bytes) = launch_config(kind, Pivots::Exact, batch, m, nrhs, 132).unwrap();
                let threads = u64::from(c.grid) * u64::from(c.block);
                assert!(c.grid >= 1 && c.block % 32 == 0 && c.block <= 128);
                assert!(threads >= batch.min(32) && threads < batch.max(1) + 128);
                assert_eq!(bytes as u64, threads * (3 * m + nrhs) * kind.bytes() as u64);
                assert!(bytes as u64 <= WORKSPACE_BUDGET + 128 * (3 * m + nrhs) * 16);
            }
            // Long systems: fewer threads, down to a warp, each taking several systems.
            let (c, bytes) = launch_config(kind, Pivots::Perturb, 1000, 1 << 22, 1, 132).unwrap();
            assert_eq!((c.grid, c.block), (1, 32));
            assert_eq!(bytes, 32 * (3 << 22 | 1) * kind.bytes());
            assert!(c.kernel.ends_with("perturbed_c128") || c.kernel.ends_with("perturbed_f32"));
        }
        assert!(launch_config(ScalarKind::F64, Pivots::Exact, 1, u64::MAX / 2, 1, 1).is_none());
    }
}
