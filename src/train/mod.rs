//! The training run, in four parts with a file each:
//!
//! - `setup`: the model, the fusion plan, the shards and the steps per epoch, checked across
//!   ranks, and the start-up log;
//! - `restore`: output.dir, the checkpoint to continue from, and the state every rank starts
//!   with (broadcast from rank 0);
//! - `epochs`: the epoch loop (batches -> `Stepper` -> progress lines and metrics) and the
//!   final weights;
//! - `stop`: the end-of-step agreement on stopping and checkpointing, and the checkpoint
//!   writer.
//!
//! Every rank runs the same number of steps so that the collectives line up. Each step ends
//! with one tiny all-reduce that agrees on "stop now" (a signal reached some rank) and
//! "checkpoint now" (rank 0's clock), so every rank stops at the same step boundary.

mod epochs;
mod ps;
mod restore;
mod setup;
mod stop;

use crate::config::Job;
use crate::error::{Error, Result};
use crate::parallel::Comm;
use std::path::PathBuf;
use std::time::Instant;

/// How a run ended without error.
pub enum Outcome {
    Completed,
    /// Stopped by a signal after writing a checkpoint.
    Preempted,
}

/// `--resume`: `auto` (the newest valid checkpoint in output.dir, if any) or a file.
pub enum Resume {
    Auto,
    File(PathBuf),
}

impl Resume {
    pub fn parse(s: &str) -> Resume {
        if s == "auto" {
            Resume::Auto
        } else {
            Resume::File(PathBuf::from(s))
        }
    }
}

/// `hvtrain train`: collective over `comm`.
pub fn train(comm: &Comm, job: &Job, t_process: Instant, resume: Option<Resume>) -> Result<Outcome> {
    if job.distribution.strategy == crate::config::Strategy::ParameterServer {
        return ps::train(comm, job, t_process, resume.as_ref());
    }
    let setup = setup::Setup::new(comm, job)?;
    let start = restore::restore(comm, job, &setup, resume.as_ref())?;
    let (kind, _) = crate::device::select(job.training.device, comm.local_rank)?;
    crate::device::with_backend(kind, job.training.precision, Train { comm, job, setup, start, t_process })
}

/// The rest of `train`, on the chosen backend.
struct Train<'a> {
    comm: &'a Comm,
    job: &'a Job,
    setup: setup::Setup,
    start: restore::Start,
    t_process: Instant,
}

impl crate::device::WithBackend<Outcome> for Train<'_> {
    fn run<B: crate::device::Backend>(self, be: B) -> Result<Outcome> {
        let mut run = epochs::Run::new(be, self.comm, self.job, self.setup, self.start, self.t_process)?;
        let outcome = run.epochs()?;
        if let Outcome::Completed = outcome {
            run.finish()?;
        }
        Ok(outcome)
    }
}

/// Seconds as "1h02m", "3m05s" or "12s".
fn human(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// Say where in training an error happened.
fn in_step(e: Error, epoch: usize, step: usize, rank: usize) -> Error {
    match e {
        Error::Training(m) => Error::Training(format!("rank {rank}, epoch {epoch}, step {step} of the epoch: {m}")),
        other => other,
    }
}
