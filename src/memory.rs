//! Memory sized by inputs (staging copies, LAPACK workspaces, results gathered for the caller):
//! overflow-checked and fallible, so that a batch or order that cannot be met is the target's
//! `RESOURCE_EXHAUSTED` error (or -1 from the C ABI), never Rust's allocation abort, which no
//! panic guard catches.

use crate::error::{Error, Result};

/// The product of `factors` (element counts, then the element size where one is wanted), or
/// an error naming `what` when it does not fit in a `usize`.
pub fn product(what: &str, factors: &[usize]) -> Result<usize> {
    // An empty array has no bytes however large the other factors: before they overflow.
    if factors.contains(&0) {
        return Ok(0);
    }
    factors
        .iter()
        .try_fold(1usize, |total, &factor| total.checked_mul(factor))
        .ok_or_else(|| {
            let shown: Vec<String> = factors.iter().map(usize::to_string).collect();
            Error::resource_exhausted(format!(
                "{what} of {} elements is past the address space",
                shown.join(" × ")
            ))
        })
}

/// `len` copies of `fill`.
pub fn vec_of<T: Clone>(len: usize, fill: T) -> Result<Vec<T>> {
    let mut vec = Vec::new();
    grow(&mut vec, len, fill)?;
    Ok(vec)
}

/// Grows `vec` with copies of `fill` to at least `len` elements (never shrinks it).
pub fn grow<T: Clone>(vec: &mut Vec<T>, len: usize, fill: T) -> Result<()> {
    if vec.len() >= len {
        return Ok(());
    }
    vec.try_reserve_exact(len - vec.len()).map_err(|_| {
        let element = std::mem::size_of::<T>();
        Error::resource_exhausted(match len.checked_mul(element) {
            Some(bytes) => format!("cannot allocate {bytes} bytes ({len} elements of {element})"),
            None => {
                format!("cannot allocate {len} elements of {element} bytes: past the address space")
            }
        })
    })?;
    vec.resize(len, fill);
    Ok(())
}

/// faer's scratch for `request`, allocated fallibly; `routine` names it in the error.
pub fn faer_scratch(
    request: faer::dyn_stack::StackReq,
    routine: &str,
) -> Result<faer::dyn_stack::MemBuffer> {
    faer::dyn_stack::MemBuffer::try_new(request).map_err(|_| {
        Error::resource_exhausted(format!(
            "{routine}: cannot allocate the factorization's scratch"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn sizes_past_memory_or_the_address_space_are_errors() {
        assert_eq!(product("a", &[3, 4, 8]), Ok(96));
        assert_eq!(product("a", &[1 << 62, 5, 0, 8]), Ok(0));
        let overflow = product("a", &[1 << 40, 1 << 30, 8]).unwrap_err();
        assert_eq!(overflow.code, ErrorCode::ResourceExhausted);
        assert!(
            overflow
                .message
                .contains("a of 1099511627776 × 1073741824 × 8 elements"),
            "{}",
            overflow.message
        );
        let huge = vec_of(1usize << 60, 0u8).unwrap_err();
        assert_eq!(huge.code, ErrorCode::ResourceExhausted);
        assert!(
            huge.message
                .contains("cannot allocate 1152921504606846976 bytes"),
            "{}",
            huge.message
        );
        assert!(vec_of(usize::MAX, 0u64)
            .unwrap_err()
            .message
            .contains("past the address space"));
        let mut grown = vec![1.0f64; 3];
        grow(&mut grown, 2, 0.0).unwrap();
        grow(&mut grown, 5, 2.0).unwrap();
        assert_eq!(grown, [1.0, 1.0, 1.0, 2.0, 2.0]);
    }
}
