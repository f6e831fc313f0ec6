//! What a training mode supplies to the one training loop (`run.rs`). The loop owns the
//! steps, the data, faults, progress lines, evaluation, metrics, the checkpoints' timing and
//! weights.h5; a mode says only how its ranks coordinate around that: the all-reduce mode
//! (data, tensor and pipeline parallelism, `allreduce.rs`) agrees on every step boundary and
//! assembles checkpoints from its tensor group; a parameter-server worker (`ps/worker.rs`)
//! meets the other workers at epoch ends and gathers checkpoints from the servers. How a
//! step's gradients become an update is the `Stepper`'s engine and reducer, which each mode
//! builds. Must not run the loop itself.

use crate::device::Backend;
use crate::error::Result;
use crate::parallel::watchdog::Watchdog;
use crate::parallel::Channel;
use crate::step::{Stepper, Sums};

/// Where a step boundary or checkpoint is: after step `step_in_epoch` of epoch
/// `epoch_index + 1` (`step_in_epoch` 0: at the start of epoch `epoch_index + 1`).
#[derive(Clone, Copy, Debug)]
pub(super) struct At {
    pub epoch_index: usize,
    pub step_in_epoch: usize,
    /// Whether this is the epoch's last step.
    pub last: bool,
    /// The step's rows over all data ranks (0 for a checkpoint at an epoch's start).
    pub rows: usize,
}

/// What the loop does after a step boundary.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Boundary {
    Continue,
    /// A checkpoint is due (every rank of the mode agrees).
    Checkpoint,
    /// Stopped by a signal: the stop checkpoint is written; exit with 75.
    Stopped,
    /// `hvtrain lr-find` only: a rank's loss was not finite (every rank agrees); the range
    /// test ends here, where a training would end with an error.
    Diverged,
}

pub(super) trait Mode<B: Backend> {
    /// The watchdog of this rank's main thread (its guards are the fallback deadline).
    fn watchdog(&self) -> &Watchdog;

    /// The ranks that train together: metrics are summed over them, and their count is the
    /// run's rank count in metrics.jsonl.
    fn trainers(&self) -> &Channel;

    /// Whether this rank's losses and test sums count in the metrics (one rank per model
    /// replica does: its other ranks hold the same values).
    fn counts_metrics(&self) -> bool;

    /// The liveness phase of a step.
    fn step_phase(&self) -> &'static str;

    /// Right after each step's update, before `after_step`: a mode whose parameters arrive
    /// after the step (parameter servers with `optimizer.global_clipnorm`) brings them in.
    fn after_update(&mut self, _st: &mut Stepper<B>) -> Result<()> {
        Ok(())
    }

    /// After a step, whose running sums in the epoch on this rank are `sums`:
    /// continue, checkpoint or stop.
    fn after_step(&mut self, st: &Stepper<B>, at: At, sums: &Sums) -> Result<Boundary>;

    /// The last step's mean loss over every rank's rows, the same on every rank (None where
    /// the mode's ranks do not agree on it each step: parameter servers).
    fn step_loss(&self) -> Option<f64> {
        None
    }

    /// The trainer's state (JSON) that this mode's next checkpoints carry.
    fn set_trainer_state(&self, json: String);

    /// Write a checkpoint at `at` (collective over the mode's ranks).
    fn checkpoint(&mut self, st: &Stepper<B>, at: At, sums: &Sums) -> Result<()>;

    /// At an epoch's end, before evaluation: meet the other ranks and bring this rank's
    /// parameters up to date. `my_rate` is this rank's samples/s in the epoch.
    fn meet(&mut self, _st: &mut Stepper<B>, _my_rate: f64) -> Result<()> {
        Ok(())
    }

    /// Rank 0: the end of the epoch's log line after the samples/s (communication figures).
    fn epoch_note(&mut self, exposed_ms_per_step: f64) -> String;

    /// The whole model's parameters on rank 0 (None elsewhere), for weights.h5.
    fn whole_params(&mut self, st: &Stepper<B>) -> Result<Option<Vec<f32>>>;

    /// After weights.h5 is written.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }

    /// Autotune's switch to another fusion setting from the next step on (collective over the
    /// data group). Modes without fusion buckets refuse `distribution.autotune` at start-up.
    fn retune(&mut self, _st: &mut Stepper<B>, _s: super::autotune::Setting) -> Result<()> {
        unreachable!("distribution.autotune is refused at start-up where there are no fusion buckets")
    }
}
