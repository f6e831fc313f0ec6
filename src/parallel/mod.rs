//! Parallel execution across ranks: the MPI communicator (`comm`, the only MPI caller), the fusion plan
//! (`fusion`), the communication engine that reduces buckets on its own thread (`engine`),
//! the layer gathers' own thread (`gather`, sharded parameters' prefetch),
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
pub mod gather;
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
    let mut c = Checksum::new();
    c.add(params);
    c.finish()
}

/// `checksum` of a vector given in pieces (a checkpoint's arrays run by run, never put
/// together): the value of the pieces end to end.
pub struct Checksum {
    h: u64,
    /// The last piece's odd element, waiting for its partner.
    odd: Option<u32>,
}

impl Default for Checksum {
    fn default() -> Self {
        Checksum::new()
    }
}

impl Checksum {
    pub fn new() -> Checksum {
        Checksum { h: 0xcbf2_9ce4_8422_2325, odd: None }
    }

    fn mix(&mut self, lo: u32, hi: u32) {
        self.h = (self.h ^ (u64::from(lo) | u64::from(hi) << 32)).wrapping_mul(0x0000_0100_0000_01b3);
    }

    /// The next elements.
    pub fn add(&mut self, mut v: &[f32]) {
        if let Some(lo) = self.odd.take() {
            let Some((first, rest)) = v.split_first() else {
                self.odd = Some(lo);
                return;
            };
            self.mix(lo, first.to_bits());
            v = rest;
        }
        let pairs = v.chunks_exact(2);
        self.odd = pairs.remainder().first().map(|x| x.to_bits());
        for p in pairs {
            self.mix(p[0].to_bits(), p[1].to_bits());
        }
    }

    /// The checksum; an odd last element is paired with 0.
    pub fn finish(mut self) -> u64 {
        if let Some(lo) = self.odd.take() {
            self.mix(lo, 0);
        }
        self.h
    }
}

#[cfg(test)]
mod tests {
    use super::{checksum, Checksum};

    /// A vector's checksum given in pieces, cut anywhere (odd and empty pieces too), is the
    /// whole vector's; another value or order is not.
    #[test]
    fn checksum_in_pieces_equals_the_whole() {
        let v: Vec<f32> = (0..23).map(|i| (i as f32 * 0.37).sin()).collect();
        let whole = checksum(&v);
        for cuts in [vec![], vec![1], vec![2, 2, 3], vec![0, 5, 5, 11, 22], vec![1, 2, 3, 4, 5, 6, 7]] {
            let mut c = Checksum::new();
            let mut at = 0;
            for &e in &cuts {
                c.add(&v[at..e]);
                at = e;
            }
            c.add(&v[at..]);
            assert_eq!(c.finish(), whole, "cut at {cuts:?}");
        }
        // FNV-1a over (lo, hi) word pairs, an odd last element paired with 0: written out.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for p in v.chunks(2) {
            let w = u64::from(p[0].to_bits()) | u64::from(p.get(1).map_or(0, |x| x.to_bits())) << 32;
            h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
        }
        assert_eq!(whole, h);
        let mut w = v.clone();
        w.swap(3, 4);
        assert_ne!(checksum(&w), whole);
    }
}
