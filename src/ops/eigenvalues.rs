//! What `geev` and `gees` share: jaxlib's real and complex contracts differ in their results
//! (real input's eigenvalues come as two arrays, real and imaginary parts, complex input's as
//! one), so each target has two handlers of one name and the call's result count picks one.

use crate::ffi::sys::{XLA_FFI_CallFrame, XLA_FFI_Error, XLA_FFI_Handler};
use crate::ffi::{Array, Buffer, Error, Matrices, Result};
use crate::linalg::eig::Eigenvalues;
use crate::linalg::LapackScalar;

/// The handler of a target whose results differ between real and complex inputs: calls `real`
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

/// A contract's results by name, for errors: the real one's and the complex one's.
pub(crate) struct Contract {
    pub real: &'static str,
    pub complex: &'static str,
}

/// Checks the square input `x` and the call's eigenvalue results `eigvals` (`[wr, wi]` for
/// real input, `[w]` for complex, each `[batch..., n]` of the input's dtype; the call has
/// `others` other results) and returns them as the cores take them.
///
/// # Safety
/// The eigenvalue results are distinct buffers, written through what is returned alone.
pub(crate) unsafe fn eigenvalue_results<'a, T: LapackScalar>(
    x: &Matrices<'_, T>,
    eigvals: &[Buffer<'a>],
    contract: Contract,
    others: usize,
) -> Result<Eigenvalues<'a, T>> {
    let complex = T::DTYPE.is_complex();
    let (expected, results) = if complex {
        (1, contract.complex)
    } else {
        (2, contract.real)
    };
    if eigvals.len() != expected {
        return Err(Error::invalid_argument(format!(
            "{}: dtype {} takes the results ({results}), but the call has {} results",
            x.array.buffer.operand,
            T::DTYPE,
            eigvals.len() + others
        )));
    }
    x.expect_square()?;
    let dims = [x.batch_dims(), &[x.shape.rows as i64]].concat();
    for w in eigvals {
        w.expect_dtype(T::DTYPE)?;
        w.expect_dims(&dims)?;
    }
    Ok(match eigvals {
        [w] => Eigenvalues::Complex(Array::new(*w)?.as_mut_slice()),
        [re, im] => Eigenvalues::Parts {
            re: Array::new(*re)?.as_mut_slice(),
            im: Array::new(*im)?.as_mut_slice(),
        },
        _ => unreachable!("the count was checked"),
    })
}
