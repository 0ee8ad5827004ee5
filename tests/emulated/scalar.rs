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

pub use crate::rng::Rng;

/// Inputs for the emulated device's cases, from the Rust tests' generator.
pub trait RandomInputs {
    /// `len` elements with uniform parts.
    fn matrix<T: TestScalar>(&mut self, len: usize) -> Vec<T>;
    fn words(&mut self, len: usize) -> Vec<u32>;
}

impl RandomInputs for Rng {
    fn matrix<T: TestScalar>(&mut self, len: usize) -> Vec<T> {
        (0..len)
            .map(|_| T::from_parts(self.uniform(), self.uniform()))
            .collect()
    }

    fn words(&mut self, len: usize) -> Vec<u32> {
        (0..len).map(|_| self.next_u32()).collect()
    }
}
