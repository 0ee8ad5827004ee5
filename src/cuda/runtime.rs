use crate::ffi::{Error, Result, ScratchAllocator, Stream};
use cudarc::driver::{result, sys, DriverError};
use ferrax_kernels::launch::{KernelArgs, LaunchConfig};
use ferrax_kernels::pointers::BatchPointersArgs;
use ferrax_kernels::relayout::{CopyMatricesArgs, Strides};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, OnceLock};

/// ferrax's kernels (`kernels-ptx/`), built to PTX by `build.rs`.
pub const KERNELS_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"));

/// The loaded module and what was looked up in it, for one CUDA context. Handles are plain
/// addresses: the driver lets any thread use them once the context is current.
struct ContextModule {
    module: usize,
    functions: HashMap<&'static str, usize>,
    multiprocessors: u32,
    max_shared_bytes: usize,
}

/// Per-context modules, keyed by `CUcontext`. XLA keeps its contexts for the life of the
/// process, so entries are never evicted.
static MODULES: OnceLock<Mutex<HashMap<usize, ContextModule>>> = OnceLock::new();

/// Functions of code that ferrax did not build (compiled-kernel calls), keyed by context and
/// the caller's key for the code (which must name one image and entry for the process's life);
/// never evicted, as ferrax's own module is not.
static USER_FUNCTIONS: OnceLock<Mutex<HashMap<(usize, usize), usize>>> = OnceLock::new();

fn driver_error(what: &str, error: DriverError) -> Error {
    let name = error
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {}", error.0 as i32));
    let text = error
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Error::internal(format!("{what}: {name} ({text})"))
}

fn check(what: &str, code: sys::CUresult) -> Result<()> {
    code.result().map_err(|e| driver_error(what, e))
}

/// Loads `libcuda` and initializes the driver once; a clear error where there is none.
fn ensure_driver() -> Result<()> {
    static DRIVER: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: probes for the library without resolving any symbol.
            if !unsafe { sys::is_culib_present() } {
                return Err("the CUDA driver library (libcuda.so.1) could not be loaded".into());
            }
            result::init().map_err(|e| format!("cuInit failed: {e:?}"))
        })
        .clone()
        .map_err(Error::failed_precondition)
}

/// The shape of a launch of code ferrax did not build: `grid` (in clusters along x), `block`
/// (threads), `cluster` blocks per cluster along x, `shared` bytes of dynamic shared memory.
#[derive(Clone, Copy, Debug)]
pub struct LaunchShape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub cluster: u32,
    pub shared: u32,
}

/// XLA's stream for this call with its context made current on this thread (and restored when
/// dropped), plus ferrax's module in that context. All work is enqueued on XLA's stream;
/// only `download` and `upload` (host copies) and `time` wait for it.
pub struct GpuStream {
    stream: sys::CUstream,
    context: sys::CUcontext,
}

impl GpuStream {
    pub fn adopt(stream: Stream) -> Result<Self> {
        ensure_driver()?;
        let stream = stream.0 as sys::CUstream;
        if stream.is_null() {
            return Err(Error::failed_precondition(
                "XLA passed no CUDA stream (is this target registered for the CUDA platform?)",
            ));
        }
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `stream` is XLA's live stream; `context` is an out-parameter.
        check("cuStreamGetCtx", unsafe {
            sys::cuStreamGetCtx(stream, &mut context)
        })?;
        // SAFETY: the context is alive while XLA runs this call; popped in `drop`.
        check("cuCtxPushCurrent", unsafe {
            sys::cuCtxPushCurrent_v2(context)
        })?;
        Ok(GpuStream { stream, context })
    }

    pub fn raw(&self) -> sys::CUstream {
        self.stream
    }

    /// The stream's context, as the key of per-context caches.
    pub fn context_key(&self) -> usize {
        self.context as usize
    }

    /// Runs `f` on this context's module entry (loading the module on first use).
    fn with_module<T>(&self, f: impl FnOnce(&mut ContextModule) -> Result<T>) -> Result<T> {
        let modules = MODULES.get_or_init(Default::default);
        let mut modules = modules.lock().unwrap_or_else(|e| e.into_inner());
        let module = match modules.entry(self.context as usize) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(load_module()?),
        };
        f(module)
    }

    /// Streaming multiprocessors of this stream's device (launch plans size grids by it).
    pub fn multiprocessors(&self) -> Result<u32> {
        self.with_module(|m| Ok(m.multiprocessors))
    }

    /// The most dynamic shared memory a block may opt in to on this stream's device (227 KiB
    /// on Hopper): the block kernels' plans fit their matrices in it or leave them to the
    /// libraries.
    pub fn max_shared_bytes(&self) -> Result<usize> {
        self.with_module(|m| Ok(m.max_shared_bytes))
    }

    fn function(&self, kernel: &'static str) -> Result<sys::CUfunction> {
        self.with_module(|m| {
            if let Some(&f) = m.functions.get(kernel) {
                return Ok(f as sys::CUfunction);
            }
            let name = CString::new(kernel).expect("kernel names have no NUL byte");
            // SAFETY: the module belongs to the current context.
            let f = unsafe { result::module::get_function(m.module as sys::CUmodule, name) }
                .map_err(|e| driver_error(&format!("kernel {kernel} not in ferrax's PTX"), e))?;
            m.functions.insert(kernel, f as usize);
            Ok(f)
        })
    }

    /// Enqueues `config` with `args`, its entry point's one parameter (the argument struct,
    /// which `cuLaunchKernel` copies: it need not outlive this call).
    ///
    /// # Safety
    /// `args` must be what the entry's body requires (sizes, and arrays that hold them), and
    /// every device pointer in it must stay valid until the kernel has run on this stream.
    pub unsafe fn launch<A: KernelArgs>(&self, config: &LaunchConfig<A>, args: A) -> Result<()> {
        if config.grid == 0 {
            return Ok(());
        }
        let function = self.function(config.kernel)?;
        opt_in_shared(function, config.shared_bytes)
            .map_err(|e| driver_error(&format!("kernel {}: shared memory", config.kernel), e))?;
        let mut params = [&args as *const A as *mut c_void];
        result::launch_kernel(
            function,
            (config.grid, 1, 1),
            (config.block, 1, 1),
            config.shared_bytes,
            self.stream,
            &mut params,
        )
        .map_err(|e| {
            driver_error(
                &format!(
                    "launching kernel {} (grid {}, block {}, {} B shared)",
                    config.kernel, config.grid, config.block, config.shared_bytes
                ),
                e,
            )
        })
    }

    /// The entry `name` of the code `image` makes (NUL-terminated PTX text, or a cubin) in this
    /// stream's context, loaded once per context and `key`.
    pub fn user_function(
        &self,
        key: usize,
        name: &str,
        image: impl FnOnce() -> Vec<u8>,
    ) -> Result<sys::CUfunction> {
        let functions = USER_FUNCTIONS.get_or_init(Default::default);
        let mut functions = functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&f) = functions.get(&(self.context as usize, key)) {
            return Ok(f as sys::CUfunction);
        }
        let image = image();
        // SAFETY: the context is current; the image is PTX text with its NUL, or a cubin.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }
            .map_err(|e| driver_error(&format!("kernel {name}: loading its code"), e))?;
        let entry = CString::new(name)
            .map_err(|_| Error::invalid_argument(format!("kernel {name:?}: a NUL in its name")))?;
        // SAFETY: the module was loaded into the current context.
        let f = unsafe { result::module::get_function(module, entry) }
            .map_err(|e| driver_error(&format!("kernel {name}: no such entry in its code"), e))?;
        functions.insert((self.context as usize, key), f as usize);
        Ok(f)
    }

    /// Enqueues `function` (named `name`, for errors) with `params`, one pointer per kernel
    /// parameter to its value (the driver copies them), in the launch `shape`.
    ///
    /// # Safety
    /// `params` must match the entry's parameters, and the device memory they point to must
    /// stay valid until the kernel has run on this stream.
    pub unsafe fn launch_with_params(
        &self,
        function: sys::CUfunction,
        name: &str,
        shape: LaunchShape,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let LaunchShape {
            grid,
            block,
            cluster,
            shared,
        } = shape;
        let what = format!(
            "launching kernel {name} (grid {grid:?}, block {block:?}, clusters of {cluster}, \
             {shared} B shared)"
        );
        let allowed = self.max_shared_bytes()?;
        if shared as usize > allowed {
            return Err(Error::invalid_argument(format!(
                "{what}: the device allows {allowed} bytes of shared memory per block"
            )));
        }
        opt_in_shared(function, shared).map_err(|e| driver_error(&what, e))?;
        if cluster == 1 {
            return result::launch_kernel(
                function,
                (grid[0], grid[1], grid[2]),
                (block[0], block[1], block[2]),
                shared,
                self.stream,
                params,
            )
            .map_err(|e| driver_error(&what, e));
        }
        // As jaxlib launches clusters: along x, spread over the GPCs.
        let mut attributes: [sys::CUlaunchAttribute; 2] = std::mem::zeroed();
        attributes[0].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attributes[0].value.clusterDim.x = cluster;
        attributes[0].value.clusterDim.y = 1;
        attributes[0].value.clusterDim.z = 1;
        attributes[1].id =
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
        attributes[1].value.clusterSchedulingPolicyPreference =
            sys::CUclusterSchedulingPolicy::CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
        let config = sys::CUlaunchConfig {
            gridDimX: grid[0] * cluster,
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: shared,
            hStream: self.stream,
            attrs: attributes.as_mut_ptr(),
            numAttrs: attributes.len() as u32,
        };
        check(
            &what,
            sys::cuLaunchKernelEx(&config, function, params.as_mut_ptr(), std::ptr::null_mut()),
        )
    }

    /// A device array of `count` pointers, `base + i·stride_bytes`, in `scratch` (the batched
    /// library routines take one pointer per matrix), filled by a kernel on the stream.
    pub fn batch_pointers<T>(
        &self,
        scratch: &ScratchAllocator<'_>,
        base: *mut T,
        stride_bytes: usize,
        count: usize,
    ) -> Result<*mut *mut T> {
        let pointers = scratch.allocate(count * std::mem::size_of::<u64>(), 8)?;
        let config = ferrax_kernels::pointers::batch_pointers_launch(count as u64);
        let args = BatchPointersArgs {
            pointers: pointers.cast(),
            base: base as u64,
            stride: stride_bytes as u64,
            count: count as u64,
        };
        // SAFETY: `pointers` holds `count` words; the kernel writes nothing else.
        unsafe { self.launch(&config, args)? };
        Ok(pointers.cast())
    }

    /// Copies the `batch` `rows×cols` matrices of `bytes`-byte elements at `src`, laid out as
    /// `from`, to `dst` as `to` (zeros below the diagonal when `upper`), by a kernel on the
    /// stream: the row-major targets' way to and from the column-major libraries.
    ///
    /// # Safety
    /// Both device arrays span every element their strides reach, and do not overlap.
    #[allow(clippy::too_many_arguments)] // the copy's geometry, as the kernel takes it
    pub unsafe fn copy_matrices(
        &self,
        src: *const c_void,
        dst: *mut c_void,
        bytes: usize,
        [rows, cols, batch]: [usize; 3],
        from: Strides,
        to: Strides,
        upper: bool,
    ) -> Result<()> {
        let (rows, cols, batch) = (rows as u64, cols as u64, batch as u64);
        let config = ferrax_kernels::relayout::copy_matrices_launch(bytes, rows * cols * batch)
            .ok_or_else(|| Error::internal(format!("no matrix copy for {bytes}-byte elements")))?;
        let args = CopyMatricesArgs {
            src: src.cast(),
            dst: dst.cast(),
            rows,
            cols,
            batch,
            from_matrix: from.matrix,
            from_row: from.row,
            from_col: from.col,
            to_matrix: to.matrix,
            to_row: to.row,
            to_col: to.col,
            upper: upper as u32,
        };
        self.launch(&config, args)
    }

    /// Zeroes `bytes` of device memory at `ptr`, ordered on the stream.
    pub fn zero(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller's device allocation spans `bytes`.
        unsafe { result::memset_d8_async(ptr as sys::CUdeviceptr, 0, bytes, self.stream) }
            .map_err(|e| driver_error("cuMemsetD8Async", e))
    }

    /// Copies `dst.len()` elements from device memory at `src` to the host and waits for them
    /// (and so for everything enqueued on the stream before).
    pub fn download<T>(&self, dst: &mut [T], src: *const c_void) -> Result<()> {
        if std::mem::size_of_val(dst) == 0 {
            return Ok(());
        }
        // SAFETY: the caller's device allocation spans `dst`; the copy is complete before
        // `dst` is released, since the stream is waited for.
        unsafe { result::memcpy_dtoh_async(dst, src as sys::CUdeviceptr, self.stream) }
            .map_err(|e| driver_error("cuMemcpyDtoHAsync", e))?;
        self.synchronize()
    }

    /// Copies `src` from the host to device memory at `dst` and waits for the copy.
    pub fn upload<T>(&self, dst: *mut c_void, src: &[T]) -> Result<()> {
        if std::mem::size_of_val(src) == 0 {
            return Ok(());
        }
        // SAFETY: the caller's device allocation spans `src`; as in `download`.
        unsafe { result::memcpy_htod_async(dst as sys::CUdeviceptr, src, self.stream) }
            .map_err(|e| driver_error("cuMemcpyHtoDAsync", e))?;
        self.synchronize()
    }

    /// Whether the stream is capturing a CUDA graph (work enqueued then is recorded, not run).
    pub fn is_capturing(&self) -> Result<bool> {
        // SAFETY: XLA's live stream.
        let status = unsafe { result::stream::is_capturing(self.stream) }
            .map_err(|e| driver_error("cuStreamIsCapturing", e))?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// The milliseconds the work that `enqueue` puts on the stream takes on the device, between
    /// events recorded before and after it; waits for that work.
    pub fn time(&self, enqueue: impl FnOnce() -> Result<()>) -> Result<f32> {
        let (start, stop) = (Event::new()?, Event::new()?);
        // SAFETY: live events and XLA's live stream, in this stream's current context.
        unsafe {
            result::event::record(start.0, self.stream)
                .map_err(|e| driver_error("cuEventRecord", e))?;
            enqueue()?;
            result::event::record(stop.0, self.stream)
                .map_err(|e| driver_error("cuEventRecord", e))?;
            result::event::synchronize(stop.0)
                .map_err(|e| driver_error("cuEventSynchronize", e))?;
            let elapsed = event_elapsed_time()?;
            let mut ms = 0.0f32;
            check("cuEventElapsedTime", elapsed(&mut ms, start.0, stop.0))?;
            Ok(ms)
        }
    }

    /// Waits for everything enqueued on the stream.
    fn synchronize(&self) -> Result<()> {
        // SAFETY: XLA's live stream.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(|e| driver_error("cuStreamSynchronize", e))
    }

    /// Copies `bytes` between device buffers, ordered on the stream (a no-op when they are the
    /// same buffer, as when XLA aliased a result to its operand).
    pub fn copy(&self, dst: *mut c_void, src: *const c_void, bytes: usize) -> Result<()> {
        if bytes == 0 || std::ptr::eq(dst.cast_const(), src) {
            return Ok(());
        }
        // SAFETY: both device allocations span `bytes`.
        unsafe {
            result::memcpy_dtod_async(
                dst as sys::CUdeviceptr,
                src as sys::CUdeviceptr,
                bytes,
                self.stream,
            )
        }
        .map_err(|e| driver_error("cuMemcpyDtoDAsync", e))
    }
}

type EventElapsedTime = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;

/// The driver's `cuEventElapsedTime_v2`, or where it has none (drivers before CUDA 12.8, which
/// jax's CUDA 12 plugin runs on) the original `cuEventElapsedTime`: cudarc's CUDA 13 binding
/// asks for `_v2` alone and panics without it.
fn event_elapsed_time() -> Result<EventElapsedTime> {
    static FOUND: OnceLock<Option<EventElapsedTime>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        // SAFETY: the driver library cudarc loaded; both names have this signature.
        let library = unsafe { sys::culib() };
        [&b"cuEventElapsedTime_v2"[..], b"cuEventElapsedTime"]
            .into_iter()
            .find_map(|name| {
                unsafe { library.get::<EventElapsedTime>(name) }
                    .ok()
                    .map(|f| *f)
            })
    });
    found.ok_or_else(|| Error::failed_precondition("the CUDA driver has no cuEventElapsedTime"))
}

/// A CUDA event of the current context, destroyed when dropped.
struct Event(sys::CUevent);

impl Event {
    fn new() -> Result<Self> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map(Event)
            .map_err(|e| driver_error("cuEventCreate", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by `new` and destroyed once; an error leaves nothing to undo.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// Above 48 KiB a kernel must opt in to its dynamic shared memory.
fn opt_in_shared(function: sys::CUfunction, bytes: u32) -> std::result::Result<(), DriverError> {
    if bytes <= 48 << 10 {
        return Ok(());
    }
    // SAFETY: a function of a module loaded in the current context.
    unsafe {
        result::function::set_function_attribute(
            function,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    }
}

/// Loads ferrax's PTX into the current context and reads what launch plans need.
fn load_module() -> Result<ContextModule> {
    let image = CString::new(KERNELS_PTX).expect("PTX text has no NUL byte");
    // SAFETY: the context is current; the image is a NUL-terminated PTX string.
    let module = unsafe { result::module::load_data(image.as_ptr().cast()) }
        .map_err(|e| driver_error("loading ferrax's PTX module (cuModuleLoadData)", e))?;
    let mut device: sys::CUdevice = 0;
    // SAFETY: out-parameter; the context is current.
    check("cuCtxGetDevice", unsafe {
        sys::cuCtxGetDevice(&mut device)
    })?;
    // SAFETY: a valid device handle.
    let multiprocessors = unsafe {
        result::device::get_attribute(
            device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
    }
    .map_err(|e| driver_error("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", e))?;
    // SAFETY: as above.
    let max_shared_bytes = unsafe {
        result::device::get_attribute(
            device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )
    }
    .map_err(|e| driver_error("cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)", e))?;
    Ok(ContextModule {
        module: module as usize,
        functions: HashMap::new(),
        multiprocessors: multiprocessors.max(1) as u32,
        max_shared_bytes: max_shared_bytes.max(0) as usize,
    })
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops the context pushed in `adopt` on this same thread.
        unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    }
}

/// Library handles of one kind (cuSOLVER, cuBLAS) kept for reuse, per CUDA context: creating
/// one costs milliseconds, and a handle serves one call at a time, so each call takes one out
/// (or creates one) and puts it back when done. Handles are plain addresses.
#[derive(Default)]
pub struct HandlePool {
    free: Mutex<Vec<(usize, usize)>>,
}

impl HandlePool {
    pub const fn new() -> Self {
        HandlePool {
            free: Mutex::new(Vec::new()),
        }
    }

    /// A free handle of `context`'s, or a new one from `create` (run with the context
    /// current).
    pub fn take(&self, context: usize, create: impl FnOnce() -> Result<usize>) -> Result<usize> {
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            free.iter()
                .position(|&(owner, _)| owner == context)
                .map(|i| free.swap_remove(i).1)
        };
        reused.map_or_else(create, Ok)
    }

    pub fn give_back(&self, context: usize, handle: usize) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push((context, handle));
    }
}

/// A CUDA library (cuSOLVER, cuBLAS) whose handles ferrax pools per context and binds to XLA's
/// stream for each call: what [`Bound`] needs of it.
pub trait Library: 'static {
    /// The library's name, for errors.
    const NAME: &'static str;
    /// The opaque struct its handles point to.
    type Context;
    type Status: Copy + PartialEq + std::fmt::Debug;
    const SUCCESS: Self::Status;
    /// Its pool of free handles.
    fn handles() -> &'static HandlePool;
    /// Whether the shared library loads (cudarc panics on first use where it does not).
    fn present() -> bool;
    /// # Safety
    /// `handle` is an out-parameter; the context to create it in is current.
    unsafe fn create(handle: *mut *mut Self::Context) -> Self::Status;
    /// # Safety
    /// A live handle and a live stream of its context.
    unsafe fn set_stream(handle: *mut Self::Context, stream: sys::CUstream) -> Self::Status;
}

/// A failed status of `L` as an error naming the routine.
fn check_status<L: Library>(routine: &str, status: L::Status) -> Result<()> {
    if status == L::SUCCESS {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "{} {routine} failed: {status:?}",
            L::NAME
        )))
    }
}

/// A handle of `L` bound to XLA's stream for one call; back to the pool when dropped.
pub struct Bound<'a, L: Library> {
    handle: *mut L::Context,
    gpu: &'a GpuStream,
}

impl<'a, L: Library> Bound<'a, L> {
    pub fn on(gpu: &'a GpuStream) -> Result<Self> {
        if !L::present() {
            return Err(Error::failed_precondition(format!(
                "{} could not be loaded; jax's CUDA plugin brings it (an nvidia wheel) and loads \
                 it when jax starts its CUDA backend",
                L::NAME
            )));
        }
        let handle = L::handles().take(gpu.context_key(), || {
            let mut handle = std::ptr::null_mut();
            // SAFETY: an out-parameter; the stream's context is current.
            check_status::<L>("handle creation", unsafe { L::create(&mut handle) })?;
            Ok(handle as usize)
        })? as *mut L::Context;
        let bound = Bound { handle, gpu };
        // SAFETY: a live handle and XLA's live stream of the same context.
        check_status::<L>("set stream", unsafe { L::set_stream(handle, gpu.raw()) })?;
        Ok(bound)
    }

    /// Runs one routine on the handle, its failure an error naming it.
    pub fn run(
        &self,
        routine: &str,
        call: impl FnOnce(*mut L::Context) -> L::Status,
    ) -> Result<()> {
        check_status::<L>(routine, call(self.handle))
    }
}

impl<L: Library> Drop for Bound<'_, L> {
    fn drop(&mut self) {
        L::handles().give_back(self.gpu.context_key(), self.handle as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_pool_reuses_a_contexts_own_handles_only() {
        let pool = HandlePool::new();
        let mut created = 0;
        let mut create = |handle: usize| {
            created += 1;
            Ok(handle)
        };
        let first = pool.take(1, || create(10)).unwrap();
        let other_context = pool.take(2, || create(20)).unwrap();
        assert_eq!((first, other_context), (10, 20));
        pool.give_back(1, first);
        // Context 2 must not get context 1's handle.
        assert_eq!(pool.take(2, || create(21)).unwrap(), 21);
        assert_eq!(pool.take(1, || create(11)).unwrap(), 10);
        // Taken out, it is not handed out twice.
        assert_eq!(pool.take(1, || create(12)).unwrap(), 12);
        assert_eq!(created, 4);
    }
}
