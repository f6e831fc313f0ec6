//! Start-up of a training run (collective): the model, the fusion plan checked across ranks,
//! this rank's shards, and the number of steps every rank runs per epoch.

use crate::config::Job;
use crate::data::shard::Shard;
use crate::error::{Error, Result};
use crate::eval::start;
use crate::model::Mlp;
use crate::parallel::liveness::phase;
use crate::parallel::{check_agreement, Comm, FusionPlan};
use log::info;
use std::path::PathBuf;

pub(super) struct Setup {
    pub model: Mlp,
    pub plan: FusionPlan,
    pub train_shard: Shard,
    pub test_shard: Option<Shard>,
    /// Steps per epoch, the same on every rank.
    pub steps: usize,
    pub out_dir: PathBuf,
}

impl Setup {
    pub fn new(comm: &Comm, job: &Job) -> Result<Setup> {
        let model = start(comm, job)?;
        let tensors = model.tensors();
        let lens: Vec<usize> = tensors.iter().map(|t| t.range.len()).collect();
        let d = &job.distribution;
        let plan =
            FusionPlan::with_options(&lens, job.fusion_threshold_bytes(), job.first_bucket_bytes(), d.bucket_order);
        // The gradient arena is laid out in fusion order, so buckets are arena ranges.
        assert!(plan.slots.iter().zip(&tensors).all(|(s, t)| *s == t.range), "arena and fusion plan disagree");
        let p = phase("checking that every rank has the same fusion plan");
        check_agreement(comm, "the gradient fusion plan", plan.fingerprint())?;
        drop(p);
        if comm.rank == 0 {
            log_setup(job, &model, &plan, comm);
        }

        let p = phase("opening the training and test data");
        let train_shard = Shard::open(&job.data, "data.train", &job.data.train, comm.rank, comm.size, &model)?;
        let test_shard = match &job.data.test {
            Some(t) => Some(Shard::open(&job.data, "data.test", t, comm.rank, comm.size, &model)?),
            None => None,
        };

        let b = job.training.batch_size;
        let local_n = train_shard.len();
        drop(p);
        let _p = phase("agreeing on the steps per epoch");
        let min_n = comm.all_reduce_min_u64(local_n as u64) as usize;
        let steps = min_n / b;
        if steps == 0 {
            return Err(Error::config(
                &job.source,
                "training.batch_size",
                format!("{b} is larger than the smallest rank's share of the training data ({min_n} samples); lower it or use fewer ranks"),
            ));
        }
        let dropped = local_n - steps * b;
        if dropped > 0 {
            info!(
                "this rank uses {} of its {local_n} samples per epoch ({steps} full batches of {b}, the most every rank can \
                 run); {dropped} are left out each epoch (a different set each epoch when shuffling)",
                steps * b
            );
        }
        if comm.rank == 0 {
            info!(
                "{} epochs of {steps} steps, batch {b} per rank = {} global; {} training samples per epoch over {} rank(s)",
                job.training.epochs,
                b * comm.size,
                steps * b * comm.size,
                comm.size
            );
        }
        Ok(Setup { model, plan, train_shard, test_shard, steps, out_dir: PathBuf::from(&job.output.dir) })
    }
}

fn log_setup(job: &Job, model: &Mlp, plan: &FusionPlan, comm: &Comm) {
    let d = &job.distribution;
    info!(
        "model {:?} ({} parameters, {:.2} MiB), {} fusion bucket(s) at threshold {} MiB: sizes {:?} KiB",
        model.sizes,
        model.n_params,
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

