//! The reduction seam: what happens to one gradient bucket between backward and the
//! optimizer. The engine (`engine.rs`) decides *when* a bucket travels and on which thread;
//! a `Reducer` decides *how*: an exact float32 `MPI_Allreduce`, a compressed fp16/bf16 ring,
//! or (one rank) a copy. A parameter-server exchange (push gradients, pull parameters) is
//! another implementation of the same trait.

use super::comm::Channel;
use super::compress::{self, Scratch};
use crate::config::Compression;

pub trait Reducer: Send {
    /// Combine this rank's `grads` of one bucket with the other ranks' into `out` (both the
    /// bucket's length). Every rank calls it for the same buckets in the same order.
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]);
    /// What the optimizer multiplies `out` by to get the average gradient (1 for the sums
    /// here: the step already divided every rank's gradients by the global row count).
    fn grad_scale(&self) -> f32;
    /// For the timeline: "all-reduce", "all-reduce fp16 (pack, ring, unpack)", ...
    fn what(&self) -> &'static str;
    /// Give the communicator back (benchmarks reuse it; duplicating one is a collective).
    fn into_channel(self: Box<Self>) -> Option<Channel>;
}

/// Choose the reducer for a job: `None` channel means one rank.
pub fn for_job(chan: Option<Channel>, compression: Compression) -> Box<dyn Reducer> {
    match (chan, compression) {
        (None, _) => Box::new(Local),
        (Some(chan), Compression::None) => Box::new(AllReduce { chan }),
        (Some(chan), kind) => Box::new(CompressedRing { chan, kind, scratch: Scratch::default() }),
    }
}

/// One rank: the sum over ranks is the rank's own gradient.
pub struct Local;

impl Reducer for Local {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        out.copy_from_slice(grads);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "copy (one rank)"
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        None
    }
}

/// The exact float32 sum through `MPI_Allreduce`. Each rank's gradients arrive already
/// divided by the step's global row count, so the sum is the mean.
pub struct AllReduce {
    chan: Channel,
}

impl Reducer for AllReduce {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        self.chan.all_reduce_sum_f32(grads, out);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "all-reduce"
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        Some(self.chan)
    }
}

/// The fp16/bf16 ring (`compress.rs`): a sum, like `AllReduce`, carried in half precision.
pub struct CompressedRing {
    chan: Channel,
    kind: Compression,
    scratch: Scratch,
}

impl Reducer for CompressedRing {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        compress::ring_allreduce_sum(&self.chan, grads, out, self.kind, &mut self.scratch);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        match self.kind {
            Compression::Fp16 => "all-reduce fp16 (pack, ring, unpack)",
            _ => "all-reduce bf16 (pack, ring, unpack)",
        }
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        Some(self.chan)
    }
}
