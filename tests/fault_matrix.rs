//! Cells of the fault matrix (ARCHITECTURE.md, "Liveness") that `faults.rs`, `startup.rs` and
//! `finish.rs` leave open, under a real `mpirun` with 2 ranks: a rank killed or hung at the
//! start-up agreement (`start`) or in the evaluation (`eval`, inside `train` and in `hvtrain
//! eval`), and killed at the end (`finish`), ends the job non-zero within a bound; a hang is a
//! stall (`stall_seconds = 5`). After the kill at the end, every output is complete and `eval`
//! on it passes. With parameter servers, a hung worker or server is a stall too. SIGTERM at
//! the start-up agreement or in the evaluation stops at the next step with a checkpoint (75). Each prints
//! how long the job took, for the table.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const D: usize = 8;

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(1600, D, 3, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &[D, 32, 3], "d.h5", Some("d.h5"), "[distribution]\nstall_seconds = 5.0\n");
    dir
}

/// Run `args` on 2 ranks with `spec`; the job must fail within `bound`.
fn ends(dir: &Path, spec: &str, args: &[&str], bound: Duration) -> Run {
    let _ = std::fs::remove_dir_all(dir.join("out2"));
    let run = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", spec)], args, dir, 90);
    eprintln!("fault {spec} ({}): exit {:?} after {:.1} s", args[0], run.code, run.elapsed.as_secs_f64());
    assert!(!run.ok(), "fault {spec}: the job must fail\n{}", run.all());
    assert!(run.elapsed < bound, "fault {spec}: took {:?} (bound {bound:?})\n{}", run.elapsed, run.all());
    run
}

#[test]
fn killed_or_hung_at_start_up_and_in_evaluation_ends_the_job() {
    let _g = mpi_lock();
    let dir = setup("matrix");
    let train = ["train", "job.toml", "--set", "output.dir=\"out2\""];
    for spec in ["1:start:kill", "0:eval:kill"] {
        ends(&dir, spec, &train, Duration::from_secs(20));
    }
    for spec in ["1:start:hang", "1:eval:hang"] {
        let run = ends(&dir, spec, &train, Duration::from_secs(40));
        assert_eq!(run.code, Some(4), "a hang is a stall (exit 4)\n{}", run.all());
    }
    let trained = mpirun(2, &["train", "job.toml"], &dir, 60);
    assert!(trained.ok(), "{}", trained.all());
    let eval = ["eval", "job.toml", "--weights", "out/weights.h5"];
    ends(&dir, "1:eval:kill", &eval, Duration::from_secs(20));
    let run = ends(&dir, "0:eval:hang", &eval, Duration::from_secs(40));
    assert_eq!(run.code, Some(4), "{}", run.all());
}

#[test]
fn killed_at_the_end_leaves_complete_outputs() {
    let _g = mpi_lock();
    let dir = setup("matrix-finish");
    let run = ends(&dir, "1:finish:kill", &["train", "job.toml"], Duration::from_secs(40));
    assert!(run.all().contains("done: test accuracy"), "{}", run.all());
    let e = hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5"], &dir, 60);
    assert!(e.ok() && e.stdout.contains("test_accuracy"), "{}", e.all());
}

/// Parameter servers: a worker or a server that hangs (alive, no progress) mid-training is a
/// stall: with `stall_seconds = 5` the job ends with exit 4.
#[test]
fn a_hung_worker_or_server_is_a_stall() {
    let _g = mpi_lock();
    let dir = setup("matrix-ps");
    let args =
        ["train", "job.toml", "--set", "distribution.strategy=\"parameter_server\"", "--set", "training.epochs=200"];
    for spec in ["1:40:hang", "2:40:hang"] {
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let run = mpirun_env(3, &[("HVTRAIN_INJECT_FAULT", spec)], &args, &dir, 90);
        eprintln!("fault {spec} (parameter servers): exit {:?} after {:.1} s", run.code, run.elapsed.as_secs_f64());
        assert_eq!(run.code, Some(4), "fault {spec}: a stall (exit 4)\n{}", run.all());
        assert!(run.elapsed < Duration::from_secs(40), "fault {spec}: took {:?}\n{}", run.elapsed, run.all());
    }
}

/// SIGTERM at the start-up agreement or in the end-of-epoch evaluation: the stop takes effect
/// at the next step boundary (step 1; the next epoch's first step), with a stop checkpoint
/// there and exit 75, and `--resume auto` finishes the run.
#[test]
fn sigterm_at_start_up_or_in_evaluation_stops_at_the_next_step() {
    let _g = mpi_lock();
    let dir = setup("matrix-term");
    // 1600 rows / (2 ranks × batch 4) = 200 steps per epoch.
    for (spec, step) in [("1:start:term", 1), ("0:eval:term", 201)] {
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let args = ["train", "job.toml", "--set", "training.epochs=2"];
        let run = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", spec)], &args, &dir, 90);
        eprintln!("fault {spec}: exit {:?} after {:.1} s", run.code, run.elapsed.as_secs_f64());
        assert_eq!(run.code, Some(75), "fault {spec}\n{}", run.all());
        assert_eq!(assert_stop_checkpoint(&dir.join("out"), &run.stderr, 200), step, "fault {spec}");
        let resumed = mpirun(2, &[&args[..], &["--resume", "auto"]].concat(), &dir, 90);
        assert!(resumed.ok() && resumed.stderr.contains("resuming from"), "{}", resumed.all());
        assert_eq!(metrics(&dir).len(), 2, "fault {spec}: both epochs in metrics.jsonl");
    }
}
