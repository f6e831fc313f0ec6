//! The stop checkpoint survives however a preemption's signals arrive. `timeout` and
//! `scancel` signal `mpirun` as well as the ranks; `mpirun` then signals the ranks again and
//! kills them a second later, and a second signal to `mpirun` makes it exit at once (its ranks
//! are torn down a few seconds after). Each try sends SIGTERM to `timeout`, `mpirun` and each
//! rank twice (directly, and again as `mpirun` or a scheduler would pass it on), in a random
//! order with random delays, most of them zero (back to back, from this process), then checks that a checkpoint of the step the
//! job stopped at exists, that `--resume auto` continues from it, and that the resumed run
//! ends with weights bit-identical to a run that was never interrupted (so what was written
//! is a completed step's state, never a step in flight).

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const D: usize = 8;
const LAYERS: [usize; 4] = [D, 256, 256, 3];
const TRIES: usize = 20;
/// About 3000 steps of about a millisecond: the signals (within a second of the first step)
/// come mid-run.
const EPOCHS: &str = "training.epochs=40";

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(4800, D, 3, 11);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    // No periodic checkpoints: the only one is the stop checkpoint.
    let p = job(&dir, &LAYERS, "d.h5", None, "[optimizer]\nkind = \"adam\"\nlr = 0.002\n[checkpoint]\nkeep = 3\n");
    let text = std::fs::read_to_string(&p).unwrap().replace("batch_size = 4", "batch_size = 32");
    std::fs::write(&p, text).unwrap();
    dir
}

fn weights(out: &Path) -> Vec<Vec<f32>> {
    layer_tensors(&out.join("weights.h5"), 3)
}

fn pick(seed: &mut u64, n: u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*seed >> 33) % n
}

fn step_of(name: &str) -> u64 {
    name.strip_prefix("ckpt-step").and_then(|s| s.strip_suffix(".h5")).unwrap().parse().unwrap()
}

/// One try: start the job under `timeout 300 mpirun`, wait until it trains, signal the
/// processes in a random order. Returns (the signal order, the log, the checkpoints left).
fn signalled(dir: &Path, out: &str, seed: &mut u64) -> (String, String, Vec<String>) {
    let mut child = Command::new("timeout")
        .args(["300", "mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"])
        .args(["-n", "2", BIN, "train", "job.toml", "--set", EPOCHS, "--set", &format!("output.dir=\"{out}\"")])
        .current_dir(dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (log, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                log.lock().unwrap().push_str(&(line + "\n"));
            }
        })
    };
    let t = Instant::now();
    while !log.lock().unwrap().contains("first step done") {
        assert!(t.elapsed() < Duration::from_secs(60), "the job did not start\n{}", log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    let timeout_pid = child.id();
    let mpirun = children(timeout_pid);
    assert_eq!(mpirun.len(), 1, "one mpirun under timeout");
    let ranks = children(mpirun[0]);
    assert_eq!(ranks.len(), 2, "two ranks under mpirun: {ranks:?}");
    let mut targets = vec![
        ("timeout", timeout_pid),
        ("mpirun", mpirun[0]),
        ("rank a", ranks[0]),
        ("rank b", ranks[1]),
        ("rank a", ranks[0]),
        ("rank b", ranks[1]),
    ];
    for i in (1..targets.len()).rev() {
        targets.swap(i, pick(seed, i as u64 + 1) as usize);
    }
    std::thread::sleep(Duration::from_millis(100 + pick(seed, 300)));
    let mut order = Vec::new();
    for (name, pid) in targets {
        let delay = [0, 0, 0, 0, 1, 2, 5, 20][pick(seed, 8) as usize];
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        signal(pid, 15);
        order.push(format!("+{delay}ms {name}"));
    }
    let status = child.wait().unwrap();
    let _ = reader.join();
    // mpirun may have left before its ranks: wait for them to be gone.
    let t = Instant::now();
    while ranks.iter().any(|&p| alive(p)) {
        assert!(t.elapsed() < Duration::from_secs(20), "ranks {ranks:?} still alive 20 s after the signals");
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = format!("{}\nexit {status}", log.lock().unwrap());
    (order.join(", "), log, checkpoints(&dir.join(out)))
}

#[test]
fn stop_checkpoint_survives_sigterm_to_timeout_mpirun_and_ranks_in_any_order() {
    let _g = mpi_lock();
    let dir = setup("preempt");
    let clean = mpirun(2, &["train", "job.toml", "--set", EPOCHS, "--set", "output.dir=\"clean\""], &dir, 120);
    assert!(clean.ok(), "{}", clean.all());
    let want = weights(&dir.join("clean"));
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut lost = Vec::new();
    let t0 = Instant::now();
    for k in 0..TRIES {
        let out = format!("out-{k}");
        let (order, log, ckpts) = signalled(&dir, &out, &mut seed);
        let stopped_at = log
            .lines()
            .find_map(|l| l.split("stopped by a signal at step ").nth(1))
            .map(|s| s.split(';').next().unwrap().parse::<u64>().unwrap());
        let tmp: Vec<String> = std::fs::read_dir(dir.join(&out))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(
            !dir.join(&out).join("weights.h5").exists(),
            "try {k} ({order}): the job finished before the signals; make it longer\n{log}"
        );
        if ckpts.len() != 1 {
            eprintln!("try {k} ({order}): LOST: checkpoints {ckpts:?}, temporary files {tmp:?}\n{log}");
            lost.push(k);
            continue;
        }
        let step = step_of(&ckpts[0]);
        // The log line, when mpirun was still there to pass it on, names the same step.
        if let Some(s) = stopped_at {
            assert_eq!(s, step, "try {k} ({order}): the log says step {s}, the checkpoint is of step {step}\n{log}");
        }
        assert!(tmp.is_empty(), "try {k} ({order}): temporary files left: {tmp:?}");
        let resumed = mpirun(
            2,
            &["train", "job.toml", "--set", EPOCHS, "--set", &format!("output.dir=\"{out}\""), "--resume", "auto"],
            &dir,
            120,
        );
        assert!(resumed.ok(), "try {k} ({order}): --resume auto failed\n{}", resumed.all());
        assert!(resumed.stderr.contains(&format!("resuming from {out}/{}", ckpts[0])), "{}", resumed.all());
        assert!(
            weights(&dir.join(&out)) == want,
            "try {k} ({order}): resumed from step {step}, the weights differ from the uninterrupted run's"
        );
        eprintln!(
            "try {k}: {order}: stop checkpoint of step {step}{}; resumed to identical weights",
            if stopped_at.is_some() { " (logged)" } else { " (log lost with mpirun)" }
        );
        let _ = std::fs::remove_dir_all(dir.join(&out));
    }
    eprintln!("{TRIES} tries in {:.0} s, {} lost", t0.elapsed().as_secs_f64(), lost.len());
    assert!(lost.is_empty(), "stop checkpoint lost in tries {lost:?} of {TRIES}");
}
