//! The one training loop, for every mode: batches from the loader through the `Stepper`,
//! faults, the progress line, the mode's step boundary (stop, checkpoint), the end-of-epoch
//! evaluation, metrics line and `metrics.jsonl`, and at the end the timeline, the memory line
//! and `weights.h5`. What differs between modes is behind `Mode` (`mode.rs`).
//!
//! Must not: ask which mode it runs.

use super::autotune::{Autotune, Switch};
use super::mode::{At, Boundary, Mode};
use super::restore::Start;
use super::trainer::TrainerState;
use super::watch::Watch;
use super::{human, in_step, Outcome};
use crate::config::Job;
use crate::data::loader::{Loader, LoaderCfg, Schedule, Tally};
use crate::data::shard::Shard;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::fault::Fault;
use crate::metrics::{regression, EpochMetrics, MetricsLog};
use crate::parallel::liveness;
use crate::parallel::timeline::Timeline;
use crate::parallel::watchdog::MAIN;
use crate::parallel::Comm;
use crate::step::{Stepper, Sums};
use crate::weights;
use log::info;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

mod epoch_end;

/// `output.keep_best`'s file in output.dir: the best epoch's weights so far.
const BEST: &str = "best-weights.h5";

/// How an epoch ended.
enum EpochEnd {
    Go,
    /// Early stopping: the run ends cleanly here.
    EarlyStop,
    /// A signal stopped it (the stop checkpoint is written).
    Stopped(Outcome),
    /// `hvtrain lr-find`'s range test ended (its steps, or the loss diverged).
    LrFound,
}

/// What a mode builds for the loop.
pub(super) struct Parts<'a, B: Backend> {
    pub comm: &'a Comm,
    pub job: &'a Job,
    pub st: Stepper<B>,
    pub train: Shard,
    pub test: Option<Shard>,
    pub validation: Option<Shard>,
    /// Steps per epoch and the rows of every data rank in each.
    pub sched: Schedule,
    /// This rank's data rank (its replica, or its worker index) and their count.
    pub data_rank: usize,
    pub data_ranks: usize,
    pub start: Start,
    pub timeline: Option<Arc<Timeline>>,
    pub out_dir: PathBuf,
    pub t_process: Instant,
}

/// The epoch's train metrics (running, over the epoch's steps).
struct TrainMetrics {
    accuracy: Option<f64>,
    top5: Option<f64>,
    regression: Option<regression::Regression>,
}

pub(super) struct Run<'a, B: Backend, M: Mode<B>> {
    comm: &'a Comm,
    job: &'a Job,
    st: Stepper<B>,
    mode: M,
    loader: Option<Loader>,
    test: Option<Shard>,
    validation: Option<Shard>,
    metrics: Option<MetricsLog>,
    timeline: Option<Arc<Timeline>>,
    fault: Option<Fault>,
    out_dir: PathBuf,
    sched: Schedule,
    data_rank: usize,
    /// Where this run started: global step, epochs done, steps of the next epoch done, and
    /// this rank's running sums in it.
    start_step: u64,
    start_epoch: usize,
    start_batch: usize,
    start_sums: Sums,
    t_process: Instant,
    last: Option<EpochMetrics>,
    /// The last evaluation's per-class figures, of the test data (else the validation data),
    /// for the report at the end.
    last_classes: Option<(crate::metrics::classes::PerClass, Option<crate::metrics::auc::Ranking>, &'static str)>,
    last_progress: Instant,
    /// `hvtrain lr-find`: the range test's record.
    finder: Option<super::lr_find::Finder>,
    /// The data's normalization, for weights.h5.
    norm: crate::data::norm::Norm,
    /// The training data's class and column names, for weights.h5.
    names: weights::Names,
    /// The monitored metric (early stopping, keep_best, plateau) and the trainer's state.
    watch: Watch,
    trainer: TrainerState,
    /// `distribution.autotune`'s search (None when off).
    autotune: Option<Autotune>,
    /// The next step's batch, taken from the loader at the end of the step before and
    /// already on its way to the device (`Stepper::prefetch`).
    ahead: Option<crate::data::loader::Batch>,
}

impl<'a, B: Backend, M: Mode<B>> Run<'a, B, M> {
    pub fn new(p: Parts<'a, B>, mode: M) -> Result<Run<'a, B, M>> {
        let (job, start) = (p.job, &p.start);
        // lr-find's record is lr_find.csv: no metrics.jsonl (it would have no epoch).
        let metrics = match p.comm.rank {
            0 if job.lr_find.is_none() => {
                let log = MetricsLog::open(&p.out_dir, start.epoch + 1)?;
                Some(match job.output.tensorboard {
                    true => {
                        log.with_tensorboard(start.epoch + 1, start.step, &toml::to_string(job).unwrap_or_default())?
                    }
                    false => log,
                })
            }
            _ => None,
        };
        let norm = p.train.norm().clone();
        let names = weights::Names::of(&p.train);
        let mut st = p.st;
        let ids_only = super::on_device::place(job, &mut st, &p.train, p.comm.rank)?;
        let loader = Loader::spawn(
            p.train,
            LoaderCfg {
                batch: p.sched.batch,
                steps: p.sched.steps,
                epochs: job.training.epochs,
                shuffle: job.data.shuffle,
                block: job.data.shuffle_block,
                window: job.data.shuffle_window,
                seed: job.training.seed,
                rank: p.data_rank,
                ranks: p.data_ranks,
                depth: 4,
                cache_bytes: (job.data.cache_mb * 1048576.0) as usize,
                start_epoch: start.epoch,
                start_batch: start.step_in_epoch,
                ids_only,
            },
        );
        let trainer = TrainerState::from_json(&start.trainer_json, start.from.as_deref().unwrap_or(Path::new("-")))?;
        if let Some(p) = trainer.plateau {
            st.opt_mut().schedule_mut().plateau = p;
        }
        mode.set_trainer_state(trainer.to_json());
        let watch = Watch::new(job, &trainer);
        // Several nodes: fewer ranks share this one than there are (HVTRAIN_NODE_SIZE draws nodes in tests).
        let node_size = std::env::var("HVTRAIN_NODE_SIZE").ok().and_then(|v| v.parse::<usize>().ok());
        let multi_node = node_size.map_or(p.comm.local_size < p.comm.size, |k| k > 0 && k < p.comm.size);
        let autotune = Autotune::new(job, &p.out_dir, mode.trainers(), p.comm.rank, p.comm.size, multi_node)?;
        Ok(Run {
            autotune,
            ahead: None,
            comm: p.comm,
            job,
            mode,
            loader: Some(loader),
            test: p.test,
            validation: p.validation,
            metrics,
            timeline: p.timeline,
            fault: crate::fault::from_env()?,
            out_dir: p.out_dir,
            sched: p.sched,
            data_rank: p.data_rank,
            start_step: start.step,
            start_epoch: start.epoch,
            start_batch: start.step_in_epoch,
            start_sums: start.loss_sums[p.data_rank].clone(),
            t_process: p.t_process,
            last: None,
            last_classes: None,
            last_progress: Instant::now(),
            finder: job.lr_find.map(super::lr_find::Finder::new),
            norm,
            names,
            watch,
            trainer,
            st,
        })
    }

    /// Every remaining epoch, then (when not stopped) the final outputs.
    pub fn run(mut self) -> Result<Outcome> {
        liveness::set("training");
        for epoch in self.start_epoch + 1..=self.job.training.epochs {
            let resumed = epoch == self.start_epoch + 1;
            let (first, sums) =
                if resumed { (self.start_batch, self.start_sums.clone()) } else { (0, vec![0.0; self.st.sums_len()]) };
            match self.epoch(epoch, first, sums)? {
                EpochEnd::Stopped(o) => return Ok(o),
                EpochEnd::LrFound => return self.lr_found(),
                EpochEnd::EarlyStop => break,
                EpochEnd::Go => {}
            }
            if self.pauses_after(epoch) {
                return self.pause(epoch);
            }
        }
        self.finish()?;
        Ok(Outcome::Completed)
    }

    /// One epoch from step `first` of it: stopped by a signal, ended by early stopping, or go on.
    fn epoch(&mut self, epoch: usize, first: usize, mut sums: Sums) -> Result<EpochEnd> {
        let steps = self.sched.steps;
        let t0 = Instant::now();
        self.st.take_exposed();
        let mut at_epoch_end = false;
        let mut tally = Tally::default();
        for i in first..steps {
            let t_step = Instant::now();
            let lr = self.st.opt().lr(); // the rate this step's update takes
            let s = self.step(epoch, i, &mut tally)?;
            let step_secs = t_step.elapsed().as_secs_f64();
            sums.iter_mut().zip(s).for_each(|(a, b)| *a += b);
            self.progress(epoch, first, i, t0, sums[0]);
            self.board_steps(first, i, t0, sums[0])?;
            let rows = self.sched.global_rows(i);
            let at = At { epoch_index: epoch - 1, step_in_epoch: i + 1, last: i + 1 == steps, rows };
            let boundary = self.mode.after_step(&self.st, at, &sums)?;
            match boundary {
                Boundary::Stopped => {
                    // This rank's rows of the cut epoch (the resumed loader logs the rest).
                    tally.log_before_stop(epoch, first + 1, i + 1);
                    return Ok(EpochEnd::Stopped(Outcome::Preempted));
                }
                // The epoch's last step: checkpoint after its metrics, as the start of the next.
                Boundary::Checkpoint if at.last => at_epoch_end = true,
                Boundary::Checkpoint => self.mode.checkpoint(&self.st, at, &sums)?,
                Boundary::Continue | Boundary::Diverged => {}
            }
            if let Some(f) = self.finder.as_mut() {
                let diverged = matches!(boundary, Boundary::Diverged);
                let loss = if diverged { f64::NAN } else { self.mode.step_loss().unwrap_or(f64::NAN) };
                if f.observe(lr, loss) {
                    return Ok(EpochEnd::LrFound);
                }
            }
            if let Some(a) = &mut self.autotune {
                if let Switch::To(s) = a.after_step(step_secs, self.mode.trainers(), self.comm.rank)? {
                    self.mode.retune(&mut self.st, s)?;
                }
            }
        }
        let early_stop = self.end_of_epoch(epoch, first, t0, &sums)?;
        if at_epoch_end || (self.pauses_after(epoch) && !early_stop) {
            self.mode.checkpoint(
                &self.st,
                At { epoch_index: epoch, step_in_epoch: 0, last: false, rows: 0 },
                &vec![0.0; self.st.sums_len()],
            )?;
        }
        Ok(if early_stop { EpochEnd::EarlyStop } else { EpochEnd::Go })
    }

    /// The end of `hvtrain lr-find`'s run: rank 0 writes the curve and says what it
    /// suggests; no weights, no checkpoint (collective only in the mode's end).
    fn lr_found(mut self) -> Result<Outcome> {
        self.loader = None;
        if let (0, Some(f)) = (self.comm.rank, &self.finder) {
            let path = self.out_dir.join("lr_find.csv");
            f.write(&path)?;
            f.report(self.job, self.mode.trainers().size, &path);
            f.draw(&self.out_dir.join("lr_find.png"), &self.job.source);
        }
        self.mode.finish()?;
        Ok(Outcome::Completed)
    }

    /// Whether the run pauses after `epoch` (a sweep's rung, `Job::pause_after_epoch`): the
    /// epoch's end checkpoint is written, then `pause`.
    fn pauses_after(&self, epoch: usize) -> bool {
        self.job.pause_after_epoch == Some(epoch) && epoch < self.job.training.epochs
    }

    /// Collective over the trainers: the current weights into `path` on rank 0 (where
    /// `write`; the gathers happen either way), true there. Where no rank holds the whole
    /// model (`shard = "parameters"`, tensor or pipeline parallelism) each layer is gathered
    /// and written in turn (`weights::Layered`, `Stepper::params_by_layer`); otherwise rank 0
    /// holds it already (`Mode::whole_params`).
    /// With `optimizer.ema` the weights written are the moving average.
    fn write_weights(&mut self, path: &Path, write: bool, phase: &'static str) -> Result<bool> {
        let ema = self.st.swap_ema();
        let wrote = self.write_weights_now(path, write, phase);
        if ema {
            self.st.swap_ema();
        }
        wrote
    }

    /// `write_weights` of the parameters as they are in the stepper.
    fn write_weights_now(&mut self, path: &Path, write: bool, phase: &'static str) -> Result<bool> {
        let _p = liveness::phase(phase);
        let model = &self.st.tensor().full;
        let mut file = None;
        let by_layer = self.st.params_by_layer(self.data_rank, &mut |l, slot| {
            if !write {
                return Ok(());
            }
            if file.is_none() {
                file = Some(weights::Layered::create(model, &self.norm, path)?);
            }
            file.as_mut().expect("created above").layer(l, slot)
        })?;
        if by_layer {
            if let Some(f) = file {
                f.finish(&self.names)?;
                info!(
                    "{}: gathered and written one layer at a time (no rank held more than {:.1} MiB of the model's \
                     {:.1} MiB)",
                    path.display(),
                    model.largest_slot() as f64 * 4.0 / 1048576.0,
                    model.n_params as f64 * 4.0 / 1048576.0
                );
            }
            return Ok(self.comm.rank == 0);
        }
        let Some(params) = self.mode.whole_params(&self.st)? else { return Ok(false) };
        if write {
            weights::save(model, &params, &self.norm, &self.names, path)?;
        }
        Ok(true)
    }

    /// The end of a paused run (after its checkpoint): weights.h5 of this epoch, then the
    /// mode's end. A later run with the same job resumes from the checkpoint.
    fn pause(mut self, epoch: usize) -> Result<Outcome> {
        self.loader = None;
        let path = self.out_dir.join("weights.h5");
        if self.write_weights(&path, true, "writing weights.h5")? {
            info!(
                "paused after epoch {epoch}/{} (a sweep's rung): checkpoint and weights.h5 in {}",
                self.job.training.epochs,
                self.out_dir.display()
            );
        }
        self.mode.finish()?;
        Ok(Outcome::Paused)
    }

    /// Step `i` of epoch `epoch`: this rank's sums over its rows of the step.
    fn step(&mut self, epoch: usize, i: usize, tally: &mut Tally) -> Result<Sums> {
        let rank = self.comm.rank;
        let waiting = Instant::now();
        let loader = self.loader.as_ref().expect("loader alive until the last epoch ends");
        let batch = match self.ahead.take() {
            Some(b) => b,
            None => {
                let _p = liveness::phase_at("waiting for the data loader", self.st.step() + 1);
                loader.next()?
            }
        };
        let _p = liveness::phase_at(self.mode.step_phase(), self.st.step() + 1);
        let st = &mut self.st;
        crate::fault::maybe_fire(&self.fault, rank, st.step() + 1, || st.nudge_one_parameter())?;
        // The loader and the schedule are two views of one rule; they must agree.
        assert_eq!(batch.rows, self.sched.rows(self.data_rank, i), "loader and schedule disagree at step {i}");
        let l = self.st.run(&batch, self.sched.global_rows(i), waiting).map_err(|e| in_step(e, epoch, i + 1, rank))?;
        self.mode.after_update(&mut self.st).map_err(|e| in_step(e, epoch, i + 1, rank))?;
        liveness::step_done(self.st.step());
        tally.add(&batch);
        loader.give_back(batch);
        // The epoch's next batch, copied to the device while this step's kernels still run.
        if i + 1 < self.sched.steps && self.st.prefetches() {
            let next = {
                let _p = liveness::phase_at("waiting for the data loader (the next batch)", self.st.step());
                loader.next()?
            };
            self.st.prefetch(&next)?;
            self.ahead = Some(next);
        }
        if self.st.step() == self.start_step + 1 && rank == 0 {
            super::runlock::running();
            let since_exec = crate::sys::seconds_since_start().unwrap_or(f64::NAN);
            info!(
                "first step done {since_exec:.3} s after process start ({:.3} s after main)",
                self.t_process.elapsed().as_secs_f64()
            );
        }
        Ok(l)
    }

    /// Rank 0's TensorBoard scalars every `output.tensorboard_every_steps` global steps.
    fn board_steps(&mut self, first: usize, i: usize, t0: Instant, loss_sum: f64) -> Result<()> {
        let every = self.job.output.tensorboard_every_steps as u64;
        let step = self.st.step();
        let Some(log) = self.metrics.as_mut().filter(|_| every > 0 && step.is_multiple_of(every)) else {
            return Ok(());
        };
        let rate = self.sched.global_rows_in(first, i + 1) as f64 / t0.elapsed().as_secs_f64();
        let loss = loss_sum / self.sched.rows_before(0, i + 1).max(1) as f64;
        log.steps(step, loss, rate, self.st.opt().lr())
    }

    /// Rank 0's progress line, every `log_every` steps and/or `progress_seconds`.
    fn progress(&mut self, epoch: usize, first: usize, i: usize, t0: Instant, loss_sum: f64) {
        let (job, steps) = (self.job, self.sched.steps);
        let every = job.training.log_every;
        let by_steps = every > 0 && (i + 1).is_multiple_of(every);
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
            loss_sum / self.sched.rows_before(0, i + 1).max(1) as f64,
            human(left_epoch),
            human(left_run)
        );
    }

    /// After the last epoch: the timeline (collective), the memory lines, rank 0's
    /// `weights.h5`, then the mode's own end.
    fn finish(&mut self) -> Result<()> {
        let comm = self.comm;
        self.loader = None;
        if let (Some(tl), Some(path)) = (&self.timeline, &self.job.output.timeline) {
            let _g = self.mode.watchdog().guard(MAIN, "gathering the timeline", self.st.step());
            tl.write_all(comm, &comm.host, Path::new(path)).map_err(|e| Error::io(path, "write the timeline", e))?;
            if comm.rank == 0 {
                info!(
                    "timeline of {} rank(s) written to {path} (open in https://ui.perfetto.dev or chrome://tracing)",
                    comm.size
                );
            }
        }
        info!("peak RSS {:.1} MiB", crate::sys::peak_rss_mib().unwrap_or(f64::NAN));
        if let (ops @ 1.., gemms) = crate::device::amx::counts() {
            // The proof that the tiles ran (tests and the bench read it).
            info!("AMX: {ops} tile products (TDPBF16PS) in {gemms} matrix products on this rank");
        }
        if let Some((c, waited)) = self.st.gather_counts() {
            // Every rank's: a pipeline stage's layers and waits are its own.
            info!(
                "layer gathers (shard = \"parameters\"): {} layers fetched: {} gathered ahead while the layer before \
                 computed, {} still held in the second window, {} gathered when fetched ({} gathered ahead and not \
                 used); {}",
                c.fetched,
                c.ahead,
                c.held,
                c.fetched - c.ahead - c.held,
                c.wasted,
                match waited {
                    Some(w) => format!("the main thread waited {:.3} s for the gather thread", w.as_secs_f64()),
                    None => "no gather thread (each layer gathered by the main thread when fetched)".to_string(),
                }
            );
        }
        super::log_peak_memory(self.mode.trainers());
        // The model's weights on rank 0 (keep_best: the best epoch's, copied there).
        let path = self.out_dir.join("weights.h5");
        let best = self.out_dir.join(BEST);
        let copy_best = self.comm.rank == 0 && self.job.output.keep_best && best.exists();
        if self.write_weights(&path, !copy_best, "writing weights.h5")? {
            if copy_best {
                // The best epoch's weights, written when it ended; the checkpoints hold the last.
                let tmp = weights::tmp_path(&path);
                std::fs::copy(&best, &tmp).map_err(|e| Error::io(&tmp, "copy the best weights", e))?;
                weights::commit(&tmp, &path, "rename the best weights into place", || {})?;
                info!(
                    "keep_best: weights.h5 holds epoch {}'s weights ({} {:.6}, the best); the checkpoints hold the last epoch's",
                    self.watch.best_epoch,
                    self.watch.name,
                    self.watch.best.value.map(|b| self.watch.shown(b)).unwrap_or(f64::NAN)
                );
            }
            super::runlock::done();
            if let Some((c, ranking, what)) = &self.last_classes {
                for line in crate::metrics::classes::report(c, ranking.as_ref(), &self.names.class_names, what) {
                    info!("{line}");
                }
            }
            match self.last.as_ref().and_then(|m| m.test_accuracy.map(|a| (a, m.epoch))) {
                Some((a, e)) => info!("done: test accuracy {a:.4} after {e} epochs; weights in {}", path.display()),
                None => info!(
                    "done after {} steps ({:.1} s); weights in {}",
                    self.st.step(),
                    self.t_process.elapsed().as_secs_f64(),
                    path.display()
                ),
            }
        }
        self.mode.finish()
    }
}
