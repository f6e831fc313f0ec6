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
//! Must not: compute (the step does; this file only moves activations and gradients).

use super::comm::{Channel, Outgoing};
use super::liveness;
use super::watchdog::{SharedWatchdog, MAIN};
use std::time::{Duration, Instant};

const FORWARD_TAG: i32 = 0x5046; // "PF"
const BACKWARD_TAG: i32 = 0x5042; // "PB"

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
        }
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
