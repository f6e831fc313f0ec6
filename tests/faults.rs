//! Never hang, never kill a healthy job: under a real `mpirun` with 2 and 3 ranks, one rank
//! fails at a random step (returns an error, panics, is killed with SIGKILL, is stopped with
//! SIGSTOP as on a frozen node, or stops making progress while staying alive) and the whole
//! job must end with a non-zero exit code, naming the rank, within 15 seconds (10 for the
//! faults mpirun sees itself). A rank stopped at start-up, during `hvtrain eval`, during the
//! end-of-epoch evaluation or while rank 0 writes a checkpoint ends the job the same way. A
//! rank that is only slow (20 s inside a step, 20 s writing a checkpoint) never gets the job
//! killed. Also: the timeline file holds every phase for every rank.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const D: usize = 8;
/// A stopped rank must end the job within this long after it stopped (the liveness limit is
/// 8 s by default); a hang, within this long after it began, with `stall_seconds = 5`.
const GONE_BOUND: Duration = Duration::from_secs(15);
/// Bound on a whole failing run with a stopped or hung rank (start-up and training included).
const RUN_BOUND: Duration = Duration::from_secs(45);
/// A whole run whose fault ends it at once (an error, a panic, a kill, a checksum or deadline
/// failure): start-up and the steps before the fault, up to 300 of them, included, so this is
/// about twice what an idle 2-core machine takes (3 ranks: 5-8 s; 10.45 s measured beside a
/// compile). What it tells apart is a prompt end from a hang, which runs into the 60 s limit.
const PROMPT: Duration = Duration::from_secs(20);

/// A job long enough that every fault fires mid-training (400 steps per epoch per rank), with
/// the default liveness settings.
fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(4800, D, 3, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &[D, 32, 32, 3], "d.h5", Some("d.h5"), "[distribution]\nfusion_threshold_mb = 0.001\n");
    dir
}

/// A small deterministic generator for the trials' random rank and step.
fn pick(seed: &mut u64, n: u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*seed >> 33) % n
}

fn seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// Run `args` with `spec` injected; returns the run after checking it failed. For faults
/// that log when they fire (stop, hang), also checks that the job ended within GONE_BOUND
/// of that moment, and says how long it took.
fn failing(dir: &Path, ranks: usize, spec: &str, args: &[&str], bound: Duration) -> Run {
    let run = mpirun_env(ranks, &[("HVTRAIN_INJECT_FAULT", spec)], args, dir, 60);
    let ended = SystemTime::now();
    let what = format!("{ranks} ranks, fault {spec}");
    assert!(!run.ok(), "{what}: the job must fail\n{}", run.all());
    // (mpirun itself exits 137 when a rank died of SIGKILL; the elapsed time tells a hang.)
    assert!(run.elapsed < bound, "{what}: took {:?}, more than {bound:?}\n{}", run.elapsed, run.all());
    if let Some(fired) = fired_at(&run) {
        let after = ended.duration_since(fired).unwrap_or_default();
        eprintln!("{what}: the job ended {:.2} s after the fault fired", after.as_secs_f64());
        assert!(after < GONE_BOUND, "{what}: ended {after:?} after the fault fired\n{}", run.all());
    }
    run
}

/// When a stop or hang fault fired: the UTC timestamp of the line it logged,
/// "[2026-11-21T08:44:21.663Z INFO rank 1] injected fault (HVTRAIN_INJECT_FAULT): stopping ...".
fn fired_at(run: &Run) -> Option<SystemTime> {
    let line = run.stderr.lines().find(|l| {
        l.contains("injected fault (HVTRAIN_INJECT_FAULT): stopping")
            || l.contains("injected fault (HVTRAIN_INJECT_FAULT): hanging")
    })?;
    let t = line.get(1..24)?; // 2026-11-21T08:44:21.663
    let n = |r: std::ops::Range<usize>| t.get(r).and_then(|v| v.parse::<i64>().ok());
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss, ms) = (n(11..13)?, n(14..16)?, n(17..19)?, n(20..23)?);
    // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    let millis = ((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + ms;
    Some(UNIX_EPOCH + Duration::from_millis(millis as u64))
}

/// The line of the rank that noticed `rank` was gone, e.g. "hvtrain: error on rank 0 (vm):
/// rank 1 (vm) has sent no heartbeat for 7.9 s: ..."; checks the job ended with exit 3.
fn gone_line(run: &Run, rank: u64, what: &str) -> String {
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains(&format!("): rank {rank} (")) && l.contains("has sent no heartbeat"))
        .unwrap_or_else(|| panic!("{what}: no line names rank {rank} as gone\n{}", run.all()));
    assert_eq!(run.code, Some(3), "{what}: exit code 3 (a rank is gone)\n{}", run.all());
    eprintln!("ok: {what}: ended in {:.2} s: {line}", run.elapsed.as_secs_f64());
    line.to_string()
}

fn trial(dir: &Path, ranks: usize, kind: &str, rank: u64, step: u64) {
    // Each trial is a new run. (When mpirun ends the job it sends SIGTERM to the ranks left,
    // and a rank 0 resumed at a step boundary may write its stop checkpoint, as it should: the
    // next trial must not find it.)
    let _ = std::fs::remove_dir_all(dir.join("out"));
    let spec = format!("{rank}:{step}:{kind}");
    let stall = ["train", "job.toml", "--set", "training.epochs=50", "--set", "distribution.stall_seconds=5"];
    let bound = if kind == "stop" || kind == "hang" { RUN_BOUND } else { PROMPT };
    let run = failing(dir, ranks, &spec, &stall, bound);
    let what = format!("{ranks} ranks, fault {spec}");
    match kind {
        "error" => assert!(
            run.stderr.contains(&format!("error on rank {rank}")) && run.stderr.contains("injected fault"),
            "{what}\n{}",
            run.all()
        ),
        "panic" => assert!(run.stderr.contains(&format!("internal error on rank {rank}")), "{what}\n{}", run.all()),
        // mpirun names the rank that died of the signal.
        "kill" => assert!(
            run.stderr.contains(&format!("rank {rank} ")) && run.stderr.contains("signal 9"),
            "{what}\n{}",
            run.all()
        ),
        // The heartbeats stop: the rank that watches it names it.
        "stop" => {
            gone_line(&run, rank, &what);
            return;
        }
        // Every rank alive, none moving: rank 0 ends the job after stall_seconds, saying what
        // each rank is doing.
        "hang" => {
            assert!(run.stderr.contains("the job has stalled"), "{what}: the stall must be reported\n{}", run.all());
            for r in 0..ranks {
                assert!(run.stderr.contains(&format!("\n  rank {r} (")), "{what}: rank {r}'s phase\n{}", run.all());
            }
            assert!(
                run.stderr.contains(&format!("a training step (forward, backward, optimizer) at step {step}")),
                "{what}: the hung rank's phase\n{}",
                run.all()
            );
            assert_eq!(run.code, Some(4), "{what}: exit code 4 (stalled)\n{}", run.all());
        }
        _ => {}
    }
    eprintln!("ok: {what}: ended in {:.2} s with exit {:?}", run.elapsed.as_secs_f64(), run.code);
}

fn trials(ranks: usize, kind: &str) {
    let _g = mpi_lock();
    let dir = setup(&format!("fault-{kind}-{ranks}"));
    let mut seed = seed();
    for _ in 0..3 {
        let (rank, step) = (pick(&mut seed, ranks as u64), 1 + pick(&mut seed, 300));
        trial(&dir, ranks, kind, rank, step);
    }
}

#[test]
fn rank_error_ends_job_2_and_3_ranks() {
    trials(2, "error");
    trials(3, "error");
}

#[test]
fn rank_panic_ends_job_2_and_3_ranks() {
    trials(2, "panic");
    trials(3, "panic");
}

#[test]
fn rank_sigkill_ends_job_2_and_3_ranks() {
    trials(2, "kill");
    trials(3, "kill");
}

#[test]
fn rank_sigstop_mid_training_ends_job_2_and_3_ranks() {
    trials(2, "stop");
    trials(3, "stop");
}

/// A rank that stays alive but stops making progress (a deadlock) ends the job after
/// `distribution.stall_seconds`, with what each rank was doing.
#[test]
fn rank_hang_ends_job_as_a_stall_2_and_3_ranks() {
    trials(2, "hang");
    trials(3, "hang");
}

/// Stopped before the ranks first agree on anything: every collective of start-up is covered.
#[test]
fn rank_sigstop_at_start_up_ends_job() {
    let _g = mpi_lock();
    let dir = setup("fault-stop-start");
    let mut seed = seed();
    for ranks in [2, 3] {
        let rank = pick(&mut seed, ranks as u64);
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let spec = format!("{rank}:start:stop");
        let run = failing(&dir, ranks, &spec, &["train", "job.toml"], RUN_BOUND);
        gone_line(&run, rank, &format!("{ranks} ranks, train, fault {spec}"));
    }
}

/// `hvtrain eval`, and the end-of-epoch evaluation inside `train`.
#[test]
fn rank_sigstop_during_evaluation_ends_job() {
    let _g = mpi_lock();
    let dir = setup("fault-stop-eval");
    let trained = mpirun(2, &["train", "job.toml"], &dir, 60);
    assert!(trained.ok(), "{}", trained.all());
    let run = failing(&dir, 2, "1:eval:stop", &["eval", "job.toml", "--weights", "out/weights.h5"], RUN_BOUND);
    let line = gone_line(&run, 1, "2 ranks, eval, fault 1:eval:stop");
    assert!(line.contains("evaluating the test data"), "{line}");
    let run = failing(&dir, 3, "0:eval:stop", &["train", "job.toml", "--set", "output.dir=\"out2\""], RUN_BOUND);
    let line = gone_line(&run, 0, "3 ranks, train, fault 0:eval:stop (end-of-epoch evaluation)");
    assert!(line.contains("evaluating the test data"), "{line}");
}

/// Rank 0 stopped while it writes a checkpoint: the others, waiting at the barrier after it,
/// notice.
#[test]
fn rank_sigstop_while_writing_a_checkpoint_ends_job() {
    let _g = mpi_lock();
    let dir = setup("fault-stop-ckpt");
    let args = ["train", "job.toml", "--set", "training.epochs=50", "--set", "checkpoint.every_steps=10"];
    let run = failing(&dir, 2, "0:20:stop_in_checkpoint", &args, RUN_BOUND);
    let line = gone_line(&run, 0, "2 ranks, fault 0:20:stop_in_checkpoint");
    assert!(line.contains("writing a checkpoint at step 20"), "{line}");
}

/// Longer than the old 6 s deadline: a slow step, a slow end-of-epoch evaluation and a slow
/// checkpoint write all finish.
#[test]
fn slow_ranks_are_never_killed() {
    let _g = mpi_lock();
    let dir = setup("fault-slow");
    for (spec, extra) in [
        ("1:50:slow=20", "training.epochs=1"),
        ("1:eval:slow=10", "training.epochs=1"),
        ("0:20:slow_checkpoint=20", "checkpoint.every_steps=10"),
    ] {
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let run = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", spec)], &["train", "job.toml", "--set", extra], &dir, 90);
        assert!(run.ok(), "fault {spec}: a slow rank must not end the job\n{}", run.all());
        assert!(run.stderr.contains("injected fault (HVTRAIN_INJECT_FAULT): sleeping"), "{}", run.all());
        eprintln!("ok: fault {spec}: finished in {:.2} s", run.elapsed.as_secs_f64());
    }
}

/// Without MPI_THREAD_MULTIPLE there are no heartbeats: hvtrain says so and keeps the old
/// per-collective deadline inside training steps.
#[test]
fn without_thread_multiple_the_deadline_watchdog_remains() {
    let _g = mpi_lock();
    let dir = setup("fault-serialized");
    let env = [("HVTRAIN_INJECT_FAULT", "1:30:hang"), ("HVTRAIN_MPI_THREADS", "serialized")];
    let args = ["train", "job.toml", "--set", "training.epochs=50", "--set", "distribution.watchdog_seconds=3"];
    let run = mpirun_env(2, &env, &args, &dir, 60);
    assert!(!run.ok(), "{}", run.all());
    assert!(run.stderr.contains("not MPI_THREAD_MULTIPLE: no heartbeat thread"), "{}", run.all());
    assert!(run.stderr.contains("has not completed after 3.0 s"), "{}", run.all());
    assert!(run.elapsed < PROMPT, "{}", run.all());
}

/// One replica drifts (as after a bit flip): the periodic checksum comparison must stop the
/// job and name the rank that differs.
#[test]
fn diverged_replica_is_caught_by_the_consistency_check() {
    let _g = mpi_lock();
    let dir = setup("fault-diverge");
    let run = mpirun_env(
        3,
        &[("HVTRAIN_INJECT_FAULT", "2:30:diverge")],
        &["train", "job.toml", "--set", "distribution.check_every=50"],
        &dir,
        60,
    );
    assert!(!run.ok(), "{}", run.all());
    assert!(
        run.stderr.contains("parameter checksum at step 50") && run.stderr.contains("rank(s) [2]"),
        "{}",
        run.all()
    );
    assert!(run.elapsed < PROMPT, "{}", run.all());
    // Without the fault the same job passes its checks.
    let ok = mpirun(3, &["train", "job.toml", "--set", "distribution.check_every=50"], &dir, 60);
    assert!(ok.ok(), "{}", ok.all());
}

#[test]
fn timeline_has_every_phase_for_every_rank() {
    let _g = mpi_lock();
    let dir = setup("timeline");
    let run = mpirun(3, &["train", "job.toml", "--timeline", "out/trace.json", "--set", "training.epochs=1"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("out/trace.json")).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    for rank in 0..3 {
        let names: Vec<&str> =
            events.iter().filter(|e| e["pid"] == rank && e["ph"] == "X").map(|e| e["name"].as_str().unwrap()).collect();
        for phase in [
            "data wait",
            "forward + loss",
            "backward dense2",
            "backward dense0",
            "all-reduce bucket",
            "wait for bucket",
            "optimizer bucket",
        ] {
            assert!(
                names.iter().any(|n| n.starts_with(phase)),
                "rank {rank} has no {phase:?} event; it has e.g. {:?}",
                &names[..names.len().min(12)]
            );
        }
        assert!(events.iter().any(|e| e["pid"] == rank && e["name"] == "process_name"), "rank {rank} track unnamed");
    }
    let durations_ok = events.iter().filter(|e| e["ph"] == "X").all(|e| e["dur"].as_f64().unwrap() >= 0.0);
    assert!(durations_ok);
}
