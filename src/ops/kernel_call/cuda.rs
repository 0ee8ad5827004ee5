//! The CUDA handlers of compiled-kernel calls on XLA's stream: jaxlib's `triton_kernel_call`
//! contract, from the payload decoded and checked once per distinct `opaque`; ferrax's own
//! typed call, from the PTX entry's `.param` list read once per module and entry.

use super::ptx::{self, EntryParam};
use super::typed::{self, Arg, KERNEL_CALL};
use super::{Alias, AutotuneConfig, Calls, Code, KernelCall, Param, Payload, TRITON_KERNEL_CALL};
use crate::cuda::{GpuStream, LaunchShape};
use crate::ffi::{Attrs, Buffers, Error, Result, ScratchAllocator, Span, Stream};
use crate::ffi_handlers;
use crate::memory;
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

/// A decoded payload, and for an autotuned set the configuration chosen on its first call.
struct Decoded {
    payload: Payload,
    chosen: Mutex<Option<usize>>,
}

/// Payloads decoded so far, by their bytes (jaxlib caches the same way); a payload stays for
/// the process's life, so the addresses of its calls key their loaded modules.
static PAYLOADS: OnceLock<Mutex<HashMap<Vec<u8>, Arc<Decoded>>>> = OnceLock::new();

fn payload(opaque: &[u8]) -> Result<Arc<Decoded>> {
    let payloads = PAYLOADS.get_or_init(Default::default);
    if let Some(p) = payloads.lock().unwrap_or_else(|e| e.into_inner()).get(opaque) {
        return Ok(p.clone());
    }
    let decoded = Arc::new(Decoded {
        payload: Payload::decode(opaque, true).map_err(Error::invalid_argument)?,
        chosen: Mutex::new(None),
    });
    let mut payloads = payloads.lock().unwrap_or_else(|e| e.into_inner());
    Ok(payloads.entry(opaque.to_vec()).or_insert(decoded).clone())
}

fn triton_kernel_call(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    buffers: Buffers<'_>,
    opaque: &[u8],
) -> Result<()> {
    let decoded = payload(opaque)?;
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
    let payload = &decoded.payload;
    if pointers.len() != payload.buffers() {
        let kernel = &payload.candidates()[0].kernel.name;
        return Err(Error::invalid_argument(format!(
            "kernel {kernel}: its parameters take {} buffers, the call has {} operands and {} \
             results",
            payload.buffers(),
            buffers.args.len(),
            buffers.rets.len()
        )));
    }
    let gpu = GpuStream::adopt(stream)?;
    let call = match &payload.calls {
        Calls::One(call) => call,
        Calls::Autotuned {
            name,
            configs,
            aliases,
        } => {
            // Held while tuning: another call of the same payload waits for the choice.
            let mut chosen = decoded.chosen.lock().unwrap_or_else(|e| e.into_inner());
            let index = match *chosen {
                Some(index) => index,
                // SAFETY: XLA's buffers of this call, which outlive its kernels on the stream.
                None => *chosen.insert(unsafe {
                    let operands = buffers.args.len();
                    autotune(&gpu, &scratch, name, configs, aliases, operands, &pointers)?
                }),
            };
            &configs[index].call
        }
    };
    let global_scratch = global_scratch(&scratch, call)?;
    // SAFETY: as above.
    unsafe { launch(&gpu, call, global_scratch, &pointers) }
}

/// The timed run of each configuration: launches for about this long, as jaxlib's autotuner
/// times them, and no more than this many.
const AUTOTUNE_MS: f32 = 10.0;
const AUTOTUNE_MAX_LAUNCHES: u32 = 100;

/// The index of the fastest configuration that fits the device, timed on the call's own
/// buffers as jaxlib's autotuner times them: a warm-up launch of each and one timed launch
/// size the run (launches for about `AUTOTUNE_MS`, 1 to `AUTOTUNE_MAX_LAUNCHES`), then each
/// takes a warm-up launch and that many timed ones. Operands a result aliases (the same
/// buffer) would be overwritten by every trial, so they are saved first and restored after,
/// also when a trial fails. `buffers` are the `operands`, then the results.
///
/// # Safety
/// As [`launch`].
unsafe fn autotune(
    gpu: &GpuStream,
    scratch: &ScratchAllocator<'_>,
    name: &str,
    configs: &[AutotuneConfig],
    aliases: &[Alias],
    operands: usize,
    buffers: &[(*mut c_void, usize)],
) -> Result<usize> {
    if gpu.is_capturing()? {
        // Work enqueued now would be recorded, not run: nothing to time, and the buffers may
        // hold anything.
        return Err(Error::failed_precondition(format!(
            "autotuned call {name:?}: cannot autotune while the stream captures a CUDA graph"
        )));
    }
    let allowed = gpu.max_shared_bytes()?;
    let fitting: Vec<usize> = (0..configs.len())
        .filter(|&i| configs[i].call.kernel.shared_mem_bytes as usize <= allowed)
        .collect();
    if fitting.is_empty() {
        return Err(Error::invalid_argument(format!(
            "autotuned call {name:?}: no configuration fits the device's {allowed} bytes of \
             shared memory per block"
        )));
    }
    let mut saved: Vec<(*mut c_void, Vec<u8>)> = Vec::new();
    for alias in aliases {
        let (input, output) = (alias.input as usize, operands + alias.output as usize);
        if input >= operands || output >= buffers.len() {
            return Err(Error::invalid_argument(format!(
                "autotuned call {name:?}: alias of operand {} to result {}, the call has \
                 {operands} operands and {} results",
                alias.input,
                alias.output,
                buffers.len() - operands
            )));
        }
        let (input, bytes) = buffers[input];
        if input != buffers[output].0 || saved.iter().any(|s| s.0 == input) {
            continue;
        }
        let size = usize::try_from(alias.bytes).ok().filter(|&b| b <= bytes);
        let size = size.ok_or_else(|| {
            Error::invalid_argument(format!(
                "autotuned call {name:?}: alias of operand {} to result {} over {} bytes, the \
                 operand has {bytes}",
                alias.input, alias.output, alias.bytes
            ))
        })?;
        let mut copy = memory::vec_of(size, 0u8).map_err(|e| {
            let saving = format!("saving aliased operand {}", alias.input);
            Error::resource_exhausted(format!("autotuned call {name:?}: {saving}: {}", e.message))
        })?;
        gpu.download(&mut copy, input)?;
        saved.push((input, copy));
    }
    // Each configuration that fits, with its global scratch.
    let trials = fitting
        .iter()
        .map(|&i| Ok((i, global_scratch(scratch, &configs[i].call)?)))
        .collect::<Result<Vec<(usize, *mut c_void)>>>()?;
    let time = |(index, global): (usize, *mut c_void), launches: u32| {
        let call = &configs[index].call;
        launch(gpu, call, global, buffers)?; // warm-up
        gpu.time(|| (0..launches).try_for_each(|_| launch(gpu, call, global, buffers)))
    };
    let fastest = || {
        let mut once = f32::INFINITY;
        for &trial in &trials {
            once = once.min(time(trial, 1)?);
        }
        // A float to int cast saturates: no time at all runs the most launches.
        let launches = ((AUTOTUNE_MS / once) as u32).clamp(1, AUTOTUNE_MAX_LAUNCHES);
        let (mut best, mut fastest) = (f32::INFINITY, fitting[0]);
        for &trial in &trials {
            let t = time(trial, launches)?;
            if t < best {
                (best, fastest) = (t, trial.0);
            }
        }
        Ok(fastest)
    };
    let fastest = fastest();
    for (input, copy) in &saved {
        gpu.upload(*input, copy)?;
    }
    fastest
}

/// The global scratch `call`'s kernel asks for (per block, times its blocks) from XLA's
/// scratch, or null.
fn global_scratch(scratch: &ScratchAllocator<'_>, call: &KernelCall) -> Result<*mut c_void> {
    let Some((per_block, align)) = call.kernel.global_scratch else {
        return Ok(std::ptr::null_mut());
    };
    let blocks: u64 = call.grid.iter().map(|&g| u64::from(g)).product::<u64>()
        * u64::from(call.kernel.ctas_per_cluster);
    let bytes = blocks
        .checked_mul(u64::from(per_block))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| {
            let name = &call.kernel.name;
            Error::invalid_argument(format!("kernel {name}: global scratch too large"))
        })?;
    aligned_scratch(scratch, bytes, align as usize)
}

/// Enqueues `call` with `buffers` (address, bytes) for its array parameters, in order, and
/// `global_scratch` (from [`global_scratch`]) after them.
///
/// # Safety
/// The buffers are device memory that stays valid until the kernel has run on the stream.
unsafe fn launch(
    gpu: &GpuStream,
    call: &KernelCall,
    global_scratch: *mut c_void,
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
                if *divisibility > 1 && !(pointer as u64).is_multiple_of(*divisibility) {
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
    values.push((global_scratch as u64).to_le_bytes());
    values.push([0; 8]); // the profiling buffer
    let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
    // The call lives in a payload kept for the process's life: its address names its code.
    let function = gpu.user_function(std::ptr::from_ref(call) as usize, name, || {
        match &kernel.code {
            // The driver reads PTX up to its NUL.
            Code::Ptx(ptx) => [ptx.as_bytes(), &[0]].concat(),
            Code::Cubin(cubin) => cubin.clone(),
        }
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
