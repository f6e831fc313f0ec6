//! Parameter servers keep their work on SIGTERM/SIGUSR1, under a real `mpirun`: a job of 1
//! server and 2 workers, every rank signalled as `scancel` does, stops every worker after the
//! same step (the workers' non-blocking stop vote), writes one stop checkpoint (the servers'
//! parameters and optimizer state, the position, every worker's running sums) and exits 75;
//! `--resume auto` from it ends, with staleness 0, bit-identical (weights and every epoch's
//! train_loss) to a run that was never interrupted; and it resumes on 4 workers too.

use crate::common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const D: usize = 6;
const LAYERS: [usize; 4] = [D, 16, 12, 3];
const PS: [&str; 6] = [
    "--set",
    "distribution.strategy=\"parameter_server\"",
    "--set",
    "training.epochs=2",
    "--set",
    "checkpoint.every_steps=50",
];

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(2400, D, 3, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", None, "[optimizer]\nkind = \"adam\"\nlr = 0.005\n");
    dir
}

fn weights(dir: &Path) -> Vec<Vec<f32>> {
    layer_tensors(&dir.join("out/weights.h5"), LAYERS.len() - 1)
}

fn train_losses(dir: &Path) -> Vec<f64> {
    metrics(dir).iter().map(|m| m["train_loss"].as_f64().unwrap()).collect()
}

/// Run the 3-rank job (2 workers, 1 server) with every step of worker 0 slowed by 5 ms, and
/// send SIGTERM/SIGUSR1 to every rank once the first periodic checkpoint exists.
fn signalled(dir: &Path, sig: &str) -> (Option<i32>, String, Duration) {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "90", "mpirun", "--oversubscribe", "--bind-to", "none", "-x", "HVTRAIN_INJECT_FAULT"])
        .args(["-n", "3", BIN, "train", "job.toml"])
        .args(PS)
        .current_dir(dir)
        .env("HVTRAIN_INJECT_FAULT", "0:1:delay=0.005")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let t = Instant::now();
    while !dir.join("out/ckpt-step000000050.h5").exists() && t.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let out = Command::new("pgrep").args(["-f", &format!("^{BIN} train job.toml")]).output().unwrap();
    let pids: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
    assert_eq!(pids.len(), 3, "three rank processes: {pids:?}");
    let sent = Instant::now();
    assert!(Command::new("kill").arg(format!("-{sig}")).args(&pids).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), sent.elapsed())
}

#[test]
fn parameter_servers_stop_with_a_checkpoint_and_resume_bit_exact() {
    let _g = mpi_lock();
    let straight = setup("ps-stop-straight");
    let r = mpirun(3, &[&["train", "job.toml"][..], &PS].concat(), &straight, 120);
    assert!(r.ok(), "{}", r.all());
    for sig in ["TERM", "USR1"] {
        let dir = setup(&format!("ps-stop-{sig}"));
        let (code, stderr, took) = signalled(&dir, sig);
        assert_eq!(code, Some(75), "SIG{sig}: exit code\n{stderr}");
        assert!(took < Duration::from_secs(10), "SIG{sig}: took {took:?}\n{stderr}");
        // 2400 rows / (2 workers × batch 4) = 300 steps per epoch.
        let step = assert_stop_checkpoint(&dir.join("out"), &stderr, 300);
        assert!(step > 50, "a stop checkpoint after the periodic one of step 50: {step}");
        let resumed = mpirun(3, &[&["train", "job.toml", "--resume", "auto"][..], &PS].concat(), &dir, 120);
        assert!(resumed.ok() && resumed.stderr.contains("resuming from"), "{}", resumed.all());
        assert_eq!(weights(&straight), weights(&dir), "SIG{sig}: resumed weights differ from the uninterrupted run");
        assert_eq!(train_losses(&straight), train_losses(&dir), "SIG{sig}: train_loss per epoch differs");
    }
    // The same stop, resumed on 4 workers (global batch 8 = 2 per worker).
    let dir = setup("ps-stop-more-workers");
    let (code, stderr, _) = signalled(&dir, "TERM");
    assert_eq!(code, Some(75), "{stderr}");
    let resumed = mpirun(5, &[&["train", "job.toml", "--resume", "auto"][..], &PS].concat(), &dir, 120);
    assert!(resumed.ok() && resumed.stderr.contains("resuming from"), "{}", resumed.all());
    assert_eq!(metrics(&dir).len(), 2, "both epochs in metrics.jsonl");
}
