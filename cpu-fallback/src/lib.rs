//! LAPACK for the CPU handlers, without linking any BLAS.
//!
//! Inside a JAX process the table is filled from SciPy's `cython_lapack` capsules (the same
//! OpenBLAS jaxlib uses, so no second BLAS is loaded). Outside Python it is filled by dlopen of
//! the `scipy-openblas32` wheel's library. A call through an empty slot is an error, never a
//! crash.

mod lapack;
mod table;
mod threads;

pub use lapack::*;
pub use table::{load_library, missing, register, registered_names, Missing};
pub use threads::{single_threaded, SET_NUM_THREADS_LOCAL};
