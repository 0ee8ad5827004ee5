//! One module per op family: its `mod.rs` names the targets, states jaxlib's contract and
//! declares each target's operands once (`ffi_operands!`, with the shape rules); `cpu.rs` and
//! `cuda.rs` hold that platform's handlers (the same target name is registered per platform,
//! with that platform's handler).

use crate::ffi::Registration;

/// Declares the op families and the list of their handlers, for `ferrax_targets`.
macro_rules! families {
    ($($family:ident),* $(,)?) => {
        $(pub mod $family;)*

        /// Every handler ferrax registers, for `ferrax_targets` (and the call-frame fuzzer).
        pub fn handlers() -> impl Iterator<Item = &'static Registration> {
            [$($family::HANDLERS),*].into_iter().flatten().flat_map(|h| h.iter())
        }
    };
}

families!(
    cholesky_update,
    eig,
    eigh,
    getrf,
    hessenberg,
    kernel_call,
    lu_solve,
    pivots,
    potrf,
    qr,
    rnn,
    schur,
    sparse,
    svd,
    threefry,
    tridiagonal,
    tridiagonal_solve,
    trsm,
);

/// What the geev and gees families share: their results differ between real and complex
/// input.
pub mod eigenvalues;
