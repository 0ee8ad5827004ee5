//! Recurrent networks: `jax.experimental.rnn`'s LSTM (jaxlib's `cudnn_rnn_ffi` /
//! `cudnn_rnn_bwd_ffi`) and cuDNN's other cells, with typed attributes in place of jaxlib's
//! opaque descriptor.
//!
//! - `rnn` (forward): `x` `[B, T, input_size]`, `h0` `[L·D, B, H]`, `c0` `[L·D, B, H]`
//!   (LSTM; `[L·D, B, 0]` for the cells without a cell state), `w` `[P]` (cuDNN's packed
//!   weights, as `jax.experimental.rnn` documents them, see [`crate::linalg::rnn`]), S32
//!   `seq_lengths` `[B]` (each in `0..=T`) in; `y` `[B, T, D·H]`, `h_n` and `c_n` shaped as
//!   `h0` and `c0`, and an F32 `reserve` of any length out. Outputs past a row's length are
//!   zero, and a row of length 0 has zero final states.
//! - `rnn_bwd`: `dy`, `dh_n`, `dc_n` (the results' gradients), `x`, `h0`, `c0`, `w`, `y`,
//!   `reserve` (the forward call's), `seq_lengths` in; `dx`, `dh0`, `dc0` shaped as `x`,
//!   `h0`, `c0`, and `dw` `[groups, P]` out: the weight gradient of each of `groups` equal,
//!   consecutive parts of the batch (attribute `groups`, S64, a divisor of B: vmap of a
//!   gradient folds its axis into the batch and keeps each instance's weight gradient apart).
//!   Not aliased: jaxlib's backward adds `dw` to a zeroed operand, ferrax's writes it.
//!
//! Attributes: `mode` (S32, cuDNN's `cudnnRNNMode_t`: 0 ReLU, 1 tanh, 2 LSTM, 3 GRU),
//! `input_size`, `hidden_size`, `num_layers` (S64, each at least 1), `bidirectional` (PRED),
//! `dropout` (F32, in `[0, 1)`, between layers as cuDNN applies it; the CPU takes 0 only) and
//! `allow_tf32` (PRED: cuDNN may use TF32 tensor cores; the CPU computes in full precision).
//!
//! The reserve is sized by the caller (jax at trace time, without asking cuDNN): the forward
//! call keeps there what the backward call needs when it fits, and the backward call runs the
//! forward pass again into its own scratch when it does not (`ferrax_rnn_reserve_size` gives
//! the size at which the CPU's fits).
//!
//! Dtypes: `x`, `h0`, `c0` and `w` each F32, BF16 or F16, computed in f32 (the half-precision
//! operands converted on the way in and the results on the way out, each result the dtype of
//! its operand: `y` and `dx` of `x`, `h_n` and `dh0` of `h0`, ...); or all F64, computed in
//! f64.

pub mod cpu;
pub mod cuda;

use crate::error::{Error, Result};
use crate::ffi::{Array, Buffer, DataType};
use crate::linalg::rnn::{Config, Dims, Mode};
use std::ffi::CStr;

pub const RNN: &CStr = c"ferrax_rnn";
pub const RNN_BWD: &CStr = c"ferrax_rnn_bwd";

crate::ffi_operands! {
    /// The forward target's operands.
    pub struct Rnn<'a> {
        arg x: Buffer<'a>,
        arg h0: Buffer<'a>,
        arg c0: Buffer<'a>,
        arg w: Buffer<'a>,
        arg seq_lengths: Array<'a, i32>,
        ret y: Buffer<'a>,
        ret h_n: Buffer<'a>,
        ret c_n: Buffer<'a>,
        ret reserve: Array<'a, f32>,
        attr mode: i32,
        attr input_size: i64,
        attr hidden_size: i64,
        attr num_layers: i64,
        attr bidirectional: bool,
        attr dropout: f32,
        attr allow_tf32: bool,
    }
}

crate::ffi_operands! {
    /// The backward target's operands.
    pub struct RnnBwd<'a> {
        arg dy: Buffer<'a>,
        arg dh_n: Buffer<'a>,
        arg dc_n: Buffer<'a>,
        arg x: Buffer<'a>,
        arg h0: Buffer<'a>,
        arg c0: Buffer<'a>,
        arg w: Buffer<'a>,
        arg y: Buffer<'a>,
        arg reserve: Array<'a, f32>,
        arg seq_lengths: Array<'a, i32>,
        ret dx: Buffer<'a>,
        ret dh0: Buffer<'a>,
        ret dc0: Buffer<'a>,
        ret dw: Buffer<'a>,
        attr groups: i64,
        attr mode: i32,
        attr input_size: i64,
        attr hidden_size: i64,
        attr num_layers: i64,
        attr bidirectional: bool,
        attr dropout: f32,
        attr allow_tf32: bool,
    }
}

/// The precision the network computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32, for F32, BF16 and F16 operands.
    F32,
    F64,
}

/// The attributes' network, checked.
pub(crate) fn config(
    mode: i32,
    sizes: [(&str, i64); 3],
    bidirectional: bool,
    dropout: f32,
) -> Result<Config> {
    let mode = Mode::from_raw(mode.into()).ok_or_else(|| {
        Error::invalid_argument(format!(
            "attribute 'mode': expected 0 (ReLU), 1 (tanh), 2 (LSTM) or 3 (GRU), got {mode}"
        ))
    })?;
    let [input_size, hidden_size, layers] = sizes.map(|(name, value)| {
        usize::try_from(value).ok().filter(|&v| v >= 1).ok_or_else(|| {
            Error::invalid_argument(format!("attribute '{name}': expected at least 1, got {value}"))
        })
    });
    if !(0.0..1.0).contains(&dropout) {
        return Err(Error::invalid_argument(format!(
            "attribute 'dropout': expected a probability in [0, 1), got {dropout}"
        )));
    }
    Ok(Config {
        mode,
        input_size: input_size?,
        hidden_size: hidden_size?,
        layers: layers?,
        bidirectional,
    })
}

/// Checks a floating operand's dtype against the computation's precision.
fn expect_float(buffer: &Buffer<'_>, precision: Precision) -> Result<()> {
    let ok = match precision {
        Precision::F64 => buffer.dtype() == DataType::F64,
        Precision::F32 => matches!(buffer.dtype(), DataType::F32 | DataType::BF16 | DataType::F16),
    };
    if ok {
        return Ok(());
    }
    let expected = match precision {
        Precision::F64 => "dtype f64 (as x)",
        Precision::F32 => "dtype f32, bf16 or f16 (x is not f64)",
    };
    Err(buffer.mismatch(expected.into(), buffer.dtype().to_string()))
}

/// Checks that `result` has `operand`'s dtype and shape.
fn expect_like(result: &Buffer<'_>, operand: &Buffer<'_>) -> Result<()> {
    if result.dtype() == operand.dtype() && result.dims() == operand.dims() {
        return Ok(());
    }
    Err(result.mismatch(
        format!("dtype {} and shape {:?} (as {})", operand.dtype(), operand.dims(), operand.operand),
        format!("dtype {} and shape {:?}", result.dtype(), result.dims()),
    ))
}

/// The network's operands both targets take: checks their shapes and dtypes against the
/// attributes; returns the call's sizes and precision.
fn check_inputs(
    config: Config,
    [x, h0, c0, w]: [&Buffer<'_>; 4],
    seq_lengths: &Array<'_, i32>,
) -> Result<(Dims, Precision)> {
    let (batch, steps) = match *x.dims() {
        [b, t, i] if i == config.input_size as i64 => (b as usize, t as usize),
        _ => {
            return Err(x.mismatch(
                format!("shape [batch, steps, {}] (input_size)", config.input_size),
                format!("shape {:?}", x.dims()),
            ))
        }
    };
    x.element_count()?;
    let precision = if x.dtype() == DataType::F64 {
        Precision::F64
    } else {
        Precision::F32
    };
    let (pseudo, b, h) = (config.pseudo_layers() as i64, batch as i64, config.hidden_size as i64);
    h0.expect_dims(&[pseudo, b, h])?;
    c0.expect_dims(&[pseudo, b, config.cell_size() as i64])?;
    let weights = config.weights()?;
    w.expect_dims(&[weights.len as i64])?;
    seq_lengths.expect_dims(&[b])?;
    for operand in [x, h0, c0, w] {
        expect_float(operand, precision)?;
    }
    let dims = Dims { config, batch, steps };
    // The reserve's size must be computable (an error here is a shape past memory).
    dims.reserve_len()?;
    Ok((dims, precision))
}

/// The attributes both targets take: `mode`, the sizes (`input_size`, `hidden_size`,
/// `num_layers`), `bidirectional`, `dropout`.
type Attributes = (i32, [i64; 3], bool, f32);

/// What both targets check: the attributes' network, its inputs, the forward pass's output `y`
/// and the reserve's rank; returns the call's sizes and precision.
fn check_network(
    (mode, [input_size, hidden_size, num_layers], bidirectional, dropout): Attributes,
    inputs: [&Buffer<'_>; 4],
    seq_lengths: &Array<'_, i32>,
    y: &Buffer<'_>,
    reserve: &Array<'_, f32>,
) -> Result<(Dims, Precision)> {
    let sizes = [
        ("input_size", input_size),
        ("hidden_size", hidden_size),
        ("num_layers", num_layers),
    ];
    let config = config(mode, sizes, bidirectional, dropout)?;
    let (dims, precision) = check_inputs(config, inputs, seq_lengths)?;
    let width = (config.directions() * config.hidden_size) as i64;
    y.expect_dims(&[dims.batch as i64, dims.steps as i64, width])?;
    y.expect_dtype(inputs[0].dtype())?;
    match reserve.dims() {
        [_] => Ok((dims, precision)),
        dims => Err(reserve.mismatch("rank 1".into(), format!("shape {dims:?}"))),
    }
}

impl Rnn<'_> {
    /// Checks every operand; returns the call's sizes and precision.
    pub(crate) fn check(&self) -> Result<(Dims, Precision)> {
        let sizes = [self.input_size, self.hidden_size, self.num_layers];
        let checked = check_network(
            (self.mode, sizes, self.bidirectional, self.dropout),
            [&self.x, &self.h0, &self.c0, &self.w],
            &self.seq_lengths,
            &self.y,
            &self.reserve,
        )?;
        expect_like(&self.h_n, &self.h0)?;
        expect_like(&self.c_n, &self.c0)?;
        Ok(checked)
    }
}

impl RnnBwd<'_> {
    /// Checks every operand; returns the call's sizes and precision.
    pub(crate) fn check(&self) -> Result<(Dims, Precision)> {
        let sizes = [self.input_size, self.hidden_size, self.num_layers];
        let (dims, precision) = check_network(
            (self.mode, sizes, self.bidirectional, self.dropout),
            [&self.x, &self.h0, &self.c0, &self.w],
            &self.seq_lengths,
            &self.y,
            &self.reserve,
        )?;
        for (gradient, value) in [
            (&self.dy, &self.y),
            (&self.dh_n, &self.h0),
            (&self.dc_n, &self.c0),
            (&self.dx, &self.x),
            (&self.dh0, &self.h0),
            (&self.dc0, &self.c0),
        ] {
            expect_like(gradient, value)?;
        }
        let groups = self.groups()?;
        if dims.batch % groups != 0 {
            return Err(Error::invalid_argument(format!(
                "attribute 'groups': expected a divisor of the batch ({}), got {groups}",
                dims.batch
            )));
        }
        self.dw.expect_dims(&[groups as i64, self.w.dims()[0]])?;
        self.dw.expect_dtype(self.w.dtype())?;
        Ok((dims, precision))
    }
}

impl RnnBwd<'_> {
    /// The `groups` attribute, checked to be at least 1.
    pub(crate) fn groups(&self) -> Result<usize> {
        usize::try_from(self.groups).ok().filter(|&g| g >= 1).ok_or_else(|| {
            Error::invalid_argument(format!(
                "attribute 'groups': expected at least 1, got {}",
                self.groups
            ))
        })
    }
}

/// Dropout needs cuDNN's masks, which neither platform reproduces: only 0.
fn check_dropout(dropout: f32) -> Result<()> {
    if dropout == 0.0 {
        return Ok(());
    }
    Err(Error::unimplemented(format!(
        "attribute 'dropout': ferrax's RNN targets take 0 only (cuDNN's dropout masks cannot be \
         reproduced), got {dropout}"
    )))
}

/// The first sequence length outside `0..=steps`, as the error naming the operand.
fn check_lengths(seq_lengths: &Array<'_, i32>, lengths: &[i32], steps: usize) -> Result<()> {
    crate::linalg::rnn::check_lengths(lengths, steps).map_err(|(b, value)| {
        seq_lengths.mismatch(
            format!("sequence lengths in 0..={steps}"),
            format!("{value} at index {b}"),
        )
    })
}

pub(crate) const HANDLERS: &[&[crate::ffi::Registration]] = &[cpu::HANDLERS, cuda::HANDLERS];
