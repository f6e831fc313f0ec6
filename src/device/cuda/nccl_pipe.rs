//! Pipeline messages GPU to GPU by NCCL (`ncclSend`/`ncclRecv`), as Megatron-LM and
//! PyTorch's pipeline schedules send activations and their gradients: the `DeviceLink` of
//! `parallel::pipe`, with its contract (a send returns at once, a receive returns with the
//! data in place).
//!
//! Each pair of neighbouring stages has two NCCL communicators of two ranks, one per
//! direction (activations forward, gradients backward), each driven on its own stream. One
//! communicator for both directions would deadlock under 1F1B: NCCL runs a communicator's
//! operations in the order they were issued, and the two stages of a pair issue the forward
//! and backward messages between them in different orders (the earlier stage sends one more
//! activation before its first gradient arrives). Per direction, both stages issue the
//! messages in micro-batch order, and sends on a stream of their own never hold up a receive,
//! which is `parallel::pipe`'s rule for deadlock-free schedules (non-blocking sends, blocking
//! receives). The communicators are made pairwise in two rounds, stages (0,1), (2,3), ...
//! first, then (1,2), (3,4), ..., so no stage waits on a chain of others.
//!
//! A send's stream is waited for in `finish` (the end of a step's micro-batches); a receive's
//! at once. A rank that dies while its neighbour waits: the liveness watchdog aborts the
//! communicators (`nccl::communicator` registered the hook).
//!
//! Must not: choose the path (train/ does), or send from memory the compute stream may still
//! write (the step hands over idle buffers: `Backend::idle_address`).

use super::nccl::{communicator, fail};
use super::nccl_lib::{self, Nccl, RawComm};
use crate::parallel::comm::Channel;
use crate::parallel::pipe::{DeviceLink, Dir};
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;

/// One direction between two stages: its communicator and stream.
struct Lane {
    comm: RawComm,
    stream: Arc<CudaStream>,
}

/// The two directions between this stage and one neighbour, and the neighbour's rank in them.
struct Pair {
    forward: Lane,
    backward: Lane,
    peer: i32,
    _chan: Channel,
}

pub struct NcclPipe {
    lib: &'static Nccl,
    ctx: Arc<CudaContext>,
    /// This rank in the world, for error lines.
    rank: usize,
    /// With the next stage (None on the last) and the previous one (None on the first).
    next: Option<Pair>,
    prev: Option<Pair>,
}

impl NcclPipe {
    /// Collective over `chan` (the pipeline communicator, ranked by stage; every rank has
    /// loaded NCCL, the choice checked it): the communicators with both neighbours on the GPU
    /// of `ctx`. `rank`: this rank in the world. Errors name NCCL's reason.
    pub fn new(chan: &Channel, ctx: Arc<CudaContext>, rank: usize) -> Result<NcclPipe, String> {
        let lib = nccl_lib::load()?;
        ctx.bind_to_thread().map_err(|e| format!("binding the GPU to this thread: {e}"))?;
        let s = chan.rank;
        let mut link = NcclPipe { lib, ctx, rank, next: None, prev: None };
        // Round 0: pairs (0,1), (2,3), ...; round 1: (1,2), (3,4), ... Every stage takes part
        // in both splits (a stage without a partner in a round gets a group of one).
        for round in 0..2 {
            let pair = chan.split((s + round) / 2, s);
            if pair.size < 2 {
                continue;
            }
            let forward = link.lane(&pair)?;
            let backward = link.lane(&pair)?;
            let lower = pair.rank == 0;
            let p = Pair { forward, backward, peer: if lower { 1 } else { 0 }, _chan: pair };
            if lower {
                link.next = Some(p);
            } else {
                link.prev = Some(p);
            }
        }
        Ok(link)
    }

    /// A communicator over `pair` and a stream for it.
    fn lane(&self, pair: &Channel) -> Result<Lane, String> {
        let stream = self.ctx.new_stream().map_err(|e| format!("a stream for NCCL: {e}"))?;
        Ok(Lane { comm: communicator(self.lib, pair, self.rank)?, stream })
    }

    /// Wait for `lane`'s stream; a failure ends the job with NCCL's asynchronous error.
    fn wait(&self, lane: &Lane, what: &str) {
        if let Err(e) = lane.stream.synchronize() {
            let mut async_rc = 0;
            // SAFETY: a live communicator.
            unsafe { (self.lib.comm_get_async_error)(lane.comm, &mut async_rc) };
            fail(self.rank, what, format!("{e}; {}", self.lib.error(async_rc)));
        }
    }

    fn bind(&self) {
        if let Err(e) = self.ctx.bind_to_thread() {
            fail(self.rank, "binding the GPU for a pipeline message", e.to_string());
        }
    }
}

/// The pair and its lane a message `dir` travels on: sends forward to the next stage,
/// backward to the previous; receives forward from the previous, backward from the next.
fn route(link: &NcclPipe, dir: Dir, sending: bool) -> (&Lane, i32) {
    let towards_next = (dir == Dir::Forward) == sending;
    let pair = if towards_next { link.next.as_ref() } else { link.prev.as_ref() };
    let pair = pair.expect("a pipeline message to a stage that exists (the schedule's)");
    let lane = if dir == Dir::Forward { &pair.forward } else { &pair.backward };
    (lane, pair.peer)
}

impl DeviceLink for NcclPipe {
    unsafe fn send(&mut self, ptr: u64, n: usize, dir: Dir) {
        self.bind();
        let (lane, peer) = route(self, dir, true);
        let s = lane.stream.cu_stream() as *mut std::ffi::c_void;
        // SAFETY: n floats at ptr, complete and unwritten until `finish` (the caller's
        // promise); the communicator and stream are this lane's.
        let rc = unsafe { (self.lib.send)(ptr as *const _, n, nccl_lib::FLOAT32, peer, lane.comm, s) };
        if rc != 0 {
            fail(self.rank, "ncclSend (a pipeline message)", self.lib.error(rc));
        }
    }
    unsafe fn recv(&mut self, ptr: u64, n: usize, dir: Dir) {
        self.bind();
        let (lane, peer) = route(self, dir, false);
        let s = lane.stream.cu_stream() as *mut std::ffi::c_void;
        // SAFETY: room for n floats at ptr, idle until this returns (the caller's promise).
        let rc = unsafe { (self.lib.recv)(ptr as *mut _, n, nccl_lib::FLOAT32, peer, lane.comm, s) };
        if rc != 0 {
            fail(self.rank, "ncclRecv (a pipeline message)", self.lib.error(rc));
        }
        self.wait(lane, "ncclRecv (waiting for a pipeline message)");
    }
    fn finish(&mut self) {
        self.bind();
        if let Some(p) = &self.next {
            self.wait(&p.forward, "ncclSend (waiting for the activations sent)");
        }
        if let Some(p) = &self.prev {
            self.wait(&p.backward, "ncclSend (waiting for the gradients sent)");
        }
    }
    fn what(&self) -> &'static str {
        "NCCL send/recv"
    }
}
