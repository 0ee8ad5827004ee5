//! One module per op family. Each declares its target name once and the handlers bound to it
//! (the same name is registered per platform, with that platform's handler).

pub mod cholesky_update;
pub mod eig;
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

use crate::cuda::cusolver::{Handle as SolverHandle, Solver, Status as SolverStatus};
use crate::ffi::sys::{XLA_FFI_CallFrame, XLA_FFI_Error, XLA_FFI_Handler};
use crate::ffi::{Buffer, Error, MatrixBatch, NativeType, Result, ThreadPool};
use ferrax_cpu_fallback::Lapack;
pub(crate) use ferrax_kernels::small::simd::Layout;
use num_complex::Complex;
use std::ffi::c_int;

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

/// The launch of ferrax's small-matrix GPU kernel for `shape` on `gpu`'s device (`plan` gets
/// m, n, the batch and the shared memory a block may opt in to), if one takes it; the GPU
/// handlers give the rest to cuSOLVER or cuBLAS.
pub(crate) fn small_kernel<A>(
    gpu: &crate::cuda::GpuStream,
    shape: MatrixBatch,
    plan: impl FnOnce(u32, u32, u64, usize) -> Option<ferrax_kernels::launch::LaunchConfig<A>>,
) -> Result<Option<ferrax_kernels::launch::LaunchConfig<A>>> {
    let (Ok(m), Ok(n)) = (u32::try_from(shape.rows), u32::try_from(shape.cols)) else {
        return Ok(None);
    };
    Ok(plan(m, n, shape.batch as u64, gpu.max_shared_bytes()?))
}

/// What a GPU handler's cuSOLVER/cuBLAS path needs besides its operands: XLA's stream (with
/// the context current) and XLA's scratch allocator for workspaces and pointer arrays.
#[derive(Clone, Copy)]
pub(crate) struct GpuLibrary<'a> {
    pub gpu: &'a crate::cuda::GpuStream,
    pub scratch: &'a crate::ffi::ScratchAllocator<'a>,
}

impl GpuLibrary<'_> {
    /// Device workspace for `lwork` elements of `T`.
    pub fn workspace<T>(&self, lwork: i32) -> Result<*mut T> {
        let bytes = (lwork.max(1) as usize) * std::mem::size_of::<T>();
        Ok(self.scratch.allocate(bytes, 16)?.cast())
    }

    /// One device integer for the `info` that cuSOLVER's geqrf, orgqr and ormqr write and
    /// jaxlib's contracts have no result for (their `info < 0` means an invalid argument,
    /// which the handlers' checks rule out).
    pub fn ignored_info(&self) -> Result<*mut i32> {
        Ok(self.scratch.allocate(4, 4)?.cast())
    }

    /// One cuSOLVER routine per matrix `b < batch` (it has no batched geqrf, orgqr or ormqr),
    /// with one workspace sized by `query(handle, &mut lwork)` and one ignored `info`, both
    /// reused in stream order: `call(handle, b, work, lwork, info)` runs it on matrix `b`.
    pub fn solve_each<T>(
        &self,
        routine: &str,
        batch: usize,
        query: impl FnOnce(SolverHandle, *mut c_int) -> SolverStatus,
        mut call: impl FnMut(SolverHandle, usize, *mut T, c_int, *mut c_int) -> SolverStatus,
    ) -> Result<()> {
        let solver = Solver::on(self.gpu)?;
        let lwork = solver.lwork(&format!("{routine}_bufferSize"), query)?;
        let (work, info) = (self.workspace::<T>(lwork)?, self.ignored_info()?);
        for b in 0..batch {
            solver.run(routine, |h| call(h, b, work, lwork, info))?;
        }
        Ok(())
    }

    /// A device array of `count` pointers `base + i·stride` (elements of `T`).
    pub fn batch_pointers<T>(
        &self,
        base: *mut T,
        stride: usize,
        count: usize,
    ) -> Result<*mut *mut T> {
        self.gpu
            .batch_pointers(self.scratch, base, stride * std::mem::size_of::<T>(), count)
    }
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

/// A raw pointer that thread-pool tasks may share: each task touches a disjoint part of the
/// buffer it points into.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut<T>(pub *mut T);
unsafe impl<T> Send for SharedMut<T> {}
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// The pointer offset by `count` elements. (A method, so that closures capture the
    /// wrapper rather than its non-`Sync` field.)
    ///
    /// # Safety
    /// As `pointer::add`.
    pub unsafe fn at(&self, count: usize) -> *mut T {
        self.0.add(count)
    }

    /// The `len` elements from element `start`, as a slice.
    ///
    /// # Safety
    /// They lie in the buffer, and nothing else reads or writes them while the slice lives
    /// (each thread-pool task takes its own part of the buffer).
    #[allow(clippy::mut_from_ref)] // the buffer is shared, its parts are not
    pub unsafe fn slice<'a>(&self, start: usize, len: usize) -> &'a mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
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

/// The handler of a target whose results differ between real and complex inputs (jaxlib's
/// `geev` and `gees` return real eigenvalues as two arrays, complex ones as one): calls `real`
/// when the call has `real_results` results, else `complex` (which then reports a wrong count).
/// Both are `ffi_handler!`s with the same target name.
///
/// # Safety
/// `frame` must be a call frame passed by XLA (or null).
pub(crate) unsafe fn by_result_count(
    frame: *mut XLA_FFI_CallFrame,
    real_results: usize,
    real: XLA_FFI_Handler,
    complex: XLA_FFI_Handler,
) -> *mut XLA_FFI_Error {
    // The result count is in the frame itself, valid even in the metadata handshake.
    let is_real = frame
        .as_ref()
        .is_some_and(|f| usize::try_from(f.rets.size) == Ok(real_results));
    if is_real {
        real(frame)
    } else {
        complex(frame)
    }
}

/// Checks the input and eigenvalue results of geev/gees, whose real and complex contracts
/// differ: `expected` eigenvalue arrays (`[wr, wi]` for real input, `[w]` for complex), each
/// `[batch..., n]` of the input's dtype; `results` names the contract's results for the error
/// and `others` counts the call's other results. Returns the (square) input's shape.
pub(crate) fn expect_eigenvalues<T: Scalar>(
    x: &Buffer<'_>,
    eigvals: &[Buffer<'_>],
    expected: usize,
    results: &str,
    others: usize,
) -> Result<MatrixBatch> {
    if eigvals.len() != expected {
        return Err(Error::invalid_argument(format!(
            "{}: dtype {} takes the results ({results}), but the call has {} results",
            x.operand,
            T::DTYPE,
            eigvals.len() + others
        )));
    }
    let shape = MatrixBatch::square(x)?;
    let dims = [shape.batch_dims(x), &[shape.rows as i64]].concat();
    for w in eigvals {
        w.expect_dtype(T::DTYPE)?;
        w.expect_dims(&dims)?;
    }
    Ok(shape)
}

/// Below this many flops of work per task, scheduling on the pool costs more than it saves
/// (the same cut-off jaxlib uses for its LAPACK batch loop).
const MIN_FLOPS_PER_TASK: usize = 200_000;

/// Runs `per_chunk(range)` over `0..items` on XLA's thread pool, in chunks of at least
/// `MIN_FLOPS_PER_TASK` given the cost of one item in flops. Per-chunk setup (LAPACK
/// workspace) goes at the top of `per_chunk`.
pub(crate) fn for_each_chunk(
    pool: &ThreadPool<'_>,
    items: usize,
    flops_per_item: usize,
    per_chunk: &(dyn Fn(std::ops::Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let min_chunk = MIN_FLOPS_PER_TASK.div_ceil(flops_per_item.max(1));
    if items <= min_chunk {
        // One chunk: LAPACK may use its own threads.
        return per_chunk(0..items);
    }
    if flops_per_item < MIN_FLOPS_PER_TASK {
        // Matrices this small never start OpenBLAS's threads, and telling OpenBLAS to stay on
        // one thread makes each small call measurably slower.
        return pool.parallel_chunks(items, min_chunk, per_chunk);
    }
    // Several large calls run at once, so each keeps OpenBLAS on its own thread.
    pool.parallel_chunks(items, min_chunk, &|range| {
        ferrax_cpu_fallback::single_threaded(|| per_chunk(range))
    })
}

/// [`for_each_chunk`] for work without per-chunk setup.
pub(crate) fn for_each_parallel(
    pool: &ThreadPool<'_>,
    items: usize,
    flops_per_item: usize,
    per_item: &(dyn Fn(usize) -> Result<()> + Sync),
) -> Result<()> {
    for_each_chunk(pool, items, flops_per_item, &|range| {
        range.into_iter().try_for_each(per_item)
    })
}

/// Calls `group(first)` for each run of [`LANES`](ferrax_kernels::small::simd::LANES) items of
/// `range` (the small-matrix routines that factor that many matrices at once) and `one(item)`
/// for the items left over.
pub(crate) fn by_lanes(
    range: std::ops::Range<usize>,
    mut group: impl FnMut(usize),
    mut one: impl FnMut(usize),
) {
    use ferrax_kernels::small::simd::LANES;
    let mut first = range.start;
    while first + LANES <= range.end {
        group(first);
        first += LANES;
    }
    (first..range.end).for_each(&mut one);
}

/// The LAPACK routine for `T`, or an error that says how to fill the table.
pub(crate) fn routine<F>(
    lookup: std::result::Result<F, ferrax_cpu_fallback::Missing>,
) -> Result<F> {
    lookup.map_err(|missing| Error::failed_precondition(missing.to_string()))
}

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

/// The four LAPACK scalars, with what generic handler code needs besides LAPACK itself.
pub(crate) trait Scalar:
    NativeType + Lapack<Real: NativeType + Default + Into<f64>> + Default
{
    /// The complex scalar of the same precision (eigenvalues of real matrices are complex).
    type Complex: NativeType + Default;
    const ONE: Self;
    /// The real part (LAPACK reports workspace sizes in the real part of `work[0]`).
    fn re(self) -> f64;
    fn is_finite(self) -> bool;
}

macro_rules! scalar {
    ($t:ty, $complex:ty, $one:expr, |$x:ident| $re:expr, $finite:expr) => {
        impl Scalar for $t {
            type Complex = $complex;
            const ONE: Self = $one;
            fn re(self) -> f64 {
                let $x = self;
                $re
            }
            fn is_finite(self) -> bool {
                let $x = self;
                $finite
            }
        }
    };
}
scalar!(f32, Complex<f32>, 1.0, |x| x.into(), x.is_finite());
scalar!(f64, Complex<f64>, 1.0, |x| x, x.is_finite());
scalar!(
    Complex<f32>,
    Complex<f32>,
    Complex::new(1.0, 0.0),
    |x| x.re.into(),
    x.re.is_finite() && x.im.is_finite()
);
scalar!(
    Complex<f64>,
    Complex<f64>,
    Complex::new(1.0, 0.0),
    |x| x.re,
    x.re.is_finite() && x.im.is_finite()
);

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

/// LAPACK's optimal `lwork`: `query(work, lwork, info)` must call the routine with the given
/// `lwork` (-1, a workspace query), which writes the size into `work[0]`.
pub(crate) fn query_lwork<T: Scalar>(
    query: impl FnOnce(*mut T, *const i32, *mut i32),
) -> Result<i32> {
    let (mut work, mut info) = (T::default(), 0);
    query(&mut work, &-1, &mut info);
    if info != 0 {
        return Err(Error::internal(format!(
            "LAPACK workspace query failed with info {info}"
        )));
    }
    // LAPACK wants lwork >= 1 even where it needs no workspace.
    let lwork = work.re().ceil().max(1.0);
    if lwork > f64::from(i32::MAX) {
        return Err(Error::invalid_argument(format!(
            "LAPACK asks for a workspace of {lwork} elements, past its 32-bit integer range"
        )));
    }
    Ok(lwork as i32)
}
