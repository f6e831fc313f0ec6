//! Where a run starts (collective): rank 0 prepares output.dir and finds the checkpoint to
//! continue from (the parts of one written in parts checked on every rank: `verify.rs`); every
//! rank then has its part of the parameters and optimizer state (read by itself from the
//! checkpoint's parts or whole file where the state is sharded or the model split, else sent
//! by rank 0, or drawn from the seed), and the same position and running losses as rank 0.
//!
//! Must not: overwrite or delete a good checkpoint.

use super::read_state::{own_parts, sharded, source_everywhere, whole_ema, whole_state, NO_EMA};
use super::setup::Setup;
use super::Resume;
use crate::checkpoint::{self, Checkpoint, Lineage};
use crate::config::Job;
use crate::error::{Error, Result};
use crate::model::Mlp;
use crate::parallel::Comm;
use crate::step::Sums;
use log::{info, warn};
use std::path::{Path, PathBuf};

/// The state a run starts from: this rank's part of the model's parameters and optimizer
/// state (the whole model without model parallelism; no parameters where each rank draws
/// its own pieces, `draws_own_pieces`), and the position, the same on every rank.
pub(super) struct Start {
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// The checkpoint's moving average of the parameters (`optimizer.ema`), laid out as
    /// `params`; empty for a fresh start, without `optimizer.ema`, or from a checkpoint that
    /// keeps none (the average then starts from the parameters).
    pub ema: Vec<f32>,
    /// Global steps already taken.
    pub step: u64,
    /// Epochs already completed, and steps of the next one already taken.
    pub epoch: usize,
    pub step_in_epoch: usize,
    /// Each data-parallel rank's (tensor group's) running loss sum in the epoch being resumed
    /// (one per data-parallel rank of this job; resumed on another count, their total on 0).
    /// Each data rank's running sums of the epoch being resumed (loss, train metrics).
    pub loss_sums: Vec<Sums>,
    /// Rows per step over all ranks: training.batch_size × data ranks at the run's first
    /// start, kept by every resume whatever its rank count.
    pub global_batch: usize,
    /// This run's lineage: a fresh run id, and the checkpoint it continues from.
    pub lineage: Lineage,
    /// The checkpoint's trainer state (`trainer::TrainerState` as JSON; "{}" for a fresh
    /// run), and the file it came from (for errors).
    pub trainer_json: String,
    pub from: Option<PathBuf>,
    /// The checkpoint's normalization of the data (none for a fresh run: computed then).
    pub norm: crate::data::norm::Norm,
    /// `params` are this rank's pieces (`Sharder::own`), read from a checkpoint (its parts or
    /// its whole file) under `shard = "parameters"`, not the whole model; `m` and `v` are then
    /// its pieces too.
    pub pieces: bool,
}

/// Collective: the state this run starts from: each rank's part of the model's state, and
/// the same position on every rank.
pub(super) fn restore(comm: &Comm, job: &Job, setup: &Setup, resume: Option<&Resume>) -> Result<Start> {
    let model = &setup.whole;
    let n_data = setup.grid.data;
    let in_parts = reads_parts(job, setup);
    let ckpt = read_checkpoint(comm, job, &setup.out_dir, model, resume, n_data, in_parts)?;
    // Only a run that reads parts asks where they are (otherwise rank 0 put them together), or
    // where the whole checkpoint is that rank 0 checked without holding it.
    if let Some((step, src)) = in_parts.then(|| source_everywhere(comm, ckpt.as_ref())).flatten() {
        let state = own_parts(job, setup, &src, step)?;
        if comm.rank == 0 && job.optimizer.ema.is_some() && state.3.is_empty() {
            info!("{NO_EMA}");
        }
        if comm.rank == 0 {
            match &src {
                checkpoint::Source::Parts(p) => info!(
                    "each rank read its own pieces of the checkpoint's {} parts (none put the whole state together)",
                    p.checksums.len()
                ),
                checkpoint::Source::Whole(u) => info!(
                    "each rank read its own pieces of the whole checkpoint {} (rank 0 checked it a layer at a time; none \
                     put the whole state together)",
                    u.path.display()
                ),
            }
        }
        let mut start =
            position(comm, job, ckpt.as_ref(), n_data, &setup.out_dir, (Vec::new(), Vec::new(), Vec::new()));
        start.pieces = sharded(job, setup) && job.distribution.shard == crate::config::Shard::Parameters;
        (start.params, start.m, start.v, start.ema) = state;
        return Ok(start);
    }
    let _p = crate::parallel::liveness::phase("receiving the starting state from rank 0");
    let (m_len, v_len) = crate::optim::state_lens(&job.optimizer, model.n_params);
    // Only rank 0 holds the whole state; every rank receives its part of it.
    let mut has = [u64::from(ckpt.is_some())];
    comm.broadcast_u64(&mut has);
    // A fresh start's optimizer state is zeros: nobody sends or holds them (empty).
    let fresh = has[0] == 0;
    // A fresh start of sharded parameters without model parallelism: each rank draws its own
    // pieces (`allreduce::start`, `Mlp::init_pieces`); nobody builds or sends the whole model.
    let own_pieces = fresh && draws_own_pieces(job, setup);
    // A fresh start under tensor or pipeline parallelism: each rank draws its shard of its
    // stage (`TensorGroup::init_local`); nobody builds or sends the whole model.
    let own_shard = fresh && !own_pieces && setup.grid.replica() > 1;
    let (params, m, v) = if own_pieces || own_shard {
        (Vec::new(), Vec::new(), Vec::new())
    } else {
        whole_state(comm, job, model, ckpt.as_ref(), fresh)?
    };
    // Rank 0's whole state, on every rank: model parallelism never comes here (it reads its
    // parts, `reads_parts`, or draws its shard), so every rank holds the whole.
    let part = |all: Vec<f32>, len: usize| -> Result<Vec<f32>> {
        assert_eq!(setup.grid.replica(), 1, "model parallelism reads its part of the checkpoint");
        if len == 0 {
            return Ok(Vec::new());
        }
        let _a = crate::mem::allocating("the starting state (received from rank 0)");
        let mut all = if comm.rank == 0 { all } else { crate::mem::zeros(len)? };
        comm.broadcast_f32(&mut all);
        Ok(all)
    };
    let opt = |all: Vec<f32>, len: usize| if fresh { Ok(Vec::new()) } else { part(all, len) };
    let params = if own_pieces {
        Vec::new()
    } else if own_shard {
        let _a = crate::mem::allocating("this rank's shard of the starting parameters");
        let mine = setup.tensor.init_local(job.training.seed, &[0..setup.model.n_params]);
        if comm.rank == 0 {
            info!(
                "starting parameters: each rank drew its shard of its stage from the seed ({} on rank 0); no rank built \
                 the whole model",
                mine.len()
            );
        }
        mine
    } else {
        part(params, model.n_params)?
    };
    let state = (params, opt(m, m_len)?, opt(v, v_len)?);
    let ema = whole_ema(comm, job, ckpt.as_ref())?;
    let mut start = position(comm, job, ckpt.as_ref(), n_data, &setup.out_dir, state);
    start.ema = ema;
    Ok(start)
}

/// Whether each rank of a fresh start draws its own pieces of the parameters instead of
/// receiving its part of the whole model from rank 0 (`Start::params` then empty): `shard =
/// "parameters"` over several data ranks, with or without tensor and pipeline parallelism
/// (`TensorGroup::init_local`).
pub(super) fn draws_own_pieces(job: &Job, setup: &Setup) -> bool {
    job.distribution.shard == crate::config::Shard::Parameters && setup.grid.data > 1
}

/// Whether each rank reads its own pieces of the checkpoint (from its parts,
/// `checkpoint::parts`, or from a whole one, `checkpoint::whole`) instead of receiving them
/// from rank 0: sharded state over several data ranks, or tensor and pipeline parallelism (each
/// rank its shard of its stage), as the parts are written.
fn reads_parts(job: &Job, setup: &Setup) -> bool {
    sharded(job, setup) || setup.grid.replica() > 1
}

/// Collective: rank 0 prepares output.dir and reads the checkpoint to continue from (None
/// on the other ranks, and for a fresh start). Where `parts_read_here` (each rank reads its
/// pieces) one written in parts stays its index, and a whole one is checked and left in its
/// file (`Checkpoint::unread`); otherwise the parts are put together on rank 0.
pub(super) fn read_checkpoint(
    comm: &Comm,
    job: &Job,
    out_dir: &Path,
    model: &Mlp,
    resume: Option<&Resume>,
    n_data: usize,
    parts_read_here: bool,
) -> Result<Option<Checkpoint>> {
    let _p = crate::parallel::liveness::phase("preparing output.dir and reading the checkpoint to resume from");
    if comm.rank != 0 {
        // Rank 0 may send candidates in parts to check a share of their parts.
        super::verify::serve(comm);
        return Ok(None);
    }
    let mut lead = super::verify::Lead::new(comm);
    let found = prepare_output(job, out_dir, model, resume, n_data, !parts_read_here, &mut |p, step, m| {
        lead.verify(p, step, m)
    });
    lead.finish();
    let mut c = found?;
    if let Some(c) = c.as_mut().filter(|c| c.parts.is_some() && !parts_read_here) {
        let _a = crate::mem::allocating("the checkpoint's parts put together (rank 0)");
        checkpoint::assemble(c, model)?;
        info!("the checkpoint's {} parts put together on rank 0", c.parts.as_ref().map_or(0, |p| p.checksums.len()));
    }
    Ok(c)
}

/// Collective: where the run starts, from rank 0's checkpoint `ckpt`, with this rank's
/// `state` (parameters, m, v): the position, the global batch, the loss sums of the epoch
/// being resumed (folded onto data rank 0 when they were written on another count than
/// `n_data`), and a new lineage.
pub(super) fn position(
    comm: &Comm,
    job: &Job,
    ckpt: Option<&Checkpoint>,
    n_data: usize,
    out_dir: &Path,
    state: (Vec<f32>, Vec<f32>, Vec<f32>),
) -> Start {
    // step, epoch index, step in epoch, global batch, loss sums written (the writer's data ranks)
    let mut pos = [0, 0, 0, (job.training.rows_per_step() * n_data) as u64, n_data as u64];
    if let Some(c) = ckpt {
        pos = [c.step, c.epoch as u64, c.step_in_epoch as u64, c.global_batch as u64, c.loss_sums.len() as u64];
    }
    comm.broadcast_u64(&mut pos);
    // Each rank's sums (step::Sums): the loss, then the train metrics' (zeros when the
    // checkpoint has none of this model's length: an older format).
    let width = crate::step::sums_len(job.model.loss, *job.model.layers.last().expect("validated"));
    let mut flat = vec![0.0; pos[4] as usize * width];
    if let Some(c) = ckpt {
        let w = c.train_sums.len() / c.loss_sums.len().max(1);
        for (r, &l) in c.loss_sums.iter().enumerate() {
            flat[r * width] = l;
            if w + 1 == width {
                flat[r * width + 1..(r + 1) * width].copy_from_slice(&c.train_sums[r * w..(r + 1) * w]);
            }
        }
    }
    comm.broadcast_f64(&mut flat);
    let mut loss_sums: Vec<Sums> = flat.chunks_exact(width).map(<[f64]>::to_vec).collect();
    if loss_sums.len() != n_data {
        // Written on another number of ranks: only the epoch's totals matter.
        let mut total = vec![0.0; width];
        for s in &loss_sums {
            total.iter_mut().zip(s).for_each(|(t, v)| *t += v);
        }
        loss_sums = vec![vec![0.0; width]; n_data];
        loss_sums[0] = total;
    }
    let l = Lineage::new_run(ckpt);
    if comm.rank == 0 {
        lineage_notes(out_dir, l, ckpt);
    }
    let mut ids = [l.run_id, l.parent_run, l.parent_step as u64];
    comm.broadcast_u64(&mut ids);
    let lineage = Lineage { run_id: ids[0], parent_run: ids[1], parent_step: ids[2] as i64 };
    let (params, m, v) = state;
    let (step, epoch, step_in_epoch) = (pos[0], pos[1] as usize, pos[2] as usize);
    let global_batch = pos[3] as usize;
    let mine = ckpt.map_or_else(|| "{}".to_string(), |c| c.trainer_json.clone());
    let trainer = comm.all_gather_bytes(if comm.rank == 0 { mine.as_bytes() } else { &[] }).swap_remove(0);
    let trainer_json = String::from_utf8(trainer).expect("rank 0 sent UTF-8 (checked when read)");
    let from = ckpt.map(|_| out_dir.join(crate::checkpoint::file_name(step)));
    let norm = broadcast_norm(comm, ckpt.map(|c| &c.norm));
    let pieces = false;
    Start {
        params,
        m,
        v,
        ema: Vec::new(),
        step,
        epoch,
        step_in_epoch,
        loss_sums,
        global_batch,
        lineage,
        trainer_json,
        from,
        norm,
        pieces,
    }
}

/// Rank 0's `norm` (the checkpoint's), on every rank.
fn broadcast_norm(comm: &Comm, norm: Option<&crate::data::norm::Norm>) -> crate::data::norm::Norm {
    use crate::config::Normalize;
    let n = norm.cloned().unwrap_or_default();
    let kind = |k: Normalize| match k {
        Normalize::None => 0,
        Normalize::Standard => 1,
        Normalize::Minmax => 2,
    };
    let mut lens = [n.x_shift.len() as u64, n.y_shift.len() as u64, kind(n.x_kind)];
    comm.broadcast_u64(&mut lens);
    let (d, k) = (lens[0] as usize, lens[1] as usize);
    let mut all: Vec<f64> = if comm.rank == 0 {
        [&n.x_shift, &n.x_div, &n.y_shift, &n.y_div].into_iter().flatten().copied().collect()
    } else {
        vec![0.0; 2 * d + 2 * k]
    };
    comm.broadcast_f64(&mut all);
    let x_kind = [Normalize::None, Normalize::Standard, Normalize::Minmax][lens[2] as usize];
    crate::data::norm::Norm {
        x_kind,
        x_shift: all[..d].to_vec(),
        x_div: all[d..2 * d].to_vec(),
        y_shift: all[2 * d..2 * d + k].to_vec(),
        y_div: all[2 * d + k..].to_vec(),
    }
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
/// checkpoints, and find the checkpoint to resume from (a whole one's arrays kept in memory
/// where `keep_whole`; the parts of one in parts checked by `verify_parts`). `world` is this job's data-parallel
/// degree (the ranks when parallel.tensor = 1); a checkpoint's `world_size` records its
/// writer's. Any degree resumes: the data order does not depend on it, and the global batch
/// stays the checkpoint's (`setup::schedule` checks that it divides).
pub(super) fn prepare_output(
    job: &Job,
    out_dir: &Path,
    model: &Mlp,
    resume: Option<&Resume>,
    world: usize,
    keep_whole: bool,
    verify_parts: &mut dyn FnMut(&checkpoint::parts::Parts, u64, &Mlp) -> Result<()>,
) -> Result<Option<Checkpoint>> {
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, "create output.dir", e))?;
    let probe = out_dir.join(".hvtrain-write-test");
    std::fs::write(&probe, b"").map_err(|e| Error::io(out_dir, "write into output.dir", e))?;
    let _ = std::fs::remove_file(&probe);
    super::runlock::take(out_dir)?;
    let found = find(job, out_dir, model, resume, keep_whole, verify_parts)?;
    // What a crash mid-write left behind: never a valid file, and never picked up.
    let stale = checkpoint::remove_stale_tmp(out_dir);
    if !stale.is_empty() {
        info!("removed {} unfinished file(s) of an interrupted write: {}", stale.len(), stale.join(", "));
    }
    // Parts that no index names: a write interrupted between the parts and the index.
    let orphans = checkpoint::parts::orphans(out_dir);
    if !orphans.is_empty() {
        let names: Vec<String> = orphans.iter().map(|p| p.display().to_string()).collect();
        orphans.iter().for_each(|p| drop(std::fs::remove_file(p)));
        info!(
            "removed {} checkpoint part(s) that no checkpoint names (a write interrupted before its index): {}",
            names.len(),
            names.join(", ")
        );
    }
    let Some((path, c)) = found else { return Ok(None) };
    resumable(job, &path, c, world).map(Some)
}

/// The checkpoint `resume` names (None: a fresh start, refused when output.dir already holds
/// checkpoints of an earlier run); a whole one's arrays kept in memory where `keep_whole`.
fn find(
    job: &Job,
    out_dir: &Path,
    model: &Mlp,
    resume: Option<&Resume>,
    keep_whole: bool,
    verify: &mut dyn FnMut(&checkpoint::parts::Parts, u64, &Mlp) -> Result<()>,
) -> Result<Option<(PathBuf, Checkpoint)>> {
    Ok(match resume {
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
        Some(Resume::File(p)) => Some((p.clone(), checkpoint::load_index_by(p, model, keep_whole, verify)?)),
        Some(Resume::Auto) => {
            let f = checkpoint::newest_valid_by(out_dir, model, keep_whole, verify)?;
            if f.is_none() {
                info!("--resume auto: no checkpoint in {}; starting from the beginning", out_dir.display());
            }
            f
        }
    })
}

/// Checkpoint `c` (read from `path`) checked against this job: what an exact resume needs
/// must be the same; the global batch of an older format filled in; a change of the
/// data-parallel degree (this job's is `world`) said.
fn resumable(job: &Job, path: &Path, mut c: Checkpoint, world: usize) -> Result<Checkpoint> {
    let then: Job =
        serde_json::from_str(&c.job_json).map_err(|e| Error::data(path, "job_json", format!("unreadable: {e}")))?;
    if c.global_batch == 0 {
        // Format 1 and 2 did not record it: their batch was per rank, on world_size ranks.
        c.global_batch = then.training.rows_per_step() * c.world_size;
        if c.step_in_epoch > 0 {
            warn!(
                "{} was written by an older hvtrain, whose data order depended on the rank count: the rest of epoch {} \
                 follows this version's order, so some of its rows may be used twice and others not at all",
                path.display(),
                c.epoch + 1
            );
        }
    }
    if c.world_size != world {
        let per_rank = match c.global_batch % world {
            0 => format!("{} per rank now", c.global_batch / world),
            _ => format!("which does not divide over {world}"),
        };
        info!(
            "the checkpoint was written on {} data-parallel rank(s), this job has {world}: the global batch stays {} \
             ({per_rank}){}",
            c.world_size,
            c.global_batch,
            if c.step_in_epoch > 0 { "; the epoch goes on with exactly the rows it has not used yet" } else { "" }
        );
    }
    for (field, same) in [
        ("training.batch_size", then.training.batch_size == job.training.batch_size),
        ("training.accumulate", then.training.accumulate == job.training.accumulate),
        ("training.seed", then.training.seed == job.training.seed),
        ("data", serde_json::to_string(&then.data).ok() == serde_json::to_string(&job.data).ok()),
        ("optimizer.kind", then.optimizer.kind == job.optimizer.kind),
    ] {
        if !same {
            return Err(Error::data(
                path,
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
    Ok(c)
}
