//! Multi-layer, optionally bidirectional recurrent networks (ReLU/tanh RNN, LSTM, GRU) over
//! batch-major padded sequences, forward and backward, with cuDNN's conventions: the packed
//! weight layout `jax.experimental.rnn` documents, per-row sequence lengths (outputs past a
//! row's length are zero; the reverse direction reads each row from its last valid step), and
//! the final states of a row of length 0 are zero.
//!
//! Per layer, each direction's input projection for every step is one GEMM; the recurrence
//! makes one GEMM per step and the cell's pointwise step (`cell`) per row. The backward pass
//! runs the recurrence in reverse, keeps the gate gradients of every step, and then makes each
//! weight gradient and the input gradient one GEMM per layer. Directions and batch chunks are
//! split over the thread pool (rows are independent; layers are a barrier).
//!
//! The forward pass keeps what the backward pass needs (see [`Reserve`]) in the caller's
//! reserve buffer when it holds [`Dims::reserve_len`] scalars; the backward pass reads it when
//! it does, and otherwise runs the forward pass again into memory of its own. So the reserve's
//! size is a trade the caller makes (jax sizes it at trace time), never a correctness matter.

mod backward;
pub(crate) mod cell;
mod forward;

use crate::error::{Error, Result};
use crate::ffi::NativeType;
use crate::linalg::parallel::{parallel_for, Pool};
use crate::memory;
use ferrax_cpu_fallback::Lapack;
use ferrax_kernels::rnn::Activation;
use std::ops::AddAssign;

pub use backward::{backward, Gradients, InputGradients};
pub use forward::{forward, Outputs};

/// The operands both passes read: `x` `B × T × input_size`, `h0` (and `c0` for the LSTM)
/// `pseudo-layers × B × hidden_size`, the packed weights and the sequence lengths, each in
/// `0..=T` (checked by the caller, [`check_lengths`]).
#[derive(Clone, Copy)]
pub struct Inputs<'a, T> {
    pub x: &'a [T],
    pub h0: &'a [T],
    pub c0: &'a [T],
    pub w: &'a [T],
    pub lengths: &'a [i32],
}

pub use ferrax_kernels::rnn::Mode;

/// A network's configuration: what its weights are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub mode: Mode,
    pub input_size: usize,
    pub hidden_size: usize,
    pub layers: usize,
    pub bidirectional: bool,
}

impl Config {
    pub fn directions(&self) -> usize {
        1 + self.bidirectional as usize
    }

    /// cuDNN's pseudo-layers: (layer, direction), forward before reverse.
    pub fn pseudo_layers(&self) -> usize {
        self.layers * self.directions()
    }

    /// The width of layer `layer`'s input: the input's, then both directions' outputs.
    pub fn layer_input_size(&self, layer: usize) -> usize {
        if layer == 0 {
            self.input_size
        } else {
            self.directions() * self.hidden_size
        }
    }

    /// The cell state's width: `hidden_size` for the LSTM, 0 for the others.
    pub fn cell_size(&self) -> usize {
        if self.mode.has_cell_state() {
            self.hidden_size
        } else {
            0
        }
    }

    /// Where each pseudo-layer's weights lie in the packed weight vector.
    pub fn weights(&self) -> Result<WeightLayout> {
        let gate_rows = memory::product("weights", &[self.mode.gates(), self.hidden_size])?;
        let mut offset = 0usize;
        let mut take = |len: usize| {
            let start = offset;
            offset = offset
                .checked_add(len)
                .ok_or_else(|| Error::invalid_argument("the weight count overflows".to_string()))?;
            Ok::<_, Error>(start)
        };
        let mut matrices = Vec::with_capacity(self.pseudo_layers());
        for p in 0..self.pseudo_layers() {
            let input = self.layer_input_size(p / self.directions());
            let w_ih = take(memory::product("weights", &[gate_rows, input])?)?;
            let w_hh = take(memory::product("weights", &[gate_rows, self.hidden_size])?)?;
            matrices.push((w_ih, w_hh));
        }
        let mut biases = Vec::with_capacity(self.pseudo_layers());
        for _ in 0..self.pseudo_layers() {
            biases.push((take(gate_rows)?, take(gate_rows)?));
        }
        Ok(WeightLayout {
            gate_rows,
            matrices,
            biases,
            len: offset,
        })
    }
}

/// The packed weight vector as cuDNN lays it out (as `jax.experimental.rnn` documents it):
/// every pseudo-layer's `W_ih` (`gates·hidden × input`) and `W_hh` (`gates·hidden × hidden`),
/// row-major, gate blocks stacked (LSTM i, f, g, o; GRU r, z, n), then every pseudo-layer's
/// `b_ih` and `b_hh`.
#[derive(Clone, Debug)]
pub struct WeightLayout {
    /// `gates · hidden_size`.
    pub gate_rows: usize,
    /// Per pseudo-layer, the offsets of `W_ih` and `W_hh`.
    pub matrices: Vec<(usize, usize)>,
    /// Per pseudo-layer, the offsets of `b_ih` and `b_hh`.
    pub biases: Vec<(usize, usize)>,
    /// The vector's length.
    pub len: usize,
}

/// One call's sizes: the configuration, the batch and the padded sequence length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub config: Config,
    pub batch: usize,
    pub steps: usize,
}

impl Dims {
    /// The reserve's layout, in scalars of the computation.
    pub fn reserve(&self) -> Result<Reserve> {
        let c = self.config;
        let rows = memory::product("reserve", &[self.batch, self.steps])?;
        let per_step = c.mode.saved() * c.hidden_size;
        let saved = memory::product("reserve", &[rows, per_step])?;
        let output = memory::product("reserve", &[rows, c.directions(), c.hidden_size])?;
        let saved_all = memory::product("reserve", &[saved, c.pseudo_layers()])?;
        let outputs_all = memory::product("reserve", &[output, c.layers.saturating_sub(1)])?;
        let len = saved_all
            .checked_add(outputs_all)
            .ok_or_else(|| Error::invalid_argument("the reserve's size overflows".to_string()))?;
        Ok(Reserve {
            per_step,
            saved,
            output,
            outputs_start: saved_all,
            len,
        })
    }

    /// The reserve's length in scalars of the computation (jax's reserve is an f32 array:
    /// twice this many f32 for an f64 computation).
    pub fn reserve_len(&self) -> Result<usize> {
        Ok(self.reserve()?.len)
    }
}

/// What the forward pass keeps for the backward pass: per pseudo-layer, the cell's saved
/// values ([`Mode::saved`] per hidden unit) of every (row, step), at `(p·B·T + b·T + t) ·
/// per_step`; then per layer but the last, its output sequence `B × T × directions·hidden`
/// (the last layer's is the call's output).
#[derive(Clone, Copy, Debug)]
pub struct Reserve {
    pub per_step: usize,
    /// Scalars per pseudo-layer's saved values.
    pub saved: usize,
    /// Scalars per layer output.
    pub output: usize,
    pub outputs_start: usize,
    pub len: usize,
}

/// Checks that every sequence length is in `0..=steps`; the error gives the first one that is
/// not (index, value).
pub fn check_lengths(lengths: &[i32], steps: usize) -> std::result::Result<(), (usize, i32)> {
    match lengths
        .iter()
        .position(|&len| len < 0 || len as usize > steps)
    {
        Some(b) => Err((b, lengths[b])),
        None => Ok(()),
    }
}

/// The scalars of the computation: f32 (also for half-precision operands, converted at the
/// boundary) and f64, with BLAS's `gemm` from the LAPACK table and the kernels crate's
/// activations.
pub trait RnnScalar: Activation + NativeType + Lapack + Default + AddAssign {}

impl RnnScalar for f32 {}
impl RnnScalar for f64 {}

/// A row-major matrix view for [`matmul`]: `rows × cols` with row stride `ld`.
#[derive(Clone, Copy)]
pub(crate) struct View<T> {
    pub ptr: *const T,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

// A read-only view of memory that outlives the tasks sharing it.
unsafe impl<T> Send for View<T> {}
unsafe impl<T> Sync for View<T> {}

impl<T> View<T> {
    pub fn new(ptr: *const T, rows: usize, cols: usize, ld: usize) -> Self {
        View {
            ptr,
            rows,
            cols,
            ld,
        }
    }
    /// A dense `rows × cols` slice.
    pub fn of(slice: &[T], rows: usize, cols: usize) -> Self {
        debug_assert!(slice.len() >= rows * cols);
        View::new(slice.as_ptr(), rows, cols, cols)
    }
}

/// A row-major product `c = op(a)·op(b) + beta·c` (`c` is `rows × cols` with row stride
/// `ld`) as BLAS's column-major call on the transposed problem, `cᵀ = op(b)ᵀ·op(a)ᵀ`: `b` is
/// BLAS's first operand. The CPU's [`matmul`] and the GPU's cuBLAS calls both pass it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColumnMajor<T> {
    pub transa: bool,
    pub transb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: *const T,
    pub lda: usize,
    pub b: *const T,
    pub ldb: usize,
    pub ldc: usize,
}

impl<T> ColumnMajor<T> {
    pub fn of(
        [rows, cols, ld]: [usize; 3],
        a: View<T>,
        a_transposed: bool,
        b: View<T>,
        b_transposed: bool,
    ) -> Self {
        let inner = if a_transposed { a.rows } else { a.cols };
        debug_assert_eq!(if a_transposed { a.cols } else { a.rows }, rows);
        debug_assert_eq!(if b_transposed { b.cols } else { b.rows }, inner);
        debug_assert_eq!(if b_transposed { b.rows } else { b.cols }, cols);
        ColumnMajor {
            transa: b_transposed,
            transb: a_transposed,
            m: cols,
            n: rows,
            k: inner,
            a: b.ptr,
            lda: b.ld,
            b: a.ptr,
            ldb: a.ld,
            ldc: ld,
        }
    }
}

/// `c = op(a)·op(b) + beta·c` for row-major views (`op` transposes where asked), by BLAS.
/// Empty products are handled here (BLAS rejects leading dimensions of 0).
///
/// # Safety
/// The views lie in live memory; `c` is `c_rows × c_cols` with row stride `ldc`, written by
/// this call alone.
pub(crate) unsafe fn matmul<T: RnnScalar>(
    c: *mut T,
    shape: [usize; 3],
    a: View<T>,
    a_transposed: bool,
    b: View<T>,
    b_transposed: bool,
    beta: T,
) -> Result<()> {
    let plan = ColumnMajor::of(shape, a, a_transposed, b, b_transposed);
    let [c_rows, c_cols, ldc] = shape;
    if c_rows == 0 || c_cols == 0 {
        return Ok(());
    }
    if plan.k == 0 {
        for r in 0..c_rows {
            for x in std::slice::from_raw_parts_mut(c.add(r * ldc), c_cols) {
                *x = if beta == T::ZERO { T::ZERO } else { *x * beta };
            }
        }
        return Ok(());
    }
    let int = |what: &str, value: usize| crate::linalg::lapack_int(what, value.max(1));
    let gemm = crate::linalg::routine(T::gemm())?;
    let flag = |transposed: bool| if transposed { b'T' as _ } else { b'N' as _ };
    let (m, n, k) = (
        int("columns", plan.m)?,
        int("rows", plan.n)?,
        int("inner size", plan.k)?,
    );
    let (lda, ldb, ldc) = (
        int("stride", plan.lda)?,
        int("stride", plan.ldb)?,
        int("stride", plan.ldc)?,
    );
    gemm(
        &flag(plan.transa),
        &flag(plan.transb),
        &m,
        &n,
        &k,
        &T::ONE,
        plan.a,
        &lda,
        plan.b,
        &ldb,
        &beta,
        c,
        &ldc,
    );
    Ok(())
}

/// How many batch chunks to split each direction's rows into so that `directions` times that
/// many tasks keep the pool's threads busy, with chunks of at least `MIN_ROWS` rows (the
/// per-step products lose speed on fewer).
pub(crate) fn batch_chunks(threads: usize, directions: usize, batch: usize) -> usize {
    const MIN_ROWS: usize = 8;
    threads
        .div_ceil(directions)
        .min(batch.div_ceil(MIN_ROWS))
        .max(1)
}

/// Runs `body(0..tasks)` on the pool, each task with BLAS on its own thread; a single task
/// runs on the calling thread with BLAS free to use its threads.
pub(crate) fn run_tasks(
    pool: &dyn Pool,
    tasks: usize,
    body: &(dyn Fn(usize) -> Result<()> + Sync),
) -> Result<()> {
    if tasks == 1 {
        return body(0);
    }
    parallel_for(pool, tasks, &|task| {
        ferrax_cpu_fallback::single_threaded(|| body(task))
    })
}

/// The `chunk`-th of `chunks` near-equal parts of `0..len`.
pub(crate) fn part(len: usize, chunks: usize, chunk: usize) -> std::ops::Range<usize> {
    (len * chunk / chunks)..(len * (chunk + 1) / chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: Mode, layers: usize, bidirectional: bool) -> Config {
        Config {
            mode,
            input_size: 3,
            hidden_size: 5,
            layers,
            bidirectional,
        }
    }

    #[test]
    fn weight_layout_is_jaxs_packed_layout() {
        // jax.experimental.rnn.get_num_params_in_lstm(3, 5, 2, True): 4·5·(3 + 5) twice for
        // layer 0, 4·5·(10 + 5) twice for layer 1, and 2·4·5 biases per pseudo-layer.
        let layout = config(Mode::Lstm, 2, true).weights().unwrap();
        assert_eq!(layout.len, 2 * 20 * 8 + 2 * 20 * 15 + 4 * 40);
        assert_eq!(layout.matrices[0], (0, 60));
        assert_eq!(layout.matrices[1], (160, 220));
        assert_eq!(layout.matrices[2], (320, 520));
        assert_eq!(layout.biases[0], (920, 940));
        assert_eq!(layout.biases[3], (1040, 1060));
        let gru = config(Mode::Gru, 1, false).weights().unwrap();
        assert_eq!(gru.len, 15 * 3 + 15 * 5 + 30);
    }

    #[test]
    fn reserve_is_linear_in_the_batch() {
        for mode in [Mode::Relu, Mode::Tanh, Mode::Lstm, Mode::Gru] {
            let dims = |batch| Dims {
                config: config(mode, 3, true),
                batch,
                steps: 7,
            };
            let one = dims(1).reserve_len().unwrap();
            // jax's batching rule for the primitives folds a vmapped axis into the batch.
            assert_eq!(dims(6).reserve_len().unwrap(), 6 * one);
            assert_eq!(one, 7 * (mode.saved() * 5 * 6 + 2 * 10));
        }
    }

    #[test]
    fn sizes_past_memory_are_errors() {
        let mut c = config(Mode::Lstm, 1, false);
        c.hidden_size = 1 << 40;
        assert!(c.weights().is_err());
        let dims = Dims {
            config: config(Mode::Lstm, 2, false),
            batch: 1 << 40,
            steps: 1 << 30,
        };
        assert!(dims.reserve_len().is_err());
    }

    #[test]
    fn lengths_outside_the_steps_are_found() {
        assert_eq!(check_lengths(&[0, 3, 2], 3), Ok(()));
        assert_eq!(check_lengths(&[0, 4, 2], 3), Err((1, 4)));
        assert_eq!(check_lengths(&[1, 2, -1], 3), Err((2, -1)));
    }

    #[test]
    fn chunks_fill_the_threads_with_rows_to_spare() {
        assert_eq!(batch_chunks(2, 2, 32), 1);
        assert_eq!(batch_chunks(2, 1, 32), 2);
        assert_eq!(batch_chunks(8, 1, 12), 2);
        assert_eq!(batch_chunks(8, 2, 0), 1);
        let parts: Vec<_> = (0..3).map(|c| part(10, 3, c)).collect();
        assert_eq!(parts, [0..3, 3..6, 6..10]);
    }
}
