//! The training loop and evaluation:
//! batches -> forward/backward -> fused all-reduce -> optimizer -> metrics, per epoch.
//!
//! Every rank runs the same number of steps (the smallest shard decides) so that the
//! collectives line up; what a rank drops to get there is logged.

use crate::config::Job;
use crate::data::loader::{Loader, LoaderCfg};
use crate::data::shard::{Labels, Shard};
use crate::device;
use crate::dist::timeline::Timeline;
use crate::dist::watchdog::{Watchdog, MAIN};
use crate::dist::{check_agreement, checksum, Comm, Engine, FusionPlan};
use crate::error::{Error, Result};
use crate::metrics::{EpochMetrics, MetricsLog};
use crate::model::{Mlp, Targets, Workspace};
use crate::optim::Optimizer;
use crate::step::Stepper;
use crate::weights;
use log::{info, warn};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

pub fn build_model(job: &Job) -> Mlp {
    Mlp::new(&job.model.layers, job.model.activation, job.model.loss)
}

/// Start-up shared by `train` and `eval`: placement log, device choice, cross-rank checks.
fn start(comm: &Comm, job: &Job) -> Result<Mlp> {
    let (_backend, how) = device::select(job.training.device, comm.local_rank)?;
    info!(
        "rank {}/{} on host {} (local rank {}/{}), device: {how}",
        comm.rank, comm.size, comm.host, comm.local_rank, comm.local_size
    );
    check_agreement(comm, "the job configuration (job file + --set)", job.fingerprint())?;
    Ok(build_model(job))
}

pub fn train(comm: &Comm, job: &Job, t_process: Instant) -> Result<()> {
    let model = start(comm, job)?;
    let tensors = model.tensors();
    let lens: Vec<usize> = tensors.iter().map(|t| t.range.len()).collect();
    let d = &job.distribution;
    let plan = FusionPlan::with_options(&lens, job.fusion_threshold_bytes(), job.first_bucket_bytes(), d.bucket_order);
    // The gradient arena is laid out in fusion order, so buckets are arena ranges.
    assert!(plan.slots.iter().zip(&tensors).all(|(s, t)| *s == t.range), "arena and fusion plan disagree");
    check_agreement(comm, "the gradient fusion plan", plan.fingerprint())?;
    if comm.rank == 0 {
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
             parameter check every {} steps, timeline {}, MPI thread level {:?}",
            if d.overlap { "on" } else { "off" },
            d.bucket_order,
            job.first_bucket_bytes() as f64 / 1048576.0,
            d.compression,
            d.watchdog_seconds,
            d.check_every,
            job.output.timeline.as_deref().unwrap_or("off"),
            comm.threading
        );
    }

    let out_dir = PathBuf::from(&job.output.dir);
    let metrics = if comm.rank == 0 {
        std::fs::create_dir_all(&out_dir).map_err(|e| Error::io(&out_dir, "create output.dir", e))?;
        Some(MetricsLog::create(&out_dir)?)
    } else {
        None
    };

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
        return Err(Error::config(&job.source, "training.batch_size", format!(
            "{b} is larger than the smallest rank's share of the training data ({min_n} samples); lower it or use fewer ranks")));
    }
    let dropped = local_n - steps * b;
    if dropped > 0 {
        info!("this rank uses {} of its {local_n} samples per epoch ({steps} full batches of {b}, the most every rank can run); {dropped} are left out each epoch (a different set each epoch when shuffling)", steps * b);
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

    let mut params = if comm.rank == 0 { model.init_params(job.training.seed) } else { vec![0.0; model.n_params] };
    comm.broadcast_f32(&mut params);
    let watchdog = Watchdog::start(Duration::from_secs_f64(d.watchdog_seconds), comm.rank);
    comm.barrier(); // line the ranks' clocks up for the timeline
    let timeline = job.output.timeline.as_ref().map(|_| Arc::new(Timeline::new(Instant::now())));
    let chan = (comm.size > 1).then(|| comm.channel());
    let engine = Engine::new(chan, plan, d.overlap, d.compression, timeline.clone(), Some(watchdog.share()));
    let opt = Optimizer::new(&job.optimizer, tensors, model.n_params, comm.size);
    let mut st = Stepper::new(model, params, opt, engine, b, timeline.clone());
    let fault = crate::fault::from_env()?;
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
        },
    );

    let mut last: Option<EpochMetrics> = None;
    for epoch in 1..=job.training.epochs {
        let t0 = Instant::now();
        st.engine.exposed = Duration::ZERO;
        let mut loss_sum = 0.0f64;
        for i in 0..steps {
            let waiting = Instant::now();
            let batch = loader.next()?;
            crate::fault::maybe_fire(&fault, comm.rank, st.step + 1, &mut st.params)?;
            let l = st.run(&batch, waiting).map_err(|e| in_step(e, epoch, i + 1, comm.rank))?;
            loss_sum += l;
            loader.give_back(batch);
            if st.step == 1 && comm.rank == 0 {
                let since_exec = crate::sys::seconds_since_start().unwrap_or(f64::NAN);
                info!(
                    "first step done {since_exec:.3} s after process start ({:.3} s after main)",
                    t_process.elapsed().as_secs_f64()
                );
            }
            let every = job.training.log_every;
            if every > 0 && (i + 1) % every == 0 && comm.rank == 0 {
                info!("epoch {epoch} step {}/{steps}: loss {:.4} (rank 0's batch)", i + 1, l / b as f64);
            }
            if d.check_every > 0 && st.step % d.check_every as u64 == 0 {
                let _g = watchdog.guard(MAIN, "the parameter consistency check", st.step);
                check_agreement(comm, &format!("the parameter checksum at step {}", st.step), checksum(&st.params))
                    .map_err(|e| Error::Mismatch(format!("{e}: the model replicas have diverged")))?;
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let exposed_ms = st.engine.exposed.as_secs_f64() * 1e3 / steps as f64;
        // Local work first; the watchdog then guards only the one collective.
        let test = match &test_shard {
            Some(sh) => evaluate_local(&st.model, &st.params, sh)?,
            None => [0.0; 3],
        };
        let mut sums = [loss_sum, (steps * b) as f64, test[0], test[1], test[2]];
        {
            let _g = watchdog.guard(MAIN, "the end-of-epoch metrics", st.step);
            comm.all_reduce_sum_f64(&mut sums);
        }
        let (test_loss, test_acc) = match &test_shard {
            Some(sh) => {
                let (l, a) = eval_result(&sums[2..], sh);
                (Some(l), a)
            }
            None => (None, None),
        };
        let m = EpochMetrics {
            epoch,
            train_loss: sums[0] / sums[1],
            test_loss,
            test_accuracy: test_acc,
            samples_per_sec: (steps * b * comm.size) as f64 / secs,
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
    }
    drop(loader);
    if let (Some(tl), Some(path)) = (&timeline, &job.output.timeline) {
        let _g = watchdog.guard(MAIN, "gathering the timeline", st.step);
        tl.write_all(comm, &comm.host, std::path::Path::new(path))
            .map_err(|e| Error::io(path, "write the timeline", e))?;
        if comm.rank == 0 {
            info!(
                "timeline of {} rank(s) written to {path} (open in https://ui.perfetto.dev or chrome://tracing)",
                comm.size
            );
        }
    }
    info!("peak RSS {:.1} MiB", crate::sys::peak_rss_mib().unwrap_or(f64::NAN));
    let (model, params) = (&st.model, &st.params);

    if comm.rank == 0 {
        let path = out_dir.join("weights.h5");
        weights::save(model, params, &path)?;
        let m = last.expect("at least one epoch");
        match m.test_accuracy {
            Some(a) => info!("done: test accuracy {a:.4} after {} epochs; weights in {}", m.epoch, path.display()),
            None => info!("done after {} epochs; weights in {}", m.epoch, path.display()),
        }
    }
    Ok(())
}

/// Mean loss (and accuracy, for classification) over every rank's test shard.
/// This rank's test sums: [loss sum, correct predictions, samples]. Local work only.
pub fn evaluate_local(model: &Mlp, params: &[f32], shard: &Shard) -> Result<[f64; 3]> {
    const CHUNK: usize = 512;
    let mut ws = Workspace::new(model, CHUNK);
    let mut x = vec![0.0f32; CHUNK * shard.features];
    let (mut loss, mut correct) = (0.0f64, 0usize);
    let n = shard.len();
    let mut start = 0;
    while start < n {
        let c = CHUNK.min(n - start);
        shard.read_rows(start, c, &mut x)?;
        model.forward(params, &x[..c * shard.features], c, &mut ws);
        let t = match &shard.labels {
            Labels::Classes(v) => Targets::Classes(&v[start..start + c]),
            Labels::Values(v, k) => Targets::Values(&v[start * k..(start + c) * k]),
        };
        let (l, k) = model.loss(t, c, 1.0, &mut ws, false);
        loss += l;
        correct += k;
        start += c;
    }
    Ok([loss, correct as f64, n as f64])
}

/// (mean loss, accuracy for classification) from sums added over every rank.
fn eval_result(sums: &[f64], shard: &Shard) -> (f64, Option<f64>) {
    if sums[2] == 0.0 {
        warn!("the test set is empty");
    }
    let acc = matches!(shard.labels, Labels::Classes(_)).then(|| sums[1] / sums[2]);
    (sums[0] / sums[2], acc)
}

/// `hvtrain eval`: load weights, evaluate on the job's test data over all ranks.
pub fn eval(comm: &Comm, job: &Job, weights_path: &std::path::Path) -> Result<()> {
    let model = start(comm, job)?;
    let test = job
        .data
        .test
        .as_ref()
        .ok_or_else(|| Error::config(&job.source, "data.test", "is not set; eval needs test data"))?;
    let params = weights::load(&model, weights_path)?;
    let shard = Shard::open(&job.data, "data.test", test, comm.rank, comm.size, &model)?;
    let mut sums = evaluate_local(&model, &params, &shard)?;
    comm.all_reduce_sum_f64(&mut sums);
    let (loss, acc) = eval_result(&sums, &shard);
    if comm.rank == 0 {
        match acc {
            Some(a) => info!("eval {}: test_loss {loss:.4} test_accuracy {a:.4}", weights_path.display()),
            None => info!("eval {}: test_loss {loss:.6}", weights_path.display()),
        }
        println!(
            "{}",
            serde_json::json!({"weights": weights_path.display().to_string(), "test_loss": loss, "test_accuracy": acc, "ranks": comm.size})
        );
    }
    Ok(())
}

/// Say where in training an error happened.
fn in_step(e: Error, epoch: usize, step: usize, rank: usize) -> Error {
    match e {
        Error::Training(m) => Error::Training(format!("rank {rank}, epoch {epoch}, step {step} of the epoch: {m}")),
        other => other,
    }
}
