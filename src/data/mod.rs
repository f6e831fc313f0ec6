//! The data pipeline: HDF5 helpers (`h5`), a validated dataset (all of it, or this
//! rank's part of the test data) (`shard`), the epoch's row order and the rows of every step
//! (`order`), the background batch loader (`loader`), the class names beside the labels (`classes`),
//! the names of the columns (`columns`), HDF5 compression filters (`filters`),
//! and the converters and the file report behind `hvtrain data` (`convert`, `import`, `inspect`).
//!
//! Must not: know the model beyond what `shard::Expect` says, or call MPI.

pub mod classes;
pub mod columns;
pub mod convert;
pub mod filters;
pub mod h5;
pub mod import;
pub mod inspect;
pub mod loader;
#[cfg(test)]
mod loader_bench;
pub mod norm;
pub mod order;
pub mod shard;
