//! The CUDA driver entry points ferrax calls (`src/cuda/runtime.rs` through cudarc), for one
//! emulated device with one context. Streams run their work when it is enqueued, so stream
//! order is program order. Kernels run on the kernels crate's grid emulator: each block's
//! threads as OS threads, one block after another.
#![allow(non_snake_case)] // the driver's names
#![allow(clippy::missing_safety_doc)] // the entry points' contracts are the CUDA driver API's

use crate::memory;
use crate::problem;
use crate::user_kernels::{user_kernel, Launch, UserKernel};
use ferrax_kernels::launch::{host_entry, HostEntry};
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub type CUresult = c_int;
pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: CUresult = 701;

/// The device's streaming multiprocessors (an H200's), which launch plans size grids by;
/// `FERRAX_EMULATED_SMS` overrides it.
fn multiprocessors() -> c_int {
    std::env::var("FERRAX_EMULATED_SMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(132)
}

/// The most dynamic shared memory a block may opt in to (Hopper's 227 KiB), and the default
/// without opting in.
const MAX_SHARED_OPTIN: usize = 227 << 10;
const DEFAULT_SHARED: usize = 48 << 10;

/// Host-only exchange slots the kernels' warp shuffles use on the host, per thread, past the
/// shared memory the launch asks for (`ferrax_kernels::small::HOST_EXCHANGE_BYTES_PER_THREAD`).
const HOST_EXCHANGE_BYTES_PER_THREAD: usize = 16;

/// The one context, and the streams made in it.
static CONTEXT: u8 = 0;
fn context() -> *mut c_void {
    &CONTEXT as *const u8 as *mut c_void
}

static STREAMS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

thread_local! {
    /// The contexts pushed on this thread.
    static CURRENT: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A stream for the test host to hand the handlers as XLA's.
#[no_mangle]
pub extern "C" fn ferrax_emulated_stream() -> *mut c_void {
    let stream = Box::into_raw(Box::new(0u64)) as usize;
    STREAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(stream);
    stream as *mut c_void
}

/// Whether `stream` is one of the emulated device's.
pub fn known_stream(stream: *mut c_void, what: &str) -> bool {
    let known = STREAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&(stream as usize));
    if !known {
        problem(format!(
            "{what}: stream {stream:?} is not one of the device's"
        ));
    }
    known
}

/// Whether the context is current on this thread (the driver's calls need it).
fn context_current(what: &str) -> bool {
    let current = CURRENT.with(|c| c.borrow().last() == Some(&(context() as usize)));
    if !current {
        problem(format!(
            "{what}: called without the context current on this thread"
        ));
    }
    current
}

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    if flags != 0 {
        problem(format!("cuInit({flags}): flags must be 0"));
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(stream: *mut c_void, ctx: *mut *mut c_void) -> CUresult {
    if !known_stream(stream, "cuStreamGetCtx") || ctx.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *ctx = context();
    CUDA_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: *mut c_void) -> CUresult {
    if ctx != context() {
        problem(format!(
            "cuCtxPushCurrent: {ctx:?} is not the device's context"
        ));
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    CURRENT.with(|c| c.borrow_mut().push(ctx as usize));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(ctx: *mut *mut c_void) -> CUresult {
    match CURRENT.with(|c| c.borrow_mut().pop()) {
        Some(popped) => {
            if !ctx.is_null() {
                *ctx = popped as *mut c_void;
            }
            CUDA_SUCCESS
        }
        None => {
            problem("cuCtxPopCurrent with no context pushed on this thread".into());
            CUDA_ERROR_INVALID_CONTEXT
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> CUresult {
    if !context_current("cuCtxGetDevice") {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *device = 0;
    CUDA_SUCCESS
}

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT` and
/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, the two ferrax asks for.
const MULTIPROCESSOR_COUNT: c_int = 16;
const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    device: c_int,
) -> CUresult {
    if device != 0 {
        problem(format!("cuDeviceGetAttribute: no device {device}"));
        return CUDA_ERROR_INVALID_VALUE;
    }
    *value = match attribute {
        MULTIPROCESSOR_COUNT => multiprocessors(),
        MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => MAX_SHARED_OPTIN as c_int,
        other => {
            problem(format!(
                "cuDeviceGetAttribute: attribute {other} is not emulated"
            ));
            return CUDA_ERROR_INVALID_VALUE;
        }
    };
    CUDA_SUCCESS
}

/// A loaded module: the entry points its PTX defines.
struct Module {
    entries: HashSet<String>,
}

/// A function's host build: one of ferrax's kernels (an argument struct), or a kernel-call's
/// (one pointer per parameter).
enum Build {
    Ferrax(&'static HostEntry),
    User(&'static UserKernel),
}

/// A function of a module: its host build, and the dynamic shared memory it may use.
struct Function {
    build: Build,
    max_dynamic_shared: usize,
}

impl Function {
    fn name(&self) -> &'static str {
        match self.build {
            Build::Ferrax(entry) => entry.name,
            Build::User(kernel) => kernel.name,
        }
    }
}

static MODULES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static FUNCTIONS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(
    module: *mut *mut c_void,
    image: *const c_void,
) -> CUresult {
    if !context_current("cuModuleLoadData") {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    let ptx = CStr::from_ptr(image.cast::<c_char>()).to_string_lossy();
    let entries: HashSet<String> = ptx
        .lines()
        .filter_map(|line| line.strip_prefix(".visible .entry "))
        .map(|rest| rest.split('(').next().unwrap_or("").trim().to_string())
        .collect();
    if entries.is_empty() {
        problem("cuModuleLoadData: the image defines no entry point".into());
        return CUDA_ERROR_INVALID_VALUE;
    }
    let handle = Box::into_raw(Box::new(Module { entries })) as usize;
    MODULES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(handle);
    *module = handle as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    function: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> CUresult {
    let known = MODULES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&(module as usize));
    if !known {
        problem(format!(
            "cuModuleGetFunction: {module:?} is no loaded module"
        ));
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let name = CStr::from_ptr(name).to_string_lossy().into_owned();
    let module = &*(module as *const Module);
    let build = match (host_entry(&name), user_kernel(&name)) {
        (Some(entry), _) => Build::Ferrax(entry),
        (None, Some(kernel)) => Build::User(kernel),
        (None, None) => return CUDA_ERROR_NOT_FOUND,
    };
    if !module.entries.contains(&name) {
        // Not a problem: ferrax turns it into an error naming the kernel.
        return CUDA_ERROR_NOT_FOUND;
    }
    let handle = Box::into_raw(Box::new(Function {
        build,
        max_dynamic_shared: DEFAULT_SHARED,
    })) as usize;
    FUNCTIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(handle);
    *function = handle as *mut c_void;
    CUDA_SUCCESS
}

/// The function behind a handle from [`cuModuleGetFunction`].
fn function(handle: *mut c_void, what: &str) -> Option<&'static mut Function> {
    let known = FUNCTIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&(handle as usize));
    if !known {
        problem(format!(
            "{what}: {handle:?} is no function of a loaded module"
        ));
        return None;
    }
    // SAFETY: a leaked `Function` this module made.
    Some(unsafe { &mut *(handle as *mut Function) })
}

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
const MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;

#[no_mangle]
pub extern "C" fn cuFuncSetAttribute(
    handle: *mut c_void,
    attribute: c_int,
    value: c_int,
) -> CUresult {
    let Some(f) = function(handle, "cuFuncSetAttribute") else {
        return CUDA_ERROR_INVALID_HANDLE;
    };
    if attribute != MAX_DYNAMIC_SHARED_SIZE_BYTES {
        problem(format!(
            "cuFuncSetAttribute: attribute {attribute} is not emulated"
        ));
        return CUDA_ERROR_INVALID_VALUE;
    }
    match usize::try_from(value) {
        Ok(bytes) if bytes <= MAX_SHARED_OPTIN => {
            f.max_dynamic_shared = bytes;
            CUDA_SUCCESS
        }
        _ => {
            problem(format!(
                "cuFuncSetAttribute({}): {value} bytes of dynamic shared memory, past the \
                 device's {MAX_SHARED_OPTIN}",
                f.name()
            ));
            CUDA_ERROR_INVALID_VALUE
        }
    }
}

/// Launches that failed their checks, by kernel (for messages).
fn launch_problem(name: &str, message: String) -> CUresult {
    problem(format!("cuLaunchKernel({name}): {message}"));
    CUDA_ERROR_INVALID_VALUE
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver's signature
pub unsafe extern "C" fn cuLaunchKernel(
    handle: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let Some(f) = function(handle, "cuLaunchKernel") else {
        return CUDA_ERROR_INVALID_HANDLE;
    };
    if !extra.is_null() {
        return launch_problem(f.name(), "`extra` is not emulated".into());
    }
    let launch = Launch {
        grid: [grid_x, grid_y, grid_z],
        block: [block_x, block_y, block_z],
        cluster: 1,
    };
    run_launch(f, launch, shared_bytes, stream, params, "cuLaunchKernel")
}

/// Checks and runs one launch of `f` (from `cuLaunchKernel` or `cuLaunchKernelEx`).
unsafe fn run_launch(
    f: &Function,
    launch: Launch,
    shared_bytes: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
    what: &str,
) -> CUresult {
    let name = f.name();
    if !context_current(what) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if !known_stream(stream, what) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let ([grid_x, grid_y, grid_z], [block_x, block_y, block_z]) = (launch.grid, launch.block);
    if grid_x == 0 || grid_x > i32::MAX as c_uint || block_x == 0 || block_x > 1024 {
        return launch_problem(name, format!("grid {grid_x}, block {block_x}"));
    }
    let shared = shared_bytes as usize;
    if shared > f.max_dynamic_shared {
        problem(format!(
            "{what}({name}): {shared} bytes of dynamic shared memory, {} allowed \
             (set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES past 48 KiB)",
            f.max_dynamic_shared
        ));
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
    if params.is_null() {
        return launch_problem(name, "expected kernelParams".into());
    }
    let entry = match f.build {
        Build::User(kernel) => {
            // CUDA's limits: y and z grids to 65535, blocks to 1024 x 1024 x 64 threads and
            // 1024 in all.
            let block_fits = (1..=1024).contains(&block_y)
                && (1..=64).contains(&block_z)
                && block_x * block_y * block_z <= 1024;
            if [grid_y, grid_z].iter().any(|&g| g == 0 || g > 65535) || !block_fits {
                return launch_problem(
                    name,
                    format!("grid {:?}, block {:?}", launch.grid, launch.block),
                );
            }
            if (0..kernel.params).any(|i| (*params.add(i)).is_null()) {
                return launch_problem(name, format!("expected {} parameters", kernel.params));
            }
            // With the grid: configurations of one kernel differ in it.
            crate::record_call(&format!("{name} grid {:?}", launch.grid));
            (kernel.run)(launch, params);
            return CUDA_SUCCESS;
        }
        Build::Ferrax(entry) => entry,
    };
    if (grid_y, grid_z, block_y, block_z) != (1, 1, 1, 1) || launch.cluster != 1 {
        return launch_problem(name, "ferrax's kernels are 1-D: y and z must be 1".into());
    }
    if (*params).is_null() {
        return launch_problem(
            name,
            "expected kernelParams with the argument struct".into(),
        );
    }
    // The argument struct, copied as the driver copies `.param` space.
    let layout = entry.args;
    let mut args = vec![0u64; layout.size.div_ceil(8)];
    std::ptr::copy_nonoverlapping(
        (*params).cast::<u8>(),
        args.as_mut_ptr().cast(),
        layout.size,
    );
    let args = args.as_ptr() as usize;
    let run = entry.run;
    crate::record_call(name);
    ferrax_kernels::grid::launch(
        grid_x,
        block_x,
        shared + block_x as usize * HOST_EXCHANGE_BYTES_PER_THREAD,
        // SAFETY: the kernel's arguments, as its host build reads them; its device pointers
        // point into guarded allocations, where reading or writing past a buffer faults.
        || unsafe { run(args as *const c_void) },
    );
    CUDA_SUCCESS
}

/// `CUlaunchConfig` and `CUlaunchAttribute` as the driver lays them out (CUDA 12+).
#[repr(C)]
pub struct CUlaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_bytes: c_uint,
    stream: *mut c_void,
    attrs: *const CUlaunchAttribute,
    num_attrs: c_uint,
}

#[repr(C)]
pub struct CUlaunchAttribute {
    id: c_int,
    pad: [u8; 4],
    /// The value union (64 bytes); a cluster dimension is its first three words.
    value: [c_uint; 16],
}

const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: c_int = 4;
const CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: c_int = 5;
/// Blocks per cluster every device with clusters (sm_90) allows without opting in.
const MAX_PORTABLE_CLUSTER: c_uint = 8;

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const CUlaunchConfig,
    handle: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let Some(f) = function(handle, "cuLaunchKernelEx") else {
        return CUDA_ERROR_INVALID_HANDLE;
    };
    let Some(config) = config.as_ref() else {
        return launch_problem(f.name(), "cuLaunchKernelEx without a config".into());
    };
    if !extra.is_null() {
        return launch_problem(f.name(), "`extra` is not emulated".into());
    }
    let attributes = if config.num_attrs == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(config.attrs, config.num_attrs as usize)
    };
    let mut cluster = 1;
    for attribute in attributes {
        match attribute.id {
            CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION => {
                let [x, y, z] = [attribute.value[0], attribute.value[1], attribute.value[2]];
                if x == 0 || x > MAX_PORTABLE_CLUSTER || (y, z) != (1, 1) {
                    return launch_problem(f.name(), format!("cluster {:?}", [x, y, z]));
                }
                cluster = x;
            }
            CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE => {}
            other => {
                return launch_problem(
                    f.name(),
                    format!("launch attribute {other} is not emulated"),
                )
            }
        }
    }
    if config.grid[0] % cluster != 0 {
        return launch_problem(
            f.name(),
            format!(
                "grid x {} is not a multiple of the cluster's {cluster}",
                config.grid[0]
            ),
        );
    }
    let launch = Launch {
        grid: config.grid,
        block: config.block,
        cluster,
    };
    run_launch(
        f,
        launch,
        config.shared_bytes,
        config.stream,
        params,
        "cuLaunchKernelEx",
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: u64,
    value: u8,
    bytes: usize,
    stream: *mut c_void,
) -> CUresult {
    if !known_stream(stream, "cuMemsetD8Async") {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if !memory::check(dst as *const c_void, bytes, "cuMemsetD8Async") {
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    std::ptr::write_bytes(dst as *mut u8, value, bytes);
    CUDA_SUCCESS
}

/// Host memory needs no check (the handler owns it); the device side must be an allocation.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    bytes: usize,
    stream: *mut c_void,
) -> CUresult {
    if !known_stream(stream, "cuMemcpyDtoHAsync") {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if !memory::check(src as *const c_void, bytes, "cuMemcpyDtoHAsync source") {
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    std::ptr::copy_nonoverlapping(src as *const u8, dst.cast::<u8>(), bytes);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    bytes: usize,
    stream: *mut c_void,
) -> CUresult {
    if !known_stream(stream, "cuMemcpyHtoDAsync") {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if !memory::check(dst as *const c_void, bytes, "cuMemcpyHtoDAsync destination") {
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst as *mut u8, bytes);
    CUDA_SUCCESS
}

/// Everything runs when enqueued here: a known stream has nothing left to wait for.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: *mut c_void) -> CUresult {
    if !known_stream(stream, "cuStreamSynchronize") {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: *mut c_void,
) -> CUresult {
    if !known_stream(stream, "cuMemcpyDtoDAsync") {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let (d, s) = (dst as *const c_void, src as *const c_void);
    if !memory::check(s, bytes, "cuMemcpyDtoDAsync source")
        || !memory::check(d, bytes, "cuMemcpyDtoDAsync destination")
    {
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if dst != src && dst < src + bytes as u64 && src < dst + bytes as u64 {
        problem(format!(
            "cuMemcpyDtoDAsync: overlapping {bytes} bytes at {src:#x} and {dst:#x}"
        ));
        return CUDA_ERROR_INVALID_VALUE;
    }
    std::ptr::copy(src as *const u8, dst as *mut u8, bytes);
    CUDA_SUCCESS
}

/// Whether the streams capture a CUDA graph, as the test host sets it: the driver then answers
/// `cuStreamIsCapturing` with ACTIVE (work enqueued still runs here).
static CAPTURING: AtomicBool = AtomicBool::new(false);

#[no_mangle]
pub extern "C" fn ferrax_emulated_set_capturing(on: c_int) {
    CAPTURING.store(on != 0, Ordering::Relaxed);
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: *mut c_void, status: *mut c_int) -> CUresult {
    if !known_stream(stream, "cuStreamIsCapturing") {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    // CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE
    *status = CAPTURING.load(Ordering::Relaxed) as c_int;
    CUDA_SUCCESS
}

/// Live events, each with the host time it was last recorded at. Work runs when enqueued,
/// so an event completes when it is recorded, and the time between two is the host's.
static EVENTS: Mutex<Vec<(usize, Option<Instant>)>> = Mutex::new(Vec::new());

/// Runs `f` on the event `handle`'s entry; an unknown handle is a problem.
fn with_event<T>(
    handle: *mut c_void,
    what: &str,
    f: impl FnOnce(&mut Option<Instant>) -> T,
) -> Option<T> {
    let mut events = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some((_, recorded)) = events.iter_mut().find(|(h, _)| *h == handle as usize) else {
        problem(format!("{what}: event {handle:?} is not a live event"));
        return None;
    };
    Some(f(recorded))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut *mut c_void, flags: c_uint) -> CUresult {
    if !context_current("cuEventCreate") {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if flags != 0 {
        problem(format!("cuEventCreate: flags {flags} are not emulated"));
        return CUDA_ERROR_INVALID_VALUE;
    }
    let handle = Box::into_raw(Box::new(0u8)) as usize;
    EVENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((handle, None));
    *event = handle as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: *mut c_void, stream: *mut c_void) -> CUresult {
    if !known_stream(stream, "cuEventRecord") {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    with_event(event, "cuEventRecord", |t| *t = Some(Instant::now()))
        .map_or(CUDA_ERROR_INVALID_HANDLE, |()| CUDA_SUCCESS)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: *mut c_void) -> CUresult {
    with_event(event, "cuEventSynchronize", |_| ())
        .map_or(CUDA_ERROR_INVALID_HANDLE, |()| CUDA_SUCCESS)
}

/// As the driver: both events recorded (and complete), else an error.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    start: *mut c_void,
    end: *mut c_void,
) -> CUresult {
    let what = "cuEventElapsedTime";
    let (Some(Some(start)), Some(Some(end))) = (
        with_event(start, what, |t| *t),
        with_event(end, what, |t| *t),
    ) else {
        problem(format!(
            "{what}: an event that is not live or was never recorded"
        ));
        return CUDA_ERROR_INVALID_HANDLE;
    };
    *ms = end.saturating_duration_since(start).as_secs_f32() * 1e3;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: *mut c_void) -> CUresult {
    let mut events = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(index) = events.iter().position(|(h, _)| *h == event as usize) else {
        problem(format!(
            "cuEventDestroy: event {event:?} is not a live event"
        ));
        return CUDA_ERROR_INVALID_HANDLE;
    };
    events.swap_remove(index);
    drop(Box::from_raw(event.cast::<u8>()));
    CUDA_SUCCESS
}

/// Names and descriptions of the results this driver returns.
fn describe(result: CUresult) -> (&'static CStr, &'static CStr) {
    match result {
        CUDA_SUCCESS => (c"CUDA_SUCCESS", c"no error"),
        CUDA_ERROR_INVALID_VALUE => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        CUDA_ERROR_INVALID_CONTEXT => (c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
        CUDA_ERROR_INVALID_HANDLE => (c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
        CUDA_ERROR_NOT_FOUND => (c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
        CUDA_ERROR_ILLEGAL_ADDRESS => (
            c"CUDA_ERROR_ILLEGAL_ADDRESS",
            c"an illegal memory access was encountered",
        ),
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => (
            c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            c"too many resources requested for launch",
        ),
        _ => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(result: CUresult, name: *mut *const c_char) -> CUresult {
    *name = describe(result).0.as_ptr();
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(result: CUresult, text: *mut *const c_char) -> CUresult {
    *text = describe(result).1.as_ptr();
    CUDA_SUCCESS
}
