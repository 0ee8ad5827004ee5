//! The CUDA handlers of the QR family: ferrax's PTX kernels for small matrices, cuBLAS's
//! batched or cuSOLVER's looped routines for the rest.

use super::{Geqrf, Orgqr, Ormqr, OrmqrShapes, Qr, GEQRF, ORGQR, ORMQR, QR};
use crate::cuda::cublas::{Batched, Blas};
use crate::cuda::cusolver::{Dense, Op, Side};
use crate::cuda::{library_dims, library_int, small_kernel, GpuLibrary, GpuScalar, GpuStream};
use crate::ffi::{Error, MatrixBatch, Matrices, Result, ScratchAllocator, Stream};
use crate::ffi_handlers;
use ferrax_kernels::launch::ScalarKind;
use ferrax_kernels::relayout::Strides;
use ferrax_kernels::small::qr::{self as small_qr, GeqrfArgs, OrgqrArgs, OrmqrArgs, QrArgs};

/// cuSOLVER's routines here return `info < 0` only for an invalid argument, which the
/// handlers' checks rule out: such a failure is a bug here, not a property of the input.
fn check_info(routine: &str, info: i32) -> Result<()> {
    if info == 0 {
        Ok(())
    } else {
        Err(Error::internal(format!("{routine} failed with info {info}")))
    }
}

ffi_handlers! {
    /// Batched Householder QR on the GPU: ferrax's PTX kernels up to 128×128 (as shared
    /// memory allows), cuBLAS's batched or cuSOLVER's looped geqrf for the rest.
    pub fn ferrax_cuda_geqrf(GEQRF, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Geqrf;
        dtype T: GpuScalar = x;
        body = geqrf_cuda;
    }

    /// jax's `qr` on the GPU, on row-major arrays as the CPU handler: ferrax's fused PTX
    /// kernels (R and Q in one pass over memory) up to 128×128 as shared memory allows; past
    /// them geqrf and orgqr from the libraries on a column-major copy of the batch.
    pub fn ferrax_cuda_qr(QR, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Qr;
        dtype T: GpuScalar = a;
        body = qr_cuda;
    }

    /// Q from Householder reflectors on the GPU: ferrax's PTX kernels up to 128×128 (as shared
    /// memory allows), cuSOLVER's looped orgqr/ungqr for the rest.
    pub fn ferrax_cuda_orgqr(ORGQR, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Orgqr;
        dtype T: GpuScalar = x;
        body = orgqr_cuda;
    }

    /// Multiplication by Q from Householder reflectors on the GPU: ferrax's PTX kernel for Q
    /// up to 128×128 acting on up to 128 vectors of c (as shared memory allows), cuSOLVER's
    /// ormqr/unmqr, one call per matrix, for the rest.
    pub fn ferrax_cuda_ormqr(ORMQR, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Ormqr;
        dtype T: GpuScalar = a;
        body = ormqr_cuda;
    }
}

/// XLA's stream with `input` copied into `output`, the result that replaces it (nothing to
/// copy where XLA aliased them, as jax's lowerings ask): the in-place library routines'
/// starting point.
fn gpu_in_place<T: GpuScalar>(
    stream: Stream,
    input: &Matrices<'_, T>,
    output: &Matrices<'_, T>,
) -> Result<GpuStream> {
    let gpu = GpuStream::adopt(stream)?;
    let bytes = input.shape.batch * input.shape.matrix_len() * T::KIND.bytes();
    gpu.copy(output.ptr().cast(), input.ptr().cast(), bytes)?;
    Ok(gpu)
}


fn geqrf_cuda<T: GpuScalar>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    ops: Geqrf<'_, T>,
) -> Result<()> {
    let kind = T::KIND;
    let shape = ops.shape()?;
    let Geqrf { x, x_out, tau } = ops;
    if shape.batch == 0 || shape.matrix_len() == 0 {
        return Ok(());
    }
    let gpu = gpu_in_place(stream, &x, &x_out)?;
    let (a, tau) = (x_out.ptr(), tau.ptr());
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::qr::geqrf_launch(kind, m, n, batch, max_shared)
    })?
    else {
        let library = GpuLibrary::new(&gpu, &scratch);
        let dims = library_dims(shape)?;
        let stride = shape.matrix_len();
        return geqrf_library(library, shape, dims, stride, a, tau);
    };
    let args = GeqrfArgs {
        a: a.cast(),
        tau: tau.cast(),
        m: shape.rows as u32,
        n: shape.cols as u32,
        batch: shape.batch as u64,
    };
    // SAFETY: batch column-major m×n matrices and min(m, n) taus each.
    unsafe { gpu.launch(&config, args) }
}

/// Whether cuBLAS's `geqrfBatched` (one call for the batch) beats a loop of cuSOLVER's
/// `geqrf`: PyTorch's rule (up to 256 rows, and at least one matrix per 16 rows; PR #56253's
/// measurements, e.g. 128 2×2 matrices f64 24.7 µs batched vs 1676 µs looped). jaxlib's own
/// rule (`m / batch <= 128`, integer division) takes cuBLAS for any order once the batch is
/// large, where it is slow (512×512, 16 matrices: jaxlib's QR 255 ms, PyTorch's loop 29.7).
pub(crate) fn geqrf_uses_cublas_batched(m: usize, batch: usize) -> bool {
    m <= 256 && batch >= (m / 16).max(2)
}

/// Householder QR of the batch (`dims`: m, n and the batch; the matrices `stride` elements
/// apart, leading dimension m) in place in `a`, taus in `tau`.
fn geqrf_library<T: Dense + Batched>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [m, n, batch]: [i32; 3],
    stride: usize,
    a: *mut T,
    tau: *mut T,
) -> Result<()> {
    let (k, matrix_len) = (shape.rows.min(shape.cols), stride);
    if geqrf_uses_cublas_batched(shape.rows, shape.batch) {
        let matrices = library.batch_pointers(a, matrix_len, shape.batch)?;
        let taus = library.batch_pointers(tau, k, shape.batch)?;
        let mut info = 0;
        // SAFETY: `batch` pointers to m×n matrices and to their k taus; `info` is on the host.
        Blas::on(library.gpu)?.run("geqrfBatched", |h| unsafe {
            T::geqrf_batched(h, m, n, matrices, m, taus, &mut info, batch)
        })?;
        return check_info("geqrfBatched", info);
    }
    library.solve_each(
        "geqrf",
        shape.batch,
        // SAFETY: a size query on a matrix of the batch.
        |h, lwork| unsafe { T::geqrf_buffer_size(h, m, n, a, m, lwork) },
        // SAFETY: matrix b and its k taus, the workspace and info `solve_each` sized.
        |h, b, work, lwork, info| unsafe {
            let (matrix, taus) = (a.add(b * matrix_len), tau.add(b * k));
            T::geqrf(h, m, n, matrix, m, taus, work, lwork, info)
        },
    )
}


fn qr_cuda<T: GpuScalar>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    ops: Qr<'_, T>,
) -> Result<()> {
    let kind = T::KIND;
    let (shape, q_cols) = ops.shape()?;
    let Qr {
        a,
        q,
        r,
        full_matrices,
    } = ops;
    if shape.batch == 0 || shape.rows == 0 {
        return Ok(()); // Q and R are empty
    }
    let gpu = GpuStream::adopt(stream)?;
    let (a_ptr, q_ptr, r_ptr) = (a.ptr(), q.ptr(), r.ptr());
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::qr::qr_launch(kind, m, n, batch, full_matrices, max_shared)
    })?
    else {
        let library = GpuLibrary::new(&gpu, &scratch);
        let dims = [
            library_int("rows", shape.rows)?,
            library_int("columns", shape.cols)?,
            library_int("columns of Q", q_cols)?,
            library_int("batch", shape.batch)?,
        ];
        let pointers = [a_ptr, q_ptr, r_ptr].map(|p| p.cast::<std::ffi::c_void>());
        return qr_library::<T>(library, shape, dims, kind, pointers);
    };
    let args = QrArgs {
        a: a_ptr.cast_const().cast(),
        q: q_ptr.cast(),
        r: r_ptr.cast(),
        m: shape.rows as u32,
        n: shape.cols as u32,
        batch: shape.batch as u64,
        full_matrices: full_matrices as u32,
    };
    // SAFETY: batch row-major m×n matrices in, their m×mq Q and mq×n R out.
    unsafe { gpu.launch(&config, args) }
}

/// jax's `qr` through the libraries (`dims`: m, n, Q's columns mq and the batch): A copied
/// column-major into a workspace as wide as A and Q, geqrf there, R copied out (its upper
/// triangle), orgqr in place, Q copied out.
fn qr_library<T: Dense + Batched>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [m, n, q_cols, batch]: [i32; 4],
    kind: ScalarKind,
    [a, q, r]: [*mut std::ffi::c_void; 3],
) -> Result<()> {
    let (rows, cols, mq) = (shape.rows, shape.cols, q_cols as usize);
    let k = rows.min(cols);
    let width = cols.max(mq);
    let (stride, bytes) = (rows * width, kind.bytes());
    let work = library.scratch.allocate(shape.batch * stride * bytes, 16)?;
    let taus = library
        .scratch
        .allocate((shape.batch * k).max(1) * bytes, 16)?;
    let gpu = library.gpu;
    if width > cols {
        // Q's columns past A's: orgqr sets them, but from defined values.
        gpu.zero(work, shape.batch * stride * bytes)?;
    }
    let workspace = Strides::column_major(rows as u64, stride as u64);
    let row_major = |r: usize, c: usize| Strides::row_major(r as u64, c as u64);
    let copy = |src, dst, (r, c): (usize, usize), from, to, upper| {
        // SAFETY: `r×c` stays within each array's matrices (A m×n, R mq×n, Q m×mq, the
        // workspace m×width), distinct buffers.
        unsafe { gpu.copy_matrices(src, dst, bytes, [r, c, shape.batch], from, to, upper) }
    };
    copy(
        a,
        work,
        (rows, cols),
        row_major(rows, cols),
        workspace,
        false,
    )?;
    if k > 0 {
        geqrf_library::<T>(
            library,
            shape,
            [m, n, batch],
            stride,
            work.cast(),
            taus.cast(),
        )?;
    }
    copy(work, r, (mq, cols), workspace, row_major(mq, cols), true)?;
    let q_shape = MatrixBatch { cols: mq, ..shape };
    let dims = [m, q_cols, k as i32];
    orgqr_library::<T>(
        library,
        q_shape,
        dims,
        stride,
        work.cast(),
        taus.cast_const().cast(),
    )?;
    copy(work, q, (rows, mq), workspace, row_major(rows, mq), false)
}


fn orgqr_cuda<T: GpuScalar>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    ops: Orgqr<'_, T>,
) -> Result<()> {
    let kind = T::KIND;
    let (shape, k) = ops.shape()?;
    let Orgqr { x, tau, x_out } = ops;
    if shape.batch == 0 || shape.matrix_len() == 0 {
        return Ok(());
    }
    let gpu = gpu_in_place(stream, &x, &x_out)?;
    let reflectors = library_int("reflectors", k)?;
    let (a, tau) = (x_out.ptr(), tau.ptr());
    // k <= n <= 128 once a kernel takes the shape.
    let Some(config) = small_kernel(&gpu, shape, |m, n, batch, max_shared| {
        ferrax_kernels::small::qr::orgqr_launch(kind, m, n, k as u32, batch, max_shared)
    })?
    else {
        let library = GpuLibrary::new(&gpu, &scratch);
        let dims = [
            library_int("rows", shape.rows)?,
            library_int("columns", shape.cols)?,
            reflectors,
        ];
        let stride = shape.matrix_len();
        return orgqr_library(library, shape, dims, stride, a, tau.cast_const());
    };
    let args = OrgqrArgs {
        a: a.cast(),
        tau: tau.cast_const().cast(),
        m: shape.rows as u32,
        n: shape.cols as u32,
        k: k as u32,
        batch: shape.batch as u64,
    };
    // SAFETY: batch column-major m×n reflector matrices and k taus each.
    unsafe { gpu.launch(&config, args) }
}

/// Q's first n columns from k reflectors per matrix (`dims`: m, n, k; the matrices `stride`
/// elements apart, leading dimension m), in place in `a`, one cuSOLVER call per matrix (it has
/// no batched orgqr).
fn orgqr_library<T: Dense>(
    library: GpuLibrary<'_>,
    shape: MatrixBatch,
    [m, n, k]: [i32; 3],
    stride: usize,
    a: *mut T,
    tau: *const T,
) -> Result<()> {
    let taus = k as usize;
    library.solve_each(
        "orgqr",
        shape.batch,
        // SAFETY: a size query on a matrix of the batch.
        |h, lwork| unsafe { T::orgqr_buffer_size(h, m, n, k, a, m, tau, lwork) },
        // SAFETY: matrix b and its k taus, the workspace and info `solve_each` sized.
        |h, b, work, lwork, info| unsafe {
            let (matrix, its_taus) = (a.add(b * stride), tau.add(b * taus));
            T::orgqr(h, m, n, k, matrix, m, its_taus, work, lwork, info)
        },
    )
}


fn ormqr_cuda<T: GpuScalar>(
    stream: Stream,
    scratch: ScratchAllocator<'_>,
    ops: Ormqr<'_, T>,
) -> Result<()> {
    let kind = T::KIND;
    let shapes = ops.shapes()?;
    let Ormqr {
        a,
        tau,
        c,
        c_out,
        left,
        transpose,
    } = ops;
    let shape = shapes.c;
    if shape.batch == 0 {
        return Ok(());
    }
    let gpu = gpu_in_place(stream, &c, &c_out)?;
    // cuSOLVER's quick return as LAPACK's: an empty c, or no reflectors (Q = I).
    if shape.matrix_len() == 0 || shapes.k == 0 {
        return Ok(());
    }
    let q_order = shapes.reflectors.rows;
    let vectors = if left { shape.cols } else { shape.rows };
    let small = MatrixBatch {
        rows: q_order,
        cols: vectors,
        ..shape
    };
    let k = shapes.k as u32; // k <= q_order <= 128 once a kernel takes the shape
    let kernel = small_kernel(&gpu, small, |q, vectors, batch, max_shared| {
        small_qr::ormqr_launch(kind, q, k, vectors, batch, max_shared)
    })?;
    if let (Some(config), Ok(a_cols)) = (kernel, u32::try_from(shapes.reflectors.cols)) {
        let args = OrmqrArgs {
            a: a.ptr().cast_const().cast(),
            tau: tau.ptr().cast_const().cast(),
            c: c_out.ptr().cast(),
            q: q_order as u32,
            a_cols,
            k,
            vectors: vectors as u32,
            batch: shape.batch as u64,
            left: left as u32,
            transpose: transpose as u32,
        };
        // SAFETY: batch reflector matrices of q×a_cols with k taus each, and batch matrices
        // of c with q×vectors elements, as ormqr_shapes checked.
        return unsafe { gpu.launch(&config, args) };
    }
    let library = GpuLibrary::new(&gpu, &scratch);
    // Real ormqr takes OP_T, complex unmqr OP_C: Q^T or Q^H, jax's `transpose` either way.
    let complex = <T as crate::ffi::NativeType>::DTYPE.is_complex();
    let operation = match (transpose, complex) {
        (false, _) => Op::CUBLAS_OP_N,
        (true, false) => Op::CUBLAS_OP_T,
        (true, true) => Op::CUBLAS_OP_C,
    };
    let side = if left {
        Side::CUBLAS_SIDE_LEFT
    } else {
        Side::CUBLAS_SIDE_RIGHT
    };
    let dims = [
        library_int("rows", shape.rows)?,
        library_int("columns", shape.cols)?,
        library_int("reflectors", shapes.k)?,
        library_int("reflector length", shapes.reflectors.rows)?,
    ];
    let (a, tau, c) = (a.ptr(), tau.ptr(), c_out.ptr());
    let operands = (a.cast_const(), tau.cast_const(), c);
    ormqr_library(library, &shapes, (side, operation), dims, operands)
}

/// Q c, Q^H c, c Q or c Q^H in place in `c` (`dims`: c's m and n, k, and a's leading
/// dimension, Q's order), one cuSOLVER call per matrix.
fn ormqr_library<T: Dense>(
    library: GpuLibrary<'_>,
    shapes: &OrmqrShapes,
    (side, operation): (Side, Op),
    [m, n, k, lda]: [i32; 4],
    (a, tau, c): (*const T, *const T, *mut T),
) -> Result<()> {
    let (a_len, c_len, taus) = (
        shapes.reflectors.matrix_len(),
        shapes.c.matrix_len(),
        shapes.k,
    );
    library.solve_each(
        "ormqr",
        shapes.c.batch,
        // SAFETY: a size query on a matrix of the batch.
        |h, lwork| unsafe {
            T::ormqr_buffer_size(h, side, operation, m, n, k, a, lda, tau, c, m, lwork)
        },
        // SAFETY: matrix b of a (k reflectors of length lda), its k taus and matrix b of c,
        // the workspace and info `solve_each` sized.
        |h, b, work, lwork, info| unsafe {
            let (reflectors, its_taus) = (a.add(b * a_len), tau.add(b * taus));
            let its_c = c.add(b * c_len);
            T::ormqr(
                h, side, operation, m, n, k, reflectors, lda, its_taus, its_c, m, work, lwork, info,
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cublas_batched_qr_for_many_matrices_of_up_to_256_rows() {
        assert!(geqrf_uses_cublas_batched(128, 1024));
        assert!(geqrf_uses_cublas_batched(256, 16));
        assert!(!geqrf_uses_cublas_batched(256, 15));
        assert!(!geqrf_uses_cublas_batched(257, 1 << 20));
        // The case jaxlib's rule sends to cuBLAS: 16 matrices of 512×512.
        assert!(!geqrf_uses_cublas_batched(512, 16));
        assert!(!geqrf_uses_cublas_batched(8, 1));
        assert!(geqrf_uses_cublas_batched(8, 2));
    }
}
