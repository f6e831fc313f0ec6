//! Parallel execution across ranks: the MPI communicator (`comm`, the only MPI caller), the fusion plan
//! (`fusion`), the communication engine that reduces buckets on its own thread (`engine`),
//! compressed rings (`compress`), the rank grid and tensor groups (`grid`), the heartbeats that tell a slow rank from a gone one and end
//! stalled jobs (`liveness`), the phases the waits record (`watchdog`, a deadline only without
//! heartbeats) and the Chrome-trace timeline (`timeline`).
//!
//! Must not: know the model, the device or the data: it moves buffers that implement `HostBuf`.

pub mod adasum;
pub mod comm;
pub mod compress;
pub mod engine;
pub mod finish;
pub mod fusion;
pub mod grid;
pub mod liveness;
pub mod pipe;
pub mod ps;
pub mod reduce;
pub mod shard;
pub mod startup;
pub mod timeline;
pub mod watchdog;

pub use comm::{Channel, Comm};
pub use engine::Engine;
pub use fusion::FusionPlan;

use crate::error::{Error, Result};

/// Check that every rank holds the same value of `what` (e.g. a config fingerprint); on
/// disagreement, every rank returns the same error naming the ranks that differ from rank 0.
pub fn check_agreement(comm: &Channel, what: &str, value: u64) -> Result<()> {
    let all = comm.all_gather_u64(value);
    let differ: Vec<usize> = (0..all.len()).filter(|&r| all[r] != all[0]).collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(Error::Mismatch(format!(
            "{what} differs from rank 0's on rank(s) {differ:?}; start every rank with the same job file, --set options and build"
        )))
    }
}

/// A cheap fingerprint of a parameter vector: FNV-1a over 64-bit words of the f32 bits.
/// Equal parameters give equal checksums; any bit that differs almost surely shows.
pub fn checksum(params: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for pair in params.chunks(2) {
        let w = pair[0].to_bits() as u64 | (pair.get(1).map_or(0, |v| v.to_bits()) as u64) << 32;
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
