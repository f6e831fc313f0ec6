//! Where a run starts (collective): rank 0 prepares output.dir and finds the checkpoint to
//! continue from; every rank then receives the same parameters, optimizer state, position
//! and running losses from rank 0.

use super::setup::Setup;
use super::Resume;
use crate::checkpoint::{self, Checkpoint, Lineage};
use crate::config::Job;
use crate::error::{Error, Result};
use crate::model::Mlp;
use crate::parallel::Comm;
use log::{info, warn};
use std::path::Path;

/// The state a run starts from, the same on every rank: the whole model's parameters and
/// optimizer state (each rank cuts its tensor shard out of them).
pub(super) struct Start {
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// Global steps already taken.
    pub step: u64,
    /// Epochs already completed, and steps of the next one already taken.
    pub epoch: usize,
    pub step_in_epoch: usize,
    /// Each data-parallel rank's (tensor group's) running loss sum in the epoch being resumed.
    pub loss_sums: Vec<f64>,
    /// This run's lineage: a fresh run id, and the checkpoint it continues from.
    pub lineage: Lineage,
}

/// Collective: the state this run starts from, the same on every rank.
pub(super) fn restore(comm: &Comm, job: &Job, setup: &Setup, resume: Option<&Resume>) -> Result<Start> {
    let model = &setup.whole;
    let n_data = setup.grid.data;
    let p = crate::parallel::liveness::phase("preparing output.dir and reading the checkpoint to resume from");
    let ckpt = if comm.rank == 0 { prepare_output(job, &setup.out_dir, model, resume, n_data)? } else { None };
    drop(p);
    let _p = crate::parallel::liveness::phase("receiving the starting state from rank 0");
    let (m_len, v_len) = crate::optim::state_lens(&job.optimizer, model.n_params);
    let a = crate::mem::allocating("the whole model's starting parameters (every rank receives them from rank 0)");
    let mut params = match &ckpt {
        Some(c) => c.params.clone(),
        None if comm.rank == 0 => model.init_params(job.training.seed),
        None => crate::mem::zeros(model.n_params)?,
    };
    comm.broadcast_f32(&mut params);
    drop(a);
    let _a = crate::mem::allocating("the whole model's starting optimizer state (every rank receives it from rank 0)");
    let mut m = match &ckpt {
        Some(c) => c.m.clone(),
        None => crate::mem::zeros(m_len)?,
    };
    let mut v = match &ckpt {
        Some(c) => c.v.clone(),
        None => crate::mem::zeros(v_len)?,
    };
    // Rank 0 decides whether the checkpoint's optimizer state fits; all ranks return its answer.
    let mut ok = [u64::from(m.len() == m_len && v.len() == v_len)];
    comm.broadcast_u64(&mut ok);
    if ok[0] == 0 {
        return Err(Error::config(
            &job.source,
            "optimizer",
            "the checkpoint's optimizer state does not fit this optimizer (another optimizer.kind or momentum?)",
        ));
    }
    comm.broadcast_f32(&mut m);
    comm.broadcast_f32(&mut v);
    let mut pos = [0u64; 3]; // step, epoch index, step in epoch
    if let Some(c) = &ckpt {
        pos = [c.step, c.epoch as u64, c.step_in_epoch as u64];
    }
    comm.broadcast_u64(&mut pos);
    let mut loss_sums = ckpt.as_ref().map_or(vec![0.0; n_data], |c| c.loss_sums.clone());
    comm.broadcast_f64(&mut loss_sums);
    let l = Lineage::new_run(ckpt.as_ref());
    if comm.rank == 0 {
        lineage_notes(&setup.out_dir, l, ckpt.as_ref());
    }
    let mut ids = [l.run_id, l.parent_run, l.parent_step as u64];
    comm.broadcast_u64(&mut ids);
    let lineage = Lineage { run_id: ids[0], parent_run: ids[1], parent_step: ids[2] as i64 };
    let (step, epoch, step_in_epoch) = (pos[0], pos[1] as usize, pos[2] as usize);
    Ok(Start { params, m, v, step, epoch, step_in_epoch, loss_sums, lineage })
}

/// Rank 0's start-up lines about the checkpoint lineage: the run id, and the files of an
/// abandoned branch (newer checkpoints of the run resumed from) that `--resume auto` will not
/// choose and keep-K will not delete.
fn lineage_notes(out_dir: &Path, l: Lineage, from: Option<&Checkpoint>) {
    info!("run id {:016x}", l.run_id);
    if let Some(c) = from {
        if !c.loss_sums_exact {
            info!(
                "the checkpoint was written by rank 0 alone at a stop: the other ranks' loss of its last step was estimated, \
                 so this epoch's train_loss is approximate (weights and optimizer state are exact)"
            );
        }
        let newer = checkpoint::abandoned_newer(out_dir, l);
        if !newer.is_empty() {
            let names: Vec<String> = newer.iter().map(|p| p.display().to_string()).collect();
            warn!(
                "{} checkpoint(s) newer than step {} belong to the run this one branches off from and are abandoned: {}; \
                 --resume auto will not choose them, keep-K will not delete them (a checkpoint of this run at the same step \
                 replaces one)",
                newer.len(),
                c.step,
                names.join(", ")
            );
        }
    }
}

/// Rank 0, before training: create output.dir, refuse to overwrite an earlier run's
/// checkpoints, and find the checkpoint to resume from. `world` is the data-parallel degree
/// (the ranks when parallel.tensor = 1), which is what a checkpoint's `world_size` records:
/// the data order depends on it, not on how each copy of the model is split.
pub(super) fn prepare_output(
    job: &Job,
    out_dir: &Path,
    model: &Mlp,
    resume: Option<&Resume>,
    world: usize,
) -> Result<Option<Checkpoint>> {
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, "create output.dir", e))?;
    let probe = out_dir.join(".hvtrain-write-test");
    std::fs::write(&probe, b"").map_err(|e| Error::io(out_dir, "write into output.dir", e))?;
    let _ = std::fs::remove_file(&probe);
    let found = match resume {
        None => {
            if let Some((_, p)) = checkpoint::list(out_dir).first() {
                return Err(Error::config(
                    &job.source,
                    "output.dir",
                    format!(
                        "{} already holds checkpoints of an earlier run ({}); continue it with --resume auto, or choose another output.dir",
                        out_dir.display(),
                        p.display()
                    ),
                ));
            }
            None
        }
        Some(Resume::File(p)) => Some((p.clone(), checkpoint::load(p, model)?)),
        Some(Resume::Auto) => {
            let f = checkpoint::newest_valid(out_dir, model)?;
            if f.is_none() {
                info!("--resume auto: no checkpoint in {}; starting from the beginning", out_dir.display());
            }
            f
        }
    };
    // What a crash mid-write left behind: never a valid file, and never picked up.
    let stale = checkpoint::remove_stale_tmp(out_dir);
    if !stale.is_empty() {
        info!("removed {} unfinished file(s) of an interrupted write: {}", stale.len(), stale.join(", "));
    }
    let Some((path, c)) = found else { return Ok(None) };
    if c.world_size != world {
        return Err(Error::data(
            &path,
            "world_size",
            format!(
                "the checkpoint was written by {} ranks, this job has {world}: resume with {} ranks (each rank's data order \
                 depends on the rank count; under tensor parallelism these are data-parallel ranks, ranks / parallel.tensor)",
                c.world_size, c.world_size
            ),
        ));
    }
    let then: Job =
        serde_json::from_str(&c.job_json).map_err(|e| Error::data(&path, "job_json", format!("unreadable: {e}")))?;
    for (field, same) in [
        ("training.batch_size", then.training.batch_size == job.training.batch_size),
        ("training.seed", then.training.seed == job.training.seed),
        ("data", serde_json::to_string(&then.data).ok() == serde_json::to_string(&job.data).ok()),
        ("optimizer.kind", then.optimizer.kind == job.optimizer.kind),
    ] {
        if !same {
            return Err(Error::data(
                &path,
                "job_json",
                format!("{field} differs from this job's; an exact resume needs the same value"),
            ));
        }
    }
    if then.fingerprint() != job.fingerprint() {
        warn!(
            "the job configuration differs from the one that wrote {} (other than data, batch, seed)",
            path.display()
        );
    }
    info!(
        "resuming from {} at step {} (epoch {}, step {} of it)",
        path.display(),
        c.step,
        c.epoch + 1,
        c.step_in_epoch
    );
    Ok(Some(c))
}
