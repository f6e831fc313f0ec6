//! The step's side of sharded state (`distribution.shard`): which piece of each reduced
//! bucket this rank holds, and the all-gather of the updated pieces after the optimizer.
//!
//! Must not: call MPI (`parallel::shard::Sharder` does) or update parameters itself (the
//! optimizer does, on this rank's pieces).

use super::Stepper;
use crate::device::Backend;
use crate::error::Result;
use crate::parallel::engine::HostBuf;
use crate::parallel::shard::{intersect, Sharder};
use std::time::Instant;

/// Sharded state (`distribution.shard`): the layout and its collectives, and whether the
/// reduced buckets hold only this rank's part (reduce-scattered) or the whole bucket.
pub struct Sharded {
    pub sharder: Sharder,
    pub reduce_scattered: bool,
    /// Host staging for the parameters' all-gather when they live on a GPU.
    host: Vec<f32>,
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// Divide the optimizer state and update over the data group as `sharder` lays them out
    /// (before `restore`): each step this rank updates its part of the parameters, then every
    /// rank's part is all-gathered. `reduce_scattered`: the engine's reducer returns only this
    /// rank's part of each bucket (`parallel::shard::ReduceScatter` with buffers of
    /// `parallel::shard::reduced_lens`).
    /// The optimizer must update this rank's part only (`Optimizer::with_own`).
    pub fn set_shard(&mut self, sharder: Sharder, reduce_scattered: bool) {
        assert_eq!(sharder.layout.buckets, self.engine.plan().buckets, "a layout of other buckets");
        assert_eq!(self.opt.own(), Some(&sharder.own()), "an optimizer of other pieces");
        self.shard = Some(Sharded { sharder, reduce_scattered, host: Vec::new() });
    }

    /// The sharded state's layout and collectives, where the state is sharded.
    pub fn shard(&self) -> Option<&Sharded> {
        self.shard.as_ref()
    }

    /// Where bucket `b`'s reduced gradients start in the arena: the bucket's start, or, when
    /// reduce-scattered, this rank's piece's.
    pub(super) fn reduced_offset(&self, b: usize) -> usize {
        match &self.shard {
            Some(s) if s.reduce_scattered => s.sharder.layout.piece(b, s.sharder.rank()).start,
            _ => self.engine.plan().buckets[b].start,
        }
    }

    /// The part of tensor range `r` of bucket `b` that this rank's reduced buffer holds: all of
    /// it, or when reduce-scattered its overlap with this rank's piece.
    pub(super) fn reduced_part(&self, b: usize, r: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        match &self.shard {
            Some(s) if s.reduce_scattered => intersect(r, &s.sharder.layout.piece(b, s.sharder.rank())),
            _ => r.clone(),
        }
    }

    /// Collective over the data group (sharded state only): every rank's updated part of the
    /// parameters from the rank that updated it.
    pub(super) fn gather_params(&mut self) -> Result<()> {
        let Some(sh) = &mut self.shard else { return Ok(()) };
        let t = Instant::now();
        if self.be.device_ordinal().is_none() {
            // Host memory: in place.
            sh.sharder.gather_params(self.params.host_mut());
        } else {
            if sh.host.is_empty() {
                let _a = crate::mem::allocating("host staging for the parameters' all-gather");
                sh.host = crate::mem::zeros(self.model.n_params)?;
            }
            for (p, _) in sh.sharder.own() {
                self.be.download(&self.params, p.clone(), &mut sh.host[p])?;
            }
            sh.sharder.gather_params(&mut sh.host);
            self.be.upload_into(&sh.host, &mut self.params)?;
        }
        self.engine.exposed += t.elapsed();
        self.span("all-gather parameters", t);
        Ok(())
    }
}
