//! Exported C symbols besides the handlers: the target and limit tables the Python package
//! reads, and the LAPACK table's fillers.

pub mod catalyst;
mod kernel_call;
mod lapack;
mod limits;
pub mod linalg;
mod rnn;
mod targets;

pub use limits::{ferrax_limits, FerraxLimit};
pub use targets::{ferrax_targets, FerraxTarget};

/// Bumped whenever an exported symbol changes signature or meaning.
pub const ABI_VERSION: u32 = 1;

#[no_mangle]
pub extern "C" fn ferrax_abi_version() -> u32 {
    ABI_VERSION
}
