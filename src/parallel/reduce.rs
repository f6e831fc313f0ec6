//! The reduction seam: what happens to one gradient bucket between backward and the
//! optimizer. The engine (`engine.rs`) decides *when* a bucket travels and on which thread;
//! a `Reducer` decides *how*: an exact float32 `MPI_Allreduce`, a compressed fp16/bf16 ring,
//! Adasum (`adasum.rs`, per tensor of the bucket), the hierarchical sum (in the node, among
//! the nodes, back), or (one rank) a copy. A parameter-server exchange (push gradients, pull parameters) is
//! another implementation of the same trait.
//!
//! Must not: decide when a bucket travels (the engine does).

use super::adasum;
use super::comm::Channel;
use super::compress::{self, Scratch};
use super::fusion::FusionPlan;
use crate::config::{Compression, Reduction};
use std::ops::Range;

pub trait Reducer: Send {
    /// Combine this rank's `grads` of one bucket with the other ranks' into `out` (both the
    /// bucket's length). Every rank calls it for the same buckets in the same order.
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]);
    /// `reduce` for fusion bucket `index` (a parameter-server exchange needs to know which
    /// bucket it carries: each has its owner).
    fn reduce_bucket(&mut self, _index: usize, grads: &[f32], out: &mut [f32]) {
        self.reduce(grads, out)
    }
    /// What the optimizer multiplies `out` by to get the average gradient (1 for the sums
    /// here: the step already divided every rank's gradients by the global row count).
    fn grad_scale(&self) -> f32;
    /// For the timeline: "all-reduce", "all-reduce fp16 (pack, ring, unpack)", ...
    fn what(&self) -> &'static str;
    /// Whether the bucket is an identity copy (one rank): the engine then copies it where it
    /// lives (on the GPU: device to device) instead of staging it through host memory.
    fn is_copy(&self) -> bool {
        false
    }
    /// The precision the bucket travels in (a GPU packs it to this before copying it to the
    /// host, halving the copy; the result comes back packed the same way).
    fn wire(&self) -> Compression {
        Compression::None
    }
    /// Whether `reduce_device` works (a CUDA-aware MPI library and device buffers).
    fn takes_device_pointers(&self) -> bool {
        false
    }
    /// `reduce` on device memory given by address (see `Channel::all_reduce_sum_f32_raw`).
    ///
    /// # Safety
    /// Only when `takes_device_pointers`; both addresses hold `n` floats, ready to be read.
    unsafe fn reduce_device(&mut self, _send: u64, _recv: u64, _n: usize) {
        unreachable!("reduce_device on a reducer that takes no device pointers")
    }
    /// Give the communicator back (benchmarks reuse it; duplicating one is a collective).
    fn into_channel(self: Box<Self>) -> Option<Channel>;
}

/// Choose the reducer for a job: `None` channel means one rank.
/// `device_pointers`: the gradients live on a GPU and the MPI library is CUDA-aware, so the
/// exact sum is handed device memory directly. `plan`: the buckets' tensors (Adasum combines
/// tensor by tensor).
pub fn for_job(
    chan: Option<Channel>,
    compression: Compression,
    reduction: Reduction,
    hierarchical: bool,
    plan: &FusionPlan,
    device_pointers: bool,
) -> Box<dyn Reducer> {
    match (chan, compression) {
        (None, _) => Box::new(Local),
        (Some(chan), _) if hierarchical => Box::new(Hierarchical::new(chan)),
        (Some(chan), _) if reduction == Reduction::Adasum => Box::new(Adasum::new(chan, plan)),
        (Some(chan), Compression::None) => Box::new(AllReduce { chan, device_pointers }),
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
    fn is_copy(&self) -> bool {
        true
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        None
    }
}

/// The exact float32 sum through `MPI_Allreduce`. Each rank's gradients arrive already
/// divided by the step's global row count, so the sum is the mean.
pub struct AllReduce {
    chan: Channel,
    device_pointers: bool,
}

impl Reducer for AllReduce {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        self.chan.all_reduce_sum_f32(grads, out);
    }
    fn takes_device_pointers(&self) -> bool {
        self.device_pointers
    }
    unsafe fn reduce_device(&mut self, send: u64, recv: u64, n: usize) {
        // SAFETY: as the caller promises.
        unsafe { self.chan.all_reduce_sum_f32_raw(send, recv, n) }
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

/// Device-pointer sums emulated in host memory (`HVTRAIN_EMULATE_DEVICE_SUMS=1`, for tests on
/// machines without a GPU): `reduce_device` takes the addresses as host floats, send and
/// receive the same allowed (as NCCL allows), and sums them with MPI's float32 all-reduce,
/// the sum the host path makes.
pub struct HostPointers {
    chan: Channel,
    sent: Vec<f32>,
}

impl HostPointers {
    pub fn new(chan: Channel) -> HostPointers {
        HostPointers { chan, sent: Vec::new() }
    }
}

impl Reducer for HostPointers {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        self.chan.all_reduce_sum_f32(grads, out);
    }
    fn takes_device_pointers(&self) -> bool {
        true
    }
    unsafe fn reduce_device(&mut self, send: u64, recv: u64, n: usize) {
        // SAFETY: the caller promises n floats at each address, idle; here they are host
        // memory (the CPU backend's buffers).
        let send = unsafe { std::slice::from_raw_parts(send as *const f32, n) };
        self.sent.clear();
        self.sent.extend_from_slice(send);
        // SAFETY: as above; `sent` is a copy, so recv may be send.
        let recv = unsafe { std::slice::from_raw_parts_mut(recv as *mut f32, n) };
        self.chan.all_reduce_sum_f32(&self.sent, recv);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "all-reduce (emulated device pointers)"
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
    fn wire(&self) -> Compression {
        self.kind
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

/// Adasum (`adasum.rs`): each bucket's tensors combined pairwise over the ranks.
pub struct Adasum {
    chan: Channel,
    /// For each bucket, its tensors' ranges inside it.
    tensors: Vec<Vec<Range<usize>>>,
    tmp: Vec<f32>,
}

impl Adasum {
    pub fn new(chan: Channel, plan: &FusionPlan) -> Adasum {
        let tensors = plan
            .buckets
            .iter()
            .zip(&plan.members)
            .map(|(b, m)| {
                let mut ts: Vec<Range<usize>> =
                    m.iter().map(|&t| plan.slots[t].start - b.start..plan.slots[t].end - b.start).collect();
                ts.sort_by_key(|r| r.start);
                ts
            })
            .collect();
        Adasum { chan, tensors, tmp: Vec::new() }
    }
}

impl Reducer for Adasum {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        // Without a bucket index: the buffer as one tensor.
        out.copy_from_slice(grads);
        adasum::all_reduce(&self.chan, out, &[0..out.len()], &mut self.tmp);
    }
    fn reduce_bucket(&mut self, index: usize, grads: &[f32], out: &mut [f32]) {
        out.copy_from_slice(grads);
        adasum::all_reduce(&self.chan, out, &self.tensors[index], &mut self.tmp);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "adasum (pairwise, per tensor)"
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        Some(self.chan)
    }
}

/// The hierarchical sum (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE): `MPI_Reduce` to the
/// node's first rank over shared memory, `MPI_Allreduce` among the nodes' first ranks (one
/// message per node crosses the network, not one per rank), `MPI_Bcast` back inside the
/// node. The same sum as `AllReduce` in another order: equal within float32 rounding, and
/// every rank gets the same bits (the broadcast).
pub struct Hierarchical {
    /// The whole group (kept for `into_channel`).
    chan: Channel,
    /// This rank's node.
    node: Channel,
    /// The nodes' first ranks (on them only).
    leaders: Option<Channel>,
    tmp: Vec<f32>,
}

impl Hierarchical {
    /// Collective over `chan`.
    pub fn new(chan: Channel) -> Hierarchical {
        let node = chan.split_node();
        let leader = node.rank == 0;
        let leaders = chan.split(usize::from(!leader), chan.rank);
        // Every node's size, in the order of their first ranks, for the log line.
        let sizes: Vec<u64> =
            chan.all_gather_u64(if leader { node.size as u64 } else { 0 }).into_iter().filter(|&s| s > 0).collect();
        if crate::sys::rank() == Some(0) {
            let same = sizes.iter().all(|&s| s == sizes[0]);
            let shape = if same { format!("{} x {}", sizes.len(), sizes[0]) } else { format!("{sizes:?}") };
            log::info!(
                "hierarchical all-reduce: {shape} rank(s) (nodes x ranks per node, {}): reduce in \
                 the node, all-reduce among {} node leader(s), broadcast in the node",
                if std::env::var_os("HVTRAIN_NODE_SIZE").is_some() {
                    "nodes as HVTRAIN_NODE_SIZE says"
                } else {
                    "nodes by shared memory"
                },
                sizes.len()
            );
        }
        Hierarchical { chan, node, leaders: leader.then_some(leaders), tmp: Vec::new() }
    }
}

impl Reducer for Hierarchical {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        self.node.reduce_sum_f32(grads, out);
        if let Some(leaders) = &self.leaders {
            if leaders.size > 1 {
                self.tmp.clear();
                self.tmp.extend_from_slice(out);
                leaders.all_reduce_sum_f32(&self.tmp, out);
            }
        }
        self.node.broadcast_f32(out);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "hierarchical all-reduce (node reduce, leaders all-reduce, node broadcast)"
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        Some(self.chan)
    }
}
