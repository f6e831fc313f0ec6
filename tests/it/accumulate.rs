//! Gradient accumulation (`training.accumulate = k`), under a real `mpirun`: k micro-batches
//! of `batch_size` rows per rank and one all-reduce and update per step must give the weights
//! of one step on a k-times larger batch (within float32 rounding: the sums are added in
//! another order), in the data-parallel, tensor-parallel and pipeline modes; a run that
//! dropped a micro-batch or counted one twice would not. A checkpoint mid-run resumes to the
//! uninterrupted run's weights, bit for bit; the parameter-server mode refuses it at start-up.

use crate::common;
use common::*;
use std::path::Path;

const D: usize = 6;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 16, 12, K];
const ROWS: usize = 384;

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(ROWS, D, K, 7);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let extra = "[optimizer]\nkind = \"sgd\"\nlr = 0.2\nmomentum = 0.9\n[distribution]\nfusion_threshold_mb = 0.001\n";
    job(&dir, &LAYERS, "d.h5", None, extra);
    dir
}

/// Train 2 epochs on `ranks` ranks with `sets`; the final weights and the log.
fn train(dir: &Path, out: &str, ranks: usize, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    train_weights(dir, out, ranks, LAYERS.len() - 1, &[], &["training.epochs=2", "model.activation=tanh"], sets)
}

/// Accumulated runs against one run on the larger batch, in each mode.
#[test]
fn accumulated_micro_batches_equal_one_larger_batch() {
    let _g = mpi_lock();
    let dir = setup("accumulate-equal");
    // 2 ranks x 16 rows: 12 steps an epoch.
    let (big, _) = train(&dir, "big", 2, &["training.batch_size=16"]);
    let (small, _) = train(&dir, "small", 2, &["training.batch_size=4"]);
    let apart = max_diff(&big, &small);
    assert!(apart > 1e-2, "batch 4 and batch 16 should train apart (max diff {apart}): the check would prove nothing");
    let cases: [(&str, &[&str]); 4] = [
        ("data parallel, 4 x 4 rows", &["training.batch_size=4", "training.accumulate=4"]),
        ("data parallel, 2 x 8 rows", &["training.batch_size=8", "training.accumulate=2"]),
        ("tensor parallel", &["training.batch_size=4", "training.accumulate=4", "parallel.tensor=2"]),
        (
            "pipeline, 2 micro-batches x 2 accumulated",
            &["training.batch_size=8", "training.accumulate=2", "parallel.pipeline=2", "parallel.micro_batches=2"],
        ),
    ];
    for (i, (name, sets)) in cases.iter().enumerate() {
        // Tensor and pipeline splits use both ranks for one replica: 1 data-parallel rank
        // with the whole global batch of 32 rows.
        let mut sets = sets.to_vec();
        let one_replica = name.starts_with("tensor") || name.starts_with("pipeline");
        let bigger;
        if one_replica {
            let b: usize = sets[0].trim_start_matches("training.batch_size=").parse().unwrap();
            bigger = format!("training.batch_size={}", b * 2);
            sets[0] = &bigger;
        }
        let (w, log) = train(&dir, &format!("acc-{i}"), 2, &sets);
        assert!(log.contains("accumulated micro-batches, training.accumulate"), "{name}: no schedule line\n{log}");
        let d = max_diff(&big, &w);
        eprintln!("{name}: max |w - w(batch 32)| = {d:.2e} (batch 4 vs 16 per rank: {apart:.2e})");
        assert!(d < 2e-5, "{name}: accumulated weights differ from the larger batch's by {d}");
    }
}

/// A checkpoint written mid-run by an accumulating job resumes to the same weights.
#[test]
fn accumulated_run_resumes_exactly() {
    let _g = mpi_lock();
    let dir = setup("accumulate-resume");
    let sets = ["training.batch_size=4", "training.accumulate=4", "checkpoint.every_steps=5", "checkpoint.keep=10"];
    let (whole, _) = train(&dir, "whole", 2, &sets);
    let ck = dir.join("whole/ckpt-step000000005.h5");
    assert!(ck.exists(), "no checkpoint at step 5: {:?}", checkpoints(&dir.join("whole")));
    let args = [
        "train",
        "job.toml",
        "--set",
        "training.epochs=2",
        "--set",
        "model.activation=tanh",
        "--set",
        "output.dir=\"resumed\"",
        "--resume",
        ck.to_str().unwrap(),
    ];
    let mut all: Vec<&str> = args.to_vec();
    for s in &sets {
        all.extend(["--set", s]);
    }
    let run = mpirun(2, &all, &dir, 120);
    assert!(run.ok() && run.stderr.contains("resuming from"), "{}", run.all());
    let resumed = layer_tensors(&dir.join("resumed/weights.h5"), LAYERS.len() - 1);
    assert!(resumed == whole, "resumed from step 5, the weights differ (max {})", max_diff(&resumed, &whole));
}

#[test]
fn parameter_servers_refuse_accumulation() {
    let _g = mpi_lock();
    let dir = setup("accumulate-ps");
    let sets = ["distribution.strategy=\"parameter_server\"", "training.accumulate=2"];
    let mut args = vec!["train", "job.toml"];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let run = mpirun(3, &args, &dir, 60);
    assert!(!run.ok(), "{}", run.all());
    assert!(run.stderr.contains("training.accumulate = 2") && run.stderr.contains("parameter_server"), "{}", run.all());
}
