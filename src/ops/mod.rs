//! One module per op family. Each declares its target name once and the handlers bound to it
//! (the same name is registered per platform, with that platform's handler).

pub mod cholesky_update;
pub mod eig;
pub mod eigenvalues;
pub mod eigh;
pub mod getrf;
pub mod hessenberg;
pub mod pivots;
pub mod potrf;
pub mod qr;
pub mod schur;
pub mod sparse;
pub mod svd;
pub mod threefry;
pub mod tridiagonal;
pub mod tridiagonal_solve;
pub mod trsm;

use crate::ffi::{Platform, Registration};

/// Every handler ferrax registers, for `ferrax_targets`.
pub(crate) fn handlers() -> impl Iterator<Item = &'static Registration> {
    [
        getrf::HANDLERS,
        eigh::HANDLERS,
        svd::HANDLERS,
        eig::HANDLERS,
        schur::HANDLERS,
        hessenberg::HANDLERS,
        tridiagonal::HANDLERS,
    ]
    .into_iter()
    .flatten()
    .flat_map(|h| h.iter())
    .chain(LEGACY.iter())
}

const LEGACY: &[Registration] = &[
    Registration { target: threefry::TARGET, platform: Platform::Cpu, handler: threefry::ferrax_cpu_threefry2x32 },
    Registration { target: pivots::TARGET, platform: Platform::Cpu, handler: pivots::ferrax_cpu_lu_pivots_to_permutation },
    Registration { target: potrf::TARGET, platform: Platform::Cpu, handler: potrf::ferrax_cpu_potrf },
    Registration { target: potrf::FUSED_TARGET, platform: Platform::Cpu, handler: potrf::ferrax_cpu_cholesky },
    Registration { target: trsm::TARGET, platform: Platform::Cpu, handler: trsm::ferrax_cpu_trsm },
    Registration { target: qr::GEQRF_TARGET, platform: Platform::Cpu, handler: qr::ferrax_cpu_geqrf },
    Registration { target: qr::QR_TARGET, platform: Platform::Cpu, handler: qr::ferrax_cpu_qr },
    Registration { target: qr::ORGQR_TARGET, platform: Platform::Cpu, handler: qr::ferrax_cpu_orgqr },
    Registration { target: qr::ORMQR_TARGET, platform: Platform::Cpu, handler: qr::ferrax_cpu_ormqr },
    Registration { target: qr::GEQP3_TARGET, platform: Platform::Cpu, handler: qr::ferrax_cpu_geqp3 },
    Registration { target: tridiagonal_solve::GTSV_TARGET, platform: Platform::Cpu, handler: tridiagonal_solve::ferrax_cpu_gtsv },
    Registration { target: tridiagonal_solve::PERTURBED_TARGET, platform: Platform::Cpu, handler: tridiagonal_solve::ferrax_cpu_tridiagonal_solve_perturbed },
    Registration { target: sparse::TARGET, platform: Platform::Cpu, handler: sparse::ferrax_cpu_csr_sparse_dense },
    Registration { target: threefry::TARGET, platform: Platform::Cuda, handler: threefry::ferrax_cuda_threefry2x32 },
    Registration { target: threefry::BITS_TARGET, platform: Platform::Cuda, handler: threefry::ferrax_cuda_threefry2x32_bits },
    Registration { target: pivots::TARGET, platform: Platform::Cuda, handler: pivots::ferrax_cuda_lu_pivots_to_permutation },
    Registration { target: potrf::TARGET, platform: Platform::Cuda, handler: potrf::ferrax_cuda_potrf },
    Registration { target: potrf::FUSED_TARGET, platform: Platform::Cuda, handler: potrf::ferrax_cuda_cholesky },
    Registration { target: qr::GEQRF_TARGET, platform: Platform::Cuda, handler: qr::ferrax_cuda_geqrf },
    Registration { target: qr::QR_TARGET, platform: Platform::Cuda, handler: qr::ferrax_cuda_qr },
    Registration { target: qr::ORGQR_TARGET, platform: Platform::Cuda, handler: qr::ferrax_cuda_orgqr },
    Registration { target: qr::ORMQR_TARGET, platform: Platform::Cuda, handler: qr::ferrax_cuda_ormqr },
    Registration { target: cholesky_update::TARGET, platform: Platform::Cuda, handler: cholesky_update::ferrax_cuda_cholesky_update },
];

use crate::ffi::{Buffer, Error, MatrixBatch, NativeType, Result, ThreadPool};
use ferrax_cpu_fallback::Lapack;
pub(crate) use ferrax_kernels::small::lanes::Layout;
pub(crate) use crate::cuda::{small_kernel, GpuLibrary};
pub(crate) use crate::linalg::parallel::{
    by_simd_groups as by_lanes, for_each_chunk, for_each_parallel, SharedMut, MIN_FLOPS_PER_TASK,
};
use num_complex::Complex;

/// The element type of a GPU linear-algebra operand, or an error naming the operand.
pub(crate) fn gpu_scalar_kind(buffer: &Buffer<'_>) -> Result<ferrax_kernels::launch::ScalarKind> {
    use ferrax_kernels::launch::ScalarKind;
    Ok(match buffer.dtype() {
        crate::ffi::DataType::F32 => ScalarKind::F32,
        crate::ffi::DataType::F64 => ScalarKind::F64,
        crate::ffi::DataType::C64 => ScalarKind::C64,
        crate::ffi::DataType::C128 => ScalarKind::C128,
        other => {
            return Err(buffer.mismatch("dtype f32, f64, c64 or c128".into(), format!("{other:?}")))
        }
    })
}

/// XLA's stream for a GPU handler whose result `out` replaces `a`: checks `out` against `a`.
pub(crate) fn gpu_replacing(
    stream: crate::ffi::Stream,
    a: &Buffer<'_>,
    out: &Buffer<'_>,
) -> Result<crate::cuda::GpuStream> {
    out.expect_dtype(a.dtype())?;
    out.expect_dims(a.dims())?;
    crate::cuda::GpuStream::adopt(stream)
}

/// XLA's stream for a GPU handler that factors `a` in place in `out`: checks `out` against
/// `a` and copies `a` into it (nothing to copy when XLA aliased them, as jax's lowerings ask).
pub(crate) fn gpu_in_place(
    stream: crate::ffi::Stream,
    a: &Buffer<'_>,
    out: &Buffer<'_>,
    shape: MatrixBatch,
    kind: ferrax_kernels::launch::ScalarKind,
) -> Result<crate::cuda::GpuStream> {
    let gpu = gpu_replacing(stream, a, out)?;
    gpu.copy(
        out.data_ptr().cast(),
        a.data_ptr().cast(),
        shape.batch * shape.matrix_len() * kind.bytes(),
    )?;
    Ok(gpu)
}

/// An argument and the result that replaces it (jaxlib's in-place contract, or a result of
/// its own where the lowering does not alias them): each task takes its part of the result
/// with [`InPlace::load`], which first copies the argument's elements there unless XLA made
/// the two one buffer, so the copy runs in parallel, right before the elements are worked on.
#[derive(Clone, Copy)]
pub(crate) struct InPlace<T> {
    input: *const T,
    output: SharedMut<T>,
}
unsafe impl<T> Send for InPlace<T> {}
unsafe impl<T> Sync for InPlace<T> {}

/// Checks that `input` and `output` both have dtype `T` and `input`'s shape.
pub(crate) fn expect_same_array<T: NativeType>(
    input: &Buffer<'_>,
    output: &Buffer<'_>,
) -> Result<()> {
    input.expect_dtype(T::DTYPE)?;
    output.expect_dtype(T::DTYPE)?;
    output.expect_dims(input.dims())
}

impl<T: NativeType> InPlace<T> {
    /// Checks that `output` has `input`'s dtype `T` and shape.
    pub fn new(input: &Buffer<'_>, output: &Buffer<'_>) -> Result<Self> {
        expect_same_array::<T>(input, output)?;
        Ok(InPlace {
            input: input.data_ptr().cast(),
            output: SharedMut(output.data_ptr().cast()),
        })
    }

    /// The result's `len` elements from element `start`, holding the argument's.
    ///
    /// # Safety
    /// As [`SharedMut::slice`]; no task writes the argument.
    #[allow(clippy::mut_from_ref)] // the buffer is shared, its parts are not
    pub unsafe fn load<'a>(&self, start: usize, len: usize) -> &'a mut [T] {
        let part = self.output.slice(start, len);
        if self.input != self.output.0.cast_const() {
            std::ptr::copy_nonoverlapping(self.input.add(start), part.as_mut_ptr(), len);
        }
        part
    }

    /// Runs `f` on the `rows×cols` matrix at element `start`, stored in `layout`, as a
    /// column-major matrix (leading dimension `rows`) that becomes the result's: in place for a
    /// column-major one ([`InPlace::load`]); a row-major one is read transposed into `scratch`
    /// (grown as needed) and written back transposed.
    ///
    /// # Safety
    /// As [`InPlace::load`].
    pub unsafe fn column_major<R>(
        &self,
        start: usize,
        rows: usize,
        cols: usize,
        layout: Layout,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T]) -> R,
    ) -> R {
        let len = rows * cols;
        if layout == Layout::ColumnMajor {
            return f(self.load(start, len));
        }
        // Where XLA aliased the two, this reads the result's own elements, before writing them.
        let argument = std::slice::from_raw_parts(self.input.add(start), len);
        if scratch.len() < len {
            // Any values: the transpose overwrites them.
            scratch.extend_from_slice(&argument[scratch.len()..]);
        }
        let column_major = &mut scratch[..len];
        transpose(argument, rows, cols, column_major);
        let result = f(column_major);
        transpose(column_major, cols, rows, self.output.slice(start, len));
        result
    }
}

/// `dst[j·rows + i] = src[i·cols + j]`: the row-major `rows×cols` matrix `src` into `dst`
/// column-major, in square tiles so that the strided side stays in cache.
pub(crate) fn transpose<T: Copy>(src: &[T], rows: usize, cols: usize, dst: &mut [T]) {
    const TILE: usize = 16;
    for i0 in (0..rows).step_by(TILE) {
        for j0 in (0..cols).step_by(TILE) {
            let j1 = (j0 + TILE).min(cols);
            for i in i0..(i0 + TILE).min(rows) {
                for (j, &x) in (j0..j1).zip(&src[i * cols + j0..i * cols + j1]) {
                    dst[j * rows + i] = x;
                }
            }
        }
    }
}

pub(crate) use crate::linalg::{query_lwork, routine};

/// A character attribute (jaxlib passes LAPACK's `uplo`, `side`, ... as u8 ASCII codes),
/// checked against the letters LAPACK accepts for it.
pub(crate) fn char_attr(name: &str, value: u8, allowed: &[u8]) -> Result<std::ffi::c_char> {
    if allowed.contains(&value) {
        Ok(value as std::ffi::c_char)
    } else {
        let allowed: Vec<String> = allowed
            .iter()
            .map(|&c| format!("'{}'", c as char))
            .collect();
        Err(Error::invalid_argument(format!(
            "attribute '{name}': expected one of {}, got {value}",
            allowed.join(", ")
        )))
    }
}

/// A dimension as LAPACK's 32-bit integer, or an error naming the operand.
pub(crate) fn lapack_dim(buffer: &crate::ffi::Buffer<'_>, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        Error::invalid_argument(format!(
            "{}: dimension {value} exceeds LAPACK's 32-bit integer range (shape {:?})",
            buffer.operand,
            buffer.dims()
        ))
    })
}

pub(crate) use crate::linalg::LapackScalar as Scalar;

/// Calls `f::<T>(args)` with `T` the LAPACK scalar of `buffer`'s dtype, or returns an error
/// naming the buffer.
macro_rules! dispatch_lapack {
    ($buffer:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $buffer.dtype() {
            $crate::ffi::DataType::F32 => $f::<f32>($($arg),*),
            $crate::ffi::DataType::F64 => $f::<f64>($($arg),*),
            $crate::ffi::DataType::C64 => $f::<num_complex::Complex<f32>>($($arg),*),
            $crate::ffi::DataType::C128 => $f::<num_complex::Complex<f64>>($($arg),*),
            other => Err($buffer.mismatch("dtype f32, f64, c64 or c128".into(), other.to_string())),
        }
    };
}
pub(crate) use dispatch_lapack;

