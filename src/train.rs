//! The training run: start-up checks, resume, the epoch loop (batches -> `Stepper` ->
//! metrics), checkpoints on schedule or on a preemption signal, and the final weights.
//!
//! Every rank runs the same number of steps (the smallest shard decides) so that the
//! collectives line up; what a rank drops to get there is logged. Each step ends with one
//! tiny all-reduce that agrees on "stop now" (a signal reached some rank) and "checkpoint
//! now" (rank 0's clock), so every rank stops at the same step boundary.

use crate::checkpoint::{self, Checkpoint};
use crate::config::Job;
use crate::data::loader::{Loader, LoaderCfg};
use crate::data::shard::Shard;
use crate::parallel::timeline::Timeline;
use crate::parallel::watchdog::{Watchdog, MAIN};
use crate::parallel::{check_agreement, checksum, Comm, Engine, FusionPlan};
use crate::error::{Error, Result};
use crate::eval::{eval_result, evaluate_local, start};
use crate::fault::Fault;
use crate::metrics::{EpochMetrics, MetricsLog};
use crate::model::Mlp;
use crate::optim::Optimizer;
use crate::step::Stepper;
use crate::weights;
use log::{info, warn};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a run ended without error.
pub enum Outcome {
    Completed,
    /// Stopped by a signal after writing this checkpoint.
    Preempted,
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

const STOP: u64 = 1;
const CHECKPOINT: u64 = 2;

pub fn train(comm: &Comm, job: &Job, t_process: Instant, resume: Option<Resume>) -> Result<Outcome> {
    let model = start(comm, job)?;
    let tensors = model.tensors();
    let lens: Vec<usize> = tensors.iter().map(|t| t.range.len()).collect();
    let d = &job.distribution;
    let plan = FusionPlan::with_options(&lens, job.fusion_threshold_bytes(), job.first_bucket_bytes(), d.bucket_order);
    // The gradient arena is laid out in fusion order, so buckets are arena ranges.
    assert!(plan.slots.iter().zip(&tensors).all(|(s, t)| *s == t.range), "arena and fusion plan disagree");
    check_agreement(comm, "the gradient fusion plan", plan.fingerprint())?;
    if comm.rank == 0 {
        log_setup(job, &model, &plan, comm);
    }

    let out_dir = PathBuf::from(&job.output.dir);
    let ckpt = if comm.rank == 0 { prepare_output(job, &out_dir, &model, resume.as_ref(), comm.size)? } else { None };

    let train_shard = Shard::open(&job.data, "data.train", &job.data.train, comm.rank, comm.size, &model)?;
    let test_shard = match &job.data.test {
        Some(t) => Some(Shard::open(&job.data, "data.test", t, comm.rank, comm.size, &model)?),
        None => None,
    };

    let b = job.training.batch_size;
    let local_n = train_shard.len();
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

    // Parameters, optimizer state and position: fresh from the seed, or rank 0's checkpoint.
    let opt = Optimizer::new(&job.optimizer, tensors, model.n_params, comm.size);
    let mut params = match &ckpt {
        Some(c) => c.params.clone(),
        None if comm.rank == 0 => model.init_params(job.training.seed),
        None => vec![0.0; model.n_params],
    };
    comm.broadcast_f32(&mut params);
    let (m_len, v_len) = (opt.state().0.len(), opt.state().1.len());
    let mut m = ckpt.as_ref().map_or(vec![0.0; m_len], |c| c.m.clone());
    let mut v = ckpt.as_ref().map_or(vec![0.0; v_len], |c| c.v.clone());
    if m.len() != m_len || v.len() != v_len {
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
    let mut sums = ckpt.as_ref().map_or(vec![0.0; comm.size], |c| c.loss_sums.clone());
    comm.broadcast_f64(&mut sums);
    let (start_epoch, start_batch) = (pos[1] as usize, pos[2] as usize);

    let watchdog = Watchdog::start(Duration::from_secs_f64(d.watchdog_seconds), comm.rank, comm.host.clone());
    comm.barrier(); // line the ranks' clocks up for the timeline
    let timeline = job.output.timeline.as_ref().map(|_| Arc::new(Timeline::new(Instant::now())));
    let chan = (comm.size > 1).then(|| comm.channel());
    let engine = Engine::new(chan, plan, d.overlap, d.compression, timeline.clone(), Some(watchdog.share()));
    let mut st = Stepper::new(model, params, opt, engine, b, timeline.clone());
    st.opt.restore(&m, &v, pos[0]).map_err(|e| Error::config(&job.source, "optimizer", e))?;
    st.step = pos[0];
    let fault = crate::fault::from_env()?;
    let metrics = if comm.rank == 0 { Some(MetricsLog::open(&out_dir, start_epoch + 1)?) } else { None };
    let loader = Loader::spawn(
        train_shard,
        LoaderCfg {
            batch: b,
            steps,
            epochs: job.training.epochs,
            shuffle: job.data.shuffle,
            block: job.data.shuffle_block,
            window: job.data.shuffle_window,
            seed: job.training.seed,
            rank: comm.rank,
            depth: 4,
            start_epoch,
            start_batch,
        },
    );
    let ctx = Ctx { comm, job, out_dir: &out_dir, fault, watchdog: &watchdog };
    let mut last_ckpt = Instant::now();
    let mut last_progress = Instant::now();

    let mut last: Option<EpochMetrics> = None;
    for epoch in start_epoch + 1..=job.training.epochs {
        let t0 = Instant::now();
        st.engine.exposed = Duration::ZERO;
        let first = if epoch == start_epoch + 1 { start_batch } else { 0 };
        let mut at_epoch_end = 0;
        let mut loss_sum = if epoch == start_epoch + 1 { sums[comm.rank] } else { 0.0 };
        for i in first..steps {
            let waiting = Instant::now();
            let batch = loader.next()?;
            crate::fault::maybe_fire(&ctx.fault, comm.rank, st.step + 1, &mut st.params)?;
            let l = st.run(&batch, waiting).map_err(|e| in_step(e, epoch, i + 1, comm.rank))?;
            loss_sum += l;
            loader.give_back(batch);
            if st.step == pos[0] + 1 && comm.rank == 0 {
                let since_exec = crate::sys::seconds_since_start().unwrap_or(f64::NAN);
                info!(
                    "first step done {since_exec:.3} s after process start ({:.3} s after main)",
                    t_process.elapsed().as_secs_f64()
                );
            }
            let every = job.training.log_every;
            let by_steps = every > 0 && (i + 1) % every == 0;
            let ps = job.training.progress_seconds;
            let by_time = ps > 0.0 && last_progress.elapsed().as_secs_f64() >= ps;
            if comm.rank == 0 && (by_steps || by_time) {
                last_progress = Instant::now();
                let done = i + 1 - first;
                let rate = (done * b * comm.size) as f64 / t0.elapsed().as_secs_f64();
                let left_epoch = (steps - i - 1) as f64 * t0.elapsed().as_secs_f64() / done as f64;
                let left_run = left_epoch
                    + (job.training.epochs - epoch) as f64 * steps as f64 * t0.elapsed().as_secs_f64() / done as f64;
                info!(
                    "epoch {epoch}/{}: step {}/{steps} ({:.0}%), loss {:.4} (rank 0's mean so far), {rate:.0} samples/s, \
                     about {} left in the epoch, {} in the run",
                    job.training.epochs,
                    i + 1,
                    100.0 * (i + 1) as f64 / steps as f64,
                    loss_sum / ((i + 1) * b) as f64,
                    human(left_epoch),
                    human(left_run)
                );
            }
            if d.check_every > 0 && st.step % d.check_every as u64 == 0 {
                let _g = watchdog.guard(MAIN, "the parameter consistency check", st.step);
                check_agreement(comm, &format!("the parameter checksum at step {}", st.step), checksum(&st.params))
                    .map_err(|e| Error::Mismatch(format!("{e}: the model replicas have diverged")))?;
            }
            // Agree on stopping and checkpointing, so every rank acts at the same step.
            let ck = &job.checkpoint;
            let time_due = comm.rank == 0
                && ck.every_minutes > 0.0
                && last_ckpt.elapsed().as_secs_f64() >= ck.every_minutes * 60.0;
            let mine = if crate::signals::stop_requested() { STOP } else { 0 } | if time_due { CHECKPOINT } else { 0 };
            let flags = {
                let _g = watchdog.guard(MAIN, "the end-of-step agreement", st.step);
                comm.all_reduce_or_u64(mine)
            };
            let step_due = ck.every_steps > 0 && st.step % ck.every_steps == 0;
            let flags = flags | if step_due { CHECKPOINT } else { 0 };
            if flags != 0 && i + 1 == steps {
                // The epoch's last step: checkpoint after its metrics, as the start of the next.
                at_epoch_end = flags;
            } else if flags != 0 {
                save_checkpoint(&ctx, &st, epoch - 1, i + 1, loss_sum)?;
                last_ckpt = Instant::now();
                if flags & STOP != 0 {
                    if comm.rank == 0 {
                        info!(
                            "stopped by a signal at step {}; resume with --resume auto (exit code {})",
                            st.step,
                            crate::signals::EXIT_PREEMPTED
                        );
                    }
                    return Ok(Outcome::Preempted);
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let done = steps - first;
        let exposed_ms = st.engine.exposed.as_secs_f64() * 1e3 / done.max(1) as f64;
        // Local work first; the watchdog then guards only the one collective.
        let test = match &test_shard {
            Some(sh) => evaluate_local(&st.model, &st.params, sh)?,
            None => [0.0; 3],
        };
        let mut totals = [loss_sum, (steps * b) as f64, test[0], test[1], test[2]];
        {
            let _g = watchdog.guard(MAIN, "the end-of-epoch metrics", st.step);
            comm.all_reduce_sum_f64(&mut totals);
        }
        let (test_loss, test_accuracy) = match &test_shard {
            Some(sh) => {
                let (l, a) = eval_result(&totals[2..], sh);
                (Some(l), a)
            }
            None => (None, None),
        };
        let m = EpochMetrics {
            epoch,
            train_loss: totals[0] / totals[1],
            test_loss,
            test_accuracy,
            samples_per_sec: (done * b * comm.size) as f64 / secs,
            epoch_seconds: secs,
            exposed_comm_ms_per_step: exposed_ms,
            steps,
            ranks: comm.size,
            lr: st.opt.lr(),
        };
        if let Some(log) = &metrics {
            info!(
                "epoch {epoch}/{}: train_loss {:.4}{}{} | {:.0} samples/s ({:.2} s), exposed communication {:.3} ms/step",
                job.training.epochs,
                m.train_loss,
                m.test_loss.map(|l| format!(" test_loss {l:.4}")).unwrap_or_default(),
                m.test_accuracy.map(|a| format!(" test_accuracy {a:.4}")).unwrap_or_default(),
                m.samples_per_sec,
                secs,
                exposed_ms
            );
            log.append(&m)?;
        }
        last = Some(m);
        if at_epoch_end != 0 {
            save_checkpoint(&ctx, &st, epoch, 0, 0.0)?;
            last_ckpt = Instant::now();
            if at_epoch_end & STOP != 0 {
                if comm.rank == 0 {
                    info!(
                        "stopped by a signal after epoch {epoch}; resume with --resume auto (exit code {})",
                        crate::signals::EXIT_PREEMPTED
                    );
                }
                return Ok(Outcome::Preempted);
            }
        }
    }
    drop(loader);
    if let (Some(tl), Some(path)) = (&timeline, &job.output.timeline) {
        let _g = watchdog.guard(MAIN, "gathering the timeline", st.step);
        tl.write_all(comm, &comm.host, Path::new(path)).map_err(|e| Error::io(path, "write the timeline", e))?;
        if comm.rank == 0 {
            info!(
                "timeline of {} rank(s) written to {path} (open in https://ui.perfetto.dev or chrome://tracing)",
                comm.size
            );
        }
    }
    info!("peak RSS {:.1} MiB", crate::sys::peak_rss_mib().unwrap_or(f64::NAN));
    if comm.rank == 0 {
        let path = out_dir.join("weights.h5");
        weights::save(&st.model, &st.params, &path)?;
        match last.and_then(|m| m.test_accuracy.map(|a| (a, m.epoch))) {
            Some((a, e)) => info!("done: test accuracy {a:.4} after {e} epochs; weights in {}", path.display()),
            None => info!("done after {} steps; weights in {}", st.step, path.display()),
        }
    }
    Ok(Outcome::Completed)
}

/// What checkpointing needs besides the step state.
struct Ctx<'a> {
    comm: &'a Comm,
    job: &'a Job,
    out_dir: &'a Path,
    fault: Option<Fault>,
    watchdog: &'a Watchdog,
}

/// Collective: gather each rank's running loss, rank 0 writes the checkpoint, everyone waits
/// for it (unguarded: a large write may take longer than the watchdog's deadline).
fn save_checkpoint(
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
        checkpoint::save(ctx.out_dir, &st.model, &c, ctx.job.checkpoint.keep, || {
            crate::fault::in_checkpoint(&ctx.fault, comm.rank, step)
        })?;
        info!("checkpoint {} written ({:.0} ms)", path.display(), t.elapsed().as_secs_f64() * 1e3);
    }
    comm.barrier();
    Ok(path)
}

/// Rank 0, before training: create output.dir, refuse to overwrite an earlier run's
/// checkpoints, and find the checkpoint to resume from.
fn prepare_output(
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
    let Some((path, c)) = found else { return Ok(None) };
    if c.world_size != world {
        return Err(Error::data(
            &path,
            "world_size",
            format!(
                "the checkpoint was written by {} ranks, this job has {world}: resume with {} ranks (each rank's data order depends on the rank count)",
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
        "engine: overlap {}, bucket order {:?}, first bucket {} MiB, compression {:?}, watchdog {} s, \
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
