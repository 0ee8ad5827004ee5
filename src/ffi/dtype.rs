//! XLA element types and the Rust types that match them exactly.

use num_complex::Complex;
use std::fmt;

/// `XLA_FFI_DataType`, restricted to the types ferrax reads; everything else is `Other(code)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    Pred,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    C64,
    C128,
    Token,
    Other(i32),
}

impl DataType {
    pub fn from_raw(raw: i32) -> Self {
        match raw {
            1 => DataType::Pred,
            2 => DataType::S8,
            3 => DataType::S16,
            4 => DataType::S32,
            5 => DataType::S64,
            6 => DataType::U8,
            7 => DataType::U16,
            8 => DataType::U32,
            9 => DataType::U64,
            10 => DataType::F16,
            11 => DataType::F32,
            12 => DataType::F64,
            15 => DataType::C64,
            16 => DataType::BF16,
            17 => DataType::Token,
            18 => DataType::C128,
            other => DataType::Other(other),
        }
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DataType::C64 | DataType::C128)
    }

    pub fn to_raw(self) -> i32 {
        match self {
            DataType::Pred => 1,
            DataType::S8 => 2,
            DataType::S16 => 3,
            DataType::S32 => 4,
            DataType::S64 => 5,
            DataType::U8 => 6,
            DataType::U16 => 7,
            DataType::U32 => 8,
            DataType::U64 => 9,
            DataType::F16 => 10,
            DataType::F32 => 11,
            DataType::F64 => 12,
            DataType::C64 => 15,
            DataType::BF16 => 16,
            DataType::Token => 17,
            DataType::C128 => 18,
            DataType::Other(raw) => raw,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            DataType::Pred => "pred",
            DataType::S8 => "s8",
            DataType::S16 => "s16",
            DataType::S32 => "s32",
            DataType::S64 => "s64",
            DataType::U8 => "u8",
            DataType::U16 => "u16",
            DataType::U32 => "u32",
            DataType::U64 => "u64",
            DataType::F16 => "f16",
            DataType::BF16 => "bf16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::C64 => "c64",
            DataType::C128 => "c128",
            DataType::Token => "token",
            DataType::Other(raw) => return write!(f, "dtype#{raw}"),
        };
        f.write_str(name)
    }
}

/// A Rust type whose in-memory representation is exactly one XLA element type.
///
/// # Safety
/// `DTYPE` must describe `Self`'s size and bit layout.
pub unsafe trait NativeType: Copy + Send + Sync + 'static {
    const DTYPE: DataType;
}

macro_rules! native {
    ($($t:ty => $d:ident),* $(,)?) => { $(unsafe impl NativeType for $t { const DTYPE: DataType = DataType::$d; })* };
}
native!(
    bool => Pred, i8 => S8, i16 => S16, i32 => S32, i64 => S64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    f32 => F32, f64 => F64, Complex<f32> => C64, Complex<f64> => C128,
);
