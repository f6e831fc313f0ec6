//! The fault matrix's cells for `hvtrain eval` (ARCHITECTURE.md, "Liveness"; the training
//! cells of every mode are `fault_cells.rs`'), under a real `mpirun` with 2 ranks: a rank
//! killed or hung in the evaluation ends the job non-zero within a bound; a hang is a stall
//! (`stall_seconds = 5`). Each prints how long the job took, for the table.

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

/// `hvtrain eval` (the training cells are `fault_cells.rs`'): a rank killed or hung in the
/// evaluation ends the job, the hang as a stall.
#[test]
fn killed_or_hung_in_hvtrain_eval_ends_the_job() {
    let _g = mpi_lock();
    let dir = setup("matrix");
    let trained = mpirun(2, &["train", "job.toml"], &dir, 60);
    assert!(trained.ok(), "{}", trained.all());
    let eval = ["eval", "job.toml", "--weights", "out/weights.h5"];
    ends(&dir, "1:eval:kill", &eval, Duration::from_secs(20));
    let run = ends(&dir, "0:eval:hang", &eval, Duration::from_secs(40));
    assert_eq!(run.code, Some(4), "{}", run.all());
}
