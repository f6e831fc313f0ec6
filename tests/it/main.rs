//! Most integration tests, as one test binary (each file a module): one binary to build and
//! link instead of one per file, which cost CI about 8 minutes of thin-LTO links. The tests
//! that run long, drive the machine (Slurm, network namespaces, a no-root build) or are run
//! alone by name (`--test fault_cells`, `--test bundle`) keep a binary of their own in
//! `tests/`. MPI jobs from every module take `common::mpi_lock`, one process-wide lock, so no
//! two run at once on a 2-core machine, as before.

// Clippy: tuple types of a few parts read better in place than behind an alias.
#![allow(clippy::type_complexity)]

#[path = "../common/mod.rs"]
mod common;

mod accumulate;
mod adasum;
mod all_rows;
mod autotune;
mod average;
mod bad_input;
mod bench;
mod bf16;
mod bucket_order;
mod checkpoint_files;
mod class_names;
mod class_weights;
mod clipping;
mod columns;
mod compressed;
mod data_cli;
mod data_types;
mod docs;
mod dropout;
mod ema;
mod end_to_end;
mod equivalence;
mod export;
mod finish;
mod gpu_allreduce;
mod hierarchical;
mod import;
mod init;
mod layers;
mod losses;
mod lr_find;
mod memory;
mod model_parallel;
mod mpi_pieces;
mod normalize;
mod on_device;
mod parameter_server;
mod plot;
mod ps_async;
mod ps_stop;
mod ranking;
mod resume;
mod resume_ranks;
mod rmsprop;
mod sample_weights;
mod schedules;
mod shard;
mod startup;
mod sweep;
mod tensorboard;
mod validation;
