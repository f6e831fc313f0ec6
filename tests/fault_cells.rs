//! The fault matrix (ARCHITECTURE.md, "Liveness"), cell by cell: every mode (data parallel,
//! tensor, pipeline, parameter servers on a worker and on a server) × phase (init, start-up
//! agreement, step, evaluation, checkpoint write, finish) × fault (kill, stop, hang, slow,
//! term), under a real `mpirun`, each with what the job must do:
//!
//! - kill: the job ends non-zero within 25 s (at `finish`: every output is already complete);
//! - stop (SIGSTOP) and hang: the job ends non-zero within 40 s: the silence limit (exit 3) or
//!   the stall limit (exit 4) in the middle, the start-up limit (exit 1) at `init`, the end
//!   limit (exit 5, "done") at `finish`;
//! - slow (2 s): the job finishes with exit 0;
//! - term (SIGTERM, as `scancel` sends): a stop checkpoint at the next step boundary, exit
//!   75, and `--resume auto` finishes the run; at `finish` the run is already done: exit 0.
//!
//! Each mode's cells run in one test that collects every failing cell before it fails, and
//! prints one line per cell with the exit code and the time (the table's figures). Limits are
//! set short so that the matrix runs in minutes: watchdog 4 s, stall 5 s, start-up 6 s,
//! end 4 s.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const D: usize = 8;
const ROWS: usize = 1600;
/// The step at which step faults fire, and the first checkpoint (every 40 steps) at or after
/// which checkpoint faults fire.
const AT: u64 = 40;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Init,
    Start,
    Step,
    Eval,
    Checkpoint,
    Finish,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    Kill,
    Stop,
    Hang,
    Slow,
    Term,
}

const PHASES: [Phase; 6] = [Phase::Init, Phase::Start, Phase::Step, Phase::Eval, Phase::Checkpoint, Phase::Finish];
const FAULTS: [Fault; 5] = [Fault::Kill, Fault::Stop, Fault::Hang, Fault::Slow, Fault::Term];

/// `HVTRAIN_INJECT_FAULT` for a cell on `rank`.
fn spec(rank: usize, phase: Phase, fault: Fault) -> String {
    let kind = match fault {
        Fault::Kill => "kill",
        Fault::Stop => "stop",
        Fault::Hang => "hang",
        Fault::Slow => "slow=2",
        Fault::Term => "term",
    };
    match phase {
        Phase::Init => format!("{rank}:init:{kind}"),
        Phase::Start => format!("{rank}:start:{kind}"),
        Phase::Step => format!("{rank}:{AT}:{kind}"),
        Phase::Eval => format!("{rank}:eval:{kind}"),
        // Only rank 0 writes checkpoints.
        Phase::Checkpoint => match fault {
            Fault::Slow => format!("0:{AT}:slow_checkpoint=2"),
            _ => format!("0:{AT}:{kind}_in_checkpoint"),
        },
        Phase::Finish => format!("{rank}:finish:{kind}"),
    }
}

struct Mode {
    name: &'static str,
    ranks: usize,
    sets: &'static [&'static str],
    /// The rank the faults are injected on (checkpoint faults: rank 0).
    victim: usize,
    steps_per_epoch: u64,
    phases: &'static [Phase],
}

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(ROWS, D, 3, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let limits = "[distribution]\nwatchdog_seconds = 4.0\nstall_seconds = 5.0\nstartup_seconds = 6.0\n\
                  finish_seconds = 4.0\n\n[checkpoint]\nevery_steps = 40\n";
    job(&dir, &[D, 32, 3], "d.h5", Some("d.h5"), limits);
    dir
}

/// Run one cell; `Err` says how it went wrong.
fn cell(dir: &Path, m: &Mode, phase: Phase, fault: Fault) -> Result<String, String> {
    let _ = std::fs::remove_dir_all(dir.join("out"));
    let spec = spec(m.victim, phase, fault);
    let mut args = vec!["train", "job.toml", "--set", "training.epochs=2"];
    for s in m.sets {
        args.extend(["--set", s]);
    }
    let run = mpirun_env(m.ranks, &[("HVTRAIN_INJECT_FAULT", &spec)], &args, dir, 90);
    let t = run.elapsed.as_secs_f64();
    let line = format!("{} | {phase:?} | {fault:?} | {spec}: exit {:?} after {t:.1} s", m.name, run.code);
    eprintln!("{line}");
    let fail = |why: &str| Err(format!("{line}: {why}\n{}", run.all()));
    let done = run.all().contains("done: test accuracy");
    match (fault, phase) {
        (Fault::Slow, _) | (Fault::Term, Phase::Finish) => {
            if !run.ok() || !done {
                return fail("the run must finish with exit 0");
            }
        }
        (Fault::Term, _) => {
            if run.code != Some(75) {
                return fail("a stop request must end the job with 75");
            }
            let n = assert_stop_checkpoint_soft(&dir.join("out"), &run.stderr, m.steps_per_epoch);
            if let Err(e) = n {
                return fail(&e);
            }
            let resumed = mpirun(m.ranks, &[&args[..], &["--resume", "auto"]].concat(), dir, 90);
            if !(resumed.ok() && resumed.stderr.contains("resuming from") && resumed.all().contains("done: test")) {
                return Err(format!("{line}: the resume did not finish\n{}", resumed.all()));
            }
            if metrics(dir).len() != 2 {
                return fail("both epochs must be in metrics.jsonl after the resume");
            }
        }
        (Fault::Kill, _) => {
            if run.ok() || run.elapsed > Duration::from_secs(25) {
                return fail("a killed rank must end the job non-zero within 25 s");
            }
            if phase == Phase::Finish && !done {
                return fail("killed at the end: the run had finished");
            }
        }
        (Fault::Stop | Fault::Hang, _) => {
            if run.ok() || run.elapsed > Duration::from_secs(40) {
                return fail("a stopped or hung rank must end the job non-zero within 40 s");
            }
            let want = match phase {
                Phase::Init => 1,
                Phase::Finish => 5,
                _ if fault == Fault::Stop => 3,
                _ => 4,
            };
            if run.code != Some(want) {
                return fail(&format!("expected exit {want}"));
            }
            if phase == Phase::Finish {
                let e = hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5"], dir, 60);
                if !(e.ok() && e.stdout.contains("test_accuracy")) {
                    return Err(format!("{line}: eval on the outputs failed\n{}", e.all()));
                }
            }
        }
    }
    Ok(line)
}

/// `assert_stop_checkpoint` as a `Result`, so that one cell's failure does not hide the rest.
fn assert_stop_checkpoint_soft(out: &Path, log: &str, spe: u64) -> Result<u64, String> {
    let (out, log) = (out.to_path_buf(), log.to_string());
    std::panic::catch_unwind(move || assert_stop_checkpoint(&out, &log, spe)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn matrix(m: Mode, faults: &[Fault]) {
    let _g = mpi_lock();
    let dir = setup(&format!("cells-{}", m.name.replace(' ', "-")));
    let mut failed = Vec::new();
    // CELLS="Step:Term,Init:Stop" runs only those cells (to check one after a change).
    let only = std::env::var("CELLS").ok();
    for &phase in m.phases {
        for &fault in faults {
            let name = format!("{phase:?}:{fault:?}");
            if only.as_ref().is_some_and(|o| !o.split(',').any(|c| c == name)) {
                continue;
            }
            if let Err(e) = cell(&dir, &m, phase, fault) {
                failed.push(e);
            }
        }
    }
    assert!(failed.is_empty(), "{} of the {} cells failed:\n\n{}", failed.len(), m.name, failed.join("\n\n"));
}

#[test]
fn data_parallel() {
    let m = Mode { name: "data parallel", ranks: 2, sets: &[], victim: 1, steps_per_epoch: 200, phases: &PHASES };
    matrix(m, &FAULTS);
}

#[test]
fn tensor_parallel() {
    let sets = &["parallel.tensor=2"];
    let m = Mode { name: "tensor", ranks: 2, sets, victim: 1, steps_per_epoch: 400, phases: &PHASES };
    matrix(m, &FAULTS);
}

#[test]
fn pipeline_parallel() {
    let sets = &["parallel.pipeline=2"];
    let m = Mode { name: "pipeline", ranks: 2, sets, victim: 1, steps_per_epoch: 400, phases: &PHASES };
    matrix(m, &FAULTS);
}

/// One server (rank 2) and two workers; the faults on worker 1.
#[test]
fn parameter_server_worker() {
    let sets = &["distribution.strategy=\"parameter_server\""];
    let m = Mode { name: "ps worker", ranks: 3, sets, victim: 1, steps_per_epoch: 200, phases: &PHASES };
    matrix(m, &FAULTS);
}

/// The same on the server. A server evaluates nothing and writes no checkpoint (worker 0
/// assembles it from the servers' replies during its steps' phase), so its phases are init,
/// the start-up agreement, serving steps and the end.
#[test]
fn parameter_server_server() {
    let sets = &["distribution.strategy=\"parameter_server\""];
    let phases = &[Phase::Init, Phase::Start, Phase::Step, Phase::Finish];
    let m = Mode { name: "ps server", ranks: 3, sets, victim: 2, steps_per_epoch: 200, phases };
    matrix(m, &FAULTS);
}
