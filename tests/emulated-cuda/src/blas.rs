//! The cuBLAS routines ferrax calls (`src/cuda/cublas.rs`): handles, streams, and the batched
//! getrf and geqrf, on host memory with LAPACK underneath.
