//! The backward pass, layer by layer from the last: per layer, the recurrence in reverse in
//! tasks of (direction, batch chunk), which keeps every step's gate gradients; then the weight
//! gradients (one GEMM per matrix, split by gate rows) and the layer input's gradient (one GEMM
//! per direction, split by rows) as tasks of one pool run.

use super::cell::backward_row;
use super::forward::{Layer, States};
use super::{
    batch_chunks, forward, matmul, part, run_tasks, Dims, Inputs, Mode, Outputs, Reserve,
    RnnScalar, View, WeightLayout,
};
use crate::error::{Error, Result};
use crate::linalg::parallel::{Pool, SharedMut};
use crate::memory;
use ferrax_kernels::rnn::{Cell, Gru, Lstm, Relu, Tanh};

/// The gradients of the forward pass's results: `dy` shaped as `y`, `dh_n` and `dc_n` (LSTM)
/// as `h0` and `c0`.
#[derive(Clone, Copy)]
pub struct Gradients<'a, T> {
    pub dy: &'a [T],
    pub dh_n: &'a [T],
    pub dc_n: &'a [T],
}

/// The backward pass's results, shaped as `x`, `h0` and `c0`, and `dw` as `groups` weight
/// vectors: the weight gradient of each of `groups` equal, consecutive parts of the batch
/// (vmap of a gradient folds its axis into the batch and keeps each instance's apart).
pub struct InputGradients<'a, T> {
    pub dx: &'a mut [T],
    pub dh0: &'a mut [T],
    pub dc0: &'a mut [T],
    pub dw: &'a mut [T],
    pub groups: usize,
}

/// The gradients of the inputs, from the forward pass's output `y` and its reserve (used
/// when it holds [`Dims::reserve_len`] scalars; otherwise the forward pass runs again here).
pub fn backward<T: RnnScalar>(
    pool: &dyn Pool,
    dims: Dims,
    inputs: Inputs<'_, T>,
    y: &[T],
    reserve: Option<&[T]>,
    gradients: Gradients<'_, T>,
    out: InputGradients<'_, T>,
) -> Result<()> {
    let weights = dims.config.weights()?;
    let layout = dims.reserve()?;
    check_sizes(dims, &weights, inputs, y, gradients, &out)?;
    let recomputed;
    let (reserve, y) = match reserve.filter(|r| r.len() >= layout.len) {
        Some(reserve) => (reserve, y),
        None => {
            recomputed = forward_again(pool, dims, inputs, layout.len, y.len())?;
            (&recomputed.0[..], &recomputed.1[..])
        }
    };
    // The backward pass only reads these through the forward pass's `States`.
    let states = States {
        y: SharedMut(y.as_ptr().cast_mut()),
        h_n: SharedMut(std::ptr::null_mut()),
        c_n: SharedMut(std::ptr::null_mut()),
        saved: Some(SharedMut(reserve.as_ptr().cast_mut())),
        // SAFETY: the inner layers' outputs follow the saved values in the reserve.
        inner: SharedMut(unsafe { reserve.as_ptr().add(layout.outputs_start) }.cast_mut()),
    };
    let run = match dims.config.mode {
        Mode::Relu => run::<T, Relu>,
        Mode::Tanh => run::<T, Tanh>,
        Mode::Lstm => run::<T, Lstm>,
        Mode::Gru => run::<T, Gru>,
    };
    run(pool, dims, &weights, layout, inputs, states, gradients, out)
}

/// The forward pass into memory of our own: its reserve and output.
fn forward_again<T: RnnScalar>(
    pool: &dyn Pool,
    dims: Dims,
    inputs: Inputs<'_, T>,
    reserve_len: usize,
    y_len: usize,
) -> Result<(Vec<T>, Vec<T>)> {
    let mut reserve = memory::vec_of(reserve_len, T::ZERO)?;
    let mut y = memory::vec_of(y_len, T::ZERO)?;
    let mut h_n = memory::vec_of(inputs.h0.len(), T::ZERO)?;
    let mut c_n = memory::vec_of(inputs.c0.len(), T::ZERO)?;
    let outputs = Outputs {
        y: &mut y,
        h_n: &mut h_n,
        c_n: &mut c_n,
        reserve: Some(&mut reserve),
    };
    forward(pool, dims, inputs, outputs)?;
    Ok((reserve, y))
}

fn check_sizes<T>(
    dims: Dims,
    weights: &WeightLayout,
    inputs: Inputs<'_, T>,
    y: &[T],
    gradients: Gradients<'_, T>,
    out: &InputGradients<'_, T>,
) -> Result<()> {
    let c = dims.config;
    let rows = dims.batch * dims.steps;
    let states = c.pseudo_layers() * dims.batch;
    let (hidden, cell) = (states * c.hidden_size, states * c.cell_size());
    let output = rows * c.directions() * c.hidden_size;
    let sizes = [
        ("x", inputs.x.len(), rows * c.input_size),
        ("h0", inputs.h0.len(), hidden),
        ("c0", inputs.c0.len(), cell),
        ("w", inputs.w.len(), weights.len),
        ("seq_lengths", inputs.lengths.len(), dims.batch),
        ("y", y.len(), output),
        ("dy", gradients.dy.len(), output),
        ("dh_n", gradients.dh_n.len(), hidden),
        ("dc_n", gradients.dc_n.len(), cell),
        ("dx", out.dx.len(), rows * c.input_size),
        ("dh0", out.dh0.len(), hidden),
        ("dc0", out.dc0.len(), cell),
        ("dw", out.dw.len(), weights.len * out.groups),
    ];
    if out.groups == 0 || !dims.batch.is_multiple_of(out.groups) {
        return Err(Error::internal(format!(
            "rnn backward: {} weight groups for a batch of {}",
            out.groups, dims.batch
        )));
    }
    match sizes.iter().find(|(_, got, want)| got != want) {
        Some((name, got, want)) => Err(Error::internal(format!(
            "rnn backward: {name} has {got} elements, expected {want}"
        ))),
        None => Ok(()),
    }
}

/// The backward pass's own buffers, per direction: the gate gradients of every (row, step)
/// as the input projection sees them (`d_in`) and, for the GRU, as the recurrent product sees
/// them (`d_rec`; otherwise the same as `d_in`), and the state each step started from
/// (`h_prev`); zero past each row's length.
struct Buffers<T> {
    d_in: SharedMut<T>,
    d_rec: SharedMut<T>,
    h_prev: SharedMut<T>,
    /// Scalars per direction of `d_in`/`d_rec` and of `h_prev`.
    gates_len: usize,
    h_len: usize,
}

impl<T> Buffers<T> {
    fn d_in(&self, d: usize) -> *mut T {
        // SAFETY: within the buffer of `directions` parts.
        unsafe { self.d_in.at(d * self.gates_len) }
    }
    fn d_rec(&self, d: usize) -> *mut T {
        // SAFETY: as above.
        unsafe { self.d_rec.at(d * self.gates_len) }
    }
    fn h_prev(&self, d: usize) -> *mut T {
        // SAFETY: as above.
        unsafe { self.h_prev.at(d * self.h_len) }
    }
}

#[allow(clippy::too_many_arguments)] // the pass's operands
fn run<T: RnnScalar, C: Cell>(
    pool: &dyn Pool,
    dims: Dims,
    weights: &WeightLayout,
    reserve: Reserve,
    inputs: Inputs<'_, T>,
    states: States<T>,
    gradients: Gradients<'_, T>,
    out: InputGradients<'_, T>,
) -> Result<()> {
    let c = dims.config;
    let (directions, rows) = (c.directions(), dims.batch * dims.steps);
    let width = directions * c.hidden_size;
    let gates_len = memory::product("gate gradients", &[rows, weights.gate_rows])?;
    let h_len = rows * c.hidden_size;
    let mut d_in = memory::vec_of(gates_len * directions, T::ZERO)?;
    let mut d_rec = if C::MODE.split_gradient() {
        memory::vec_of(gates_len * directions, T::ZERO)?
    } else {
        Vec::new()
    };
    let mut h_prev = memory::vec_of(h_len * directions, T::ZERO)?;
    let buffers = Buffers {
        d_in: SharedMut(d_in.as_mut_ptr()),
        d_rec: SharedMut(if C::MODE.split_gradient() {
            d_rec.as_mut_ptr()
        } else {
            d_in.as_mut_ptr()
        }),
        h_prev: SharedMut(h_prev.as_mut_ptr()),
        gates_len,
        h_len,
    };
    // The gradients of the inner layers' outputs, each layer's written into the buffer its
    // lower layer reads (alternating).
    let inner_len = if c.layers > 1 { rows * width } else { 0 };
    let mut upstream = memory::vec_of(2 * inner_len, T::ZERO)?;
    let upstream = SharedMut(upstream.as_mut_ptr());
    let out_ptrs = [
        out.dh0.as_mut_ptr(),
        out.dc0.as_mut_ptr(),
        out.dw.as_mut_ptr(),
    ];
    let [dh0, dc0, dw] = out_ptrs.map(SharedMut);
    let dx = SharedMut(out.dx.as_mut_ptr());
    let groups = out.groups;
    let chunks = batch_chunks(pool.threads(), directions, dims.batch);
    for layer in (0..c.layers).rev() {
        let ctx = Layer::new((dims, layer), weights, reserve, inputs, states);
        // SAFETY: offsets within `upstream`'s two parts.
        let dy = if layer + 1 == c.layers {
            gradients.dy.as_ptr()
        } else {
            unsafe { upstream.at((layer + 1) % 2 * inner_len) }.cast_const()
        };
        let dx = if layer == 0 {
            dx
        } else {
            SharedMut(unsafe { upstream.at(layer % 2 * inner_len) })
        };
        let step = Step {
            dy,
            dh_n: gradients.dh_n,
            dc_n: gradients.dc_n,
            dh0,
            dc0,
        };
        run_tasks(pool, directions * chunks, &|task| {
            let rows = part(dims.batch, chunks, task % chunks);
            backward_rows::<T, C>(&ctx, &step, &buffers, task / chunks, rows)
        })?;
        products(pool, &ctx, &buffers, [dw, dx], groups)?;
    }
    drop((d_in, d_rec, h_prev));
    Ok(())
}

/// What the reverse recurrence reads besides the layer: the gradient of the layer's output
/// sequence and of the final states; and the gradients of the initial states it writes.
struct Step<'a, T> {
    dy: *const T,
    dh_n: &'a [T],
    dc_n: &'a [T],
    dh0: SharedMut<T>,
    dc0: SharedMut<T>,
}

// The tasks read `dy` (a buffer no task writes during the recurrence) and write their own rows
// of `dh0` and `dc0`.
unsafe impl<T> Sync for Step<'_, T> {}

/// Direction `d` of the layer over the batch rows `rows`, steps in reverse: the gate
/// gradients and starting states of every step into `buffers`, the initial states' gradients
/// into `step`'s.
fn backward_rows<T: RnnScalar, C: Cell>(
    ctx: &Layer<'_, T>,
    step: &Step<'_, T>,
    buffers: &Buffers<T>,
    d: usize,
    rows: std::ops::Range<usize>,
) -> Result<()> {
    let (dims, c) = (ctx.dims, ctx.dims.config);
    let (steps, hidden, cell) = (dims.steps, c.hidden_size, c.cell_size());
    let (nb, gates, p) = (rows.len(), ctx.weights.gate_rows, ctx.pseudo(d));
    if nb == 0 {
        return Ok(());
    }
    let width = c.directions() * hidden;
    let w_hh = View::of(&ctx.inputs.w[ctx.weights.matrices[p].1..], gates, hidden);
    let state = |all: &[T], width: usize| {
        let mut state = memory::vec_of(nb * width, T::ZERO)?;
        state.copy_from_slice(ctx.state_rows(all, p, &rows, width));
        Ok::<_, Error>(state)
    };
    let (mut dh, mut dc) = (state(step.dh_n, hidden)?, state(step.dc_n, cell)?);
    let (h0, c0) = (ctx.inputs.h0, ctx.inputs.c0);
    let mut dh_next = memory::vec_of(nb * hidden, T::ZERO)?;
    let mut d_in = memory::vec_of(nb * gates, T::ZERO)?;
    let mut d_rec = memory::vec_of(
        if C::MODE.split_gradient() {
            nb * gates
        } else {
            0
        },
        T::ZERO,
    )?;
    let mut dh_total = memory::vec_of(hidden, T::ZERO)?;
    let lengths = ctx.inputs.lengths;
    // SAFETY (for the slices of the shared buffers below): each task writes only its own rows
    // of this direction's parts, and reads the layer's output and saved values, which no task
    // writes in the backward pass.
    let row_of = |ptr: *mut T, b: usize, t: usize, len: usize| unsafe {
        SharedMut(ptr).slice((b * steps + t) * len, len)
    };
    for s in (0..steps).rev() {
        for (i, b) in rows.clone().enumerate() {
            let len = lengths[b] as usize;
            let rec = if C::MODE.split_gradient() {
                &mut d_rec
            } else {
                &mut d_in
            };
            let rec_row = &mut rec[i * gates..(i + 1) * gates];
            if s >= len {
                // Not started yet: nothing flows through the recurrent product.
                rec_row.fill(T::ZERO);
                dh_next[i * hidden..(i + 1) * hidden].copy_from_slice(&dh[i * hidden..][..hidden]);
                continue;
            }
            let t = if d == 0 { s } else { len - 1 - s };
            // The step that fed this one, in this direction's order.
            let prev = if d == 0 {
                t.checked_sub(1)
            } else {
                Some(t + 1).filter(|&t| t < len)
            };
            let initial = (p * dims.batch + b) * hidden;
            // SAFETY: see `row_of`.
            let (h, h_prev) = unsafe {
                let h_prev: &[T] = match prev {
                    Some(prev) => ctx.output_at(d, b, prev),
                    None => &h0[initial..initial + hidden],
                };
                (&*ctx.output_at(d, b, t), h_prev)
            };
            let c_prev: &[T] = match prev {
                // SAFETY: see `row_of`.
                Some(prev) if cell > 0 => unsafe { &ctx.saved_at(p, b, prev)[4 * hidden..] },
                _ => &c0[(p * dims.batch + b) * cell..][..cell],
            };
            // SAFETY: see `row_of`.
            let saved = unsafe { &*ctx.saved_at(p, b, t) };
            let upstream = unsafe {
                std::slice::from_raw_parts(
                    step.dy.add((b * steps + t) * width + d * hidden),
                    hidden,
                )
            };
            for ((total, &a), &b) in dh_total.iter_mut().zip(&dh[i * hidden..]).zip(upstream) {
                *total = a + b;
            }
            backward_row::<T, C>(
                &dh_total,
                saved,
                [h, h_prev, c_prev],
                &mut dc[i * cell..(i + 1) * cell],
                &mut d_in[i * gates..(i + 1) * gates],
                if C::MODE.split_gradient() {
                    &mut d_rec[i * gates..(i + 1) * gates]
                } else {
                    &mut []
                },
                &mut dh_next[i * hidden..(i + 1) * hidden],
            );
            row_of(buffers.d_in(d), b, t, gates).copy_from_slice(&d_in[i * gates..][..gates]);
            if C::MODE.split_gradient() {
                row_of(buffers.d_rec(d), b, t, gates).copy_from_slice(&d_rec[i * gates..][..gates]);
            }
            row_of(buffers.h_prev(d), b, t, hidden).copy_from_slice(h_prev);
        }
        let rec = if C::MODE.split_gradient() {
            &d_rec
        } else {
            &d_in
        };
        // SAFETY: `dh_next` is `nb × hidden`; the views lie in their buffers.
        unsafe {
            matmul(
                dh_next.as_mut_ptr(),
                [nb, hidden, hidden],
                View::of(rec, nb, gates),
                false,
                w_hh,
                false,
                T::ONE,
            )?
        };
        std::mem::swap(&mut dh, &mut dh_next);
    }

    for (i, b) in rows.enumerate() {
        let len = lengths[b] as usize;
        for t in len..steps {
            row_of(buffers.d_in(d), b, t, gates).fill(T::ZERO);
            if C::MODE.split_gradient() {
                row_of(buffers.d_rec(d), b, t, gates).fill(T::ZERO);
            }
            row_of(buffers.h_prev(d), b, t, hidden).fill(T::ZERO);
        }
        // SAFETY: this task's rows of this pseudo-layer's initial-state gradients.
        let (dh0, dc0) = unsafe {
            (
                step.dh0.slice((p * dims.batch + b) * hidden, hidden),
                step.dc0.slice((p * dims.batch + b) * cell, cell),
            )
        };
        // A row of length 0 has zero final states whatever its initial ones.
        if len == 0 {
            dh0.fill(T::ZERO);
            dc0.fill(T::ZERO);
        } else {
            dh0.copy_from_slice(&dh[i * hidden..(i + 1) * hidden]);
            dc0.copy_from_slice(&dc[i * cell..(i + 1) * cell]);
        }
    }
    Ok(())
}

/// The layer's weight gradients (per group of batch rows) and its input's gradient from the
/// gate gradients: tasks of (direction, group, block of gate rows) for the weights and of row
/// blocks for the input.
fn products<T: RnnScalar>(
    pool: &dyn Pool,
    ctx: &Layer<'_, T>,
    buffers: &Buffers<T>,
    [dw, dx]: [SharedMut<T>; 2],
    groups: usize,
) -> Result<()> {
    let (dims, c) = (ctx.dims, ctx.dims.config);
    let (directions, hidden, gates) = (c.directions(), c.hidden_size, ctx.weights.gate_rows);
    let rows = dims.batch * dims.steps;
    let group_rows = rows / groups;
    let input_size = ctx.input.cols;
    let threads = pool.threads().max(1);
    let weight_tasks = directions * groups;
    let weight_blocks = threads.div_ceil(weight_tasks).min(gates).max(1);
    let row_blocks = threads.min(rows.max(1));
    let w = ctx.inputs.w;
    run_tasks(pool, weight_tasks * weight_blocks + row_blocks, &|task| {
        if task >= weight_tasks * weight_blocks {
            // dx (rows × input) = Σ_d d_in_d (rows × gates) · W_ih_d (gates × input).
            let block = part(rows, row_blocks, task - weight_tasks * weight_blocks);
            for d in 0..directions {
                let w_ih = View::of(
                    &w[ctx.weights.matrices[ctx.pseudo(d)].0..],
                    gates,
                    input_size,
                );
                // SAFETY: the block's rows of `d_in` and of `dx`, which no other task writes.
                unsafe {
                    let d_in = View::new(
                        buffers.d_in(d).add(block.start * gates),
                        block.len(),
                        gates,
                        gates,
                    );
                    let beta = if d == 0 { T::ZERO } else { T::ONE };
                    matmul(
                        dx.at(block.start * input_size),
                        [block.len(), input_size, input_size],
                        d_in,
                        false,
                        w_ih,
                        false,
                        beta,
                    )?;
                }
            }
            return Ok(());
        }
        let (unit, g) = (
            task / weight_blocks,
            part(gates, weight_blocks, task % weight_blocks),
        );
        let (d, group) = (unit % directions, unit / directions);
        let p = ctx.pseudo(d);
        let (w_ih, w_hh) = ctx.weights.matrices[p];
        let (b_ih, b_hh) = ctx.weights.biases[p];
        let first = group * group_rows;
        let dw = SharedMut(unsafe { dw.at(group * ctx.weights.len) });
        // SAFETY: the block's gate rows of this pseudo-layer's gradients in this group's
        // weight vector, which no other task writes; the gate gradients, starting states and
        // input rows of the group are only read here.
        unsafe {
            let d_in = View::new(
                buffers.d_in(d).add(first * gates + g.start),
                group_rows,
                g.len(),
                gates,
            );
            let d_rec = View::new(
                buffers.d_rec(d).add(first * gates + g.start),
                group_rows,
                g.len(),
                gates,
            );
            let h_prev = View::new(
                buffers.h_prev(d).add(first * hidden).cast_const(),
                group_rows,
                hidden,
                hidden,
            );
            let input = View::new(
                ctx.input.ptr.add(first * ctx.input.ld),
                group_rows,
                input_size,
                ctx.input.ld,
            );
            // dW_ih (gates × input) = d_inᵀ · input; dW_hh = d_recᵀ · h_prev.
            matmul(
                dw.at(w_ih + g.start * input_size),
                [g.len(), input_size, input_size],
                d_in,
                true,
                input,
                false,
                T::ZERO,
            )?;
            matmul(
                dw.at(w_hh + g.start * hidden),
                [g.len(), hidden, hidden],
                d_rec,
                true,
                h_prev,
                false,
                T::ZERO,
            )?;
            column_sums(d_in, dw.slice(b_ih + g.start, g.len()));
            column_sums(d_rec, dw.slice(b_hh + g.start, g.len()));
        }
        Ok(())
    })
}

/// `out[j] = Σ_r m[r, j]`.
///
/// # Safety
/// `m` lies in live memory.
unsafe fn column_sums<T: RnnScalar>(m: View<T>, out: &mut [T]) {
    out.fill(T::ZERO);
    for r in 0..m.rows {
        let row = std::slice::from_raw_parts(m.ptr.add(r * m.ld), m.cols);
        for (o, &x) in out.iter_mut().zip(row) {
            *o += x;
        }
    }
}
