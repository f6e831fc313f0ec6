//! The training run, in four parts with a file each:
//!
//! - `setup`: the model, the fusion plan, the shards, checked across ranks, the start-up log,
//!   and (once `restore` knows the global batch) the steps per epoch;
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
//!
//! Must not: hold a mode's code (each has its file) or the loop's (`run.rs`).

mod allreduce;
mod autotune;
mod gpu_path;
pub mod lr_find;
mod mode;
mod normalize;
mod on_device;
mod ps;
mod read_state;
mod restore;
mod run;
pub mod runlock;
mod save;
mod setup;
mod stop;
mod trainer;
mod verify;
mod watch;

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
    /// Ended after `Job::pause_after_epoch` (a sweep's rung) with a checkpoint to resume.
    Paused,
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
    // The device first: the state line of `Setup::new` counts what this rank's backend holds.
    let (kind, _) = crate::device::select(job.training.device, comm.local_rank)?;
    let mut setup = setup::Setup::new(comm, job, kind)?;
    let start = restore::restore(comm, job, &setup, resume.as_ref())?;
    let others = [setup.test_shard.as_mut(), setup.val_shard.as_mut()];
    normalize::normalize(comm, job, &start.norm, &mut setup.train_shard, others)?;
    let schedule = setup::schedule(comm, job, &setup, start.global_batch)?;
    crate::device::check_cpu_threads(kind, crate::device::cpu_thread_count());
    crate::device::log_cpu_threads(kind, comm.rank);
    crate::device::with_backend(kind, job.training.precision, Train { comm, job, setup, schedule, start, t_process })
}

/// The rest of `train`, on the chosen backend.
struct Train<'a> {
    comm: &'a Comm,
    job: &'a Job,
    setup: setup::Setup,
    schedule: crate::data::loader::Schedule,
    start: restore::Start,
    t_process: Instant,
}

impl crate::device::WithBackend<Outcome> for Train<'_> {
    fn run<B: crate::device::Backend>(self, be: B) -> Result<Outcome> {
        let (parts, mode) =
            allreduce::build(be, self.comm, self.job, self.setup, self.schedule, self.start, self.t_process)?;
        run::Run::new(parts, mode)?.run()
    }
}

/// Collective: every rank's peak RSS and peak virtual memory (VmPeak, what `ulimit -v`
/// limits), in one line of rank 0's.
fn log_peak_memory(comm: &crate::parallel::Channel) {
    let kib = |v: Option<f64>| v.map_or(0, |m| (m * 1024.0) as u64);
    let all = comm.all_gather_u64s(&[kib(crate::sys::peak_rss_mib()), kib(crate::sys::vm_peak_mib())]);
    if comm.rank == 0 {
        let show = |k: usize| {
            let v: Vec<String> = all.chunks(2).map(|c| format!("{:.0}", c[k] as f64 / 1024.0)).collect();
            format!("[{}]", v.join(", "))
        };
        let max_rss = all.chunks(2).map(|c| c[0]).max().unwrap_or(0) as f64 / 1024.0;
        log::info!(
            "peak memory per rank (MiB, rank 0 first): RSS {} (max {max_rss:.1}), virtual (VmPeak) {}",
            show(0),
            show(1)
        );
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
