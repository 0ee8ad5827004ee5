//! The forward pass, layer by layer; in each layer, tasks of (direction, batch chunk).

use super::cell::forward_row;
use super::{
    batch_chunks, matmul, part, run_tasks, Dims, Inputs, Mode, Reserve, RnnScalar, View,
    WeightLayout,
};
use crate::error::{Error, Result};
use crate::linalg::parallel::{Pool, SharedMut};
use crate::memory;
use ferrax_kernels::rnn::{Cell, Gru, Lstm, Relu, Tanh};
use std::sync::Mutex;

/// The forward pass's results: `y` `B × T × directions·hidden`, `h_n` (and `c_n`, LSTM)
/// shaped as `h0`, and the reserve, used when it holds [`Dims::reserve_len`] scalars.
pub struct Outputs<'a, T> {
    pub y: &'a mut [T],
    pub h_n: &'a mut [T],
    pub c_n: &'a mut [T],
    pub reserve: Option<&'a mut [T]>,
}

/// Runs the network over the sequences.
pub fn forward<T: RnnScalar>(
    pool: &dyn Pool,
    dims: Dims,
    inputs: Inputs<'_, T>,
    outputs: Outputs<'_, T>,
) -> Result<()> {
    let weights = dims.config.weights()?;
    let reserve = dims.reserve()?;
    check_sizes(dims, &weights, inputs, &outputs)?;
    let Outputs {
        y,
        h_n,
        c_n,
        reserve: buffer,
    } = outputs;
    // Inner layers' outputs go to the reserve when it is there, else to memory of our own.
    let mut own = Vec::new();
    let (saved, inner) = match buffer.filter(|r| r.len() >= reserve.len) {
        Some(buffer) => {
            let (saved, inner) = buffer.split_at_mut(reserve.outputs_start);
            (
                Some(SharedMut(saved.as_mut_ptr())),
                SharedMut(inner.as_mut_ptr()),
            )
        }
        None => {
            own = memory::vec_of(reserve.len - reserve.outputs_start, T::ZERO)?;
            (None, SharedMut(own.as_mut_ptr()))
        }
    };
    let states = States {
        y: SharedMut(y.as_mut_ptr()),
        h_n: SharedMut(h_n.as_mut_ptr()),
        c_n: SharedMut(c_n.as_mut_ptr()),
        saved,
        inner,
    };
    let run = match dims.config.mode {
        Mode::Relu => run::<T, Relu>,
        Mode::Tanh => run::<T, Tanh>,
        Mode::Lstm => run::<T, Lstm>,
        Mode::Gru => run::<T, Gru>,
    };
    let result = run(pool, dims, &weights, reserve, inputs, states);
    drop(own);
    result
}

fn check_sizes<T>(
    dims: Dims,
    weights: &WeightLayout,
    inputs: Inputs<'_, T>,
    outputs: &Outputs<'_, T>,
) -> Result<()> {
    let c = dims.config;
    let rows = dims.batch * dims.steps;
    let states = c.pseudo_layers() * dims.batch;
    let sizes = [
        ("x", inputs.x.len(), rows * c.input_size),
        ("h0", inputs.h0.len(), states * c.hidden_size),
        ("c0", inputs.c0.len(), states * c.cell_size()),
        ("w", inputs.w.len(), weights.len),
        ("seq_lengths", inputs.lengths.len(), dims.batch),
        ("y", outputs.y.len(), rows * c.directions() * c.hidden_size),
        ("h_n", outputs.h_n.len(), states * c.hidden_size),
        ("c_n", outputs.c_n.len(), states * c.cell_size()),
    ];
    match sizes.iter().find(|(_, got, want)| got != want) {
        Some((name, got, want)) => Err(Error::internal(format!(
            "rnn forward: {name} has {got} elements, expected {want}"
        ))),
        None => Ok(()),
    }
}

/// Where the tasks write: the output, the final states, the saved values (when the reserve
/// holds them) and the inner layers' outputs.
#[derive(Clone, Copy)]
pub(super) struct States<T> {
    pub y: SharedMut<T>,
    pub h_n: SharedMut<T>,
    pub c_n: SharedMut<T>,
    pub saved: Option<SharedMut<T>>,
    pub inner: SharedMut<T>,
}

/// What the tasks of one layer share.
pub(super) struct Layer<'a, T> {
    pub dims: Dims,
    pub layer: usize,
    pub weights: &'a WeightLayout,
    pub reserve: Reserve,
    pub inputs: Inputs<'a, T>,
    /// The layer's input sequence, `B·T × layer input size`.
    pub input: View<T>,
    /// The layer's output sequence, `B·T × directions·hidden`.
    pub output: SharedMut<T>,
    pub states: States<T>,
}

impl<'a, T: RnnScalar> Layer<'a, T> {
    /// Layer `layer` of the pass: its input is `x` or the previous layer's output, its output
    /// `y` for the last layer, else its place among the inner layers' outputs.
    pub fn new(
        (dims, layer): (Dims, usize),
        weights: &'a WeightLayout,
        reserve: Reserve,
        inputs: Inputs<'a, T>,
        states: States<T>,
    ) -> Self {
        let c = dims.config;
        let rows = dims.batch * dims.steps;
        let width = c.directions() * c.hidden_size;
        // SAFETY: offsets within the inner layers' outputs (`layers - 1` of `reserve.output`).
        let inner = |l: usize| unsafe { states.inner.at(l * reserve.output) };
        let input = if layer == 0 {
            View::of(inputs.x, rows, c.input_size)
        } else {
            View::new(inner(layer - 1), rows, width, width)
        };
        let output = if layer + 1 == c.layers {
            states.y
        } else {
            SharedMut(inner(layer))
        };
        Layer {
            dims,
            layer,
            weights,
            reserve,
            inputs,
            input,
            output,
            states,
        }
    }

    /// The rows `rows` of pseudo-layer `p`'s part of a state array `p × B × width` (`h0`,
    /// `dh_n`, ...).
    pub fn state_rows<'s>(
        &self,
        all: &'s [T],
        p: usize,
        rows: &std::ops::Range<usize>,
        width: usize,
    ) -> &'s [T] {
        &all[(p * self.dims.batch + rows.start) * width..][..rows.len() * width]
    }

    /// Pseudo-layer of direction `d`.
    pub fn pseudo(&self, d: usize) -> usize {
        self.layer * self.dims.config.directions() + d
    }

    /// The saved values of (pseudo-layer `p`, row `b`, step `t`).
    ///
    /// # Safety
    /// The saved values exist, and no other task touches this row of this pseudo-layer.
    #[allow(clippy::mut_from_ref)] // the buffer is shared, its rows are not
    pub unsafe fn saved_at(&self, p: usize, b: usize, t: usize) -> &mut [T] {
        let r = self.reserve;
        let saved = self.states.saved.expect("saved values kept");
        saved.slice(
            p * r.saved + (b * self.dims.steps + t) * r.per_step,
            r.per_step,
        )
    }

    /// Direction `d`'s part of the output at (row `b`, step `t`).
    ///
    /// # Safety
    /// No other task writes it while the slice lives.
    #[allow(clippy::mut_from_ref)] // as above
    pub unsafe fn output_at(&self, d: usize, b: usize, t: usize) -> &mut [T] {
        let c = self.dims.config;
        let width = c.directions() * c.hidden_size;
        self.output.slice(
            (b * self.dims.steps + t) * width + d * c.hidden_size,
            c.hidden_size,
        )
    }
}

fn run<T: RnnScalar, C: Cell>(
    pool: &dyn Pool,
    dims: Dims,
    weights: &WeightLayout,
    reserve: Reserve,
    inputs: Inputs<'_, T>,
    states: States<T>,
) -> Result<()> {
    let directions = dims.config.directions();
    let chunks = batch_chunks(pool.threads(), directions, dims.batch);
    let workspaces: Vec<Mutex<Workspace<T>>> =
        (0..directions * chunks).map(|_| Mutex::default()).collect();
    for layer in 0..dims.config.layers {
        let ctx = Layer::new((dims, layer), weights, reserve, inputs, states);
        run_tasks(pool, directions * chunks, &|task| {
            let rows = part(dims.batch, chunks, task % chunks);
            forward_rows::<T, C>(&ctx, &workspaces[task], task / chunks, rows)
        })?;
    }
    Ok(())
}

/// One task's memory, kept across the layers of a call.
#[derive(Default)]
pub(super) struct Workspace<T> {
    /// Every step's input projection, `rows·T × gates`.
    pre: Vec<T>,
    /// One step's recurrent product, `rows × gates`.
    hw: Vec<T>,
    h: Vec<T>,
    c: Vec<T>,
    /// The saved values of a step, where the reserve does not keep them.
    discarded: Vec<T>,
}

/// `vec` as `len` elements (contents unspecified: the caller writes them before reading).
fn sized<T: RnnScalar>(vec: &mut Vec<T>, len: usize) -> Result<&mut [T]> {
    memory::grow(vec, len, T::ZERO)?;
    Ok(&mut vec[..len])
}

/// Direction `d` of the layer over the batch rows `rows`.
fn forward_rows<T: RnnScalar, C: Cell>(
    ctx: &Layer<'_, T>,
    workspace: &Mutex<Workspace<T>>,
    d: usize,
    rows: std::ops::Range<usize>,
) -> Result<()> {
    let (dims, c) = (ctx.dims, ctx.dims.config);
    let (steps, hidden, cell) = (dims.steps, c.hidden_size, c.cell_size());
    let (nb, gates, p) = (rows.len(), ctx.weights.gate_rows, ctx.pseudo(d));
    if nb == 0 {
        return Ok(());
    }
    let mut workspace = workspace.lock().unwrap_or_else(|e| e.into_inner());
    let Workspace {
        pre,
        hw,
        h,
        c: cs,
        discarded,
    } = &mut *workspace;
    let w = ctx.inputs.w;
    let (w_ih, w_hh) = ctx.weights.matrices[p];
    let (b_ih, b_hh) = ctx.weights.biases[p];
    let input_size = ctx.input.cols;
    let w_ih = View::of(&w[w_ih..], gates, input_size);
    let w_hh = View::of(&w[w_hh..], gates, hidden);
    let (b_ih, b_hh) = (&w[b_ih..b_ih + gates], &w[b_hh..b_hh + gates]);

    // Every step's input projection: one GEMM.
    let pre = sized(pre, nb * steps * gates)?;
    let input = View::new(
        // SAFETY: rows `rows` of the layer's input.
        unsafe { ctx.input.ptr.add(rows.start * steps * ctx.input.ld) },
        nb * steps,
        input_size,
        ctx.input.ld,
    );
    // SAFETY: `pre` is `nb·steps × gates`, the views lie in their buffers.
    unsafe {
        matmul(
            pre.as_mut_ptr(),
            [nb * steps, gates, gates],
            input,
            false,
            w_ih,
            true,
            T::ZERO,
        )?
    };

    let state = |vec: &mut Vec<T>, all: &[T], width: usize| {
        sized(vec, nb * width)?.copy_from_slice(ctx.state_rows(all, p, &rows, width));
        Ok::<_, Error>(())
    };
    state(h, ctx.inputs.h0, hidden)?;
    state(cs, ctx.inputs.c0, cell)?;
    let (h, cs) = (&mut h[..nb * hidden], &mut cs[..nb * cell]);
    let hw = sized(hw, nb * gates)?;
    let discarded = sized(discarded, ctx.reserve.per_step)?;
    let lengths = ctx.inputs.lengths;
    for s in 0..steps {
        // SAFETY: `hw` is `nb × gates`; `h` is `nb × hidden`.
        unsafe {
            matmul(
                hw.as_mut_ptr(),
                [nb, gates, gates],
                View::of(h, nb, hidden),
                false,
                w_hh,
                true,
                T::ZERO,
            )?
        };
        for (i, b) in rows.clone().enumerate() {
            let len = lengths[b] as usize;
            if s >= len {
                continue;
            }
            let t = if d == 0 { s } else { len - 1 - s };
            let saved = match ctx.states.saved {
                // SAFETY: this task's row of this pseudo-layer.
                Some(_) => unsafe { ctx.saved_at(p, b, t) },
                None => &mut discarded[..],
            };
            let h_row = &mut h[i * hidden..(i + 1) * hidden];
            let products = [
                &pre[(i * steps + t) * gates..][..gates],
                &hw[i * gates..][..gates],
            ];
            forward_row::<T, C>(
                [products[0], products[1], b_ih, b_hh],
                h_row,
                &mut cs[i * cell..(i + 1) * cell],
                saved,
            );
            // SAFETY: this task's row and direction of the output.
            unsafe { ctx.output_at(d, b, t) }.copy_from_slice(h_row);
        }
    }

    for (i, b) in rows.enumerate() {
        let len = lengths[b] as usize;
        for t in len..steps {
            // SAFETY: as above.
            unsafe { ctx.output_at(d, b, t) }.fill(T::ZERO);
        }
        let at = (p * dims.batch + b) * hidden;
        // SAFETY: this task's rows of this pseudo-layer's final states.
        let (h_n, c_n) = unsafe {
            (
                ctx.states.h_n.slice(at, hidden),
                ctx.states.c_n.slice((p * dims.batch + b) * cell, cell),
            )
        };
        // A row of length 0 has zero final states, as cuDNN's.
        if len == 0 {
            h_n.fill(T::ZERO);
            c_n.fill(T::ZERO);
        } else {
            h_n.copy_from_slice(&h[i * hidden..(i + 1) * hidden]);
            c_n.copy_from_slice(&cs[i * cell..(i + 1) * cell]);
        }
    }
    Ok(())
}
