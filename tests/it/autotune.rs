//! `distribution.autotune` under a real `mpirun`: the first steps time each fusion setting,
//! the fastest is kept, the log and OUTPUT_DIR/autotune.json list every candidate with its
//! time and the choice; a later run in the same output.dir reuses the choice without timing;
//! a run on another rank count tunes again; on two nodes the fastest setting is also timed with
//! the hierarchical all-reduce. Switching buckets mid-run changes which
//! gradients travel together, never their sums: on 2 ranks (a sum of two, the same bits in
//! any grouping) the autotuned weights equal the untuned run's bit for bit. Every switch is
//! followed by a cross-rank check of the fusion plan; with the choice made from each rank's
//! own times (broken on purpose: no all-reduce of the scores), ranks picked different plans
//! and that check ended the job.

use crate::common;
use common::*;
use std::path::Path;

const D: usize = 6;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 16, 12, K];

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(480, D, K, 9);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let extra = "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n";
    job(&dir, &LAYERS, "d.h5", None, extra);
    dir
}

fn train(dir: &Path, out: &str, ranks: usize, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    train_weights(dir, out, ranks, LAYERS.len() - 1, &[], &["training.epochs=2", "training.batch_size=8"], sets)
}

#[test]
fn autotune_times_every_candidate_keeps_one_and_reuses_it() {
    let _g = mpi_lock();
    let dir = setup("autotune");
    let tune = ["distribution.autotune=true", "distribution.autotune_steps=3"];
    let (plain, _) = train(&dir, "plain", 2, &[]);
    let (tuned, log) = train(&dir, "tuned", 2, &tune);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("autotune: fusion_threshold_mb")).collect();
    assert_eq!(lines.len(), 8, "one line per candidate\n{log}");
    assert!(lines.iter().any(|l| l.contains("(+0.0 % of the fastest)")), "{lines:?}");
    assert!(log.contains("autotune: keeping fusion_threshold_mb = "), "{log}");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tuned/autotune.json")).unwrap()).unwrap();
    let cands = rec["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 8);
    assert!(cands.iter().all(|c| c[1].as_f64().unwrap() > 0.0), "{rec}");
    // The choice is the fastest candidate.
    let best = cands.iter().min_by(|a, b| a[1].as_f64().unwrap().total_cmp(&b[1].as_f64().unwrap())).unwrap();
    assert_eq!(best[0], rec["chosen"], "{rec}");
    assert_eq!(rec["ranks"], 2);
    // Buckets change which gradients travel together, not their sums.
    assert_eq!(tuned, plain, "autotuned weights differ from the untuned run's");

    // The same output.dir again: the choice is reused, nothing is timed.
    let (again, log) = train(&dir, "tuned", 2, &tune);
    assert!(log.contains("autotune: reusing") && !log.contains("autotune: timing"), "{log}");
    assert_eq!(again, plain);

    // Another rank count: the record does not fit, so it tunes again.
    let (_, log) = train(&dir, "tuned", 3, &tune);
    assert!(log.contains("on 2 ranks, not this run's") && log.contains("autotune: keeping"), "{log}");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tuned/autotune.json")).unwrap()).unwrap();
    assert_eq!(rec["ranks"], 3);

    // Two "nodes" (HVTRAIN_NODE_SIZE): the fastest fusion setting is timed once more with the
    // hierarchical all-reduce, a ninth candidate; whichever wins, training goes on (the same sum
    // in another order: within rounding of the untuned run).
    let env = [("HVTRAIN_NODE_SIZE", "2")];
    let base = ["training.epochs=3", "training.batch_size=8"];
    let (plain4, _) = train_weights(&dir, "plain4", 4, LAYERS.len() - 1, &env, &base, &[]);
    let (tuned4, log) = train_weights(&dir, "nodes", 4, LAYERS.len() - 1, &env, &base, &tune);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("autotune: fusion_threshold_mb")).collect();
    assert_eq!(lines.len(), 9, "{log}");
    assert_eq!(lines.iter().filter(|l| l.contains(" hierarchical:")).count(), 1, "{lines:?}");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("nodes/autotune.json")).unwrap()).unwrap();
    assert_eq!(rec["candidates"].as_array().unwrap().len(), 9, "{rec}");
    let d = max_diff(&plain4, &tuned4);
    assert!(d < 1e-5, "4 ranks on 2 nodes: autotuned weights {d} from the untuned run's");
}
