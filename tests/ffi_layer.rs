//! The FFI layer (`ferrax::ffi`) exercised without XLA: the test builds `XLA_FFI_CallFrame`s
//! itself and serves them a fake `XLA_FFI_Api` whose execution context (the `ctx` pointer) is a
//! [`FakeCtx`]: an allocator that records every live block, and a thread pool that is absent,
//! runs tasks inline, or is a real pool of N threads.
//!
//! Covered: the metadata handshake, decoding of context values, buffers and every attribute
//! kind, the errors decoding produces, panics (in the handler and in pool tasks), scratch
//! memory, frame checks (stage, struct size), `parallel_for`/`parallel_chunks`, and the real
//! CPU handlers of `ferrax::ops` (threefry, pivots to permutation, getrf without LAPACK).

#[path = "common/api_table.rs"]
mod api_table;
#[path = "common/reserved.rs"]
mod reserved;
#[path = "common/rng.rs"]
mod rng;

use api_table::newest_api_table;
use ferrax::ffi::sys::*;
use ferrax::ffi::{
    Attrs, Buffer, DataType, DeviceOrdinal, Error, MatrixBatch, NativeType, Result, RunId,
    ScratchAllocator, Span, Stage, Stream, ThreadPool,
};
use rng::Rng;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once};
use std::thread::JoinHandle;

// absl status codes the layer produces.
const INVALID_ARGUMENT: i32 = 3;
const RESOURCE_EXHAUSTED: i32 = 8;
const FAILED_PRECONDITION: i32 = 9;
const INTERNAL: i32 = 13;

/// What the fake `Stream_Get`, `DeviceOrdinal_Get` and `RunId_Get` answer.
const STREAM_SENTINEL: usize = 0x5EA_F00D;
const DEVICE_ORDINAL: i32 = 3;
const RUN_ID: i64 = 0x1234_5678_9ABC;

/// Panic messages containing this marker are expected by a test and not printed.
const EXPECTED_PANIC: &str = "[expected panic]";

// ---------------------------------------------------------------------------------------------
// Fake XLA errors
// ---------------------------------------------------------------------------------------------

/// The object behind a fake `XLA_FFI_Error*`.
struct FakeError {
    code: i32,
    message: CString,
}

thread_local! {
    /// Fake errors created and not yet destroyed on this thread (each test runs on its own
    /// thread, and every API function is called from the handler's calling thread).
    static LIVE_ERRORS: Cell<isize> = const { Cell::new(0) };
}

/// An error as the handler returned it, read back from the fake error object.
#[derive(Debug, Clone, PartialEq)]
struct FfiError {
    code: i32,
    message: String,
}

fn new_error(code: i32, message: &str) -> *mut XLA_FFI_Error {
    LIVE_ERRORS.with(|n| n.set(n.get() + 1));
    let message = CString::new(message).unwrap_or_default();
    Box::into_raw(Box::new(FakeError { code, message })).cast()
}

/// Reads back and frees an error returned by a handler (null: success).
unsafe fn take_error(error: *mut XLA_FFI_Error) -> std::result::Result<(), FfiError> {
    if error.is_null() {
        return Ok(());
    }
    LIVE_ERRORS.with(|n| n.set(n.get() - 1));
    let error = Box::from_raw(error.cast::<FakeError>());
    Err(FfiError {
        code: error.code,
        message: error.message.to_string_lossy().into_owned(),
    })
}

unsafe extern "C" fn error_create(args: *mut XLA_FFI_Error_Create_Args) -> *mut XLA_FFI_Error {
    let args = &*args;
    new_error(args.errc, &CStr::from_ptr(args.message).to_string_lossy())
}

/// `Error_GetDetails` of API 0.4 and later: message and code, the code only into a struct
/// large enough for it.
unsafe extern "C" fn error_get_details(args: *mut XLA_FFI_Error_GetDetails_Args) {
    let error = &*(*args).error.cast::<FakeError>();
    (*args).message = error.message.as_ptr();
    if (*args).struct_size >= XLA_FFI_Error_GetDetails_Args_STRUCT_SIZE {
        (*args).errc = error.code;
    }
}

/// `Error_GetMessage` of API 0.3, in the same slot: the message only.
unsafe extern "C" fn error_get_message_v03(args: *mut XLA_FFI_Error_GetDetails_Args) {
    (*args).message = (*(*args).error.cast::<FakeError>()).message.as_ptr();
}

unsafe extern "C" fn error_destroy(args: *mut XLA_FFI_Error_Destroy_Args) {
    let _ = take_error((*args).error);
}

// ---------------------------------------------------------------------------------------------
// Fake execution context: allocator bookkeeping and thread pool modes
// ---------------------------------------------------------------------------------------------

/// How the fake runtime answers `ThreadPool_NumThreads` / `ThreadPool_Schedule`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PoolMode {
    /// No intra-op pool: both functions return an error.
    NoPool,
    /// Claims 4 threads but runs each task inside `Schedule`.
    Inline,
    /// A real pool of this many std threads.
    Threads(usize),
}

const ALL_POOL_MODES: [PoolMode; 4] = [
    PoolMode::NoPool,
    PoolMode::Inline,
    PoolMode::Threads(4),
    PoolMode::Threads(1),
];
const INLINE_CLAIMED_THREADS: i64 = 4;

/// A task sent to a pool thread.
struct Job {
    task: XLA_FFI_Task,
    data: *mut c_void,
}
// SAFETY: XLA's contract: scheduled tasks run on any pool thread.
unsafe impl Send for Job {}

/// A real thread pool; dropping it runs the queued tasks and joins the threads.
struct Workers {
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    fn new(count: usize) -> Self {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let threads = (0..count)
            .map(|_| {
                let receiver = receiver.clone();
                std::thread::spawn(move || loop {
                    let job = receiver.lock().unwrap().recv();
                    match job {
                        // SAFETY: the task and its data come from `ThreadPool_Schedule`.
                        Ok(job) => unsafe { (job.task)(job.data) },
                        Err(_) => return,
                    }
                })
            })
            .collect();
        Workers {
            sender: Mutex::new(Some(sender)),
            threads,
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.sender.lock().unwrap().take();
        for thread in self.threads.drain(..) {
            thread.join().expect("pool thread panicked");
        }
    }
}

/// What the `ctx` pointer of every fake frame points to.
struct FakeCtx {
    mode: PoolMode,
    workers: Option<Workers>,
    /// Calls of `ThreadPool_Schedule`, failed ones included.
    schedules: AtomicUsize,
    /// Live device allocations: address -> (size, alignment).
    live: Mutex<HashMap<usize, (usize, usize)>>,
    allocations: AtomicUsize,
    frees: AtomicUsize,
    /// Contract violations seen by the fake API (which must not panic across `extern "C"`).
    problems: Mutex<Vec<String>>,
}

impl FakeCtx {
    fn new(mode: PoolMode) -> Self {
        let workers = match mode {
            PoolMode::Threads(n) => Some(Workers::new(n)),
            _ => None,
        };
        FakeCtx {
            mode,
            workers,
            schedules: AtomicUsize::new(0),
            live: Mutex::new(HashMap::new()),
            allocations: AtomicUsize::new(0),
            frees: AtomicUsize::new(0),
            problems: Mutex::new(Vec::new()),
        }
    }

    fn raw(&self) -> *mut XLA_FFI_InvokeContext {
        self as *const FakeCtx as *mut XLA_FFI_InvokeContext
    }

    fn problem(&self, message: String) {
        self.problems.lock().unwrap().push(message);
    }

    /// Everything allocated was freed (with the size it was allocated with).
    fn assert_clean(&self) {
        assert_eq!(
            *self.problems.lock().unwrap(),
            Vec::<String>::new(),
            "fake API saw misuse"
        );
        assert!(
            self.live.lock().unwrap().is_empty(),
            "leaked device memory: {:?}",
            self.live
        );
        assert_eq!(
            self.allocations.load(Ordering::SeqCst),
            self.frees.load(Ordering::SeqCst)
        );
    }
}

unsafe fn fake_ctx<'a>(ctx: *mut XLA_FFI_InvokeContext) -> &'a FakeCtx {
    &*(ctx as *const FakeCtx)
}

unsafe extern "C" fn stream_get(args: *mut XLA_FFI_Stream_Get_Args) -> *mut XLA_FFI_Error {
    (*args).stream = STREAM_SENTINEL as *mut c_void;
    ptr::null_mut()
}

unsafe extern "C" fn device_ordinal_get(
    args: *mut XLA_FFI_DeviceOrdinal_Get_Args,
) -> *mut XLA_FFI_Error {
    (*args).device_ordinal = DEVICE_ORDINAL;
    ptr::null_mut()
}

unsafe extern "C" fn run_id_get(args: *mut XLA_FFI_RunId_Get_Args) -> *mut XLA_FFI_Error {
    (*args).run_id = RUN_ID;
    ptr::null_mut()
}

unsafe extern "C" fn memory_allocate(
    args: *mut XLA_FFI_DeviceMemory_Allocate_Args,
) -> *mut XLA_FFI_Error {
    let args = &mut *args;
    let ctx = fake_ctx(args.ctx);
    let Ok(layout) = std::alloc::Layout::from_size_align(args.size.max(1), args.alignment) else {
        ctx.problem(format!(
            "allocation with invalid alignment {}",
            args.alignment
        ));
        return new_error(INVALID_ARGUMENT, "invalid alignment");
    };
    let data = std::alloc::alloc(layout);
    if data.is_null() {
        return new_error(8, "out of memory");
    }
    ctx.live
        .lock()
        .unwrap()
        .insert(data as usize, (args.size, args.alignment));
    ctx.allocations.fetch_add(1, Ordering::SeqCst);
    args.data = data.cast();
    ptr::null_mut()
}

unsafe extern "C" fn memory_free(args: *mut XLA_FFI_DeviceMemory_Free_Args) -> *mut XLA_FFI_Error {
    let args = &*args;
    let ctx = fake_ctx(args.ctx);
    let Some((size, alignment)) = ctx.live.lock().unwrap().remove(&(args.data as usize)) else {
        ctx.problem(format!("free of unknown pointer {:?}", args.data));
        return new_error(INVALID_ARGUMENT, "unknown pointer");
    };
    if size != args.size {
        ctx.problem(format!(
            "block of {size} bytes freed as {} bytes",
            args.size
        ));
    }
    std::alloc::dealloc(
        args.data.cast(),
        std::alloc::Layout::from_size_align_unchecked(size.max(1), alignment),
    );
    ctx.frees.fetch_add(1, Ordering::SeqCst);
    ptr::null_mut()
}

unsafe extern "C" fn pool_num_threads(
    args: *mut XLA_FFI_ThreadPool_NumThreads_Args,
) -> *mut XLA_FFI_Error {
    let args = &mut *args;
    *args.num_threads = match fake_ctx(args.ctx).mode {
        PoolMode::NoPool => return new_error(FAILED_PRECONDITION, "no intra-op thread pool"),
        PoolMode::Inline => INLINE_CLAIMED_THREADS,
        PoolMode::Threads(n) => n as i64,
    };
    ptr::null_mut()
}

unsafe extern "C" fn pool_schedule(
    args: *mut XLA_FFI_ThreadPool_Schedule_Args,
) -> *mut XLA_FFI_Error {
    let args = &*args;
    let ctx = fake_ctx(args.ctx);
    ctx.schedules.fetch_add(1, Ordering::SeqCst);
    let Some(task) = args.task else {
        ctx.problem("scheduled a null task".into());
        return new_error(INVALID_ARGUMENT, "null task");
    };
    match (&ctx.workers, ctx.mode) {
        (_, PoolMode::NoPool) => new_error(FAILED_PRECONDITION, "no intra-op thread pool"),
        (_, PoolMode::Inline) => {
            task(args.data);
            ptr::null_mut()
        }
        (Some(workers), PoolMode::Threads(_)) => {
            let sender = workers.sender.lock().unwrap();
            sender
                .as_ref()
                .unwrap()
                .send(Job {
                    task,
                    data: args.data,
                })
                .unwrap();
            ptr::null_mut()
        }
        (None, PoolMode::Threads(_)) => unreachable!("Threads mode always has workers"),
    }
}

/// The API table; slots the layer does not use stay `None`.
fn fake_api() -> XLA_FFI_Api {
    XLA_FFI_Api {
        XLA_FFI_Error_Create: Some(error_create),
        XLA_FFI_Error_GetDetails: Some(error_get_details),
        XLA_FFI_Error_Destroy: Some(error_destroy),
        XLA_FFI_Stream_Get: Some(stream_get),
        XLA_FFI_DeviceMemory_Allocate: Some(memory_allocate),
        XLA_FFI_DeviceMemory_Free: Some(memory_free),
        XLA_FFI_ThreadPool_Schedule: Some(pool_schedule),
        XLA_FFI_ThreadPool_NumThreads: Some(pool_num_threads),
        XLA_FFI_RunId_Get: Some(run_id_get),
        XLA_FFI_DeviceOrdinal_Get: Some(device_ordinal_get),
        ..newest_api_table()
    }
}

/// The API table of a 0.3 runtime (jaxlib 0.10): it ends after `DeviceOrdinal_Get`, and its
/// error accessor reports no code. The slots past its end are filled with what a newer table
/// would hold, so that reading them would show.
fn fake_api_v03() -> XLA_FFI_Api {
    XLA_FFI_Api {
        struct_size: std::mem::offset_of!(XLA_FFI_Api, XLA_FFI_InvokeContext_FindExtension),
        api_version: XLA_FFI_Api_Version {
            minor_version: 3,
            ..fake_api().api_version
        },
        XLA_FFI_Error_GetDetails: Some(error_get_message_v03),
        ..fake_api()
    }
}

// ---------------------------------------------------------------------------------------------
// Call frame builder
// ---------------------------------------------------------------------------------------------

/// Copies `values` into 8-byte-aligned storage (enough for every dtype the tests use).
fn aligned_bytes<T: NativeType>(values: &[T]) -> Vec<u64> {
    let bytes = std::mem::size_of_val(values);
    let mut storage = vec![0u64; bytes.div_ceil(8)];
    // SAFETY: `storage` holds at least `bytes` bytes.
    unsafe {
        ptr::copy_nonoverlapping(
            values.as_ptr().cast::<u8>(),
            storage.as_mut_ptr().cast::<u8>(),
            bytes,
        )
    };
    storage
}

/// An argument or result buffer, owned by the test.
struct Buf {
    dtype: i32,
    dims: Vec<i64>,
    data: Vec<u64>,
    /// Where the data is instead, for buffers larger than the machine.
    reserved: Option<reserved::Reserved>,
}

impl Buf {
    fn of<T: NativeType>(dims: &[i64], values: &[T]) -> Buf {
        assert_eq!(
            dims.iter().product::<i64>() as usize,
            values.len(),
            "shape {dims:?}"
        );
        Buf {
            dtype: T::DTYPE.to_raw(),
            dims: dims.to_vec(),
            data: aligned_bytes(values),
            reserved: None,
        }
    }

    /// A buffer of `dims` in address space that nothing backs until it is touched.
    fn reserved<T: NativeType>(dims: &[i64]) -> Buf {
        let bytes = dims.iter().product::<i64>() as usize * std::mem::size_of::<T>();
        Buf {
            dtype: T::DTYPE.to_raw(),
            dims: dims.to_vec(),
            data: Vec::new(),
            reserved: Some(reserved::Reserved::new(bytes)),
        }
    }

    fn zeros<T: NativeType + Default>(dims: &[i64]) -> Buf {
        Buf::of(
            dims,
            &vec![T::default(); dims.iter().product::<i64>() as usize],
        )
    }

    fn values<T: NativeType>(&self) -> Vec<T> {
        assert_eq!(self.dtype, T::DTYPE.to_raw());
        let len = self.dims.iter().product::<i64>() as usize;
        // SAFETY: `data` holds `len` values of `T` (checked dtype, aligned storage).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().cast::<T>(), len).to_vec() }
    }
}

/// An attribute value, encoded into XLA's structs at call time.
#[derive(Clone)]
enum AttrValue {
    Scalar {
        dtype: i32,
        bits: Vec<u64>,
    },
    Array {
        dtype: i32,
        len: usize,
        data: Vec<u64>,
    },
    Str(String),
    Dict(Vec<(String, AttrValue)>),
}

fn scalar<T: NativeType>(value: T) -> AttrValue {
    AttrValue::Scalar {
        dtype: T::DTYPE.to_raw(),
        bits: aligned_bytes(&[value]),
    }
}
fn array<T: NativeType>(values: &[T]) -> AttrValue {
    AttrValue::Array {
        dtype: T::DTYPE.to_raw(),
        len: values.len(),
        data: aligned_bytes(values),
    }
}
fn string(text: &str) -> AttrValue {
    AttrValue::Str(text.to_string())
}
fn dict(entries: &[(&str, AttrValue)]) -> AttrValue {
    AttrValue::Dict(
        entries
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect(),
    )
}

/// Owns everything a raw frame points to, for the duration of one call.
#[derive(Default)]
struct Arena(Vec<Box<dyn Any>>);

impl Arena {
    /// Moves `value` to a stable heap address and returns a pointer to it.
    fn keep<T: 'static>(&mut self, value: T) -> *mut T {
        self.0.push(Box::new(value));
        self.0.last_mut().unwrap().downcast_mut::<T>().unwrap()
    }

    /// Keeps `values` alive and returns a pointer to its elements (a `Vec`'s heap storage does
    /// not move with the `Vec`).
    fn keep_vec<T: 'static>(&mut self, mut values: Vec<T>) -> *mut T {
        let data = values.as_mut_ptr();
        self.0.push(Box::new(values));
        data
    }

    fn byte_span(&mut self, text: &str) -> *mut XLA_FFI_ByteSpan {
        let span = XLA_FFI_ByteSpan {
            ptr: self.keep_vec(text.as_bytes().to_vec()).cast(),
            len: text.len(),
        };
        self.keep(span)
    }

    /// Encodes a (nested) attribute list the way XLA sends it: sorted by name.
    fn attrs(&mut self, entries: &[(String, AttrValue)]) -> XLA_FFI_Attrs {
        let mut sorted: Vec<&(String, AttrValue)> = entries.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let (mut types, mut names, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for (name, value) in sorted {
            names.push(self.byte_span(name));
            let (kind, raw): (i32, *mut c_void) = match value {
                AttrValue::Scalar { dtype, bits } => {
                    let value = self.keep_vec(bits.clone()).cast();
                    (
                        XLA_FFI_AttrType_SCALAR,
                        self.keep(XLA_FFI_Scalar {
                            dtype: *dtype,
                            value,
                        })
                        .cast(),
                    )
                }
                AttrValue::Array { dtype, len, data } => {
                    let data = self.keep_vec(data.clone()).cast();
                    (
                        XLA_FFI_AttrType_ARRAY,
                        self.keep(XLA_FFI_Array {
                            dtype: *dtype,
                            size: *len,
                            data,
                        })
                        .cast(),
                    )
                }
                AttrValue::Str(text) => (XLA_FFI_AttrType_STRING, self.byte_span(text).cast()),
                AttrValue::Dict(entries) => {
                    let nested = self.attrs(entries);
                    (XLA_FFI_AttrType_DICTIONARY, self.keep(nested).cast())
                }
            };
            types.push(kind);
            values.push(raw);
        }
        XLA_FFI_Attrs {
            struct_size: XLA_FFI_Attrs_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            size: types.len() as i64,
            types: self.keep_vec(types),
            names: self.keep_vec(names),
            attrs: self.keep_vec(values),
        }
    }

    /// Encodes buffers as (count, types, pointers to `XLA_FFI_Buffer`).
    fn buffers(&mut self, buffers: &mut [Buf]) -> (i64, *mut i32, *mut *mut c_void) {
        let mut raw = Vec::new();
        for buffer in buffers.iter_mut() {
            let xla = XLA_FFI_Buffer {
                struct_size: XLA_FFI_Buffer_STRUCT_SIZE,
                extension_start: ptr::null_mut(),
                dtype: buffer.dtype,
                data: match &buffer.reserved {
                    Some(reserved) => reserved.at(),
                    None => buffer.data.as_mut_ptr().cast(),
                },
                rank: buffer.dims.len() as i64,
                dims: buffer.dims.as_mut_ptr(),
            };
            raw.push(self.keep(xla).cast::<c_void>());
        }
        let types = vec![XLA_FFI_ArgType_BUFFER; buffers.len()];
        (
            buffers.len() as i64,
            self.keep_vec(types),
            self.keep_vec(raw),
        )
    }
}

/// A call frame under construction: buffers, attributes, stage and struct size.
struct Frame<'c> {
    ctx: &'c FakeCtx,
    args: Vec<Buf>,
    rets: Vec<Buf>,
    attrs: Vec<(String, AttrValue)>,
    stage: i32,
    struct_size: usize,
    api: fn() -> XLA_FFI_Api,
}

impl<'c> Frame<'c> {
    fn new(ctx: &'c FakeCtx) -> Self {
        Frame {
            ctx,
            args: Vec::new(),
            rets: Vec::new(),
            attrs: Vec::new(),
            stage: XLA_FFI_ExecutionStage_EXECUTE,
            struct_size: std::mem::size_of::<XLA_FFI_CallFrame>(),
            api: fake_api,
        }
    }
    /// Serves this API table instead of the newest one.
    fn api(mut self, api: fn() -> XLA_FFI_Api) -> Self {
        self.api = api;
        self
    }
    fn arg(mut self, buffer: Buf) -> Self {
        self.args.push(buffer);
        self
    }
    fn ret(mut self, buffer: Buf) -> Self {
        self.rets.push(buffer);
        self
    }
    /// Adds attribute `name`, replacing one of the same name.
    fn attr(mut self, name: &str, value: AttrValue) -> Self {
        self.attrs.retain(|(n, _)| n != name);
        self.attrs.push((name.to_string(), value));
        self
    }
    fn without_attr(mut self, name: &str) -> Self {
        self.attrs.retain(|(n, _)| n != name);
        self
    }
    fn stage(mut self, stage: i32) -> Self {
        self.stage = stage;
        self
    }
    fn struct_size(mut self, size: usize) -> Self {
        self.struct_size = size;
        self
    }

    /// Calls `handler` with this frame and the fake API. Checks that the layer destroyed every
    /// error it got from the fake API and freed all scratch memory.
    fn call(&mut self, handler: XLA_FFI_Handler) -> std::result::Result<(), FfiError> {
        let mut arena = Arena::default();
        let api = arena.keep((self.api)());
        let (arg_count, arg_types, args) = arena.buffers(&mut self.args);
        let (ret_count, ret_types, rets) = arena.buffers(&mut self.rets);
        let mut frame = XLA_FFI_CallFrame {
            struct_size: self.struct_size,
            extension_start: ptr::null_mut(),
            api,
            ctx: self.ctx.raw(),
            stage: self.stage,
            args: XLA_FFI_Args {
                struct_size: XLA_FFI_Args_STRUCT_SIZE,
                extension_start: ptr::null_mut(),
                size: arg_count,
                types: arg_types,
                args,
            },
            rets: XLA_FFI_Rets {
                struct_size: XLA_FFI_Rets_STRUCT_SIZE,
                extension_start: ptr::null_mut(),
                size: ret_count,
                types: ret_types,
                rets,
            },
            attrs: arena.attrs(&self.attrs),
            future: ptr::null_mut(),
        };
        let errors_before = LIVE_ERRORS.with(Cell::get);
        // SAFETY: every pointer in `frame` lives in `arena` or `self` until the end of this call.
        let outcome = unsafe { take_error(handler(&mut frame)) };
        assert_eq!(
            LIVE_ERRORS.with(Cell::get),
            errors_before,
            "the layer leaked an XLA error"
        );
        self.ctx.assert_clean();
        outcome
    }
}

/// Asserts an error with `code` whose message contains every fragment.
#[track_caller]
fn assert_error(outcome: std::result::Result<(), FfiError>, code: i32, fragments: &[&str]) {
    let error = outcome.expect_err("expected the handler to fail");
    assert_eq!(error.code, code, "wrong code for: {}", error.message);
    for fragment in fragments {
        assert!(
            error.message.contains(fragment),
            "{:?} does not mention {fragment:?}",
            error.message
        );
    }
}

/// Keeps expected panics (marked with `EXPECTED_PANIC`) out of the test output.
fn quiet_expected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !message.contains(EXPECTED_PANIC) {
                default(info);
            }
        }));
    });
}

// ---------------------------------------------------------------------------------------------
// Test handlers
// ---------------------------------------------------------------------------------------------

/// Everything `test_decode` decoded, for the test to compare.
#[derive(Clone, Debug, PartialEq)]
struct Decoded {
    stage: i32,
    stream: usize,
    ordinal: i32,
    run_id: i64,
    x_dims: Vec<i64>,
    flag: bool,
    small: u8,
    int32: i32,
    int64: i64,
    single: f32,
    double: f64,
    label: String,
    sizes: Vec<i64>,
    config_names: Vec<String>,
    alpha: f64,
    mode: String,
    weights: Vec<f32>,
    depth: i32,
}

thread_local! {
    static DECODED: RefCell<Option<Decoded>> = const { RefCell::new(None) };
}

ferrax::ffi_handler! {
    /// Decodes context values, one buffer in, one out (`y = 2 x`, f32), and every attribute kind.
    fn test_decode(c"test_decode") {
        ctx stage: Stage;
        ctx stream: Stream;
        ctx ordinal: DeviceOrdinal;
        ctx run_id: RunId;
        arg x: Buffer;
        ret y: Buffer;
        attr flag: bool;
        attr small: u8;
        attr int32: i32;
        attr int64: i64;
        attr single: f32;
        attr double: f64;
        attr label: &str;
        attr sizes: Span<i64>;
        attr config: Attrs;
        traits = XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE;
        body = decode_body;
    }
}

#[allow(clippy::too_many_arguments)]
fn decode_body(
    stage: Stage,
    stream: Stream,
    ordinal: DeviceOrdinal,
    run_id: RunId,
    x: Buffer<'_>,
    y: Buffer<'_>,
    flag: bool,
    small: u8,
    int32: i32,
    int64: i64,
    single: f32,
    double: f64,
    label: &str,
    sizes: Span<'_, i64>,
    config: Attrs<'_>,
) -> Result<()> {
    x.expect_dtype(DataType::F32)?;
    y.expect_dtype(DataType::F32)?;
    y.expect_dims(x.dims())?;
    // SAFETY: x and y are distinct buffers.
    let (xs, ys) = unsafe { (x.as_slice::<f32>()?, y.as_mut_slice::<f32>()?) };
    for (out, value) in ys.iter_mut().zip(xs) {
        *out = 2.0 * value;
    }
    let nested = |message: String| Error::invalid_argument(format!("config: {message}"));
    let inner: Attrs<'_> = config.decode("inner").map_err(nested)?;
    let decoded = Decoded {
        stage: stage.0,
        stream: stream.0 as usize,
        ordinal: ordinal.0,
        run_id: run_id.0,
        x_dims: x.dims().to_vec(),
        flag,
        small,
        int32,
        int64,
        single,
        double,
        label: label.to_string(),
        sizes: sizes.0.to_vec(),
        config_names: (0..config.len())
            .map(|i| config.name(i).to_string())
            .collect(),
        alpha: config.decode("alpha").map_err(nested)?,
        mode: config.decode::<&str>("mode").map_err(nested)?.to_string(),
        weights: config
            .decode::<Span<'_, f32>>("weights")
            .map_err(nested)?
            .0
            .to_vec(),
        depth: inner.decode("depth").map_err(nested)?,
    };
    DECODED.with(|d| *d.borrow_mut() = Some(decoded));
    Ok(())
}

ferrax::ffi_handler! {
    /// Views its argument as a batch of matrices; writes (batch, rows, cols) as s64.
    fn test_matrix(c"test_matrix") {
        arg a: Buffer;
        ret shape: Buffer;
        body = matrix_body;
    }
}

fn matrix_body(a: Buffer<'_>, shape: Buffer<'_>) -> Result<()> {
    let batch = MatrixBatch::of(&a)?;
    // SAFETY: the only view of the result.
    let out = unsafe { shape.as_mut_slice::<i64>()? };
    out.copy_from_slice(&[batch.batch as i64, batch.rows as i64, batch.cols as i64]);
    Ok(())
}

ferrax::ffi_handler! {
    /// Panics with the message given as attribute.
    fn test_panic(c"test_panic") {
        attr message: &str;
        body = panic_body;
    }
}

fn panic_body(message: &str) -> Result<()> {
    panic!("{message}")
}

ferrax::ffi_handler! {
    /// Counts how often each index of `counts` (s32 [n]) is visited by `parallel_for` (chunk 0)
    /// or `parallel_chunks(n, chunk)`; writes `pool.num_threads()` to `threads` (s64 []).
    /// The task for index `panic_at` panics (-1: none).
    fn test_parallel(c"test_parallel") {
        ctx pool: ThreadPool;
        ret counts: Buffer;
        ret threads: Buffer;
        attr chunk: i64;
        attr panic_at: i64;
        body = parallel_body;
    }
}

fn parallel_body(
    pool: ThreadPool<'_>,
    counts: Buffer<'_>,
    threads: Buffer<'_>,
    chunk: i64,
    panic_at: i64,
) -> Result<()> {
    let n = counts.element_count()?;
    let hits: Vec<AtomicI32> = (0..n).map(|_| AtomicI32::new(0)).collect();
    let visit = |i: usize| {
        if i as i64 == panic_at {
            panic!("task {i} exploded {EXPECTED_PANIC}");
        }
        hits[i].fetch_add(1, Ordering::Relaxed);
    };
    if chunk == 0 {
        ferrax::linalg::parallel::parallel_for(&pool, n, &|i| {
            visit(i);
            Ok(())
        })?;
    } else {
        ferrax::linalg::parallel::parallel_chunks(&pool, n, chunk as usize, &|range| {
            range.for_each(visit);
            Ok(())
        })?;
    }
    // SAFETY: the only views of the results.
    let (counts, threads) = unsafe {
        (
            counts.as_mut_slice::<i32>()?,
            threads.as_mut_slice::<i64>()?,
        )
    };
    for (out, hit) in counts.iter_mut().zip(&hits) {
        *out = hit.load(Ordering::Relaxed);
    }
    threads[0] = pool.num_threads() as i64;
    Ok(())
}

ferrax::ffi_handler! {
    /// Allocates `sizes[i]` bytes aligned to `alignments[i]` in turn, checks each block's
    /// alignment and writes all of it.
    fn test_scratch(c"test_scratch") {
        ctx scratch: ScratchAllocator;
        attr alignments: Span<i64>;
        attr sizes: Span<i64>;
        body = scratch_body;
    }
}

fn scratch_body(
    scratch: ScratchAllocator<'_>,
    alignments: Span<'_, i64>,
    sizes: Span<'_, i64>,
) -> Result<()> {
    for (&size, &alignment) in sizes.0.iter().zip(alignments.0) {
        let block = scratch.allocate(size as usize, alignment as usize)?;
        if !(block as usize).is_multiple_of(alignment as usize) {
            return Err(Error::internal(format!(
                "block {block:?} is not {alignment}-aligned"
            )));
        }
        // SAFETY: the block has `size` bytes.
        unsafe { ptr::write_bytes(block.cast::<u8>(), 0xA5, size as usize) };
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 1. Metadata handshake
// ---------------------------------------------------------------------------------------------

/// Calls `handler` with a metadata request whose frame carries `api` (XLA 0.10 sends none) and
/// garbage everywhere else, and returns the metadata it wrote.
fn metadata_answer(handler: XLA_FFI_Handler, api: *const XLA_FFI_Api) -> XLA_FFI_Metadata {
    // SAFETY: all-zero is a valid bit pattern for these C structs; then garbage on purpose.
    let mut metadata: XLA_FFI_Metadata = unsafe { std::mem::zeroed() };
    unsafe {
        ptr::write_bytes(
            &mut metadata as *mut XLA_FFI_Metadata as *mut u8,
            0xAB,
            std::mem::size_of::<XLA_FFI_Metadata>(),
        )
    };
    metadata.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
    let mut extension = XLA_FFI_Metadata_Extension {
        extension_base: XLA_FFI_InternalExtension {
            struct_size: XLA_FFI_Metadata_Extension_STRUCT_SIZE,
            type_: XLA_FFI_Extension_Metadata,
            next: ptr::null_mut(),
        },
        metadata: &mut metadata,
    };
    let garbage = 0x8 as *mut c_void; // any dereference of this crashes the test
    let mut frame: XLA_FFI_CallFrame = unsafe { std::mem::zeroed() };
    frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
    frame.extension_start = (&mut extension as *mut XLA_FFI_Metadata_Extension).cast();
    frame.api = api;
    frame.ctx = garbage.cast();
    frame.stage = XLA_FFI_ExecutionStage_INSTANTIATE;
    frame.args.size = 5;
    frame.args.types = garbage.cast();
    frame.args.args = garbage.cast();
    frame.rets.size = 3;
    frame.rets.types = ptr::null_mut();
    frame.rets.rets = ptr::null_mut();
    frame.attrs.size = 2;
    frame.attrs.names = garbage.cast();

    // SAFETY: the handler must only touch the metadata extension (and `api`'s version).
    let error = unsafe { handler(&mut frame) };
    assert!(error.is_null());
    assert_eq!(
        metadata.api_version.struct_size,
        XLA_FFI_Api_Version_STRUCT_SIZE
    );
    assert!(metadata.api_version.extension_start.is_null());
    assert_eq!(
        metadata.struct_size, XLA_FFI_Metadata_STRUCT_SIZE,
        "struct_size is XLA's to set"
    );
    metadata
}

#[test]
fn metadata_handshake_answers_without_touching_the_rest_of_the_frame() {
    let handlers: [(XLA_FFI_Handler, u32); 4] = [
        (
            test_decode,
            XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE,
        ),
        (test_panic, 0),
        (ferrax::ops::threefry::cpu::ferrax_cpu_threefry2x32, 0),
        (ferrax::ops::getrf::cpu::ferrax_cpu_getrf, 0),
    ];
    for (handler, traits) in handlers {
        let metadata = metadata_answer(handler, ptr::null());
        let version = metadata.api_version;
        assert_eq!((version.major_version, version.minor_version), (0, 3));
        assert_eq!(metadata.traits, traits);
        assert_eq!(metadata.state_type_id.type_id, 0);

        // A null frame is ignored, not dereferenced.
        assert!(unsafe { handler(ptr::null_mut()) }.is_null());
    }
}

/// XLA registers a handler whose version lies between its oldest supported and its own: the
/// handler reports the runtime's version within 0.3..=0.5, the mirror's range, so that jaxlib
/// 0.10 (0.3), 0.11 (0.4), 0.12 (0.5) and a newer one all accept it, and one older than 0.3
/// refuses it with both versions named instead of running it on a layout it lacks.
#[test]
fn metadata_handshake_negotiates_the_api_version() {
    let cases = [
        ((0, 2), (0, 3)),
        ((0, 3), (0, 3)),
        ((0, 4), (0, 4)),
        ((0, 5), (0, 5)),
        ((0, 6), (0, 5)),
        ((1, 0), (0, 5)),
    ];
    for (runtime, reported) in cases {
        let mut api = fake_api();
        api.api_version.major_version = runtime.0;
        api.api_version.minor_version = runtime.1;
        let version = metadata_answer(test_decode, &api).api_version;
        assert_eq!(
            (version.major_version, version.minor_version),
            reported,
            "runtime {runtime:?}"
        );
    }
}

/// Against a 0.3 table the layer reads no slot past its `struct_size` and gets no error code
/// from XLA; against the newest, XLA's code (RESOURCE_EXHAUSTED for an allocation it cannot
/// meet) reaches the caller.
#[test]
fn older_api_tables_are_read_within_their_size() {
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let impossible = || {
        Frame::new(&ctx)
            .attr("sizes", array(&[1i64 << 50]))
            .attr("alignments", array(&[8i64]))
    };
    assert_error(
        impossible().call(test_scratch),
        8,
        &["test_scratch: ", "out of memory"],
    );
    assert_error(
        impossible().api(fake_api_v03).call(test_scratch),
        FAILED_PRECONDITION,
        &["test_scratch: ", "out of memory"],
    );
    // A table that ends before `RunId_Get` has neither it nor `DeviceOrdinal_Get`, whatever
    // the memory past its end holds.
    fn api_v01() -> XLA_FFI_Api {
        XLA_FFI_Api {
            struct_size: std::mem::offset_of!(XLA_FFI_Api, XLA_FFI_RunId_Get),
            ..fake_api_v03()
        }
    }
    assert_error(
        decode_frame(&ctx).api(api_v01).call(test_decode),
        12,
        &["test_decode: ", "XLA does not provide"],
    );
    decode_frame(&ctx)
        .api(fake_api_v03)
        .call(test_decode)
        .expect("a 0.3 table has every function ferrax uses");
}

// ---------------------------------------------------------------------------------------------
// 2. Successful decoding
// ---------------------------------------------------------------------------------------------

/// A frame `test_decode` accepts, with its attributes given out of name order.
fn decode_frame(ctx: &FakeCtx) -> Frame<'_> {
    Frame::new(ctx)
        .arg(Buf::of(&[2, 3], &[1.0f32, -2.0, 3.5, 0.0, 1e-3, -7.25]))
        .ret(Buf::zeros::<f32>(&[2, 3]))
        .attr("sizes", array(&[3i64, -1, i64::MAX]))
        .attr("single", scalar(-1.5f32))
        .attr("flag", scalar(true))
        .attr("label", string("héllo, ffi"))
        .attr("int64", scalar(-(1i64 << 40) - 7))
        .attr("small", scalar(200u8))
        .attr("double", scalar(std::f64::consts::PI))
        .attr("int32", scalar(-123_456i32))
        .attr(
            "config",
            dict(&[
                ("weights", array(&[0.5f32, 0.25])),
                ("mode", string("fast")),
                ("inner", dict(&[("depth", scalar(7i32))])),
                ("alpha", scalar(2.5f64)),
            ]),
        )
}

#[test]
fn decodes_context_buffers_and_every_attribute_kind() {
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let mut frame = decode_frame(&ctx);
    DECODED.with(|d| d.borrow_mut().take());
    frame.call(test_decode).expect("test_decode failed");
    let decoded = DECODED
        .with(|d| d.borrow_mut().take())
        .expect("body did not run");
    let expected = Decoded {
        stage: XLA_FFI_ExecutionStage_EXECUTE,
        stream: STREAM_SENTINEL,
        ordinal: DEVICE_ORDINAL,
        run_id: RUN_ID,
        x_dims: vec![2, 3],
        flag: true,
        small: 200,
        int32: -123_456,
        int64: -(1i64 << 40) - 7,
        single: -1.5,
        double: std::f64::consts::PI,
        label: "héllo, ffi".to_string(),
        sizes: vec![3, -1, i64::MAX],
        config_names: ["alpha", "inner", "mode", "weights"]
            .map(String::from)
            .to_vec(),
        alpha: 2.5,
        mode: "fast".to_string(),
        weights: vec![0.5, 0.25],
        depth: 7,
    };
    assert_eq!(decoded, expected);
    assert_eq!(
        frame.rets[0].values::<f32>(),
        [2.0, -4.0, 7.0, 0.0, 2e-3, -14.5]
    );

    // Empty strings and arrays decode too.
    let mut frame = decode_frame(&ctx)
        .attr("label", string(""))
        .attr("sizes", array::<i64>(&[]));
    frame.call(test_decode).expect("empty string/array");
    let decoded = DECODED.with(|d| d.borrow_mut().take()).unwrap();
    assert_eq!((decoded.label.as_str(), decoded.sizes.len()), ("", 0));
}

#[test]
fn matrix_batch_views_leading_dims_as_batch() {
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let mut frame = Frame::new(&ctx)
        .arg(Buf::zeros::<f64>(&[2, 3, 4, 5]))
        .ret(Buf::zeros::<i64>(&[3]));
    frame.call(test_matrix).unwrap();
    assert_eq!(frame.rets[0].values::<i64>(), [6, 4, 5]);
}

// ---------------------------------------------------------------------------------------------
// 3. Decoding errors
// ---------------------------------------------------------------------------------------------

#[test]
fn decoding_errors_name_target_operand_and_expectation() {
    type Edit = fn(Frame<'_>) -> Frame<'_>;
    let cases: [(&str, Edit, &[&str]); 10] = [
        (
            "attr dtype",
            |f| f.attr("small", scalar(200i64)),
            &["attribute 'small'", "expected u8 scalar", "got s64 scalar"],
        ),
        (
            "bool as s32",
            |f| f.attr("flag", scalar(1i32)),
            &["attribute 'flag'", "expected pred scalar", "got s32 scalar"],
        ),
        (
            "span dtype",
            |f| f.attr("sizes", array(&[1i32, 2])),
            &[
                "attribute 'sizes'",
                "expected s64 array",
                "got s32 array of 2",
            ],
        ),
        (
            "string as scalar",
            |f| f.attr("label", scalar(1.0f64)),
            &["attribute 'label'", "expected string", "got f64 scalar"],
        ),
        (
            "missing attr",
            |f| f.without_attr("int32"),
            &["missing attribute 'int32'", "expected s32 scalar"],
        ),
        (
            "extra attr",
            |f| f.attr("bogus", scalar(1i64)),
            &["unexpected attribute 'bogus'", "flag", "config"],
        ),
        (
            "nested",
            |f| f.attr("config", dict(&[("alpha", scalar(1.0f64))])),
            &["config", "missing attribute 'inner'", "expected dictionary"],
        ),
        (
            "buffer dtype",
            |f| Frame {
                args: vec![Buf::zeros::<i32>(&[2, 3])],
                ..f
            },
            &["operand 0 'x'", "expected dtype f32", "got s32"],
        ),
        (
            "arg count",
            |f| Frame { args: vec![], ..f },
            &["expected 1 operands (x)", "got 0"],
        ),
        (
            "ret count",
            |f| f.ret(Buf::zeros::<f32>(&[2, 3])),
            &["expected 1 results (y)", "got 2"],
        ),
    ];
    let ctx = FakeCtx::new(PoolMode::NoPool);
    for (what, edit, fragments) in cases {
        let outcome = edit(decode_frame(&ctx)).call(test_decode);
        let fragments = [&["test_decode: "][..], fragments].concat();
        println!("case {what}: {outcome:?}");
        assert_error(outcome, INVALID_ARGUMENT, &fragments);
    }
}

#[test]
fn matrix_batch_rejects_rank_below_two() {
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let outcome = Frame::new(&ctx)
        .arg(Buf::zeros::<f32>(&[5]))
        .ret(Buf::zeros::<i64>(&[3]))
        .call(test_matrix);
    assert_error(
        outcome,
        INVALID_ARGUMENT,
        &[
            "test_matrix: ",
            "operand 0 'a'",
            "expected rank >= 2",
            "got shape [5]",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// 4. The real CPU handlers
// ---------------------------------------------------------------------------------------------

/// Random123 known answers for threefry2x32_20: (key, counter, output).
const THREEFRY_KATS: [([u32; 2], [u32; 2], [u32; 2]); 2] = [
    ([0, 0], [0, 0], [0x6b20_0159, 0x99ba_4efe]),
    (
        [0x1319_8a2e, 0x0370_7344],
        [0x243f_6a88, 0x85a3_08d3],
        [0xc492_3a9c, 0x483d_f7a0],
    ),
];

#[test]
fn threefry_handler_matches_kernel_and_known_answers_in_every_pool_mode() {
    const ROWS: usize = 300;
    const COLS: usize = 1000; // 300k elements: several pool tasks of 64k
    let n = ROWS * COLS;
    let mut rng = Rng(0x7EF2);
    let mut inputs: [Vec<u32>; 4] =
        std::array::from_fn(|_| (0..n).map(|_| rng.next_u32()).collect());
    // Known answers at a few positions, in different pool chunks.
    let kat_positions = [(0, 0), (65_535, 1), (150_001, 0), (n - 1, 1)];
    for &(position, kat) in &kat_positions {
        let (key, x, _) = THREEFRY_KATS[kat];
        for (input, value) in inputs.iter_mut().zip([key[0], key[1], x[0], x[1]]) {
            input[position] = value;
        }
    }
    let dims = [ROWS as i64, COLS as i64];
    for mode in ALL_POOL_MODES {
        let ctx = FakeCtx::new(mode);
        let mut frame = Frame::new(&ctx);
        for input in &inputs {
            frame = frame.arg(Buf::of(&dims, input));
        }
        let mut frame = frame
            .ret(Buf::zeros::<u32>(&dims))
            .ret(Buf::zeros::<u32>(&dims));
        frame
            .call(ferrax::ops::threefry::cpu::ferrax_cpu_threefry2x32)
            .unwrap_or_else(|e| panic!("{mode:?}: {e:?}"));
        let (out0, out1) = (frame.rets[0].values::<u32>(), frame.rets[1].values::<u32>());
        for &(position, kat) in &kat_positions {
            assert_eq!(
                [out0[position], out1[position]],
                THREEFRY_KATS[kat].2,
                "{mode:?} at {position}"
            );
        }
        for i in 0..n {
            let key = [inputs[0][i], inputs[1][i]];
            let want = ferrax_kernels::threefry::threefry2x32(key, [inputs[2][i], inputs[3][i]]);
            assert_eq!([out0[i], out1[i]], want, "{mode:?} at {i}");
        }
        if matches!(mode, PoolMode::Inline | PoolMode::Threads(4)) {
            assert!(
                ctx.schedules.load(Ordering::SeqCst) > 0,
                "{mode:?}: the pool was not used"
            );
        }
    }

    // Shapes must agree.
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let mut frame = Frame::new(&ctx);
    for shape in [&[4i64][..], &[4], &[4], &[5]] {
        frame = frame.arg(Buf::zeros::<u32>(shape));
    }
    let outcome = frame
        .ret(Buf::zeros::<u32>(&[4]))
        .ret(Buf::zeros::<u32>(&[4]))
        .call(ferrax::ops::threefry::cpu::ferrax_cpu_threefry2x32);
    assert_error(
        outcome,
        INVALID_ARGUMENT,
        &[
            "ferrax_threefry2x32: ",
            "operand 3 'x1'",
            "expected shape [4]",
            "got shape [5]",
        ],
    );
}

/// Applies the row swaps `i <-> pivots[i]` to the identity permutation of size `p`.
fn naive_permutation(pivots: &[i32], p: usize) -> Vec<i32> {
    let mut permutation: Vec<i32> = (0..p as i32).collect();
    for (i, &pivot) in pivots.iter().enumerate() {
        permutation.swap(i, pivot as usize);
    }
    permutation
}

#[test]
fn pivots_to_permutation_matches_naive_reference_in_every_pool_mode() {
    let (k, p) = (7usize, 10usize);
    let mut rng = Rng(0x9107);
    // A small batch, and one large enough for the pool path (~12k matrices per task).
    for batch_dims in [vec![3i64, 5], vec![40_000]] {
        let batch: usize = batch_dims.iter().product::<i64>() as usize;
        // LAPACK-style pivots: row i is swapped with a row at or below it.
        let pivots: Vec<i32> = (0..batch * k).map(|j| rng.range(j % k, p) as i32).collect();
        let expected: Vec<i32> = pivots
            .chunks(k)
            .flat_map(|piv| naive_permutation(piv, p))
            .collect();
        let shape = |last: usize| [&batch_dims[..], &[last as i64]].concat();
        for mode in ALL_POOL_MODES {
            let ctx = FakeCtx::new(mode);
            let mut frame = Frame::new(&ctx)
                .arg(Buf::of(&shape(k), &pivots))
                .ret(Buf::zeros::<i32>(&shape(p)));
            frame
                .call(ferrax::ops::pivots::cpu::ferrax_cpu_lu_pivots_to_permutation)
                .unwrap_or_else(|e| panic!("{mode:?}: {e:?}"));
            assert!(
                frame.rets[0].values::<i32>() == expected,
                "{mode:?}, batch {batch_dims:?}"
            );
        }
    }
}

#[test]
fn pivots_to_permutation_rejects_permutation_shorter_than_pivots() {
    let ctx = FakeCtx::new(PoolMode::Threads(2));
    let outcome = Frame::new(&ctx)
        .arg(Buf::zeros::<i32>(&[2, 5]))
        .ret(Buf::zeros::<i32>(&[2, 3]))
        .call(ferrax::ops::pivots::cpu::ferrax_cpu_lu_pivots_to_permutation);
    assert_error(
        outcome,
        INVALID_ARGUMENT,
        &[
            "ferrax_lu_pivots_to_permutation: ",
            "result 0 'permutation'",
            "permutation_size >= 5",
            "got 3",
        ],
    );
}

#[test]
fn pivots_to_permutation_rejects_permutations_past_int32_indices() {
    let ctx = FakeCtx::new(PoolMode::Threads(2));
    let p = 1i64 << 31;
    let outcome = Frame::new(&ctx)
        .arg(Buf::zeros::<i32>(&[1, 1]))
        .ret(Buf::reserved::<i32>(&[1, p]))
        .call(ferrax::ops::pivots::cpu::ferrax_cpu_lu_pivots_to_permutation);
    assert_error(
        outcome,
        INVALID_ARGUMENT,
        &[
            "ferrax_lu_pivots_to_permutation: ",
            "permutation_size <= 2147483647",
            "got 2147483648",
        ],
    );
}

/// A getrf frame for a batch of `batch` n x n matrices of `T`.
fn getrf_frame<T: NativeType + Default>(ctx: &FakeCtx, batch: i64, n: i64) -> Frame<'_> {
    Frame::new(ctx)
        .arg(Buf::zeros::<T>(&[batch, n, n]))
        .ret(Buf::zeros::<T>(&[batch, n, n]))
        .ret(Buf::zeros::<i32>(&[batch, n]))
        .ret(Buf::zeros::<i32>(&[batch]))
}

#[test]
fn getrf_without_lapack_is_a_failed_precondition() {
    // This test binary never fills the LAPACK table. Past the SIMD lanes' sizes faer factors
    // (LAPACK takes a matrix with a zero pivot: these are zeros), past 256 LAPACK.
    let ctx = FakeCtx::new(PoolMode::Threads(2));
    for (outcome, routine) in [
        (
            getrf_frame::<f64>(&ctx, 2, 40).call(ferrax::ops::getrf::cpu::ferrax_cpu_getrf),
            "dgetrf",
        ),
        (
            getrf_frame::<f32>(&ctx, 1, 257).call(ferrax::ops::getrf::cpu::ferrax_cpu_getrf),
            "sgetrf",
        ),
    ] {
        assert_error(
            outcome,
            FAILED_PRECONDITION,
            &["ferrax_getrf: ", "LAPACK routine", routine],
        );
    }
    // An empty batch needs no LAPACK.
    getrf_frame::<f64>(&ctx, 0, 3)
        .call(ferrax::ops::getrf::cpu::ferrax_cpu_getrf)
        .expect("empty batch");
}

#[test]
fn getrf_rejects_integer_input() {
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let outcome = getrf_frame::<i32>(&ctx, 2, 3).call(ferrax::ops::getrf::cpu::ferrax_cpu_getrf);
    assert_error(
        outcome,
        INVALID_ARGUMENT,
        &["ferrax_getrf: ", "operand 0 'a'", "f64", "got s32"],
    );
}

#[test]
fn scratch_that_cannot_be_allocated_is_resource_exhausted() {
    if !reserved::allocations_past_memory_fail() {
        return;
    }
    // 2^40 equations: XLA's buffers are reserved address space (40 TiB, never touched); the
    // solver's workspace of 3·2^40 + 1 elements is 24 TiB more, which no allocator can meet.
    let m = 1i64 << 40;
    let ctx = FakeCtx::new(PoolMode::Threads(2));
    let before = reserved::resident_kib();
    let outcome = Frame::new(&ctx)
        .arg(Buf::reserved::<f64>(&[m]))
        .arg(Buf::reserved::<f64>(&[m]))
        .arg(Buf::reserved::<f64>(&[m]))
        .arg(Buf::reserved::<f64>(&[m, 1]))
        .ret(Buf::reserved::<f64>(&[m, 1]))
        .call(ferrax::ops::tridiagonal_solve::cpu::ferrax_cpu_tridiagonal_solve_perturbed);
    assert_error(
        outcome,
        RESOURCE_EXHAUSTED,
        &[
            "ferrax_tridiagonal_solve_perturbed: ",
            "cannot allocate 26388279066632 bytes",
        ],
    );
    let grown = reserved::resident_kib().saturating_sub(before);
    assert!(
        grown < 1 << 20,
        "the handler touched {grown} KiB of its buffers"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Panic safety
// ---------------------------------------------------------------------------------------------

#[test]
fn panic_in_handler_becomes_internal_error() {
    quiet_expected_panics();
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let message = format!("boom 42 {EXPECTED_PANIC}");
    let outcome = Frame::new(&ctx)
        .attr("message", string(&message))
        .call(test_panic);
    assert_error(outcome, INTERNAL, &["test_panic: ", "panic", "boom 42"]);
}

/// A `test_parallel` frame over `tasks` indices.
fn parallel_frame(ctx: &FakeCtx, tasks: usize, chunk: i64, panic_at: i64) -> Frame<'_> {
    Frame::new(ctx)
        .ret(Buf::zeros::<i32>(&[tasks as i64]))
        .ret(Buf::zeros::<i64>(&[]))
        .attr("chunk", scalar(chunk))
        .attr("panic_at", scalar(panic_at))
}

#[test]
fn panic_in_pool_task_becomes_internal_error() {
    quiet_expected_panics();
    for mode in ALL_POOL_MODES {
        let ctx = FakeCtx::new(mode);
        for chunk in [0, 10] {
            let outcome = parallel_frame(&ctx, 100, chunk, 57).call(test_parallel);
            assert_error(
                outcome,
                INTERNAL,
                &["test_parallel: ", "panic", "task 57 exploded"],
            );
        }
        // The pool and the process are fine afterwards.
        let mut frame = parallel_frame(&ctx, 100, 0, -1);
        frame
            .call(test_parallel)
            .unwrap_or_else(|e| panic!("{mode:?}: {e:?}"));
        assert!(
            frame.rets[0].values::<i32>().iter().all(|&c| c == 1),
            "{mode:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Scratch memory
// ---------------------------------------------------------------------------------------------

#[test]
fn scratch_allocator_checks_alignment_and_frees_everything() {
    let ctx = FakeCtx::new(PoolMode::NoPool);
    let scratch = |sizes: &[i64], alignments: &[i64]| {
        Frame::new(&ctx)
            .attr("sizes", array(sizes))
            .attr("alignments", array(alignments))
            .call(test_scratch)
    };
    // `Frame::call` checks after every call that all blocks were freed with their sizes.
    scratch(&[1, 100, 4096, 0, 24], &[1, 16, 8, 4, 2]).expect("valid allocations");
    assert_eq!(ctx.allocations.load(Ordering::SeqCst), 5);
    for bad in [32, 3, 0] {
        let before = ctx.allocations.load(Ordering::SeqCst);
        // The first block is allocated, the second rejected: the first must still be freed.
        let outcome = scratch(&[64, 64], &[8, bad]);
        assert_error(
            outcome,
            INTERNAL,
            &["test_scratch: ", &format!("alignment {bad}")],
        );
        assert_eq!(
            ctx.allocations.load(Ordering::SeqCst),
            before + 1,
            "alignment {bad} reached XLA"
        );
    }
    assert_eq!(ctx.frees.load(Ordering::SeqCst), 8);
}

// ---------------------------------------------------------------------------------------------
// 7. Frame checks
// ---------------------------------------------------------------------------------------------

#[test]
fn frames_from_other_stages_or_older_apis_are_rejected() {
    let ctx = FakeCtx::new(PoolMode::NoPool);
    for stage in [
        XLA_FFI_ExecutionStage_INSTANTIATE,
        XLA_FFI_ExecutionStage_PREPARE,
        XLA_FFI_ExecutionStage_INITIALIZE,
        4,
    ] {
        let outcome = decode_frame(&ctx).stage(stage).call(test_decode);
        assert_error(
            outcome,
            INTERNAL,
            &["test_decode: ", &format!("stage {stage}")],
        );
    }
    let old = XLA_FFI_CallFrame_STRUCT_SIZE - 1;
    let outcome = decode_frame(&ctx).struct_size(old).call(test_decode);
    assert_error(
        outcome,
        INTERNAL,
        &["test_decode: ", &format!("{old} bytes")],
    );
    // Exactly the 0.3 size (without `future`) is accepted.
    decode_frame(&ctx)
        .struct_size(XLA_FFI_CallFrame_STRUCT_SIZE)
        .call(test_decode)
        .expect("0.3 frame");
}

// ---------------------------------------------------------------------------------------------
// 8. Thread pool
// ---------------------------------------------------------------------------------------------

#[test]
fn parallel_for_and_chunks_run_every_index_exactly_once_in_every_pool_mode() {
    for mode in ALL_POOL_MODES {
        let ctx = FakeCtx::new(mode);
        let expected_threads = match mode {
            PoolMode::NoPool => 1,
            PoolMode::Inline => INLINE_CLAIMED_THREADS,
            PoolMode::Threads(n) => n as i64,
        };
        for tasks in [0usize, 1, 7, 1000] {
            for chunk in [0i64, 1, 3, 64] {
                let schedules = ctx.schedules.load(Ordering::SeqCst);
                let mut frame = parallel_frame(&ctx, tasks, chunk, -1);
                frame
                    .call(test_parallel)
                    .unwrap_or_else(|e| panic!("{mode:?}, {tasks} tasks: {e:?}"));
                let counts = frame.rets[0].values::<i32>();
                let wrong: Vec<_> = counts.iter().enumerate().filter(|(_, &c)| c != 1).collect();
                assert!(
                    wrong.is_empty(),
                    "{mode:?}, {tasks} tasks, chunk {chunk}: (index, runs) {wrong:?}"
                );
                assert_eq!(
                    frame.rets[1].values::<i64>(),
                    [expected_threads],
                    "{mode:?}"
                );
                // parallel_for over several tasks offers work to a pool of several threads (the
                // calling thread counts as one of them).
                if chunk == 0 && tasks > 1 && expected_threads > 1 {
                    assert!(
                        ctx.schedules.load(Ordering::SeqCst) > schedules,
                        "{mode:?}: pool unused"
                    );
                }
            }
        }
    }
}
