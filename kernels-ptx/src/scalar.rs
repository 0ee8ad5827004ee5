//! The kernels' scalar types: [`Real`] (f32, f64), [`Scalar`] (the reals and their complex
//! numbers) and [`WarpExchange`] (values moved between the lanes of a warp).
//!
//! Every kernel's arithmetic goes through these, so the methods are the exact operations the
//! kernels' results depend on (the tests compare bit for bit). Where two kernels round the
//! same quantity differently the methods stay apart and their names say how: [`Scalar::cabs`]
//! (glibc's `cabs`) vs [`Scalar::modulus_at_least`] (Fortran's `ABS` compared), the `fused_*`
//! methods (one rounding per `fma`) vs the plain products.

use core::ops::{Add, Div, Mul, Neg, Sub};
use num_complex::Complex;

/// The real types, f32 and f64.
pub trait Real:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + WarpExchange
{
    const ZERO: Self;
    const ONE: Self;
    const TWO: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    /// The quiet NaN with the sign bit clear (what `0/0` is not on x86: its NaN is negative).
    const NAN: Self;
    /// The machine epsilon (the distance from 1 to the next larger number): LAPACK's
    /// `xLAMCH('P')`.
    const EPSILON: Self;
    /// LAPACK's `xLAMCH('S')`: the smallest normal number (its reciprocal does not overflow).
    const SAFE_MIN: Self;
    /// `xLAMCH('O')`, the largest finite value.
    const HUGE: Self;
    /// An exact power of two that lifts values below `SAFE_MIN` far enough that their squares
    /// are normal numbers.
    const UNDERFLOW_LIFT: Self;
    /// `xLAMCH('S') / xLAMCH('E')`: below it `xLARFG` rescales (`|beta|` too small for
    /// `1 / (alpha - beta)`).
    const LARFG_SAFMIN: Self;
    /// `1 / LARFG_SAFMIN`.
    const LARFG_RSAFMN: Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    /// Correctly rounded (`sqrt.rn` on the GPU, libm on the host), so host and GPU agree.
    fn sqrt(self) -> Self;
    /// `self * b + c`, rounded once.
    fn fma(self, b: Self, c: Self) -> Self;
    /// `|self|` with the sign of `s` (Fortran's `SIGN`, honouring -0).
    fn copysign(self, s: Self) -> Self;
    /// An exact power of two `p` with `x·p` in about `[1, 2)` for a finite `x > 0`; clamped to
    /// the normal range, so `x·p` may be smaller for subnormal or tiny `x`.
    fn recip_pow2(self) -> Self;
}

/// The element types: f32, f64, `Complex<f32>`, `Complex<f64>`.
pub trait Scalar:
    Copy
    + PartialEq
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + WarpExchange
{
    type Real: Real;
    const ZERO: Self;
    const ONE: Self;
    const COMPLEX: bool;
    fn re(self) -> Self::Real;
    /// The imaginary part (zero for reals).
    fn im(self) -> Self::Real;
    fn from_real(r: Self::Real) -> Self;
    /// `re + i·im` (`re` for reals).
    fn from_re_im(re: Self::Real, im: Self::Real) -> Self;
    fn conj(self) -> Self;
    /// `self + r`.
    fn add_real(self, r: Self::Real) -> Self;
    /// Each part times `r` (`xDSCAL`'s product).
    fn scale(self, r: Self::Real) -> Self;
    /// `|re| + |im|`, the magnitude BLAS `IxAMAX` compares (`|x|` for reals).
    fn abs1(self) -> Self::Real;
    /// `|self| >= r` with `|·|` the modulus (Fortran's `ABS`), exact where the parts are tiny.
    fn modulus_at_least(self, r: Self::Real) -> bool;
    /// `|self|` rounded as glibc's `cabs` (which jaxlib's tridiagonal solve calls), see
    /// [`crate::tridiagonal::hypot`]; `|x|` for reals.
    fn cabs(self) -> Self::Real;
    /// `self / d`; for complex numbers Smith's algorithm as gfortran expands it (and as
    /// libgcc's `__divdc3` computes it, less C's recovery of infinities from NaN quotients),
    /// which stays finite wherever the quotient is.
    fn quotient(self, d: Self) -> Self;
    /// `|self|²` with the last addition fused (`im·im + re·re`, one rounding for the sum).
    fn fused_norm_sqr(self) -> Self::Real;
    /// `self - conj(c)·p` in `fma`s.
    fn fused_sub_conj_mul(self, c: Self, p: Self) -> Self;
    /// `alpha·c + beta·conj(s)` in `fma`s.
    fn fused_rotate(c: Self, alpha: Self::Real, beta: Self, s: Self) -> Self;
}

/// Values that move between the lanes of a warp 32 bits at a time (warp shuffles; the host
/// emulation copies them whole).
pub trait WarpExchange: Copy {
    /// `self` with each 32-bit word `w` replaced by `f(w)`, the low word first.
    fn map_words(self, f: impl FnMut(u32) -> u32) -> Self;
}

impl WarpExchange for u32 {
    #[inline(always)]
    fn map_words(self, mut f: impl FnMut(u32) -> u32) -> Self {
        f(self)
    }
}

impl WarpExchange for u64 {
    #[inline(always)]
    fn map_words(self, mut f: impl FnMut(u32) -> u32) -> Self {
        let lo = f(self as u32) as u64;
        lo | (f((self >> 32) as u32) as u64) << 32
    }
}

impl WarpExchange for f32 {
    #[inline(always)]
    fn map_words(self, mut f: impl FnMut(u32) -> u32) -> Self {
        f32::from_bits(f(self.to_bits()))
    }
}

impl WarpExchange for f64 {
    #[inline(always)]
    fn map_words(self, f: impl FnMut(u32) -> u32) -> Self {
        f64::from_bits(self.to_bits().map_words(f))
    }
}

impl<R: WarpExchange> WarpExchange for Complex<R> {
    #[inline(always)]
    fn map_words(self, mut f: impl FnMut(u32) -> u32) -> Self {
        let re = self.re.map_words(&mut f);
        Complex::new(re, self.im.map_words(f))
    }
}

macro_rules! real {
    ($t:ident, $lift:expr, $sqrt:path, $fma:path, $cabs:path) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const TWO: Self = 2.0;
            const INFINITY: Self = $t::INFINITY;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            const NAN: Self = $t::NAN;
            const EPSILON: Self = $t::EPSILON;
            const SAFE_MIN: Self = $t::MIN_POSITIVE;
            const HUGE: Self = $t::MAX;
            const UNDERFLOW_LIFT: Self = $lift;
            const LARFG_SAFMIN: Self = $t::MIN_POSITIVE / ($t::EPSILON * 0.5);
            const LARFG_RSAFMN: Self = 1.0 / Self::LARFG_SAFMIN;
            #[inline(always)]
            fn abs(self) -> Self {
                $t::abs(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                return core::$t::math::sqrt(self);
                // The instruction (correctly rounded, as libm's), which vectorizes; libm's is a
                // call, much slower where it is not the instruction.
                #[cfg(all(not(target_arch = "nvptx64"), feature = "std"))]
                return std::primitive::$t::sqrt(self);
                #[cfg(all(not(target_arch = "nvptx64"), not(feature = "std")))]
                return $sqrt(self);
            }
            #[inline(always)]
            fn fma(self, b: Self, c: Self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                return core::$t::math::mul_add(self, b, c);
                #[cfg(not(target_arch = "nvptx64"))]
                return $fma(self, b, c);
            }
            #[inline(always)]
            fn copysign(self, s: Self) -> Self {
                real!(@copysign $t, self, s)
            }
            #[inline(always)]
            fn recip_pow2(self) -> Self {
                real!(@recip_pow2 $t, self)
            }
        }

        impl Scalar for $t {
            type Real = $t;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const COMPLEX: bool = false;
            #[inline(always)]
            fn re(self) -> $t {
                self
            }
            #[inline(always)]
            fn im(self) -> $t {
                0.0
            }
            #[inline(always)]
            fn from_real(r: $t) -> Self {
                r
            }
            #[inline(always)]
            fn from_re_im(re: $t, _: $t) -> Self {
                re
            }
            #[inline(always)]
            fn conj(self) -> Self {
                self
            }
            #[inline(always)]
            fn add_real(self, r: $t) -> Self {
                self + r
            }
            #[inline(always)]
            fn scale(self, r: $t) -> Self {
                self * r
            }
            #[inline(always)]
            fn abs1(self) -> $t {
                $t::abs(self)
            }
            #[inline(always)]
            fn modulus_at_least(self, r: $t) -> bool {
                $t::abs(self) >= r
            }
            #[inline(always)]
            fn cabs(self) -> $t {
                $t::abs(self)
            }
            #[inline(always)]
            fn quotient(self, d: Self) -> Self {
                self / d
            }
            #[inline(always)]
            fn fused_norm_sqr(self) -> $t {
                self * self
            }
            #[inline(always)]
            fn fused_sub_conj_mul(self, c: Self, p: Self) -> Self {
                (-c).fma(p, self)
            }
            #[inline(always)]
            fn fused_rotate(c: Self, alpha: $t, beta: Self, s: Self) -> Self {
                beta.fma(s, alpha * c)
            }
        }

        impl Scalar for Complex<$t> {
            type Real = $t;
            const ZERO: Self = Complex::new(0.0, 0.0);
            const ONE: Self = Complex::new(1.0, 0.0);
            const COMPLEX: bool = true;
            #[inline(always)]
            fn re(self) -> $t {
                self.re
            }
            #[inline(always)]
            fn im(self) -> $t {
                self.im
            }
            #[inline(always)]
            fn from_real(r: $t) -> Self {
                Complex::new(r, 0.0)
            }
            #[inline(always)]
            fn from_re_im(re: $t, im: $t) -> Self {
                Complex::new(re, im)
            }
            #[inline(always)]
            fn conj(self) -> Self {
                Complex::new(self.re, -self.im)
            }
            #[inline(always)]
            fn add_real(self, r: $t) -> Self {
                Complex::new(self.re + r, self.im)
            }
            #[inline(always)]
            fn scale(self, r: $t) -> Self {
                Complex::new(self.re * r, self.im * r)
            }
            #[inline(always)]
            fn abs1(self) -> $t {
                $t::abs(self.re) + $t::abs(self.im)
            }
            #[inline(always)]
            fn modulus_at_least(self, r: $t) -> bool {
                let (x, y) = ($t::abs(self.re), $t::abs(self.im));
                let big = if x < y { y } else { x };
                if big >= r || big.is_nan() {
                    // |z| >= max(|re|, |im|); NaN compares false as Fortran's ABS(NaN) >= r.
                    return big >= r;
                }
                // Both parts tiny: lift them exactly so that the squares do not underflow.
                let (x, y, r) = (x * $lift, y * $lift, r * $lift);
                Real::sqrt(x * x + y * y) >= r
            }
            #[inline(always)]
            fn cabs(self) -> $t {
                $cabs(self.re, self.im)
            }
            #[inline(always)]
            fn quotient(self, rhs: Self) -> Self {
                let (a, b, c, d) = (self.re, self.im, rhs.re, rhs.im);
                if $t::abs(c) < $t::abs(d) {
                    let ratio = c / d;
                    let denom = c * ratio + d;
                    Complex::new((a * ratio + b) / denom, (b * ratio - a) / denom)
                } else {
                    let ratio = d / c;
                    let denom = d * ratio + c;
                    Complex::new((b * ratio + a) / denom, (b - a * ratio) / denom)
                }
            }
            #[inline(always)]
            fn fused_norm_sqr(self) -> $t {
                self.im.fma(self.im, self.re * self.re)
            }
            #[inline(always)]
            fn fused_sub_conj_mul(self, c: Self, p: Self) -> Self {
                // conj(c) p = (c.re p.re + c.im p.im) + i (c.re p.im - c.im p.re)
                Complex::new(
                    (-c.im).fma(p.im, (-c.re).fma(p.re, self.re)),
                    c.im.fma(p.re, (-c.re).fma(p.im, self.im)),
                )
            }
            #[inline(always)]
            fn fused_rotate(c: Self, alpha: $t, beta: Self, s: Self) -> Self {
                // beta conj(s) = (b.re s.re + b.im s.im) + i (b.im s.re - b.re s.im)
                Complex::new(
                    beta.im.fma(s.im, beta.re.fma(s.re, alpha * c.re)),
                    (-beta.re).fma(s.im, beta.im.fma(s.re, alpha * c.im)),
                )
            }
        }
    };
    (@copysign f32, $x:expr, $s:expr) => {
        f32::from_bits($x.to_bits() & 0x7fff_ffff | $s.to_bits() & 0x8000_0000)
    };
    (@copysign f64, $x:expr, $s:expr) => {
        f64::from_bits($x.to_bits() & !(1 << 63) | $s.to_bits() & 1 << 63)
    };
    (@recip_pow2 f32, $x:expr) => {{
        let e = (($x.to_bits() >> 23) & 0xff) as i32 - 127;
        f32::from_bits(((127 - e.clamp(-126, 126)) as u32) << 23)
    }};
    (@recip_pow2 f64, $x:expr) => {{
        let e = (($x.to_bits() >> 52) & 0x7ff) as i64 - 1023;
        f64::from_bits(((1023 - e.clamp(-1022, 1022)) as u64) << 52)
    }};
}
real!(
    f32,
    18446744073709551616.0, /* 2^64 */
    libm::sqrtf,
    libm::fmaf,
    crate::tridiagonal::hypotf
);
real!(
    f64,
    4.149515568880993e180, /* 2^600 */
    libm::sqrt,
    libm::fma,
    crate::tridiagonal::hypot
);
