//! Resume on a different number of ranks, under a real `mpirun`: a run stopped mid-epoch
//! (SIGTERM at an exact step: `HVTRAIN_INJECT_FAULT=0:STEP:term`) on N ranks resumes on M,
//! 2 -> 3 and 3 -> 1, with the same global batch; across the interruption the epoch uses every
//! row exactly once (the row digests of the part before the stop, per rank, plus the loader's
//! lines of the resumed part, per rank, are every row once); the final weights equal the
//! uninterrupted run's to float tolerance and its test accuracy to 0.5 points. A global
//! batch that does not divide over the new rank count is a clear error.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const D: usize = 8;
const LAYERS: [usize; 4] = [D, 32, 32, 3];
const ROWS: usize = 1000;
/// The global batch: divides over 1, 2 and 3 ranks.
const GLOBAL: usize = 12;
/// 84 steps per epoch (the last one of 4 rows); 2 epochs.
const STEPS: u64 = 84;
const DEBUG_LOADER: (&str, &str) = ("RUST_LOG", "info,hvtrain::data::loader=debug");
/// Largest |difference| allowed between a resumed run's weights and the uninterrupted one's.
/// The global batches are the same sets of rows, so the gradient sums differ only in the
/// order of the float additions (over other rank counts), about 1e-7 relative per step;
/// seen: 6e-8 (2 -> 3) and 1.2e-7 (3 -> 1) after 168 Adam steps.
const TOL: f32 = 1e-5;

/// splitmix64 of (file number << 32 | row in the file): the loader's row digest.
fn mix(file: u64, row: u64) -> u64 {
    let mut z = (file << 32 | row).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Two training files of 600 and 400 rows (`d-{rank}.h5`: more or fewer than ranks, the
/// global rows are theirs in file order), and a test file.
fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(ROWS, D, 3, 31);
    write_classes(&dir.join("d-0.h5"), &x[..600 * D], D, &y[..600]);
    write_classes(&dir.join("d-1.h5"), &x[600 * D..], D, &y[600..]);
    let (tx, ty) = synthetic(400, D, 3, 32);
    write_classes(&dir.join("t.h5"), &tx, D, &ty);
    let extra = "[optimizer]\nkind = \"adam\"\nlr = 0.003\nscale_lr_by_world_size = true\n";
    job(&dir, &LAYERS, "d-{rank}.h5", Some("t.h5"), extra);
    dir
}

/// The job's arguments with `training.batch_size = batch` (per rank, at the run's first start;
/// a resume keeps the job file as it was, whatever its rank count).
fn args(batch: usize, extra: &[&'static str]) -> Vec<String> {
    let b = format!("training.batch_size={batch}");
    let mut a: Vec<String> =
        ["train", "job.toml", "--set", "training.epochs=2", "--set", &b].iter().map(|s| s.to_string()).collect();
    for s in ["data.shuffle_block=16", "data.shuffle_window=64"] {
        a.extend(["--set".to_string(), s.to_string()]);
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn run(ranks: usize, env: &[(&str, &str)], args: &[String], dir: &Path) -> Run {
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    mpirun_env(ranks, env, &a, dir, 180)
}

fn weights(dir: &Path) -> Vec<f32> {
    (0..LAYERS.len() - 1)
        .flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")])
        .flat_map(|t| read_f32(&dir.join("out/weights.h5"), &t))
        .collect()
}

fn last_accuracy(dir: &Path) -> f64 {
    let m = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(m.lines().last().unwrap()).unwrap();
    last["test_accuracy"].as_f64().unwrap()
}

/// (rows, digest, lines) added over the lines of `log` that hold `marker` for epoch `epoch`.
fn used(log: &str, marker: &str, epoch: usize) -> (usize, u64, usize) {
    let head = format!("loader: epoch {epoch}{marker}");
    let mut out = (0, 0u64, 0);
    for line in log.lines().filter(|l| l.contains(&head)) {
        let rest = line.split(&head).nth(1).unwrap();
        let rows: usize = rest.split("used ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        let hex = rest.split("row digest ").nth(1).unwrap().trim();
        out = (out.0 + rows, out.1.wrapping_add(u64::from_str_radix(hex, 16).unwrap()), out.2 + 1);
    }
    out
}

/// The uninterrupted run on `from` ranks, then one stopped after global step `stop` on `from`
/// ranks and resumed on `to`; returns (max |weight difference|, accuracy difference in points).
fn stop_and_resume(from: usize, to: usize, stop: u64) -> (f32, f64) {
    let tag = format!("{from}-to-{to}");
    let clean = setup(&format!("ranks-clean-{tag}"));
    let r = run(from, &[DEBUG_LOADER], &args(GLOBAL / from, &[]), &clean);
    assert!(r.ok(), "{tag}: the uninterrupted run failed\n{}", r.all());
    let all_rows = (0..600).map(|r| mix(0, r)).chain((0..400).map(|r| mix(1, r))).fold(0u64, u64::wrapping_add);
    for e in [1, 2] {
        assert_eq!(used(&r.stderr, ":", e), (ROWS, all_rows, from), "{tag}: uninterrupted epoch {e}\n{}", r.all());
    }

    let dir = setup(&format!("ranks-{tag}"));
    let fault = format!("0:{stop}:term");
    let stopped = run(from, &[DEBUG_LOADER, ("HVTRAIN_INJECT_FAULT", &fault)], &args(GLOBAL / from, &[]), &dir);
    assert_eq!(stopped.code, Some(75), "{tag}: SIGTERM at step {stop} exits 75\n{}", stopped.all());
    assert_eq!(assert_stop_checkpoint(&dir.join("out"), &stopped.stderr, STEPS), stop);
    let epoch = (stop / STEPS + 1) as usize;
    let in_epoch = (stop % STEPS) as usize;
    assert!(in_epoch > 0, "the stop must be mid-epoch");
    let before = used(&stopped.stderr, " before the stop", epoch);
    assert_eq!(before.2, from, "{tag}: one line per rank of what the stopped run used\n{}", stopped.all());
    assert_eq!(before.0, in_epoch * GLOBAL, "{tag}: rows before the stop\n{}", stopped.all());

    let resumed = run(to, &[DEBUG_LOADER], &args(GLOBAL / from, &["--resume", "auto"]), &dir);
    assert!(resumed.ok(), "{tag}: the resume failed\n{}", resumed.all());
    let note = format!("written on {from} data-parallel rank(s), this job has {to}: the global batch stays {GLOBAL}");
    assert!(resumed.stderr.contains(&note), "{tag}: no line about the rank change\n{}", resumed.all());
    let after = used(&resumed.stderr, ":", epoch);
    assert_eq!(after.2, to, "{tag}: one loader line per rank of the resumed run\n{}", resumed.all());
    assert_eq!(before.0 + after.0, ROWS, "{tag}: rows of the interrupted epoch, before {before:?} + after {after:?}");
    assert_eq!(
        before.1.wrapping_add(after.1),
        all_rows,
        "{tag}: the interrupted epoch did not use every row exactly once (a row twice and another skipped)"
    );

    let (a, b) = (weights(&clean), weights(&dir));
    assert_eq!(a.len(), b.len());
    let diff = a.iter().zip(&b).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    let points = (last_accuracy(&clean) - last_accuracy(&dir)).abs() * 100.0;
    eprintln!(
        "{tag}, stopped at step {stop}: max |weight difference| {diff:e}, test accuracy differs by {points:.3} points"
    );
    assert!(diff <= TOL, "{tag}: resumed weights differ from the uninterrupted run's by {diff} (> {TOL})");
    assert!(points <= 0.5, "{tag}: test accuracy differs by {points} points");
    (diff, points)
}

#[test]
fn two_ranks_resume_on_three_mid_epoch() {
    let _g = mpi_lock();
    // Epoch 2, after 35 of its 84 steps.
    stop_and_resume(2, 3, STEPS + 35);
}

#[test]
fn three_ranks_resume_on_one_mid_epoch() {
    let _g = mpi_lock();
    // Epoch 1, after 50 of its 84 steps.
    stop_and_resume(3, 1, 50);
}

/// A global batch of 8 (4 per rank on 2 ranks) cannot be split over 3 ranks: the resume
/// stops at start-up with a line naming the field, the batch, the rank counts and the
/// counts that work; nothing is written.
#[test]
fn a_global_batch_that_does_not_divide_is_refused() {
    let _g = mpi_lock();
    let dir = setup("ranks-not-divisible");
    let stopped = run(2, &[("HVTRAIN_INJECT_FAULT", "0:30:term")], &args(4, &[]), &dir);
    assert_eq!(stopped.code, Some(75), "{}", stopped.all());
    let before = snapshot(&dir.join("out"));
    let r = run(3, &[], &args(4, &["--resume", "auto"]), &dir);
    assert!(!r.ok() && r.elapsed < std::time::Duration::from_secs(30), "{}", r.all());
    let line = r.stderr.lines().find(|l| l.contains("training.batch_size")).unwrap_or_else(|| panic!("{}", r.all()));
    for needle in
        ["global batch is 8", "4 per rank x 2 data-parallel ranks", "this job's 3 data-parallel ranks", "(1, 2, 4, 8)"]
    {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
    eprintln!("error: {line}");
    assert_eq!(before, snapshot(&dir.join("out")), "output.dir untouched");
}
