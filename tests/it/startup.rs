//! The start-up limit (`distribution.startup_seconds`), under a real `mpirun`: a rank stopped
//! (SIGSTOP) or hung before `MPI_Init` holds the other in `MPI_Init`; with a 10 s limit the job
//! ends within 30 s, non-zero, with a line naming the phase; a rank slow to start but within
//! the limit does not fail the job; a killed one ends it at once; and the limit's bounds are
//! checked.

use crate::common;
use common::*;
use std::path::PathBuf;
use std::time::Duration;

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(400, 4, 3, 1);
    write_classes(&dir.join("d.h5"), &x, 4, &y);
    job(&dir, &[4, 8, 3], "d.h5", None, "[distribution]\nstartup_seconds = 10.0\n");
    dir
}

#[test]
fn a_rank_stopped_or_hung_before_mpi_init_ends_the_job_within_the_limit() {
    let _g = mpi_lock();
    for kind in ["stop", "hang"] {
        let dir = setup(&format!("startup-{kind}"));
        let spec = format!("1:init:{kind}");
        let r = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", &spec)], &["train", "job.toml"], &dir, 90);
        assert!(!r.ok(), "{kind}: the job must fail\n{}", r.all());
        assert!(r.elapsed < Duration::from_secs(30), "{kind}: took {:?}\n{}", r.elapsed, r.all());
        assert!(
            r.all().contains("start-up did not finish within 10 s") && r.all().contains("stuck in MPI_Init"),
            "{kind}: {}",
            r.all()
        );
    }
}

#[test]
fn a_slow_rank_within_the_limit_and_a_killed_one() {
    let _g = mpi_lock();
    let dir = setup("startup-slow");
    let r = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:init:slow=3")], &["train", "job.toml"], &dir, 90);
    assert!(r.ok() && r.all().contains("done after"), "{}", r.all());
    let dir = setup("startup-kill");
    let r = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "0:init:kill")], &["train", "job.toml"], &dir, 90);
    assert!(!r.ok() && r.elapsed < Duration::from_secs(10), "{:?}\n{}", r.elapsed, r.all());
}

#[test]
fn the_limit_is_checked_and_the_environment_overrides_it() {
    let dir = setup("startup-config");
    let r = hvtrain(&["train", "job.toml", "--set", "distribution.startup_seconds=0"], &dir, 30);
    assert!(!r.ok() && r.all().contains("distribution.startup_seconds"), "{}", r.all());
    let _g = mpi_lock();
    // HVTRAIN_STARTUP_SECONDS=2 over the job's 10: a rank stopped at init ends the job sooner.
    let env = [("HVTRAIN_INJECT_FAULT", "1:init:stop"), ("HVTRAIN_STARTUP_SECONDS", "2")];
    let r = mpirun_env(2, &env, &["train", "job.toml"], &dir, 90);
    assert!(!r.ok() && r.all().contains("within 2 s"), "{}", r.all());
    let r = hvtrain(&["train", "job.toml"], &dir, 30);
    assert!(r.ok(), "{}", r.all());
}

/// `training.threads = "auto"` (the default): a run without a launcher takes every CPU it may
/// run on, two ranks that `mpirun --bind-to none` leaves unbound share the node's CPUs, and
/// OMP_NUM_THREADS, where set, is taken as said; the start-up line says which and why.
#[test]
fn auto_threads_are_the_cpus_the_launch_gave_each_rank() {
    let dir = setup("auto_threads");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()).min(64);
    let line = |r: &Run| r.stderr.lines().find(|l| l.contains("CPU threads:")).map(str::to_string).unwrap_or_default();
    let one = hvtrain(&["train", "job.toml"], &dir, 120);
    assert!(one.ok(), "{}", one.all());
    assert!(line(&one).contains(&format!("CPU threads: {cpus} on rank 0")), "{}", line(&one));
    assert!(line(&one).contains(&format!("the {cpus} CPU(s) this rank may run on")), "{}", line(&one));
    let two = mpirun(2, &["train", "job.toml"], &dir, 120);
    assert!(two.ok(), "{}", two.all());
    assert!(line(&two).contains(&format!("CPU threads: {} on rank 0", (cpus / 2).max(1))), "{}", line(&two));
    let omp = mpirun_env(2, &[("OMP_NUM_THREADS", "3")], &["train", "job.toml"], &dir, 120);
    assert!(omp.ok(), "{}", omp.all());
    assert!(
        line(&omp).contains("CPU threads: 3 on rank 0") && line(&omp).contains("OMP_NUM_THREADS = 3"),
        "{}",
        line(&omp)
    );
}
