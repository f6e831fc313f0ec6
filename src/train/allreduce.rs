//! The all-reduce mode (data, tensor and pipeline parallelism): builds the `Stepper` whose
//! engine all-reduces each gradient bucket over the data group, and supplies the one loop's
//! `Mode`: the parameter consistency check and the per-step agreement on stopping and
//! checkpointing (`stop.rs`), checkpoints and weights.h5 assembled by the replica's tensor
//! group. The loop itself is `run.rs`'s.
//!
//! Must not: run the epoch loop.

use super::gpu_path::{self, Path};
use super::mode::{At, Boundary, Mode};
use super::restore::Start;
use super::run::Parts;
use super::save::Writer;
use super::setup::Setup;
use super::stop::{self, Ctx, StopState};
use crate::config::Job;
use crate::data::loader::Schedule;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::model::placement::TensorGroup;
use crate::optim::Optimizer;
use crate::parallel::liveness;
use crate::parallel::reduce;
use crate::parallel::shard::{self, ReduceScatter, Sharder};
use crate::parallel::timeline::Timeline;
use crate::parallel::watchdog::{Watchdog, MAIN};
use crate::parallel::{check_agreement, checksum, Channel, Comm, Engine};
use crate::step::{Stepper, Sums};
use log::{debug, info};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct AllReduce<'a> {
    ctx: Ctx<'a>,
    /// How GPU buckets travel (autotune's new reducers keep it).
    path: Path,
    /// This rank's data group (main thread): the parameter consistency check.
    data_chan: Channel,
    last_ckpt: Instant,
    /// The last step's mean loss over every rank's rows (from the end-of-step agreement).
    step_loss: Option<f64>,
}

/// Collective: the stepper and the rest of the loop's parts on backend `be`, and the mode.
pub(super) fn build<'a, B: Backend>(
    be: B,
    comm: &'a Comm,
    job: &'a Job,
    setup: Setup,
    sched: Schedule,
    mut start: Start,
    t_process: Instant,
) -> Result<(Parts<'a, B>, AllReduce<'a>)> {
    let d = &job.distribution;
    let Setup {
        model,
        grid,
        mut tensor,
        data_chan,
        engine_chan,
        plan,
        train_shard,
        test_shard,
        val_shard,
        out_dir,
        ..
    } = setup;
    let watchdog = Watchdog::start(Duration::from_secs_f64(d.watchdog_seconds), comm.rank, comm.host.clone());
    let p = liveness::phase("starting the communication engine");
    comm.barrier(); // line the ranks' clocks up for the timeline
    let timeline = job.output.timeline.as_ref().map(|_| Arc::new(Timeline::new(Instant::now())));
    if comm.rank == 0 {
        info!("backend: {} on every rank", be.name());
    }
    if comm.rank == 0 && d.reduction == crate::config::Reduction::Adasum {
        let p = crate::parallel::adasum::fold_size(grid.data);
        let fold = if p < grid.data {
            format!(
                "; {} rank(s) above the power of two {p} folded in first (Horovod refuses this count)",
                grid.data - p
            )
        } else {
            String::new()
        };
        info!(
            "gradient reduction: adasum (Horovod's op=Adasum), pairwise per tensor over {} data-parallel rank(s), \
             {} whole-bucket exchange(s) per bucket{fold}",
            grid.data,
            p.trailing_zeros() as usize + usize::from(p < grid.data) * 2
        );
    }
    let path = gpu_path(&be, comm, &data_chan, job, grid.data)?;
    tensor_path(&be, comm, &mut tensor, job)?;
    pipe_path(&be, comm, &mut tensor, job)?;
    // Sharded state (one data rank has nothing to divide): the layout over the data group.
    let shard = (d.shard.optimizer() && grid.data > 1).then(|| Sharder::new(data_chan.duplicate(), &plan));
    let scatter = d.shard.reduce_scatters() && shard.is_some();
    let params_sharded = d.shard == crate::config::Shard::Parameters && shard.is_some();
    let reducer = match (path, engine_chan) {
        (_, Some(chan)) if scatter => {
            let layout = &shard.as_ref().expect("scatter is sharded").layout;
            Box::new(ReduceScatter::new(chan, layout)) as Box<dyn reduce::Reducer>
        }
        (Path::Nccl, chan) => {
            // One data-parallel rank has no engine channel: a one-rank communicator of its own.
            let chan = chan.unwrap_or_else(|| data_chan.duplicate());
            let levels = d.hierarchical && grid.data > 1;
            be.nccl_reducer(chan, levels, d.compression).map_err(|(_, why)| Error::Cuda(format!("NCCL: {why}")))?
        }
        (path, chan) => {
            let pointers = path == Path::Mpi && !d.hierarchical;
            reduce::for_job(chan, d.compression, d.reduction, d.hierarchical && grid.data > 1, &plan, pointers)
        }
    };
    let reduced: Vec<usize> = match &shard {
        Some(sh) if scatter => shard::reduced_lens(&sh.layout, sh.rank()),
        _ => plan.buckets.iter().map(|r| r.len()).collect(),
    };
    // Layer gathers ahead of their use on a thread of their own: beside the main thread's and
    // the communication thread's MPI calls (MPI_THREAD_MULTIPLE), into host memory.
    let multiple = comm.threading == mpi::Threading::Multiple;
    let prefetch = params_sharded && d.prefetch && multiple && be.device_ordinal().is_none();
    log_shard(comm, job, grid.data, scatter, prefetch, grid.replica() == 1);
    let alloc = crate::step::bucket_buffers_sized(&be, &plan, &reduced)?;
    let overlap = overlap(comm, job, grid.data, grid.replica() > 1 || params_sharded);
    let engine = Engine::new(reducer, plan, overlap, timeline.clone(), Some(watchdog.share()), alloc);
    drop(p);
    // scale_lr_by_world_size: × (global batch / batch_size), the data-parallel degree the run
    // started with: a resume on another count keeps the global batch, so the lr too.
    let lr_ranks = sched.global_batch / job.training.rows_per_step();
    // LARS and LAMB on tensor shards need whole tensors' norms (summed over the tensor group,
    // `step/clip.rs`): their two-halved step, with the whole arena as this rank's one piece.
    let layerwise =
        matches!(job.optimizer.kind, crate::config::OptimizerKind::Lars | crate::config::OptimizerKind::Lamb);
    let own = shard
        .as_ref()
        .map(|s| s.own())
        .or_else(|| (layerwise && grid.tensor > 1).then(|| vec![(0..model.n_params, 0)]));
    let mut opt = Optimizer::with_own(&be, &job.optimizer, model.tensors(), model.n_params, lr_ranks, own)?;
    if params_sharded {
        opt.set_pieces_kept();
    }
    opt.schedule_mut().set_total_steps((job.training.epochs * sched.steps) as u64);
    opt.schedule_mut().set_epoch_steps(sched.steps as u64);
    // This rank's part of the starting state (restore.rs cut it); rows per rank: the global
    // batch (kept across resumes) over this job's data ranks.
    let mut st = match shard {
        Some(sh) if params_sharded => {
            let _a = crate::mem::allocating("this rank's pieces of the starting parameters");
            let pieces = if start.params.is_empty() {
                // A fresh start (restore::draws_own_pieces): this rank's pieces, drawn here.
                let own: Vec<std::ops::Range<usize>> = sh.own().into_iter().map(|(r, _)| r).collect();
                let pieces = tensor.init_local(job.training.seed, &own);
                if comm.rank == 0 {
                    info!(
                        "starting parameters: each data rank drew its own pieces from the seed ({} of the {} on rank 0); \
                         no rank built the whole model",
                        pieces.len(),
                        model.n_params
                    );
                }
                pieces
            } else if start.pieces {
                // Read from a checkpoint in parts: this rank's pieces only (restore::own_parts).
                std::mem::take(&mut start.params)
            } else {
                crate::step::pieces_of(&sh, &start.params)
            };
            Stepper::new_sharded(be, model, pieces, opt, engine, sched.batch, timeline.clone(), sh, prefetch)?
        }
        shard => {
            let mut st = Stepper::new(be, model, &start.params, opt, engine, sched.batch, timeline.clone())?;
            if let Some(sh) = shard {
                st.set_shard(sh, scatter);
            }
            st
        }
    };
    st.restore(&start.m, &start.v, start.step).map_err(|e| Error::config(&job.source, "optimizer", e))?;
    if let Some(beta) = job.optimizer.ema.filter(|_| job.lr_find.is_none()) {
        // Laid out as the parameters are kept: a whole checkpoint's average cut to the pieces.
        let ema = match st.shard() {
            Some(sh) if st.params_sharded() && !start.pieces && !start.ema.is_empty() => {
                crate::step::pieces_of(&sh.sharder, &start.ema)
            }
            _ => std::mem::take(&mut start.ema),
        };
        st.set_ema(beta, &ema)?;
        if comm.rank == 0 {
            info!(
                "optimizer.ema: a moving average of the parameters (β = {beta}, {}); evaluation, the best weights and \
                 weights.h5 use it, checkpoints keep it beside the trained parameters",
                match (ema.is_empty(), start.step) {
                    (false, _) => "resumed from the checkpoint",
                    (true, 0) => "the parameters after the first step, as Keras starts it",
                    (true, _) => "starting from the resumed parameters",
                }
            );
        }
    }
    // The stepper holds its own copies now: the starting state's go (a whole model's
    // parameters and, resumed, its optimizer state, on every rank).
    (start.params, start.m, start.v, start.ema) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    tensor.set_watchdog(watchdog.share());
    st.set_tensor_group(tensor);
    // Gradient accumulation: each of the step's micro-batches split as parallel.micro_batches says.
    st.set_micro_batches(job.parallel.micro_batches * job.training.accumulate)?;
    st.set_dropout(&job.model.dropout_rates(), job.training.seed)?;
    if let Some(w) = super::setup::class_weights(job, &train_shard, comm.rank == 0)? {
        if st.model().head {
            st.set_class_weights(&w)?;
        }
    }
    if super::setup::sample_weights(job, &train_shard, comm.rank == 0)? && st.model().head {
        st.set_sample_weights()?;
    }
    let writer = Writer::new(job, start.lineage, sched.global_batch, grid.data, comm.rank)?;
    writer.set_norm(train_shard.norm().clone());
    writer.set_names(crate::weights::Names::of(&train_shard));
    st.set_norm(train_shard.norm());
    let stop = StopState::new(start.loss_sums.clone());
    let ctx = Ctx { comm, job, grid, watchdog, stop, writer };
    let mode = AllReduce { ctx, path, data_chan, last_ckpt: Instant::now(), step_loss: None };
    let parts = Parts {
        comm,
        job,
        st,
        train: train_shard,
        test: test_shard,
        validation: val_shard,
        sched,
        data_rank: grid.d,
        data_ranks: grid.data,
        start,
        timeline,
        out_dir,
        t_process,
    };
    Ok((parts, mode))
}

/// Rank 0 says how the state is divided (`distribution.shard`), or why it is not.
fn log_shard(comm: &Comm, job: &Job, data: usize, scatter: bool, prefetch: bool, no_model_parallelism: bool) {
    let s = job.distribution.shard;
    if comm.rank != 0 || !s.optimizer() {
        return;
    }
    if data == 1 {
        info!(
            "distribution.shard = \"{}\": one data-parallel rank, nothing to divide (every part is this rank's)",
            s.name()
        );
        return;
    }
    let grads = match (scatter, shard::Path::from_env()) {
        (true, shard::Path::Ring) => {
            "gradient buckets reduce-scattered (a ring of exchanges: each rank receives its piece of the sum)"
        }
        (true, shard::Path::Mpi) => {
            "gradient buckets reduce-scattered (MPI_Reduce_scatter: each rank receives its piece of the sum)"
        }
        (false, _) => "gradient buckets all-reduced whole",
    };
    if s == crate::config::Shard::Parameters {
        let gather = match shard::Path::from_env() {
            shard::Path::Ring => "a ring",
            shard::Path::Mpi => "MPI_Allgatherv",
        };
        let eval = if no_model_parallelism {
            "; evaluation and checkpoints never hold the whole model either (each layer gathered as evaluation reads \
             it; checkpoints written in parts, every rank its own)"
        } else {
            "; checkpoints written in parts, every rank its own; evaluation gathers each rank's tensor shard or \
             pipeline stage whole"
        };
        let ahead = if prefetch {
            "the step's next layer gathered on a thread of its own while this one computes, two layers held at a \
             time"
        } else if !job.distribution.prefetch {
            "one layer held at a time (distribution.prefetch = false)"
        } else if comm.threading != mpi::Threading::Multiple {
            "one layer held at a time (no prefetch: MPI granted no MPI_THREAD_MULTIPLE)"
        } else {
            "one layer held at a time (no prefetch on a GPU)"
        };
        info!(
            "distribution.shard = \"parameters\": the parameters, the optimizer state and update divided over {data} \
             data-parallel ranks (each fusion bucket split into one piece per rank); {grads}; each layer gathered from \
             the ranks' pieces before forward and backward read it, {ahead} ({gather}; \
             HVTRAIN_SHARD_COLLECTIVES=ring|mpi){eval}"
        );
        return;
    }
    let gather = match shard::Path::from_env() {
        shard::Path::Ring => "a ring",
        shard::Path::Mpi => "MPI_Allgatherv",
    };
    info!(
        "distribution.shard = \"{}\": the optimizer state and update divided over {data} data-parallel ranks \
         (each fusion bucket split into one piece per rank); {grads}; the updated pieces all-gathered after each step \
         ({gather}; HVTRAIN_SHARD_COLLECTIVES=ring|mpi)",
        s.name()
    );
}

/// Collective over the data group: how GPU buckets travel (`gpu_path::choose` on every rank's
/// facts); rank 0 logs it. HVTRAIN_CUDA_AWARE=0 still keeps device pointers from MPI.
fn gpu_path<B: Backend>(be: &B, comm: &Comm, data_chan: &Channel, job: &Job, data: usize) -> Result<Path> {
    let d = &job.distribution;
    let gpu = be.device_ordinal();
    let nccl_in_auto = nccl_in_auto_for_buckets();
    // NCCL is looked for only where it could be used (looking may ask the python3 on PATH).
    let wanted = match d.gpu_allreduce {
        crate::config::GpuAllreduce::Nccl => true,
        crate::config::GpuAllreduce::Auto => data > 1 && nccl_in_auto,
        _ => false,
    };
    let mine = my_facts(be, comm, wanted);
    let all = gpu_path::gather(data_chan, &mine);
    let asked = gpu_path::Job {
        asked: d.gpu_allreduce,
        nccl_in_auto,
        data_ranks: data,
        compression: d.compression,
        reduction: d.reduction,
        hierarchical: d.hierarchical,
    };
    let (path, why) =
        gpu_path::choose(&asked, &all).map_err(|e| Error::config(&job.source, "distribution.gpu_allreduce", e))?;
    if comm.rank == 0 && gpu.is_some() {
        let how = match path {
            Path::Nccl => "all-reduced GPU to GPU by NCCL",
            Path::Mpi => "handed to MPI as device pointers (CUDA-aware MPI)",
            Path::Host => "copied to pinned host memory and all-reduced by MPI",
        };
        info!("gradient buckets: {how}: {why}");
    }
    Ok(path)
}

/// Whether `auto` may take NCCL for gradient buckets: yes (the GPU check's phase b3 passed on
/// an H200, 2026-11-29) unless HVTRAIN_NCCL_AUTO=0 (see gpu_path::Job::nccl_in_auto).
fn nccl_in_auto_for_buckets() -> bool {
    !std::env::var("HVTRAIN_NCCL_AUTO").is_ok_and(|v| v == "0")
}

/// Whether `auto` may take NCCL for tensor-parallel sums and pipeline messages: opt-in
/// (HVTRAIN_NCCL_AUTO=1) until a run on two or more GPUs (the check's phase m) has passed them.
fn nccl_in_auto_for_groups() -> bool {
    std::env::var("HVTRAIN_NCCL_AUTO").is_ok_and(|v| v == "1")
}

/// `HVTRAIN_EMULATE_DEVICE_SUMS=1` on a rank without a GPU (tests): the model-parallel
/// exchanges take the device path's dispatch on host memory.
fn emulate_device<B: Backend>(be: &B) -> bool {
    be.device_ordinal().is_none() && std::env::var("HVTRAIN_EMULATE_DEVICE_SUMS").is_ok_and(|v| v == "1")
}

/// Collective over a model-parallel group (`chan`: a tensor group or a pipeline; `what` its
/// exchanges, for errors): whether they go GPU to GPU by NCCL (`gpu_allreduce = "nccl"`, or
/// `"auto"` where it may take NCCL; `gpu_path::choose` on the group's facts, float32), and why.
/// Every rank of the group gathers (a rank whose environment differs, HVTRAIN_NCCL_AUTO
/// unset, still answers; its facts then say NCCL was not looked for, and every rank's
/// `choose` reads the same facts).
fn group_path<B: Backend>(be: &B, comm: &Comm, chan: &Channel, job: &Job, what: &str) -> Result<(Path, String)> {
    use crate::config::{Compression, GpuAllreduce, Reduction};
    let d = &job.distribution;
    let nccl_in_auto = nccl_in_auto_for_groups();
    let wanted = d.gpu_allreduce == GpuAllreduce::Nccl || (d.gpu_allreduce == GpuAllreduce::Auto && nccl_in_auto);
    let all = gpu_path::gather(chan, &my_facts(be, comm, wanted));
    let asked = gpu_path::Job {
        // Device pointers to MPI are the gradient buckets' path only: "mpi" leaves these
        // exchanges on the host path, as "host" does.
        asked: if d.gpu_allreduce == GpuAllreduce::Mpi { GpuAllreduce::Host } else { d.gpu_allreduce },
        nccl_in_auto,
        data_ranks: chan.size,
        compression: Compression::None,
        reduction: Reduction::Average,
        hierarchical: false,
    };
    gpu_path::choose(&asked, &all)
        .map_err(|e| Error::config(&job.source, "distribution.gpu_allreduce", format!("{what}: {e}")))
}

/// Collective over the tensor group, under tensor parallelism: the activations' and their
/// gradients' sums GPU to GPU through an NCCL communicator of the tensor group where
/// `group_path` says so, else through host copies and MPI as before; rank 0 logs which and why.
fn tensor_path<B: Backend>(be: &B, comm: &Comm, tensor: &mut TensorGroup, job: &Job) -> Result<()> {
    if let Some(chan) = tensor.channel().filter(|_| emulate_device(be)) {
        // Tests without a GPU: the device path's dispatch, in-place sums on host memory.
        let r = Box::new(reduce::HostPointers::new(chan.duplicate()));
        tensor.set_device_reducer(r);
        if comm.rank == 0 {
            info!("tensor-parallel sums: through emulated device pointers (HVTRAIN_EMULATE_DEVICE_SUMS=1)");
        }
        return Ok(());
    }
    let Some(chan) = tensor.channel() else { return Ok(()) };
    let (path, why) = group_path(be, comm, chan, job, "the tensor-parallel sums")?;
    if path == Path::Nccl {
        let chan = chan.duplicate();
        let r = be
            .nccl_reducer(chan, false, crate::config::Compression::None)
            .map_err(|(_, why)| Error::Cuda(format!("NCCL for the tensor-parallel sums: {why}")))?;
        tensor.set_device_reducer(r);
    }
    if comm.rank == 0 && be.device_ordinal().is_some() {
        let how = if path == Path::Nccl { "GPU to GPU by NCCL" } else { "through host memory and MPI" };
        info!("tensor-parallel sums (activations and their gradients): {how}: {why}");
    }
    Ok(())
}

/// Collective over the pipeline, under pipeline parallelism: the stages' messages (activations
/// forward, their gradients backward) GPU to GPU by NCCL send/recv where `group_path` says so,
/// else through host memory and MPI as before; rank 0 logs which and why. Evaluation's
/// messages stay on the host path.
fn pipe_path<B: Backend>(be: &B, comm: &Comm, tensor: &mut TensorGroup, job: &Job) -> Result<()> {
    let Some(link) = tensor.pipe.as_mut() else { return Ok(()) };
    if emulate_device(be) {
        // Tests without a GPU: the device path's dispatch, messages between host addresses.
        link.set_device(Box::new(crate::parallel::pipe::HostPointers::new(link.channel().duplicate())));
        if comm.rank == 0 {
            info!("pipeline messages: through emulated device pointers (HVTRAIN_EMULATE_DEVICE_SUMS=1)");
        }
        return Ok(());
    }
    let (path, why) = group_path(be, comm, link.channel(), job, "the pipeline messages")?;
    if path == Path::Nccl {
        let d = be
            .nccl_pipe(link.channel())
            .map_err(|why| Error::Cuda(format!("NCCL for the pipeline messages: {why}")))?;
        link.set_device(d);
    }
    if comm.rank == 0 && be.device_ordinal().is_some() {
        let how = if path == Path::Nccl { "GPU to GPU by NCCL send/recv" } else { "through host memory and MPI" };
        info!("pipeline messages (activations and their gradients): {how}: {why}");
    }
    Ok(())
}

/// This rank's facts for `gpu_path::choose`: its host and GPU, whether NCCL loads (looked for
/// only when `wanted`), whether MPI says it is CUDA-aware (HVTRAIN_CUDA_AWARE=0: no).
fn my_facts<B: Backend>(be: &B, comm: &Comm, wanted: bool) -> gpu_path::Facts {
    let gpu = be.device_ordinal();
    let nccl = match gpu {
        Some(_) if wanted => {
            crate::device::cuda::nccl_lib::load().map(|n| format!("NCCL {} from {}", n.version, n.path))
        }
        Some(_) => Err("not looked for".into()),
        None => Err("no GPU".into()),
    };
    let cuda_aware = match std::env::var("HVTRAIN_CUDA_AWARE").as_deref() {
        Ok("0") => Some(false),
        _ => comm.cuda_aware(),
    };
    gpu_path::Facts { host: comm.host.clone(), gpu, nccl, cuda_aware }
}

/// Whether buckets are reduced on a communication thread during backward. One data-parallel
/// rank has nothing to overlap. Where the main thread makes MPI calls during backward
/// (`main_calls_mpi`: tensor or pipeline parallelism's activation sums and messages, sharded
/// parameters' layer gathers), they run beside the communication thread's, which needs
/// MPI_THREAD_MULTIPLE.
fn overlap(comm: &Comm, job: &Job, data: usize, main_calls_mpi: bool) -> bool {
    let asked = job.distribution.overlap && data > 1;
    let multiple = comm.threading == mpi::Threading::Multiple;
    let on = asked && (!main_calls_mpi || multiple);
    if comm.rank == 0 && asked && !on {
        info!(
            "overlap off: under tensor or pipeline parallelism, or with shard = \"parameters\", the main thread's MPI \
             calls would run beside the communication thread's, and MPI granted {:?}, not MPI_THREAD_MULTIPLE",
            comm.threading
        );
    }
    on
}

/// A disagreement found by `check_agreement` inside a run, told as what it is (`why`) instead of
/// its start-up hint (the same job file on every rank), which does not fit there.
fn retold(e: Error, why: &str) -> Error {
    match e {
        Error::Mismatch(m) => Error::Mismatch(format!("{}: {why}", m.split("; start every rank").next().unwrap_or(&m))),
        e => e,
    }
}

impl AllReduce<'_> {
    /// Every `check_every` steps: the copies of this rank's part agree (within the data group).
    fn check<B: Backend>(&self, st: &Stepper<B>) -> Result<()> {
        let every = self.ctx.job.distribution.check_every;
        if every == 0 || !st.step().is_multiple_of(every as u64) {
            return Ok(());
        }
        if st.params_sharded() {
            // Each rank holds its own pieces: there are no copies to compare.
            return Ok(());
        }
        let _g = self.ctx.watchdog.guard(MAIN, "the parameter consistency check", st.step());
        check_agreement(
            &self.data_chan,
            &format!("the parameter checksum at step {}", st.step()),
            checksum(&st.params_host()?),
        )
        .map_err(|e| retold(e, "the model replicas have diverged (a bit flip in memory, or a bug: please report it)"))
    }
}

impl<B: Backend> Mode<B> for AllReduce<'_> {
    fn watchdog(&self) -> &Watchdog {
        &self.ctx.watchdog
    }

    fn set_trainer_state(&self, json: String) {
        self.ctx.writer.set_trainer(json);
    }

    fn retune(&mut self, st: &mut Stepper<B>, s: super::autotune::Setting) -> Result<()> {
        let (job, data) = (self.ctx.job, self.ctx.grid.data);
        let d = &job.distribution;
        let (threshold, first) = s.bytes();
        let (path, pointers) = (self.path, self.path == Path::Mpi && !s.hierarchical);
        st.replan(threshold, first, d.bucket_order, |old, plan| {
            if path == Path::Nccl && old.what().starts_with("all-reduce (NCCL") {
                return old; // NCCL sums any bucket: the communicator (and its levels) stays
            }
            reduce::for_job(old.into_channel(), d.compression, d.reduction, s.hierarchical && data > 1, plan, pointers)
        })?;
        // Every rank of the group must have switched to the same buckets before the next step.
        let fingerprint = st.plan_fingerprint();
        check_agreement(&self.data_chan, "the autotuned gradient fusion plan", fingerprint).map_err(|e| {
            let why =
                "autotune chose differently on different ranks (a bug: please report it; distribution.autotune = \
                       false runs without it)";
            retold(e, why)
        })
    }

    fn trainers(&self) -> &Channel {
        self.ctx.comm
    }

    fn counts_metrics(&self) -> bool {
        self.ctx.grid.t == 0 && self.ctx.grid.p == 0
    }

    fn step_phase(&self) -> &'static str {
        "a training step (forward, backward, optimizer)"
    }

    fn after_step(&mut self, st: &Stepper<B>, at: At, sums: &Sums) -> Result<Boundary> {
        self.check(st)?;
        // Agree on stopping and checkpointing, so every rank acts at the same step.
        let (comm, ck) = (self.ctx.comm, &self.ctx.job.checkpoint);
        let time_due = comm.rank == 0
            && ck.every_minutes > 0.0
            && self.last_ckpt.elapsed().as_secs_f64() >= ck.every_minutes * 60.0;
        let before = if at.step_in_epoch == 1 { 0.0 } else { self.ctx.stop.total() };
        let boundary = stop::at_boundary(&self.ctx, st, at.epoch_index, at.step_in_epoch, sums, time_due)?;
        // The step's mean loss over every rank's rows, from the agreement's sums.
        let loss = (self.ctx.stop.total() - before) / at.rows as f64;
        self.step_loss = Some(loss);
        if comm.rank == 0 && log::log_enabled!(log::Level::Debug) {
            debug!("step {}: loss {loss:.9e}", st.step());
        }
        Ok(boundary)
    }

    fn step_loss(&self) -> Option<f64> {
        self.step_loss
    }

    fn checkpoint(&mut self, st: &Stepper<B>, at: At, _sums: &Sums) -> Result<()> {
        stop::save_checkpoint(&self.ctx, st, at.epoch_index, at.step_in_epoch)?;
        self.last_ckpt = Instant::now();
        Ok(())
    }

    fn epoch_note(&mut self, exposed_ms: f64) -> String {
        format!(", exposed communication {exposed_ms:.3} ms/step")
    }

    fn whole_params(&mut self, st: &Stepper<B>) -> Result<Option<Vec<f32>>> {
        // Assembled from replica 0's shards and stages on rank 0; sharded parameters are
        // first gathered over each data group, which every replica joins.
        if self.ctx.grid.d != 0 && !st.params_sharded() {
            return Ok(None);
        }
        let _p = liveness::phase("gathering the model's shards and stages for weights.h5");
        Ok(st.whole_params()?.filter(|_| self.ctx.comm.rank == 0))
    }
}
