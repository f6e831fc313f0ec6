//! A parameter-server worker: builds the ordinary `Stepper`, whose reducer pushes each
//! gradient bucket to its server and brings the bucket's parameters back
//! (`parallel::ps::reducer`), and supplies the one training loop's `Mode` (`run.rs` runs it). No per-step agreement with the other workers (that would make
//! every step synchronous): workers meet only at epoch ends (metrics) and checkpoints.
//!
//! Epoch end: every worker finishes its steps at its own pace; the epoch ends when the last
//! one has (a worker all-gather, which is also the point where every pushed gradient has
//! been applied); each worker then pulls every bucket, so all evaluate and go on from the
//! same parameters. Checkpoints are taken at such a meeting point too: worker 0 gathers the
//! whole state from the servers while the others wait, so it holds exactly the updates of
//! every worker's steps up to the checkpoint's.
//!
//! Stop on a signal (SIGTERM, SIGUSR1: Slurm's preemption): the workers must stop after one
//! and the same step, without a per-step agreement. After each step every worker starts a
//! non-blocking OR of "I was signalled" over the workers (`Channel::ivote`) and completes the
//! vote of `vote_delay` steps before (the epoch's last ones at its end meeting, which then
//! stops the run after the next step). Every worker completes the same votes at the same step,
//! so all see the first yes at the same step and stop there; a worker waits only for workers more than `vote_delay` steps behind it, which
//! the staleness bound already rules out. With staleness −1 (no bound) there is no such
//! delay: the workers vote only where they meet anyway (a periodic checkpoint, the epoch's
//! end), so the stop waits for the next of those. Then the stop checkpoint (as a periodic one: the servers' state
//! gathered by worker 0, every worker's running sums), DONE to the servers, exit 75.
//!
//! Must not: run the epoch loop.

use super::super::mode::{At, Boundary, Mode};
use super::super::restore::Start;
use super::super::run::{Parts, Run};
use super::super::save::Writer;
use super::super::setup::open_data;
use super::super::Outcome;
use crate::config::Job;
use crate::data::loader::Schedule;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::model::Mlp;
use crate::optim::Optimizer;
use crate::parallel::comm::{Link, Vote};
use crate::parallel::liveness::phase_at;
use crate::parallel::ps::reducer::{self, PushPull};
use crate::parallel::ps::Roles;
use crate::parallel::watchdog::Watchdog;
use crate::parallel::{Channel, Comm, Engine, FusionPlan};
use crate::step::{Stepper, Sums};
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
        let (parts, mode) = build(self, be)?;
        Run::new(parts, mode)?.run()
    }
}

/// Steps between starting a stop vote and completing it: more than the staleness bound, so
/// that completing it never waits on a worker that is still allowed to be behind. None with
/// staleness −1 (no bound): the stop then waits for the next meeting point.
fn vote_delay(staleness: i64) -> Option<usize> {
    (staleness >= 0).then(|| staleness as usize + 2)
}

/// The worker's side of the loop.
struct PsWorker<'a> {
    workers: Channel,
    link: Link,
    roles: Roles,
    plan: FusionPlan,
    whole: Mlp,
    watchdog: Watchdog,
    writer: Writer<'a>,
    /// Every worker's samples/s in the epoch, from the epoch's meeting.
    rates: Vec<f64>,
    rank: usize,
    /// The stop votes started and not yet completed, oldest first.
    votes: std::collections::VecDeque<Vote>,
    vote_delay: Option<usize>,
    /// The votes completed at the epoch's meeting said stop: after the next step.
    stop_at_next_step: bool,
    /// With `Roles::whole_step`: where the step's parameters are received.
    step_params: Option<Vec<f32>>,
}

/// The worker's stepper and the loop's other parts, and the mode.
fn build<B: Backend>(w: Worker<'_>, be: B) -> Result<(Parts<'_, B>, PsWorker<'_>)> {
    let (job, rank, n) = (w.job, w.comm.rank, w.roles.workers);
    // Only workers read data: every worker opens all the training rows and takes worker
    // r's part of each step's global batch from the epoch's global order (as data rank r of
    // W under all-reduce); worker r evaluates test slice r of W.
    let super::super::setup::Data { mut train, mut test, mut validation } =
        open_data(job, &w.whole, rank, n, rank == 0)?;
    let others = [test.as_mut(), validation.as_mut()];
    super::super::normalize::normalize(&w.workers, job, &w.start.norm, &mut train, others)?;
    let sched = schedule(job, train.len(), rank, n, w.start.global_batch, be.name())?;
    let d = &job.distribution;
    let watchdog = Watchdog::start(Duration::from_secs_f64(d.watchdog_seconds), rank, w.comm.host.clone());
    let reducer = Box::new(PushPull::new(w.link, &w.roles, &w.plan, w.start.step));
    let alloc = crate::step::bucket_buffers(&be, &w.plan)?;
    let engine = Engine::new(reducer, w.plan.clone(), d.overlap, None, Some(watchdog.share()), alloc);
    let opt = Optimizer::assign(&be, &job.optimizer, w.whole.tensors(), w.whole.n_params)?;
    // With the global norm the parameters come after the step (`after_update`), not per bucket.
    let opt = if w.roles.whole_step { opt.idle() } else { opt };
    let step_params = w.roles.whole_step.then(|| vec![0.0; w.whole.n_params]);
    let mut st = Stepper::new(be, w.whole.clone(), &w.start.params, opt, engine, sched.batch, None)?;
    st.restore(&[], &[], w.start.step).map_err(Error::Training)?;
    st.set_dropout(&job.model.dropout_rates(), job.training.seed)?;
    if let Some(w) = super::super::setup::class_weights(job, &train, rank == 0)? {
        st.set_class_weights(&w)?;
    }
    if super::super::setup::sample_weights(job, &train, rank == 0)? {
        st.set_sample_weights()?;
    }
    let writer = Writer::new(job, w.start.lineage, sched.global_batch, n, rank)?;
    writer.set_norm(train.norm().clone());
    writer.set_names(crate::weights::Names::of(&train));
    st.set_norm(train.norm());
    let mode = PsWorker {
        workers: w.workers,
        link: w.link,
        roles: w.roles,
        plan: w.plan,
        whole: w.whole,
        watchdog,
        writer,
        rates: Vec::new(),
        rank,
        votes: std::collections::VecDeque::new(),
        vote_delay: vote_delay(job.distribution.staleness),
        stop_at_next_step: false,
        step_params,
    };
    let parts = Parts {
        comm: w.comm,
        job,
        st,
        train,
        test,
        validation,
        sched,
        data_rank: rank,
        data_ranks: n,
        start: w.start,
        timeline: None,
        out_dir: PathBuf::from(&job.output.dir),
        t_process: w.t_process,
    };
    Ok((parts, mode))
}

/// The rows of every step: the global batch (training.batch_size per worker at the run's first
/// start; a resume keeps it, on any number of workers it divides over), `n` workers, over
/// `rows` training rows; an error naming `training.batch_size` when no full step is left
/// (drop_last) or the global batch does not divide over the workers. Worker 0 logs the plan.
fn schedule(job: &Job, rows: usize, rank: usize, n: usize, global: usize, backend: String) -> Result<Schedule> {
    if !global.is_multiple_of(n) {
        return Err(Error::config(
            &job.source,
            "training.batch_size",
            format!(
                "the run's global batch is {global} (fixed at its first start: training.batch_size x workers), which \
                 does not divide over {n} workers; resume on a number of workers that divides {global}"
            ),
        ));
    }
    let b = global / n;
    let sched = Schedule::new(rows, global, n, job.data.drop_last);
    if sched.steps == 0 {
        return Err(Error::config(
            &job.source,
            "training.batch_size",
            format!(
                "the global batch {global} ({b} per worker x {n} workers) is larger than the training data ({rows} \
                 samples) with data.drop_last = true"
            ),
        ));
    }
    if rank == 0 {
        info!(
            "{} epochs of {} steps per worker, batch {b} per worker = up to {global} global; {} of the {} training \
             samples per epoch over {n} worker(s); backend: {}",
            job.training.epochs,
            sched.steps,
            sched.global_rows_in(0, sched.steps),
            sched.rows,
            backend
        );
    }
    Ok(sched)
}

impl PsWorker<'_> {
    /// Every bucket's current parameters from the servers into the stepper.
    fn pull<B: Backend>(&self, st: &mut Stepper<B>) -> Result<()> {
        let _p = phase_at("pulling the parameters from the servers", st.step());
        let mut p = vec![0.0; self.whole.n_params];
        reducer::pull_all(&self.link, &self.roles, &self.plan, &mut p);
        st.set_params_host(&p)
    }
}

impl<B: Backend> Mode<B> for PsWorker<'_> {
    fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    fn set_trainer_state(&self, json: String) {
        self.writer.set_trainer(json);
    }

    fn trainers(&self) -> &Channel {
        &self.workers
    }

    fn counts_metrics(&self) -> bool {
        true
    }

    fn step_phase(&self) -> &'static str {
        "a training step (push gradients, pull parameters)"
    }

    /// With `optimizer.global_clipnorm` the buckets' updated parameters come once the whole
    /// step is pushed (`reducer::receive_step`).
    fn after_update(&mut self, st: &mut Stepper<B>) -> Result<()> {
        let Some(p) = &mut self.step_params else { return Ok(()) };
        {
            let _p = phase_at("receiving the step's parameters from the servers", st.step());
            reducer::receive_step(&self.link, &self.roles, &self.plan, p);
        }
        st.set_params_host(p)
    }

    /// No agreement per step (workers are at different steps): the stop vote (see the module
    /// comment) and checkpoints every `checkpoint.every_steps`.
    fn after_step(&mut self, st: &Stepper<B>, at: At, sums: &Sums) -> Result<Boundary> {
        if let Some(m) = st.diverged() {
            // Workers do not meet at every step: this one ends the job on its own.
            return Err(crate::error::Error::Training(format!(
                "worker {}, epoch {}, step {} of the epoch: {m}",
                self.rank,
                at.epoch_index + 1,
                at.step_in_epoch
            )));
        }
        let ck = self.writer.job.checkpoint.every_steps;
        let periodic = ck > 0 && st.step().is_multiple_of(ck);
        let signalled = crate::signals::stop_requested() || reducer::server_signalled();
        let mut stop = std::mem::take(&mut self.stop_at_next_step);
        match self.vote_delay {
            Some(delay) => {
                self.votes.push_back(self.workers.ivote(signalled));
                let due = self.votes.len().saturating_sub(delay);
                let _p = (due > 0).then(|| phase_at("the workers' stop vote", st.step()));
                for _ in 0..due {
                    stop |= self.votes.pop_front().expect("counted").wait();
                }
            }
            // Unbounded staleness: only where the workers meet anyway (a periodic checkpoint,
            // the epoch's end), so that no worker ever waits for a slower one in between.
            None if periodic => {
                let _p = phase_at("the workers' stop vote", st.step());
                stop |= self.workers.all_gather_u64(u64::from(signalled)).iter().any(|&f| f != 0);
            }
            None if at.last => self.votes.push_back(self.workers.ivote(signalled)),
            None => {}
        }
        if stop {
            self.votes.clear();
            let rank0 = self.rank == 0;
            // Every worker waits for worker 0's write, later signals too (see signals.rs).
            crate::signals::stop_under_way();
            self.checkpoint(st, at, sums)?;
            if rank0 {
                crate::train::runlock::stopped(st.step());
                info!(
                    "stopped by a signal at step {}; resume with --resume auto (exit code {})",
                    st.step(),
                    crate::signals::EXIT_PREEMPTED
                );
            }
            crate::signals::stop_checkpoint_written();
            reducer::done(&self.link, &self.roles, true);
            return Ok(Boundary::Stopped);
        }
        Ok(if periodic { Boundary::Checkpoint } else { Boundary::Continue })
    }

    /// Collective over the workers: a checkpoint assembled from the servers by worker 0 while
    /// the others wait.
    fn checkpoint(&mut self, st: &Stepper<B>, at: At, mine: &Sums) -> Result<()> {
        let sums: Vec<Sums> = {
            let _p = phase_at("waiting for the other workers to checkpoint", st.step());
            let words: Vec<u64> = mine.iter().map(|s| s.to_bits()).collect();
            let all = self.workers.all_gather_u64s(&words);
            all.chunks(mine.len()).map(|r| r.iter().map(|&b| f64::from_bits(b)).collect()).collect()
        };
        if self.rank == 0 {
            let _p = phase_at("gathering the state from the servers and writing a checkpoint", st.step());
            let (m_len, v_len) = crate::optim::state_lens(&self.writer.job.optimizer, self.whole.n_params);
            let (params, m, v) = reducer::snapshot(&self.link, &self.roles, &self.plan, m_len, v_len);
            let sums = if at.step_in_epoch == 0 { vec![vec![0.0; st.sums_len()]; sums.len()] } else { sums };
            self.writer.write(
                &self.whole,
                crate::step::WholeState { params, m, v, ema: Vec::new(), step: st.step() },
                at.epoch_index,
                at.step_in_epoch,
                sums,
                true,
                None,
            )?;
        }
        let _p = phase_at("waiting at the barrier for worker 0's checkpoint write", st.step());
        self.workers.all_gather_u64(0);
        Ok(())
    }

    /// Wait for every worker (every pushed gradient is then applied), and pull the current
    /// parameters, so all evaluate and go on from the same ones.
    fn meet(&mut self, st: &mut Stepper<B>, my_rate: f64) -> Result<()> {
        self.rates = {
            let _p = phase_at("waiting for the other workers at the end of the epoch", st.step());
            self.workers.all_gather_u64(my_rate.to_bits()).into_iter().map(f64::from_bits).collect()
        };
        // Every worker is here: the epoch's remaining stop votes complete without waiting.
        for mut v in self.votes.drain(..) {
            self.stop_at_next_step |= v.wait();
        }
        self.pull(st)
    }

    fn epoch_note(&mut self, _exposed_ms: f64) -> String {
        let stats = reducer::stats(&self.link, &self.roles);
        let per: Vec<String> = self.rates.iter().enumerate().map(|(r, v)| format!("worker {r} {v:.0}")).collect();
        format!("; per-worker samples/s: {}; {}", per.join(", "), stats.describe())
    }

    /// The parameters pulled at the last epoch's end: every update applied.
    fn whole_params(&mut self, st: &Stepper<B>) -> Result<Option<Vec<f32>>> {
        if self.rank != 0 {
            return Ok(None);
        }
        Ok(Some(st.params_host()?))
    }

    /// Every worker tells the servers it is done.
    fn finish(&mut self) -> Result<()> {
        reducer::done(&self.link, &self.roles, false);
        Ok(())
    }
}
