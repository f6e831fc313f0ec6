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
//! set short so that the matrix runs in minutes: watchdog 4 s, stall 8 s, start-up 6 s,
//! end 4 s. (The stall limit leaves 4 s between a stopped rank's silence, exit 3, and a stall,
//! exit 4, and 6 s above a slow rank's 2 s: cells run side by side, and a busy machine delays.)

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
    let limits = "[distribution]\nwatchdog_seconds = 4.0\nstall_seconds = 8.0\nstartup_seconds = 6.0\n\
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

/// Open MPI 4.1.4's `mpirun` (PMIx 4.2.2, Debian 12), rarely (once in some 20 CI runs of this matrix, about 3,000 cells), does
/// not exit after every rank has: it logs "PMIX ERROR: UNREACHABLE" from its connection handler
/// and hangs in its own teardown until the harness kills it ("exit None"). Seen once at
/// `init:stop` with all three ranks' start-up lines printed, i.e. no hvtrain process left.
/// Nothing a rank does can end a launcher that hangs after the ranks are gone, so such a cell
/// runs again (at most twice more); a cell whose ranks do hang fails every time.
/// The same teardown also crashes, as rarely: a clean-clone CI run (2026-11-30, 3d9d19a) saw
/// `mpirun` die of a segmentation fault in `PMIx_server_finalize` (its backtrace in the log:
/// "exit None", no exit code) at `init:stop` of the parameter-server worker matrix, after
/// every rank had printed its start-up error and exited 1 as the cell expects.
/// The hang also ends as `timeout`'s 124 (its TERM ended `mpirun`): a clean-clone CI run
/// (2026-12-07, 6230089) saw `ps server | Init | Stop` exit 124 after 90 s with "PMIX ERROR:
/// UNREACHABLE" in the log, both other ranks having printed their start-up error at 6 s.
fn launcher_hung_in_teardown(failure: &str) -> bool {
    (failure.contains(": exit None after") || failure.contains(": exit Some(124) after"))
        && (failure.contains("PMIX ERROR: UNREACHABLE") || failure.contains("PMIx_server_finalize"))
}

/// The cells of one mode, 3 at a time (`FAULT_CELL_WORKERS`), each worker in a folder of its
/// own: a cell mostly waits (for a watchdog, a stall limit, a slow rank), and one at a time
/// left 2 cores 80 % idle. A slow cell (the rank delayed 2 s must not be taken for stalled)
/// runs alone, after the others: beside two others a parameter server's checkpoint of step 40
/// once took 6 s. The whole matrix on 2 vCPUs: 668 s one cell at a time; 328 s so.
fn matrix(m: Mode, faults: &[Fault]) {
    let _g = mpi_lock();
    let workers: usize = std::env::var("FAULT_CELL_WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(3).max(1);
    // CELLS="Step:Term,Init:Stop" runs only those cells (to check one after a change).
    let only = std::env::var("CELLS").ok();
    let mut todo: Vec<(Phase, Fault)> = Vec::new();
    for &phase in m.phases {
        for &fault in faults {
            let name = format!("{phase:?}:{fault:?}");
            if only.as_ref().is_none_or(|o| o.split(',').any(|c| c == name)) {
                todo.push((phase, fault));
            }
        }
    }
    // Slow cells last (taken in order from the end): each runs alone, so they come after every
    // cell that can share the machine, rather than draining the workers again and again.
    todo.sort_by_key(|&(_, f)| f == Fault::Slow);
    todo.reverse();
    let queue = std::sync::Mutex::new(todo);
    let failed = std::sync::Mutex::new(Vec::new());
    // Shared by the cells that may run side by side, taken alone by a slow cell.
    let alone = std::sync::RwLock::new(());
    std::thread::scope(|sc| {
        for w in 0..workers {
            let (m, queue, failed, alone) = (&m, &queue, &failed, &alone);
            sc.spawn(move || {
                let dir = setup(&format!("cells-{}-{w}", m.name.replace(' ', "-")));
                loop {
                    let Some((phase, fault)) = queue.lock().unwrap().pop() else { break };
                    let (_shared, _exclusive) = match fault {
                        Fault::Slow => (None, Some(alone.write().unwrap_or_else(|e| e.into_inner()))),
                        _ => (Some(alone.read().unwrap_or_else(|e| e.into_inner())), None),
                    };
                    let mut result = cell(&dir, m, phase, fault);
                    // Up to twice more: a clean-clone CI run (2026-11-29, b6c4d41) failed a cell
                    // on this launcher hang after its one rerun, under the load of two other
                    // cells; alone, the same cell passed 28 times in a row.
                    for _ in 0..2 {
                        if !result.as_ref().is_err_and(|e| launcher_hung_in_teardown(e)) {
                            break;
                        }
                        eprintln!("{phase:?}:{fault:?}: mpirun itself hung or crashed in its teardown after its ranks ended (PMIx); run again");
                        result = cell(&dir, m, phase, fault);
                    }
                    if let Err(e) = result {
                        failed.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
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

/// The cells "launcher signalled twice" (all-reduce mode, a step, term; issue #32): `scancel`
/// signals every process of a job (the batch shell, `mpirun`, each rank), and a `timeout`
/// around the launch, or a second `scancel`, signals `mpirun` again, which then exits at once.
/// `jobs/cpu.sbatch` (run as Slurm would, with `mpirun` as the launcher) must end only once
/// the stop checkpoint is complete on disk, and with 75, in 20 of 20 tries (the second signal
/// TERM or INT). Open MPI 4.1's ranks end themselves some 10-50 ms after `mpirun` is gone, so
/// what the batch script can wait for is a write shorter than that (this model's); a longer
/// one needs `mpirun` to get one signal only (docs/checkpoints.md, "Preemption"). So four more tries signal
/// every process once, with rank 0's write slowed by 2 s: `mpirun` must let its ranks finish
/// (it kills them 1 s after its TERM unless the script passes HVTRAIN_MPIRUN_KILL_AFTER on).
/// The last try's checkpoint is resumed.
#[test]
fn launcher_signalled_twice() {
    const TRIES: usize = 20;
    const SLOW: usize = 4;
    let _g = mpi_lock();
    let dir = scratch("cells-launcher-twice");
    let (x, y) = synthetic(4800, D, 3, 11);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    // No periodic checkpoints: the only one is the stop checkpoint.
    job(&dir, &[D, 256, 256, 3], "d.h5", None, "[checkpoint]\nkeep = 3\n");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs/cpu.sbatch");
    let mut failed = Vec::new();
    for k in 0..TRIES + SLOW {
        let slow = k >= TRIES;
        // The second signal to mpirun: TERM or INT; none in the slowed tries.
        let second = if slow {
            None
        } else if k % 2 == 0 {
            Some(15)
        } else {
            Some(2)
        };
        let out = format!("out-{k}");
        match twice(&dir, &script, &out, slow, second) {
            Ok(line) => eprintln!("try {k}: {line}"),
            Err(e) => {
                eprintln!("try {k}: FAILED: {}", e.lines().next().unwrap_or(""));
                failed.push(format!("try {k}: {e}"));
            }
        }
        if k + 1 < TRIES + SLOW {
            let _ = std::fs::remove_dir_all(dir.join(&out));
        }
    }
    assert!(failed.is_empty(), "{} of {} tries failed:\n\n{}", failed.len(), TRIES + SLOW, failed.join("\n\n"));
    let last = format!("output.dir=\"out-{}\"", TRIES + SLOW - 1);
    let args = ["train", "job.toml", "--set", "training.epochs=40", "--set", "training.batch_size=32"];
    let resumed = mpirun(2, &[&args[..], &["--set", &last, "--resume", "auto"]].concat(), &dir, 120);
    assert!(resumed.ok() && resumed.stderr.contains("resuming from"), "{}", resumed.all());
}

/// One try of `launcher_signalled_twice`: Ok(what happened) or Err(why it failed, the log).
fn twice(dir: &Path, script: &Path, out: &str, slow: bool, second: Option<i32>) -> Result<String, String> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .current_dir(dir)
        .env("HVTRAIN_JOB", "job.toml")
        .env("HVTRAIN_BIN", BIN)
        .env("HVTRAIN_LAUNCHER", "mpirun")
        // mpirun's kill timeout: above the slowed write's 2 s, and short, since mpirun sits out
        // twice that after its TERM however soon the ranks end.
        .env("HVTRAIN_MPIRUN_KILL_AFTER", "5")
        .env("HVTRAIN_SET", format!("training.epochs=40 training.batch_size=32 output.dir=\"{out}\""))
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if slow {
        cmd.env("HVTRAIN_INJECT_FAULT", "0:1:slow_checkpoint=2");
    }
    let mut child = cmd.spawn().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let readers: Vec<_> = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ]
    .into_iter()
    .map(|r| {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(|l| l.ok()) {
                log.lock().unwrap().push_str(&(line + "\n"));
            }
        })
    })
    .collect();
    let t = Instant::now();
    while !log.lock().unwrap().contains("first step done") {
        if t.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the job did not start\n{}", log.lock().unwrap()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let shell = child.id();
    let mpirun = children(shell);
    let ranks = mpirun.first().map(|&m| children(m)).unwrap_or_default();
    if mpirun.len() != 1 || ranks.len() != 2 {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("expected one mpirun under the batch shell and two ranks under it: {mpirun:?} {ranks:?}"));
    }
    std::thread::sleep(Duration::from_millis(200));
    // scancel: every process of the job, back to back; then the second signal to mpirun.
    for pid in [shell, mpirun[0], ranks[0], ranks[1]] {
        signal(pid, 15);
    }
    if let Some(sig) = second {
        std::thread::sleep(Duration::from_millis(10));
        signal(mpirun[0], sig);
    }
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            return Err(format!("the batch script did not end within 60 s\n{}", log.lock().unwrap()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let ended = t.elapsed().as_secs_f64();
    // What is on disk the moment the batch script (and so, under Slurm, the job) ends.
    let outdir = dir.join(out);
    let ckpts = checkpoints(&outdir);
    let tmp: Vec<String> = std::fs::read_dir(&outdir)
        .map(|rd| {
            rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".tmp")).collect()
        })
        .unwrap_or_default();
    let at_exit = format!("checkpoints {ckpts:?}, temporary files {tmp:?}, exit {status}");
    // The ranks may outlive mpirun: wait for them before the next try.
    let t = Instant::now();
    while ranks.iter().any(|&p| alive(p)) && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in readers {
        let _ = r.join();
    }
    let log = log.lock().unwrap().clone();
    let fail = |why: &str| Err(format!("{why}: {at_exit}\n{log}"));
    if outdir.join("weights.h5").exists() {
        return fail("the job finished before the signals; make it longer");
    }
    if ckpts.len() != 1 || !tmp.is_empty() {
        return fail("the stop checkpoint was not complete on disk when the batch script ended");
    }
    if status.code() != Some(75) {
        return fail("the batch script must end with 75 (stopped with a checkpoint)");
    }
    let lock = std::fs::read_to_string(outdir.join(".hvtrain-rank0.lock")).unwrap_or_default();
    let step = ckpts[0].trim_start_matches("ckpt-step").trim_end_matches(".h5").parse::<u64>().unwrap();
    if !lock.contains(&format!("stopped at step {step}")) || checkpoint_step(&outdir.join(&ckpts[0])) != step {
        return fail(&format!("rank 0's lock file ({}) or the checkpoint disagree on the step", lock.trim()));
    }
    if slow && ended < 2.0 {
        return fail("the write was slowed by 2 s, the script cannot have ended sooner");
    }
    let waited = log.contains("hvtrain wait: rank 0 (");
    let what = match second {
        Some(15) => "a second TERM to mpirun",
        Some(_) => "a second INT to mpirun",
        None => "one TERM to each process, rank 0's write slowed 2 s",
    };
    Ok(format!(
        "{what}: stop checkpoint of step {step} complete when the script ended ({:.2} s after the signals), exit 75{}",
        ended,
        if waited { ", the script waited for rank 0" } else { "" }
    ))
}
