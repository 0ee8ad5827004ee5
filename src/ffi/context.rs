//! Services of the execution context: stage, stream, device ordinal, run id, device scratch
//! memory, and the CPU thread pool.

use super::error::{Error, Result};
use super::handler::CallFrame;
use super::sys::*;
use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

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
        call.api_call("stream", call.api().XLA_FFI_Stream_Get, &mut args)?;
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
            call.api().XLA_FFI_DeviceOrdinal_Get,
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
        call.api_call("run id", call.api().XLA_FFI_RunId_Get, &mut args)?;
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
            self.call.api().XLA_FFI_DeviceMemory_Allocate,
            &mut args,
        )?;
        if args.data.is_null() && size > 0 {
            return Err(Error::new(
                super::ErrorCode::ResourceExhausted,
                format!("XLA returned no memory for {size} bytes of scratch"),
            ));
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
                self.call.api().XLA_FFI_DeviceMemory_Free,
                &mut args,
            );
        }
    }
}

/// XLA's intra-op thread pool (CPU). Tasks may run inline or on a pool of one thread, so
/// `parallel_for` never depends on parallel progress: the calling thread works too.
#[derive(Clone, Copy)]
pub struct ThreadPool<'a> {
    call: CallFrame<'a>,
}

impl<'a> FromContext<'a> for ThreadPool<'a> {
    fn from_context(call: &CallFrame<'a>) -> Result<Self> {
        Ok(ThreadPool { call: *call })
    }
}

struct ParallelState {
    next: AtomicUsize,
    done: Mutex<usize>,
    all_done: Condvar,
    first_error: Mutex<Option<Error>>,
    tasks: usize,
    // Points to the caller's closure; only dereferenced while a task index < `tasks` is held,
    // and the caller does not return before every such index is finished.
    body: *const (dyn Fn(usize) -> Result<()> + Sync),
}

unsafe impl Send for ParallelState {}
unsafe impl Sync for ParallelState {}

impl ParallelState {
    /// Claims and runs task indices until none are left.
    fn drain(&self) {
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= self.tasks {
                return;
            }
            // SAFETY: see `body`.
            let body = unsafe { &*self.body };
            let outcome = catch_unwind(AssertUnwindSafe(|| body(index)))
                .unwrap_or_else(|panic| Err(super::handler::panic_error(panic)));
            if let Err(error) = outcome {
                self.first_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(error);
            }
            let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
            *done += 1;
            if *done == self.tasks {
                self.all_done.notify_all();
            }
        }
    }
}

unsafe extern "C" fn run_pool_task(data: *mut c_void) {
    // SAFETY: `data` is the `Arc` leaked by `parallel_for` for this task.
    let state = unsafe { Arc::from_raw(data as *const ParallelState) };
    state.drain();
}

/// How many chunks [`ThreadPool::parallel_chunks`] makes per thread, at most.
const CHUNKS_PER_THREAD: usize = 4;

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
            self.call.api().XLA_FFI_ThreadPool_NumThreads,
            &mut args,
        ) {
            Ok(()) if n > 0 => n as usize,
            _ => 1,
        }
    }

    /// Runs `body(0..tasks)` on the pool and the calling thread; returns the first error (or
    /// panic, as an internal error) once every task has finished.
    pub fn parallel_for(
        &self,
        tasks: usize,
        body: &(dyn Fn(usize) -> Result<()> + Sync),
    ) -> Result<()> {
        if tasks == 0 {
            return Ok(());
        }
        // The calling thread works too, so one helper fewer than the pool's threads keeps as
        // many threads busy as the pool is sized for; one helper per thread oversubscribed
        // the cores (2 cores, batched Cholesky: p90 of the call time 1.4 -> 0.9 ms).
        let helpers = (self.num_threads() - 1).min(tasks - 1);
        if helpers == 0 {
            return (0..tasks).try_for_each(body);
        }
        // SAFETY: erases the closure's lifetime; `ParallelState::body` explains why that holds.
        let body: *const (dyn Fn(usize) -> Result<()> + Sync + 'static) =
            unsafe { std::mem::transmute(body as *const (dyn Fn(usize) -> Result<()> + Sync)) };
        let state = Arc::new(ParallelState {
            next: AtomicUsize::new(0),
            done: Mutex::new(0),
            all_done: Condvar::new(),
            first_error: Mutex::new(None),
            tasks,
            body,
        });
        for _ in 0..helpers {
            let data = Arc::into_raw(state.clone()) as *mut c_void;
            let mut args = XLA_FFI_ThreadPool_Schedule_Args {
                struct_size: XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE,
                extension_start: ptr::null_mut(),
                ctx: self.call.raw_ctx(),
                task: Some(run_pool_task),
                data,
            };
            if self
                .call
                .api_call(
                    "thread pool schedule",
                    self.call.api().XLA_FFI_ThreadPool_Schedule,
                    &mut args,
                )
                .is_err()
            {
                // No pool: reclaim the reference and let the calling thread do the work.
                // SAFETY: the task was not scheduled, so this reference is still ours.
                drop(unsafe { Arc::from_raw(data as *const ParallelState) });
                break;
            }
        }
        state.drain();
        let mut done = state.done.lock().unwrap_or_else(|e| e.into_inner());
        while *done < tasks {
            done = state.all_done.wait(done).unwrap_or_else(|e| e.into_inner());
        }
        drop(done);
        let error = state
            .first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        error.map_or(Ok(()), Err)
    }

    /// Splits `0..items` into chunks of at least `min_chunk` and runs `body(range)` per chunk.
    pub fn parallel_chunks(
        &self,
        items: usize,
        min_chunk: usize,
        body: &(dyn Fn(std::ops::Range<usize>) -> Result<()> + Sync),
    ) -> Result<()> {
        if items == 0 {
            return Ok(());
        }
        // Several chunks per thread: a helper that starts late (a busy or descheduled core)
        // then takes fewer of them, where with one chunk per thread the caller would wait for
        // it, or do its chunk too.
        let threads = self.num_threads();
        let chunk = items
            .div_ceil(threads * CHUNKS_PER_THREAD)
            .max(min_chunk.max(1));
        let tasks = items.div_ceil(chunk);
        if tasks == 1 {
            return body(0..items);
        }
        self.parallel_for(tasks, &|t| body(t * chunk..((t + 1) * chunk).min(items)))
    }
}
