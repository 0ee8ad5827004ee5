//! A minimal XLA FFI host, so that the C ABI runs the very handlers XLA runs: it builds a call
//! frame for plain pointers and serves the API functions the CPU handlers use (errors and a
//! thread pool). Nothing here needs XLA or Python.

use crate::ffi::sys::*;
use crate::ffi::DataType;
use std::ffi::{c_void, CStr, CString};
use std::ptr;

/// One operand or result: element type, logical dims and (column-major) data.
pub(crate) struct BufferArg {
    pub dtype: DataType,
    pub dims: Vec<i64>,
    pub data: *mut c_void,
}

/// An attribute value the C ABI passes (jaxlib's attribute types).
#[derive(Clone, Copy)]
pub(crate) enum AttrValue {
    U8(u8),
    Bool(bool),
}

/// Runs `handler` on the given operands, results and attributes; returns XLA's error message.
pub(crate) fn call(
    handler: XLA_FFI_Handler,
    args: &[BufferArg],
    rets: &[BufferArg],
    attrs: &[(&str, AttrValue)],
) -> Result<(), String> {
    let mut arg_buffers: Vec<XLA_FFI_Buffer> = args.iter().map(raw_buffer).collect();
    let mut ret_buffers: Vec<XLA_FFI_Buffer> = rets.iter().map(raw_buffer).collect();
    let mut arg_types = vec![XLA_FFI_ArgType_BUFFER; args.len()];
    let mut ret_types = vec![XLA_FFI_RetType_BUFFER; rets.len()];
    let mut arg_ptrs: Vec<*mut c_void> = arg_buffers
        .iter_mut()
        .map(|b| b as *mut XLA_FFI_Buffer as *mut c_void)
        .collect();
    let mut ret_ptrs: Vec<*mut c_void> = ret_buffers
        .iter_mut()
        .map(|b| b as *mut XLA_FFI_Buffer as *mut c_void)
        .collect();

    // XLA sends attributes sorted by name.
    let mut attrs = attrs.to_vec();
    attrs.sort_by_key(|(name, _)| *name);
    let mut names: Vec<XLA_FFI_ByteSpan> = attrs
        .iter()
        .map(|(name, _)| XLA_FFI_ByteSpan {
            ptr: name.as_ptr().cast(),
            len: name.len(),
        })
        .collect();
    let mut values: Vec<(i32, [u8; 4])> = attrs.iter().map(|(_, v)| scalar_bytes(*v)).collect();
    let mut scalars: Vec<XLA_FFI_Scalar> = values
        .iter_mut()
        .map(|(dtype, bytes)| XLA_FFI_Scalar {
            dtype: *dtype,
            value: bytes.as_mut_ptr().cast(),
        })
        .collect();
    let mut attr_types = vec![XLA_FFI_AttrType_SCALAR; attrs.len()];
    let mut name_ptrs: Vec<*mut XLA_FFI_ByteSpan> = names.iter_mut().map(|n| n as *mut _).collect();
    let mut attr_ptrs: Vec<*mut c_void> = scalars
        .iter_mut()
        .map(|s| s as *mut XLA_FFI_Scalar as *mut c_void)
        .collect();

    let mut frame = XLA_FFI_CallFrame {
        struct_size: XLA_FFI_CallFrame_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        api: &API.0,
        // The handlers only pass ctx back to the API functions, which ignore it.
        ctx: ptr::NonNull::dangling().as_ptr(),
        stage: XLA_FFI_ExecutionStage_EXECUTE,
        args: XLA_FFI_Args {
            struct_size: XLA_FFI_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            size: args.len() as i64,
            types: arg_types.as_mut_ptr(),
            args: arg_ptrs.as_mut_ptr(),
        },
        rets: XLA_FFI_Rets {
            struct_size: XLA_FFI_Rets_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            size: rets.len() as i64,
            types: ret_types.as_mut_ptr(),
            rets: ret_ptrs.as_mut_ptr(),
        },
        attrs: XLA_FFI_Attrs {
            struct_size: XLA_FFI_Attrs_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            size: attrs.len() as i64,
            types: attr_types.as_mut_ptr(),
            names: name_ptrs.as_mut_ptr(),
            attrs: attr_ptrs.as_mut_ptr(),
        },
        future: ptr::null_mut(),
    };
    // SAFETY: every pointer in the frame outlives the call.
    let error = unsafe { handler(&mut frame) };
    if error.is_null() {
        Ok(())
    } else {
        // SAFETY: errors come from `create_error` below.
        Err(unsafe { Box::from_raw(error as *mut CString) }
            .to_string_lossy()
            .into_owned())
    }
}

fn raw_buffer(buffer: &BufferArg) -> XLA_FFI_Buffer {
    XLA_FFI_Buffer {
        struct_size: XLA_FFI_Buffer_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        dtype: buffer.dtype.to_raw(),
        data: buffer.data,
        rank: buffer.dims.len() as i64,
        dims: buffer.dims.as_ptr() as *mut i64,
    }
}

fn scalar_bytes(value: AttrValue) -> (i32, [u8; 4]) {
    match value {
        AttrValue::U8(v) => (DataType::U8.to_raw(), [v, 0, 0, 0]),
        AttrValue::Bool(v) => (DataType::Pred.to_raw(), [v as u8, 0, 0, 0]),
    }
}

// An error is a boxed CString holding the message.
unsafe extern "C" fn create_error(args: *mut XLA_FFI_Error_Create_Args) -> *mut XLA_FFI_Error {
    let message = CStr::from_ptr((*args).message).to_owned();
    Box::into_raw(Box::new(message)) as *mut XLA_FFI_Error
}

unsafe extern "C" fn error_message(args: *mut XLA_FFI_Error_GetMessage_Args) {
    (*args).message = (*((*args).error as *const CString)).as_ptr();
}

unsafe extern "C" fn destroy_error(args: *mut XLA_FFI_Error_Destroy_Args) {
    drop(Box::from_raw((*args).error as *mut CString));
}

unsafe extern "C" fn schedule(args: *mut XLA_FFI_ThreadPool_Schedule_Args) -> *mut XLA_FFI_Error {
    use crate::linalg::parallel::Pool;
    match (*args).task {
        Some(task) if super::pool::workers().schedule(task, (*args).data) => ptr::null_mut(),
        _ => no_pool(),
    }
}

unsafe extern "C" fn num_threads(
    args: *mut XLA_FFI_ThreadPool_NumThreads_Args,
) -> *mut XLA_FFI_Error {
    use crate::linalg::parallel::Pool;
    *(*args).num_threads = super::pool::workers().threads() as i64;
    ptr::null_mut()
}

/// The answer XLA gives when it has no pool: the handler then does the work itself.
fn no_pool() -> *mut XLA_FFI_Error {
    Box::into_raw(Box::new(c"no thread pool".to_owned())) as *mut XLA_FFI_Error
}

/// The API table; its only pointers are null or static.
struct Api(XLA_FFI_Api);
unsafe impl Sync for Api {}

static API: Api = Api(XLA_FFI_Api {
    struct_size: XLA_FFI_Api_STRUCT_SIZE,
    extension_start: ptr::null_mut(),
    api_version: XLA_FFI_Api_Version {
        struct_size: XLA_FFI_Api_Version_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        major_version: XLA_FFI_API_MAJOR,
        minor_version: XLA_FFI_API_MINOR,
    },
    internal_api: ptr::null(),
    XLA_FFI_Error_Create: Some(create_error),
    XLA_FFI_Error_GetMessage: Some(error_message),
    XLA_FFI_Error_Destroy: Some(destroy_error),
    XLA_FFI_Handler_Register: None,
    XLA_FFI_Stream_Get: None,
    XLA_FFI_Type_Register: None,
    XLA_FFI_ExecutionContext_Get: None,
    XLA_FFI_State_Set: None,
    XLA_FFI_State_Get: None,
    XLA_FFI_DeviceMemory_Allocate: None,
    XLA_FFI_DeviceMemory_Free: None,
    XLA_FFI_ThreadPool_Schedule: Some(schedule),
    XLA_FFI_ThreadPool_NumThreads: Some(num_threads),
    XLA_FFI_Future_Create: None,
    XLA_FFI_Future_SetAvailable: None,
    XLA_FFI_Future_SetError: None,
    XLA_FFI_RunId_Get: None,
    XLA_FFI_DeviceOrdinal_Get: None,
});
