//! Validation, early stopping and the best weights, under a real `mpirun`: validation_split
//! holds out the last rows whatever the rank count; val_loss and val_accuracy reach
//! metrics.jsonl; early stopping ends the run at the epoch its rule gives for the logged
//! val_loss; keep_best's weights.h5 evaluates to the best epoch's val_loss while the checkpoint
//! holds the last epoch; bad values name the key.

use crate::common;
use common::*;
use std::path::PathBuf;

const D: usize = 6;

/// Labels that are pure noise: the model can only memorize, so val_loss rises after a while.
fn noisy(n: usize, seed: u64) -> (Vec<f32>, Vec<i32>) {
    let (x, _) = synthetic(n, D, 3, seed);
    let y = (0..n).map(|i| ((i as u64 * 2654435761 + seed) % 7 % 3) as i32).collect();
    (x, y)
}

fn setup(name: &str, extra: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = noisy(600, 1);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let (vx, vy) = noisy(300, 2);
    write_classes(&dir.join("v.h5"), &vx, D, &vy);
    job(&dir, &[D, 64, 64, 3], "d.h5", None, &format!("[optimizer]\nkind = \"adam\"\nlr = 0.01\n{extra}"));
    dir
}

#[test]
fn validation_split_holds_out_the_last_rows_on_any_rank_count() {
    let _g = mpi_lock();
    for ranks in [1, 2, 3] {
        let dir = setup(&format!("val-split-{ranks}"), "");
        let r = mpirun(ranks, &["train", "job.toml", "--set", "data.validation_split=0.25"], &dir, 120);
        assert!(r.ok(), "{}", r.all());
        let m = &metrics(&dir)[0];
        assert_eq!(m["samples"], 450, "600 rows, the last 150 held out: {m}");
        assert!(m["val_loss"].as_f64().is_some() && m["val_accuracy"].as_f64().is_some(), "{m}");
        assert!(r.all().contains(" val_loss "), "{}", r.all());
    }
}

#[test]
fn early_stopping_stops_where_its_rule_says_and_keep_best_keeps_the_best_epoch() {
    let _g = mpi_lock();
    let dir = setup("val-early", "");
    let args = [
        "train",
        "job.toml",
        "--set",
        "training.epochs=60",
        "--set",
        "data.validation=\"v.h5\"",
        "--set",
        "data.test=\"v.h5\"",
        "--set",
        "training.early_stopping={monitor=\"val_loss\", patience=3, min_delta=0.001}",
        "--set",
        "output.keep_best=true",
        "--set",
        "checkpoint.every_minutes=0.0",
    ];
    let r = mpirun(2, &args, &dir, 300);
    assert!(r.ok(), "{}", r.all());
    let m = metrics(&dir);
    let val: Vec<f64> = m.iter().map(|e| e["val_loss"].as_f64().unwrap()).collect();
    // The rule, from the logged values: the first epoch with 3 epochs since the last
    // improvement by more than 0.001.
    let (mut best, mut best_epoch, mut wait, mut stop) = (f64::INFINITY, 0, 0, None);
    for (i, &v) in val.iter().enumerate() {
        if v < best - 0.001 {
            (best, best_epoch, wait) = (v, i + 1, 0);
        } else {
            wait += 1;
        }
        if wait >= 3 {
            stop = Some(i + 1);
            break;
        }
    }
    let stop = stop.expect("noise labels: val_loss stops improving well within 60 epochs");
    assert_eq!(m.len(), stop, "ran {} epochs, the rule says {stop}: {val:?}", m.len());
    assert!(stop < 60);
    assert!(r.all().contains(&format!("early stopping after epoch {stop}")), "{}", r.all());
    assert!(r.all().contains(&format!("keep_best: weights.h5 holds epoch {best_epoch}'s weights")), "{}", r.all());
    // weights.h5 evaluates to the best epoch's val_loss (data.test is the validation file).
    let e = hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5", "--set", "data.test=\"v.h5\""], &dir, 60);
    assert!(e.ok(), "{}", e.all());
    let j: serde_json::Value = serde_json::from_str(e.stdout.lines().last().unwrap()).unwrap();
    let got = j["test_loss"].as_f64().unwrap();
    assert!(
        (got - best).abs() < 1e-6 * best.max(1.0),
        "weights.h5 evaluates to {got}, the best epoch's val_loss is {best}"
    );
    let last = val[stop - 1];
    assert!((got - last).abs() > 1e-4, "the best and the last epoch should differ here ({got} vs {last})");
}

#[test]
fn bad_values_name_the_key() {
    let dir = setup("val-errors", "");
    for (sets, key) in [
        (vec!["data.validation_split=-0.1"], "data.validation_split"),
        (vec!["data.validation_split=0.9999"], "data.validation_split"),
        (vec!["data.validation_split=0.2", "data.validation=\"v.h5\""], "data.validation_split"),
        (vec!["training.early_stopping={monitor=\"val_loss\"}"], "training.early_stopping.monitor"),
        (
            vec!["training.early_stopping={monitor=\"val_auroc\"}", "data.validation_split=0.2"],
            "training.early_stopping.monitor",
        ),
        (vec!["output.keep_best=true"], "output.keep_best"),
        (
            vec!["output.keep_best=true", "data.validation_split=0.2", "distribution.strategy=\"parameter_server\""],
            "output.keep_best",
        ),
    ] {
        let mut args = vec!["train", "job.toml"];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let r = hvtrain(&args, &dir, 30);
        assert!(!r.ok() && r.all().contains(key), "{sets:?}: {}", r.all());
    }
}
