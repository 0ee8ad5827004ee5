//! `#[repr(C)]` mirror of what ferrax uses of `xla/ffi/api/c_api.h`, for every API version from
//! [`XLA_FFI_API_MINOR_OLDEST`] (jaxlib 0.10) to [`XLA_FFI_API_MINOR`] (jaxlib 0.12).
//!
//! Minor versions only rename (no ABI change) or append fields to structs, so one layout, the
//! newest, serves them all by the C API's size-and-version protocol:
//! - a struct ferrax passes to XLA carries the newest `struct_size`; an older runtime checks
//!   only that it is at least its own, and does not write the fields it does not know;
//! - a struct XLA passes to ferrax (the call frame, the API table) has a field only when its
//!   `struct_size` reaches past it ([`api_fn!`] checks that for the API table);
//! - the metadata handshake reports the runtime's own version, capped at the newest this
//!   mirror knows ([`negotiated_version`]), so a runtime newer than the mirror accepts it.
//!
//! Names are the newest header's. `tests/c_layout.rs` checks every offset, size and constant
//! against the header of each jaxlib in that range, with the older names where they differ
//! (0.3: `XLA_FFI_Extension_Base`, `Error_GetMessage`, `ExecutionContext_Get`).
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_void};

pub const XLA_FFI_API_MAJOR: c_int = 0;
/// The newest minor version this mirror binds.
pub const XLA_FFI_API_MINOR: c_int = 5;
/// The oldest runtime this mirror works with: everything ferrax needs is there.
pub const XLA_FFI_API_MINOR_OLDEST: c_int = 3;

/// Opaque handles owned by XLA.
#[repr(C)]
pub struct XLA_FFI_Error {
    _private: [u8; 0],
}
/// `XLA_FFI_InvokeContext` before 0.4.
#[repr(C)]
pub struct XLA_FFI_InvokeContext {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XLA_FFI_Future {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XLA_FFI_InternalApi {
    _private: [u8; 0],
}

/// C enums are `int`-sized; they are kept as plain integers because XLA may send values this
/// binding does not know (a newer dtype or stage), and an out-of-range Rust enum would be UB.
pub type XLA_FFI_InternalExtension_Type = i32;
pub const XLA_FFI_Extension_Metadata: XLA_FFI_InternalExtension_Type = 1;

pub type XLA_FFI_Error_Code = i32;
pub type XLA_FFI_DataType = i32;
pub type XLA_FFI_ArgType = i32;
pub type XLA_FFI_RetType = i32;
pub type XLA_FFI_AttrType = i32;
pub type XLA_FFI_ExecutionStage = i32;
pub type XLA_FFI_Handler_Traits = u32;

pub const XLA_FFI_ArgType_BUFFER: XLA_FFI_ArgType = 1;
pub const XLA_FFI_RetType_BUFFER: XLA_FFI_RetType = 1;

pub const XLA_FFI_AttrType_ARRAY: XLA_FFI_AttrType = 1;
pub const XLA_FFI_AttrType_DICTIONARY: XLA_FFI_AttrType = 2;
pub const XLA_FFI_AttrType_SCALAR: XLA_FFI_AttrType = 3;
pub const XLA_FFI_AttrType_STRING: XLA_FFI_AttrType = 4;

pub const XLA_FFI_ExecutionStage_INSTANTIATE: XLA_FFI_ExecutionStage = 0;
pub const XLA_FFI_ExecutionStage_PREPARE: XLA_FFI_ExecutionStage = 1;
pub const XLA_FFI_ExecutionStage_INITIALIZE: XLA_FFI_ExecutionStage = 2;
pub const XLA_FFI_ExecutionStage_EXECUTE: XLA_FFI_ExecutionStage = 3;
/// Since 0.4: command-buffer (CUDA graph) recording.
pub const XLA_FFI_ExecutionStage_RECORD: XLA_FFI_ExecutionStage = 4;

pub const XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE: XLA_FFI_Handler_Traits = 1;

/// `XLA_FFI_Extension_Base` before 0.4.
#[repr(C)]
pub struct XLA_FFI_InternalExtension {
    pub struct_size: usize,
    pub type_: XLA_FFI_InternalExtension_Type,
    pub next: *mut XLA_FFI_InternalExtension,
}

#[repr(C)]
pub struct XLA_FFI_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub major_version: c_int,
    pub minor_version: c_int,
}

#[repr(C)]
pub struct XLA_FFI_Error_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub message: *const c_char,
    pub errc: XLA_FFI_Error_Code,
}

/// `XLA_FFI_Error_GetMessage_Args` before 0.4, which ended at `message`.
#[repr(C)]
pub struct XLA_FFI_Error_GetDetails_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub error: *mut XLA_FFI_Error,
    pub message: *const c_char,
    /// Since 0.4.
    pub errc: XLA_FFI_Error_Code,
}

#[repr(C)]
pub struct XLA_FFI_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub error: *mut XLA_FFI_Error,
}

#[repr(C)]
pub struct XLA_FFI_Buffer {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub dtype: XLA_FFI_DataType,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *mut i64,
}

#[repr(C)]
pub struct XLA_FFI_ByteSpan {
    pub ptr: *const c_char,
    pub len: usize,
}

#[repr(C)]
pub struct XLA_FFI_Scalar {
    pub dtype: XLA_FFI_DataType,
    pub value: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Array {
    pub dtype: XLA_FFI_DataType,
    pub size: usize,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_TypeId {
    pub type_id: i64,
}

#[repr(C)]
pub struct XLA_FFI_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub size: i64,
    pub types: *mut XLA_FFI_ArgType,
    pub args: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Rets {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub size: i64,
    pub types: *mut XLA_FFI_RetType,
    pub rets: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Attrs {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub size: i64,
    pub types: *mut XLA_FFI_AttrType,
    pub names: *mut *mut XLA_FFI_ByteSpan,
    pub attrs: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub api: *const XLA_FFI_Api,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub stage: XLA_FFI_ExecutionStage,
    pub args: XLA_FFI_Args,
    pub rets: XLA_FFI_Rets,
    pub attrs: XLA_FFI_Attrs,
    pub future: *mut XLA_FFI_Future,
}

pub type XLA_FFI_Handler = unsafe extern "C" fn(*mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error;

#[repr(C)]
pub struct XLA_FFI_Stream_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub stream: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_DeviceMemory_Allocate_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub size: usize,
    pub alignment: usize,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_DeviceMemory_Free_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub size: usize,
    pub data: *mut c_void,
}

pub type XLA_FFI_Task = unsafe extern "C" fn(*mut c_void);

#[repr(C)]
pub struct XLA_FFI_ThreadPool_Schedule_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub task: Option<XLA_FFI_Task>,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_ThreadPool_NumThreads_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub num_threads: *mut i64,
}

#[repr(C)]
pub struct XLA_FFI_RunId_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub run_id: i64,
}

#[repr(C)]
pub struct XLA_FFI_DeviceOrdinal_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub ctx: *mut XLA_FFI_InvokeContext,
    pub device_ordinal: i32,
}

#[repr(C)]
pub struct XLA_FFI_Metadata {
    pub struct_size: usize,
    pub api_version: XLA_FFI_Api_Version,
    pub traits: XLA_FFI_Handler_Traits,
    pub state_type_id: XLA_FFI_TypeId,
}

#[repr(C)]
pub struct XLA_FFI_Metadata_Extension {
    pub extension_base: XLA_FFI_InternalExtension,
    pub metadata: *mut XLA_FFI_Metadata,
}

type ApiFn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut XLA_FFI_Error>;
/// A slot of an API function ferrax does not call: only its place in the table matters.
pub type UnusedFn = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct XLA_FFI_Api {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_InternalExtension,
    pub api_version: XLA_FFI_Api_Version,
    pub internal_api: *const XLA_FFI_InternalApi,
    pub XLA_FFI_Error_Create: ApiFn<XLA_FFI_Error_Create_Args>,
    pub XLA_FFI_Error_GetDetails: Option<unsafe extern "C" fn(*mut XLA_FFI_Error_GetDetails_Args)>,
    pub XLA_FFI_Error_Destroy: Option<unsafe extern "C" fn(*mut XLA_FFI_Error_Destroy_Args)>,
    pub XLA_FFI_Handler_Register: UnusedFn,
    pub XLA_FFI_Stream_Get: ApiFn<XLA_FFI_Stream_Get_Args>,
    pub XLA_FFI_Type_Register: UnusedFn,
    pub XLA_FFI_InvokeContext_Get: UnusedFn,
    pub XLA_FFI_State_Set: UnusedFn,
    pub XLA_FFI_State_Get: UnusedFn,
    pub XLA_FFI_DeviceMemory_Allocate: ApiFn<XLA_FFI_DeviceMemory_Allocate_Args>,
    pub XLA_FFI_DeviceMemory_Free: ApiFn<XLA_FFI_DeviceMemory_Free_Args>,
    pub XLA_FFI_ThreadPool_Schedule: ApiFn<XLA_FFI_ThreadPool_Schedule_Args>,
    pub XLA_FFI_ThreadPool_NumThreads: ApiFn<XLA_FFI_ThreadPool_NumThreads_Args>,
    pub XLA_FFI_Future_Create: UnusedFn,
    pub XLA_FFI_Future_SetAvailable: UnusedFn,
    pub XLA_FFI_Future_SetError: UnusedFn,
    pub XLA_FFI_RunId_Get: ApiFn<XLA_FFI_RunId_Get_Args>,
    pub XLA_FFI_DeviceOrdinal_Get: ApiFn<XLA_FFI_DeviceOrdinal_Get_Args>,
    /// Since 0.4.
    pub XLA_FFI_InvokeContext_FindExtension: UnusedFn,
    /// Since 0.5.
    pub XLA_FFI_CustomOptions_Get: UnusedFn,
}

/// `XLA_FFI_DEFINE_STRUCT_TRAITS(S, last)`: `offsetof(S, last) + sizeof(last)`. Some structs have
/// fields after their declared last field, so this is not always `size_of::<S>()`.
macro_rules! struct_size {
    ($s:ty, $last:ident) => {
        std::mem::offset_of!($s, $last) + {
            const fn field_size<T>(_: fn(&$s) -> &T) -> usize {
                std::mem::size_of::<T>()
            }
            field_size(|s: &$s| &s.$last)
        }
    };
}

pub const XLA_FFI_InternalExtension_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_InternalExtension, next);
pub const XLA_FFI_Api_Version_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Api_Version, minor_version);
pub const XLA_FFI_Error_Create_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Error_Create_Args, errc);
pub const XLA_FFI_Error_Destroy_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Error_Destroy_Args, error);
pub const XLA_FFI_Error_GetDetails_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Error_GetDetails_Args, errc);
pub const XLA_FFI_Buffer_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Buffer, dims);
pub const XLA_FFI_Args_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Args, args);
pub const XLA_FFI_Rets_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Rets, rets);
pub const XLA_FFI_Attrs_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Attrs, attrs);
pub const XLA_FFI_CallFrame_STRUCT_SIZE: usize = struct_size!(XLA_FFI_CallFrame, attrs);
pub const XLA_FFI_Stream_Get_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Stream_Get_Args, stream);
pub const XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_DeviceMemory_Allocate_Args, data);
pub const XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_DeviceMemory_Free_Args, data);
pub const XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_ThreadPool_Schedule_Args, data);
pub const XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_ThreadPool_NumThreads_Args, num_threads);
pub const XLA_FFI_RunId_Get_Args_STRUCT_SIZE: usize = struct_size!(XLA_FFI_RunId_Get_Args, run_id);
pub const XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_DeviceOrdinal_Get_Args, device_ordinal);
pub const XLA_FFI_Metadata_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Metadata, traits);
pub const XLA_FFI_Metadata_Extension_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Metadata_Extension, metadata);
pub const XLA_FFI_Api_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Api, XLA_FFI_CustomOptions_Get);

/// The function in slot `$f` of the API table `$api`, or `None` when the runtime's table
/// ends before that slot (an older API version) or leaves it empty.
macro_rules! api_fn {
    ($api:expr, $f:ident) => {{
        let api: &$crate::ffi::sys::XLA_FFI_Api = $api;
        let end = ::std::mem::offset_of!($crate::ffi::sys::XLA_FFI_Api, $f)
            + ::std::mem::size_of_val(&api.$f);
        if api.struct_size >= end {
            api.$f
        } else {
            None
        }
    }};
}
pub(crate) use api_fn;

/// The API version a handler reports in the metadata handshake: the runtime's, within the
/// range this mirror supports. XLA accepts a handler whose version lies between its oldest
/// supported and its own, so a runtime newer than the mirror takes the newest the mirror
/// knows, one in the range its own, and one older than the range refuses the registration
/// with both versions named. Without an API table (older XLA sends none at registration), the
/// oldest version the mirror supports.
pub fn negotiated_version(api: Option<&XLA_FFI_Api>) -> (c_int, c_int) {
    let oldest = (XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR_OLDEST);
    let newest = (XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
    match api {
        Some(api) => {
            (api.api_version.major_version, api.api_version.minor_version).clamp(oldest, newest)
        }
        None => oldest,
    }
}
