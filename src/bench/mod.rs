//! `hvtrain bench ...`: measurements a user runs on their own machine before a long job.
//! `gemm`: the SGEMM rate on a step's exact shapes; `allreduce`: raw `MPI_Allreduce` against
//! the engine's fused path; `pieces`: buffers past MPI's 32-bit counts, sent and checked.
//!
//! Must not: be used by training; nothing below `main` imports it.

pub mod allreduce;
pub mod gemm;
pub mod pieces;
pub mod step;
