//! Compiled-kernel calls: jaxlib's Triton kernel-call contract (`triton_kernel_call`, emitted
//! by jax-triton), read and checked here on any platform, and ferrax's own typed call of a
//! kernel of the caller's PTX ([`typed`], `ferrax.kernel_call`); the launches are the CUDA
//! part's (`cuda.rs`, targets `ferrax_triton_kernel_call` and `ferrax_kernel_call`).
//!
//! jaxlib's contract (`jaxlib/gpu/triton_kernels.cc`): the `opaque` attribute is a
//! zlib-compressed `TritonAnyKernelCall` proto ([`proto`]): one kernel call, or an autotuned
//! set of them (one is chosen by timing, once per configuration), with user metadata and a
//! name. A call is a kernel (PTX or a cubin, an entry name, `num_warps · 32` threads per block,
//! `num_ctas` blocks per cluster, dynamic shared memory, optional per-block global scratch), a
//! grid, and parameters: an array takes the next buffer (operands, then results), its first
//! `bytes_to_zero` bytes zeroed before launch and its address checked against
//! `ptr_divisibility`; a TMA descriptor is built from the next buffer; scalars pass by value.
//! Two pointers always follow: the global scratch (or null) and a null profiling buffer.
//!
//! What is checked here, before any launch, naming the kernel: the entry exists in the PTX and
//! its `.param` list takes these parameters (sizes; the two trailing pointers may be absent), the
//! block and grid are within every CUDA device's limits, and the sizes add up.

pub mod cuda;
pub mod proto;
pub mod ptx;
pub mod typed;

use std::ffi::CStr;

/// ferrax's target for jaxlib's `triton_kernel_call_ffi` contract (registered for CUDA).
pub const TRITON_KERNEL_CALL: &CStr = c"ferrax_triton_kernel_call";

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cuda::HANDLERS];

use prost::Message;
use ptx::EntryParam;

/// The largest decompressed payload accepted (a PTX module is at most a few MiB).
const MAX_PAYLOAD_BYTES: usize = 256 << 20;
/// CUDA's grid limits (all devices since sm_30): x, y, z.
const MAX_GRID: [u64; 3] = [(1 << 31) - 1, 65535, 65535];
const MAX_WARPS: u32 = 32;
/// The bytes of a `CUtensorMap`, the by-value TMA descriptor parameter.
pub const TMA_DESCRIPTOR_BYTES: usize = 128;

/// The kernel's code as the driver loads it.
#[derive(Clone, Debug, PartialEq)]
pub enum Code {
    Ptx(String),
    Cubin(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub code: Code,
    pub threads_per_block: u32,
    pub ctas_per_cluster: u32,
    pub shared_mem_bytes: u32,
    pub compute_capability: u32,
    /// Per-block global scratch: (bytes, alignment).
    pub global_scratch: Option<(u32, u32)>,
    /// The entry's `.param` list where the code is PTX (a cubin's is not read).
    pub entry_params: Option<Vec<EntryParam>>,
}

/// A scalar parameter, passed by value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl Scalar {
    /// Its bytes as the kernel reads them (little-endian, as CUDA devices are).
    pub fn bytes(self) -> Vec<u8> {
        match self {
            Scalar::Bool(v) => vec![v as u8],
            Scalar::I32(v) => v.to_le_bytes().to_vec(),
            Scalar::U32(v) => v.to_le_bytes().to_vec(),
            Scalar::I64(v) => v.to_le_bytes().to_vec(),
            Scalar::U64(v) => v.to_le_bytes().to_vec(),
            Scalar::F32(v) => v.to_le_bytes().to_vec(),
            Scalar::F64(v) => v.to_le_bytes().to_vec(),
        }
    }
    pub fn type_name(self) -> &'static str {
        match self {
            Scalar::Bool(_) => "bool",
            Scalar::I32(_) => "i32",
            Scalar::U32(_) => "u32",
            Scalar::I64(_) => "i64",
            Scalar::U64(_) => "u64",
            Scalar::F32(_) => "f32",
            Scalar::F64(_) => "f64",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// The next buffer's address.
    Array {
        bytes_to_zero: u64,
        divisibility: u64,
    },
    /// A tiled TMA descriptor of the next buffer.
    Tma(proto::TmaTiled),
    Scalar(Scalar),
}

impl Param {
    /// The bytes the kernel's `.param` takes.
    pub fn size(&self) -> usize {
        match self {
            Param::Array { .. } => 8,
            Param::Tma(_) => TMA_DESCRIPTOR_BYTES,
            Param::Scalar(s) => s.bytes().len(),
        }
    }
    /// Whether it takes the next buffer.
    pub fn takes_buffer(&self) -> bool {
        !matches!(self, Param::Scalar(_))
    }
    fn describe(&self) -> String {
        match self {
            Param::Array { .. } => "array (8 bytes)".into(),
            Param::Tma(_) => format!("TMA descriptor ({TMA_DESCRIPTOR_BYTES} bytes)"),
            Param::Scalar(s) => format!("{} ({} bytes)", s.type_name(), s.bytes().len()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct KernelCall {
    pub kernel: Kernel,
    pub grid: [u32; 3],
    pub params: Vec<Param>,
}

impl KernelCall {
    /// How many buffers (operands and results together) it takes.
    pub fn buffers(&self) -> usize {
        self.params.iter().filter(|p| p.takes_buffer()).count()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneConfig {
    pub call: KernelCall,
    pub description: String,
}

/// An operand the kernel also writes (aliased to a result): autotuning restores it between
/// trials. `input` numbers the operands and `output` the results, each from 0 (jax-triton
/// writes its `input_output_aliases` so).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alias {
    pub input: u32,
    pub output: u32,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Calls {
    One(KernelCall),
    Autotuned {
        name: String,
        configs: Vec<AutotuneConfig>,
        aliases: Vec<Alias>,
    },
}

/// A decoded and checked `opaque` payload.
#[derive(Clone, Debug, PartialEq)]
pub struct Payload {
    pub calls: Calls,
    pub name: String,
    pub metadata: Vec<u8>,
}

impl Payload {
    /// Every kernel call it may launch (the one, or each configuration).
    pub fn candidates(&self) -> Vec<&KernelCall> {
        match &self.calls {
            Calls::One(call) => vec![call],
            Calls::Autotuned { configs, .. } => configs.iter().map(|c| &c.call).collect(),
        }
    }

    /// How many buffers (operands and results together) it takes.
    pub fn buffers(&self) -> usize {
        self.candidates().first().map_or(0, |call| call.buffers())
    }

    /// Reads jaxlib's `opaque` attribute: zlib-compressed unless `compressed` is false.
    pub fn decode(opaque: &[u8], compressed: bool) -> Result<Self, String> {
        let inflated;
        let bytes = if compressed {
            inflated =
                miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(opaque, MAX_PAYLOAD_BYTES)
                    .map_err(|e| {
                        format!(
                            "opaque: expected a zlib-compressed TritonAnyKernelCall proto ({e})"
                        )
                    })?;
            &inflated[..]
        } else {
            opaque
        };
        let any = proto::TritonAnyKernelCall::decode(bytes)
            .map_err(|e| format!("opaque: not a TritonAnyKernelCall proto ({e})"))?;
        let calls = match any.value {
            Some(proto::AnyCall::KernelCall(call)) => Calls::One(kernel_call(call)?),
            Some(proto::AnyCall::Autotuned(tuned)) => autotuned(tuned)?,
            None => return Err("opaque: the proto holds no kernel call".into()),
        };
        Ok(Payload {
            calls,
            name: any.name,
            metadata: any.metadata,
        })
    }
}

fn autotuned(tuned: proto::TritonAutotunedKernelCall) -> Result<Calls, String> {
    let name = tuned.name;
    if tuned.configs.is_empty() {
        return Err(format!("autotuned call {name:?}: no configuration"));
    }
    let configs = tuned
        .configs
        .into_iter()
        .map(|config| {
            let description = config.description;
            let at =
                |e: String| format!("autotuned call {name:?}, configuration {description:?}: {e}");
            let call = config
                .kernel_call
                .ok_or_else(|| at("no kernel call".into()))?;
            Ok(AutotuneConfig {
                call: kernel_call(call).map_err(at)?,
                description,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let buffers = configs[0].call.buffers();
    if let Some(other) = configs.iter().find(|c| c.call.buffers() != buffers) {
        return Err(format!(
            "autotuned call {name:?}: configuration {:?} takes {} buffers, the first takes {buffers}",
            other.description,
            other.call.buffers()
        ));
    }
    let aliases = tuned
        .input_output_aliases
        .iter()
        .map(|a| {
            let alias = Alias {
                input: a.input_buffer_idx,
                output: a.output_buffer_idx,
                bytes: a.buffer_size_bytes,
            };
            // Operands and results are each fewer than the buffers (the call checks the
            // result against its own count).
            if alias.input as usize >= buffers || alias.output as usize >= buffers {
                return Err(format!(
                    "autotuned call {name:?}: alias {} -> {} outside its {buffers} buffers",
                    alias.input, alias.output
                ));
            }
            Ok(alias)
        })
        .collect::<Result<_, String>>()?;
    Ok(Calls::Autotuned {
        name,
        configs,
        aliases,
    })
}

fn kernel_call(call: proto::TritonKernelCall) -> Result<KernelCall, String> {
    let kernel = call.kernel.ok_or("a kernel call without a kernel")?;
    if kernel.kernel_name.is_empty() {
        return Err("a kernel without a name".into());
    }
    let name = kernel.kernel_name.clone();
    let at = |message: String| format!("kernel {name}: {message}");
    let params = call
        .parameters
        .into_iter()
        .enumerate()
        .map(|(index, p)| {
            Ok(match p.value {
                Some(proto::ParameterValue::Array(a)) => Param::Array {
                    bytes_to_zero: a.bytes_to_zero,
                    divisibility: a.ptr_divisibility,
                },
                Some(proto::ParameterValue::Tma(t)) => Param::Tma(
                    t.tiled
                        .ok_or_else(|| at(format!("parameter {index}: an empty TMA descriptor")))?,
                ),
                Some(proto::ParameterValue::Bool(v)) => Param::Scalar(Scalar::Bool(v)),
                Some(proto::ParameterValue::I32(v)) => Param::Scalar(Scalar::I32(v)),
                Some(proto::ParameterValue::U32(v)) => Param::Scalar(Scalar::U32(v)),
                Some(proto::ParameterValue::I64(v)) => Param::Scalar(Scalar::I64(v)),
                Some(proto::ParameterValue::U64(v)) => Param::Scalar(Scalar::U64(v)),
                Some(proto::ParameterValue::F32(v)) => Param::Scalar(Scalar::F32(v)),
                Some(proto::ParameterValue::F64(v)) => Param::Scalar(Scalar::F64(v)),
                None => return Err(at(format!("parameter {index} has no value"))),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let kernel = checked_kernel(kernel, &params)?;
    let grid = [call.grid_0, call.grid_1, call.grid_2];
    let cluster_x = u64::from(grid[0]) * u64::from(kernel.ctas_per_cluster);
    let blocks = [cluster_x, u64::from(grid[1]), u64::from(grid[2])];
    if blocks
        .iter()
        .zip(MAX_GRID)
        .any(|(&b, max)| b == 0 || b > max)
    {
        return Err(at(format!(
            "grid {grid:?} ({} blocks per cluster): each dimension must be at least 1 and \
             the blocks at most {MAX_GRID:?}",
            kernel.ctas_per_cluster
        )));
    }
    Ok(KernelCall {
        kernel,
        grid,
        params,
    })
}

fn checked_kernel(kernel: proto::TritonKernel, params: &[Param]) -> Result<Kernel, String> {
    let name = kernel.kernel_name;
    let at = |message: String| format!("kernel {name}: {message}");
    if kernel.num_warps == 0 || kernel.num_warps > MAX_WARPS {
        return Err(at(format!(
            "num_warps = {}: expected 1 to {MAX_WARPS} (at most 1024 threads per block)",
            kernel.num_warps
        )));
    }
    let ctas_per_cluster = kernel.num_ctas.unwrap_or(1);
    if ctas_per_cluster == 0 {
        return Err(at("num_ctas = 0: expected at least 1".into()));
    }
    let (code, entry_params) = match kernel.module_image {
        Some(image) if !image.object_file.is_empty() => (Code::Cubin(image.object_file), None),
        _ if kernel.ptx.is_empty() => return Err(at("neither PTX nor a compiled module".into())),
        _ => {
            let entry = ptx::entry_params(&kernel.ptx, &name)
                .ok_or_else(|| at("the PTX defines no entry of that name".into()))?
                .map_err(at)?;
            check_params(&entry, params).map_err(at)?;
            (Code::Ptx(kernel.ptx), Some(entry))
        }
    };
    Ok(Kernel {
        name,
        code,
        threads_per_block: kernel.num_warps * 32,
        ctas_per_cluster,
        shared_mem_bytes: kernel.shared_mem_bytes,
        compute_capability: kernel.compute_capability,
        global_scratch: kernel
            .global_scratch_size
            .map(|size| (size, kernel.global_scratch_align.unwrap_or(1).max(1))),
        entry_params,
    })
}

/// The call's parameters against the entry's: the same sizes in order, then up to two trailing
/// pointers (the global scratch and the profiling buffer, which older kernels do not declare).
fn check_params(entry: &[EntryParam], params: &[Param]) -> Result<(), String> {
    let fits = entry.len() >= params.len()
        && entry.len() <= params.len() + 2
        && entry.iter().zip(params).all(|(e, p)| e.size == p.size())
        && entry[params.len()..].iter().all(|e| e.size == 8);
    if fits {
        return Ok(());
    }
    let declared: Vec<String> = entry.iter().map(|e| format!("{} bytes", e.size)).collect();
    let passed: Vec<String> = params.iter().map(Param::describe).collect();
    Err(format!(
        "the call's parameters [{}] (then two pointers) do not match the entry's .param list \
         [{}]",
        passed.join(", "),
        declared.join(", ")
    ))
}

#[cfg(test)]
mod tests;
