//! `hvtrain sweep`: many trials of one job inside one MPI allocation. The world splits into
//! groups of `sweep.ranks_per_trial` ranks (`Comm::group`); each group trains one trial at a
//! time through `train::train`, as `hvtrain train` would on that many ranks (every mode),
//! in the trial's own folder `OUTPUT_DIR/trials/NNNN`. World rank 0 also runs the scheduler
//! on a thread of its own: group leaders send it what became of their last trial and get the
//! next work back (point-to-point messages on a private communicator, `parallel::comm::Link`),
//! and hand it on to their group.
//!
//! ```text
//!  rank 0: [scheduler thread] <-- report / next --> leader of each group --> its other ranks
//!          [main thread: leader of group 0]
//! ```
//!
//! A trial that fails (diverges, a value its size cannot take, out of memory) is recorded as
//! failed with the reason and the sweep goes on; an MPI or file error ends the job, as in
//! `train`. In a group of several ranks the trial's end is agreed (a vote over the group): a
//! failure that one rank met alone leaves the others inside the trial's collectives, so after
//! `ALONE_AFTER` that rank has the scheduler record the trial as failed and ends the job
//! (non-zero; `--resume auto` goes on without that trial) rather than leave them hanging.
//! A signal stops every running trial with its stop checkpoint; the sweep's records
//! (`sweep.jsonl`) keep them running, and `--resume auto` continues them first. When the
//! sweep ends, no trial can resume or be promoted any more: the trials' checkpoints are
//! removed but the best trial's (`sweep.keep_checkpoints`).
//!
//! Must not: call MPI itself (`Comm` and `Link` do) or hold the scheduling rule
//! (`scheduler.rs`).

mod hparams;
pub mod record;
pub mod scheduler;
mod sobol;
pub mod space;

use crate::config::Job;
use crate::error::{Error, Result};
use crate::parallel::comm::Link;
use crate::parallel::Comm;
use crate::train::{Outcome, Resume};
use scheduler::{Ended, Next, Report, Scheduler};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Leader → scheduler: the last trial's report (None at the start).
const TAG_REPORT: i32 = 1;
/// Scheduler → leader: the next work.
const TAG_NEXT: i32 = 2;
/// Leader → its group's other ranks: the same.
const TAG_GROUP: i32 = 3;

#[derive(Serialize, Deserialize)]
struct Request {
    group: usize,
    report: Option<Report>,
    /// The trial failed on the sending rank alone: its group cannot go on, and the job ends
    /// once the scheduler has recorded the failure (it answers `Next::Done`).
    #[serde(default)]
    alone: bool,
}

/// How long a rank whose trial failed waits for the rest of its group to end the trial too
/// (they do at once when the failure was agreed, as a non-finite loss is at the step's
/// boundary); past it, they are inside the trial's collectives and cannot leave them.
const ALONE_AFTER: Duration = Duration::from_secs(30);

/// What every rank knows of the sweep.
struct Sweep<'a> {
    job_path: &'a str,
    sets: &'a [String],
    job: Job,
    values: Vec<space::Values>,
    dir: PathBuf,
    t_process: Instant,
}

impl Sweep<'_> {
    fn cfg(&self) -> &crate::config::SweepCfg {
        self.job.sweep.as_ref().expect("checked at the start")
    }

    fn trial_dir(&self, i: usize) -> PathBuf {
        trial_dir(&self.dir, i)
    }

    /// Trial `i`'s job: the sweep's, with its values and its folder.
    fn trial_job(&self, i: usize, pause_after: usize) -> Result<Job> {
        let mut sets = self.sets.to_vec();
        sets.extend(space::sets(&self.values[i], &self.job.model.layers));
        sets.push(format!("output.dir={:?}", self.trial_dir(i).display().to_string()));
        let (mut job, _) = Job::load_with_env(self.job_path, &sets)?;
        job.pause_after_epoch = Some(pause_after);
        Ok(job)
    }
}

fn trial_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join("trials").join(format!("{i:04}"))
}

/// `hvtrain sweep JOB`: collective over the world.
pub fn sweep(comm: &Comm, job_path: &str, sets: &[String], t_process: Instant, resume: bool) -> Result<Outcome> {
    let (job, _) = Job::load_with_env(job_path, sets)?;
    let Some(cfg) = job.sweep.clone() else {
        return Err(Error::config(
            job_path,
            "sweep",
            "the job has no [sweep] section: add one with the keys to vary, e.g. [sweep.space] \"optimizer.lr\" = { log_uniform = [1e-4, 0.3] } (see docs/sweeps.md)",
        ));
    };
    let rpt = cfg.ranks_per_trial;
    if !comm.size.is_multiple_of(rpt) {
        let divisors: Vec<String> =
            (1..=comm.size).filter(|d| comm.size.is_multiple_of(*d)).map(|d| d.to_string()).collect();
        return Err(Error::config(
            job_path,
            "sweep.ranks_per_trial",
            format!(
                "is {rpt}, and the job has {} ranks, which do not split into groups of {rpt}: give one of {} or launch a multiple of {rpt} ranks",
                comm.size,
                divisors.join(", ")
            ),
        ));
    }
    let groups = comm.size / rpt;
    if groups > 1 && comm.threading != mpi::Threading::Multiple {
        return Err(Error::Mpi(format!(
            "a sweep of {groups} groups needs MPI_THREAD_MULTIPLE (rank 0's scheduler thread talks to the groups while rank 0 trains); \
             the library granted {:?}: unset HVTRAIN_MPI_THREADS, or run one group (sweep.ranks_per_trial = {})",
            comm.threading, comm.size
        )));
    }
    check_keys(job_path, sets, &cfg)?;
    let values = space::sample(&cfg);
    let dir = PathBuf::from(&job.output.dir);
    let s = Sweep { job_path, sets, job, values, dir, t_process };

    let sched = if comm.rank == 0 { Some(prepare(&s, comm.size, resume)?) } else { None };
    crate::train::runlock::for_sweep();
    let group = comm.group(comm.rank / rpt, comm.rank);
    let link = comm.link();
    comm.barrier();
    let server = sched.map(|sc| {
        let (dir, metric) = (s.dir.clone(), cfg.metric.clone());
        let sessions = hparams::Sessions::new(s.job.output.tensorboard);
        std::thread::Builder::new()
            .name("hvtrain-sweep".into())
            .spawn(move || serve(link, sc, sessions, groups, rpt, &dir, &metric))
            .expect("spawn the sweep's scheduler thread")
    });
    let mut stopped = run_group(&s, &group, link, comm.rank / rpt, comm.rank - group.rank)?;
    if let Some(h) = server {
        let (mut sc, mut sessions) =
            h.join().map_err(|_| Error::Training("the sweep's scheduler thread panicked".into()))?;
        stopped |= !sc.over();
        finish(&s, &mut sc, stopped)?;
        sessions.sync(&sc.trials);
    }
    comm.barrier();
    let stopped = comm.all_reduce_max_f64(if stopped { 1.0 } else { 0.0 }) > 0.0;
    Ok(if stopped { Outcome::Preempted } else { Outcome::Completed })
}

/// `hvtrain sweep --dry-run`: the search as it would run (checked as at the start), one line
/// per trial with its values, and the overrides that make its job. No MPI.
pub fn dry_run(job_path: &str, sets: &[String]) -> Result<String> {
    let (job, _) = Job::load_with_env(job_path, sets)?;
    let Some(cfg) = job.sweep.clone() else {
        return Err(Error::config(job_path, "sweep", "the job has no [sweep] section (see docs/sweeps.md)"));
    };
    check_keys(job_path, sets, &cfg)?;
    let values = space::sample(&cfg);
    let brackets = scheduler::brackets(&cfg, job.training.epochs);
    let mut out = vec![format!(
        "{} trials, {:?} sampler (seed {}), {:?} scheduler by {} ({:?}), rungs (epochs) {}; {} rank(s) per trial",
        values.len(),
        cfg.sampler,
        cfg.seed,
        cfg.scheduler,
        cfg.metric,
        cfg.goal(),
        brackets.iter().map(|b| format!("{b:?}")).collect::<Vec<_>>().join(" "),
        cfg.ranks_per_trial
    )];
    for (i, v) in values.iter().enumerate() {
        let shown: Vec<String> = v.iter().map(|(k, x)| format!("{k}={}", space::show(x))).collect();
        out.push(format!("trial {i:4}: {}  (bracket {})", shown.join(" "), i % brackets.len()));
        out.push(format!("            --set {}", space::sets(v, &job.model.layers).join(" --set ")));
    }
    Ok(out.join("\n"))
}

/// Every key of the space is one the job file has: each alone, set to its first trial's value
/// class, must not be an unknown field.
fn check_keys(job_path: &str, sets: &[String], cfg: &crate::config::SweepCfg) -> Result<()> {
    for (k, r) in &cfg.space {
        if crate::config::LAYER_KEYS.contains(&k.as_str()) {
            continue;
        }
        if k == "training.threads" {
            return Err(Error::config(
                job_path,
                format!("sweep.space.\"{k}\""),
                "is fixed per process before MPI starts; set it outside the sweep (threads × ranks per node ≤ cores)",
            ));
        }
        let mut s = sets.to_vec();
        s.push(format!("{k}={}", space::show(&space::value(r, 0.0))));
        if let Err(Error::Config { msg, field, .. }) = Job::load_with_env(job_path, &s) {
            if msg.contains("unknown field") || msg.contains("is a value, not a section") {
                return Err(Error::config(
                    job_path,
                    format!("sweep.space.\"{k}\""),
                    format!("is not a key of the job file ({field}: {msg}); give a dotted key that --set takes, such as optimizer.lr"),
                ));
            }
        }
    }
    Ok(())
}

/// World rank 0, before the groups start: the sweep's folder and lock, the search kept or
/// checked against an earlier run's, the scheduler (restored with `--resume auto`).
fn prepare(s: &Sweep, ranks: usize, resume: bool) -> Result<Scheduler> {
    let cfg = s.cfg();
    std::fs::create_dir_all(s.dir.join("trials")).map_err(|e| Error::io(&s.dir, "create the sweep's folder", e))?;
    crate::train::runlock::take(&s.dir)?;
    let earlier = record::read(&s.dir)?;
    if earlier.is_some() && !resume {
        return Err(Error::config(
            s.dir.display().to_string(),
            "output.dir",
            format!(
                "holds a sweep already ({}); continue it with `hvtrain sweep ... --resume auto`, or give this one another output.dir",
                record::TRIALS_FILE
            ),
        ));
    }
    let params: Vec<BTreeMap<String, serde_json::Value>> = s
        .values
        .iter()
        .map(|v| v.iter().map(|(k, x)| (k.clone(), serde_json::to_value(x).expect("a TOML value is JSON"))).collect())
        .collect();
    let spec = serde_json::json!({
        "sweep": cfg,
        "ranks": ranks,
        "epochs": s.job.training.epochs,
        "trials": params,
        "job": s.job_path,
        "set": s.sets,
    });
    record::check_or_keep_spec(&s.dir, &spec)?;
    let dir = s.dir.clone();
    let mut sc = Scheduler::new(cfg, s.job.training.epochs, params, cfg.ranks_per_trial, |i| {
        trial_dir(&dir, i).display().to_string()
    });
    if let Some(saved) = earlier {
        let n = saved.len();
        sc.restore(saved);
        let running: Vec<usize> =
            sc.trials.iter().filter(|t| t.status == scheduler::Status::Running).map(|t| t.trial).collect();
        log::info!(
            "resuming the sweep in {}: {n} trial(s) recorded, {running:?} resume from their checkpoints",
            s.dir.display()
        );
    }
    let rungs: Vec<String> =
        (0..scheduler::brackets(cfg, s.job.training.epochs).len()).map(|b| format!("{:?}", sc.rungs(b))).collect();
    log::info!(
        "sweep: {} trials of {} key(s) ({:?} sampler, seed {}), {} rank(s) per trial in {} group(s), {:?} by {} ({:?}); rungs (epochs) {}; results in {}",
        sc.trials.len(),
        cfg.space.len(),
        cfg.sampler,
        cfg.seed,
        cfg.ranks_per_trial,
        ranks / cfg.ranks_per_trial,
        cfg.scheduler,
        cfg.metric,
        cfg.goal(),
        rungs.join(" "),
        s.dir.join(record::TRIALS_FILE).display()
    );
    if s.job.output.tensorboard {
        let name = Path::new(s.job_path).file_stem().map_or("sweep".into(), |n| n.to_string_lossy().into_owned());
        hparams::experiment(&s.dir, &name, cfg);
    }
    crate::train::runlock::sweep_mark("running", false);
    Ok(sc)
}

/// Rank 0's scheduler thread: reports in, work out, until every group has been told it is
/// done. An error here (the records cannot be written) ends the job.
/// Each time the records are written, the trials' HParams sessions whose state changed are too.
fn serve(
    link: Link,
    mut sc: Scheduler,
    mut sessions: hparams::Sessions,
    groups: usize,
    rpt: usize,
    dir: &Path,
    metric: &str,
) -> (Scheduler, hparams::Sessions) {
    crate::sys::untagged_thread();
    let mut idle: VecDeque<usize> = VecDeque::new();
    let mut done = 0;
    let mut stopping = false;
    let mut save = |sc: &Scheduler| {
        if let Err(e) = record::write(dir, &sc.trials) {
            crate::sys::say(format!("hvtrain: error on rank 0 (sweep scheduler): {e}"));
            crate::parallel::comm::abort_world(1);
        }
        sessions.sync(&sc.trials);
    };
    while done < groups {
        if let Some(m) = link.receive_any_within(TAG_REPORT, Duration::from_millis(100)) {
            let req: Request = decode(&m.words);
            if let Some(r) = req.report {
                let (i, last) = (r.trial, r.curve.last().and_then(|c| c.1));
                let how = match &r.ended {
                    Ended::Failed(why) => format!("failed: {why}"),
                    other => format!("{other:?}").to_lowercase(),
                };
                let decision = sc.report(r);
                let t = &sc.trials[i];
                log::info!(
                    "sweep: trial {i} {how} after {} epoch(s), {metric} {} (group {}){}",
                    t.epochs,
                    last.map_or("-".into(), |v| format!("{v:.5}")),
                    req.group,
                    if decision.is_empty() { String::new() } else { format!("; {decision}") }
                );
                save(&sc);
            }
            if req.alone {
                // The job ends: answer once the record is written; this group gets no more work.
                link.send(m.from, TAG_NEXT, &encode(&Next::Done));
                continue;
            }
            idle.push_back(m.from);
        }
        stopping |= crate::signals::stop_requested();
        while let Some(&leader) = idle.front() {
            let next = if stopping { Next::Done } else { sc.next() };
            if next == Next::Wait {
                break;
            }
            idle.pop_front();
            match &next {
                Next::Done => done += 1,
                Next::Run { trial, target, resume } => {
                    let t = &sc.trials[*trial];
                    let vals: Vec<String> = t.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    log::info!(
                        "sweep: trial {trial} {} to epoch {target} on group {} (ranks {}..{}): {}",
                        if *resume { "goes on" } else { "starts" },
                        leader / rpt,
                        leader,
                        leader + rpt,
                        vals.join(" ")
                    );
                    save(&sc);
                }
                Next::Wait => unreachable!(),
            }
            link.send(leader, TAG_NEXT, &encode(&next));
        }
    }
    (sc, sessions)
}

/// One group's loop: ask for work (the leader), share it, train it, report. True when the
/// sweep stopped for a signal.
fn run_group(s: &Sweep, group: &Comm, link: Link, g: usize, leader: usize) -> Result<bool> {
    let mut report: Option<Report> = None;
    // The trial's end, agreed over the group (collective: every rank of the group is here).
    let agree = (group.size > 1).then(|| group.channel());
    let mut stopped = false;
    loop {
        let next: Next = if group.rank == 0 {
            let req = Request { group: g, report: report.take(), alone: false };
            link.send(0, TAG_REPORT, &encode(&req));
            let next: Next = decode(&link.receive_slowly(0, TAG_NEXT));
            let words = encode(&next);
            for r in 1..group.size {
                link.send(leader + r, TAG_GROUP, &words);
            }
            next
        } else {
            decode(&link.receive_slowly(leader, TAG_GROUP))
        };
        let Next::Run { trial, target, .. } = next else { break };
        let mut r = run_trial(s, group, trial, target)?;
        if let Some(ch) = &agree {
            let failed = matches!(r.ended, Ended::Failed(_));
            let mut vote = ch.ivote(failed);
            let any = if failed {
                match vote.wait_for(ALONE_AFTER) {
                    Some(any) => any,
                    None => fail_alone(&link, g, r),
                }
            } else {
                vote.wait()
            };
            if any && !failed {
                r.ended = Ended::Failed("failed on another rank of its group (that rank's log says why)".into());
            }
        }
        stopped |= matches!(r.ended, Ended::Interrupted);
        report = Some(r);
    }
    Ok(stopped || crate::signals::stop_requested())
}

/// The trial failed on this rank alone (its group's other ranks did not end it within
/// `ALONE_AFTER`): have the scheduler record it as failed, then end the job.
fn fail_alone(link: &Link, g: usize, r: Report) -> ! {
    let (i, why) = (r.trial, if let Ended::Failed(w) = &r.ended { w.clone() } else { String::new() });
    log::error!(
        "sweep: trial {i} failed on this rank alone ({why}); the other ranks of group {g} are inside the trial's \
         collectives and cannot leave them, so the sweep ends here. The trial is recorded as failed: rerun with \
         --resume auto to go on with the others"
    );
    link.send(0, TAG_REPORT, &encode(&Request { group: g, report: Some(r), alone: true }));
    // The scheduler's answer says the record is written (or give up after a while).
    let _ = link.receive_any_within(TAG_NEXT, Duration::from_secs(20));
    crate::parallel::comm::abort_world(1);
    std::process::exit(1)
}

/// Train trial `i` to epoch `target` on the group (from its checkpoint when it has one).
fn run_trial(s: &Sweep, group: &Comm, i: usize, target: usize) -> Result<Report> {
    crate::sys::set_trial(Some(i));
    let t0 = Instant::now();
    let outcome =
        s.trial_job(i, target).and_then(|job| crate::train::train(group, &job, s.t_process, Some(Resume::Auto)));
    crate::sys::set_trial(None);
    let ended = match outcome {
        Ok(Outcome::Completed) => Ended::Completed,
        Ok(Outcome::Paused) => Ended::Paused,
        Ok(Outcome::Preempted) => Ended::Interrupted,
        // The job's own trouble (MPI, files it must write, signals): the whole job ends, as in train.
        Err(e @ (Error::Mpi(_) | Error::Io { .. } | Error::Signal(_))) => return Err(e),
        Err(e) => {
            if group.rank == 0 {
                log::warn!("sweep: trial {i} failed: {e}");
            }
            Ended::Failed(e.to_string())
        }
    };
    let curve = if group.rank == 0 { record::curve(&s.trial_dir(i), &s.cfg().metric) } else { Vec::new() };
    Ok(Report { trial: i, ended, curve, seconds: t0.elapsed().as_secs_f64() })
}

/// Rank 0 at the end: the records, the table, the best trial's weights.
fn finish(s: &Sweep, sc: &mut Scheduler, stopped: bool) -> Result<()> {
    let cfg = s.cfg();
    if stopped {
        record::write(&s.dir, &sc.trials)?;
        let resume: Vec<usize> =
            sc.trials.iter().filter(|t| t.status == scheduler::Status::Running).map(|t| t.trial).collect();
        log::info!(
            "sweep stopped by a signal: {} trial(s) ended, {resume:?} stopped with a checkpoint; continue with --resume auto",
            sc.trials.iter().filter(|t| !matches!(t.status, scheduler::Status::Pending | scheduler::Status::Running)).count()
        );
        crate::train::runlock::sweep_mark(&format!("stopped (sweep: trials {resume:?} resume)"), true);
        return Ok(());
    }
    sc.finish();
    record::write(&s.dir, &sc.trials)?;
    let ranked = sc.ranking();
    log::info!(
        "sweep done: trials by {} ({:?}), best first:\n{}",
        cfg.metric,
        cfg.goal(),
        record::table(&ranked, &sc.trials, &cfg.metric)
    );
    let failed = sc.trials.iter().filter(|t| t.status == scheduler::Status::Failed).count();
    if failed > 0 {
        log::warn!(
            "sweep: {failed} trial(s) failed; their reasons are in {}",
            s.dir.join(record::TRIALS_FILE).display()
        );
    }
    let best = ranked.first().map(|t| t.trial);
    prune_checkpoints(s, sc.trials.len(), best);
    match ranked.first() {
        Some(best) => {
            let w = record::keep_best(&s.dir, best)?;
            log::info!(
                "sweep: best trial {} ({} {:.5} after {} epochs): {}{}",
                best.trial,
                cfg.metric,
                best.metric.unwrap_or(f64::NAN),
                best.epochs,
                best.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
                w.map(|p| format!("; weights in {}", p.display())).unwrap_or_default()
            );
        }
        None => log::warn!("sweep: no trial has a {} to rank by", cfg.metric),
    }
    crate::train::runlock::sweep_mark("done", true);
    Ok(())
}

/// The ended sweep's trial checkpoints, but the `best` trial's (`sweep.keep_checkpoints`),
/// removed; what was removed is logged (a file that cannot be removed is a warning, not an
/// error: the sweep's results are written).
fn prune_checkpoints(s: &Sweep, trials: usize, best: Option<usize>) {
    use crate::config::KeepCheckpoints;
    let keep = s.cfg().keep_checkpoints;
    if keep == KeepCheckpoints::All {
        return;
    }
    let (mut files, mut bytes) = (0usize, 0u64);
    for i in (0..trials).filter(|&i| keep == KeepCheckpoints::None || Some(i) != best) {
        let dir = s.trial_dir(i);
        let mut remove = |path: &std::path::Path| {
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            match std::fs::remove_file(path) {
                Ok(()) => (files, bytes) = (files + 1, bytes + size),
                Err(e) => log::warn!("sweep: could not remove {}: {e}", path.display()),
            }
        };
        for (_, path) in crate::checkpoint::list(&dir) {
            remove(&path);
        }
        // Then the parts of checkpoints written in parts (sharded trials), which no index names now.
        for path in crate::checkpoint::parts::orphans(&dir) {
            remove(&path);
        }
    }
    if files > 0 {
        let kept = match (keep, best) {
            (KeepCheckpoints::Best, Some(b)) => format!("; trial {b}'s (the best) kept"),
            _ => String::new(),
        };
        log::info!(
            "sweep: removed {files} checkpoint(s) of ended trials ({:.1} MiB){kept}; sweep.keep_checkpoints = \"all\" \
             keeps every trial's",
            bytes as f64 / (1u64 << 20) as f64
        );
    }
}

/// A message as u32 words: the JSON's byte count, then its bytes.
fn encode<T: Serialize>(v: &T) -> Vec<u32> {
    let bytes = serde_json::to_vec(v).expect("a sweep message serializes");
    let mut words = vec![bytes.len() as u32];
    words.extend(bytes.chunks(4).map(|c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(w)
    }));
    words
}

fn decode<T: for<'de> Deserialize<'de>>(words: &[u32]) -> T {
    let n = words[0] as usize;
    let bytes: Vec<u8> = words[1..].iter().flat_map(|w| w.to_le_bytes()).take(n).collect();
    serde_json::from_slice(&bytes).expect("a sweep message from this build")
}

#[cfg(test)]
#[test]
fn messages_round_trip() {
    let r = Request {
        group: 3,
        report: Some(Report {
            trial: 7,
            ended: Ended::Failed("é NaN".into()),
            curve: vec![(1, Some(0.5)), (2, None)],
            seconds: 1.5,
        }),
        alone: true,
    };
    let back: Request = decode(&encode(&r));
    assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&r).unwrap());
}
