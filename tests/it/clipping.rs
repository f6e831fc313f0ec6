//! Gradient clipping (`optimizer.global_clipnorm`, `optimizer.clipnorm`), under a real
//! `mpirun`: the norm is taken after the all-reduce, so 2 ranks with half the global batch
//! each train to the weights of 1 rank with all of it, even though the rows of rank 1's half
//! are 50 times larger than rank 0's (a norm taken on each rank's own gradients would scale
//! the two halves by different factors and train elsewhere). The clipped runs must also
//! differ from unclipped ones, so the limit really acts; the log and metrics.jsonl report the
//! global norm per epoch. Clipping by value clamps the reduced gradients, on any split of the model.

use crate::common;
use common::*;
use std::path::Path;

const D: usize = 6;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 16, 12, K];
const G: usize = 16; // global batch
const STEPS: usize = 6;

/// Rows in step order (shuffle off: step i takes rows [iG, (i+1)G), rank r of 2 the r-th half
/// of them): the second half of every step's rows scaled by 50.
fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (mut x, y) = synthetic(G * STEPS, D, K, 3);
    for (i, v) in x.iter_mut().enumerate() {
        if (i / D) % G >= G / 2 {
            *v *= 50.0;
        }
    }
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let extra = "[optimizer]\nkind = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n[distribution]\nfusion_threshold_mb = 0.001\n";
    job(&dir, &LAYERS, "d.h5", None, extra);
    dir
}

fn train(dir: &Path, out: &str, ranks: usize, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    let o = format!("output.dir=\"{out}\"");
    let b = format!("training.batch_size={}", G / ranks);
    let mut args = vec!["train", "job.toml", "--set", "training.epochs=2", "--set", "data.shuffle=false"];
    args.extend(["--set", "model.activation=tanh", "--set", &o, "--set", &b]);
    for s in sets {
        args.extend(["--set", s]);
    }
    let run = mpirun(ranks, &args, dir, 120);
    assert!(run.ok(), "{sets:?} on {ranks} rank(s): training failed\n{}", run.all());
    (layer_tensors(&dir.join(out).join("weights.h5"), LAYERS.len() - 1), run.stderr)
}

fn check(limit: &str) {
    let _g = mpi_lock();
    let tag = limit.split('=').next().unwrap().replace("optimizer.", "");
    let dir = setup(&format!("clip-{tag}"));
    let (free, _) = train(&dir, "free", 1, &[]);
    let (one, log) = train(&dir, "one", 1, &[limit]);
    let (two, _) = train(&dir, "two", 2, &[limit]);
    let acts = max_diff(&free, &one);
    assert!(acts > 1e-3, "{limit}: clipped and unclipped runs agree (max diff {acts}): the limit never acted");
    let d = max_diff(&one, &two);
    eprintln!("{limit}: 1 vs 2 ranks max |dw| = {d:.2e}; clipped vs unclipped {acts:.2e}");
    assert!(d < 1e-5, "{limit}: 2 ranks differ from 1 rank by {d}: the norm was not the all-reduced gradient's");
    // The epoch line and metrics.jsonl carry the global norm, every step clipped.
    let line =
        log.lines().find(|l| l.contains("gradient norm (global")).unwrap_or_else(|| panic!("no norm line\n{log}"));
    assert!(line.contains(&format!("clipped at {STEPS} of {STEPS} steps")), "{line}");
    let m = std::fs::read_to_string(dir.join("one/metrics.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(m.lines().next().unwrap()).unwrap();
    let g = &first["grad_norm"];
    assert_eq!(g["steps"], STEPS as u64, "{first}");
    assert!(g["max"].as_f64().unwrap() >= g["mean"].as_f64().unwrap() && g["mean"].as_f64().unwrap() > 0.5, "{g}");
}

#[test]
fn global_clipnorm_is_the_all_reduced_gradients_norm() {
    check("optimizer.global_clipnorm=0.5");
}

#[test]
fn clipnorm_per_tensor_is_the_all_reduced_gradients_norm() {
    check("optimizer.clipnorm=0.2");
}

#[test]
fn clipvalue_clamps_the_all_reduced_gradients() {
    check("optimizer.clipvalue=0.01");
}

/// On tensor shards and pipeline stages each rank holds part of the model: the norms must be
/// the whole model's (shards' sums of squares added over the tensor group, a replicated bias
/// once; stages' added for the global norm), and by value is element-wise. Each split trains
/// to 1 rank's weights; a norm taken over this rank's part alone would clip by other factors.
#[test]
fn clipping_on_tensor_shards_and_pipeline_stages_equals_one_rank() {
    let _g = mpi_lock();
    let dir = setup("clip-split");
    for limit in ["optimizer.clipvalue=0.01", "optimizer.global_clipnorm=0.5", "optimizer.clipnorm=0.2"] {
        let (one, _) = train(&dir, "one", 1, &[limit]);
        for split in ["parallel.tensor=2", "parallel.pipeline=2"] {
            let b = format!("training.batch_size={G}"); // one replica of 2 ranks: the whole batch
            let (w, log) = train(&dir, "split", 2, &[limit, split, &b]);
            let d = max_diff(&one, &w);
            eprintln!("{limit} {split}: {d:.2e} from 1 rank");
            assert!(d < 1e-5, "{limit} {split}: {d} from 1 rank\n{log}");
        }
    }
}

/// Accumulation and clipping together: one norm per optimizer step, over the micro-batches'
/// summed gradients, as for the larger batch.
#[test]
fn clipping_an_accumulated_step_equals_clipping_the_larger_batch() {
    let _g = mpi_lock();
    let dir = setup("clip-accumulate");
    let limit = "optimizer.global_clipnorm=0.5";
    let (one, _) = train(&dir, "one", 2, &[limit]);
    let (acc, log) = train(&dir, "acc", 2, &[limit, "training.batch_size=2", "training.accumulate=4"]);
    let d = max_diff(&one, &acc);
    assert!(d < 1e-5, "accumulated and clipped: {d} from the larger batch\n{log}");
}
