//! Services of the execution context: stage, stream, device ordinal, run id, device scratch
//! memory, the CPU thread pool, and all of a call's buffers for targets that take any number.

use super::buffer::Buffer;
use super::handler::CallFrame;
use super::sys::api_fn;
use super::sys::*;
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr;

/// Values a handler function can ask for by type, besides buffers and attributes.
pub trait FromContext<'a>: Sized {
    fn from_context(call: &CallFrame<'a>) -> Result<Self>;
}

/// `XLA_FFI_ExecutionStage`, as the raw value (0.4 added RECORD = 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage(pub i32);

impl FromContext<'_> for Stage {
    fn from_context(call: &CallFrame<'_>) -> Result<Self> {
        Ok(Stage(call.raw_stage()))
    }
}

/// The platform stream (`cudaStream_t` on CUDA).
#[derive(Clone, Copy, Debug)]
pub struct Stream(pub *mut c_void);

impl FromContext<'_> for Stream {
    fn from_context(call: &CallFrame<'_>) -> Result<Self> {
        let mut args = XLA_FFI_Stream_Get_Args {
            struct_size: XLA_FFI_Stream_Get_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            ctx: call.raw_ctx(),
            stream: ptr::null_mut(),
        };
        call.api_call("stream", api_fn!(call.api(), XLA_FFI_Stream_Get), &mut args)?;
        Ok(Stream(args.stream))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOrdinal(pub i32);

impl FromContext<'_> for DeviceOrdinal {
    fn from_context(call: &CallFrame<'_>) -> Result<Self> {
        let mut args = XLA_FFI_DeviceOrdinal_Get_Args {
            struct_size: XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            ctx: call.raw_ctx(),
            device_ordinal: 0,
        };
        call.api_call(
            "device ordinal",
            api_fn!(call.api(), XLA_FFI_DeviceOrdinal_Get),
            &mut args,
        )?;
        Ok(DeviceOrdinal(args.device_ordinal))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunId(pub i64);

impl FromContext<'_> for RunId {
    fn from_context(call: &CallFrame<'_>) -> Result<Self> {
        let mut args = XLA_FFI_RunId_Get_Args {
            struct_size: XLA_FFI_RunId_Get_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            ctx: call.raw_ctx(),
            run_id: 0,
        };
        call.api_call("run id", api_fn!(call.api(), XLA_FFI_RunId_Get), &mut args)?;
        Ok(RunId(args.run_id))
    }
}

/// Device memory from XLA's allocator, all of it freed when the allocator is dropped (the
/// handler returns). On GPU, frees are stream-ordered, so kernels enqueued before see valid
/// memory. XLA's CPU runtime has no device allocator and answers with an error.
pub struct ScratchAllocator<'a> {
    call: CallFrame<'a>,
    live: RefCell<Vec<(*mut c_void, usize)>>,
}

impl<'a> FromContext<'a> for ScratchAllocator<'a> {
    fn from_context(call: &CallFrame<'a>) -> Result<Self> {
        Ok(ScratchAllocator {
            call: *call,
            live: RefCell::new(Vec::new()),
        })
    }
}

impl ScratchAllocator<'_> {
    /// `alignment` must be a power of two no larger than 16 (XLA's limit).
    pub fn allocate(&self, size: usize, alignment: usize) -> Result<*mut c_void> {
        if !alignment.is_power_of_two() || alignment > 16 {
            return Err(Error::internal(format!(
                "scratch alignment {alignment} is not a power of two <= 16"
            )));
        }
        let mut args = XLA_FFI_DeviceMemory_Allocate_Args {
            struct_size: XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            ctx: self.call.raw_ctx(),
            size,
            alignment,
            data: ptr::null_mut(),
        };
        self.call.api_call(
            "device memory allocation",
            api_fn!(self.call.api(), XLA_FFI_DeviceMemory_Allocate),
            &mut args,
        )?;
        if args.data.is_null() && size > 0 {
            return Err(Error::resource_exhausted(format!(
                "XLA returned no memory for {size} bytes of scratch"
            )));
        }
        self.live.borrow_mut().push((args.data, size));
        Ok(args.data)
    }
}

impl Drop for ScratchAllocator<'_> {
    fn drop(&mut self) {
        for (data, size) in self.live.take() {
            let mut args = XLA_FFI_DeviceMemory_Free_Args {
                struct_size: XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE,
                extension_start: ptr::null_mut(),
                ctx: self.call.raw_ctx(),
                size,
                data,
            };
            // A failed free cannot be reported from a destructor; XLA reclaims the memory with
            // the execution's allocations.
            let _ = self.call.api_call(
                "device memory free",
                api_fn!(self.call.api(), XLA_FFI_DeviceMemory_Free),
                &mut args,
            );
        }
    }
}

/// XLA's intra-op thread pool (CPU), which the cores split their batches over
/// ([`crate::linalg::parallel`]).
#[derive(Clone, Copy)]
pub struct ThreadPool<'a> {
    call: CallFrame<'a>,
}

impl<'a> FromContext<'a> for ThreadPool<'a> {
    fn from_context(call: &CallFrame<'a>) -> Result<Self> {
        Ok(ThreadPool { call: *call })
    }
}

impl ThreadPool<'_> {
    /// Threads in XLA's pool, or 1 when the runtime has none.
    pub fn num_threads(&self) -> usize {
        let mut n: i64 = 0;
        let mut args = XLA_FFI_ThreadPool_NumThreads_Args {
            struct_size: XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            ctx: self.call.raw_ctx(),
            num_threads: &mut n,
        };
        match self.call.api_call(
            "thread pool size",
            api_fn!(self.call.api(), XLA_FFI_ThreadPool_NumThreads),
            &mut args,
        ) {
            Ok(()) if n > 0 => n as usize,
            _ => 1,
        }
    }
}

impl crate::linalg::parallel::Pool for ThreadPool<'_> {
    fn threads(&self) -> usize {
        self.num_threads()
    }

    fn schedule(&self, task: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> bool {
        let mut args = XLA_FFI_ThreadPool_Schedule_Args {
            struct_size: XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            ctx: self.call.raw_ctx(),
            task: Some(task),
            data,
        };
        self.call
            .api_call(
                "thread pool schedule",
                api_fn!(self.call.api(), XLA_FFI_ThreadPool_Schedule),
                &mut args,
            )
            .is_ok()
    }
}

/// Every operand and result of the call, in order: what a target that takes any number of them
/// (`remaining = true`, as a compiled-kernel call) receives.
pub struct Buffers<'a> {
    pub args: Vec<Buffer<'a>>,
    pub rets: Vec<Buffer<'a>>,
}

impl<'a> FromContext<'a> for Buffers<'a> {
    fn from_context(call: &CallFrame<'a>) -> Result<Self> {
        Ok(Buffers {
            args: (0..call.arg_count())
                .map(|i| call.arg(i))
                .collect::<Result<_>>()?,
            rets: (0..call.ret_count())
                .map(|i| call.ret(i))
                .collect::<Result<_>>()?,
        })
    }
}
