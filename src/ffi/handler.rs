//! The call frame, the metadata handshake, and `invoke`, which turns a handler's `Result` (or
//! panic) into an `XLA_FFI_Error*` so that nothing unwinds into XLA.

use super::attrs::{Attrs, FromAttr};
use super::buffer::{Array, Buffer, Matrices, Operand};
use super::dtype::NativeType;
use super::sys::api_fn;
use super::sys::*;
use crate::error::{Error, ErrorCode, Result};
use std::ffi::CString;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// What a handler declares: its target name, operand names (positional) and attribute names.
pub struct Signature {
    pub target: &'static std::ffi::CStr,
    pub args: &'static [&'static str],
    pub rets: &'static [&'static str],
    pub attrs: &'static [&'static str],
    pub traits: XLA_FFI_Handler_Traits,
    /// Whether any number of further operands and results may follow the named ones (XLA's
    /// `RemainingArgs` and `RemainingRets`), as a compiled-kernel call takes them.
    pub remaining: bool,
}

/// The name of an operand or result past a signature's named ones.
const REMAINING: &str = "remaining";

/// A validated view of `XLA_FFI_CallFrame` for the duration of one call.
#[derive(Clone, Copy)]
pub struct CallFrame<'a> {
    frame: &'a XLA_FFI_CallFrame,
    api: &'a XLA_FFI_Api,
    signature: &'a Signature,
    _not_send: PhantomData<*const ()>,
}

impl<'a> CallFrame<'a> {
    pub fn signature(&self) -> &'a Signature {
        self.signature
    }
    pub fn api(&self) -> &'a XLA_FFI_Api {
        self.api
    }
    pub fn raw_ctx(&self) -> *mut XLA_FFI_InvokeContext {
        self.frame.ctx
    }
    pub fn raw_stage(&self) -> i32 {
        self.frame.stage
    }
    pub fn attrs(&self) -> Attrs<'a> {
        // SAFETY: the frame (and so its attrs) outlives 'a.
        unsafe { Attrs::from_raw(&self.frame.attrs) }
    }

    /// How many operands the call has (the signature's, or more where it takes the remaining).
    pub fn arg_count(&self) -> usize {
        self.frame.args.size as usize
    }

    pub fn ret_count(&self) -> usize {
        self.frame.rets.size as usize
    }

    pub fn arg(&self, index: usize) -> Result<Buffer<'a>> {
        let name = self.signature.args.get(index).copied().unwrap_or(REMAINING);
        let operand = Operand::Arg { index, name };
        let args = &self.frame.args;
        if index >= self.arg_count() {
            return Err(Error::internal(format!(
                "{operand}: the call has no such operand"
            )));
        }
        // SAFETY: within the call's operands (their count was checked in `invoke`).
        unsafe {
            self.buffer(
                *args.types.add(index),
                XLA_FFI_ArgType_BUFFER,
                *args.args.add(index),
                operand,
            )
        }
    }

    pub fn ret(&self, index: usize) -> Result<Buffer<'a>> {
        let name = self.signature.rets.get(index).copied().unwrap_or(REMAINING);
        let operand = Operand::Ret { index, name };
        let rets = &self.frame.rets;
        if index >= self.ret_count() {
            return Err(Error::internal(format!(
                "{operand}: the call has no such result"
            )));
        }
        // SAFETY: as in `arg`.
        unsafe {
            self.buffer(
                *rets.types.add(index),
                XLA_FFI_RetType_BUFFER,
                *rets.rets.add(index),
                operand,
            )
        }
    }

    unsafe fn buffer(
        &self,
        kind: i32,
        expected: i32,
        raw: *mut std::ffi::c_void,
        operand: Operand,
    ) -> Result<Buffer<'a>> {
        if kind != expected || raw.is_null() {
            return Err(Error::invalid_argument(format!(
                "{operand}: expected a buffer, got kind {kind}"
            )));
        }
        Buffer::from_raw(&*(raw as *const XLA_FFI_Buffer), operand)
    }

    pub fn attr<T: FromAttr<'a>>(&self, name: &str) -> Result<T> {
        self.attrs().decode(name).map_err(Error::invalid_argument)
    }

    /// Calls an XLA API function and converts its error (which we own) into ours, keeping
    /// XLA's error code where this crate has it.
    pub(crate) fn api_call<A>(
        &self,
        what: &str,
        function: Option<unsafe extern "C" fn(*mut A) -> *mut XLA_FFI_Error>,
        args: &mut A,
    ) -> Result<()> {
        let function =
            function.ok_or_else(|| Error::unimplemented(format!("XLA does not provide {what}")))?;
        // SAFETY: `args` is the argument struct this API function expects.
        let error = unsafe { function(args) };
        if error.is_null() {
            return Ok(());
        }
        let (code, message) = unsafe { take_error(self.api, error) };
        let code = ErrorCode::from_raw(code).unwrap_or(ErrorCode::FailedPrecondition);
        Err(Error::new(code, format!("{what}: {message}")))
    }
}

/// Reads and destroys an error returned by XLA: its code (FAILED_PRECONDITION from a runtime
/// older than 0.4, which does not report it) and message.
unsafe fn take_error(api: &XLA_FFI_Api, error: *mut XLA_FFI_Error) -> (i32, String) {
    let mut details = XLA_FFI_Error_GetDetails_Args {
        struct_size: XLA_FFI_Error_GetDetails_Args_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        error,
        message: ptr::null(),
        errc: ErrorCode::FailedPrecondition as i32,
    };
    let mut message = String::from("(no message)");
    if let Some(get) = api_fn!(api, XLA_FFI_Error_GetDetails) {
        get(&mut details);
        if !details.message.is_null() {
            message = std::ffi::CStr::from_ptr(details.message)
                .to_string_lossy()
                .into_owned();
        }
    }
    if let Some(destroy) = api_fn!(api, XLA_FFI_Error_Destroy) {
        let mut args = XLA_FFI_Error_Destroy_Args {
            struct_size: XLA_FFI_Error_Destroy_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            error,
        };
        destroy(&mut args);
    }
    (details.errc, message)
}

/// Answers XLA's registration-time metadata request, if this call is one, with the
/// negotiated API version. Must not touch `ctx` or the operands, and `api` only if not null
/// (older XLA passes a null `api` here).
unsafe fn answer_metadata(frame: &XLA_FFI_CallFrame, traits: XLA_FFI_Handler_Traits) -> bool {
    let extension = frame.extension_start;
    if extension.is_null() || (*extension).type_ != XLA_FFI_Extension_Metadata {
        return false;
    }
    let metadata = (*(extension as *mut XLA_FFI_Metadata_Extension)).metadata;
    if !metadata.is_null() {
        let (major_version, minor_version) = negotiated_version(frame.api.as_ref());
        (*metadata).api_version = XLA_FFI_Api_Version {
            struct_size: XLA_FFI_Api_Version_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            major_version,
            minor_version,
        };
        (*metadata).traits = traits;
        (*metadata).state_type_id = XLA_FFI_TypeId { type_id: 0 };
    }
    true
}

fn create_error(api: &XLA_FFI_Api, error: &Error) -> *mut XLA_FFI_Error {
    let Some(create) = api_fn!(api, XLA_FFI_Error_Create) else {
        return ptr::null_mut();
    };
    let message = CString::new(error.message.replace('\0', " ")).unwrap_or_default();
    let mut args = XLA_FFI_Error_Create_Args {
        struct_size: XLA_FFI_Error_Create_Args_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        message: message.as_ptr(),
        errc: error.code as i32,
    };
    // SAFETY: XLA copies the message; the returned error is owned by the caller (XLA).
    unsafe { create(&mut args) }
}

fn check_frame(frame: &XLA_FFI_CallFrame, signature: &Signature) -> Result<()> {
    if frame.struct_size < XLA_FFI_CallFrame_STRUCT_SIZE {
        return Err(Error::internal(format!(
            "call frame of {} bytes is older than API {XLA_FFI_API_MAJOR}.{XLA_FFI_API_MINOR_OLDEST} ({XLA_FFI_CallFrame_STRUCT_SIZE} bytes)",
            frame.struct_size
        )));
    }
    if frame.stage != XLA_FFI_ExecutionStage_EXECUTE {
        return Err(Error::internal(format!(
            "execute handler called in stage {}",
            frame.stage
        )));
    }
    let counts = [
        ("operands", frame.args.size, signature.args),
        ("results", frame.rets.size, signature.rets),
    ];
    for (what, got, names) in counts {
        let named = names.len() as i64;
        if got < 0 || got < named || (got > named && !signature.remaining) {
            let at_least = if signature.remaining { "at least " } else { "" };
            return Err(Error::invalid_argument(format!(
                "expected {at_least}{} {what} ({}), got {got}",
                names.len(),
                names.join(", ")
            )));
        }
    }
    let attrs = unsafe { Attrs::from_raw(&frame.attrs) };
    if let Some(unexpected) = (0..attrs.len())
        .map(|i| attrs.name(i))
        .find(|n| !signature.attrs.contains(n))
    {
        return Err(Error::invalid_argument(format!(
            "unexpected attribute '{unexpected}' (expected attributes: [{}])",
            signature.attrs.join(", ")
        )));
    }
    Ok(())
}

/// Runs one call of a handler: metadata handshake, frame checks, then `body`; every error gets
/// the target name as prefix and every panic becomes an INTERNAL error.
///
/// # Safety
/// `frame` must be a call frame passed by XLA (or null).
pub unsafe fn invoke(
    frame: *mut XLA_FFI_CallFrame,
    signature: &Signature,
    body: impl FnOnce(&CallFrame<'_>) -> Result<()>,
) -> *mut XLA_FFI_Error {
    let Some(frame) = frame.as_ref() else {
        return ptr::null_mut();
    };
    if answer_metadata(frame, signature.traits) {
        return ptr::null_mut();
    }
    // Without an API table no error can be created; XLA always passes one when executing.
    let Some(api) = frame.api.as_ref() else {
        return ptr::null_mut();
    };
    let call = CallFrame {
        frame,
        api,
        signature,
        _not_send: PhantomData,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        check_frame(frame, signature)?;
        body(&call)
    }))
    .unwrap_or_else(|panic| Err(Error::from_panic(panic)));
    match outcome {
        Ok(()) => ptr::null_mut(),
        Err(mut error) => {
            error.message = format!("{}: {}", signature.target.to_string_lossy(), error.message);
            create_error(api, &error)
        }
    }
}

/// Decodes an operand into a handler parameter type.
pub trait FromBuffer<'a>: Sized {
    fn from_buffer(buffer: Buffer<'a>) -> Result<Self>;
}

impl<'a> FromBuffer<'a> for Buffer<'a> {
    fn from_buffer(buffer: Buffer<'a>) -> Result<Self> {
        Ok(buffer)
    }
}

impl<'a, T: NativeType> FromBuffer<'a> for Array<'a, T> {
    fn from_buffer(buffer: Buffer<'a>) -> Result<Self> {
        Array::new(buffer)
    }
}

impl<'a, T: NativeType> FromBuffer<'a> for Matrices<'a, T> {
    fn from_buffer(buffer: Buffer<'a>) -> Result<Self> {
        Matrices::new(buffer)
    }
}

/// The platforms ferrax registers handlers for, by JAX's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    Cpu,
    Cuda,
}

impl Platform {
    /// The platform name XLA registers handlers under.
    pub fn name(self) -> &'static std::ffi::CStr {
        match self {
            Platform::Cpu => c"cpu",
            Platform::Cuda => c"CUDA",
        }
    }
}

/// One handler of the registration table: the target it serves on one platform.
#[derive(Clone, Copy)]
pub struct Registration {
    pub target: &'static std::ffi::CStr,
    pub platform: Platform,
    pub handler: unsafe extern "C" fn(*mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error,
}

/// The error of a handler whose dtype dispatch met another element type.
pub fn unsupported_dtype(buffer: &Buffer<'_>) -> Error {
    buffer.mismatch(
        "dtype f32, f64, c64 or c128".into(),
        buffer.dtype().to_string(),
    )
}

/// Declares an XLA FFI handler: an `extern "C"` function bound to a signature (context
/// values, operands, results and attributes, each decoded by type) and one function that
/// receives them in that order (`traits = ...;` sets the handler's XLA traits, none by
/// default; `remaining = true;` lets any number of further operands and results follow, which
/// the context value [`Buffers`](crate::ffi::Buffers) hands over). With `dtype T: Bound = operand;` the function is generic over
/// the four LAPACK scalars and is called with `T` the element type of that operand (others
/// are an error naming it); the types in the signature may use `T`.
///
/// ```
/// use ferrax::ffi::{Array, NativeType, Result};
/// use ferrax::ffi_handler;
///
/// ffi_handler! {
///     /// Copies a buffer of any of the four LAPACK dtypes (the attribute is only decoded).
///     pub fn example_scale(c"example_scale") {
///         arg x: Array<T>;
///         ret y: Array<T>;
///         attr factor: f64;
///         dtype T: NativeType = x;
///         body = scale;
///     }
/// }
///
/// fn scale<T: NativeType>(x: Array<'_, T>, y: Array<'_, T>, factor: f64) -> Result<()> {
///     y.expect_dims(x.dims())?;
///     // SAFETY: `y` is a distinct result buffer; `x` is read-only.
///     let (x, y) = unsafe { (x.as_slice(), y.as_mut_slice()) };
///     y.copy_from_slice(x);
///     let _ = factor;
///     Ok(())
/// }
/// ```
#[macro_export]
macro_rules! ffi_handler {
    (
        $(#[$meta:meta])*
        $vis:vis fn $symbol:ident($target:expr) {
            $( ctx $ctx:ident : $ctx_ty:ty; )*
            $( arg $arg:ident : $arg_ty:ty; )*
            $( ret $ret:ident : $ret_ty:ty; )*
            $( attr $attr:ident : $attr_ty:ty; )*
            $( dtype $t:ident : $bound:path = $dispatch:ident; )?
            $( traits = $traits:expr; )?
            $( remaining = $remaining:literal; )?
            body = $body:expr;
        }
    ) => {
        $(#[$meta])*
        ///
        /// # Safety
        /// Called by XLA with a valid call frame.
        $vis unsafe extern "C" fn $symbol(
            frame: *mut $crate::ffi::sys::XLA_FFI_CallFrame,
        ) -> *mut $crate::ffi::sys::XLA_FFI_Error {
            static SIGNATURE: $crate::ffi::Signature = $crate::ffi::Signature {
                target: $target,
                args: &[$(stringify!($arg)),*],
                rets: &[$(stringify!($ret)),*],
                attrs: &[$(stringify!($attr)),*],
                traits: 0 $(| $traits)?,
                remaining: false $(|| $remaining)?,
            };
            $crate::ffi::invoke(frame, &SIGNATURE, |call| {
                $crate::ffi_handler!(@call call, [$($t, $bound, $dispatch)?],
                    [$($ctx: $ctx_ty),*], [$($arg: $arg_ty),*], [$($ret: $ret_ty),*],
                    [$($attr: $attr_ty),*], $body)
            })
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis fn $symbol:ident($target:expr) {
            $( ctx $ctx:ident : $ctx_ty:ty; )*
            operands $ops:ident: $ops_ty:ident;
            $( dtype $t:ident : $bound:path = $dispatch:ident; )?
            body = $body:expr;
        }
    ) => {
        $(#[$meta])*
        ///
        /// # Safety
        /// Called by XLA with a valid call frame.
        $vis unsafe extern "C" fn $symbol(
            frame: *mut $crate::ffi::sys::XLA_FFI_CallFrame,
        ) -> *mut $crate::ffi::sys::XLA_FFI_Error {
            type Names = $ops_ty<'static $(, $crate::ffi_any_element!($t))?>;
            static SIGNATURE: $crate::ffi::Signature = $crate::ffi::Signature {
                target: $target,
                args: Names::ARGS,
                rets: Names::RETS,
                attrs: Names::ATTRS,
                traits: 0,
                remaining: false,
            };
            $crate::ffi::invoke(frame, &SIGNATURE, |call| {
                $crate::ffi_handler!(@operands call, [$($t, $bound, $dispatch)?],
                    [$($ctx: $ctx_ty),*], $ops: $ops_ty, $body)
            })
        }
    };
    (@operands $call:ident, [], [$($ctx:ident: $ctx_ty:ty),*], $ops:ident: $ops_ty:ident,
        $body:expr) => {{
        $( let $ctx = <$ctx_ty as $crate::ffi::FromContext>::from_context($call)?; )*
        let $ops = $ops_ty::decode($call)?;
        ($body)($($ctx,)* $ops)
    }};
    (@operands $call:ident, [$t:ident, $bound:path, $dispatch:ident],
        [$($ctx:ident: $ctx_ty:ty),*], $ops:ident: $ops_ty:ident, $body:expr) => {{
        fn typed<$t: $bound>(call: &$crate::ffi::CallFrame<'_>) -> $crate::ffi::Result<()> {
            $( let $ctx = <$ctx_ty as $crate::ffi::FromContext>::from_context(call)?; )*
            let $ops = $ops_ty::<'_, $t>::decode(call)?;
            ($body)($($ctx,)* $ops)
        }
        $crate::ffi_handler!(@dispatch $call, $ops_ty::<'static, ()>::ARGS, $dispatch, typed)
    }};
    (@dispatch $call:ident, $names:expr, $dispatch:ident, $typed:ident) => {{
        let index = $names
            .iter()
            .position(|&name| name == stringify!($dispatch))
            .expect("the dtype operand is an argument");
        let buffer = $call.arg(index)?;
        match buffer.dtype() {
            $crate::ffi::DataType::F32 => $typed::<f32>($call),
            $crate::ffi::DataType::F64 => $typed::<f64>($call),
            $crate::ffi::DataType::C64 => $typed::<$crate::ffi::Complex<f32>>($call),
            $crate::ffi::DataType::C128 => $typed::<$crate::ffi::Complex<f64>>($call),
            _ => Err($crate::ffi::unsupported_dtype(&buffer)),
        }
    }};
    (@call $call:ident, [], [$($ctx:ident: $ctx_ty:ty),*], [$($arg:ident: $arg_ty:ty),*],
        [$($ret:ident: $ret_ty:ty),*], [$($attr:ident: $attr_ty:ty),*], $body:expr) => {{
        let mut _arg_index = 0usize;
        let mut _ret_index = 0usize;
        $( let $ctx = <$ctx_ty as $crate::ffi::FromContext>::from_context($call)?; )*
        $(
            let $arg = <$arg_ty as $crate::ffi::FromBuffer>::from_buffer($call.arg(_arg_index)?)?;
            _arg_index += 1;
        )*
        $(
            let $ret = <$ret_ty as $crate::ffi::FromBuffer>::from_buffer($call.ret(_ret_index)?)?;
            _ret_index += 1;
        )*
        $( let $attr: $attr_ty = $call.attr(stringify!($attr))?; )*
        ($body)($($ctx,)* $($arg,)* $($ret,)* $($attr),*)
    }};
    (@call $call:ident, [$t:ident, $bound:path, $dispatch:ident], [$($ctx:ident: $ctx_ty:ty),*],
        [$($arg:ident: $arg_ty:ty),*], [$($ret:ident: $ret_ty:ty),*],
        [$($attr:ident: $attr_ty:ty),*], $body:expr) => {{
        fn typed<$t: $bound>(call: &$crate::ffi::CallFrame<'_>) -> $crate::ffi::Result<()> {
            $crate::ffi_handler!(@call call, [], [$($ctx: $ctx_ty),*], [$($arg: $arg_ty),*],
                [$($ret: $ret_ty),*], [$($attr: $attr_ty),*], $body)
        }
        let names: &[&str] = &[$(stringify!($arg)),*];
        $crate::ffi_handler!(@dispatch $call, names, $dispatch, typed)
    }};
}

/// Declares a target's operands once, for the handlers of every platform: a struct of its
/// arguments, results and attributes (in the call's order), each decoded by type and named as
/// XLA's errors name it. A handler takes it with `operands name: Struct;`. Generic over the
/// element type `T` when the handler dispatches on one.
///
/// ```
/// use ferrax::ffi::{Array, Matrices};
/// ferrax::ffi_operands! {
///     /// `example`'s operands.
///     pub struct Example<'a, T> {
///         arg x: Matrices<'a, T>,
///         ret y: Array<'a, i32>,
///         attr lower: bool,
///     }
/// }
/// assert_eq!(Example::<'static, ()>::ARGS, ["x"]);
/// ```
#[macro_export]
macro_rules! ffi_operands {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident<$lt:lifetime $(, $t:ident)?> {
            $( arg $arg:ident : $arg_ty:ty, )*
            $( ret $ret:ident : $ret_ty:ty, )*
            $( attr $attr:ident : $attr_ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        $vis struct $name<$lt $(, $t)?> {
            $( pub $arg: $arg_ty, )*
            $( pub $ret: $ret_ty, )*
            $( pub $attr: $attr_ty, )*
        }

        impl<$lt $(, $t)?> $name<$lt $(, $t)?> {
            /// The names of the target's arguments, results and attributes, in order.
            pub const ARGS: &'static [&'static str] = &[$(stringify!($arg)),*];
            pub const RETS: &'static [&'static str] = &[$(stringify!($ret)),*];
            pub const ATTRS: &'static [&'static str] = &[$(stringify!($attr)),*];
        }

        impl<$lt $(, $t: $crate::ffi::NativeType)?> $name<$lt $(, $t)?> {
            /// The operands of one call, each decoded by type.
            pub fn decode(call: &$crate::ffi::CallFrame<$lt>) -> $crate::ffi::Result<Self> {
                let mut _arg_index = 0usize;
                let mut _ret_index = 0usize;
                $(
                    let $arg = $crate::ffi::FromBuffer::from_buffer(call.arg(_arg_index)?)?;
                    _arg_index += 1;
                )*
                $(
                    let $ret = $crate::ffi::FromBuffer::from_buffer(call.ret(_ret_index)?)?;
                    _ret_index += 1;
                )*
                $( let $attr = call.attr(stringify!($attr))?; )*
                Ok(Self { $($arg,)* $($ret,)* $($attr,)* })
            }
        }
    };
}

/// Any element type, for the names of a generic operands struct (which do not depend on it).
#[doc(hidden)]
#[macro_export]
macro_rules! ffi_any_element {
    ($t:ident) => {
        ()
    };
}

/// Declares a module's handlers with [`ffi_handler!`], each for a target and platform, and
/// the module's `HANDLERS`: its rows of the registration table (`ferrax_targets`).
#[macro_export]
macro_rules! ffi_handlers {
    ($(
        $(#[$meta:meta])*
        $vis:vis fn $symbol:ident($target:expr, $platform:ident) { $($decl:tt)* }
    )*) => {
        $(
            $crate::ffi_handler! {
                $(#[$meta])*
                $vis fn $symbol($target) { $($decl)* }
            }
        )*

        /// This module's handlers, as the registration table lists them.
        pub(crate) const HANDLERS: &[$crate::ffi::Registration] = &[$(
            $crate::ffi::Registration {
                target: $target,
                platform: $crate::ffi::Platform::$platform,
                handler: $symbol,
            }
        ),*];
    };
}
