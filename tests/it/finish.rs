//! The end limit (`distribution.finish_seconds`), under a real `mpirun`: a rank stopped (SIGSTOP)
//! or hung after the heartbeats end (fault point `finish`, before the final handshake and
//! MPI_Finalize) no longer holds the others for ever: with the default limit (30 s) the job
//! ends within 60 s with exit code 5 ("done, a rank hung at exit"), a line that says every
//! output is complete and names the rank, and `hvtrain eval` on the outputs passes; rank 0
//! stopped there is named by the others; a rank slow at the end but within the limit ends the
//! job with 0; the limit's bounds are checked.

use crate::common;
use common::*;
use std::path::PathBuf;
use std::time::Duration;

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(400, 4, 3, 1);
    write_classes(&dir.join("d.h5"), &x, 4, &y);
    job(&dir, &[4, 8, 3], "d.h5", Some("d.h5"), "");
    dir
}

fn eval_passes(dir: &std::path::Path) {
    let e = hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5"], dir, 60);
    assert!(e.ok() && e.stdout.contains("test_accuracy"), "eval on the outputs: {}", e.all());
    assert!(std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap().lines().count() == 1);
}

#[test]
fn a_rank_stopped_at_the_end_ends_the_job_with_exit_5_and_complete_outputs() {
    let _g = mpi_lock();
    let dir = setup("finish-stop");
    let r = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:finish:stop")], &["train", "job.toml"], &dir, 120);
    let all = r.all();
    assert_eq!(r.code, Some(5), "{all}");
    assert!(r.elapsed < Duration::from_secs(60), "took {:?}\n{all}", r.elapsed);
    assert!(all.contains("every output is complete") && all.contains("rank(s) 1 did not finish within 30 s"), "{all}");
    assert!(all.contains("done: test accuracy"), "training finished before the end: {all}");
    eval_passes(&dir);
}

#[test]
fn rank_0_hung_at_the_end_is_named_by_the_others_and_a_slow_end_is_fine() {
    let _g = mpi_lock();
    let dir = setup("finish-hang-0");
    let env = [("HVTRAIN_INJECT_FAULT", "0:finish:hang"), ("HVTRAIN_FINISH_SECONDS", "4")];
    let r = mpirun_env(2, &env, &["train", "job.toml"], &dir, 120);
    let all = r.all();
    assert_eq!(r.code, Some(5), "{all}");
    assert!(r.elapsed < Duration::from_secs(30), "took {:?}\n{all}", r.elapsed);
    assert!(all.contains("rank 0 did not confirm the end"), "{all}");
    eval_passes(&dir);

    let dir = setup("finish-slow");
    let env = [("HVTRAIN_INJECT_FAULT", "1:finish:slow=2"), ("HVTRAIN_FINISH_SECONDS", "10")];
    let r = mpirun_env(2, &env, &["train", "job.toml"], &dir, 120);
    assert!(r.ok(), "a rank 2 s slow at the end, within 10 s: {}", r.all());
}

#[test]
fn the_limit_is_checked() {
    let dir = setup("finish-config");
    for v in ["0", "-1", "1e9"] {
        let r = hvtrain(&["train", "job.toml", "--set", &format!("distribution.finish_seconds={v}")], &dir, 30);
        assert!(!r.ok() && r.all().contains("distribution.finish_seconds"), "{v}: {}", r.all());
    }
    let r = hvtrain(&["train", "job.toml"], &dir, 30);
    assert!(r.ok(), "{}", r.all());
    let bad = [("HVTRAIN_INJECT_FAULT", "0:finish:error")];
    let r = mpirun_env(1, &bad, &["train", "job.toml"], &dir, 30);
    assert!(
        !r.ok() && r.all().contains("HVTRAIN_INJECT_FAULT"),
        "finish takes stop, kill, hang, slow only: {}",
        r.all()
    );
}
