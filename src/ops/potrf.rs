//! `potrf`: Cholesky factorization, jaxlib's `lapack_?potrf_ffi` contract: column-major
//! `[..., n, n]` in, the factor in the `uplo` triangle (aliasing the input; the other triangle
//! keeps the input) and S32 `info` `[...]` out. Attribute `uplo`: u8 'L' or 'U'. The CUDA
//! handler takes the same contract (jaxlib's `cusolver_potrf_ffi` has a `lower` flag instead),
//! except that past ferrax's kernels, for more than one matrix, cuSOLVER's `potrfBatched` uses
//! the other triangle as workspace (as in jaxlib's target; jax reads the factor's triangle
//! only).

use crate::cuda::cusolver::{Dense, Fill, Solver};
use crate::ffi::{
    Buffer, DataType, Error, MatrixBatch, NativeType, Result, ScratchAllocator, Stream, ThreadPool,
};
use crate::ffi_handler;
use crate::ops::dispatch_lapack;
use crate::ops::{
    by_lanes, char_attr, expect_same_array, for_each_chunk, gpu_in_place, gpu_replacing,
    gpu_scalar_kind, lapack_dim, routine, small_kernel, GpuLibrary, SharedMut,
};
use ferrax_cpu_fallback::{Lapack, Potrf};
use ferrax_kernels::scalar::{Real, Scalar};
use ferrax_kernels::small::simd::{self, LANES};
use ferrax_kernels::small::{potf2, CholeskyArgs, PotrfArgs};
use std::ffi::{c_char, CStr};
use std::ops::Range;

pub const TARGET: &CStr = c"ferrax_potrf";

ffi_handler! {
    /// Cholesky factorization on the host through LAPACK, batch split across XLA's thread pool.
    pub fn ferrax_cpu_potrf = TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    ret factor: Buffer;
    ret info: Buffer;
    attr uplo: u8;
    traits = 0;
    body = potrf_cpu;
}

fn potrf_cpu(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    factor: Buffer<'_>,
    info: Buffer<'_>,
    uplo: u8,
) -> Result<()> {
    let uplo = char_attr("uplo", uplo, b"LU")?;
    dispatch_lapack!(a, potrf_typed(pool, a, factor, info, uplo))
}

fn expect_shapes(a: &Buffer<'_>, info: &Buffer<'_>) -> Result<MatrixBatch> {
    let shape = MatrixBatch::square(a)?;
    info.expect_dtype(DataType::S32)?;
    info.expect_dims(shape.batch_dims(a))?;
    Ok(shape)
}

/// Up to this order the CPU handler factors in Rust, [`LANES`] matrices at a time
/// ([`simd::potf2`]; [`potf2`] for the rest): there one OpenBLAS
/// call costs more than the factorization (per 16×16 f64 matrix, one core: OpenBLAS 470 ns,
/// `potf2` 740 ns, `simd::potf2` 376 ns; at 32 OpenBLAS is faster).
pub const CPU_SMALL_MAX: usize = 16;

fn potrf_typed<T: NativeType + Lapack + Scalar>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    factor: Buffer<'_>,
    info: Buffer<'_>,
    uplo: c_char,
) -> Result<()> {
    let shape = expect_shapes(&a, &info)?;
    let n = lapack_dim(&a, shape.rows)?;
    a.copy_into(&factor)?;
    if shape.batch == 0 {
        return Ok(());
    }
    let potrf = routine(T::potrf())?;
    // SAFETY: `a` is no longer read; the results are distinct buffers.
    let (factor, info) = unsafe { (factor.as_mut_slice::<T>()?, info.as_mut_slice::<i32>()?) };
    let (factor, info) = (SharedMut(factor.as_mut_ptr()), SharedMut(info.as_mut_ptr()));
    let lower = uplo == b'L' as c_char;
    for_each_chunk(&pool, shape.batch, cholesky_flops(shape), &|range| {
        // SAFETY: info `b` belongs to matrix `b`, which only this task factors.
        let done = |b: usize, status: i32| unsafe { *info.at(b) = status };
        factor_range(potrf, factor, n, lower, range, &|_, _| {}, &done);
        Ok(())
    })
}

fn cholesky_flops(shape: MatrixBatch) -> usize {
    (shape.rows.pow(3) / 3).max(1)
}

/// Factors matrices `range` of the batch of column-major `n×n` matrices at `matrices` in place,
/// in their `lower` or upper triangle, and hands each one's `info` to `done(b, info)`;
/// `prepare(first, count)` fills matrices `first..first + count` right before they are
/// factored (while they are in cache).
fn factor_range<T: Lapack + Scalar>(
    potrf: Potrf<T>,
    matrices: SharedMut<T>,
    n: i32,
    lower: bool,
    range: Range<usize>,
    prepare: &dyn Fn(usize, usize),
    done: &dyn Fn(usize, i32),
) {
    let order = n as usize;
    let matrix_len = order * order;
    // SAFETY (both closures): the range's matrices belong to the calling task alone.
    let slice = |first: usize, count: usize| unsafe {
        matrices.slice(first * matrix_len, count * matrix_len)
    };
    let uplo = if lower { b'L' } else { b'U' } as c_char;
    let one = |b: usize| {
        prepare(b, 1);
        let a = slice(b, 1);
        let status = if order <= CPU_SMALL_MAX {
            potf2(a, order, order.max(1), lower)
        } else {
            let mut info = 0;
            // SAFETY: LAPACK reads and writes the n×n matrix `a` (leading dimension n) and info.
            unsafe { potrf(&uplo, &n, a.as_mut_ptr(), &n.max(1), &mut info) };
            info
        };
        done(b, status);
    };
    if order > CPU_SMALL_MAX {
        return range.for_each(one);
    }
    let mut scratch = vec![<T as Scalar>::ZERO; LANES * matrix_len];
    let group = |first: usize| {
        prepare(first, LANES);
        let mut info = [0; LANES];
        simd::potf2(slice(first, LANES), order, lower, &mut info, &mut scratch);
        (0..LANES).for_each(|lane| done(first + lane, info[lane]));
    };
    by_lanes(range, group, one);
}

/// jax's `cholesky(x, symmetrize_input)` in one call: `tril(L)` of `(x + xᴴ)/2` (or of `x`'s
/// lower triangle), or a matrix of NaN below a zero upper triangle where it fails. jax's
/// rule needs an XLA pass over the batch for each of those steps, plus a transposing copy
/// each way for column-major LAPACK; this target reads jax's row-major matrices and writes
/// the row-major factor, one matrix at a time in cache.
pub const FUSED_TARGET: &CStr = c"ferrax_cholesky";

ffi_handler! {
    /// jax's whole `cholesky` on the host, batch split across XLA's thread pool.
    pub fn ferrax_cpu_cholesky = FUSED_TARGET;
    ctx pool: ThreadPool;
    arg a: Buffer;
    ret l: Buffer;
    attr symmetrize_input: bool;
    traits = 0;
    body = cholesky_cpu;
}

fn cholesky_cpu(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    l: Buffer<'_>,
    symmetrize_input: bool,
) -> Result<()> {
    dispatch_lapack!(a, cholesky_typed(pool, a, l, symmetrize_input))
}

fn cholesky_typed<T: NativeType + Lapack + Scalar>(
    pool: ThreadPool<'_>,
    a: Buffer<'_>,
    l: Buffer<'_>,
    symmetrize_input: bool,
) -> Result<()> {
    let shape = MatrixBatch::square(&a)?;
    expect_same_array::<T>(&a, &l)?;
    let n = lapack_dim(&a, shape.rows)?;
    if shape.batch == 0 || n == 0 {
        return Ok(());
    }
    let potrf = routine(T::potrf())?;
    let (x, out) = (
        SharedMut(a.data_ptr().cast::<T>()),
        SharedMut(l.data_ptr().cast::<T>()),
    );
    let (order, matrix_len) = (shape.rows, shape.matrix_len());
    // A row-major Hermitian A, read column-major, is Aᵀ = conj(A) = (Lᵀ)ᴴ·Lᵀ: LAPACK's upper
    // factor of the row-major lower triangle is Lᵀ, which read row-major is L itself.
    let prepare = |first: usize, count: usize| {
        for b in first..first + count {
            // SAFETY: matrix `b` of the argument, which no task writes, and of the result,
            // which only this task writes (XLA does not alias them: the lowering asks for none).
            let (x, out) = unsafe {
                (
                    &*x.slice(b * matrix_len, matrix_len),
                    out.slice(b * matrix_len, matrix_len),
                )
            };
            lower_triangle(x, out, order, symmetrize_input);
        }
    };
    let done = |b: usize, status: i32| {
        if status != 0 {
            // SAFETY: as in `prepare`.
            let out = unsafe { out.slice(b * matrix_len, matrix_len) };
            failed(out, order);
        }
    };
    for_each_chunk(&pool, shape.batch, cholesky_flops(shape), &|range| {
        factor_range(potrf, out, n, false, range, &prepare, &done);
        Ok(())
    })
}

/// Writes the lower triangle of `(x + xᴴ)/2` (or of `x`) to `out` and zeros above it, both
/// row-major `n×n`: jax's `symmetrize`, element for element.
fn lower_triangle<T: Scalar>(x: &[T], out: &mut [T], n: usize, symmetrize: bool) {
    let half = <T::Real as Real>::ONE / (<T::Real as Real>::ONE + <T::Real as Real>::ONE);
    for (i, row) in out.chunks_exact_mut(n).enumerate() {
        let (lower, upper) = row.split_at_mut(i + 1);
        for (j, element) in lower.iter_mut().enumerate() {
            *element = if symmetrize {
                (x[i * n + j] + x[j * n + i].conj()).scale(half)
            } else {
                x[i * n + j]
            };
        }
        upper.fill(T::ZERO);
    }
}

/// jax's result where the factorization fails: NaN on and below the diagonal, zeros above.
fn failed<T: Scalar>(out: &mut [T], n: usize) {
    for (i, row) in out.chunks_exact_mut(n).enumerate() {
        let (lower, upper) = row.split_at_mut(i + 1);
        lower.fill(T::from_real(<T::Real as Real>::NAN));
        upper.fill(T::ZERO);
    }
}

ffi_handler! {
    /// Batched Cholesky on the GPU: ferrax's PTX kernels up to 128×128 (as shared memory
    /// allows), cuSOLVER's batched or single potrf for the rest.
    pub fn ferrax_cuda_potrf = TARGET;
    ctx stream: Stream;
    ctx scratch: ScratchAllocator;
    arg a: Buffer;
    ret factor: Buffer;
    ret info: Buffer;
    attr uplo: u8;
    traits = 0;
    body = potrf_cuda;
}

ffi_handler! {
    /// jax's whole `cholesky` on the GPU, on row-major arrays as [`ferrax_cpu_cholesky`]:
    /// ferrax's kernels (warp kernels up to 32, a block per matrix up to 48), one pass over memory
    /// (`install()` sends larger matrices through jax's steps, i.e. [`ferrax_cuda_potrf`]).
    pub fn ferrax_cuda_cholesky = FUSED_TARGET;
    ctx stream: Stream;
    arg a: Buffer;
    ret l: Buffer;
    attr symmetrize_input: bool;
    traits = 0;
    body = cholesky_cuda;
}

fn cholesky_cuda(
    stream: Stream,
    a: Buffer<'_>,
    l: Buffer<'_>,
    symmetrize_input: bool,
) -> Result<()> {
    let kind = gpu_scalar_kind(&a)?;
    let shape = MatrixBatch::square(&a)?;
    let gpu = gpu_replacing(stream, &a, &l)?;
    if shape.batch == 0 || shape.rows == 0 {
        return Ok(());
    }
    let n = u32::try_from(shape.rows).ok();
    let Some(config) =
        n.and_then(|n| ferrax_kernels::small::cholesky_launch(kind, n, shape.batch as u64))
    else {
        let max = ferrax_kernels::small::FUSED_CHOLESKY_BLOCK_MAX;
        return Err(Error::unimplemented(format!(
            "{}: on CUDA its kernels take matrices up to {max}×{max}, got {}×{} (jax's cholesky \
             steps with ferrax_potrf take any order)",
            FUSED_TARGET.to_string_lossy(),
            shape.rows,
            shape.cols
        )));
    };
    let args = CholeskyArgs {
        a: a.data_ptr().cast_const().cast(),
        l: l.data_ptr().cast(),
        n: shape.rows as u32,
        batch: shape.batch as u64,
        symmetrize: symmetrize_input as u32,
    };
    // SAFETY: batch row-major n×n matrices in `a` and in `l`.
    unsafe { gpu.launch(&config, args) }
}

fn potrf_cuda(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    a: Buffer<'_>,
    factor: Buffer<'_>,
    info: Buffer<'_>,
    uplo: u8,
) -> Result<()> {
    let lower = u32::from(char_attr("uplo", uplo, b"LU")? == b'L' as c_char);
    let kind = gpu_scalar_kind(&a)?;
    let shape = expect_shapes(&a, &info)?;
    if shape.batch == 0 {
        return factor.expect_dims(a.dims());
    }
    let gpu = gpu_in_place(stream, &a, &factor, shape, kind)?;
    if shape.rows == 0 {
        return gpu.zero(info.data_ptr().cast(), shape.batch * 4);
    }
    let (factor, info) = (factor.data_ptr(), info.data_ptr());
    let Some(config) = small_kernel(&gpu, shape, |n, _, batch, max_shared| {
        ferrax_kernels::small::potrf_launch(kind, n, batch, max_shared)
    })?
    else {
        let library = GpuLibrary {
            gpu: &gpu,
            scratch: &scratch,
        };
        let dims = [lapack_dim(&a, shape.rows)?, lapack_dim(&a, shape.batch)?];
        let fill = if lower == 1 {
            Fill::CUBLAS_FILL_MODE_LOWER
        } else {
            Fill::CUBLAS_FILL_MODE_UPPER
        };
        return dispatch_lapack!(
            a,
            potrf_library(library, shape, dims, fill, factor.cast(), info.cast())
        );
    };
    let args = PotrfArgs {
        a: factor.cast(),
        info: info.cast(),
        n: shape.rows as u32,
        batch: shape.batch as u64,
        lower,
    };
    // SAFETY: batch column-major n×n matrices and one info each.
    unsafe { gpu.launch(&config, args) }
}

/// Cholesky of the batch (`dims`: n and the batch) in place in `factor`: cuSOLVER's
/// `potrfBatched` for more than one matrix (one call, no workspace but the other triangle,
/// which it overwrites; 10-40× a loop of `potrf` for 16-256 matrices of order 32-512 in MLX's
/// and PyTorch's measurements), `potrf` for one.
fn potrf_library<T: Dense>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [n, batch]: [i32; 2],
    fill: Fill,
    factor: *mut T,
    info: *mut i32,
) -> Result<()> {
    let solver = Solver::on(library.gpu)?;
    if shape.batch > 1 {
        let pointers = library.batch_pointers(factor, shape.matrix_len(), shape.batch)?;
        // SAFETY: `batch` pointers to n×n matrices and one info each.
        return solver.run("potrfBatched", |h| unsafe {
            T::potrf_batched(h, fill, n, pointers, n, info, batch)
        });
    }
    // SAFETY: a size query on the one matrix.
    let lwork = solver.lwork("potrf_bufferSize", |h, lwork| unsafe {
        T::potrf_buffer_size(h, fill, n, factor, n, lwork)
    })?;
    let work = library.workspace::<T>(lwork)?;
    // SAFETY: the n×n matrix, its workspace and its info.
    solver.run("potrf", |h| unsafe {
        T::potrf(h, fill, n, factor, n, work, lwork, info)
    })
}
