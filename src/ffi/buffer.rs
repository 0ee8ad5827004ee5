//! Argument and result buffers: element type, logical dimensions and data.

use super::dtype::{DataType, NativeType};
use super::sys::XLA_FFI_Buffer;
use crate::error::{Error, Result};
use std::fmt;

/// Which operand of the call a buffer is, so that every error can name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Arg { index: usize, name: &'static str },
    Ret { index: usize, name: &'static str },
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Arg { index, name } => write!(f, "operand {index} '{name}'"),
            Operand::Ret { index, name } => write!(f, "result {index} '{name}'"),
        }
    }
}

/// A buffer of any element type. The dims are logical; the physical layout is the one the
/// lowering asked for (ferrax's linalg lowerings ask for column-major matrices).
#[derive(Clone, Copy)]
pub struct Buffer<'a> {
    pub operand: Operand,
    dtype: DataType,
    data: *mut u8,
    dims: &'a [i64],
}

// Buffers are plain views of XLA-owned memory that outlive the call; handlers share them with
// the thread-pool tasks they wait for.
unsafe impl Send for Buffer<'_> {}
unsafe impl Sync for Buffer<'_> {}

impl<'a> Buffer<'a> {
    /// # Safety
    /// `raw` must be a valid `XLA_FFI_Buffer` that outlives `'a`.
    pub(crate) unsafe fn from_raw(raw: &'a XLA_FFI_Buffer, operand: Operand) -> Result<Self> {
        let rank = usize::try_from(raw.rank)
            .map_err(|_| Error::internal(format!("{operand}: negative rank {}", raw.rank)))?;
        let dims = if rank == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(raw.dims, rank)
        };
        if let Some(d) = dims.iter().find(|&&d| d < 0) {
            return Err(Error::invalid_argument(format!(
                "{operand}: dynamic or negative dimension {d} in {dims:?}"
            )));
        }
        Ok(Buffer {
            operand,
            dtype: DataType::from_raw(raw.dtype),
            data: raw.data.cast(),
            dims,
        })
    }

    pub fn dtype(&self) -> DataType {
        self.dtype
    }
    pub fn dims(&self) -> &'a [i64] {
        self.dims
    }
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    pub fn data_ptr(&self) -> *mut u8 {
        self.data
    }

    /// Product of the dims, or an error when it overflows `usize`.
    pub fn element_count(&self) -> Result<usize> {
        checked_product(self.dims).ok_or_else(|| {
            Error::invalid_argument(format!(
                "{}: element count of shape {:?} overflows",
                self.operand, self.dims
            ))
        })
    }

    pub fn expect_dtype(&self, expected: DataType) -> Result<()> {
        if self.dtype == expected {
            Ok(())
        } else {
            Err(self.mismatch(format!("dtype {expected}"), format!("{}", self.dtype)))
        }
    }

    pub fn expect_rank_at_least(&self, min_rank: usize) -> Result<()> {
        if self.rank() >= min_rank {
            Ok(())
        } else {
            Err(self.mismatch(
                format!("rank >= {min_rank}"),
                format!("shape {:?}", self.dims),
            ))
        }
    }

    pub fn expect_dims(&self, expected: &[i64]) -> Result<()> {
        if self.dims == expected {
            Ok(())
        } else {
            Err(self.mismatch(
                format!("shape {expected:?}"),
                format!("shape {:?}", self.dims),
            ))
        }
    }

    pub fn mismatch(&self, expected: String, got: String) -> Error {
        Error::invalid_argument(format!("{}: expected {expected}, got {got}", self.operand))
    }

    /// The data as `&[T]` after checking the dtype.
    ///
    /// # Safety
    /// Nothing may write the buffer while the slice lives (for an argument that aliases a
    /// result, read it before writing the result).
    pub unsafe fn as_slice<T: NativeType>(&self) -> Result<&'a [T]> {
        self.expect_dtype(T::DTYPE)?;
        let len = self.element_count()?;
        Ok(if len == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(self.data.cast(), len)
        })
    }

    /// The data as `&mut [T]` after checking the dtype.
    ///
    /// # Safety
    /// The slice must be the only live view of this memory (results are distinct from each
    /// other; an aliased argument must no longer be read through another view).
    pub unsafe fn as_mut_slice<T: NativeType>(&self) -> Result<&'a mut [T]> {
        self.expect_dtype(T::DTYPE)?;
        let len = self.element_count()?;
        Ok(if len == 0 {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(self.data.cast(), len)
        })
    }

    /// Copies `self` (an argument) into `dst` (a result) unless XLA already made them the same
    /// memory through `operand_output_aliases`. Both must have the same dtype and shape.
    pub fn copy_into(&self, dst: &Buffer<'_>) -> Result<()> {
        if self.dtype != dst.dtype || self.dims != dst.dims {
            return Err(dst.mismatch(
                format!(
                    "dtype {} and shape {:?} (as {})",
                    self.dtype, self.dims, self.operand
                ),
                format!("dtype {} and shape {:?}", dst.dtype, dst.dims),
            ));
        }
        let bytes = self
            .element_count()?
            .checked_mul(self.dtype_size()?)
            .ok_or_else(|| {
                Error::invalid_argument(format!("{}: byte size overflows", self.operand))
            })?;
        if bytes > 0 && self.data != dst.data {
            // SAFETY: distinct XLA buffers of `bytes` bytes each never overlap partially.
            unsafe { std::ptr::copy_nonoverlapping(self.data, dst.data, bytes) };
        }
        Ok(())
    }

    /// The size of one element in bytes (an error for dtypes ferrax does not take).
    pub fn dtype_size(&self) -> Result<usize> {
        Ok(match self.dtype {
            DataType::Pred | DataType::S8 | DataType::U8 => 1,
            DataType::S16 | DataType::U16 | DataType::F16 | DataType::BF16 => 2,
            DataType::S32 | DataType::U32 | DataType::F32 => 4,
            DataType::S64 | DataType::U64 | DataType::F64 | DataType::C64 => 8,
            DataType::C128 => 16,
            other => {
                return Err(Error::invalid_argument(format!(
                    "{}: unsupported dtype {other}",
                    self.operand
                )))
            }
        })
    }
}

pub fn checked_product(dims: &[i64]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}

/// A batch of matrices `[..., m, n]` seen as `(batch, m, n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixBatch {
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
}

impl MatrixBatch {
    pub fn of(buffer: &Buffer<'_>) -> Result<Self> {
        buffer.expect_rank_at_least(2)?;
        let dims = buffer.dims();
        let (batch_dims, matrix) = dims.split_at(dims.len() - 2);
        let batch = checked_product(batch_dims).ok_or_else(|| {
            buffer.mismatch(
                "a batch size that fits in memory".into(),
                format!("{dims:?}"),
            )
        })?;
        buffer.element_count()?;
        Ok(MatrixBatch {
            batch,
            rows: matrix[0] as usize,
            cols: matrix[1] as usize,
        })
    }

    pub fn matrix_len(&self) -> usize {
        self.rows * self.cols
    }
}

/// An operand of element type `T` (checked when the handler decodes it), any shape.
#[derive(Clone, Copy)]
pub struct Array<'a, T> {
    pub buffer: Buffer<'a>,
    _element: std::marker::PhantomData<T>,
}

impl<'a, T: NativeType> Array<'a, T> {
    pub fn new(buffer: Buffer<'a>) -> Result<Self> {
        buffer.expect_dtype(T::DTYPE)?;
        buffer.element_count()?;
        Ok(Array {
            buffer,
            _element: std::marker::PhantomData,
        })
    }
    pub fn dims(&self) -> &'a [i64] {
        self.buffer.dims()
    }
    pub fn ptr(&self) -> *mut T {
        self.buffer.data_ptr().cast()
    }
    pub fn len(&self) -> usize {
        checked_product(self.dims()).unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn expect_dims(&self, expected: &[i64]) -> Result<()> {
        self.buffer.expect_dims(expected)
    }
    pub fn mismatch(&self, expected: String, got: String) -> Error {
        self.buffer.mismatch(expected, got)
    }

    /// The elements as one mutable slice, for a result the handler writes.
    ///
    /// # Safety
    /// As [`Buffer::as_mut_slice`].
    pub unsafe fn as_mut_slice(&self) -> &'a mut [T] {
        if self.is_empty() {
            return &mut [];
        }
        std::slice::from_raw_parts_mut(self.ptr(), self.len())
    }

    /// The elements as one slice, for an argument.
    ///
    /// # Safety
    /// As [`Buffer::as_slice`].
    pub unsafe fn as_slice(&self) -> &'a [T] {
        if self.is_empty() {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr(), self.len())
    }
}

/// A batch of matrices `[..., m, n]` of element type `T` (checked when decoded).
#[derive(Clone, Copy)]
pub struct Matrices<'a, T> {
    pub array: Array<'a, T>,
    pub shape: MatrixBatch,
}

impl<'a, T: NativeType> Matrices<'a, T> {
    pub fn new(buffer: Buffer<'a>) -> Result<Self> {
        let array = Array::new(buffer)?;
        let shape = MatrixBatch::of(&buffer)?;
        Ok(Matrices { array, shape })
    }
    pub fn dims(&self) -> &'a [i64] {
        self.array.dims()
    }
    /// The leading (batch) dimensions.
    pub fn batch_dims(&self) -> &'a [i64] {
        let dims = self.dims();
        &dims[..dims.len() - 2]
    }
    pub fn ptr(&self) -> *mut T {
        self.array.ptr()
    }
    pub fn expect_dims(&self, expected: &[i64]) -> Result<()> {
        self.array.expect_dims(expected)
    }
    pub fn mismatch(&self, expected: String, got: String) -> Error {
        self.array.mismatch(expected, got)
    }
    /// Checks that the matrices are square.
    pub fn expect_square(&self) -> Result<()> {
        if self.shape.rows == self.shape.cols {
            return Ok(());
        }
        Err(self.mismatch("square matrices".into(), format!("shape {:?}", self.dims())))
    }

    /// The batch as the cores see it, packed in `layout` (what the target's lowering asks
    /// XLA for).
    pub fn view(&self, layout: crate::linalg::matrix::Layout) -> crate::linalg::matrix::Batch<T> {
        let MatrixBatch { batch, rows, cols } = self.shape;
        // SAFETY: XLA's buffer holds the whole batch for the call, packed as the lowering asked.
        unsafe { crate::linalg::matrix::Batch::packed(self.ptr(), [batch, rows, cols], layout) }
    }
}
