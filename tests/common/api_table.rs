//! The XLA FFI API table of the newest version ferrax binds, every function slot empty: the
//! fake runtimes of the test crates fill in the functions they serve
//! (`XLA_FFI_Api { XLA_FFI_Stream_Get: Some(..), ..newest_api_table() }`), so that a slot the
//! API adds is written here once.

use ferrax::ffi::sys::*;
use std::ptr;

pub fn newest_api_table() -> XLA_FFI_Api {
    XLA_FFI_Api {
        struct_size: XLA_FFI_Api_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        api_version: XLA_FFI_Api_Version {
            struct_size: XLA_FFI_Api_Version_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            major_version: XLA_FFI_API_MAJOR,
            minor_version: XLA_FFI_API_MINOR,
        },
        internal_api: ptr::null(),
        XLA_FFI_Error_Create: None,
        XLA_FFI_Error_GetDetails: None,
        XLA_FFI_Error_Destroy: None,
        XLA_FFI_Handler_Register: None,
        XLA_FFI_Stream_Get: None,
        XLA_FFI_Type_Register: None,
        XLA_FFI_InvokeContext_Get: None,
        XLA_FFI_State_Set: None,
        XLA_FFI_State_Get: None,
        XLA_FFI_DeviceMemory_Allocate: None,
        XLA_FFI_DeviceMemory_Free: None,
        XLA_FFI_ThreadPool_Schedule: None,
        XLA_FFI_ThreadPool_NumThreads: None,
        XLA_FFI_Future_Create: None,
        XLA_FFI_Future_SetAvailable: None,
        XLA_FFI_Future_SetError: None,
        XLA_FFI_RunId_Get: None,
        XLA_FFI_DeviceOrdinal_Get: None,
        XLA_FFI_InvokeContext_FindExtension: None,
        XLA_FFI_CustomOptions_Get: None,
    }
}
