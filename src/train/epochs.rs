//! The epoch loop: batches from the loader through the `Stepper`, the progress line, the
//! parameter consistency check, the per-step stop agreement, the end-of-epoch metrics, and
//! at the end the timeline and the final weights.

use super::restore::Start;
use super::setup::Setup;
use super::stop::{self, Boundary, Ctx, StopState};
use super::{human, in_step, Outcome};
use crate::config::Job;
use crate::data::loader::{Loader, LoaderCfg, Schedule, Tally};
use crate::data::shard::Shard;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::eval::{eval_result, evaluate_in_group};
use crate::fault::Fault;
use crate::metrics::{EpochMetrics, MetricsLog};
use crate::optim::Optimizer;
use crate::parallel::grid::Grid;
use crate::parallel::liveness;
use crate::parallel::reduce;
use crate::parallel::timeline::Timeline;
use crate::parallel::watchdog::{Watchdog, MAIN};
use crate::parallel::{check_agreement, checksum, Channel, Comm, Engine};
use crate::step::Stepper;
use crate::weights;
use log::{debug, info};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Run<'a, B: Backend> {
    comm: &'a Comm,
    job: &'a Job,
    grid: Grid,
    /// This rank's data group (main thread): the parameter consistency check.
    data_chan: Channel,
    st: Stepper<B>,
    loader: Option<Loader>,
    test_shard: Option<Shard>,
    metrics: Option<MetricsLog>,
    watchdog: Watchdog,
    timeline: Option<Arc<Timeline>>,
    fault: Option<Fault>,
    out_dir: PathBuf,
    /// Steps per epoch and the rows of every rank in each.
    sched: Schedule,
    steps: usize,
    /// Where this run started: global step, epochs done, steps of the next epoch done.
    start_step: u64,
    start_epoch: usize,
    start_batch: usize,
    start_loss_sum: f64,
    t_process: Instant,
    last: Option<EpochMetrics>,
    last_ckpt: Instant,
    last_progress: Instant,
    stop: StopState,
}

impl<'a, B: Backend> Run<'a, B> {
    pub fn new(
        be: B,
        comm: &'a Comm,
        job: &'a Job,
        setup: Setup,
        schedule: Schedule,
        start: Start,
        t_process: Instant,
    ) -> Result<Run<'a, B>> {
        let d = &job.distribution;
        // Rows per rank: the global batch (kept across resumes) over this job's data ranks.
        let b = schedule.batch;
        let Setup {
            model,
            whole: _,
            stages: _,
            grid,
            mut tensor,
            data_chan,
            engine_chan,
            plan,
            train_shard,
            test_shard,
            out_dir,
        } = setup;
        let steps = schedule.steps;
        let watchdog = Watchdog::start(Duration::from_secs_f64(d.watchdog_seconds), comm.rank, comm.host.clone());
        let p = liveness::phase("starting the communication engine");
        comm.barrier(); // line the ranks' clocks up for the timeline
        let timeline = job.output.timeline.as_ref().map(|_| Arc::new(Timeline::new(Instant::now())));
        if comm.rank == 0 {
            info!("backend: {} on every rank", be.name());
        }
        // Device pointers straight to MPI when the gradients are on a GPU and the library
        // says it is CUDA-aware (HVTRAIN_CUDA_AWARE=0 turns it off).
        let device_pointers = be.on_device()
            && d.compression == crate::config::Compression::None
            && comm.cuda_aware() == Some(true)
            && std::env::var("HVTRAIN_CUDA_AWARE").map_or(true, |v| v != "0");
        if comm.rank == 0 && be.on_device() {
            info!(
                "gradient buckets go to MPI {}",
                if device_pointers {
                    "as device pointers (CUDA-aware MPI)"
                } else {
                    "through pinned host memory (copy stream)"
                }
            );
        }
        // Gradients are reduced over the data group (every rank when parallel.tensor = 1).
        let reducer = reduce::for_job(engine_chan, d.compression, device_pointers);
        // One data-parallel rank has nothing to overlap: no communication thread. Under tensor
        // or pipeline parallelism the main thread's activation all-reduces and messages run
        // beside the communication thread's, which needs MPI_THREAD_MULTIPLE.
        let multiple = comm.threading == mpi::Threading::Multiple;
        let overlap = d.overlap && grid.data > 1 && (grid.replica() == 1 || multiple);
        if comm.rank == 0 && d.overlap && grid.data > 1 && !overlap {
            info!(
                "overlap off: under tensor or pipeline parallelism the main thread's MPI calls would run beside the \
                 communication thread's, and MPI granted {:?}, not MPI_THREAD_MULTIPLE",
                comm.threading
            );
        }
        let alloc = crate::step::bucket_buffers(&be, &plan)?;
        let engine = Engine::new(reducer, plan, overlap, timeline.clone(), Some(watchdog.share()), alloc);
        drop(p);
        // scale_lr_by_world_size: × (global batch / batch_size), the data-parallel degree the run
        // started with: a resume on another count keeps the global batch, so the lr too.
        let lr_ranks = schedule.global_batch / job.training.batch_size;
        let opt = Optimizer::new(&be, &job.optimizer, model.tensors(), model.n_params, lr_ranks)?;
        // This rank's part of the starting state (restore.rs cut it).
        let mut st = Stepper::new(be, model, &start.params, opt, engine, b, timeline.clone())?;
        st.restore(&start.m, &start.v, start.step).map_err(|e| Error::config(&job.source, "optimizer", e))?;
        tensor.set_watchdog(watchdog.share());
        st.set_tensor_group(tensor);
        st.set_micro_batches(job.parallel.micro_batches);
        let fault = crate::fault::from_env()?;
        let metrics = if comm.rank == 0 { Some(MetricsLog::open(&out_dir, start.epoch + 1)?) } else { None };
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
                rank: grid.d,
                ranks: grid.data,
                depth: 4,
                start_epoch: start.epoch,
                start_batch: start.step_in_epoch,
            },
        );
        Ok(Run {
            comm,
            job,
            grid,
            data_chan,
            st,
            loader: Some(loader),
            test_shard,
            metrics,
            watchdog,
            timeline,
            fault,
            out_dir,
            sched: schedule,
            steps,
            start_step: start.step,
            start_epoch: start.epoch,
            start_batch: start.step_in_epoch,
            start_loss_sum: start.loss_sums[grid.d],
            stop: StopState::new(start.lineage, start.loss_sums.clone()),
            t_process,
            last: None,
            last_ckpt: Instant::now(),
            last_progress: Instant::now(),
        })
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            comm: self.comm,
            job: self.job,
            grid: self.grid,
            global_batch: self.sched.global_batch,
            out_dir: &self.out_dir,
            fault: self.fault,
            watchdog: &self.watchdog,
            stop: &self.stop,
        }
    }

    /// Every remaining epoch; stops early (Preempted) when the ranks agree on a signal.
    pub fn epochs(&mut self) -> Result<Outcome> {
        liveness::set("training");
        for epoch in self.start_epoch + 1..=self.job.training.epochs {
            let resumed = epoch == self.start_epoch + 1;
            let (first, loss_sum) = if resumed { (self.start_batch, self.start_loss_sum) } else { (0, 0.0) };
            if let Some(o) = self.epoch(epoch, first, loss_sum)? {
                return Ok(o);
            }
        }
        Ok(Outcome::Completed)
    }

    /// One epoch from step `first` of it; Some(Preempted) when a signal stopped it.
    fn epoch(&mut self, epoch: usize, first: usize, mut loss_sum: f64) -> Result<Option<Outcome>> {
        let (comm, job, steps) = (self.comm, self.job, self.steps);
        let t0 = Instant::now();
        self.st.take_exposed();
        let mut at_epoch_end = false;
        let mut tally = Tally::default();
        for i in first..steps {
            let waiting = Instant::now();
            let loader = self.loader.as_ref().expect("loader alive until the last epoch ends");
            let batch = {
                let _p = liveness::phase_at("waiting for the data loader", self.st.step() + 1);
                loader.next()?
            };
            let _p = liveness::phase_at("a training step (forward, backward, optimizer)", self.st.step() + 1);
            let st = &mut self.st;
            crate::fault::maybe_fire(&self.fault, comm.rank, st.step() + 1, || st.nudge_one_parameter())?;
            // The loader and the schedule are two views of one rule; they must agree.
            assert_eq!(batch.rows, self.sched.rows(self.grid.d, i), "loader and schedule disagree at step {i}");
            let global_rows = self.sched.global_rows(i);
            let l = self.st.run(&batch, global_rows, waiting).map_err(|e| in_step(e, epoch, i + 1, comm.rank))?;
            liveness::step_done(self.st.step());
            loss_sum += l;
            tally.add(&batch);
            loader.give_back(batch);
            if self.st.step() == self.start_step + 1 && comm.rank == 0 {
                let since_exec = crate::sys::seconds_since_start().unwrap_or(f64::NAN);
                info!(
                    "first step done {since_exec:.3} s after process start ({:.3} s after main)",
                    self.t_process.elapsed().as_secs_f64()
                );
            }
            self.progress(epoch, first, i, t0, loss_sum);
            let d = &job.distribution;
            if d.check_every > 0 && self.st.step() % d.check_every as u64 == 0 {
                let _g = self.watchdog.guard(MAIN, "the parameter consistency check", self.st.step());
                // Within the data group: the copies of this rank's shard.
                check_agreement(
                    &self.data_chan,
                    &format!("the parameter checksum at step {}", self.st.step()),
                    checksum(&self.st.params_host()?),
                )
                .map_err(|e| Error::Mismatch(format!("{e}: the model replicas have diverged")))?;
            }
            // Agree on stopping and checkpointing, so every rank acts at the same step.
            let ck = &job.checkpoint;
            let time_due = comm.rank == 0
                && ck.every_minutes > 0.0
                && self.last_ckpt.elapsed().as_secs_f64() >= ck.every_minutes * 60.0;
            let before = if i == 0 { 0.0 } else { self.stop.total() };
            let boundary = stop::at_boundary(&self.ctx(), &self.st, epoch - 1, i + 1, loss_sum, time_due)?;
            if comm.rank == 0 && log::log_enabled!(log::Level::Debug) {
                // The step's mean loss over every rank's rows, from the agreement's sums.
                debug!("step {}: loss {:.9e}", self.st.step(), (self.stop.total() - before) / global_rows as f64);
            }
            match boundary {
                Boundary::Stopped => {
                    // This rank's rows of the cut epoch (the resumed loader logs the rest).
                    tally.log_before_stop(epoch, first + 1, i + 1);
                    return Ok(Some(Outcome::Preempted));
                }
                // The epoch's last step: checkpoint after its metrics, as the start of the next.
                Boundary::Checkpoint if i + 1 == steps => at_epoch_end = true,
                Boundary::Checkpoint => {
                    stop::save_checkpoint(&self.ctx(), &self.st, epoch - 1, i + 1)?;
                    self.last_ckpt = Instant::now();
                }
                Boundary::Continue => {}
            }
        }
        self.end_of_epoch(epoch, first, t0, loss_sum)?;
        if at_epoch_end {
            stop::save_checkpoint(&self.ctx(), &self.st, epoch, 0)?;
            self.last_ckpt = Instant::now();
        }
        Ok(None)
    }

    /// Rank 0's progress line, every `log_every` steps and/or `progress_seconds`.
    fn progress(&mut self, epoch: usize, first: usize, i: usize, t0: Instant, loss_sum: f64) {
        let (job, steps) = (self.job, self.steps);
        let every = job.training.log_every;
        let by_steps = every > 0 && (i + 1) % every == 0;
        let ps = job.training.progress_seconds;
        let by_time = ps > 0.0 && self.last_progress.elapsed().as_secs_f64() >= ps;
        if self.comm.rank != 0 || !(by_steps || by_time) {
            return;
        }
        self.last_progress = Instant::now();
        let done = i + 1 - first;
        let rate = self.sched.global_rows_in(first, i + 1) as f64 / t0.elapsed().as_secs_f64();
        let per_step = t0.elapsed().as_secs_f64() / done as f64;
        let left_epoch = (steps - i - 1) as f64 * per_step;
        let left_run = left_epoch + (job.training.epochs - epoch) as f64 * steps as f64 * per_step;
        info!(
            "epoch {epoch}/{}: step {}/{steps} ({:.0}%), loss {:.4} (rank 0's mean so far), {rate:.0} samples/s, \
             about {} left in the epoch, {} in the run",
            job.training.epochs,
            i + 1,
            100.0 * (i + 1) as f64 / steps as f64,
            loss_sum / self.sched.rows_before(0, i + 1) as f64,
            human(left_epoch),
            human(left_run)
        );
    }

    /// Test metrics (local work first; the watchdog then guards only the one collective),
    /// the epoch line and `metrics.jsonl`.
    fn end_of_epoch(&mut self, epoch: usize, first: usize, t0: Instant, loss_sum: f64) -> Result<()> {
        let (comm, job, steps) = (self.comm, self.job, self.steps);
        let secs = t0.elapsed().as_secs_f64();
        let done = steps - first;
        let exposed_ms = self.st.take_exposed().as_secs_f64() * 1e3 / done.max(1) as f64;
        // The share of the epoch this rank waited for its pipeline neighbours (its bubble).
        let (_, group) = self.st.backend_and_tensor();
        let waited = group.pipe.as_mut().map_or(0.0, |p| p.take_waited().as_secs_f64() / secs.max(1e-9));
        crate::model::placement::log_sum_time(comm.rank, epoch, secs, done);
        let test = match &self.test_shard {
            Some(sh) => {
                let (model, params) = (self.st.model().clone(), self.st.params_host()?);
                let (be, group) = self.st.backend_and_tensor();
                evaluate_in_group(be, &model, &params, sh, group)?
            }
            None => [0.0; 3],
        };
        // Evaluation's sums are not the next epoch's.
        crate::model::placement::reset_sum_time();
        // The rows this rank uses in the whole epoch (also before a resume), summed over ranks;
        // a replica counts once (its ranks all hold its losses).
        let mut totals = [loss_sum, self.sched.epoch_rows(self.grid.d) as f64, test[0], test[1], test[2], waited];
        if self.grid.t != 0 || self.grid.p != 0 {
            totals[..5].fill(0.0);
        }
        {
            let _g = self.watchdog.guard(MAIN, "the end-of-epoch metrics", self.st.step());
            comm.all_reduce_sum_f64(&mut totals);
        }
        let (test_loss, test_accuracy) = match &self.test_shard {
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
            samples_per_sec: self.sched.global_rows_in(first, steps) as f64 / secs,
            epoch_seconds: secs,
            exposed_comm_ms_per_step: exposed_ms,
            steps,
            samples: totals[1] as usize,
            ranks: comm.size,
            lr: self.st.opt().lr(),
            pipeline_bubble: (self.grid.pipeline > 1).then(|| totals[5] / comm.size as f64),
        };
        if let Some(log) = &self.metrics {
            info!(
                "epoch {epoch}/{}: train_loss {:.4}{}{} | {} samples, {:.0} samples/s ({:.2} s), exposed communication {:.3} ms/step",
                job.training.epochs,
                m.train_loss,
                m.test_loss.map(|l| format!(" test_loss {l:.4}")).unwrap_or_default(),
                m.test_accuracy.map(|a| format!(" test_accuracy {a:.4}")).unwrap_or_default(),
                m.samples,
                m.samples_per_sec,
                secs,
                exposed_ms
            );
            if let Some(b) = m.pipeline_bubble {
                let (p, mb) = (self.grid.pipeline, job.parallel.micro_batches);
                info!(
                    "epoch {epoch}/{}: pipeline bubble {:.1}% measured (the ranks' mean share of the epoch spent waiting \
                     for their neighbouring stages), {:.1}% ideal for {p} stages and {mb} micro-batch(es) ((P−1)/(M+P−1))",
                    job.training.epochs,
                    100.0 * b,
                    100.0 * crate::model::pipeline::ideal_bubble(p, mb)
                );
            }
            log.append(&m)?;
        }
        self.last = Some(m);
        Ok(())
    }

    /// After the last epoch: the timeline (collective) and rank 0's `weights.h5`.
    pub fn finish(&mut self) -> Result<()> {
        let comm = self.comm;
        self.loader = None;
        if let (Some(tl), Some(path)) = (&self.timeline, &self.job.output.timeline) {
            let _g = self.watchdog.guard(MAIN, "gathering the timeline", self.st.step());
            tl.write_all(comm, &comm.host, Path::new(path)).map_err(|e| Error::io(path, "write the timeline", e))?;
            if comm.rank == 0 {
                info!(
                    "timeline of {} rank(s) written to {path} (open in https://ui.perfetto.dev or chrome://tracing)",
                    comm.size
                );
            }
        }
        info!("peak RSS {:.1} MiB", crate::sys::peak_rss_mib().unwrap_or(f64::NAN));
        super::log_peak_memory(comm);
        // The whole model, assembled from replica 0's shards and stages on rank 0.
        let whole = if self.grid.d == 0 {
            let _p = liveness::phase("gathering the model's shards and stages for weights.h5");
            self.st.whole_params()?
        } else {
            None
        };
        if let Some(params) = whole.filter(|_| comm.rank == 0) {
            let _p = liveness::phase("writing weights.h5");
            let path = self.out_dir.join("weights.h5");
            weights::save(&self.st.tensor().full, &params, &path)?;
            match self.last.as_ref().and_then(|m| m.test_accuracy.map(|a| (a, m.epoch))) {
                Some((a, e)) => info!("done: test accuracy {a:.4} after {e} epochs; weights in {}", path.display()),
                None => info!("done after {} steps; weights in {}", self.st.step(), path.display()),
            }
        }
        Ok(())
    }
}
