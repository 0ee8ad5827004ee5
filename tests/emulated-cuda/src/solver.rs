//! The cuSOLVER dense routines ferrax calls (`src/cuda/cusolver.rs`): handles, streams, and
//! getrf, potrf (single and batched), geqrf, orgqr/ungqr and ormqr/unmqr with their
//! `bufferSize` queries, on host memory with LAPACK underneath.
