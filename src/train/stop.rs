//! Stopping and checkpointing at a step boundary, and the checkpoint writer.
//!
//! A signal may reach ranks at different moments, and only rank 0 watches the clock for
//! time-based checkpoints, so each step ends with one small all-gather of every rank's flags
//! and running loss sum; only then does anyone checkpoint.
//!
//! The stop checkpoint is different: the signal that asks for it often comes with the end of
//! the job (`mpirun` kills the ranks a second after it is signalled, and a rank whose peer
//! died in a collective never returns from it). So it depends on no other rank. The replicas
//! are identical, and at a step boundary rank 0's parameters and optimizer state are those of
//! the last completed step (a step in flight updates them bucket by bucket, so nothing is
//! ever written from inside a step). Rank 0, seeing a stop request of its own at the boundary,
//! writes the stop checkpoint at once, before the agreement; the other ranks' loss sums of
//! this last step are then estimated (see `Checkpoint::loss_sums_exact`). When rank 0 learns
//! of the stop only from the agreement, it writes right after it, with exact sums. The other
//! ranks wait for the write at an unguarded barrier, then all exit with 75.
//!
//! Must not: write a checkpoint from inside a step (only at a step boundary).

use super::mode::Boundary;
use super::save::Writer;
use crate::checkpoint;
use crate::config::Job;
use crate::device::Backend;
use crate::error::Result;
use crate::parallel::grid::Grid;
use crate::parallel::liveness;
use crate::parallel::watchdog::{Watchdog, MAIN};
use crate::parallel::Comm;
use crate::step::{Stepper, Sums, WholeState};
use log::info;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::time::Instant;

pub(super) const STOP: u64 = 1;
pub(super) const CHECKPOINT: u64 = 2;
/// This rank's loss became non-finite in the step (`Stepper::diverged`).
const DIVERGED: u64 = 4;

/// What the boundary needs to remember from step to step.
pub(super) struct StopState {
    last_boundary: Cell<Option<Instant>>,
    /// Every data-parallel rank's (tensor group's) running sums in the epoch (loss, train
    /// metrics), as of the last agreement.
    known_sums: RefCell<Vec<Sums>>,
}

impl StopState {
    /// The sum of every data-parallel rank's running loss in the epoch, as of the last agreement.
    pub fn total(&self) -> f64 {
        self.known_sums.borrow().iter().map(|s| s[0]).sum()
    }

    pub fn new(start_sums: Vec<Sums>) -> StopState {
        StopState { last_boundary: Cell::new(None), known_sums: RefCell::new(start_sums) }
    }
}

/// What stopping and checkpointing need besides the step state.
pub(super) struct Ctx<'a> {
    pub comm: &'a Comm,
    pub job: &'a Job,
    pub grid: Grid,
    pub watchdog: Watchdog,
    pub stop: StopState,
    pub writer: Writer<'a>,
}

/// Collective, once per step (after step `step_in_epoch` of epoch `epoch_index + 1`, whose
/// running sums on this rank are `sums`): stop, checkpoint, or go on.
pub(super) fn at_boundary<B: Backend>(
    ctx: &Ctx,
    st: &Stepper<B>,
    epoch_index: usize,
    step_in_epoch: usize,
    sums: &Sums,
    time_due: bool,
) -> Result<Boundary> {
    let (comm, state) = (ctx.comm, &ctx.stop);
    let now = Instant::now();
    if let Some(prev) = state.last_boundary.replace(Some(now)) {
        crate::signals::set_step_time(now - prev);
    }
    let grid = ctx.grid;
    if step_in_epoch == 1 {
        state.known_sums.replace(vec![vec![0.0; sums.len()]; grid.data]);
    }
    let mut written = false;
    if comm.rank == 0 && crate::signals::stop_requested() && write_first(ctx, st) {
        // Others' sums up to the previous step are known; their last batch is estimated by
        // rank 0's own.
        let known = state.known_sums.borrow().clone();
        let batch: Sums = sums.iter().zip(&known[0]).map(|(a, b)| a - b).collect();
        let mut all: Vec<Sums> = known.iter().map(|s| s.iter().zip(&batch).map(|(a, b)| a + b).collect()).collect();
        all[0] = sums.clone();
        write(ctx, st, (epoch_index, step_in_epoch), all, comm.size == 1, true)?;
        written = true; // only without tensor parallelism: see write_first
    }
    let stopping = crate::signals::stop_requested();
    if stopping {
        // This rank votes to stop, so the job stops here: from now on it waits for rank 0's
        // stop checkpoint, which may be under way already (written before the agreement),
        // and later signals wait with it.
        crate::signals::stop_under_way();
    }
    let diverged = if st.diverged().is_some() { DIVERGED } else { 0 };
    let mine = if stopping { STOP } else { 0 } | if time_due { CHECKPOINT } else { 0 } | diverged;
    let all = {
        let _g = ctx.watchdog.guard(MAIN, "the end-of-step agreement", st.step());
        let mut words = vec![mine];
        words.extend(sums.iter().map(|s| s.to_bits()));
        comm.all_gather_u64s(&words)
    };
    let n = 1 + sums.len();
    let flags = all.chunks(n).fold(0, |acc, r| acc | r[0]);
    if flags & DIVERGED != 0 && ctx.job.lr_find.is_some() {
        return Ok(Boundary::Diverged); // the range test's end, on every rank
    }
    if flags & DIVERGED != 0 {
        // Every rank ends here together: the ones whose loss was finite name the others.
        let at = format!("rank {}, epoch {}, step {step_in_epoch} of the epoch", comm.rank, epoch_index + 1);
        let msg = match st.diverged() {
            Some(m) => m.to_string(),
            None => {
                let ranks: Vec<usize> =
                    all.chunks(n).enumerate().filter(|(_, r)| r[0] & DIVERGED != 0).map(|(i, _)| i).collect();
                format!(
                    "the loss became non-finite on rank(s) {ranks:?} at step {} (their lines say more); lower optimizer.lr, \
                     or check the data for extreme values",
                    st.step()
                )
            }
        };
        return Err(crate::error::Error::Training(format!("{at}: {msg}")));
    }
    // One set of sums per replica (its ranks' are equal): its first rank's.
    state.known_sums.replace(
        all.chunks(n).step_by(grid.replica()).map(|r| r[1..].iter().map(|&b| f64::from_bits(b)).collect()).collect(),
    );
    if flags & STOP != 0 {
        crate::signals::stop_under_way();
        // In parts, every writer its own; otherwise rank 0 (the only data rank 0) the whole.
        if in_parts(ctx, st) {
            let sums = state.known_sums.borrow().clone();
            write_parts(ctx, st, (epoch_index, step_in_epoch), sums, true)?;
        } else if grid.d == 0 && !written {
            let sums = state.known_sums.borrow().clone();
            write(ctx, st, (epoch_index, step_in_epoch), sums, true, true)?;
        }
        let _p = liveness::phase_at("waiting at the barrier for rank 0's stop checkpoint", st.step());
        comm.barrier(); // no deadline: heartbeats tell a slow write from a dead rank
        if comm.rank == 0 {
            info!(
                "stopped by a signal at step {}; resume with --resume auto (exit code {})",
                st.step(),
                crate::signals::EXIT_PREEMPTED
            );
        }
        crate::signals::stop_checkpoint_written();
        return Ok(Boundary::Stopped);
    }
    let every = ctx.job.checkpoint.every_steps;
    let step_due = every > 0 && st.step().is_multiple_of(every);
    Ok(if flags & CHECKPOINT != 0 || step_due { Boundary::Checkpoint } else { Boundary::Continue })
}

/// Whether rank 0 may write the stop checkpoint before the agreement: the other ranks wait
/// in the (guarded) agreement meanwhile, so the write must be well within the watchdog's
/// deadline. Estimated from the last write's rate, or 100 MB/s before any. Never under
/// tensor parallelism: rank 0 holds only a shard, and assembling the whole model needs its
/// tensor group, which is in the agreement; nor with sharded optimizer state (its data group).
fn write_first<B: Backend>(ctx: &Ctx, st: &Stepper<B>) -> bool {
    if ctx.grid.replica() > 1 || st.shard().is_some() {
        return false;
    }
    if ctx.comm.size == 1 {
        return true;
    }
    let n = st.tensor().full.n_params;
    let (m, v) = crate::optim::state_lens(&ctx.job.optimizer, n);
    let bytes = 4.0 * (n + m + v) as f64;
    let secs = bytes / ctx.writer.rate().unwrap_or(100e6);
    secs < ctx.job.distribution.watchdog_seconds / 3.0
}

/// Rank 0 (no collective; neither sharded state nor model parallelism, `in_parts` false):
/// the whole model's state after step `st.step` into the checkpoint of position `at` (epoch
/// index, step in the epoch). A `stop` checkpoint makes signals that arrive meanwhile wait for
/// the rename.
fn write<B: Backend>(
    ctx: &Ctx,
    st: &Stepper<B>,
    at: (usize, usize),
    loss_sums: Vec<Sums>,
    exact: bool,
    stop: bool,
) -> Result<()> {
    let announce = stop && ctx.comm.rank == 0;
    if announce {
        crate::signals::writing_stop_checkpoint();
    }
    let state = st.whole_state()?;
    finite_params(&state.params, st.step())?;
    ctx.writer.write(&st.tensor().full, state, at.0, at.1, loss_sums, exact, None)?;
    if announce {
        super::runlock::stopped(st.step());
        crate::signals::stop_checkpoint_written();
    }
    Ok(())
}

/// Whether checkpoints are written in parts (`checkpoint::parts`): sharded state over the data
/// ranks, with or without tensor and pipeline parallelism, or tensor and pipeline parallelism
/// without it (replica 0's ranks write, each its shard of its stage: no rank gathers the whole
/// model).
fn in_parts<B: Backend>(ctx: &Ctx, st: &Stepper<B>) -> bool {
    st.shard().is_some() || ctx.grid.replica() > 1
}

/// Where this rank's arena sits in the checkpoint's stored order, for the part it writes:
/// the whole model's arena, or its tensor shard of its pipeline stage (the values its tensor
/// group holds alike written by the group's rank 0 only).
fn writes_map<B: Backend>(st: &Stepper<B>) -> checkpoint::parts::StoredMap {
    let tg = st.tensor();
    if tg.is_whole() {
        checkpoint::parts::StoredMap::whole(&tg.full)
    } else {
        checkpoint::parts::StoredMap::shard(&tg.full, &tg.stage, tg.arena.start, &tg.local_model(), false)
    }
}

/// Collective over every rank (the world): each writes its part of the state at once
/// (`Stepper::own_values`; with model parallelism its pieces of its shard; without sharded
/// state only replica 0's ranks, world ranks 0 to T·P − 1, each its whole shard of its stage),
/// then rank 0 the index naming them, with the position of `at` and the sums, once every part
/// is in place; `stop` as `write`'s. No rank gathers more than its own part. A rank whose
/// parameters are not all finite writes nothing, and every rank then fails with its name: no
/// index is written, the earlier checkpoints stay the newest. Returns the index's path on rank 0.
fn write_parts<B: Backend>(
    ctx: &Ctx,
    st: &Stepper<B>,
    at: (usize, usize),
    sums: Vec<Sums>,
    stop: bool,
) -> Result<Option<PathBuf>> {
    let (comm, step, w) = (ctx.comm, st.step(), &ctx.writer);
    let announce = stop && comm.rank == 0;
    if announce {
        crate::signals::writing_stop_checkpoint();
    }
    let _p = liveness::phase_at("writing this rank's part of a checkpoint", step);
    let t = Instant::now();
    let ranges = st.own_ranges();
    // Sharded state: every rank's pieces; otherwise replica 0's ranks, the first T·P.
    let (part, parts) = (comm.rank, if st.shard().is_some() { comm.size } else { ctx.grid.replica() });
    let writes = part < parts;
    let mut token = [checkpoint::parts::fresh_token()];
    comm.broadcast_u64(&mut token);
    let model = &st.tensor().full;
    // The arrays one at a time (`Piece::values`); the first non-finite parameter's position.
    let (mut bad, mut has, mut floats) = (None, [false; 4], 0);
    let values = &mut |name: &str| -> Result<Option<Vec<f32>>> {
        let v = st.own_values(name)?;
        if let Some(v) = &v {
            if name == "params" {
                bad = v.iter().position(|x| !x.is_finite());
            }
            floats += v.len();
        }
        has[checkpoint::parts::ARRAYS.iter().position(|a| *a == name).expect("one of ARRAYS")] = v.is_some();
        Ok(v)
    };
    let mut piece = checkpoint::parts::Piece { ranges: &ranges, values };
    let fault = || crate::fault::in_checkpoint(&w.fault, w.rank, step);
    let map = writes_map(st);
    let sum = if writes {
        checkpoint::parts::write(&w.out_dir, &map, (step, token[0]), (part, parts), &mut piece, fault)?
    } else {
        0
    };
    // The arena index of the first non-finite parameter, plus one (0: all finite).
    let global = |i: usize| {
        let mut at = i;
        for r in &ranges {
            if at < r.len() {
                return r.start + at;
            }
            at -= r.len();
        }
        unreachable!("i is within the ranges")
    };
    let mine = [sum, bad.map_or(0, |i| global(i) as u64 + 1)];
    let mut all = comm.all_gather_u64s(&mine);
    all.truncate(2 * parts);
    if let Some((r, c)) = all.chunks(2).enumerate().find(|(_, c)| c[1] != 0) {
        if writes {
            let _ = std::fs::remove_file(w.out_dir.join(checkpoint::parts::name(step, token[0], part, parts)));
        }
        let i = c[1] - 1;
        return Err(crate::error::Error::Training(format!(
            "parameter {i} (rank {r}'s part) is not finite after step {step}: the checkpoint is not written (the earlier \
             ones are kept); lower optimizer.lr, or clip the gradients (optimizer.global_clipnorm)"
        )));
    }
    let mb = 4.0 * floats as f64 / 1e6;
    log::debug!(
        "part {} of the step-{step} checkpoint written ({mb:.1} MB, {:.0} ms)",
        comm.rank,
        t.elapsed().as_secs_f64() * 1e3
    );
    if comm.rank != 0 {
        return Ok(None);
    }
    info!(
        "checkpoint parts written by {} ranks at once ({mb:.1} MB on rank 0, one array at a time, {:.0} ms)",
        parts,
        t.elapsed().as_secs_f64() * 1e3
    );
    let parts = checkpoint::parts::Parts {
        dir: w.out_dir.clone(),
        token: token[0],
        checksums: all.chunks(2).map(|c| c[0]).collect(),
        m: has[1],
        v: has[2],
        ema: has[3],
    };
    let path = w.write(model, WholeState::empty(step), at.0, at.1, sums, true, Some(parts))?;
    if announce {
        super::runlock::stopped(step);
        crate::signals::stop_checkpoint_written();
    }
    Ok(Some(path))
}

/// A checkpoint of parameters that are not all finite is never written (the ones before it
/// stay the newest): gradients that overflowed, or, on a GPU, the update of the step whose
/// loss turned out non-finite once it was read (`Backend::softmax_xent_later`), exchanged with
/// the other ranks before that rank's error ended the job.
fn finite_params(p: &[f32], step: u64) -> Result<()> {
    match p.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(crate::error::Error::Training(format!(
            "parameter {i} is {} after step {step}: the checkpoint is not written (the earlier ones are \
             kept); lower optimizer.lr, or clip the gradients (optimizer.global_clipnorm)",
            p[i]
        ))),
    }
}

#[cfg(test)]
#[test]
fn a_non_finite_parameter_refuses_the_checkpoint() {
    assert!(finite_params(&[0.0, 1e30, -2.0], 3).is_ok());
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let e = finite_params(&[0.0, 1.0, bad, 2.0], 7).unwrap_err().to_string();
        assert!(e.contains("parameter 2") && e.contains("after step 7") && e.contains("not written"), "{e}");
    }
}

/// Collective: a periodic checkpoint after the agreement said so. Tensor group 0 assembles the
/// whole model and rank 0 writes it with the loss sums the agreement carried; everyone waits
/// for it (unguarded: a large write may take longer than the watchdog's deadline). At an
/// epoch's start (`step_in_epoch` 0) the sums are 0.
pub(super) fn save_checkpoint<B: Backend>(
    ctx: &Ctx,
    st: &Stepper<B>,
    epoch_index: usize,
    step_in_epoch: usize,
) -> Result<PathBuf> {
    let comm = ctx.comm;
    let path = ctx.writer.out_dir.join(checkpoint::file_name(st.step()));
    let sums = || {
        if step_in_epoch == 0 {
            vec![vec![0.0; st.sums_len()]; ctx.grid.data]
        } else {
            ctx.stop.known_sums.borrow().clone()
        }
    };
    if in_parts(ctx, st) {
        write_parts(ctx, st, (epoch_index, step_in_epoch), sums(), false)?;
    } else if ctx.grid.d == 0 {
        write(ctx, st, (epoch_index, step_in_epoch), sums(), true, false)?;
    }
    let _p = liveness::phase_at("waiting at the barrier for rank 0's checkpoint write", st.step());
    comm.barrier();
    Ok(path)
}
