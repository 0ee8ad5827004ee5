//! The CUDA handlers of the RNN family: the CPU core's algorithm on the GPU, with cuBLAS for
//! the matrix products (every step's input projection per layer, the step's recurrent product,
//! and per layer the weight and input gradients) and ferrax's step kernels
//! ([`ferrax_kernels::rnn`]) for the cells, all enqueued on XLA's stream. The kernels read the
//! sequence lengths on the device, so the host never copies them nor waits for the GPU (cuDNN's
//! RNN data descriptor wants them on the host, which is why jaxlib's target synchronizes every
//! call). The reserve has the CPU's layout; workspaces come from XLA's scratch allocator.
//!
//! Both directions of a layer go in one strided-batched GEMM (their weights are a fixed
//! distance apart in the packed vector) and one kernel launch per step. A length outside
//! `0..=T` cannot be an error here (the host never sees it): the row's results are NaN.

use super::{check_dropout, Rnn, RnnBwd, RNN, RNN_BWD};
use crate::cuda::cublas::{Blas, Gemm};
use crate::cuda::{library_int, GpuStream};
use crate::ffi::{Buffer, DataType, Error, NativeType, Result, ScratchAllocator, Stream};
use crate::ffi_handlers;
use crate::linalg::rnn::{ColumnMajor, Dims, Reserve, RnnScalar, View, WeightLayout};
use crate::memory;
use cudarc::cublas::sys::cublasOperation_t as Op;
use ferrax_kernels::launch::{AnyElement, KernelArgs, LaunchConfig, ScalarKind};
use ferrax_kernels::rnn::{
    backward_step_launch, column_sums_launch, finish_launch, forward_step_launch,
    BackwardStepArgs, ColumnSumsArgs, FinishArgs, ForwardStepArgs,
};
use std::ffi::c_void;

ffi_handlers! {
    /// A recurrent network's forward pass on the GPU.
    pub fn ferrax_cuda_rnn(RNN, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: Rnn;
        body = rnn_cuda;
    }

    /// Its backward pass on the GPU.
    pub fn ferrax_cuda_rnn_bwd(RNN_BWD, Cuda) {
        ctx stream: Stream;
        ctx scratch: ScratchAllocator;
        operands ops: RnnBwd;
        body = rnn_bwd_cuda;
    }
}

/// The element types on the GPU: ferrax's kernels' and cuBLAS's.
trait GpuReal: RnnScalar + Gemm + NativeType {
    const KIND: ScalarKind;
}

impl GpuReal for f32 {
    const KIND: ScalarKind = ScalarKind::F32;
}
impl GpuReal for f64 {
    const KIND: ScalarKind = ScalarKind::F64;
}

/// On the GPU the floating operands share one dtype, F32 or F64 (`ferrax.rnn` converts half
/// precision to f32 around the call); returns it.
fn one_dtype(operands: &[&Buffer<'_>]) -> Result<DataType> {
    let dtype = operands[0].dtype();
    if !matches!(dtype, DataType::F32 | DataType::F64) {
        return Err(operands[0].mismatch(
            "dtype f32 or f64 on CUDA (ferrax.rnn computes half precision in f32)".into(),
            dtype.to_string(),
        ));
    }
    match operands.iter().find(|b| b.dtype() != dtype) {
        Some(other) => Err(other.mismatch(
            format!("dtype {dtype} (as x: on CUDA the operands share one)"),
            other.dtype().to_string(),
        )),
        None => Ok(dtype),
    }
}

fn rnn_cuda(stream: Stream, scratch: ScratchAllocator<'_>, ops: Rnn<'_>) -> Result<()> {
    let (dims, _) = ops.check()?;
    check_dropout(ops.dropout)?;
    match one_dtype(&[&ops.x, &ops.h0, &ops.c0, &ops.w])? {
        DataType::F32 => forward_cuda::<f32>(stream, &scratch, dims, &ops),
        _ => forward_cuda::<f64>(stream, &scratch, dims, &ops),
    }
}

fn rnn_bwd_cuda(stream: Stream, scratch: ScratchAllocator<'_>, ops: RnnBwd<'_>) -> Result<()> {
    let (dims, _) = ops.check()?;
    check_dropout(ops.dropout)?;
    match one_dtype(&[&ops.x, &ops.h0, &ops.c0, &ops.w])? {
        DataType::F32 => backward_cuda::<f32>(stream, &scratch, dims, &ops),
        _ => backward_cuda::<f64>(stream, &scratch, dims, &ops),
    }
}

fn ptr<T>(buffer: &Buffer<'_>) -> *mut T {
    buffer.data_ptr().cast()
}

/// The reserve (an F32 array) as scalars of the computation, if it holds the whole reserve.
fn reserve_of<T>(reserve: &Buffer<'_>, layout: Reserve) -> Result<Option<*mut T>> {
    let bytes = reserve.element_count()? * 4;
    let needed = memory::product("reserve", &[layout.len, std::mem::size_of::<T>()])?;
    let aligned = (reserve.data_ptr() as usize).is_multiple_of(std::mem::align_of::<T>());
    Ok((bytes >= needed && aligned && needed > 0).then(|| ptr(reserve)))
}

fn forward_cuda<T: GpuReal>(
    stream: Stream,
    scratch: &ScratchAllocator<'_>,
    dims: Dims,
    ops: &Rnn<'_>,
) -> Result<()> {
    let gpu = GpuStream::adopt(stream)?;
    let call = Call::<T>::new(&gpu, scratch, dims, ops.allow_tf32, ptr(&ops.w), ops.seq_lengths.ptr())?;
    if dims.batch == 0 {
        return Ok(());
    }
    let saved = reserve_of::<T>(&ops.reserve.buffer, call.reserve)?;
    // Inner layers' outputs go to the reserve when it is there, else to scratch.
    let inner = match saved {
        Some(reserve) => unsafe { reserve.add(call.reserve.outputs_start) },
        None => call.alloc(call.reserve.len - call.reserve.outputs_start)?,
    };
    let io = ForwardIo {
        x: ptr(&ops.x),
        h0: ptr(&ops.h0),
        c0: ptr(&ops.c0),
        y: ptr(&ops.y),
        h_n: ptr(&ops.h_n),
        c_n: ptr(&ops.c_n),
        saved: saved.unwrap_or(std::ptr::null_mut()),
        inner,
    };
    // SAFETY: XLA's buffers, checked against the call's sizes.
    unsafe { call.forward(io) }
}

fn backward_cuda<T: GpuReal>(
    stream: Stream,
    scratch: &ScratchAllocator<'_>,
    dims: Dims,
    ops: &RnnBwd<'_>,
) -> Result<()> {
    let gpu = GpuStream::adopt(stream)?;
    let call = Call::<T>::new(&gpu, scratch, dims, ops.allow_tf32, ptr(&ops.w), ops.seq_lengths.ptr())?;
    let groups = ops.groups()?;
    let c = dims.config;
    if dims.batch == 0 {
        // No rows: the weight gradients are zero.
        return gpu.zero(ptr::<c_void>(&ops.dw), ops.dw.element_count()? * ops.dw.dtype_size()?);
    }
    let (x, h0, c0) = (ptr::<T>(&ops.x), ptr::<T>(&ops.h0), ptr::<T>(&ops.c0));
    // The forward pass's values: the caller's reserve, or a forward pass of our own.
    let (saved, inner, y) = match reserve_of::<T>(&ops.reserve.buffer, call.reserve)? {
        Some(reserve) => (reserve, unsafe { reserve.add(call.reserve.outputs_start) }, ptr(&ops.y)),
        None => {
            let saved = call.alloc(call.reserve.len)?;
            let states = c.pseudo_layers() * dims.batch;
            let io = ForwardIo {
                x,
                h0,
                c0,
                y: call.alloc(dims.batch * dims.steps * c.directions() * c.hidden_size)?,
                h_n: call.alloc(states * c.hidden_size)?,
                c_n: call.alloc(states * c.cell_size())?,
                saved,
                inner: unsafe { saved.add(call.reserve.outputs_start) },
            };
            // SAFETY: XLA's operands and our scratch, of the call's sizes.
            unsafe { call.forward(io)? };
            (saved, io.inner, io.y)
        }
    };
    let io = BackwardIo {
        x,
        h0,
        c0,
        y,
        saved,
        inner,
        dy: ptr(&ops.dy),
        dh_n: ptr(&ops.dh_n),
        dc_n: ptr(&ops.dc_n),
        dx: ptr(&ops.dx),
        dh0: ptr(&ops.dh0),
        dc0: ptr(&ops.dc0),
        dw: ptr(&ops.dw),
        groups,
    };
    // SAFETY: as above.
    unsafe { call.backward(io) }
}

/// The device buffers of a forward pass.
#[derive(Clone, Copy)]
struct ForwardIo<T> {
    x: *const T,
    h0: *const T,
    c0: *const T,
    y: *mut T,
    h_n: *mut T,
    c_n: *mut T,
    /// The saved values (null: not kept).
    saved: *mut T,
    /// The inner layers' outputs.
    inner: *mut T,
}

/// The device buffers of a backward pass: the forward pass's values and the gradients.
struct BackwardIo<T> {
    x: *const T,
    h0: *const T,
    c0: *const T,
    y: *const T,
    saved: *const T,
    inner: *const T,
    dy: *const T,
    dh_n: *const T,
    dc_n: *const T,
    dx: *mut T,
    dh0: *mut T,
    dc0: *mut T,
    dw: *mut T,
    groups: usize,
}

/// One call's GPU work: the stream, a cuBLAS handle on it, the scratch allocator, and the
/// network's sizes and device weights.
struct Call<'a, T> {
    gpu: &'a GpuStream,
    blas: Blas<'a>,
    scratch: &'a ScratchAllocator<'a>,
    dims: Dims,
    weights: WeightLayout,
    reserve: Reserve,
    w: *const T,
    lengths: *const i32,
}

impl<'a, T: GpuReal> Call<'a, T> {
    fn new(
        gpu: &'a GpuStream,
        scratch: &'a ScratchAllocator<'a>,
        dims: Dims,
        allow_tf32: bool,
        w: *const T,
        lengths: *const i32,
    ) -> Result<Self> {
        let blas = Blas::on(gpu)?;
        blas.tf32(allow_tf32)?;
        // cuBLAS's sizes are 32-bit: every product's rows, columns and strides below.
        let c = dims.config;
        library_int("batch × steps", dims.batch.saturating_mul(dims.steps))?;
        let widest = c.input_size.max(c.directions() * c.hidden_size);
        library_int(
            "gate rows × width",
            (c.mode.gates() * c.hidden_size).saturating_mul(widest),
        )?;
        Ok(Call {
            gpu,
            blas,
            scratch,
            dims,
            weights: c.weights()?,
            reserve: dims.reserve()?,
            w,
            lengths,
        })
    }

    /// Device scratch for `len` scalars.
    fn alloc(&self, len: usize) -> Result<*mut T> {
        let bytes = memory::product("RNN workspace", &[len, std::mem::size_of::<T>()])?;
        Ok(self.scratch.allocate(bytes, 16)?.cast())
    }

    fn zero(&self, ptr: *mut T, len: usize) -> Result<()> {
        self.gpu.zero(ptr.cast(), len * std::mem::size_of::<T>())
    }

    fn copy(&self, dst: *mut T, src: *const T, len: usize) -> Result<()> {
        self.gpu.copy(dst.cast(), src.cast(), len * std::mem::size_of::<T>())
    }

    /// `c_i = op(a_i)·op(b_i) + beta·c_i` for row-major device matrices, `i < batch`, operand
    /// `i` at its first's address plus `i` times its stride (elements; 0 repeats it).
    ///
    /// # Safety
    /// Every operand lies in device memory of the call.
    #[allow(clippy::too_many_arguments)] // a batched gemm's operands
    unsafe fn gemm(
        &self,
        (c, shape, stride_c): (*mut T, [usize; 3], usize),
        (a, a_transposed, stride_a): (View<T>, bool, usize),
        (b, b_transposed, stride_b): (View<T>, bool, usize),
        beta: T,
        batch: usize,
    ) -> Result<()> {
        if shape[0] == 0 || shape[1] == 0 || batch == 0 {
            return Ok(());
        }
        let plan = ColumnMajor::of(shape, a, a_transposed, b, b_transposed);
        let int = |what: &str, value: usize| library_int(what, value.max(1));
        let op = |t: bool| if t { Op::CUBLAS_OP_T } else { Op::CUBLAS_OP_N };
        let mnk = [int("m", plan.m)?, int("n", plan.n)?, int("k", plan.k)?];
        let (lda, ldb, ldc) = (int("lda", plan.lda)?, int("ldb", plan.ldb)?, int("ldc", plan.ldc)?);
        let stride = |s: usize| s as i64;
        self.blas.run("gemmStridedBatched", |h| {
            T::gemm_strided_batched(
                h,
                op(plan.transa),
                op(plan.transb),
                mnk,
                &T::ONE,
                plan.a,
                lda,
                stride(stride_b),
                plan.b,
                ldb,
                stride(stride_a),
                &beta,
                c,
                ldc,
                stride(stride_c),
                batch as i32,
            )
        })
    }

    /// # Safety
    /// `args` is what the entry's body requires.
    unsafe fn launch<A: KernelArgs>(&self, config: Option<LaunchConfig<A>>, args: A) -> Result<()> {
        let config = config.ok_or_else(|| Error::internal("no RNN kernel for this dtype".to_string()))?;
        self.gpu.launch(&config, args)
    }

    /// The layer's input and output sequences (`B·T` rows): `x` or the previous layer's
    /// output; `y` or its place among the inner layers' outputs.
    fn sequences(&self, layer: usize, x: *const T, y: *mut T, inner: *mut T) -> (View<T>, *mut T) {
        let c = self.dims.config;
        let rows = self.dims.batch * self.dims.steps;
        let width = c.directions() * c.hidden_size;
        // SAFETY (offsets): within the inner layers' outputs, `layers - 1` of `rows × width`.
        let inner_at = |l: usize| unsafe { inner.add(l * rows * width) };
        let input = if layer == 0 {
            View::new(x, rows, c.input_size, c.input_size)
        } else {
            View::new(inner_at(layer - 1).cast_const(), rows, width, width)
        };
        let output = if layer + 1 == c.layers { y } else { inner_at(layer) };
        (input, output)
    }

    /// The weights of layer `layer`'s first pseudo-layer, `(W_ih, W_hh, b_ih)`, and the
    /// distances to the second's (0 for one direction).
    fn layer_weights(&self, layer: usize) -> ([*const T; 3], [usize; 2]) {
        let p = layer * self.dims.config.directions();
        let (w_ih, w_hh) = self.weights.matrices[p];
        let strides = match self.weights.matrices.get(p + 1) {
            Some(&(ih, hh)) if self.dims.config.bidirectional => [ih - w_ih, hh - w_hh],
            _ => [0, 0],
        };
        // SAFETY (offsets): within the packed weights.
        let at = |offset: usize| unsafe { self.w.add(offset) };
        ([at(w_ih), at(w_hh), at(self.weights.biases[p].0)], strides)
    }

    /// The forward pass, layer by layer.
    ///
    /// # Safety
    /// `io`'s buffers are device memory of the call's sizes.
    unsafe fn forward(&self, io: ForwardIo<T>) -> Result<()> {
        let (dims, c) = (self.dims, self.dims.config);
        let (batch, steps, hidden, cell) = (dims.batch, dims.steps, c.hidden_size, c.cell_size());
        let (directions, gates) = (c.directions(), self.weights.gate_rows);
        let (rows, width) = (batch * steps, directions * hidden);
        let pre = self.alloc(directions * rows * gates)?;
        let hw = self.alloc(directions * batch * gates)?;
        let (h, cs) = (self.alloc(directions * batch * hidden)?, self.alloc(directions * batch * cell)?);
        let units = (directions * batch * hidden) as u64;
        for layer in 0..c.layers {
            let (input, output) = self.sequences(layer, io.x, io.y, io.inner);
            let ([w_ih, w_hh, w_bias], [ih_stride, hh_stride]) = self.layer_weights(layer);
            let p0 = layer * directions;
            self.zero(output, rows * width)?;
            self.copy(h, io.h0.add(p0 * batch * hidden), directions * batch * hidden)?;
            self.copy(cs, io.c0.add(p0 * batch * cell), directions * batch * cell)?;
            // Every step's input projection, both directions: pre_d = input · W_ih_dᵀ.
            let w_ih = View::new(w_ih, gates, input.cols, input.cols);
            self.gemm((pre, [rows, gates, gates], rows * gates), (input, false, 0), (w_ih, true, ih_stride), T::ZERO, directions)?;
            let saved = if io.saved.is_null() { io.saved } else { io.saved.add(p0 * self.reserve.saved) };
            for s in 0..steps {
                let w_hh = View::new(w_hh, gates, hidden, hidden);
                let state = View::new(h.cast_const(), batch, hidden, hidden);
                self.gemm((hw, [batch, gates, gates], batch * gates), (state, false, batch * hidden), (w_hh, true, hh_stride), T::ZERO, directions)?;
                let args = ForwardStepArgs::<AnyElement> {
                    x: pre.cast_const().cast(),
                    hw: hw.cast_const().cast(),
                    w_bias: w_bias.cast(),
                    h: h.cast(),
                    c: cs.cast(),
                    saved: saved.cast(),
                    output: output.cast(),
                    lengths: self.lengths,
                    batch: batch as u64,
                    steps: steps as u64,
                    hidden: hidden as u64,
                    directions: directions as u64,
                    step: s as u64,
                    saved_stride: self.reserve.saved as u64,
                };
                self.launch(forward_step_launch(T::KIND, c.mode, units), args)?;
            }
            // The final states; an invalid row's output turns NaN.
            let states = [h.cast_const(), cs.cast_const()];
            let finals = [io.h_n.add(p0 * batch * hidden), io.c_n.add(p0 * batch * cell)];
            self.finish(states, finals, output, [hidden, steps * width, width, 1])?;
        }
        Ok(())
    }

    /// The backward pass, layer by layer from the last.
    ///
    /// # Safety
    /// As [`Call::forward`].
    unsafe fn backward(&self, io: BackwardIo<T>) -> Result<()> {
        let (dims, c) = (self.dims, self.dims.config);
        let (batch, steps, hidden, cell) = (dims.batch, dims.steps, c.hidden_size, c.cell_size());
        let (directions, gates) = (c.directions(), self.weights.gate_rows);
        let (rows, width) = (batch * steps, directions * hidden);
        let split = c.mode.split_gradient();
        let d_in = self.alloc(directions * rows * gates)?;
        let d_rec = if split { self.alloc(directions * rows * gates)? } else { d_in };
        let h_prev = self.alloc(directions * rows * hidden)?;
        let step_rec = self.alloc(directions * batch * gates)?;
        let (mut dh, mut dh_next) = (self.alloc(directions * batch * hidden)?, self.alloc(directions * batch * hidden)?);
        let dc = self.alloc(directions * batch * cell)?;
        let inner_len = if c.layers > 1 { rows * width } else { 0 };
        let upstream = self.alloc(2 * inner_len)?;
        // Past each row's length these stay zero: the products below read them whole.
        for (buffer, len) in [(d_in, rows * gates), (d_rec, rows * gates), (h_prev, rows * hidden)] {
            self.zero(buffer, directions * len)?;
        }
        let units = (directions * batch * hidden) as u64;
        for layer in (0..c.layers).rev() {
            let (input, output) = self.sequences(layer, io.x, io.y.cast_mut(), io.inner.cast_mut());
            let ([_, w_hh, _], [_, hh_stride]) = self.layer_weights(layer);
            let p0 = layer * directions;
            let dy = if layer + 1 == c.layers { io.dy } else { upstream.add((layer + 1) % 2 * inner_len).cast_const() };
            let dx = if layer == 0 { io.dx } else { upstream.add(layer % 2 * inner_len) };
            self.copy(dh, io.dh_n.add(p0 * batch * hidden), directions * batch * hidden)?;
            self.copy(dc, io.dc_n.add(p0 * batch * cell), directions * batch * cell)?;
            for s in (0..steps).rev() {
                let args = BackwardStepArgs::<AnyElement> {
                    dy: dy.cast(),
                    dh: dh.cast_const().cast(),
                    dh_next: dh_next.cast(),
                    dc: dc.cast(),
                    saved: io.saved.add(p0 * self.reserve.saved).cast(),
                    output: output.cast_const().cast(),
                    h0: io.h0.add(p0 * batch * hidden).cast(),
                    c0: io.c0.add(p0 * batch * cell).cast(),
                    d_in: d_in.cast(),
                    d_rec: d_rec.cast(),
                    h_prev: h_prev.cast(),
                    step_rec: step_rec.cast(),
                    lengths: self.lengths,
                    batch: batch as u64,
                    steps: steps as u64,
                    hidden: hidden as u64,
                    directions: directions as u64,
                    step: s as u64,
                    saved_stride: self.reserve.saved as u64,
                };
                self.launch(backward_step_launch(T::KIND, c.mode, units), args)?;
                // dh_next_d += step_rec_d · W_hh_d.
                let rec = View::new(step_rec.cast_const(), batch, gates, gates);
                let w_hh = View::new(w_hh, gates, hidden, hidden);
                self.gemm((dh_next, [batch, hidden, hidden], batch * hidden), (rec, false, batch * gates), (w_hh, false, hh_stride), T::ONE, directions)?;
                std::mem::swap(&mut dh, &mut dh_next);
            }
            // The initial states' gradients; an invalid row's gate gradients turn NaN.
            let states = [dh.cast_const(), dc.cast_const()];
            let initials = [io.dh0.add(p0 * batch * hidden), io.dc0.add(p0 * batch * cell)];
            let layout = [rows * gates, steps * gates, gates, c.mode.gates()];
            self.finish(states, initials, d_in, layout)?;
            self.products(layer, input, [d_in, d_rec, h_prev], dx, io.dw, io.groups)?;
        }
        Ok(())
    }

    /// The end of a layer's pass: its states (or their gradients) `[h, c]` into `out` (the
    /// layer's pseudo-layers), zero for empty rows and NaN for rows of invalid length, whose
    /// elements of `poisoned` turn NaN too: `[per direction, per row, per step, how many]`
    /// apart by `hidden` (see [`FinishArgs`]).
    ///
    /// # Safety
    /// As [`Call::forward`].
    unsafe fn finish(
        &self,
        [h, c]: [*const T; 2],
        [h_out, c_out]: [*mut T; 2],
        poisoned: *mut T,
        [direction, row, step, count]: [usize; 4],
    ) -> Result<()> {
        let (dims, config) = (self.dims, self.dims.config);
        let units = (config.directions() * dims.batch * config.hidden_size) as u64;
        let args = FinishArgs::<AnyElement> {
            h: h.cast(),
            c: c.cast(),
            h_out: h_out.cast(),
            c_out: c_out.cast(),
            poisoned: poisoned.cast(),
            lengths: self.lengths,
            batch: dims.batch as u64,
            steps: dims.steps as u64,
            hidden: config.hidden_size as u64,
            cell: config.cell_size() as u64,
            directions: config.directions() as u64,
            poison_direction: direction as u64,
            poison_row: row as u64,
            poison_step: step as u64,
            poison_count: count as u64,
        };
        self.launch(finish_launch(T::KIND, units), args)
    }

    /// Layer `layer`'s weight gradients, per group of batch rows, and its input's gradient
    /// `dx`, from the gate gradients and starting states of every step.
    ///
    /// # Safety
    /// As [`Call::forward`].
    unsafe fn products(
        &self,
        layer: usize,
        input: View<T>,
        [d_in, d_rec, h_prev]: [*mut T; 3],
        dx: *mut T,
        dw: *mut T,
        groups: usize,
    ) -> Result<()> {
        let (dims, c) = (self.dims, self.dims.config);
        let (hidden, directions, gates) = (c.hidden_size, c.directions(), self.weights.gate_rows);
        let rows = dims.batch * dims.steps;
        let group_rows = rows / groups;
        let (weights, input_size) = (self.weights.len, input.cols);
        for d in 0..directions {
            let p = layer * directions + d;
            let ((w_ih, w_hh), (b_ih, b_hh)) = (self.weights.matrices[p], self.weights.biases[p]);
            let (d_in, d_rec) = (d_in.add(d * rows * gates).cast_const(), d_rec.add(d * rows * gates).cast_const());
            let h_prev = h_prev.add(d * rows * hidden).cast_const();
            let per_group = |v: *const T, cols: usize, ld: usize| (View::new(v, group_rows, cols, ld), group_rows * ld);
            // dW_ih (gates × input) = d_inᵀ · input, dW_hh = d_recᵀ · h_prev, per group.
            for (out, (g, g_stride), (m, m_stride), cols) in [
                (w_ih, per_group(d_in, gates, gates), per_group(input.ptr, input_size, input.ld), input_size),
                (w_hh, per_group(d_rec, gates, gates), per_group(h_prev, hidden, hidden), hidden),
            ] {
                self.gemm((dw.add(out), [gates, cols, cols], weights), (g, true, g_stride), (m, false, m_stride), T::ZERO, groups)?;
            }
            for (out, sums) in [(b_ih, d_in), (b_hh, d_rec)] {
                let args = ColumnSumsArgs::<AnyElement> {
                    m: sums.cast(),
                    out: dw.add(out).cast(),
                    rows: group_rows as u64,
                    cols: gates as u64,
                    ld: gates as u64,
                    groups: groups as u64,
                    out_stride: weights as u64,
                };
                self.launch(column_sums_launch(T::KIND, (groups * gates) as u64), args)?;
            }
            // dx = Σ_d d_in_d · W_ih_d.
            let w_ih = View::new(self.w.add(w_ih), gates, input_size, input_size);
            let beta = if d == 0 { T::ZERO } else { T::ONE };
            self.gemm((dx, [rows, input_size, input_size], 0), (View::new(d_in, rows, gates, gates), false, 0), (w_ih, false, 0), beta, 1)?;
        }
        Ok(())
    }
}
