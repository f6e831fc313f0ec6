//! The data pipeline: HDF5 helpers (`h5`), this rank's validated part of a dataset
//! (`shard`), the background batch loader (`loader`), and the converters behind
//! `hvtrain data` (`convert`).

pub mod convert;
pub mod h5;
pub mod loader;
#[cfg(test)]
mod loader_bench;
pub mod shard;
