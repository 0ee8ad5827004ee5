//! The CUDA handlers of compiled-kernel calls on XLA's stream: jaxlib's `triton_kernel_call`
//! contract, from the payload decoded and checked once per distinct `opaque`; ferrax's own
//! typed call, from the PTX entry's `.param` list read once per module and entry.

use super::ptx::{self, EntryParam};
use super::typed::{self, Arg, KERNEL_CALL};
use super::{Calls, Code, KernelCall, Param, Payload, TRITON_KERNEL_CALL};
use crate::cuda::{GpuStream, LaunchShape};
use crate::ffi::{Attrs, Buffers, Error, Result, ScratchAllocator, Span, Stream};
use crate::ffi_handlers;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

ffi_handlers! {
    /// jax-triton's kernel calls (jaxlib's `triton_kernel_call`): each array parameter takes
    /// the next buffer (operands, then results), zeroed first where the call says so; scalars
    /// pass by value; then the global scratch pointer and a null profiling pointer.
    pub fn ferrax_cuda_triton_kernel_call(TRITON_KERNEL_CALL, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        ctx buffers: Buffers;
        attr opaque: &[u8];
        remaining = true;
        body = triton_kernel_call;
    }

    /// `ferrax.kernel_call`: a kernel of the caller's PTX, its parameters typed attributes
    /// (buffers by index, scalars by value), launched once per batch element.
    pub fn ferrax_cuda_kernel_call(KERNEL_CALL, Cuda) {
        ctx stream: Stream;
        ctx buffers: Buffers;
        attr ptx: &str;
        attr entry: &str;
        attr grid: Span<'_, i64>;
        attr block: Span<'_, i64>;
        attr shared_mem_bytes: i64;
        attr params: Span<'_, i64>;
        attr scalars: Attrs<'_>;
        attr num_batch_dims: i64;
        remaining = true;
        body = kernel_call;
    }
}

/// Payloads decoded so far, by their bytes (jaxlib caches the same way); a payload stays for
/// the process's life, so its address keys its loaded modules.
static PAYLOADS: OnceLock<Mutex<HashMap<Vec<u8>, Arc<Payload>>>> = OnceLock::new();

fn payload(opaque: &[u8]) -> Result<Arc<Payload>> {
    let payloads = PAYLOADS.get_or_init(Default::default);
    if let Some(p) = payloads.lock().unwrap_or_else(|e| e.into_inner()).get(opaque) {
        return Ok(p.clone());
    }
    let decoded = Arc::new(Payload::decode(opaque, true).map_err(Error::invalid_argument)?);
    let mut payloads = payloads.lock().unwrap_or_else(|e| e.into_inner());
    Ok(payloads.entry(opaque.to_vec()).or_insert(decoded).clone())
}

fn triton_kernel_call(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    buffers: Buffers<'_>,
    opaque: &[u8],
) -> Result<()> {
    let payload = payload(opaque)?;
    let call = match &payload.calls {
        Calls::One(call) => call,
        Calls::Autotuned { name, .. } => {
            return Err(Error::unimplemented(format!(
                "autotuned call {name:?}: ferrax does not autotune yet (jaxlib's \
                 triton_kernel_call does; ferrax.install() leaves such calls to it)"
            )))
        }
    };
    let pointers = buffers
        .args
        .iter()
        .chain(&buffers.rets)
        .map(|b| {
            let bytes = b.element_count()?.checked_mul(b.dtype_size()?);
            let bytes = bytes.ok_or_else(|| b.mismatch("a size in bytes".into(), "more".into()))?;
            Ok((b.data_ptr().cast(), bytes))
        })
        .collect::<Result<Vec<(*mut c_void, usize)>>>()?;
    let kernel = &call.kernel.name;
    if pointers.len() != call.buffers() {
        return Err(Error::invalid_argument(format!(
            "kernel {kernel}: its parameters take {} buffers, the call has {} operands and {} \
             results",
            call.buffers(),
            buffers.args.len(),
            buffers.rets.len()
        )));
    }
    let gpu = GpuStream::adopt(stream)?;
    // SAFETY: XLA's buffers of this call, which outlive its kernels on the stream.
    unsafe { launch(&gpu, &scratch, call, Arc::as_ptr(&payload) as usize, &pointers) }
}

/// Enqueues `call` with `buffers` (address, bytes) for its array parameters, in order.
///
/// # Safety
/// The buffers are device memory that stays valid until the kernel has run on the stream.
unsafe fn launch(
    gpu: &GpuStream,
    scratch: &ScratchAllocator<'_>,
    call: &KernelCall,
    key: usize,
    buffers: &[(*mut c_void, usize)],
) -> Result<()> {
    let kernel = &call.kernel;
    let name = &kernel.name;
    if let Some(index) = call.params.iter().position(|p| matches!(p, Param::Tma(_))) {
        return Err(Error::unimplemented(format!(
            "kernel {name}: parameter {index} is a TMA descriptor, which ferrax does not build \
             yet (ferrax.install() leaves such calls to jaxlib)"
        )));
    }
    // The values the parameters point to: addresses and scalars, 8 bytes each at most.
    let mut values: Vec<[u8; 8]> = Vec::with_capacity(call.params.len() + 2);
    let mut next = buffers.iter();
    for (index, param) in call.params.iter().enumerate() {
        let mut value = [0u8; 8];
        match param {
            Param::Array {
                bytes_to_zero,
                divisibility,
            } => {
                let &(pointer, bytes) = next.next().ok_or_else(|| {
                    Error::internal(format!("kernel {name}: fewer buffers than arrays"))
                })?;
                if *divisibility > 1 && (pointer as u64) % divisibility != 0 {
                    return Err(Error::invalid_argument(format!(
                        "kernel {name}: parameter {index}'s buffer ({pointer:?}) is not \
                         divisible by {divisibility}"
                    )));
                }
                if *bytes_to_zero > bytes as u64 {
                    return Err(Error::invalid_argument(format!(
                        "kernel {name}: parameter {index} asks for {bytes_to_zero} bytes zeroed, \
                         its buffer has {bytes}"
                    )));
                }
                gpu.zero(pointer, *bytes_to_zero as usize)?;
                value = (pointer as u64).to_le_bytes();
            }
            Param::Tma(_) => return Err(Error::internal("a TMA descriptor past the check")),
            Param::Scalar(scalar) => {
                let bytes = scalar.bytes();
                value[..bytes.len()].copy_from_slice(&bytes);
            }
        }
        values.push(value);
    }
    let global_scratch = match kernel.global_scratch {
        Some((per_block, align)) => {
            let blocks: u64 = call.grid.iter().map(|&g| u64::from(g)).product::<u64>()
                * u64::from(kernel.ctas_per_cluster);
            let bytes = blocks
                .checked_mul(u64::from(per_block))
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| {
                    Error::invalid_argument(format!("kernel {name}: global scratch too large"))
                })?;
            aligned_scratch(scratch, bytes, align as usize)?
        }
        None => std::ptr::null_mut(),
    };
    values.push((global_scratch as u64).to_le_bytes());
    values.push([0; 8]); // the profiling buffer
    let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
    let function = gpu.user_function(key, name, || match &kernel.code {
        // The driver reads PTX up to its NUL.
        Code::Ptx(ptx) => [ptx.as_bytes(), &[0]].concat(),
        Code::Cubin(cubin) => cubin.clone(),
    })?;
    let shape = LaunchShape {
        grid: call.grid,
        block: [kernel.threads_per_block, 1, 1],
        cluster: kernel.ctas_per_cluster,
        shared: kernel.shared_mem_bytes,
    };
    gpu.launch_with_params(function, name, shape, &mut params)
}

/// PTX entries checked so far, by module text and entry name; an entry stays for the
/// process's life, so its address keys its loaded function.
#[allow(clippy::type_complexity)]
static ENTRIES: OnceLock<Mutex<HashMap<String, HashMap<String, Arc<Vec<EntryParam>>>>>> =
    OnceLock::new();

/// The `.param` list of `entry` in `ptx`, read once.
fn entry_params(ptx: &str, entry: &str) -> Result<Arc<Vec<EntryParam>>> {
    let entries = ENTRIES.get_or_init(Default::default);
    let cached = |entries: &HashMap<String, HashMap<String, Arc<Vec<EntryParam>>>>| {
        entries.get(ptx).and_then(|m| m.get(entry)).cloned()
    };
    if let Some(params) = cached(&entries.lock().unwrap_or_else(|e| e.into_inner())) {
        return Ok(params);
    }
    let read = ptx::entry_params(ptx, entry)
        .ok_or_else(|| format!("kernel {entry}: the PTX defines no entry of that name"))
        .and_then(|params| params.map_err(|e| format!("kernel {entry}: {e}")))
        .map_err(Error::invalid_argument)?;
    let mut entries = entries.lock().unwrap_or_else(|e| e.into_inner());
    let module = entries.entry(ptx.to_owned()).or_default();
    Ok(module
        .entry(entry.to_owned())
        .or_insert_with(|| Arc::new(read))
        .clone())
}

#[allow(clippy::too_many_arguments)]
fn kernel_call(
    stream: Stream,
    buffers: Buffers<'_>,
    ptx: &str,
    entry: &str,
    grid: Span<'_, i64>,
    block: Span<'_, i64>,
    shared_mem_bytes: i64,
    params: Span<'_, i64>,
    scalars: Attrs<'_>,
    num_batch_dims: i64,
) -> Result<()> {
    let invalid = Error::invalid_argument;
    let shape = typed::shape(entry, grid.0, block.0, shared_mem_bytes).map_err(invalid)?;
    let (operands, results) = (buffers.args.len(), buffers.rets.len());
    let args = typed::args(entry, params.0, scalars, operands, results).map_err(invalid)?;
    let declared = entry_params(ptx, entry)?;
    typed::check_args(entry, &declared, &args).map_err(invalid)?;
    let all: Vec<_> = buffers.args.iter().chain(&buffers.rets).collect();
    let dims: Vec<&[i64]> = all.iter().map(|b| b.dims()).collect();
    let batch = typed::batch(entry, num_batch_dims, &dims).map_err(invalid)?;
    if batch == 0 {
        return Ok(());
    }
    // Each buffer's base address and the bytes of one batch element of it.
    let elements = all
        .iter()
        .map(|b| {
            let bytes = b.element_count()?.checked_mul(b.dtype_size()?);
            let bytes = bytes.ok_or_else(|| b.mismatch("a size in bytes".into(), "more".into()))?;
            Ok((b.data_ptr() as u64, (bytes / batch) as u64))
        })
        .collect::<Result<Vec<(u64, u64)>>>()?;
    let gpu = GpuStream::adopt(stream)?;
    let function = gpu.user_function(Arc::as_ptr(&declared) as usize, entry, || {
        // The driver reads PTX up to its NUL.
        [ptx.as_bytes(), &[0]].concat()
    })?;
    let shape = LaunchShape {
        grid: shape.grid,
        block: shape.block,
        cluster: 1,
        shared: shape.shared_mem_bytes,
    };
    for element in 0..batch as u64 {
        // The values the parameters point to: addresses and scalars, 8 bytes each at most.
        let mut values: Vec<[u8; 8]> = args
            .iter()
            .map(|arg| {
                let mut value = [0u8; 8];
                match arg {
                    Arg::Buffer(i) => {
                        let (base, bytes) = elements[*i];
                        value = (base + element * bytes).to_le_bytes();
                    }
                    Arg::Scalar(scalar) => {
                        let bytes = scalar.bytes();
                        value[..bytes.len()].copy_from_slice(&bytes);
                    }
                }
                value
            })
            .collect();
        let mut params: Vec<*mut c_void> =
            values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        // SAFETY: the parameters match the entry's `.param` list (checked above); the
        // addresses are within XLA's buffers of this call, which outlive its kernels.
        unsafe { gpu.launch_with_params(function, entry, shape, &mut params)? };
    }
    Ok(())
}

/// `bytes` of XLA's scratch at an address divisible by `align` (XLA aligns to 16 at most).
fn aligned_scratch(scratch: &ScratchAllocator<'_>, bytes: usize, align: usize) -> Result<*mut c_void> {
    if bytes == 0 {
        return Ok(std::ptr::null_mut());
    }
    let align = align.max(1);
    let padded = bytes
        .checked_add(align - 1)
        .ok_or_else(|| Error::invalid_argument("global scratch too large"))?;
    let base = scratch.allocate(padded, 16)? as usize;
    Ok((base.next_multiple_of(align)) as *mut c_void)
}
