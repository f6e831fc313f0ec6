//! Start-up of a training run (collective): the model, the fusion plan checked across ranks,
//! this rank's shards, and the schedule of rows every rank uses at each step (the same on
//! every rank: every rank's share is all-gathered once).

use crate::config::Job;
use crate::data::loader::Schedule;
use crate::data::shard::Shard;
use crate::error::{Error, Result};
use crate::eval::{expect, start};
use crate::model::Mlp;
use crate::parallel::grid::{self, Grid, TensorGroup};
use crate::parallel::liveness::phase;
use crate::parallel::{check_agreement, Channel, Comm, FusionPlan};
use log::{debug, info, warn};
use std::path::PathBuf;

pub(super) struct Setup {
    /// This rank's model: its shard under tensor parallelism, else the whole model.
    pub model: Mlp,
    /// The whole model (what checkpoints and weights.h5 hold).
    pub whole: Mlp,
    pub grid: Grid,
    /// The tensor group (main thread), and this rank's data group: one communicator for the
    /// main thread's checks, and a duplicate for the engine (None when D = 1).
    pub tensor: TensorGroup,
    pub data_chan: Channel,
    pub engine_chan: Option<Channel>,
    pub plan: FusionPlan,
    pub train_shard: Shard,
    pub test_shard: Option<Shard>,
    /// Steps per epoch (the same on every rank) and the rows of each rank in each step.
    pub schedule: Schedule,
    pub out_dir: PathBuf,
}

impl Setup {
    pub fn new(comm: &Comm, job: &Job) -> Result<Setup> {
        let whole = start(comm, job)?;
        let grid = grid::grid(comm, job)?;
        let p = phase("making the tensor and data communicators");
        // Tensor groups: consecutive ranks; data groups: the same tensor index.
        let tensor_chan = comm.split(grid.d, grid.t);
        let data_chan = comm.split(grid.t, grid.d);
        let engine_chan = (grid.data > 1).then(|| data_chan.duplicate());
        let hosts: Vec<String> = comm
            .all_gather_bytes(comm.host.as_bytes())
            .iter()
            .map(|h| String::from_utf8_lossy(h).into_owned())
            .collect();
        drop(p);
        if comm.rank == 0 && grid.world > 1 {
            for line in grid::describe(&grid, &hosts) {
                info!("{line}");
            }
        }
        let tensor = TensorGroup::new((grid.tensor > 1).then_some(tensor_chan), whole.clone());
        let model = tensor.local_model();
        let state = state_bytes(job, &model);
        crate::mem::set_state(state, grid.tensor * job.parallel.pipeline);
        if comm.rank == 0 {
            info!(
                "model state per rank: {} (rank 0's; the whole model's {:.1} MiB of parameters split over {} rank(s))",
                state.describe(),
                whole.n_params as f64 * 4.0 / 1048576.0,
                grid.tensor * job.parallel.pipeline
            );
        }
        let tensors = model.tensors();
        let lens: Vec<usize> = tensors.iter().map(|t| t.range.len()).collect();
        let d = &job.distribution;
        let plan =
            FusionPlan::with_options(&lens, job.fusion_threshold_bytes(), job.first_bucket_bytes(), d.bucket_order);
        // The gradient arena is laid out in fusion order, so buckets are arena ranges.
        assert!(plan.slots.iter().zip(&tensors).all(|(s, t)| *s == t.range), "arena and fusion plan disagree");
        // The ranks of a data group reduce the same tensors; tensor ranks hold other slices.
        let p = phase("checking that every rank has the same fusion plan");
        check_agreement(&data_chan, "the gradient fusion plan (within the data group)", plan.fingerprint())?;
        drop(p);
        if comm.rank == 0 {
            log_setup(job, &model, &plan, comm);
        }

        let p = phase("opening the training and test data");
        let want = expect(&model);
        // A tensor group reads one data-parallel shard: shard d of D.
        let (d, n_data) = (grid.d, grid.data);
        let train_shard = Shard::open(&job.data, "data.train", &job.data.train, d, n_data, want)?;
        debug!("training data: {} ({} rows)", train_shard.describe(), train_shard.len());
        let test_shard = match &job.data.test {
            Some(t) => Some(Shard::open(&job.data, "data.test", t, d, n_data, want)?),
            None => None,
        };

        let b = job.training.batch_size;
        drop(p);
        let _p = phase("agreeing on the rows of every step");
        // Indexed by data shard: the data group's ranks are shards 0..D in order.
        let shares: Vec<usize> =
            data_chan.all_gather_u64(train_shard.len() as u64).into_iter().map(|n| n as usize).collect();
        let schedule = Schedule::new(shares, b, job.data.drop_last);
        if schedule.steps == 0 {
            let min_n = schedule.shares.iter().min().copied().unwrap_or(0);
            return Err(Error::config(
                &job.source,
                "training.batch_size",
                format!(
                    "{b} is larger than the smallest rank's share of the training data ({min_n} samples), so \
                     data.drop_last = true leaves no full batch; lower it, use fewer ranks, or set data.drop_last = false"
                ),
            ));
        }
        if comm.rank == 0 {
            log_schedule(job, &schedule);
        }
        Ok(Setup {
            model,
            whole,
            grid,
            tensor,
            data_chan,
            engine_chan,
            plan,
            train_shard,
            test_shard,
            schedule,
            out_dir: PathBuf::from(&job.output.dir),
        })
    }
}

/// What this rank's model state costs: its parameters, two gradient buffers per bucket, and the
/// optimizer's state, in host or device memory.
pub(super) fn state_bytes(job: &Job, model: &Mlp) -> crate::mem::StateBytes {
    let (m, v) = crate::optim::state_lens(&job.optimizer, model.n_params);
    crate::mem::StateBytes::of(model.n_params, m + v)
}

/// Rank 0: how many rows each epoch uses, the short and empty batches, or (drop_last) what
/// is left out, at warn.
fn log_schedule(job: &Job, s: &Schedule) {
    let (b, steps, ranks) = (s.batch, s.steps, s.shares.len());
    let total: usize = s.shares.iter().sum();
    let used = s.global_rows_in(0, steps);
    info!(
        "{} epochs of {steps} steps, batch {b} per rank = up to {} global; {used} of the {total} training samples per \
         epoch over {ranks} rank(s)",
        job.training.epochs,
        b * ranks
    );
    if s.drop_last {
        if used < total {
            let per_rank: Vec<String> = (0..ranks)
                .filter(|&r| s.shares[r] > s.epoch_rows(r))
                .map(|r| format!("rank {r} {} of {}", s.shares[r] - s.epoch_rows(r), s.shares[r]))
                .collect();
            warn!(
                "data.drop_last = true: {} of the {total} training rows are dropped every epoch ({steps} full batches \
                 of {b} per rank, the most every rank can run; dropped: {}{}); a different set each epoch when shuffling",
                total - used,
                per_rank[..per_rank.len().min(8)].join(", "),
                if per_rank.len() > 8 { ", ..." } else { "" }
            );
        }
        return;
    }
    // Ranks with fewer rows end the epoch with a short batch and/or empty steps.
    let uneven: Vec<String> = (0..ranks)
        .filter(|&r| s.shares[r] != steps * b)
        .map(|r| {
            let (full, rest) = (s.shares[r] / b, s.shares[r] % b);
            let empty = steps - s.shares[r].div_ceil(b);
            let mut t = format!("rank {r}: {full} full batch(es)");
            if rest > 0 {
                t += &format!(", one of {rest} rows");
            }
            if empty > 0 {
                t += &format!(", {empty} empty step(s)");
            }
            t
        })
        .collect();
    if !uneven.is_empty() {
        let shown = uneven.iter().take(8).cloned().collect::<Vec<_>>().join("; ");
        info!(
            "every row is used once per epoch; shares differ or do not divide by the batch, so {} rank(s) end the epoch \
             with a short batch or empty steps ({shown}{}); the gradient average is weighted by the rows each rank uses",
            uneven.len(),
            if uneven.len() > 8 { "; ..." } else { "" }
        );
    }
}

fn log_setup(job: &Job, model: &Mlp, plan: &FusionPlan, comm: &Comm) {
    let d = &job.distribution;
    info!(
        "model {:?} ({} parameters{}, {:.2} MiB), {} fusion bucket(s) at threshold {} MiB: sizes {:?} KiB",
        model.sizes,
        model.n_params,
        match model.tensor {
            (_, 1) => String::new(),
            (t, ts) => format!(" in rank 0's tensor shard {t} of {ts}"),
        },
        model.n_params as f64 * 4.0 / 1048576.0,
        plan.buckets.len(),
        d.fusion_threshold_mb,
        plan.buckets.iter().map(|b| b.len() * 4 / 1024).collect::<Vec<_>>()
    );
    info!(
        "engine: overlap {}, bucket order {:?}, first bucket {} MiB, compression {:?}, liveness limit {} s, \
         parameter check every {} steps, timeline {}, MPI thread level {:?}, CUDA-aware MPI {}; checkpoints every {} steps / {} min, keep {}",
        if d.overlap { "on" } else { "off" },
        d.bucket_order,
        job.first_bucket_bytes() as f64 / 1048576.0,
        d.compression,
        d.watchdog_seconds,
        d.check_every,
        job.output.timeline.as_deref().unwrap_or("off"),
        comm.threading,
        match comm.cuda_aware() {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        },
        job.checkpoint.every_steps,
        job.checkpoint.every_minutes,
        job.checkpoint.keep
    );
}
