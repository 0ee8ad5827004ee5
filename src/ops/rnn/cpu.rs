//! The CPU handlers of the RNN family: [`crate::linalg::rnn`] on XLA's arrays and thread pool,
//! half-precision operands converted to f32 at the boundary.

use super::{check_dropout, check_lengths, Precision, Rnn, RnnBwd, RNN, RNN_BWD};
use crate::error::{Error, Result};
use crate::ffi::{Array, Buffer, DataType, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::rnn::{self, Dims, Gradients, InputGradients, Inputs, Outputs, RnnScalar};
use crate::memory;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

ffi_handlers! {
    /// A recurrent network's forward pass on the host, directions and batch chunks split
    /// across XLA's thread pool.
    pub fn ferrax_cpu_rnn(RNN, Cpu) {
        ctx pool: ThreadPool;
        operands ops: Rnn;
        body = rnn_cpu;
    }

    /// Its backward pass on the host.
    pub fn ferrax_cpu_rnn_bwd(RNN_BWD, Cpu) {
        ctx pool: ThreadPool;
        operands ops: RnnBwd;
        body = rnn_bwd_cpu;
    }
}

fn rnn_cpu(pool: ThreadPool<'_>, ops: Rnn<'_>) -> Result<()> {
    let (dims, precision) = ops.check()?;
    check_dropout(ops.dropout)?;
    match precision {
        Precision::F32 => forward::<f32>(&pool, dims, ops),
        Precision::F64 => forward::<f64>(&pool, dims, ops),
    }
}

fn rnn_bwd_cpu(pool: ThreadPool<'_>, ops: RnnBwd<'_>) -> Result<()> {
    let (dims, precision) = ops.check()?;
    check_dropout(ops.dropout)?;
    match precision {
        Precision::F32 => backward::<f32>(&pool, dims, ops),
        Precision::F64 => backward::<f64>(&pool, dims, ops),
    }
}

/// The network's inputs in the computation's scalar: the lengths (checked) and `x`, `h0`,
/// `c0`, `w`.
struct Loaded<'a, T> {
    lengths: &'a [i32],
    values: [Staged<'a, T>; 4],
}

impl<'a, T: Compute> Loaded<'a, T> {
    fn new(dims: Dims, seq_lengths: &Array<'a, i32>, operands: [Buffer<'a>; 4]) -> Result<Self> {
        // SAFETY: the lengths are an argument no result aliases.
        let lengths = unsafe { seq_lengths.as_slice() };
        check_lengths(seq_lengths, lengths, dims.steps)?;
        let [x, h0, c0, w] = operands.map(T::load);
        Ok(Loaded {
            lengths,
            values: [x?, h0?, c0?, w?],
        })
    }

    fn inputs(&self) -> Inputs<'_, T> {
        let [x, h0, c0, w] = &self.values;
        Inputs {
            x,
            h0,
            c0,
            w,
            lengths: self.lengths,
        }
    }
}

fn forward<T: Compute>(pool: &ThreadPool<'_>, dims: Dims, ops: Rnn<'_>) -> Result<()> {
    let loaded = Loaded::<T>::new(dims, &ops.seq_lengths, [ops.x, ops.h0, ops.c0, ops.w])?;
    let mut y = Output::<T>::new(ops.y)?;
    let mut h_n = Output::<T>::new(ops.h_n)?;
    let mut c_n = Output::<T>::new(ops.c_n)?;
    let (reserve, len) = reserve_of::<T>(&ops.reserve);
    let outputs = Outputs {
        y: y.slice(),
        h_n: h_n.slice(),
        c_n: c_n.slice(),
        // SAFETY: the reserve is a result of its own, written by this call alone.
        reserve: reserve.map(|ptr| unsafe { std::slice::from_raw_parts_mut(ptr, len) }),
    };
    rnn::forward(pool, dims, loaded.inputs(), outputs)?;
    y.finish()?;
    h_n.finish()?;
    c_n.finish()
}

fn backward<T: Compute>(pool: &ThreadPool<'_>, dims: Dims, ops: RnnBwd<'_>) -> Result<()> {
    let loaded = Loaded::<T>::new(dims, &ops.seq_lengths, [ops.x, ops.h0, ops.c0, ops.w])?;
    let [y, dy, dh_n, dc_n] = [ops.y, ops.dy, ops.dh_n, ops.dc_n].map(T::load);
    let (y, dy, dh_n, dc_n) = (y?, dy?, dh_n?, dc_n?);
    let mut dx = Output::<T>::new(ops.dx)?;
    let mut dh0 = Output::<T>::new(ops.dh0)?;
    let mut dc0 = Output::<T>::new(ops.dc0)?;
    let mut dw = Output::<T>::new(ops.dw)?;
    let (reserve, len) = reserve_of::<T>(&ops.reserve);
    // SAFETY: an argument no result aliases.
    let reserve = reserve.map(|ptr| unsafe { std::slice::from_raw_parts(ptr.cast_const(), len) });
    let gradients = Gradients {
        dy: &dy,
        dh_n: &dh_n,
        dc_n: &dc_n,
    };
    let out = InputGradients {
        dx: dx.slice(),
        dh0: dh0.slice(),
        dc0: dc0.slice(),
        dw: dw.slice(),
        groups: ops.groups()?,
    };
    rnn::backward(pool, dims, loaded.inputs(), &y, reserve, gradients, out)?;
    dx.finish()?;
    dh0.finish()?;
    dc0.finish()?;
    dw.finish()
}

/// The reserve (an F32 array) as scalars of the computation, where its address allows.
fn reserve_of<T>(reserve: &Array<'_, f32>) -> (Option<*mut T>, usize) {
    let ptr = reserve.ptr().cast::<T>();
    let len = reserve.len() * 4 / std::mem::size_of::<T>();
    let aligned = (ptr as usize).is_multiple_of(std::mem::align_of::<T>());
    ((aligned && len > 0).then_some(ptr), len)
}

/// A result in the computation's scalar: the buffer itself where its dtype is that scalar,
/// else memory of its own converted into the buffer by [`Output::finish`].
struct Output<'a, T> {
    buffer: Buffer<'a>,
    direct: Option<&'a mut [T]>,
    own: Vec<T>,
}

impl<'a, T: Compute> Output<'a, T> {
    fn new(buffer: Buffer<'a>) -> Result<Self> {
        if buffer.dtype() == T::DTYPE {
            // SAFETY: a result of its own, written through this slice alone.
            let direct = unsafe { buffer.as_mut_slice::<T>()? };
            return Ok(Output {
                buffer,
                direct: Some(direct),
                own: Vec::new(),
            });
        }
        let own = memory::vec_of(buffer.element_count()?, T::ZERO)?;
        Ok(Output {
            buffer,
            direct: None,
            own,
        })
    }

    fn slice(&mut self) -> &mut [T] {
        match &mut self.direct {
            Some(direct) => direct,
            None => &mut self.own,
        }
    }

    fn finish(self) -> Result<()> {
        if self.direct.is_some() {
            return Ok(());
        }
        T::store(&self.own, &self.buffer)
    }
}

/// An operand in the computation's scalar.
enum Staged<'a, T> {
    Borrowed(&'a [T]),
    Converted(Vec<T>),
}

impl<T> std::ops::Deref for Staged<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Staged::Borrowed(slice) => slice,
            Staged::Converted(vec) => vec,
        }
    }
}

/// The computation's scalars and the operand dtypes they take (checked by the operands'
/// `check`).
trait Compute: RnnScalar {
    fn load(buffer: Buffer<'_>) -> Result<Staged<'_, Self>>;
    fn store(values: &[Self], buffer: &Buffer<'_>) -> Result<()>;
}

impl Compute for f64 {
    fn load(buffer: Buffer<'_>) -> Result<Staged<'_, Self>> {
        // SAFETY: an argument no result aliases.
        Ok(Staged::Borrowed(unsafe { buffer.as_slice()? }))
    }
    fn store(_: &[Self], buffer: &Buffer<'_>) -> Result<()> {
        Err(Error::internal(format!("{}: not an f64 result", buffer.operand)))
    }
}

impl Compute for f32 {
    fn load(buffer: Buffer<'_>) -> Result<Staged<'_, Self>> {
        let len = buffer.element_count()?;
        let converted = || memory::vec_of(len, 0.0f32);
        // SAFETY (below): an argument no result aliases, `len` elements of its dtype.
        match buffer.dtype() {
            DataType::F32 => Ok(Staged::Borrowed(unsafe { buffer.as_slice()? })),
            DataType::BF16 => {
                let mut values = converted()?;
                unsafe { halves::<bf16>(&buffer, len) }.convert_to_f32_slice(&mut values);
                Ok(Staged::Converted(values))
            }
            DataType::F16 => {
                let mut values = converted()?;
                unsafe { halves::<f16>(&buffer, len) }.convert_to_f32_slice(&mut values);
                Ok(Staged::Converted(values))
            }
            other => Err(buffer.mismatch("dtype f32, bf16 or f16".into(), other.to_string())),
        }
    }

    fn store(values: &[Self], buffer: &Buffer<'_>) -> Result<()> {
        let len = values.len();
        // SAFETY (below): a result of `len` elements of its dtype, written here alone.
        match buffer.dtype() {
            DataType::BF16 => unsafe { halves_mut::<bf16>(buffer, len) }.convert_from_f32_slice(values),
            DataType::F16 => unsafe { halves_mut::<f16>(buffer, len) }.convert_from_f32_slice(values),
            other => {
                return Err(buffer.mismatch("dtype bf16 or f16".into(), other.to_string()))
            }
        }
        Ok(())
    }
}

/// # Safety
/// `buffer` holds `len` elements of `H`'s dtype, not written while the slice lives.
unsafe fn halves<'a, H>(buffer: &Buffer<'a>, len: usize) -> &'a [H] {
    if len == 0 {
        return &[];
    }
    std::slice::from_raw_parts(buffer.data_ptr().cast(), len)
}

/// # Safety
/// `buffer` holds `len` elements of `H`'s dtype, accessed through this slice alone.
unsafe fn halves_mut<'a, H>(buffer: &Buffer<'a>, len: usize) -> &'a mut [H] {
    if len == 0 {
        return &mut [];
    }
    std::slice::from_raw_parts_mut(buffer.data_ptr().cast(), len)
}
