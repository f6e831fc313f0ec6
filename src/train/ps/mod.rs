//! `hvtrain train` with `distribution.strategy = "parameter_server"` (the roles, the message
//! flow and the staleness bound are described in `parallel/ps/mod.rs` and ARCHITECTURE.md):
//! start-up shared by both roles, then the last `servers` ranks serve (`server.rs`)
//! and the others train (`worker.rs`). Collective over the world only at start-up and at the
//! end; in between, workers talk to each other on their own communicator (epoch ends,
//! checkpoints) and to the servers point to point.
//!
//! Must not: run a worker's epochs (the one loop does).

mod server;
mod start;
mod worker;

use super::{Outcome, Resume};
use crate::config::Job;
use crate::error::Result;
use crate::parallel::liveness::phase;
use crate::parallel::ps::Roles;
use crate::parallel::{Comm, FusionPlan};
use log::info;
use server::{Server, StartState};
use std::time::Instant;

pub(super) fn train(comm: &Comm, job: &Job, t_process: Instant, resume: Option<&Resume>) -> Result<Outcome> {
    let whole = crate::eval::start(comm, job)?;
    let (w, s) = crate::config::roles(job, comm.size)?;
    let is_server = comm.rank >= w; // the last S ranks (Roles::is_server)
    let p = phase("making the workers' communicator and the parameter-server link");
    let workers = comm.split(usize::from(is_server), comm.rank);
    let link = comm.link();
    drop(p);
    let tensors = whole.tensors();
    let lens: Vec<usize> = tensors.iter().map(|t| t.range.len()).collect();
    let d = &job.distribution;
    let plan = FusionPlan::with_options(&lens, job.fusion_threshold_bytes(), job.first_bucket_bytes(), d.bucket_order);
    let mut roles = Roles::new(&plan, w, s, d.staleness);
    roles.whole_step = job.optimizer.global_clipnorm.is_some();
    if comm.rank == 0 {
        let mode = match d.staleness {
            -1 => "fully asynchronous".to_string(),
            0 => "synchronous (staleness 0)".to_string(),
            k => format!("asynchronous, at most {k} step(s) ahead of the slowest worker"),
        };
        info!(
            "parameter servers: ranks {}..{} serve, ranks 0..{} train; {mode}; {} fusion bucket(s) of model {:?} \
             ({} parameters), owners {:?}",
            w,
            w + s - 1,
            w - 1,
            plan.buckets.len(),
            whole.sizes,
            whole.n_params,
            roles.owner
        );
    }
    if comm.rank == 0 {
        let mut off = Vec::new();
        if job.checkpoint.every_minutes > 0.0 {
            off.push("checkpoint.every_minutes (use checkpoint.every_steps)");
        }
        if job.output.timeline.is_some() {
            off.push("output.timeline");
        }
        if !off.is_empty() {
            log::warn!("with strategy = \"parameter_server\" these are not available: {}", off.join(", "));
        }
    }
    let start = start::start(comm, job, &whole, w, resume)?;
    if is_server {
        let fault = crate::fault::from_env()?;
        let st = StartState { params: &start.params, m: &start.m, v: &start.v, step: start.step };
        let server = Server::new(link, roles.clone(), &plan, &tensors, &job.optimizer, st, fault)?;
        let owned = roles.owned_by(comm.rank);
        let (stats, stopped) = server.serve()?;
        info!("parameter server (buckets {owned:?}) done: {}", stats.describe());
        // The workers decide: stopped on a signal (theirs or a server's), they wrote the stop
        // checkpoint and every rank exits 75; completed, every rank exits 0 (a signal after
        // their last vote finds the run done).
        return Ok(if stopped { Outcome::Preempted } else { Outcome::Completed });
    }
    let (kind, _) = crate::device::select(job.training.device, comm.local_rank)?;
    crate::device::check_cpu_threads(kind, crate::device::cpu_thread_count());
    crate::device::log_cpu_threads(kind, comm.rank);
    let wk = worker::Worker { comm, job, workers, link, roles, plan, whole, start, t_process };
    crate::device::with_backend(kind, job.training.precision, wk)
}
