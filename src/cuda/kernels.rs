//! What the CUDA handlers need to pick ferrax's PTX kernels: the element types they and the
//! libraries take, and the launch plan of a small-matrix kernel for a batch, if one takes it.

use super::cublas::Batched;
use super::cusolver::Dense;
use super::GpuStream;
use crate::ffi::{MatrixBatch, Result};
use crate::linalg::LapackScalar;
use ferrax_kernels::launch::{LaunchConfig, ScalarKind};
use num_complex::Complex;

/// The four element types on the GPU: ferrax's kernels' ([`ScalarKind`]), cuSOLVER's and
/// cuBLAS's.
pub(crate) trait GpuScalar: LapackScalar + Dense + Batched {
    const KIND: ScalarKind;
}

impl GpuScalar for f32 {
    const KIND: ScalarKind = ScalarKind::F32;
}
impl GpuScalar for f64 {
    const KIND: ScalarKind = ScalarKind::F64;
}
impl GpuScalar for Complex<f32> {
    const KIND: ScalarKind = ScalarKind::C64;
}
impl GpuScalar for Complex<f64> {
    const KIND: ScalarKind = ScalarKind::C128;
}

/// The launch of ferrax's small-matrix GPU kernel for `shape` on `gpu`'s device (`plan` gets
/// m, n, the batch and the shared memory a block may opt in to), if one takes it; the GPU
/// handlers give the rest to cuSOLVER or cuBLAS.
pub(crate) fn small_kernel<A>(
    gpu: &GpuStream,
    shape: MatrixBatch,
    plan: impl FnOnce(u32, u32, u64, usize) -> Option<LaunchConfig<A>>,
) -> Result<Option<LaunchConfig<A>>> {
    let (Ok(m), Ok(n)) = (u32::try_from(shape.rows), u32::try_from(shape.cols)) else {
        return Ok(None);
    };
    Ok(plan(m, n, shape.batch as u64, gpu.max_shared_bytes()?))
}
