//! Recurrent networks' cells, one hidden unit of one step, with cuDNN's equations (which are
//! PyTorch's): the arithmetic the CPU core's vectorized row loops and the GPU's step kernels
//! share, and those kernels. The matrix products around them are BLAS (CPU) and cuBLAS (GPU)
//! calls.
//!
//! - ReLU / tanh RNN: `h' = act(W x + b_W + R h + b_R)`.
//! - LSTM, gates i, f, g, o: `c' = f⊙c + i⊙g`, `h' = o⊙tanh(c')`.
//! - GRU, gates r, z, n: `n = tanh(W_n x + b_Wn + r⊙(R_n h + b_Rn))`, `h' = (1 - z)⊙n + z⊙h`.
//!
//! The activations are Cephes' `exp` and `tanh` (polynomial and rational approximations within
//! a few ulp), branch-free and table-free, so that the CPU's loops over a row vectorize and the
//! GPU kernels need no stack.
//!
//! The step kernels take one thread per (direction, batch row, hidden unit) and read each row's
//! sequence length on the device, so the host never sees them: a step past a row's length
//! leaves the row as it is (its output stays zero), and a length outside `0..=T` makes the
//! row's results NaN.
//!
//! Device layouts, per layer: the input projections `pre` `(D, B, T, gates·H)`; the step's
//! recurrent products `hw` and the states `h`, `c` `(D, B, ·)`; the saved values of
//! pseudo-layer `p` at `saved + p·saved_stride + (b·T + t)·saved·H` (the CPU's reserve layout);
//! the layer's output `(B, T, D·H)`; the backward pass's gate gradients `d_in`, `d_rec`
//! `(D, B, T, gates·H)` and starting states `h_prev` `(D, B, T, H)`.

use crate::grid::{global_idx_x, grid_size_x};
use crate::launch::{kernel_args, kernel_entries, AnyElement, LaunchConfig, ScalarKind};
use crate::scalar::Real;

/// The cell, with cuDNN's values of `cudnnRNNMode_t` (the RNN targets' `mode` attribute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Relu = 0,
    Tanh = 1,
    Lstm = 2,
    Gru = 3,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Relu, Mode::Tanh, Mode::Lstm, Mode::Gru];

    pub fn from_raw(raw: i64) -> Option<Mode> {
        Mode::ALL.into_iter().find(|&m| m as i64 == raw)
    }

    /// Gate blocks of `hidden_size` rows in each weight matrix and bias.
    pub const fn gates(self) -> usize {
        match self {
            Mode::Relu | Mode::Tanh => 1,
            Mode::Lstm => 4,
            Mode::Gru => 3,
        }
    }

    /// Values per hidden unit the forward pass keeps per step for the backward pass (LSTM: i,
    /// f, g, o and the new cell state; GRU: r, z, n and the n gate's recurrent product with its
    /// bias; the plain cells' output is all they need).
    pub const fn saved(self) -> usize {
        match self {
            Mode::Relu | Mode::Tanh => 0,
            Mode::Lstm => 5,
            Mode::Gru => 4,
        }
    }

    /// Whether the cell has a cell state (`c0`, `c_n`) besides the hidden state.
    pub const fn has_cell_state(self) -> bool {
        matches!(self, Mode::Lstm)
    }

    /// Whether the gradient of the recurrent product differs from the input projection's (the
    /// GRU's n gate sees `R_n h + b_Rn` through `r`).
    pub const fn split_gradient(self) -> bool {
        matches!(self, Mode::Gru)
    }
}

/// The activations, exact to a few ulp.
pub trait Activation: Real {
    fn sigmoid(self) -> Self;
    fn tanh(self) -> Self;
    /// `max(self, 0)`, NaN kept.
    #[inline(always)]
    fn relu(self) -> Self {
        if self < Self::ZERO {
            Self::ZERO
        } else {
            self
        }
    }
}

impl Activation for f32 {
    #[inline(always)]
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + exp_f32(-self))
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        tanh_f32(self)
    }
}

impl Activation for f64 {
    #[inline(always)]
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + exp_f64(-self))
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        tanh_f64(self)
    }
}

/// `a·b + c` rounded once where the target fuses it: the GPU, and the host with the `std`
/// feature (the CPU core's loops run where the CPU has FMA; elsewhere `mul_add` is exact but
/// slow); rounded twice without it (core has no `mul_add` on stable).
#[inline(always)]
fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return core::f32::math::mul_add(a, b, c);
    #[cfg(all(not(target_arch = "nvptx64"), feature = "std"))]
    return std::primitive::f32::mul_add(a, b, c);
    #[cfg(all(not(target_arch = "nvptx64"), not(feature = "std")))]
    return a * b + c;
}

/// Cephes' `expf`: `2^n · p(r)` with `x = n·ln 2 + r`, `|r| ≤ ln 2 / 2`. NaN stays NaN; the
/// argument is clamped to where `2^n` is a normal number.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // Comparisons rather than min/max, which would turn NaN into the bound.
    let x = if x > 88.0 { 88.0 } else { x };
    let x = if x < -87.3 { -87.3 } else { x };
    // Round to nearest by the float-add trick, which also leaves n in the low bits of `t`:
    // integer arithmetic from there, where a float-to-int conversion (saturating in Rust)
    // would not vectorize.
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    let t = x * core::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = mul_add(n, 2.121_944_4e-4, mul_add(n, -0.693_359_4, x));
    let p = mul_add(1.987_569_1e-4, r, 1.398_2e-3);
    let p = mul_add(p, r, 8.333_452e-3);
    let p = mul_add(p, r, 4.166_579_6e-2);
    let p = mul_add(p, r, 0.166_666_65);
    let p = mul_add(p, r, 0.5);
    let p = mul_add(p * r, r, r + 1.0);
    // 2^n for n in [-126, 127] (NaN gives any scale here and NaN above).
    let biased = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    p * f32::from_bits(biased << 23)
}

/// Cephes' `tanhf`: an odd polynomial below 0.625, `1 - 2/(e^{2|x|} + 1)` above; both
/// computed and one selected, so that a loop of them vectorizes.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let z = x * x;
    let p = mul_add(-5.704_988_7e-3, z, 2.063_909e-2);
    let p = mul_add(p, z, -5.373_971_6e-2);
    let p = mul_add(p, z, 0.133_314_42);
    let p = mul_add(p, z, -0.333_332_8);
    let small = mul_add(p * z, x, x);
    let large = 1.0 - 2.0 / (exp_f32(2.0 * x.abs()) + 1.0);
    if x.abs() < 0.625 {
        small
    } else {
        Real::copysign(large, x)
    }
}

/// One unit's forward step: its new state and what the backward pass needs (`saved`, the
/// first [`Mode::saved`] of them).
#[derive(Clone, Copy, Debug)]
pub struct Step<T> {
    pub h: T,
    pub c: T,
    pub saved: [T; 5],
}

/// One unit's backward step: the gradients of the gates' pre-activations as the input
/// projection sees them (`d_in`) and as the recurrent product sees them (`d_rec`, the same but
/// for the GRU's n gate), and of the previous state apart from the recurrent product's.
#[derive(Clone, Copy, Debug)]
pub struct Gradient<T> {
    pub d_in: [T; 4],
    pub d_rec: [T; 4],
    pub dh_prev: T,
    pub dc_prev: T,
}

/// A cell's arithmetic for one hidden unit (the first [`Mode::gates`] entries of each array
/// are read or written).
pub trait Cell: 'static {
    const MODE: Mode;

    /// `x[k]`, `r[k]`: gate `k`'s input projection `(W x)` and recurrent product `(R h)`;
    /// `b_ih`, `b_hh` its biases; `h`, `c` the unit's state before the step.
    fn forward<T: Activation>(
        x: [T; 4],
        r: [T; 4],
        b_ih: [T; 4],
        b_hh: [T; 4],
        h: T,
        c: T,
    ) -> Step<T>;

    /// `dh`, `dc`: the gradients of the step's `h` and `c`; `saved` the forward step's; `h`
    /// the step's output; `h_prev`, `c_prev` the state it started from.
    fn backward<T: Activation>(
        dh: T,
        dc: T,
        saved: [T; 5],
        h: T,
        h_prev: T,
        c_prev: T,
    ) -> Gradient<T>;
}

/// The single-gate cells: ReLU (`RELU`) or tanh.
pub struct Plain<const RELU: bool>;
pub struct Lstm;
pub struct Gru;
pub type Relu = Plain<true>;
pub type Tanh = Plain<false>;

impl<const RELU: bool> Cell for Plain<RELU> {
    const MODE: Mode = if RELU { Mode::Relu } else { Mode::Tanh };

    #[inline(always)]
    fn forward<T: Activation>(
        x: [T; 4],
        r: [T; 4],
        b_ih: [T; 4],
        b_hh: [T; 4],
        _: T,
        _: T,
    ) -> Step<T> {
        let a = x[0] + r[0] + b_ih[0] + b_hh[0];
        let h = if RELU { a.relu() } else { a.tanh() };
        Step {
            h,
            c: T::ZERO,
            saved: [T::ZERO; 5],
        }
    }

    #[inline(always)]
    fn backward<T: Activation>(dh: T, _: T, _: [T; 5], h: T, _: T, _: T) -> Gradient<T> {
        // relu' = [h > 0], tanh' = 1 - h², both from the output.
        let slope = if RELU {
            if h > T::ZERO {
                T::ONE
            } else {
                T::ZERO
            }
        } else {
            T::ONE - h * h
        };
        let d = dh * slope;
        let zero = T::ZERO;
        Gradient {
            d_in: [d, zero, zero, zero],
            d_rec: [d, zero, zero, zero],
            dh_prev: zero,
            dc_prev: zero,
        }
    }
}

impl Cell for Lstm {
    const MODE: Mode = Mode::Lstm;

    #[inline(always)]
    fn forward<T: Activation>(
        x: [T; 4],
        r: [T; 4],
        b_ih: [T; 4],
        b_hh: [T; 4],
        _: T,
        c: T,
    ) -> Step<T> {
        let a = |k: usize| x[k] + r[k] + b_ih[k] + b_hh[k];
        let (i, f, g, o) = (a(0).sigmoid(), a(1).sigmoid(), a(2).tanh(), a(3).sigmoid());
        let c = f * c + i * g;
        Step {
            h: o * c.tanh(),
            c,
            saved: [i, f, g, o, c],
        }
    }

    #[inline(always)]
    fn backward<T: Activation>(dh: T, dc: T, saved: [T; 5], _: T, _: T, c_prev: T) -> Gradient<T> {
        let [i, f, g, o, c] = saved;
        let tanh_c = c.tanh();
        let dc = dc + dh * o * (T::ONE - tanh_c * tanh_c);
        let d = [
            dc * g * i * (T::ONE - i),
            dc * c_prev * f * (T::ONE - f),
            dc * i * (T::ONE - g * g),
            dh * tanh_c * o * (T::ONE - o),
        ];
        Gradient {
            d_in: d,
            d_rec: d,
            dh_prev: T::ZERO,
            dc_prev: dc * f,
        }
    }
}

impl Cell for Gru {
    const MODE: Mode = Mode::Gru;

    #[inline(always)]
    fn forward<T: Activation>(
        x: [T; 4],
        r: [T; 4],
        b_ih: [T; 4],
        b_hh: [T; 4],
        h: T,
        _: T,
    ) -> Step<T> {
        let reset = (x[0] + r[0] + b_ih[0] + b_hh[0]).sigmoid();
        let update = (x[1] + r[1] + b_ih[1] + b_hh[1]).sigmoid();
        let hn = r[2] + b_hh[2];
        let candidate = (x[2] + b_ih[2] + reset * hn).tanh();
        let h = candidate + update * (h - candidate);
        Step {
            h,
            c: T::ZERO,
            saved: [reset, update, candidate, hn, T::ZERO],
        }
    }

    #[inline(always)]
    fn backward<T: Activation>(dh: T, _: T, saved: [T; 5], _: T, h_prev: T, _: T) -> Gradient<T> {
        let [reset, update, candidate, hn, _] = saved;
        let d_candidate = dh * (T::ONE - update) * (T::ONE - candidate * candidate);
        let d_reset = d_candidate * hn * reset * (T::ONE - reset);
        let d_update = dh * (h_prev - candidate) * update * (T::ONE - update);
        let zero = T::ZERO;
        Gradient {
            d_in: [d_reset, d_update, d_candidate, zero],
            d_rec: [d_reset, d_update, d_candidate * reset, zero],
            dh_prev: dh * update,
            dc_prev: zero,
        }
    }
}

/// Cephes' `exp`: `2^n · (1 + 2x·P(x²) / (Q(x²) - x·P(x²)))` with `x` reduced by `n·ln 2`
/// (Padé). NaN stays NaN; the argument is clamped to where `2^n` is a normal number.
#[inline(always)]
pub fn exp_f64(x: f64) -> f64 {
    let x = if x > 709.0 { 709.0 } else { x };
    let x = if x < -708.0 { -708.0 } else { x };
    const ROUND: f64 = 6755399441055744.0; // 1.5 · 2^52
    let t = x * core::f64::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let x = x - n * 0.693145751953125 - n * 1.4286068203094173e-06;
    let xx = x * x;
    let p = x * ((0.00012617719307481058 * xx + 0.030299440770744195) * xx + 1.0);
    let q = ((3.0019850513866446e-06 * xx + 0.002524483403496841) * xx + 0.22726554820815503) * xx
        + 2.0;
    let e = 1.0 + 2.0 * (p / (q - p));
    // 2^n for n in [-1022, 1023] (NaN gives any scale here and NaN above).
    let biased = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(1023);
    e * f64::from_bits(biased << 52)
}

/// Cephes' `tanh`: `x + x³·P(x²)/Q(x²)` below 0.625, `1 - 2/(e^{2|x|} + 1)` above, both
/// computed and one selected.
#[inline(always)]
pub fn tanh_f64(x: f64) -> f64 {
    let z = x * x;
    let p = (-0.9643991794250523 * z - 99.28772310019185) * z - 1614.6876844170845;
    let q = ((z + 112.81167849163293) * z + 2235.4883906010045) * z + 4844.063053251255;
    let small = x + x * z * (p / q);
    let large = 1.0 - 2.0 / (exp_f64(2.0 * x.abs()) + 1.0);
    if x.abs() < 0.625 {
        small
    } else {
        Real::copysign(large, x)
    }
}

/// A row's length as the kernels take it: `Some(len)` within `0..=steps`, `None` otherwise
/// (the row's results are then NaN).
#[inline(always)]
pub fn row_length(len: i32, steps: u64) -> Option<u64> {
    u64::try_from(len).ok().filter(|&len| len <= steps)
}

/// The time step row `len` takes at processing step `s` in direction `d` (0 forward, 1
/// reverse from the row's last valid step), if `s < len`.
#[inline(always)]
pub fn step_time(d: u64, s: u64, len: u64) -> Option<u64> {
    (s < len).then(|| if d == 0 { s } else { len - 1 - s })
}

kernel_args! {
    /// One step of one layer, every direction: `ferrax_rnn_forward_step_<cell>_<dtype>`.
    /// `x`, `hw`: the layer's input projections and the step's recurrent products; `w_bias`:
    /// per direction, `b_ih` then `b_hh` (`2·gates·H`); `h`, `c`: the states, updated; `saved`:
    /// the layer's first pseudo-layer's saved values (null: not kept); `output`: the layer's.
    pub struct ForwardStepArgs<T> {
        pub x: *const T,
        pub hw: *const T,
        pub w_bias: *const T,
        pub h: *mut T,
        pub c: *mut T,
        pub saved: *mut T,
        pub output: *mut T,
        pub lengths: *const i32,
        pub batch: u64,
        pub steps: u64,
        pub hidden: u64,
        pub directions: u64,
        pub step: u64,
        pub saved_stride: u64,
    }
}

kernel_args! {
    /// The end of one layer's pass, every direction: `ferrax_rnn_finish_<dtype>`. The states
    /// `h`, `c` (or their gradients) become `h_out`, `c_out` at the layer's pseudo-layers: zero
    /// for a row of length 0, NaN for a length outside `0..=T`, whose values in `poisoned` turn
    /// NaN too: for each step `t` and `k < poison_count`, the unit's element at
    /// `d·poison_direction + b·poison_row + t·poison_step + k·hidden` (the forward pass's
    /// output; the backward pass's gate gradients, so that everything computed from them is
    /// NaN as well).
    pub struct FinishArgs<T> {
        pub h: *const T,
        pub c: *const T,
        pub h_out: *mut T,
        pub c_out: *mut T,
        pub poisoned: *mut T,
        pub lengths: *const i32,
        pub batch: u64,
        pub steps: u64,
        pub hidden: u64,
        pub cell: u64,
        pub directions: u64,
        pub poison_direction: u64,
        pub poison_row: u64,
        pub poison_step: u64,
        pub poison_count: u64,
    }
}

kernel_args! {
    /// One step of one layer's backward pass, every direction, steps in reverse:
    /// `ferrax_rnn_backward_step_<cell>_<dtype>`. `dy`: the gradient of the layer's output;
    /// `dh`, `dc`: the states' gradients (`dc` updated); `dh_next`: the previous state's
    /// gradient apart from the recurrent product's; `saved`, `output`, `h0`, `c0`: the forward
    /// pass's values (the layer's first pseudo-layer's); out: `d_in`, `d_rec` (GRU) and
    /// `h_prev` at each row's time, and `step_rec`, the gate gradients the recurrent product
    /// takes this step (`D × B × gates·H`, zero for rows past their length).
    pub struct BackwardStepArgs<T> {
        pub dy: *const T,
        pub dh: *const T,
        pub dh_next: *mut T,
        pub dc: *mut T,
        pub saved: *const T,
        pub output: *const T,
        pub h0: *const T,
        pub c0: *const T,
        pub d_in: *mut T,
        pub d_rec: *mut T,
        pub h_prev: *mut T,
        pub step_rec: *mut T,
        pub lengths: *const i32,
        pub batch: u64,
        pub steps: u64,
        pub hidden: u64,
        pub directions: u64,
        pub step: u64,
        pub saved_stride: u64,
    }
}

kernel_args! {
    /// `out[g·out_stride + j] = Σ_r m[(g·rows + r)·ld + j]` for `g < groups`, `j < cols`:
    /// the bias gradients, per group of batch rows (`ferrax_rnn_column_sums_<dtype>`).
    pub struct ColumnSumsArgs<T> {
        pub m: *const T,
        pub out: *mut T,
        pub rows: u64,
        pub cols: u64,
        pub ld: u64,
        pub groups: u64,
        pub out_stride: u64,
    }
}

/// The thread's (direction, row, unit) and the grid-stride loop over them.
#[inline(always)]
fn for_each_unit(directions: u64, batch: u64, hidden: u64, mut body: impl FnMut(u64, u64, u64)) {
    let total = directions * batch * hidden;
    let mut i = global_idx_x();
    while i < total {
        body(i / (batch * hidden), i / hidden % batch, i % hidden);
        i += grid_size_x();
    }
}

/// # Safety
/// The arguments describe live device buffers of the layouts above, each thread's unit its
/// own.
#[inline(always)]
pub unsafe fn forward_step<T: Activation, C: Cell>(args: ForwardStepArgs<T>) {
    let ForwardStepArgs {
        x,
        hw,
        w_bias,
        h,
        c,
        saved,
        output,
        lengths,
        batch,
        steps,
        hidden,
        directions,
        step,
        saved_stride,
    } = args;
    let gates = C::MODE.gates() as u64;
    let kept = C::MODE.saved() as u64;
    let width = directions * hidden;
    for_each_unit(directions, batch, hidden, |d, b, j| {
        let Some(t) =
            row_length(*lengths.add(b as usize), steps).and_then(|len| step_time(d, step, len))
        else {
            return;
        };
        let row = gates * hidden;
        let x = x.add(((d * batch + b) * steps + t) as usize * row as usize);
        let hw = hw.add(((d * batch + b) * row) as usize);
        let bias = w_bias.add((d * 2 * row) as usize);
        let load = |p: *const T, k: u64| *p.add((k * hidden + j) as usize);
        let gate = |p: *const T| {
            core::array::from_fn(|k| {
                if (k as u64) < gates {
                    load(p, k as u64)
                } else {
                    T::ZERO
                }
            })
        };
        let (xs, rs, b_ih, b_hh) = (gate(x), gate(hw), gate(bias), gate(bias.add(row as usize)));
        let state = ((d * batch + b) * hidden + j) as usize;
        let cell = if C::MODE.has_cell_state() {
            *c.add(state)
        } else {
            T::ZERO
        };
        let next = C::forward(xs, rs, b_ih, b_hh, *h.add(state), cell);
        *h.add(state) = next.h;
        if C::MODE.has_cell_state() {
            *c.add(state) = next.c;
        }
        if !saved.is_null() {
            let at = saved.add((d * saved_stride + (b * steps + t) * kept * hidden + j) as usize);
            for k in 0..kept {
                *at.add((k * hidden) as usize) = next.saved[k as usize];
            }
        }
        *output.add(((b * steps + t) * width + d * hidden + j) as usize) = next.h;
    });
}

/// # Safety
/// As [`forward_step`], and `poisoned` spans the strides' elements.
#[inline(always)]
pub unsafe fn finish<T: Real>(args: FinishArgs<T>) {
    let FinishArgs {
        h,
        c,
        h_out,
        c_out,
        poisoned,
        lengths,
        batch,
        steps,
        hidden,
        cell,
        directions,
        poison_direction,
        poison_row,
        poison_step,
        poison_count,
    } = args;
    for_each_unit(directions, batch, hidden, |d, b, j| {
        let len = row_length(*lengths.add(b as usize), steps);
        let end = |value: T| match len {
            Some(0) => T::ZERO,
            Some(_) => value,
            None => T::NAN,
        };
        let state = ((d * batch + b) * hidden + j) as usize;
        *h_out.add(state) = end(*h.add(state));
        if j < cell {
            let at = ((d * batch + b) * cell + j) as usize;
            *c_out.add(at) = end(*c.add(at));
        }
        if len.is_none() {
            for t in 0..steps {
                let at = d * poison_direction + b * poison_row + t * poison_step + j;
                for k in 0..poison_count {
                    *poisoned.add((at + k * hidden) as usize) = T::NAN;
                }
            }
        }
    });
}

/// # Safety
/// As [`forward_step`].
#[inline(always)]
pub unsafe fn backward_step<T: Activation, C: Cell>(args: BackwardStepArgs<T>) {
    let BackwardStepArgs {
        dy,
        dh,
        dh_next,
        dc,
        saved,
        output,
        h0,
        c0,
        d_in,
        d_rec,
        h_prev,
        step_rec,
        lengths,
        batch,
        steps,
        hidden,
        directions,
        step,
        saved_stride,
    } = args;
    let gates = C::MODE.gates() as u64;
    let kept = C::MODE.saved() as u64;
    let width = directions * hidden;
    let row = gates * hidden;
    for_each_unit(directions, batch, hidden, |d, b, j| {
        let state = ((d * batch + b) * hidden + j) as usize;
        let rec_row = step_rec.add(((d * batch + b) * row + j) as usize);
        let len = row_length(*lengths.add(b as usize), steps).unwrap_or(0);
        let Some(t) = step_time(d, step, len) else {
            // Not started yet: nothing flows through the recurrent product.
            for k in 0..gates {
                *rec_row.add((k * hidden) as usize) = T::ZERO;
            }
            *dh_next.add(state) = *dh.add(state);
            return;
        };
        // The step that fed this one, in this direction's order.
        let prev = if d == 0 {
            t.checked_sub(1)
        } else {
            Some(t + 1).filter(|&p| p < len)
        };
        let out_at = |t: u64| ((b * steps + t) * width + d * hidden + j) as usize;
        let saved_at =
            |t: u64| saved.add((d * saved_stride + (b * steps + t) * kept * hidden + j) as usize);
        let h_before = match prev {
            Some(p) => *output.add(out_at(p)),
            None => *h0.add(state),
        };
        let cell = C::MODE.has_cell_state();
        let c_before = match (cell, prev) {
            (false, _) => T::ZERO,
            (true, Some(p)) => *saved_at(p).add((4 * hidden) as usize),
            (true, None) => *c0.add(state),
        };
        let kept_now = saved_at(t);
        let values = core::array::from_fn(|k| {
            if (k as u64) < kept {
                *kept_now.add(k * hidden as usize)
            } else {
                T::ZERO
            }
        });
        let dc_now = if cell { *dc.add(state) } else { T::ZERO };
        let g = C::backward(
            *dh.add(state) + *dy.add(out_at(t)),
            dc_now,
            values,
            *output.add(out_at(t)),
            h_before,
            c_before,
        );
        let at = (((d * batch + b) * steps + t) * row + j) as usize;
        for k in 0..gates {
            let k_at = (k * hidden) as usize;
            *d_in.add(at + k_at) = g.d_in[k as usize];
            let rec = g.d_rec[k as usize];
            if C::MODE.split_gradient() {
                *d_rec.add(at + k_at) = rec;
            }
            *rec_row.add(k_at) = rec;
        }
        *dh_next.add(state) = g.dh_prev;
        if cell {
            *dc.add(state) = g.dc_prev;
        }
        *h_prev.add((((d * batch + b) * steps + t) * hidden + j) as usize) = h_before;
    });
}

/// # Safety
/// `m` holds `groups·rows` rows of `ld` elements, `out` `groups` rows of `out_stride`.
#[inline(always)]
pub unsafe fn column_sums<T: Real>(args: ColumnSumsArgs<T>) {
    let ColumnSumsArgs {
        m,
        out,
        rows,
        cols,
        ld,
        groups,
        out_stride,
    } = args;
    let mut i = global_idx_x();
    while i < groups * cols {
        let (g, j) = (i / cols, i % cols);
        let mut sum = T::ZERO;
        for r in 0..rows {
            sum = sum + *m.add(((g * rows + r) * ld + j) as usize);
        }
        *out.add((g * out_stride + j) as usize) = sum;
        i += grid_size_x();
    }
}

kernel_entries! {
    /// `ferrax_rnn_forward_step_<cell>_<dtype>`.
    pub const FORWARD_STEP: Kernels<(ScalarKind, Mode), ForwardStepArgs<_>>;
    names [rnn forward_step] variant dtype;
    variants {
        relu => (Mode::Relu, forward_step::<_, Relu>),
        tanh => (Mode::Tanh, forward_step::<_, Tanh>),
        lstm => (Mode::Lstm, forward_step::<_, Lstm>),
        gru => (Mode::Gru, forward_step::<_, Gru>),
    }
    f32: relu tanh lstm gru;
    f64: relu tanh lstm gru;
}

kernel_entries! {
    /// `ferrax_rnn_backward_step_<cell>_<dtype>`.
    pub const BACKWARD_STEP: Kernels<(ScalarKind, Mode), BackwardStepArgs<_>>;
    names [rnn backward_step] variant dtype;
    variants {
        relu => (Mode::Relu, backward_step::<_, Relu>),
        tanh => (Mode::Tanh, backward_step::<_, Tanh>),
        lstm => (Mode::Lstm, backward_step::<_, Lstm>),
        gru => (Mode::Gru, backward_step::<_, Gru>),
    }
    f32: relu tanh lstm gru;
    f64: relu tanh lstm gru;
}

kernel_entries! {
    /// `ferrax_rnn_finish_<dtype>`.
    pub const FINISH: Kernels<ScalarKind, FinishArgs<AnyElement>>;
    (ScalarKind::F32) [rnn finish f32]: FinishArgs<f32> = finish::<f32>;
    (ScalarKind::F64) [rnn finish f64]: FinishArgs<f64> = finish::<f64>;
}

kernel_entries! {
    /// `ferrax_rnn_column_sums_<dtype>`.
    pub const COLUMN_SUMS: Kernels<ScalarKind, ColumnSumsArgs<AnyElement>>;
    (ScalarKind::F32) [rnn column_sums f32]: ColumnSumsArgs<f32> = column_sums::<f32>;
    (ScalarKind::F64) [rnn column_sums f64]: ColumnSumsArgs<f64> = column_sums::<f64>;
}

const BLOCK: u32 = 256;
/// The grid-stride kernels stop growing their grid here (64 warps on each of 132 SMs).
const MAX_GRID: u64 = 1056;

fn grid_for(threads: u64) -> u32 {
    threads.div_ceil(BLOCK as u64).clamp(1, MAX_GRID) as u32
}

/// The forward step kernel for `kind` and `mode` over `units` triples.
pub fn forward_step_launch(
    kind: ScalarKind,
    mode: Mode,
    units: u64,
) -> Option<LaunchConfig<ForwardStepArgs<AnyElement>>> {
    FORWARD_STEP.launch((kind, mode), grid_for(units), BLOCK, 0)
}

/// The backward step kernel for `kind` and `mode` over `units` triples.
pub fn backward_step_launch(
    kind: ScalarKind,
    mode: Mode,
    units: u64,
) -> Option<LaunchConfig<BackwardStepArgs<AnyElement>>> {
    BACKWARD_STEP.launch((kind, mode), grid_for(units), BLOCK, 0)
}

/// The finish kernel for `kind` over `units` triples.
pub fn finish_launch(kind: ScalarKind, units: u64) -> Option<LaunchConfig<FinishArgs<AnyElement>>> {
    FINISH.launch(kind, grid_for(units), BLOCK, 0)
}

/// The column sums of `groups × cols` outputs.
pub fn column_sums_launch(
    kind: ScalarKind,
    outputs: u64,
) -> Option<LaunchConfig<ColumnSumsArgs<AnyElement>>> {
    COLUMN_SUMS.launch(kind, grid_for(outputs), BLOCK, 0)
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    extern crate std;
    use super::*;
    use crate::launch::run_on_host;
    use crate::test_buffer::Buffer;
    use std::vec::Vec;

    /// Every 97th float in [-100, 100] (by bits), with the edges of the approximations' pieces.
    fn arguments() -> impl Iterator<Item = f64> {
        let (lo, hi) = ((-100.0f32).to_bits(), 100.0f32.to_bits());
        (0..=hi)
            .step_by(97)
            .chain((lo & 0x7fff_ffff..=lo).step_by(97))
            .map(|b| f32::from_bits(b) as f64)
            .chain([
                0.0, -0.0, 0.625, -0.625, 0.624_999, 88.0, -87.0, 1e-30, 354.0, -700.0,
            ])
    }

    fn ulps(got: f64, want: f64, eps: f64, tiny: f64) -> f64 {
        (got - want).abs() / (want.abs().max(tiny) * eps)
    }

    #[test]
    fn activations_are_within_a_few_ulp() {
        let sigmoid = |x: f64| 1.0 / (1.0 + libm::exp(-x));
        let mut worst = [0.0f64; 6];
        for x in arguments() {
            let x32 = x as f32;
            let (tiny32, eps32) = (f32::MIN_POSITIVE as f64, f32::EPSILON as f64);
            let (tiny64, eps64) = (f64::MIN_POSITIVE, f64::EPSILON);
            let cases = [
                (
                    exp_f32(x32.clamp(-87.0, 88.0)) as f64,
                    libm::exp(x.clamp(-87.0, 88.0)),
                    eps32,
                    tiny32,
                ),
                (tanh_f32(x32) as f64, libm::tanh(x), eps32, tiny32),
                (Activation::sigmoid(x32) as f64, sigmoid(x), eps32, tiny32),
                (
                    exp_f64(x.clamp(-700.0, 700.0)),
                    libm::exp(x.clamp(-700.0, 700.0)),
                    eps64,
                    tiny64,
                ),
                (tanh_f64(x), libm::tanh(x), eps64, tiny64),
                (Activation::sigmoid(x), sigmoid(x), eps64, tiny64),
            ];
            for (k, (got, want, eps, tiny)) in cases.into_iter().enumerate() {
                // Below the type's normal range only an absolute error counts.
                if want.abs() < tiny {
                    assert!(got.abs() < 2.0 * tiny, "{k}: f({x}) = {got}, want {want}");
                    continue;
                }
                worst[k] = worst[k].max(ulps(got, want, eps, tiny));
            }
        }
        assert!(worst.iter().all(|&u| u <= 4.0), "worst ulps: {worst:?}");
    }

    #[test]
    fn activations_keep_nan_and_saturate_at_infinity() {
        assert!(exp_f32(f32::NAN).is_nan() && tanh_f32(f32::NAN).is_nan());
        assert!(f32::NAN.sigmoid().is_nan() && f64::NAN.sigmoid().is_nan());
        assert!(exp_f64(f64::NAN).is_nan() && tanh_f64(f64::NAN).is_nan());
        assert_eq!(
            (tanh_f32(f32::INFINITY), tanh_f32(f32::NEG_INFINITY)),
            (1.0, -1.0)
        );
        assert_eq!(
            (tanh_f64(f64::INFINITY), tanh_f64(f64::NEG_INFINITY)),
            (1.0, -1.0)
        );
        assert_eq!(
            (f32::INFINITY.sigmoid(), f64::INFINITY.sigmoid()),
            (1.0, 1.0)
        );
        assert!(f32::NEG_INFINITY.sigmoid() < 1e-37 && f64::NEG_INFINITY.sigmoid() < 1e-300);
    }

    /// A deterministic stream of values in (-1.5, 1.5).
    fn values(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed;
        move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 3.0
        }
    }

    /// The backward step against central differences of the forward step (f64), for every
    /// input of one unit: each gate's products and biases, the state.
    fn check_gradients<C: Cell>() {
        let mut next = values(C::MODE as u64 + 1);
        let gates = C::MODE.gates();
        for _ in 0..50 {
            let inputs: [[f64; 4]; 4] = core::array::from_fn(|_| core::array::from_fn(|_| next()));
            let (h, c, dh, dc) = (next(), next(), next(), next());
            let outputs = |inputs: &[[f64; 4]; 4], h: f64, c: f64| {
                let s = C::forward(inputs[0], inputs[1], inputs[2], inputs[3], h, c);
                dh * s.h
                    + if C::MODE.has_cell_state() {
                        dc * s.c
                    } else {
                        0.0
                    }
            };
            let step = C::forward(inputs[0], inputs[1], inputs[2], inputs[3], h, c);
            let g = C::backward(dh, dc, step.saved, step.h, h, c);
            let eps = 1e-6;
            let fd = |f: &dyn Fn(f64) -> f64| (f(eps) - f(-eps)) / (2.0 * eps);
            for k in 0..gates {
                for (which, want) in [
                    (0, g.d_in[k]),
                    (1, g.d_rec[k]),
                    (2, g.d_in[k]),
                    (3, g.d_rec[k]),
                ] {
                    let got = fd(&|e| {
                        let mut moved = inputs;
                        moved[which][k] += e;
                        outputs(&moved, h, c)
                    });
                    assert!(
                        (got - want).abs() < 1e-7,
                        "{:?} input {which} gate {k}: {got} vs {want}",
                        C::MODE
                    );
                }
            }
            let dh_prev = fd(&|e| outputs(&inputs, h + e, c));
            assert!((dh_prev - g.dh_prev).abs() < 1e-7, "{:?} dh_prev", C::MODE);
            if C::MODE.has_cell_state() {
                let dc_prev = fd(&|e| outputs(&inputs, h, c + e));
                assert!((dc_prev - g.dc_prev).abs() < 1e-7, "{:?} dc_prev", C::MODE);
            }
        }
    }

    #[test]
    fn backward_steps_are_the_forward_steps_derivatives() {
        check_gradients::<Tanh>();
        check_gradients::<Lstm>();
        check_gradients::<Gru>();
        // ReLU away from its kink.
        check_gradients::<Relu>();
    }

    /// One forward step of a bidirectional LSTM layer over ragged rows (one past its length,
    /// one of length 0, one invalid), launched on the host, against the cell called directly.
    #[test]
    fn forward_step_kernel_reads_and_writes_each_rows_time() {
        let (directions, batch, steps, hidden) = (2u64, 4u64, 5u64, 3u64);
        let gates = 4u64;
        let row = gates * hidden;
        let lengths = [5i32, 2, 0, 9];
        let mut next = values(7);
        let mut fill = |len: u64| -> Vec<f64> { (0..len).map(|_| next()).collect() };
        let x = fill(directions * batch * steps * row);
        let hw = fill(directions * batch * row);
        let w_bias = fill(directions * 2 * row);
        let (h0, c0) = (
            fill(directions * batch * hidden),
            fill(directions * batch * hidden),
        );
        let saved_stride = batch * steps * 5 * hidden;
        let step = 3u64;
        let mut bufs = [
            Buffer::new(&x, 0),
            Buffer::new(&hw, 1),
            Buffer::new(&w_bias, 0),
            Buffer::new(&h0, 0),
            Buffer::new(&c0, 1),
            Buffer::new(&std::vec![0.0; (directions * saved_stride) as usize], 0),
            Buffer::new(
                &std::vec![0.0; (batch * steps * directions * hidden) as usize],
                1,
            ),
        ];
        let mut lengths_buf = Buffer::new(&lengths, 0);
        let p: Vec<usize> = bufs.iter_mut().map(|b| b.ptr()).collect();
        let args = ForwardStepArgs::<f64> {
            x: p[0] as *const f64,
            hw: p[1] as *const f64,
            w_bias: p[2] as *const f64,
            h: p[3] as *mut f64,
            c: p[4] as *mut f64,
            saved: p[5] as *mut f64,
            output: p[6] as *mut f64,
            lengths: lengths_buf.ptr() as *const i32,
            batch,
            steps,
            hidden,
            directions,
            step,
            saved_stride,
        };
        let launch =
            forward_step_launch(ScalarKind::F64, Mode::Lstm, directions * batch * hidden).unwrap();
        unsafe { run_on_host(launch.kernel, 2, 32, 0, args) };
        let (h, c, saved, output) = (
            bufs[3].as_mut_slice().to_vec(),
            bufs[4].as_mut_slice().to_vec(),
            bufs[5].as_mut_slice().to_vec(),
            bufs[6].as_mut_slice().to_vec(),
        );
        for d in 0..directions {
            for b in 0..batch {
                let state = ((d * batch + b) * hidden) as usize;
                let len = lengths[b as usize] as u64;
                let time = (len <= steps).then(|| step_time(d, step, len)).flatten();
                for j in 0..hidden as usize {
                    let Some(t) = time else {
                        assert_eq!((h[state + j], c[state + j]), (h0[state + j], c0[state + j]));
                        continue;
                    };
                    let at = |v: &[f64], base: u64| {
                        core::array::from_fn(|k| v[(base + k as u64 * hidden) as usize + j])
                    };
                    let want = Lstm::forward(
                        at(&x, ((d * batch + b) * steps + t) * row),
                        at(&hw, (d * batch + b) * row),
                        at(&w_bias, d * 2 * row),
                        at(&w_bias, d * 2 * row + row),
                        h0[state + j],
                        c0[state + j],
                    );
                    assert_eq!((h[state + j], c[state + j]), (want.h, want.c));
                    let out = ((b * steps + t) * directions * hidden + d * hidden) as usize + j;
                    assert_eq!(output[out], want.h);
                    for k in 0..5 {
                        let s = (d * saved_stride + (b * steps + t) * 5 * hidden + k * hidden)
                            as usize
                            + j;
                        assert_eq!(saved[s], want.saved[k as usize]);
                    }
                }
            }
        }
        // Nothing else written: rows 2 (length 0) and 3 (invalid) have zero outputs.
        let written = output.iter().filter(|&&v| v != 0.0).count() as u64;
        assert_eq!(written, 2 * hidden);
    }

    #[test]
    fn finish_zeroes_empty_rows_and_poisons_invalid_ones() {
        let (directions, batch, steps, hidden) = (2u64, 3u64, 2u64, 2u64);
        let lengths = [2i32, 0, -1];
        let units = (directions * batch * hidden) as usize;
        let states: Vec<f64> = (0..units).map(|i| i as f64 + 1.0).collect();
        let mut bufs = [
            Buffer::new(&states, 0),
            Buffer::new(&states, 0),
            Buffer::new(&std::vec![7.0; units], 0),
            Buffer::new(&std::vec![7.0; units], 0),
            Buffer::new(
                &std::vec![0.0; (batch * steps * directions * hidden) as usize],
                0,
            ),
        ];
        let mut lengths_buf = Buffer::new(&lengths, 0);
        let p: Vec<usize> = bufs.iter_mut().map(|b| b.ptr()).collect();
        // The forward pass's output `(B, T, D·H)` is what invalid rows poison here.
        let args = FinishArgs::<f64> {
            h: p[0] as *const f64,
            c: p[1] as *const f64,
            h_out: p[2] as *mut f64,
            c_out: p[3] as *mut f64,
            poisoned: p[4] as *mut f64,
            lengths: lengths_buf.ptr() as *const i32,
            batch,
            steps,
            hidden,
            cell: hidden,
            directions,
            poison_direction: hidden,
            poison_row: steps * directions * hidden,
            poison_step: directions * hidden,
            poison_count: 1,
        };
        let launch = finish_launch(ScalarKind::F64, units as u64).unwrap();
        unsafe { run_on_host(launch.kernel, launch.grid, launch.block, 0, args) };
        let (h_n, output) = (
            bufs[2].as_mut_slice().to_vec(),
            bufs[4].as_mut_slice().to_vec(),
        );
        for d in 0..directions as usize {
            for b in 0..batch as usize {
                for j in 0..hidden as usize {
                    let i = (d * batch as usize + b) * hidden as usize + j;
                    match b {
                        0 => assert_eq!(h_n[i], states[i]),
                        1 => assert_eq!(h_n[i], 0.0),
                        _ => assert!(h_n[i].is_nan()),
                    }
                }
            }
        }
        let row = (steps * directions * hidden) as usize;
        assert!(output[2 * row..].iter().all(|v| v.is_nan()));
        assert!(output[..2 * row].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn column_sums_per_group() {
        let (rows, cols, ld, groups) = (3u64, 2u64, 4u64, 2u64);
        let m: Vec<f32> = (0..groups * rows * ld).map(|i| i as f32).collect();
        let mut m_buf = Buffer::new(&m, 0);
        let mut out = Buffer::new(&[0.0f32; 6], 0);
        let args = ColumnSumsArgs::<f32> {
            m: m_buf.ptr() as *const f32,
            out: out.ptr() as *mut f32,
            rows,
            cols,
            ld,
            groups,
            out_stride: 3,
        };
        let launch = column_sums_launch(ScalarKind::F32, groups * cols).unwrap();
        unsafe { run_on_host(launch.kernel, 1, 32, 0, args) };
        let sums = |g: u64, j: u64| {
            (0..rows)
                .map(|r| m[((g * rows + r) * ld + j) as usize])
                .sum::<f32>()
        };
        assert_eq!(
            out.as_mut_slice(),
            &[sums(0, 0), sums(0, 1), 0.0, sums(1, 0), sums(1, 1), 0.0]
        );
    }
}
