//! `optimizer.ema` (Keras' `use_ema`): the moving average of the parameters, read here from the
//! checkpoints as a user would (h5py's view of the documented datasets, whole files and parts):
//! after every step ema = β·ema + (1 − β)·params; training itself is the same bits as without
//! it; weights.h5 is the average and the evaluation in metrics.jsonl is of the average
//! (`eval --weights` on it and on the checkpoint agree with it, and `checkpoint average`
//! averages the checkpoints' averages); a resume continues the
//! average exactly, also from parts written with `shard = "parameters"` on 2 ranks resumed
//! without sharding.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const LAYERS: [usize; 3] = [6, 16, 3];
const BETA: f64 = 0.9;

fn setup(name: &str, extra: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(96, 6, 3, 7);
    write_classes(&dir.join("d.h5"), &x, 6, &y);
    let opt = "[optimizer]\nkind = \"adam\"\nlr = 0.02\n";
    job(&dir, &LAYERS, "d.h5", Some("d.h5"), &format!("[checkpoint]\nevery_steps = 1\nkeep = 100\n{opt}{extra}"));
    dir
}

fn stored(dir: &Path, step: u64, name: &str) -> Vec<f32> {
    ckpt_stored(&dir.join(format!("out/ckpt-step{step:09}.h5")), name, LAYERS.len() - 1)
}

/// weights.h5 in the stored order (the layers last to first, each weight then bias), as a
/// whole checkpoint's parameters are read.
fn weights_stored(dir: &Path) -> Vec<f32> {
    ckpt_stored(&dir.join("out/weights.h5"), "params", LAYERS.len() - 1)
}

fn last_test_loss(dir: &Path) -> f64 {
    metrics(dir).last().unwrap()["test_loss"].as_f64().unwrap()
}

fn eval_loss(dir: &Path, weights: &str) -> f64 {
    let run = mpirun(1, &["eval", "job.toml", "--weights", weights], dir, 60);
    assert!(run.ok(), "{}", run.all());
    let line = run.stdout.lines().find(|l| l.trim_start().starts_with('{')).expect("eval's JSON line");
    serde_json::from_str::<serde_json::Value>(line).unwrap()["test_loss"].as_f64().unwrap()
}

/// Step 1: the average is the parameters (Keras' first step); steps 2..=last: each
/// checkpoint's average is β times the one before plus (1 − β) times its parameters.
fn check_recurrence(dir: &Path, last: u64) {
    assert_eq!(stored(dir, 1, "optimizer/ema"), stored(dir, 1, "params"), "the first step's average");
    for s in 2..=last {
        let (prev, ema, p) =
            (stored(dir, s - 1, "optimizer/ema"), stored(dir, s, "optimizer/ema"), stored(dir, s, "params"));
        assert_eq!(ema.len(), p.len());
        for i in 0..p.len() {
            let want = BETA * prev[i] as f64 + (1.0 - BETA) * p[i] as f64;
            assert!(
                (ema[i] as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
                "step {s}, [{i}]: {} vs {want}",
                ema[i]
            );
        }
    }
}

#[test]
fn the_average_follows_every_step_and_is_what_is_evaluated_and_written() {
    let _g = mpi_lock();
    let plain = setup("ema-plain", "");
    let dir = setup("ema", &format!("ema = {BETA}\n"));
    for d in [&plain, &dir] {
        let r = mpirun(1, &["train", "job.toml"], d, 120);
        assert!(r.ok(), "{}", r.all());
    }
    // 96 rows, batch 4: 24 steps, a checkpoint after each.
    let last = 24;
    check_recurrence(&dir, last);
    // The average does not touch training: the same parameters as the run without it.
    assert_eq!(stored(&dir, last, "params"), stored(&plain, last, "params"), "training changed with ema");
    // weights.h5 is the average, not the last parameters.
    let ema = stored(&dir, last, "optimizer/ema");
    assert_eq!(weights_stored(&dir), ema, "weights.h5 is not the moving average");
    let moved = ema.iter().zip(stored(&dir, last, "params")).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(moved > 1e-3, "the average is the parameters ({moved})");
    // The epoch's evaluation is of the average: eval of weights.h5 and of the checkpoint say
    // the same, and the run without it says otherwise.
    let (logged, plain_logged) = (last_test_loss(&dir), last_test_loss(&plain));
    for w in ["out/weights.h5", &format!("out/ckpt-step{last:09}.h5")] {
        let e = eval_loss(&dir, w);
        assert!((e - logged).abs() <= 1e-6 * logged.max(1.0), "{w}: eval {e} vs the epoch's {logged}");
    }
    assert!((logged - plain_logged).abs() > 1e-4, "evaluated the parameters: {logged} vs {plain_logged}");
    // checkpoint check says the checkpoints keep it (and those of the plain run not).
    for (d, keeps) in [(&dir, true), (&plain, false)] {
        let r = hvtrain(&["checkpoint", "check", &format!("out/ckpt-step{last:09}.h5")], d, 60);
        assert!(r.ok() && r.stdout.contains("moving average") == keeps, "{}", r.all());
    }
    // checkpoint average takes each checkpoint's average too.
    let r = hvtrain(&["checkpoint", "average", "out", "--last", "2", "--output", "avg.h5"], &dir, 60);
    assert!(r.ok(), "{}", r.all());
    let (a, b) = (stored(&dir, last - 1, "optimizer/ema"), ema);
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| ((*x as f64 + *y as f64) / 2.0) as f32).collect();
    std::fs::rename(dir.join("avg.h5"), dir.join("out/weights.h5")).unwrap();
    assert_eq!(weights_stored(&dir), want, "checkpoint average of the averages");
}

#[test]
fn a_resume_continues_the_average_from_whole_checkpoints_and_from_parts() {
    let _g = mpi_lock();
    let extra = format!("ema = {BETA}\n[distribution]\nshard = \"parameters\"\n");
    // Straight: 2 epochs on 2 ranks with sharded parameters (checkpoints in parts).
    let straight = setup("ema-straight", &extra);
    let r = mpirun(2, &["train", "job.toml", "--set", "training.epochs=2"], &straight, 120);
    assert!(r.ok(), "{}", r.all());
    // 96 rows, 2 × 4 a step: 12 steps an epoch.
    check_recurrence(&straight, 24);
    // One epoch sharded, then the second resumed from its parts, sharded again.
    let resumed = setup("ema-resumed", &extra);
    let r = mpirun(2, &["train", "job.toml"], &resumed, 120);
    assert!(r.ok(), "{}", r.all());
    let r = mpirun(2, &["train", "job.toml", "--set", "training.epochs=2", "--resume", "auto"], &resumed, 120);
    assert!(r.ok(), "{}", r.all());
    assert_eq!(weights_stored(&resumed), weights_stored(&straight), "the resumed average differs");
    assert!(r.stderr.contains("resumed from the checkpoint"), "{}", r.all());
    assert_eq!(weights_stored(&straight), stored(&straight, 24, "optimizer/ema"));
    // Resumed from the parts without sharding: the same average to a summation order.
    let unsharded = setup("ema-unsharded", &extra);
    let r = mpirun(2, &["train", "job.toml"], &unsharded, 120);
    assert!(r.ok(), "{}", r.all());
    let args =
        ["train", "job.toml", "--set", "training.epochs=2", "--set", "distribution.shard=\"none\"", "--resume", "auto"];
    let r = mpirun(2, &args, &unsharded, 120);
    assert!(r.ok() && r.stderr.contains("resumed from the checkpoint"), "{}", r.all());
    let (a, b) = (weights_stored(&unsharded), weights_stored(&straight));
    let most = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(most <= 1e-5, "resumed unsharded: the average differs by {most}");
    // A whole checkpoint (2 ranks unsharded) resumed sharded: each rank reads its pieces of the
    // average from the file.
    let from_whole = setup("ema-from-whole", &format!("ema = {BETA}\n"));
    let r = mpirun(2, &["train", "job.toml"], &from_whole, 120);
    assert!(r.ok(), "{}", r.all());
    assert!(checkpoint_parts(&from_whole.join("out")).is_empty(), "whole checkpoints expected");
    let args = [
        "train",
        "job.toml",
        "--set",
        "training.epochs=2",
        "--set",
        "distribution.shard=\"parameters\"",
        "--resume",
        "auto",
    ];
    let r = mpirun(2, &args, &from_whole, 120);
    assert!(r.ok() && r.stderr.contains("resumed from the checkpoint"), "{}", r.all());
    let a = weights_stored(&from_whole);
    let most = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(most <= 1e-5, "resumed sharded from a whole checkpoint: the average differs by {most}");
    // A checkpoint without an average (a run without optimizer.ema) resumed with one: it
    // starts from the parameters, and says so.
    let from_plain = setup("ema-from-plain", "");
    let r = mpirun(1, &["train", "job.toml"], &from_plain, 120);
    assert!(r.ok(), "{}", r.all());
    let args = ["train", "job.toml", "--set", "training.epochs=2", "--set", "optimizer.ema=0.9", "--resume", "auto"];
    let r = mpirun(1, &args, &from_plain, 120);
    assert!(r.ok() && r.stderr.contains("keeps no moving average"), "{}", r.all());
}

#[test]
fn the_average_of_a_model_split_over_ranks() {
    let _g = mpi_lock();
    for split in ["parallel.tensor=2", "parallel.pipeline=2"] {
        let dir = setup(&format!("ema-{}", &split[9..split.len() - 2]), &format!("ema = {BETA}\n"));
        let r = mpirun(2, &["train", "job.toml", "--set", split], &dir, 120);
        assert!(r.ok(), "{split}: {}", r.all());
        // One data rank: 24 steps, checkpoints in parts (each rank its shard or stage).
        assert!(!checkpoint_parts(&dir.join("out")).is_empty(), "{split}: no parts");
        check_recurrence(&dir, 24);
        assert_eq!(weights_stored(&dir), stored(&dir, 24, "optimizer/ema"), "{split}: weights.h5");
    }
}
