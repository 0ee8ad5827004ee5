//! Attribute decoding by name: scalars of an exact dtype, arrays, strings and dictionaries.
#![allow(non_upper_case_globals)] // matching on sys constants named as in c_api.h

use super::dtype::{DataType, NativeType};
use super::sys::*;
use crate::linalg::flags::Flag;
use std::fmt;

/// One attribute as XLA sent it.
#[derive(Clone, Copy)]
pub enum Attr<'a> {
    Scalar {
        dtype: DataType,
        value: *const u8,
    },
    Array {
        dtype: DataType,
        len: usize,
        data: *const u8,
    },
    /// A string attribute's bytes (jax passes `bytes` as they are, e.g. a compressed payload).
    String(&'a [u8]),
    Dictionary(Attrs<'a>),
    Unknown(i32),
}

impl fmt::Display for Attr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Scalar { dtype, .. } => write!(f, "{dtype} scalar"),
            Attr::Array { dtype, len, .. } => write!(f, "{dtype} array of {len}"),
            Attr::String(_) => f.write_str("string"),
            Attr::Dictionary(_) => f.write_str("dictionary"),
            Attr::Unknown(kind) => write!(f, "attribute of unknown kind {kind}"),
        }
    }
}

/// The attributes of a call (or a nested dictionary); XLA sends them sorted by name.
#[derive(Clone, Copy)]
pub struct Attrs<'a> {
    raw: &'a XLA_FFI_Attrs,
}

impl<'a> Attrs<'a> {
    /// # Safety
    /// `raw` must be a valid `XLA_FFI_Attrs` that outlives `'a`.
    pub(crate) unsafe fn from_raw(raw: &'a XLA_FFI_Attrs) -> Self {
        Attrs { raw }
    }

    pub fn len(&self) -> usize {
        usize::try_from(self.raw.size).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn name(&self, index: usize) -> &'a str {
        // SAFETY: index < len, names are valid ByteSpans for the call's duration.
        unsafe {
            let span = &**self.raw.names.add(index);
            let bytes = std::slice::from_raw_parts(span.ptr.cast::<u8>(), span.len);
            std::str::from_utf8(bytes).unwrap_or("<non-utf8 name>")
        }
    }

    pub fn get_index(&self, index: usize) -> Attr<'a> {
        // SAFETY: index < len; each entry points to the struct its type tag names.
        unsafe {
            let kind = *self.raw.types.add(index);
            let ptr = *self.raw.attrs.add(index);
            match kind {
                XLA_FFI_AttrType_SCALAR => {
                    let s = &*(ptr as *const XLA_FFI_Scalar);
                    Attr::Scalar {
                        dtype: DataType::from_raw(s.dtype),
                        value: s.value.cast(),
                    }
                }
                XLA_FFI_AttrType_ARRAY => {
                    let a = &*(ptr as *const XLA_FFI_Array);
                    Attr::Array {
                        dtype: DataType::from_raw(a.dtype),
                        len: a.size,
                        data: a.data.cast(),
                    }
                }
                XLA_FFI_AttrType_STRING => {
                    let s = &*(ptr as *const XLA_FFI_ByteSpan);
                    let bytes = if s.len == 0 {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(s.ptr.cast::<u8>(), s.len)
                    };
                    Attr::String(bytes)
                }
                XLA_FFI_AttrType_DICTIONARY => {
                    Attr::Dictionary(Attrs::from_raw(&*(ptr as *const XLA_FFI_Attrs)))
                }
                other => Attr::Unknown(other),
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<Attr<'a>> {
        (0..self.len())
            .find(|&i| self.name(i) == name)
            .map(|i| self.get_index(i))
    }

    /// Decodes attribute `name` as `T`; the error says what was expected and what came.
    pub fn decode<T: FromAttr<'a>>(&self, name: &str) -> Result<T, String> {
        match self.get(name) {
            None => Err(format!(
                "missing attribute '{name}' (expected {})",
                T::EXPECTED
            )),
            Some(attr) => T::from_attr(attr).map_err(|why| format!("attribute '{name}': {why}")),
        }
    }
}

/// Types an attribute decodes into. Scalars must match the dtype exactly, as in XLA's C++ API
/// (a Python `int` arrives as s64, `np.uint8` as u8, `bool` as pred).
pub trait FromAttr<'a>: Sized {
    const EXPECTED: &'static str;
    /// The value, or what was expected instead of `attr` ("expected ..., got ...").
    fn from_attr(attr: Attr<'a>) -> Result<Self, String>;
}

/// The error of an attribute of another kind than `T` takes.
fn other_kind<'a, T: FromAttr<'a>>(attr: Attr<'a>) -> String {
    format!("expected {}, got {attr}", T::EXPECTED)
}

/// LAPACK's character arguments, as jaxlib passes them: u8 ASCII codes.
impl<'a, F: Flag> FromAttr<'a> for F {
    const EXPECTED: &'static str = "u8 scalar";
    fn from_attr(attr: Attr<'a>) -> Result<Self, String> {
        let letter = u8::from_attr(attr)?;
        F::from_letter(letter).ok_or_else(|| format!("expected {}, got {letter}", F::expected()))
    }
}

macro_rules! scalar_attr {
    ($($t:ty => $what:literal),* $(,)?) => {$(
        impl<'a> FromAttr<'a> for $t {
            const EXPECTED: &'static str = $what;
            fn from_attr(attr: Attr<'a>) -> Result<Self, String> {
                match attr {
                    // SAFETY: the dtype check guarantees `value` points to a `$t`.
                    Attr::Scalar { dtype, value } if dtype == <$t as NativeType>::DTYPE =>
                        Ok(unsafe { value.cast::<$t>().read_unaligned() }),
                    _ => Err(other_kind::<Self>(attr)),
                }
            }
        }
    )*};
}
scalar_attr!(
    bool => "pred scalar", i8 => "s8 scalar", i16 => "s16 scalar", i32 => "s32 scalar",
    i64 => "s64 scalar", u8 => "u8 scalar", u16 => "u16 scalar", u32 => "u32 scalar",
    u64 => "u64 scalar", f32 => "f32 scalar", f64 => "f64 scalar",
);

impl<'a> FromAttr<'a> for &'a str {
    const EXPECTED: &'static str = "string";
    fn from_attr(attr: Attr<'a>) -> Result<Self, String> {
        match attr {
            Attr::String(bytes) => std::str::from_utf8(bytes)
                .map_err(|_| "expected a UTF-8 string, got other bytes".to_string()),
            _ => Err(other_kind::<Self>(attr)),
        }
    }
}

/// A string attribute's bytes, UTF-8 or not.
impl<'a> FromAttr<'a> for &'a [u8] {
    const EXPECTED: &'static str = "string";
    fn from_attr(attr: Attr<'a>) -> Result<Self, String> {
        match attr {
            Attr::String(bytes) => Ok(bytes),
            _ => Err(other_kind::<Self>(attr)),
        }
    }
}

impl<'a> FromAttr<'a> for Attrs<'a> {
    const EXPECTED: &'static str = "dictionary";
    fn from_attr(attr: Attr<'a>) -> Result<Self, String> {
        match attr {
            Attr::Dictionary(d) => Ok(d),
            _ => Err(other_kind::<Self>(attr)),
        }
    }
}

/// A dense array attribute of element type `T` (from a NumPy array in `ffi_call`).
#[derive(Clone, Copy, Debug)]
pub struct Span<'a, T>(pub &'a [T]);

macro_rules! span_attr {
    ($($t:ty => $what:literal),* $(,)?) => {$(
        impl<'a> FromAttr<'a> for Span<'a, $t> {
            const EXPECTED: &'static str = $what;
            fn from_attr(attr: Attr<'a>) -> Result<Self, String> {
                match attr {
                    Attr::Array { dtype, len, data } if dtype == <$t as NativeType>::DTYPE => {
                        Ok(Span(if len == 0 {
                            &[]
                        } else {
                            // SAFETY: XLA owns `len` elements of this dtype for the call.
                            unsafe { std::slice::from_raw_parts(data.cast::<$t>(), len) }
                        }))
                    }
                    _ => Err(other_kind::<Self>(attr)),
                }
            }
        }
    )*};
}
span_attr!(
    i8 => "s8 array", i16 => "s16 array", i32 => "s32 array", i64 => "s64 array",
    u8 => "u8 array", u16 => "u16 array", u32 => "u32 array", u64 => "u64 array",
    f32 => "f32 array", f64 => "f64 array",
);
