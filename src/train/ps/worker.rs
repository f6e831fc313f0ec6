//! A parameter-server worker: its share of the data through the ordinary `Stepper`, whose
//! reducer pushes each gradient bucket to its server and brings the bucket's parameters back
//! (`parallel::ps::reducer`). No per-step agreement with the other workers (that would make
//! every step synchronous): workers meet only at epoch ends (metrics) and checkpoints.
//!
//! Epoch end: every worker finishes its steps at its own pace; the epoch ends when the last
//! one has (a worker all-gather, which is also the point where every pushed gradient has
//! been applied); each worker then pulls every bucket, so all evaluate and go on from the
//! same parameters. Checkpoints are taken at such a meeting point too: worker 0 gathers the
//! whole state from the servers while the others wait, so it holds exactly the updates of
//! every worker's steps up to the checkpoint's.

use super::super::restore::Start;
use super::super::{in_step, Outcome};
use crate::checkpoint::{self, Checkpoint};
use crate::config::Job;
use crate::data::loader::{Loader, LoaderCfg, Schedule};
use crate::data::shard::Shard;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::eval::{eval_result, evaluate_local, expect};
use crate::metrics::{EpochMetrics, MetricsLog};
use crate::model::Mlp;
use crate::optim::Optimizer;
use crate::parallel::comm::Link;
use crate::parallel::liveness::{self, phase, phase_at};
use crate::parallel::ps::reducer::{self, PushPull};
use crate::parallel::ps::Roles;
use crate::parallel::watchdog::Watchdog;
use crate::parallel::{Channel, Comm, Engine, FusionPlan};
use crate::step::Stepper;
use log::info;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub(super) struct Worker<'a> {
    pub comm: &'a Comm,
    pub job: &'a Job,
    /// The workers' communicator (ranks 0..W, in world order).
    pub workers: Channel,
    pub link: Link,
    pub roles: Roles,
    pub plan: FusionPlan,
    pub whole: Mlp,
    pub start: Start,
    pub t_process: Instant,
}

impl crate::device::WithBackend<Outcome> for Worker<'_> {
    fn run<B: Backend>(self, be: B) -> Result<Outcome> {
        Run::new(self, be)?.run()
    }
}

struct Run<'a, B: Backend> {
    w: Worker<'a>,
    st: Stepper<B>,
    loader: Option<Loader>,
    test: Option<Shard>,
    sched: Schedule,
    metrics: Option<MetricsLog>,
    fault: Option<crate::fault::Fault>,
    out_dir: PathBuf,
    _watchdog: Watchdog,
}

impl<'a, B: Backend> Run<'a, B> {
    fn new(w: Worker<'a>, be: B) -> Result<Run<'a, B>> {
        let (job, rank, n) = (w.job, w.comm.rank, w.roles.workers);
        let b = job.training.batch_size;
        let p = phase("opening the training and test data");
        let want = expect(&w.whole);
        // Only workers read data: every worker opens all the training rows and takes worker
        // r's part of each step's global batch from the epoch's global order (as data rank r of
        // W under all-reduce); worker r evaluates test slice r of W.
        let train = Shard::open(&job.data, "data.train", &job.data.train, 0, 1, want)?;
        let test = match &job.data.test {
            Some(t) => Some(Shard::open(&job.data, "data.test", t, rank, n, want)?),
            None => None,
        };
        drop(p);
        let sched = Schedule::new(train.len(), b * n, n, job.data.drop_last);
        if sched.steps == 0 {
            return Err(Error::config(
                &job.source,
                "training.batch_size",
                format!(
                    "the global batch {} ({b} per worker x {n} workers) is larger than the training data ({} samples) \
                     with data.drop_last = true",
                    b * n,
                    train.len()
                ),
            ));
        }
        if rank == 0 {
            info!(
                "{} epochs of {} steps per worker, batch {b} per worker = up to {} global; {} of the {} training samples \
                 per epoch over {n} worker(s); backend: {}",
                job.training.epochs,
                sched.steps,
                b * n,
                sched.global_rows_in(0, sched.steps),
                sched.rows,
                be.name()
            );
        }
        let d = &job.distribution;
        let watchdog = Watchdog::start(Duration::from_secs_f64(d.watchdog_seconds), rank, w.comm.host.clone());
        let reducer = Box::new(PushPull::new(w.link, &w.roles, w.start.step));
        let alloc = crate::step::bucket_buffers(&be, &w.plan)?;
        let engine = Engine::new(reducer, w.plan.clone(), d.overlap, None, Some(watchdog.share()), alloc);
        let opt = Optimizer::assign(&be, &job.optimizer, w.whole.tensors(), w.whole.n_params)?;
        let mut st = Stepper::new(be, w.whole.clone(), &w.start.params, opt, engine, b, None)?;
        st.restore(&[], &[], w.start.step).map_err(Error::Training)?;
        let loader = Loader::spawn(
            train,
            LoaderCfg {
                batch: b,
                steps: sched.steps,
                epochs: job.training.epochs,
                shuffle: job.data.shuffle,
                block: job.data.shuffle_block,
                window: job.data.shuffle_window,
                seed: job.training.seed,
                rank,
                ranks: n,
                depth: 4,
                start_epoch: w.start.epoch,
                start_batch: w.start.step_in_epoch,
            },
        );
        let out_dir = PathBuf::from(&job.output.dir);
        let metrics = if rank == 0 { Some(MetricsLog::open(&out_dir, w.start.epoch + 1)?) } else { None };
        let fault = crate::fault::from_env()?;
        Ok(Run { w, st, loader: Some(loader), test, sched, metrics, fault, out_dir, _watchdog: watchdog })
    }

    fn run(mut self) -> Result<Outcome> {
        liveness::set("training (parameter-server worker)");
        let (first_epoch, epochs) = (self.w.start.epoch + 1, self.w.job.training.epochs);
        for epoch in first_epoch..=epochs {
            let (first, sum) = if epoch == first_epoch {
                (self.w.start.step_in_epoch, self.w.start.loss_sums[self.w.comm.rank])
            } else {
                (0, 0.0)
            };
            self.epoch(epoch, first, sum)?;
        }
        self.finish()?;
        Ok(Outcome::Completed)
    }

    fn epoch(&mut self, epoch: usize, first: usize, mut loss_sum: f64) -> Result<()> {
        let (rank, steps, job) = (self.w.comm.rank, self.sched.steps, self.w.job);
        let t0 = Instant::now();
        self.st.take_exposed();
        for i in first..steps {
            let waiting = Instant::now();
            let loader = self.loader.as_ref().expect("loader alive until the end");
            let batch = {
                let _p = phase_at("waiting for the data loader", self.st.step() + 1);
                loader.next()?
            };
            let _p = phase_at("a training step (push gradients, pull parameters)", self.st.step() + 1);
            let st = &mut self.st;
            crate::fault::maybe_fire(&self.fault, rank, st.step() + 1, || st.nudge_one_parameter())?;
            assert_eq!(batch.rows, self.sched.rows(rank, i), "loader and schedule disagree at step {i}");
            let l =
                self.st.run(&batch, self.sched.global_rows(i), waiting).map_err(|e| in_step(e, epoch, i + 1, rank))?;
            liveness::step_done(self.st.step());
            loss_sum += l;
            loader.give_back(batch);
            if crate::signals::stop_requested() {
                // No agreement per step here (workers are at different steps), so no stop
                // checkpoint: end the job; the last every_steps checkpoint is where to resume.
                return Err(Error::Training(format!(
                    "stopped by a signal at step {}: strategy = \"parameter_server\" writes no stop checkpoint; \
                     resume with --resume auto from the last checkpoint (checkpoint.every_steps)",
                    self.st.step()
                )));
            }
            let every = job.training.log_every;
            if rank == 0 && every > 0 && (i + 1) % every == 0 {
                let rate = self.sched.rows_before(0, i + 1).saturating_sub(self.sched.rows_before(0, first)) as f64
                    / t0.elapsed().as_secs_f64();
                info!(
                    "epoch {epoch}/{}: step {}/{steps}, loss {:.4} (worker 0's mean so far), worker 0 at {rate:.0} samples/s",
                    job.training.epochs,
                    i + 1,
                    loss_sum / self.sched.rows_before(0, i + 1).max(1) as f64
                );
            }
            let ck = job.checkpoint.every_steps;
            if ck > 0 && self.st.step() % ck == 0 && i + 1 < steps {
                self.checkpoint(epoch - 1, i + 1, loss_sum)?;
            }
        }
        let my_secs = t0.elapsed().as_secs_f64();
        let my_rows = self.sched.rows_before(rank, steps) - self.sched.rows_before(rank, first);
        self.end_of_epoch(epoch, first, t0, my_rows as f64 / my_secs, loss_sum)?;
        let ck = job.checkpoint.every_steps;
        if ck > 0 && self.st.step() % ck == 0 {
            self.checkpoint(epoch, 0, 0.0)?;
        }
        Ok(())
    }

    /// Wait for every worker, pull the current parameters, evaluate, and log the epoch.
    fn end_of_epoch(&mut self, epoch: usize, first: usize, t0: Instant, my_rate: f64, loss_sum: f64) -> Result<()> {
        let (rank, job) = (self.w.comm.rank, self.w.job);
        let rates: Vec<f64> = {
            let _p = phase_at("waiting for the other workers at the end of the epoch", self.st.step());
            self.w.workers.all_gather_u64(my_rate.to_bits()).into_iter().map(f64::from_bits).collect()
        };
        let secs = t0.elapsed().as_secs_f64();
        let exposed_ms = self.st.take_exposed().as_secs_f64() * 1e3 / (self.sched.steps - first).max(1) as f64;
        self.pull()?;
        let test = match &self.test {
            Some(sh) => {
                let _p = phase("evaluating on the test data");
                evaluate_local(self.st.backend(), &self.w.whole, &self.st.params_host()?, sh)?
            }
            None => [0.0; 3],
        };
        let mut totals = [loss_sum, self.sched.epoch_rows(rank) as f64, test[0], test[1], test[2]];
        self.w.workers.all_reduce_sum_f64(&mut totals);
        let Some(log) = &self.metrics else { return Ok(()) };
        let (test_loss, test_accuracy) = match &self.test {
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
            samples_per_sec: self.sched.global_rows_in(first, self.sched.steps) as f64 / secs,
            epoch_seconds: secs,
            exposed_comm_ms_per_step: exposed_ms,
            steps: self.sched.steps,
            samples: totals[1] as usize,
            ranks: self.w.roles.workers,
            lr: job.optimizer.lr,
            pipeline_bubble: None,
        };
        let stats = reducer::stats(&self.w.link, &self.w.roles);
        let per: Vec<String> = rates.iter().enumerate().map(|(r, v)| format!("worker {r} {v:.0}")).collect();
        info!(
            "epoch {epoch}/{}: train_loss {:.4}{}{} | {} samples, {:.0} samples/s ({:.2} s); per-worker samples/s: {}; {}",
            job.training.epochs,
            m.train_loss,
            m.test_loss.map(|l| format!(" test_loss {l:.4}")).unwrap_or_default(),
            m.test_accuracy.map(|a| format!(" test_accuracy {a:.4}")).unwrap_or_default(),
            m.samples,
            m.samples_per_sec,
            secs,
            per.join(", "),
            stats.describe()
        );
        log.append(&m)
    }

    /// Every bucket's current parameters from the servers into the stepper.
    fn pull(&mut self) -> Result<()> {
        let _p = phase_at("pulling the parameters from the servers", self.st.step());
        let mut p = vec![0.0; self.w.whole.n_params];
        reducer::pull_all(&self.w.link, &self.w.roles, &self.w.plan, &mut p);
        self.st.set_params_host(&p)
    }

    /// Collective over the workers: a checkpoint after step `step_in_epoch` of epoch
    /// `epoch_index + 1`, assembled from the servers by worker 0 while the others wait.
    fn checkpoint(&mut self, epoch_index: usize, step_in_epoch: usize, loss_sum: f64) -> Result<()> {
        let w = &self.w;
        let sums: Vec<f64> = {
            let _p = phase_at("waiting for the other workers to checkpoint", self.st.step());
            w.workers.all_gather_u64(loss_sum.to_bits()).into_iter().map(f64::from_bits).collect()
        };
        if w.comm.rank == 0 {
            let _p = phase_at("gathering the state from the servers and writing a checkpoint", self.st.step());
            let (m_len, v_len) = crate::optim::state_lens(&w.job.optimizer, w.whole.n_params);
            let (params, m, v) = reducer::snapshot(&w.link, &w.roles, &w.plan, m_len, v_len);
            let c = Checkpoint {
                step: self.st.step(),
                epoch: epoch_index,
                step_in_epoch,
                world_size: w.roles.workers,
                global_batch: self.sched.global_batch,
                loss_sums: if step_in_epoch == 0 { vec![0.0; sums.len()] } else { sums },
                loss_sums_exact: true,
                params,
                m,
                v,
                job_json: serde_json::to_string(w.job).expect("job serializes"),
                lineage: w.start.lineage,
                written_at: checkpoint::now_ms(),
            };
            let t = Instant::now();
            let path = checkpoint::save(&self.out_dir, &w.whole, &c, w.job.checkpoint.keep, || {
                crate::fault::in_checkpoint(&self.fault, 0, c.step)
            })?;
            info!("checkpoint {} written ({:.0} ms)", path.display(), t.elapsed().as_secs_f64() * 1e3);
        }
        let _p = phase_at("waiting at the barrier for worker 0's checkpoint write", self.st.step());
        w.workers.all_gather_u64(0);
        Ok(())
    }

    /// After the last epoch: worker 0 writes weights.h5 (the parameters pulled at the last
    /// epoch's end: every update applied), then every worker tells the servers it is done.
    fn finish(&mut self) -> Result<()> {
        self.loader = None;
        info!("peak RSS {:.1} MiB", crate::sys::peak_rss_mib().unwrap_or(f64::NAN));
        if self.w.comm.rank == 0 {
            let _p = phase("writing weights.h5");
            let path = self.out_dir.join("weights.h5");
            crate::weights::save(&self.w.whole, &self.st.params_host()?, &path)?;
            info!(
                "done after {} steps ({:.1} s); weights in {}",
                self.st.step(),
                self.w.t_process.elapsed().as_secs_f64(),
                path.display()
            );
        }
        reducer::done(&self.w.link, &self.w.roles);
        Ok(())
    }
}
