//! The four element types as the tests make and compare them, and a seeded generator.

use ferrax::linalg::LapackScalar;
use num_complex::Complex;
use std::fmt::Debug;
use std::ops::Sub;

/// What the cases need of an element type besides what the cores take.
pub trait TestScalar: LapackScalar + Debug + Sub<Output = Self> {
    /// The type's machine epsilon, as f64.
    const EPS: f64;
    fn from_parts(re: f64, im: f64) -> Self;
    /// `|self|` as f64.
    fn modulus(self) -> f64;
    fn is_nan_value(self) -> bool;
    fn zero() -> Self {
        Self::from_parts(0.0, 0.0)
    }
    fn nan() -> Self {
        Self::from_parts(f64::NAN, 0.0)
    }
}

macro_rules! real {
    ($t:ty) => {
        impl TestScalar for $t {
            const EPS: f64 = <$t>::EPSILON as f64;
            fn from_parts(re: f64, _: f64) -> Self {
                re as $t
            }
            fn modulus(self) -> f64 {
                (self as f64).abs()
            }
            fn is_nan_value(self) -> bool {
                self.is_nan()
            }
        }
    };
}
real!(f32);
real!(f64);

macro_rules! complex {
    ($t:ty) => {
        impl TestScalar for Complex<$t> {
            const EPS: f64 = <$t>::EPSILON as f64;
            fn from_parts(re: f64, im: f64) -> Self {
                Complex::new(re as $t, im as $t)
            }
            fn modulus(self) -> f64 {
                (self.re as f64).hypot(self.im as f64)
            }
            fn is_nan_value(self) -> bool {
                self.re.is_nan() || self.im.is_nan()
            }
        }
    };
}
complex!(f32);
complex!(f64);

/// xorshift64*: reproducible inputs, different for every seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// `len` elements with uniform parts.
    pub fn matrix<T: TestScalar>(&mut self, len: usize) -> Vec<T> {
        (0..len)
            .map(|_| T::from_parts(self.uniform(), self.uniform()))
            .collect()
    }

    pub fn words(&mut self, len: usize) -> Vec<u32> {
        (0..len)
            .map(|_| (self.uniform().to_bits() >> 20) as u32)
            .collect()
    }
}
