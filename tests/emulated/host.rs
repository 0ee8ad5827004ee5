//! The emulated device as the tests see it: the emulator library (started by re-running the
//! test process with it first on the library path), device buffers, and a minimal XLA FFI host
//! for the CUDA platform that calls a handler with a stream and a scratch allocator.

use ferrax::ffi::sys::*;
use ferrax::ffi::NativeType;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::ptr;

/// Set in the child process: the emulator library's path.
const CHILD: &str = "FERRAX_EMULATED_CUDA";

/// The emulator library's functions the tests use.
pub struct Device {
    _library: libloading::Library,
    alloc: unsafe extern "C" fn(usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
    stream: *mut c_void,
    problems: unsafe extern "C" fn(*mut c_char, usize) -> usize,
    calls: unsafe extern "C" fn(*mut c_char, usize) -> usize,
    capturing: unsafe extern "C" fn(c_int),
}

impl Device {
    /// In the child: the loaded emulator. In the parent: runs the child with the emulator
    /// first on its library path and returns `None` once it succeeded.
    pub fn start() -> Result<Option<Device>, String> {
        let Some(library) = std::env::var_os(CHILD) else {
            run_child()?;
            return Ok(None);
        };
        // LAPACK for the CPU cores the cases compare with (the emulator loads its own).
        let lapack = std::env::var_os("FERRAX_TEST_LAPACK")
            .ok_or("FERRAX_TEST_LAPACK: the path of scipy-openblas32's library is not set")?;
        ferrax_cpu_fallback::load_library(Path::new(&lapack))?;
        // The same object cudarc loads by the name libcuda.so.
        // SAFETY: the emulator runs no code at load time.
        let library = unsafe { libloading::Library::new(&library) }
            .map_err(|e| format!("loading the emulator: {e}"))?;
        // SAFETY: the emulator's exported functions, with these signatures.
        unsafe {
            let alloc = *library
                .get(b"ferrax_emulated_alloc")
                .map_err(|e| e.to_string())?;
            let free = *library
                .get(b"ferrax_emulated_free")
                .map_err(|e| e.to_string())?;
            let stream: unsafe extern "C" fn() -> *mut c_void = *library
                .get(b"ferrax_emulated_stream")
                .map_err(|e| e.to_string())?;
            let problems = *library
                .get(b"ferrax_emulated_problems")
                .map_err(|e| e.to_string())?;
            let calls = *library
                .get(b"ferrax_emulated_calls")
                .map_err(|e| e.to_string())?;
            let capturing = *library
                .get(b"ferrax_emulated_set_capturing")
                .map_err(|e| e.to_string())?;
            Ok(Some(Device {
                alloc,
                free,
                stream: stream(),
                problems,
                calls,
                capturing,
                _library: library,
            }))
        }
    }

    /// Whether the device's streams report capturing a CUDA graph.
    pub fn set_capturing(&self, on: bool) {
        // SAFETY: the emulator's setter.
        unsafe { (self.capturing)(c_int::from(on)) }
    }

    /// A device buffer holding `values`, with the logical `dims` the handler sees.
    pub fn upload<T: NativeType>(&self, values: &[T], dims: Vec<i64>) -> Operand<'_> {
        let buffer = self.zeros::<T>(dims);
        assert_eq!(values.len(), buffer.len(), "values for {:?}", buffer.dims);
        // SAFETY: the buffer holds `values.len()` elements of `T`.
        unsafe { ptr::copy_nonoverlapping(values.as_ptr(), buffer.data.cast(), values.len()) };
        buffer
    }

    /// A zeroed device buffer of `dims` elements of `T`.
    pub fn zeros<T: NativeType>(&self, dims: Vec<i64>) -> Operand<'_> {
        let buffer = self.untouched::<T>(dims);
        // SAFETY: the buffer holds that many elements of `T`.
        unsafe { ptr::write_bytes(buffer.data.cast::<T>(), 0, buffer.len()) };
        buffer
    }

    /// A device buffer of `dims` elements of `T` whose memory is never touched (it costs
    /// address space only): for handlers that must refuse the shape before reading it.
    pub fn untouched<T: NativeType>(&self, dims: Vec<i64>) -> Operand<'_> {
        let bytes = dims.iter().map(|&d| d as usize).product::<usize>() * std::mem::size_of::<T>();
        // SAFETY: the emulator's allocator.
        let data = unsafe { (self.alloc)(bytes) };
        assert!(!data.is_null(), "device allocation of {bytes} bytes");
        Operand {
            device: self,
            dtype: T::DTYPE.to_raw(),
            dims,
            data,
        }
    }

    /// Calls `handler` as XLA's CUDA runtime would: on the device's stream, with a scratch
    /// allocator on its memory. Returns the calls the emulator logged (kernels launched,
    /// library routines), or the handler's error or the emulator's problems.
    pub fn call(
        &self,
        handler: XLA_FFI_Handler,
        args: &[&Operand<'_>],
        rets: &[&Operand<'_>],
        attrs: &[(&str, Attr)],
    ) -> Result<Vec<String>, String> {
        let outcome = call_frame(self, handler, args, rets, attrs);
        let problems = self.take(self.problems);
        let calls = self.take(self.calls);
        if !problems.is_empty() {
            return Err(format!(
                "the emulated device found problems:\n  {}",
                problems.join("\n  ")
            ));
        }
        outcome.map(|()| calls)
    }

    fn take(&self, log: unsafe extern "C" fn(*mut c_char, usize) -> usize) -> Vec<String> {
        let mut text = vec![0 as c_char; 1 << 20];
        // SAFETY: the buffer's length.
        unsafe { log(text.as_mut_ptr(), text.len()) };
        // SAFETY: NUL-terminated by the emulator.
        let text = unsafe { CStr::from_ptr(text.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        text.lines().map(str::to_string).collect()
    }
}

/// A device buffer, freed when dropped.
pub struct Operand<'d> {
    device: &'d Device,
    dtype: i32,
    pub dims: Vec<i64>,
    data: *mut c_void,
}

impl Operand<'_> {
    fn len(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }

    /// The buffer's elements.
    pub fn download<T: NativeType + Default>(&self) -> Vec<T> {
        assert_eq!(T::DTYPE.to_raw(), self.dtype, "download's element type");
        let mut values = vec![T::default(); self.len()];
        // SAFETY: the buffer holds that many elements of `T`.
        unsafe {
            ptr::copy_nonoverlapping(self.data.cast::<T>(), values.as_mut_ptr(), values.len())
        };
        values
    }
}

impl Drop for Operand<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by this device's allocator.
        unsafe { (self.device.free)(self.data) };
    }
}

/// An attribute value, as the lowerings pass them.
#[derive(Clone, Copy)]
pub enum Attr {
    U8(u8),
    Bool(bool),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    /// A string attribute's bytes (jax passes `bytes` as they are).
    Bytes(&'static [u8]),
    /// A dense s64 array (a NumPy array in `ffi_call`).
    I64s(&'static [i64]),
    /// A dictionary (a Python dict).
    Dict(&'static [(&'static str, Attr)]),
}

/// A scalar attribute's dtype and bytes (an 8-byte buffer, the value at its start).
fn scalar_bytes(value: Attr) -> Option<(i32, [u8; 8])> {
    use ferrax::ffi::DataType;
    let widen = |bytes: &[u8]| {
        let mut out = [0; 8];
        out[..bytes.len()].copy_from_slice(bytes);
        out
    };
    Some(match value {
        Attr::U8(v) => (DataType::U8.to_raw(), widen(&[v])),
        Attr::Bool(v) => (DataType::Pred.to_raw(), widen(&[v as u8])),
        Attr::I32(v) => (DataType::S32.to_raw(), widen(&v.to_ne_bytes())),
        Attr::U32(v) => (DataType::U32.to_raw(), widen(&v.to_ne_bytes())),
        Attr::I64(v) => (DataType::S64.to_raw(), widen(&v.to_ne_bytes())),
        Attr::U64(v) => (DataType::U64.to_raw(), widen(&v.to_ne_bytes())),
        Attr::F32(v) => (DataType::F32.to_raw(), widen(&v.to_ne_bytes())),
        Attr::F64(v) => (DataType::F64.to_raw(), widen(&v.to_ne_bytes())),
        Attr::Bytes(_) | Attr::I64s(_) | Attr::Dict(_) => return None,
    })
}

/// `XLA_FFI_Attrs` of some attributes (sorted by name, as XLA sends them) with the storage it
/// points into (heap allocations, which stay put when this moves).
struct AttrsFrame {
    raw: XLA_FFI_Attrs,
    _names: Vec<XLA_FFI_ByteSpan>,
    _name_ptrs: Vec<*mut XLA_FFI_ByteSpan>,
    _types: Vec<XLA_FFI_AttrType>,
    _ptrs: Vec<*mut c_void>,
    _storage: Vec<Box<dyn std::any::Any>>,
}

impl AttrsFrame {
    fn new(attrs: &[(&str, Attr)]) -> Box<Self> {
        let mut attrs = attrs.to_vec();
        attrs.sort_by_key(|(name, _)| *name);
        let mut names: Vec<XLA_FFI_ByteSpan> = attrs
            .iter()
            .map(|(name, _)| XLA_FFI_ByteSpan {
                ptr: name.as_ptr().cast(),
                len: name.len(),
            })
            .collect();
        let mut storage: Vec<Box<dyn std::any::Any>> = Vec::new();
        let (mut types, mut ptrs): (Vec<XLA_FFI_AttrType>, Vec<*mut c_void>) = attrs
            .iter()
            .map(|&(_, value)| {
                // Each attribute's struct, boxed so that its address is fixed.
                let (kind, ptr): (_, *mut c_void) = match value {
                    Attr::Bytes(bytes) => {
                        let mut span = Box::new(XLA_FFI_ByteSpan {
                            ptr: bytes.as_ptr().cast(),
                            len: bytes.len(),
                        });
                        let ptr = (&mut *span as *mut XLA_FFI_ByteSpan).cast();
                        storage.push(span);
                        (XLA_FFI_AttrType_STRING, ptr)
                    }
                    Attr::I64s(values) => {
                        let mut array = Box::new(XLA_FFI_Array {
                            dtype: <i64 as NativeType>::DTYPE.to_raw(),
                            size: values.len(),
                            data: values.as_ptr() as *mut c_void,
                        });
                        let ptr = (&mut *array as *mut XLA_FFI_Array).cast();
                        storage.push(array);
                        (XLA_FFI_AttrType_ARRAY, ptr)
                    }
                    Attr::Dict(entries) => {
                        let mut dict = AttrsFrame::new(entries);
                        let ptr = (&mut dict.raw as *mut XLA_FFI_Attrs).cast();
                        storage.push(dict);
                        (XLA_FFI_AttrType_DICTIONARY, ptr)
                    }
                    scalar => {
                        let (dtype, bytes) = scalar_bytes(scalar).expect("a scalar");
                        let mut bytes = Box::new(bytes);
                        let mut scalar = Box::new(XLA_FFI_Scalar {
                            dtype,
                            value: bytes.as_mut_ptr().cast(),
                        });
                        let ptr = (&mut *scalar as *mut XLA_FFI_Scalar).cast();
                        storage.push(bytes);
                        storage.push(scalar);
                        (XLA_FFI_AttrType_SCALAR, ptr)
                    }
                };
                (kind, ptr)
            })
            .unzip();
        let mut name_ptrs: Vec<*mut XLA_FFI_ByteSpan> =
            names.iter_mut().map(|n| n as *mut _).collect();
        Box::new(AttrsFrame {
            raw: XLA_FFI_Attrs {
                struct_size: XLA_FFI_Attrs_STRUCT_SIZE,
                extension_start: ptr::null_mut(),
                size: attrs.len() as i64,
                types: types.as_mut_ptr(),
                names: name_ptrs.as_mut_ptr(),
                attrs: ptrs.as_mut_ptr(),
            },
            _names: names,
            _name_ptrs: name_ptrs,
            _types: types,
            _ptrs: ptrs,
            _storage: storage,
        })
    }
}

/// The XLA host's state for one call: the device, for its stream and allocator.
struct Context<'d> {
    device: &'d Device,
}

fn call_frame(
    device: &Device,
    handler: XLA_FFI_Handler,
    args: &[&Operand<'_>],
    rets: &[&Operand<'_>],
    attrs: &[(&str, Attr)],
) -> Result<(), String> {
    let raw = |b: &&Operand<'_>| XLA_FFI_Buffer {
        struct_size: XLA_FFI_Buffer_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        dtype: b.dtype,
        data: b.data,
        rank: b.dims.len() as i64,
        dims: b.dims.as_ptr() as *mut i64,
    };
    let mut arg_buffers: Vec<XLA_FFI_Buffer> = args.iter().map(raw).collect();
    let mut ret_buffers: Vec<XLA_FFI_Buffer> = rets.iter().map(raw).collect();
    let mut arg_types = vec![XLA_FFI_ArgType_BUFFER; args.len()];
    let mut ret_types = vec![XLA_FFI_RetType_BUFFER; rets.len()];
    let mut arg_ptrs: Vec<*mut c_void> = arg_buffers
        .iter_mut()
        .map(|b| (b as *mut XLA_FFI_Buffer).cast())
        .collect();
    let mut ret_ptrs: Vec<*mut c_void> = ret_buffers
        .iter_mut()
        .map(|b| (b as *mut XLA_FFI_Buffer).cast())
        .collect();
    let attrs = AttrsFrame::new(attrs);
    let mut context = Context { device };
    let api = api();
    let mut frame = XLA_FFI_CallFrame {
        struct_size: XLA_FFI_CallFrame_STRUCT_SIZE,
        extension_start: ptr::null_mut(),
        api: &api,
        ctx: (&mut context as *mut Context<'_>).cast(),
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
            ..attrs.raw
        },
        future: ptr::null_mut(),
    };
    // SAFETY: every pointer in the frame outlives the call.
    let error = unsafe { handler(&mut frame) };
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: errors come from `error_create` below.
    Err(unsafe { Box::from_raw(error.cast::<CString>()) }
        .to_string_lossy()
        .into_owned())
}

// An error is a boxed CString holding the message.
unsafe extern "C" fn error_create(args: *mut XLA_FFI_Error_Create_Args) -> *mut XLA_FFI_Error {
    let message = CStr::from_ptr((*args).message).to_owned();
    Box::into_raw(Box::new(message)).cast()
}

unsafe extern "C" fn error_message(args: *mut XLA_FFI_Error_GetDetails_Args) {
    (*args).message = (*(*args).error.cast::<CString>()).as_ptr();
}

unsafe extern "C" fn error_destroy(args: *mut XLA_FFI_Error_Destroy_Args) {
    drop(Box::from_raw((*args).error.cast::<CString>()));
}

unsafe extern "C" fn stream_get(args: *mut XLA_FFI_Stream_Get_Args) -> *mut XLA_FFI_Error {
    let context = &*(*args).ctx.cast::<Context<'_>>();
    (*args).stream = context.device.stream;
    ptr::null_mut()
}

unsafe extern "C" fn allocate(args: *mut XLA_FFI_DeviceMemory_Allocate_Args) -> *mut XLA_FFI_Error {
    let context = &*(*args).ctx.cast::<Context<'_>>();
    (*args).data = (context.device.alloc)((*args).size);
    ptr::null_mut()
}

unsafe extern "C" fn free(args: *mut XLA_FFI_DeviceMemory_Free_Args) -> *mut XLA_FFI_Error {
    let context = &*(*args).ctx.cast::<Context<'_>>();
    (context.device.free)((*args).data);
    ptr::null_mut()
}

fn api() -> XLA_FFI_Api {
    XLA_FFI_Api {
        XLA_FFI_Error_Create: Some(error_create),
        XLA_FFI_Error_GetDetails: Some(error_message),
        XLA_FFI_Error_Destroy: Some(error_destroy),
        XLA_FFI_Stream_Get: Some(stream_get),
        XLA_FFI_DeviceMemory_Allocate: Some(allocate),
        XLA_FFI_DeviceMemory_Free: Some(free),
        ..crate::api_table::newest_api_table()
    }
}

/// Runs `cases` (those whose name contains `EMULATED_CUDA_CASES`, if set), printing each.
pub fn run(device: &Device, cases: &[crate::Case]) -> ExitCode {
    let filter = std::env::var("EMULATED_CUDA_CASES").unwrap_or_default();
    let mut failed = Vec::new();
    for (name, case) in cases.iter().filter(|(name, _)| name.contains(&filter)) {
        // Named before it runs: a kernel that touches memory past a buffer crashes the process.
        print!("{name} ... ");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(device)))
            .unwrap_or_else(|_| Err("the case panicked".into()));
        println!("{}", if outcome.is_ok() { "ok" } else { "FAILED" });
        if let Err(message) = outcome {
            println!("    {}", message.replace('\n', "\n    "));
            failed.push(name.clone());
        }
    }
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    println!("\n{} failed: {}", failed.len(), failed.join(", "));
    ExitCode::FAILURE
}

/// The emulator library: `target/<profile>/libferrax_emulated_cuda.so`, beside this test's
/// `deps/` folder.
fn emulator_path() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("no target folder")?;
    let path = profile.join("libferrax_emulated_cuda.so");
    if !path.exists() {
        return Err(format!(
            "{} is not built: run `cargo build --release -p ferrax-emulated-cuda` (cargo test \
             --workspace builds it)",
            path.display()
        ));
    }
    Ok(path)
}

/// Runs this test binary again with links named as the CUDA libraries to the emulator first
/// on its library path.
fn run_child() -> Result<(), String> {
    let emulator = emulator_path()?;
    let links = std::env::temp_dir().join(format!("ferrax-emulated-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&links).map_err(|e| e.to_string())?;
    for name in [
        "libcuda.so",
        "libcuda.so.1",
        "libcublas.so",
        "libcusolver.so",
    ] {
        let link = links.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&emulator, &link).map_err(|e| e.to_string())?;
    }
    let library_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(rest) if !rest.is_empty() => format!("{}:{rest}", links.display()),
        _ => links.display().to_string(),
    };
    let status = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(std::env::args().skip(1))
        .env("LD_LIBRARY_PATH", library_path)
        .env(CHILD, &emulator)
        // A small device: launch plans size grids by it, and the emulation runs every block.
        .env(
            "FERRAX_EMULATED_SMS",
            std::env::var("FERRAX_EMULATED_SMS").unwrap_or("4".into()),
        )
        .status()
        .map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&links);
    match status? {
        s if s.success() => Ok(()),
        s => Err(format!("cases failed on the emulated device ({s})")),
    }
}
