//! `#[repr(C)]` mirror of `xla/ffi/api/c_api.h`, API version 0.3.
//!
//! API 0.4 (jaxlib 0.11) only appends to `XLA_FFI_Api`, renames `Error_GetMessage` (same slot)
//! and adds an execution stage, so binding the 0.3 layout is correct on both. The layout is
//! checked field by field against the installed jaxlib header by `tests/c_layout.rs`.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_void};

pub const XLA_FFI_API_MAJOR: c_int = 0;
pub const XLA_FFI_API_MINOR: c_int = 3;

/// Opaque handles owned by XLA.
#[repr(C)]
pub struct XLA_FFI_Error {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XLA_FFI_ExecutionContext {
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
pub type XLA_FFI_Extension_Type = i32;
pub const XLA_FFI_Extension_Metadata: XLA_FFI_Extension_Type = 1;

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

pub const XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE: XLA_FFI_Handler_Traits = 1;

#[repr(C)]
pub struct XLA_FFI_Extension_Base {
    pub struct_size: usize,
    pub type_: XLA_FFI_Extension_Type,
    pub next: *mut XLA_FFI_Extension_Base,
}

#[repr(C)]
pub struct XLA_FFI_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

#[repr(C)]
pub struct XLA_FFI_Error_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub message: *const c_char,
    pub errc: XLA_FFI_Error_Code,
}

#[repr(C)]
pub struct XLA_FFI_Error_GetMessage_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub error: *mut XLA_FFI_Error,
    pub message: *const c_char,
}

#[repr(C)]
pub struct XLA_FFI_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub error: *mut XLA_FFI_Error,
}

#[repr(C)]
pub struct XLA_FFI_Buffer {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
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
pub struct XLA_FFI_TypeInfo {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub deleter: Option<unsafe extern "C" fn(*mut c_void)>,
}

#[repr(C)]
pub struct XLA_FFI_Future_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub future: *mut XLA_FFI_Future,
}

#[repr(C)]
pub struct XLA_FFI_Future_SetAvailable_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub future: *mut XLA_FFI_Future,
}

#[repr(C)]
pub struct XLA_FFI_Future_SetError_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub future: *mut XLA_FFI_Future,
    pub error: *mut XLA_FFI_Error,
}

#[repr(C)]
pub struct XLA_FFI_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub size: i64,
    pub types: *mut XLA_FFI_ArgType,
    pub args: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Rets {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub size: i64,
    pub types: *mut XLA_FFI_RetType,
    pub rets: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Attrs {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub size: i64,
    pub types: *mut XLA_FFI_AttrType,
    pub names: *mut *mut XLA_FFI_ByteSpan,
    pub attrs: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub api: *const XLA_FFI_Api,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub stage: XLA_FFI_ExecutionStage,
    pub args: XLA_FFI_Args,
    pub rets: XLA_FFI_Rets,
    pub attrs: XLA_FFI_Attrs,
    pub future: *mut XLA_FFI_Future,
}

pub type XLA_FFI_Handler = unsafe extern "C" fn(*mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error;

#[repr(C)]
pub struct XLA_FFI_Handler_Bundle {
    pub instantiate: Option<XLA_FFI_Handler>,
    pub prepare: Option<XLA_FFI_Handler>,
    pub initialize: Option<XLA_FFI_Handler>,
    pub execute: Option<XLA_FFI_Handler>,
}

#[repr(C)]
pub struct XLA_FFI_Handler_Register_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub name: XLA_FFI_ByteSpan,
    pub platform: XLA_FFI_ByteSpan,
    pub bundle: XLA_FFI_Handler_Bundle,
    pub traits: XLA_FFI_Handler_Traits,
}

#[repr(C)]
pub struct XLA_FFI_Type_Register_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub name: XLA_FFI_ByteSpan,
    pub type_id: *mut XLA_FFI_TypeId,
    pub type_info: *const XLA_FFI_TypeInfo,
}

#[repr(C)]
pub struct XLA_FFI_ExecutionContext_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub type_id: *mut XLA_FFI_TypeId,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_State_Set_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub stage: XLA_FFI_ExecutionStage,
    pub type_id: *mut XLA_FFI_TypeId,
    pub state: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_State_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub stage: XLA_FFI_ExecutionStage,
    pub type_id: *mut XLA_FFI_TypeId,
    pub state: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Stream_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub stream: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_DeviceMemory_Allocate_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub size: usize,
    pub alignment: usize,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_DeviceMemory_Free_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub size: usize,
    pub data: *mut c_void,
}

pub type XLA_FFI_Task = unsafe extern "C" fn(*mut c_void);

#[repr(C)]
pub struct XLA_FFI_ThreadPool_Schedule_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub task: Option<XLA_FFI_Task>,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_ThreadPool_NumThreads_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub num_threads: *mut i64,
}

#[repr(C)]
pub struct XLA_FFI_RunId_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub run_id: i64,
}

#[repr(C)]
pub struct XLA_FFI_DeviceOrdinal_Get_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
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
    pub extension_base: XLA_FFI_Extension_Base,
    pub metadata: *mut XLA_FFI_Metadata,
}

type ApiFn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut XLA_FFI_Error>;

#[repr(C)]
pub struct XLA_FFI_Api {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub api_version: XLA_FFI_Api_Version,
    pub internal_api: *const XLA_FFI_InternalApi,
    pub XLA_FFI_Error_Create: ApiFn<XLA_FFI_Error_Create_Args>,
    pub XLA_FFI_Error_GetMessage: Option<unsafe extern "C" fn(*mut XLA_FFI_Error_GetMessage_Args)>,
    pub XLA_FFI_Error_Destroy: Option<unsafe extern "C" fn(*mut XLA_FFI_Error_Destroy_Args)>,
    pub XLA_FFI_Handler_Register: ApiFn<XLA_FFI_Handler_Register_Args>,
    pub XLA_FFI_Stream_Get: ApiFn<XLA_FFI_Stream_Get_Args>,
    pub XLA_FFI_Type_Register: ApiFn<XLA_FFI_Type_Register_Args>,
    pub XLA_FFI_ExecutionContext_Get: ApiFn<XLA_FFI_ExecutionContext_Get_Args>,
    pub XLA_FFI_State_Set: ApiFn<XLA_FFI_State_Set_Args>,
    pub XLA_FFI_State_Get: ApiFn<XLA_FFI_State_Get_Args>,
    pub XLA_FFI_DeviceMemory_Allocate: ApiFn<XLA_FFI_DeviceMemory_Allocate_Args>,
    pub XLA_FFI_DeviceMemory_Free: ApiFn<XLA_FFI_DeviceMemory_Free_Args>,
    pub XLA_FFI_ThreadPool_Schedule: ApiFn<XLA_FFI_ThreadPool_Schedule_Args>,
    pub XLA_FFI_ThreadPool_NumThreads: ApiFn<XLA_FFI_ThreadPool_NumThreads_Args>,
    pub XLA_FFI_Future_Create: ApiFn<XLA_FFI_Future_Create_Args>,
    pub XLA_FFI_Future_SetAvailable: ApiFn<XLA_FFI_Future_SetAvailable_Args>,
    pub XLA_FFI_Future_SetError: ApiFn<XLA_FFI_Future_SetError_Args>,
    pub XLA_FFI_RunId_Get: ApiFn<XLA_FFI_RunId_Get_Args>,
    pub XLA_FFI_DeviceOrdinal_Get: ApiFn<XLA_FFI_DeviceOrdinal_Get_Args>,
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

pub const XLA_FFI_Extension_Base_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Extension_Base, next);
pub const XLA_FFI_Api_Version_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Api_Version, minor_version);
pub const XLA_FFI_Error_Create_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Error_Create_Args, errc);
pub const XLA_FFI_Error_Destroy_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Error_Destroy_Args, error);
pub const XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE: usize =
    struct_size!(XLA_FFI_Error_GetMessage_Args, message);
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
pub const XLA_FFI_Api_STRUCT_SIZE: usize = struct_size!(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get);
