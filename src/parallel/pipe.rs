//! The pipeline link: one stage's point-to-point messages to its neighbours (activations
//! forward to the next stage, their gradients back to the previous one), on the pipeline's
//! own communicator (the P ranks of one replica and tensor slice, ordered by stage).
//!
//! Sends are non-blocking (`MPI_Isend` with an owned buffer) and receives block, which is
//! what keeps the 1F1B schedule free of deadlock: a stage never waits for its own send to be
//! received, so a wait can only be for a message the schedule has the neighbour send before
//! it waits on anything of ours (`model::pipeline`'s test plays every schedule through this
//! rule). Every send is waited for before the step ends, so buffers are reused, not leaked.
//! The time spent waiting in receives is the stage's share of the pipeline bubble.
//!
//! On GPUs the messages may go device to device instead (`set_device`: NCCL send/recv, or
//! its emulation on host memory in tests), with the same contract: `send_device` returns at
//! once (the buffer stays unwritten until `finish_sends`), `recv_device` returns with the data
//! in place. The host path stays for evaluation and for backends whose buffers are not
//! addressable.
//!
//! Must not: compute (the step does; this file only moves activations and gradients).

use super::comm::{Channel, Outgoing};
use super::liveness;
use super::watchdog::{SharedWatchdog, MAIN};
use std::time::{Duration, Instant};

const FORWARD_TAG: i32 = 0x5046; // "PF"
const BACKWARD_TAG: i32 = 0x5042; // "PB"

/// Which way a message goes: activations forward (to the next stage, from the previous one),
/// or their gradients backward (to the previous stage, from the next one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Forward,
    Backward,
}

/// Messages between buffers given by address (device memory for NCCL; host memory in the
/// emulation), to the neighbouring stages.
pub trait DeviceLink {
    /// Start sending `n` floats at `ptr` to the stage `dir` points at (the next one forward).
    /// Returns at once.
    ///
    /// # Safety
    /// `ptr` holds `n` floats, complete, and unwritten until `finish` returns.
    unsafe fn send(&mut self, ptr: u64, n: usize, dir: Dir);
    /// Receive `n` floats into `ptr` from the stage `dir` comes from (the previous one
    /// forward); the data is in place when it returns.
    ///
    /// # Safety
    /// `ptr` holds room for `n` floats, which nothing else reads or writes meanwhile.
    unsafe fn recv(&mut self, ptr: u64, n: usize, dir: Dir);
    /// Wait until every send has completed.
    fn finish(&mut self);
    /// For the log: "NCCL send/recv", ...
    fn what(&self) -> &'static str;
}

/// Device messages emulated on host memory (`HVTRAIN_EMULATE_DEVICE_SUMS=1`, tests without a
/// GPU): the addresses are host floats, sent with `MPI_Isend` from a copy and received in
/// place, on a communicator of their own (a duplicate of the pipeline's).
pub struct HostPointers {
    chan: Channel,
    sends: Vec<Outgoing>,
}

impl HostPointers {
    pub fn new(chan: Channel) -> HostPointers {
        HostPointers { chan, sends: Vec::new() }
    }
}

impl DeviceLink for HostPointers {
    unsafe fn send(&mut self, ptr: u64, n: usize, dir: Dir) {
        // SAFETY: the caller's promise; copied out at once.
        let data = unsafe { std::slice::from_raw_parts(ptr as *const f32, n) }.to_vec();
        let (to, tag) = match dir {
            Dir::Forward => (self.chan.rank + 1, FORWARD_TAG),
            Dir::Backward => (self.chan.rank - 1, BACKWARD_TAG),
        };
        self.sends.push(self.chan.isend_f32(to, tag, data));
    }
    unsafe fn recv(&mut self, ptr: u64, n: usize, dir: Dir) {
        // SAFETY: the caller's promise.
        let out = unsafe { std::slice::from_raw_parts_mut(ptr as *mut f32, n) };
        let (from, tag) = match dir {
            Dir::Forward => (self.chan.rank - 1, FORWARD_TAG),
            Dir::Backward => (self.chan.rank + 1, BACKWARD_TAG),
        };
        self.chan.recv_f32(from, tag, out);
    }
    fn finish(&mut self) {
        for o in self.sends.drain(..) {
            o.wait();
        }
    }
    fn what(&self) -> &'static str {
        "emulated device pointers"
    }
}

pub struct PipeLink {
    chan: Channel,
    /// This rank's stage (its rank in the pipeline communicator).
    pub stage: usize,
    /// Stages in the pipeline (P).
    pub stages: usize,
    sends: Vec<Outgoing>,
    pool: Vec<Vec<f32>>,
    watchdog: Option<SharedWatchdog>,
    /// The training step, for the watchdog's phase.
    pub step: u64,
    /// Time spent waiting for the neighbours' messages since the last `take_waited`.
    waited: Duration,
    /// Messages device to device, when the job chose that (training steps only).
    device: Option<Box<dyn DeviceLink>>,
    /// Device messages so far, forward and backward (the first of each is logged).
    device_messages: [u64; 2],
}

impl PipeLink {
    /// `chan`: the pipeline communicator, ranked by stage.
    pub fn new(chan: Channel) -> PipeLink {
        PipeLink {
            stage: chan.rank,
            stages: chan.size,
            chan,
            sends: Vec::new(),
            pool: Vec::new(),
            watchdog: None,
            step: 0,
            waited: Duration::ZERO,
            device: None,
            device_messages: [0; 2],
        }
    }

    /// The pipeline communicator (ranked by stage).
    pub fn channel(&self) -> &Channel {
        &self.chan
    }

    /// Send and receive the step's messages through `d` (device to device) from now on.
    pub fn set_device(&mut self, d: Box<dyn DeviceLink>) {
        self.device = Some(d);
    }

    /// Whether the step's messages go device to device (`send_device`, `recv_device`).
    pub fn on_device(&self) -> bool {
        self.device.is_some()
    }

    pub fn set_watchdog(&mut self, wd: SharedWatchdog) {
        self.watchdog = Some(wd);
    }

    pub fn is_first(&self) -> bool {
        self.stage == 0
    }
    pub fn is_last(&self) -> bool {
        self.stage + 1 == self.stages
    }

    /// A host buffer holding `data`, from the pool of completed sends.
    fn buffer(&mut self, data: &[f32]) -> Vec<f32> {
        let mut b = self.pool.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(data);
        b
    }

    /// Send a micro-batch's output activations to the next stage.
    pub fn send_forward(&mut self, data: &[f32]) {
        let b = self.buffer(data);
        let o = self.chan.isend_f32(self.stage + 1, FORWARD_TAG, b);
        self.sends.push(o);
    }

    /// Send a micro-batch's input gradient to the previous stage.
    pub fn send_backward(&mut self, data: &[f32]) {
        let b = self.buffer(data);
        let o = self.chan.isend_f32(self.stage - 1, BACKWARD_TAG, b);
        self.sends.push(o);
    }

    /// Receive the next micro-batch's input activations from the previous stage.
    pub fn recv_forward(&mut self, out: &mut [f32]) {
        self.recv(self.stage - 1, FORWARD_TAG, out, "waiting for the previous pipeline stage's activations");
    }

    /// Receive the gradient of a micro-batch's outputs from the next stage.
    pub fn recv_backward(&mut self, out: &mut [f32]) {
        self.recv(self.stage + 1, BACKWARD_TAG, out, "waiting for the next pipeline stage's gradients");
    }

    /// Start sending `n` floats at address `ptr` the way `dir` says, device to device.
    ///
    /// # Safety
    /// As `DeviceLink::send`: the floats stay unwritten until `finish_sends`.
    pub unsafe fn send_device(&mut self, ptr: u64, n: usize, dir: Dir) {
        self.count(n, dir);
        let d = self.device.as_mut().expect("send_device on a link without a device transport");
        // SAFETY: the caller's promise.
        unsafe { d.send(ptr, n, dir) };
    }

    /// Receive `n` floats into address `ptr` the way `dir` says, device to device.
    ///
    /// # Safety
    /// As `DeviceLink::recv`.
    pub unsafe fn recv_device(&mut self, ptr: u64, n: usize, dir: Dir) {
        let what = match dir {
            Dir::Forward => "waiting for the previous pipeline stage's activations (device)",
            Dir::Backward => "waiting for the next pipeline stage's gradients (device)",
        };
        self.count(n, dir);
        let t = Instant::now();
        {
            let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, what, self.step));
            let d = self.device.as_mut().expect("recv_device on a link without a device transport");
            // SAFETY: the caller's promise.
            unsafe { d.recv(ptr, n, dir) };
        }
        self.waited += t.elapsed();
        liveness::progress();
    }

    /// One more device message; the first each way is logged with the transport's name.
    fn count(&mut self, n: usize, dir: Dir) {
        let c = &mut self.device_messages[usize::from(dir == Dir::Backward)];
        if *c == 0 {
            let what = self.device.as_ref().map_or("nothing", |d| d.what());
            log::debug!("pipeline messages: the first ({n} floats, {dir:?}) through {what}");
        }
        *c += 1;
    }

    fn recv(&mut self, from: usize, tag: i32, out: &mut [f32], what: &'static str) {
        let t = Instant::now();
        {
            let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, what, self.step));
            self.chan.recv_f32(from, tag, out);
        }
        self.waited += t.elapsed();
        liveness::progress();
    }

    /// Wait until every send of this step has completed (its receiver has it, or MPI has
    /// buffered it), keeping the buffers for the next step.
    pub fn finish_sends(&mut self) {
        let t = Instant::now();
        let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, "a pipeline send", self.step));
        for o in std::mem::take(&mut self.sends) {
            self.pool.push(o.wait());
        }
        if let Some(d) = self.device.as_mut() {
            d.finish();
        }
        self.waited += t.elapsed();
    }

    /// Collective over the pipeline: every stage gets the last stage's `v` (the step's loss).
    /// `v` summed element-wise over the stages, on every stage (gradient clipping's global norm).
    pub fn sum_over_stages(&self, v: &mut [f64]) {
        let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, "the pipeline's gradient-norm sum", self.step));
        self.chan.all_reduce_sum_f64(v);
    }

    /// The loss broadcast from the last stage (collective over the stages).
    pub fn broadcast_from_last(&self, v: &mut [f64]) {
        let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, "the pipeline's loss broadcast", self.step));
        self.chan.broadcast_f64_from(self.stages - 1, v);
    }

    /// Collective over the pipeline: every stage's arena on stage 0, by stage (None elsewhere).
    pub fn gather_stages(&self, mine: &[f32]) -> Option<Vec<Vec<f32>>> {
        self.chan.gather_f32s(mine)
    }

    /// Time waited for the neighbours since the last call.
    pub fn take_waited(&mut self) -> Duration {
        std::mem::take(&mut self.waited)
    }
}
