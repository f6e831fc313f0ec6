//! Adasum (`distribution.reduction = "adasum"`) under a real `mpirun`:
//!
//! - the engine's Adasum (fused buckets, inline and on the communication thread) against
//!   Adasum written out in float64 (`hvtrain bench allreduce --reduction adasum`, which panics,
//!   ending the job non-zero, on any element off by more than 1e-4 + 1e-5·|x|) on 2, 3, 4 and
//!   8 ranks: powers of two and the fold of the ranks above one;
//! - in training: when every rank's rows are the same (each step's second half a copy of its
//!   first, no shuffle), every rank's gradient is the same and Adasum(g, g) = g, so 2 ranks
//!   with Adasum train to the weights of the plain average within float32 rounding; a
//!   reduction that summed, or forgot that each rank's gradient arrives divided by the global
//!   row count, would be 2× off. On 3 ranks with different rows the ranks' parameters agree
//!   at every step (the consistency check) and the loss falls;
//! - tensor splits, compression and parameter servers refuse it at start-up.

use crate::common;
use common::*;
use std::path::Path;

#[test]
fn engine_adasum_matches_float64_reference() {
    let _g = mpi_lock();
    let dir = scratch("adasum_bench");
    for n in [2usize, 3, 4, 8] {
        let args = [
            "bench",
            "allreduce",
            "--reduction",
            "adasum",
            "--min-bytes",
            "4096",
            "--max-bytes",
            "262144",
            "--threshold-mb",
            "0.02",
            "--seconds",
            "0.01",
        ];
        let run = mpirun(n, &args, &dir, 180);
        assert!(run.ok(), "{n} ranks: Adasum differs from the float64 reference\n{}", run.all());
        let errs: Vec<f64> = run
            .stdout
            .lines()
            .filter(|l| l.contains("largest error against float64"))
            .map(|l| l.split("float64 ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap())
            .collect();
        // 4 sizes × (inline, threaded).
        assert_eq!(errs.len(), 8, "{n} ranks: {}", run.stdout);
        assert!(errs.iter().all(|&e| e < 1e-6), "{n} ranks: errors {errs:?}");
    }
}

const D: usize = 5;
const K: usize = 3;
const LAYERS: [usize; 3] = [D, 12, K];
/// Global batch (2 ranks × 16 rows).
const G: usize = 32;

fn setup(name: &str, duplicated: bool) -> std::path::PathBuf {
    let dir = scratch(name);
    let (mut x, mut y) = synthetic(10 * G, D, K, 11);
    if duplicated {
        // Each step's rows [G/2, G) repeat rows [0, G/2): rank 1's batch equals rank 0's.
        for s in 0..10 {
            for i in 0..G / 2 {
                let (from, to) = (s * G + i, s * G + G / 2 + i);
                y[to] = y[from];
                for j in 0..D {
                    x[to * D + j] = x[from * D + j];
                }
            }
        }
    }
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let extra = "[optimizer]\nkind = \"sgd\"\nlr = 0.3\nmomentum = 0.5\n[distribution]\nfusion_threshold_mb = 0.0005\n";
    job(&dir, &LAYERS, "d.h5", None, extra);
    dir
}

fn train(dir: &Path, out: &str, ranks: usize, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    let b = format!("training.batch_size={}", G / 2);
    let base = ["training.epochs=3", "data.shuffle=false", &b, "distribution.check_every=1"];
    train_weights(dir, out, ranks, LAYERS.len() - 1, &[], &base, sets)
}

#[test]
fn adasum_of_equal_gradients_is_their_average() {
    let _g = mpi_lock();
    let dir = setup("adasum_equal", true);
    let (avg, _) = train(&dir, "avg", 2, &[]);
    let (ada, log) = train(&dir, "ada", 2, &["distribution.reduction=\"adasum\""]);
    assert!(log.contains("adasum"), "the log names the reduction:\n{log}");
    let d = max_diff(&avg, &ada);
    assert!(d < 1e-5, "Adasum of equal gradients should be their mean: weights {d} apart");
    // The reduction matters: the same job without the duplicated rows trains elsewhere.
    let other = setup("adasum_unequal", false);
    let (avg2, _) = train(&other, "avg", 2, &[]);
    let (ada2, _) = train(&other, "ada", 2, &["distribution.reduction=\"adasum\""]);
    let d2 = max_diff(&avg2, &ada2);
    assert!(d2 > 1e-3, "with different rows per rank Adasum and the mean should differ, {d2} apart");
    // 3 ranks (one folded): every step's parameter check passes and the loss falls.
    let (_, log3) = train(&other, "out", 3, &["distribution.reduction=\"adasum\""]);
    assert!(log3.contains("folded in first"), "{log3}");
    let m = metrics(&other);
    let loss = |e: usize| m[e]["train_loss"].as_f64().unwrap();
    assert!(loss(2) < loss(0), "3-rank Adasum: train loss {} → {}\n{log3}", loss(0), loss(2));
}

#[test]
fn adasum_refused_where_it_cannot_work() {
    let dir = setup("adasum_refused", false);
    for (set, field) in [
        ("parallel.tensor=2", "distribution.reduction"),
        ("distribution.compression=\"bf16\"", "distribution.reduction"),
        ("distribution.strategy=\"parameter_server\"", "distribution.reduction"),
    ] {
        let run = hvtrain(
            &[
                "train",
                "job.toml",
                "--set",
                "distribution.reduction=\"adasum\"",
                "--set",
                set,
                "--set",
                "output.dir=\"r\"",
            ],
            &dir,
            60,
        );
        assert!(!run.ok() && run.stderr.contains(field), "{set}: expected a start-up error on {field}\n{}", run.all());
        assert!(!dir.join("r").join("weights.h5").exists());
    }
}
