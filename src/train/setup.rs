//! Start-up of a training run (collective): the model, the fusion plan checked across ranks,
//! the training data (all of it, on every rank) and this rank's part of the test data; and,
//! once the global batch is known (from the checkpoint when resuming), the schedule of rows
//! every rank uses at each step (the same on every rank).
//!
//! Must not: read the checkpoint (`restore.rs` does).

use crate::config::{limits, Job};
use crate::data::loader::Schedule;
use crate::data::shard::{Shard, Within};
use crate::error::{Error, Result};
use crate::eval::{expect, start};
use crate::model::pipeline;
use crate::model::placement::TensorGroup;
use crate::model::Mlp;
use crate::parallel::grid::{self, Grid};
use crate::parallel::liveness::phase;
use crate::parallel::pipe::PipeLink;
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
    pub val_shard: Option<Shard>,
    pub out_dir: PathBuf,
}

impl Setup {
    /// `kind`: this rank's backend (`device::select`), for what its state line counts.
    pub fn new(comm: &Comm, job: &Job, kind: crate::device::Kind) -> Result<Setup> {
        let whole = start(comm, job)?;
        let grid = grid::grid(comm, job)?;
        let stages = pipeline::stages(&whole.sizes, grid.pipeline)
            .map_err(|m| Error::config(&job.source, "parallel.pipeline", m))?;
        let (tensor_chan, pipe_chan, data_chan, hosts) = communicators(comm, &grid);
        let engine_chan = (grid.data > 1).then(|| data_chan.duplicate());
        if comm.rank == 0 && grid.world > 1 {
            for line in grid::describe(&grid, &hosts, &stages) {
                info!("{line}");
            }
        }
        let mut tensor = TensorGroup::new((grid.tensor > 1).then_some(tensor_chan), whole.clone());
        if grid.pipeline > 1 {
            tensor.set_pipeline(PipeLink::new(pipe_chan), &stages);
        }
        let model = tensor.local_model();
        // Sharded parameters' prefetch holds a second layer (allreduce.rs: where MPI grants
        // MPI_THREAD_MULTIPLE, on the CPU; a GPU gathers a layer when it is used).
        let on_host = kind == crate::device::Kind::Cpu;
        let windows =
            usize::from(job.distribution.prefetch && comm.threading == mpi::Threading::Multiple && on_host) + 1;
        let state = state_bytes(job, &model, grid.data, windows, on_host);
        crate::mem::set_state(state, grid.tensor * job.parallel.pipeline);
        if comm.rank == 0 {
            let shard = job.distribution.shard;
            let divided = if shard.optimizer() && grid.data > 1 {
                format!(
                    "; shard = \"{}\": the optimizer state{} divided over {} data-parallel ranks",
                    shard.name(),
                    match shard {
                        crate::config::Shard::Gradients => " and the reduced gradients",
                        crate::config::Shard::Parameters => ", the reduced gradients and the parameters",
                        _ => "",
                    },
                    grid.data
                )
            } else {
                String::new()
            };
            info!(
                "model state per rank: {} (rank 0's; the whole model's {:.1} MiB of parameters split over {} rank(s){divided})",
                state.describe(),
                whole.n_logical() as f64 * 4.0 / 1048576.0,
                grid.tensor * job.parallel.pipeline
            );
        }
        let plan = fusion_plan(comm, job, &model, &data_chan)?;
        let Data { train: train_shard, test: test_shard, validation: val_shard } =
            open_data(job, &whole, grid.d, grid.data, comm.rank == 0)?;
        let _p = phase("checking that every rank sees the same training rows");
        check_agreement(&data_chan, "the number of training rows", train_shard.len() as u64)?;
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
            val_shard,
            out_dir: PathBuf::from(&job.output.dir),
        })
    }
}

/// Collective: the tensor, pipeline and data communicators of this rank (`MPI_Comm_split`),
/// and every rank's host name. Tensor groups: consecutive ranks (same replica and stage);
/// pipelines: same replica and tensor slice; data groups: same stage and tensor slice.
fn communicators(comm: &Comm, grid: &Grid) -> (Channel, Channel, Channel, Vec<String>) {
    let _p = phase("making the tensor, pipeline and data communicators");
    let (pp, tt) = (grid.pipeline, grid.tensor);
    let tensor_chan = comm.split(grid.d * pp + grid.p, grid.t);
    let pipe_chan = comm.split(grid.d * tt + grid.t, grid.p);
    let data_chan = comm.split(grid.p * tt + grid.t, grid.d);
    let hosts =
        comm.all_gather_bytes(comm.host.as_bytes()).iter().map(|h| String::from_utf8_lossy(h).into_owned()).collect();
    (tensor_chan, pipe_chan, data_chan, hosts)
}

/// Collective over the data group: the fusion plan of this rank's part of the model, the
/// same on every rank of the group (its ranks reduce the same tensors; tensor ranks hold
/// other slices). Rank 0 logs the set-up.
fn fusion_plan(comm: &Comm, job: &Job, model: &Mlp, data_chan: &Channel) -> Result<FusionPlan> {
    let tensors = model.tensors();
    let lens: Vec<usize> = tensors.iter().map(|t| t.range.len()).collect();
    let d = &job.distribution;
    let plan = FusionPlan::with_options(&lens, job.fusion_threshold_bytes(), job.first_bucket_bytes(), d.bucket_order);
    // The gradient arena is laid out in fusion order, so buckets are arena ranges.
    assert!(plan.slots.iter().zip(&tensors).all(|(s, t)| *s == t.range), "arena and fusion plan disagree");
    let p = phase("checking that every rank has the same fusion plan");
    check_agreement(data_chan, "the gradient fusion plan (within the data group)", plan.fingerprint())?;
    drop(p);
    if comm.rank == 0 {
        log_setup(job, model, &plan, comm);
    }
    Ok(plan)
}

/// The training data, all of it (the loader takes each step's rows from the epoch's global
/// order), and data rank `d` of `n_data`'s slice of the test data, checked against the
/// whole model `whole`. Every training rank (and parameter-server worker) opens them so.
/// Validation and test data are weighted by `data.sample_weight` where their files hold it
/// (`eval::weigh`; `log`: say so).
pub(super) fn open_data(job: &Job, whole: &Mlp, d: usize, n_data: usize, log: bool) -> Result<Data> {
    let _p = phase("opening the training, validation and test data");
    let want = expect(whole);
    let split = job.data.validation_split;
    let within = if split > 0.0 { Within::TrainOf(split) } else { Within::All };
    // What the class numbers mean: the first training file's names (every other file's
    // labels are compared with them, and remapped or refused).
    let classes = match want.loss {
        crate::config::LossKind::SoftmaxCrossEntropy => {
            let first = crate::data::shard::files(&job.data.train, "data.train")?.swap_remove(0).1;
            crate::data::classes::of_file(&first, "data.train", &job.data.y_dataset)?
        }
        _ => crate::data::classes::Reference::Unknown,
    };
    let mut train = Shard::open_in(&job.data, "data.train", &job.data.train, within, 0, 1, want, &classes)?;
    if let Some(name) = &job.data.sample_weight {
        train.load_sample_weights(name)?;
    }
    debug!("training data: {} ({} rows)", train.describe(), train.len());
    let n = train.len();
    if n < n_data {
        return Err(Error::data(
            &job.data.train,
            &job.data.x_dataset,
            format!(
                "rank {} gets no samples: the training data has {n} rows for {n_data} ranks (data-parallel)",
                n_data - 1
            ),
        ));
    }
    // Every file that names its columns names them alike (`data::columns`).
    let mut columns = train.columns.clone();
    let test = match &job.data.test {
        Some(t) => {
            let mut sh = Shard::open(&job.data, "data.test", t, d, n_data, want, &classes)?;
            columns.agree(&sh.columns, "data.test")?;
            crate::eval::weigh(job, &mut sh, t, "data.test", log)?;
            Some(sh)
        }
        None => None,
    };
    let validation = match &job.data.validation {
        Some(v) => {
            let mut sh = Shard::open(&job.data, "data.validation", v, d, n_data, want, &classes)?;
            columns.agree(&sh.columns, "data.validation")?;
            crate::eval::weigh(job, &mut sh, v, "data.validation", log)?;
            Some(sh)
        }
        None if split > 0.0 => {
            let t = &job.data.train;
            let w = Within::ValidationOf(split);
            let mut sh = Shard::open_in(&job.data, "data.train", t, w, d, n_data, want, &classes)?;
            crate::eval::weigh(job, &mut sh, t, "data.validation_split", log)?;
            Some(sh)
        }
        None => None,
    };
    Ok(Data { train, test, validation })
}

/// Whether the training rows carry sample weights (`data.sample_weight`, read with the
/// training shard); refused when every weight is 0. `log`: rank 0 says what they are.
pub(super) fn sample_weights(job: &Job, train: &Shard, log: bool) -> Result<bool> {
    let (Some(name), Some(w)) = (&job.data.sample_weight, &train.sample_weights) else { return Ok(false) };
    let (mut lo, mut hi, mut sum, mut zeros) = (f32::INFINITY, 0.0f32, 0.0f64, 0usize);
    for &v in w {
        lo = lo.min(v);
        hi = hi.max(v);
        sum += v as f64;
        zeros += usize::from(v == 0.0);
    }
    if zeros == w.len() {
        return Err(Error::data(
            &job.data.train,
            name,
            format!(
                "every sample weight of the {} training rows is 0, so nothing would train; data.sample_weight must give some rows a weight above 0",
                w.len()
            ),
        ));
    }
    if log {
        info!(
            "sample weights: dataset {name}, {} training rows, from {} to {} (mean {}){}; the training loss and its \
             gradient are weighted, metrics are not",
            w.len(),
            fmt_weight(lo as f64),
            fmt_weight(hi as f64),
            fmt_weight(sum / w.len() as f64),
            if zeros > 0 { format!(", {zeros} rows weigh 0") } else { String::new() }
        );
    }
    Ok(true)
}

/// `model.class_weights` resolved against the training rows (`train`: every training row's
/// label, the same on every rank): one weight per class, or None when the job weighs none.
/// `log`: rank 0 says what they are.
pub(super) fn class_weights(job: &Job, train: &Shard, log: bool) -> Result<Option<Vec<f32>>> {
    let Some(cw) = &job.model.class_weights else { return Ok(None) };
    let crate::data::shard::Labels::Classes(labels) = &train.labels else {
        unreachable!("model.class_weights is refused for losses without classes")
    };
    let mut counts = vec![0u64; train.outputs];
    for &y in labels {
        counts[y as usize] += 1;
    }
    let w =
        cw.resolve(&counts, &train.class_names).map_err(|m| Error::config(&job.source, "model.class_weights", m))?;
    if log {
        let name = |c: usize| train.class_names.get(c).map_or(String::new(), |n| format!(" ({n})"));
        let shown: Vec<String> = (0..w.len().min(12))
            .map(|c| format!("{c}{}: {} ({} rows)", name(c), fmt_weight(w[c]), counts[c]))
            .collect();
        let more = if w.len() > 12 { format!(", … ({} classes)", w.len()) } else { String::new() };
        let how = match cw {
            crate::config::ClassWeights::Balanced => {
                format!("\"balanced\": rows / (classes × the class's rows) over {} training rows; ", labels.len())
            }
            _ => String::new(),
        };
        info!(
            "class weights: {}{more} ({how}the training loss and its gradient are weighted, evaluation's loss is not)",
            shown.join(", ")
        );
        let (rows, window) = (labels.len(), job.data.shuffle_window);
        if job.data.shuffle && window < rows && rows as f64 <= limits::SHUFFLE_WINDOW.hi {
            info!(
                "class weights: data.shuffle_window = {window} shuffles {window} of the {rows} training rows together; \
                 weighted steps trained better with the whole file in one window (docs/training.md, \
                 bench/results/class-weights-2026-11-29.md): --set data.shuffle_window={rows}"
            );
        }
    }
    Ok(Some(w.iter().map(|&v| v as f32).collect()))
}

/// A weight as the log shows it: 4 decimals without trailing zeros (2, 0.525, 1.3333), or 4
/// significant digits below 0.001 (1.000e-5), so that no weight but 0 shows as 0.
fn fmt_weight(w: f64) -> String {
    if w != 0.0 && w.abs() < 1e-3 {
        return format!("{w:.3e}");
    }
    let s = format!("{w:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The shards a training rank opens: all training rows, and its slices of the test and
/// validation data.
pub(super) struct Data {
    pub train: Shard,
    pub test: Option<Shard>,
    pub validation: Option<Shard>,
}

/// What this rank's model state costs: its parameters, two gradient buffers per bucket, and the
/// optimizer's state (with LAMB's scratch), in host or device memory; with `distribution.shard` over `data` ranks,
/// the optimizer state (and with "gradients" the reduced buckets) of the largest part, and with
/// "parameters" the `windows` layers gathered at a time. The moving average (`optimizer.ema`)
/// counts as optimizer state.
pub(super) fn state_bytes(
    job: &Job,
    model: &Mlp,
    data: usize,
    windows: usize,
    on_host: bool,
) -> crate::mem::StateBytes {
    let n = model.n_params;
    let shard = job.distribution.shard;
    let part = if shard.optimizer() && data > 1 { n.div_ceil(data) } else { n };
    let (m, v) = crate::optim::state_lens(&job.optimizer, part);
    // LAMB's scratch for r: the largest tensor's length, or sharded (or with tensor shards,
    // whose norms wait for the whole step's) its pieces' (all at once); RMSprop's first moment.
    let sharded = part < n || job.parallel.tensor > 1;
    let lens = model.tensors().iter().map(|t| t.range.len()).collect::<Vec<_>>();
    // RMSprop's scratch only where it is composed of other kernels (a GPU; the CPU fuses it).
    let scratch = match job.optimizer.kind {
        crate::config::OptimizerKind::Rmsprop if on_host => 0,
        _ => crate::optim::scratch_len(&job.optimizer, lens.into_iter(), sharded.then_some(part)),
    };
    // The parameters' moving average (optimizer.ema), laid out as the parameters are: whole on
    // every rank, or with "parameters" the rank's pieces.
    let ema = match job.optimizer.ema {
        None => 0,
        Some(_) if shard == crate::config::Shard::Parameters && data > 1 => part,
        Some(_) => n,
    };
    let mut s = crate::mem::StateBytes::of(n, m + v + scratch + ema);
    if shard.reduce_scatters() && data > 1 {
        // This rank's gradients whole (backward writes them), the reduced ones its part.
        s.grads = 4 * (n + part);
    }
    if shard == crate::config::Shard::Parameters && data > 1 {
        // Its pieces, and the windows the largest layer is gathered into.
        s.params = 4 * (part + windows * model.largest_slot());
    }
    s
}

/// The rows of every step for global batch `global` (training.batch_size × data ranks, or
/// the checkpoint's when resuming) over this job's data-parallel ranks; an error naming
/// `training.batch_size` when it does not divide over them or (drop_last) leaves no full step.
pub(super) fn schedule(comm: &Comm, job: &Job, setup: &Setup, global: usize) -> Result<Schedule> {
    let (ranks, n, b) = (setup.grid.data, setup.train_shard.len(), job.training.rows_per_step());
    if !global.is_multiple_of(ranks) {
        let fits: Vec<String> =
            (1..=global.min(4096)).filter(|m| global.is_multiple_of(*m)).map(|m| m.to_string()).collect();
        return Err(Error::config(
            &job.source,
            "training.batch_size",
            format!(
                "the checkpoint's global batch is {global} ({b} per rank x {} data-parallel ranks when the run started), \
                 which does not divide over this job's {ranks} data-parallel ranks; resuming keeps the global batch, so \
                 run on a number of data-parallel ranks that divides {global} ({})",
                global / b,
                fits.join(", ")
            ),
        ));
    }
    let s = Schedule::new(n, global, ranks, job.data.drop_last);
    if s.steps == 0 {
        return Err(Error::config(
            &job.source,
            "training.batch_size",
            format!(
                "the global batch {global} ({} per rank x {ranks} ranks) is larger than the training data ({n} samples), \
                 so data.drop_last = true leaves no full batch; lower it, use fewer ranks, or set data.drop_last = false",
                s.batch
            ),
        ));
    }
    if comm.rank == 0 {
        log_schedule(job, &s);
    }
    Ok(s)
}

/// Rank 0: the steps and batches of an epoch, and what drop_last leaves out (at warn).
fn log_schedule(job: &Job, s: &Schedule) {
    let (b, steps, ranks, total) = (s.batch, s.steps, s.ranks, s.rows);
    let k = job.training.accumulate;
    let per_rank = if k > 1 && b % k == 0 {
        format!("{b} per data-parallel rank ({} x {k} accumulated micro-batches, training.accumulate)", b / k)
    } else {
        format!("{b} per data-parallel rank")
    };
    match job.lr_find {
        Some(f) => info!(
            "lr-find: up to {} steps (epochs of {steps}), global batch {} = {per_rank} x {ranks} data-parallel rank(s)",
            f.steps, s.global_batch
        ),
        None => info!(
            "{} epochs of {steps} steps, global batch {} = {per_rank} x {ranks} data-parallel rank(s); {} of \
             the {total} training samples per epoch, in an order that does not depend on the rank count",
            job.training.epochs,
            s.global_batch,
            s.used()
        ),
    }
    if s.drop_last && s.used() < total {
        warn!(
            "data.drop_last = true: {} of the {total} training rows are dropped every epoch ({steps} full batches of {} \
             global); a different set each epoch when shuffling",
            total - s.used(),
            s.global_batch
        );
    } else if s.global_rows(steps - 1) < s.global_batch {
        let last = s.global_rows(steps - 1);
        let short: Vec<String> =
            (0..ranks).filter(|&r| s.rows(r, steps - 1) < b).take(8).map(|r| r.to_string()).collect();
        info!(
            "every row is used once per epoch; the last step has {last} rows, so rank(s) {}{} take a short or empty \
             batch there; the gradient average is weighted by the rows each rank uses",
            short.join(", "),
            if ranks - last / b > 8 { ", ..." } else { "" }
        );
    }
}

fn log_setup(job: &Job, model: &Mlp, plan: &FusionPlan, comm: &Comm) {
    let d = &job.distribution;
    info!(
        "model {:?}, activation {}, loss {}{} ({} parameters{}, {:.2} MiB), {} fusion bucket(s) at threshold {} MiB: sizes {:?} KiB",
        model.sizes,
        model.act_names(),
        model.loss.kind.name(),
        job.model.describe_options(),
        model.n_logical(),
        match (model.tensor, model.head && model.first == 0) {
            ((_, 1), true) => String::new(),
            ((t, ts), _) => format!(
                " in rank 0's part: layers {}..{} (pipeline stage 0), tensor shard {t} of {ts}",
                model.first,
                model.first + model.layers.len()
            ),
        },
        model.n_logical() as f64 * 4.0 / 1048576.0,
        plan.buckets.len(),
        d.fusion_threshold_mb,
        plan.buckets.iter().map(|b| b.len() * 4 / 1024).collect::<Vec<_>>()
    );
    info!("{}", job.optimizer.describe());
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

#[cfg(test)]
mod tests {
    #[test]
    fn weights_show_without_trailing_zeros_and_small_ones_not_as_zero() {
        let shown: Vec<String> = [2.0, 0.525, 4.0 / 3.0, 0.0, 1e-5].iter().map(|&w| super::fmt_weight(w)).collect();
        assert_eq!(shown, ["2", "0.525", "1.3333", "0", "1.000e-5"]);
    }
}
