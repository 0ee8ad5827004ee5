//! jaxlib's `jaxlib/gpu/triton.proto` (package `jax_triton`) as prost messages: the wire
//! format only; [`super::KernelCall`] is what ferrax checks and launches.

use prost::{Message, Oneof};

#[derive(Clone, PartialEq, Message)]
pub struct TritonKernel {
    #[prost(string, tag = "1")]
    pub kernel_name: String,
    #[prost(uint32, tag = "2")]
    pub num_warps: u32,
    #[prost(uint32, optional, tag = "10")]
    pub num_ctas: Option<u32>,
    #[prost(uint32, tag = "3")]
    pub shared_mem_bytes: u32,
    #[prost(string, tag = "4")]
    pub ptx: String,
    #[prost(string, tag = "5")]
    pub ttir: String,
    #[prost(uint32, tag = "6")]
    pub compute_capability: u32,
    #[prost(message, optional, tag = "11")]
    pub module_image: Option<ModuleImage>,
    #[prost(uint32, optional, tag = "12")]
    pub global_scratch_size: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub global_scratch_align: Option<u32>,
}

/// A kernel already compiled to machine code (a cubin).
#[derive(Clone, PartialEq, Message)]
pub struct ModuleImage {
    #[prost(bytes = "vec", tag = "1")]
    pub object_file: Vec<u8>,
    #[prost(string, tag = "2")]
    pub kernel_name: String,
    #[prost(uint32, tag = "3")]
    pub shared_mem_bytes: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct ArrayParameter {
    #[prost(uint64, tag = "1")]
    pub bytes_to_zero: u64,
    #[prost(uint64, tag = "2")]
    pub ptr_divisibility: u64,
}

/// A TMA descriptor built on the host from the next buffer (jaxlib 0.12's
/// `create_tma_descriptor_parameter`): its one variant, a tiled map.
#[derive(Clone, PartialEq, Message)]
pub struct TmaParameter {
    #[prost(message, optional, tag = "1")]
    pub tiled: Option<TmaTiled>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TmaTiled {
    #[prost(uint32, tag = "1")]
    pub elem_type: u32,
    #[prost(uint32, tag = "2")]
    pub swizzle: u32,
    #[prost(uint64, repeated, tag = "3")]
    pub shape: Vec<u64>,
    #[prost(uint64, repeated, tag = "4")]
    pub strides: Vec<u64>,
    #[prost(uint32, repeated, tag = "5")]
    pub block_shape: Vec<u32>,
    #[prost(uint32, tag = "6")]
    pub oob_fill: u32,
}

#[derive(Clone, PartialEq, Oneof)]
pub enum ParameterValue {
    #[prost(message, tag = "1")]
    Array(ArrayParameter),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int32, tag = "3")]
    I32(i32),
    #[prost(uint32, tag = "4")]
    U32(u32),
    #[prost(int64, tag = "5")]
    I64(i64),
    #[prost(uint64, tag = "6")]
    U64(u64),
    #[prost(float, tag = "7")]
    F32(f32),
    #[prost(double, tag = "8")]
    F64(f64),
    #[prost(message, tag = "9")]
    Tma(TmaParameter),
}

#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    #[prost(oneof = "ParameterValue", tags = "1, 2, 3, 4, 5, 6, 7, 8, 9")]
    pub value: Option<ParameterValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TritonKernelCall {
    #[prost(message, optional, tag = "1")]
    pub kernel: Option<TritonKernel>,
    #[prost(uint32, tag = "2")]
    pub grid_0: u32,
    #[prost(uint32, tag = "3")]
    pub grid_1: u32,
    #[prost(uint32, tag = "4")]
    pub grid_2: u32,
    #[prost(message, repeated, tag = "5")]
    pub parameters: Vec<Parameter>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AutotuneConfig {
    #[prost(message, optional, tag = "1")]
    pub kernel_call: Option<TritonKernelCall>,
    #[prost(string, tag = "2")]
    pub description: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct InputOutputAlias {
    #[prost(uint32, tag = "1")]
    pub input_buffer_idx: u32,
    #[prost(uint32, tag = "2")]
    pub output_buffer_idx: u32,
    #[prost(uint64, tag = "3")]
    pub buffer_size_bytes: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct TritonAutotunedKernelCall {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub configs: Vec<AutotuneConfig>,
    #[prost(message, repeated, tag = "3")]
    pub input_output_aliases: Vec<InputOutputAlias>,
}

#[derive(Clone, PartialEq, Oneof)]
pub enum AnyCall {
    #[prost(message, tag = "1")]
    KernelCall(TritonKernelCall),
    #[prost(message, tag = "2")]
    Autotuned(TritonAutotunedKernelCall),
}

#[derive(Clone, PartialEq, Message)]
pub struct TritonAnyKernelCall {
    #[prost(oneof = "AnyCall", tags = "1, 2")]
    pub value: Option<AnyCall>,
    #[prost(bytes = "vec", tag = "3")]
    pub metadata: Vec<u8>,
    #[prost(string, tag = "4")]
    pub name: String,
}
