//! Never hang: under a real `mpirun` with 2 and 3 ranks, one rank fails at a random step
//! (returns an error, panics, is killed with SIGKILL, or stops making progress as on a lost
//! node) and the whole job must end with a non-zero exit code within 10 seconds, every time.
//! Also: the timeline file holds every phase for every rank.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const D: usize = 8;

/// A job long enough that every fault fires mid-training (400 steps per epoch per rank).
fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(4800, D, 3, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &[D, 32, 32, 3], "d.h5", None, "[distribution]\nwatchdog_seconds = 3\nfusion_threshold_mb = 0.001\n");
    dir
}

/// A small deterministic generator for the trials' random rank and step.
fn pick(seed: &mut u64, n: u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*seed >> 33) % n
}

fn trial(dir: &Path, ranks: usize, kind: &str, rank: u64, step: u64) {
    let spec = format!("{rank}:{step}:{kind}");
    let run = mpirun_env(
        ranks,
        &[("HVTRAIN_INJECT_FAULT", &spec)],
        &["train", "job.toml", "--set", "training.epochs=50"],
        dir,
        60,
    );
    let what = format!("{ranks} ranks, fault {spec}");
    assert!(!run.ok(), "{what}: the job must fail\n{}", run.all());
    // (mpirun itself exits 137 when a rank died of SIGKILL; the elapsed time tells a hang.)
    assert!(run.elapsed < Duration::from_secs(10), "{what}: took {:?}, more than 10 s\n{}", run.elapsed, run.all());
    match kind {
        "error" => assert!(
            run.stderr.contains(&format!("error on rank {rank}")) && run.stderr.contains("injected fault"),
            "{what}\n{}",
            run.all()
        ),
        "panic" => assert!(run.stderr.contains(&format!("internal error on rank {rank}")), "{what}\n{}", run.all()),
        // mpirun names the rank that died of the signal; our watchdog names the stalled collective.
        "kill" => assert!(
            run.stderr.contains(&format!("rank {rank} ")) && run.stderr.contains("signal 9"),
            "{what}\n{}",
            run.all()
        ),
        "hang" => {
            assert!(run.stderr.contains("has not completed after"), "{what}: the watchdog must fire\n{}", run.all())
        }
        _ => {}
    }
    eprintln!("ok: {what}: ended in {:.2} s with exit {:?}", run.elapsed.as_secs_f64(), run.code);
}

fn trials(ranks: usize, kind: &str) {
    let _g = mpi_lock();
    let dir = setup(&format!("fault-{kind}-{ranks}"));
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
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
fn rank_hang_ends_job_by_watchdog_2_and_3_ranks() {
    trials(2, "hang");
    trials(3, "hang");
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
    assert!(run.elapsed < Duration::from_secs(10), "{}", run.all());
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
