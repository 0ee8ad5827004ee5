//! The PTX entry points: `#[no_mangle] extern "ptx-kernel"` functions, each a thin call into a
//! body that is unit-tested on the host. Their names and parameters are the contract with the
//! launches in `src/cuda/` of the host crate.
