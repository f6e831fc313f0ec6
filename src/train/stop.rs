//! Stopping and checkpointing at a step boundary that every rank agrees on, and the
//! checkpoint writer.
//!
//! A signal may reach ranks at different moments, and only rank 0 watches the clock for
//! time-based checkpoints, so each step ends with one 8-byte all-reduce (bitwise OR) of
//! these flags; only then does anyone stop or checkpoint.

use crate::checkpoint::{self, Checkpoint};
use crate::config::Job;
use crate::error::Result;
use crate::fault::Fault;
use crate::parallel::liveness;
use crate::parallel::watchdog::{Watchdog, MAIN};
use crate::parallel::Comm;
use crate::step::Stepper;
use log::info;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(super) const STOP: u64 = 1;
pub(super) const CHECKPOINT: u64 = 2;

/// Collective, once per step: this rank's wishes in, the job's decision out.
pub(super) fn agree(comm: &Comm, watchdog: &Watchdog, step: u64, time_due: bool) -> u64 {
    let mine = if crate::signals::stop_requested() { STOP } else { 0 } | if time_due { CHECKPOINT } else { 0 };
    let _g = watchdog.guard(MAIN, "the end-of-step agreement", step);
    comm.all_reduce_or_u64(mine)
}

/// What checkpointing needs besides the step state.
pub(super) struct Ctx<'a> {
    pub comm: &'a Comm,
    pub job: &'a Job,
    pub out_dir: &'a Path,
    pub fault: Option<Fault>,
    pub watchdog: &'a Watchdog,
}

/// Collective: gather each rank's running loss, rank 0 writes the checkpoint, everyone waits
/// for it (no deadline: a large write takes as long as it takes; heartbeats tell a slow write
/// from a dead rank).
pub(super) fn save_checkpoint(
    ctx: &Ctx,
    st: &Stepper,
    epoch_index: usize,
    step_in_epoch: usize,
    loss_sum: f64,
) -> Result<PathBuf> {
    let comm = ctx.comm;
    let loss_sums = {
        let _g = ctx.watchdog.guard(MAIN, "the checkpoint's loss gathering", st.step);
        comm.all_gather_f64(loss_sum)
    };
    let path = ctx.out_dir.join(checkpoint::file_name(st.step));
    if comm.rank == 0 {
        let (m, v, step) = st.opt.state();
        let c = Checkpoint {
            step,
            epoch: epoch_index,
            step_in_epoch,
            world_size: comm.size,
            loss_sums,
            params: st.params.clone(),
            m: m.to_vec(),
            v: v.to_vec(),
            job_json: serde_json::to_string(ctx.job).expect("job serializes"),
        };
        let t = Instant::now();
        let _p = liveness::phase_at("writing a checkpoint", step);
        checkpoint::save(ctx.out_dir, &st.model, &c, ctx.job.checkpoint.keep, || {
            crate::fault::in_checkpoint(&ctx.fault, comm.rank, step)
        })?;
        info!("checkpoint {} written ({:.0} ms)", path.display(), t.elapsed().as_secs_f64() * 1e3);
    }
    let _p = liveness::phase_at("waiting at the barrier for rank 0's checkpoint write", st.step);
    comm.barrier();
    Ok(path)
}

/// Rank 0's line when a signal stopped the run.
pub(super) fn log_stopped(comm: &Comm, when: String) {
    if comm.rank == 0 {
        info!("stopped by a signal {when}; resume with --resume auto (exit code {})", crate::signals::EXIT_PREEMPTED);
    }
}
