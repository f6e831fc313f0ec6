//! `model.class_weights` (Keras' `class_weight`) under a real `mpirun -n 2` on real HDF5 files
//! with imbalanced classes (40, 15 and 5 rows): weights of 2 on every class are plain SGD's
//! step of twice the learning rate, bit for bit (on the all-reduce path, a 2-stage pipeline
//! whose last stage holds the loss, a tensor split, accumulation, and parameter servers);
//! `"balanced"` is scikit-learn's formula, a table by class number or name is the list it
//! stands for; and a bad value stops the job naming the key.

use crate::common;
use common::*;
use hdf5::types::VarLenUnicode;
use std::path::{Path, PathBuf};

const N: usize = 60;
const D: usize = 6;
const LAYERS: &[usize] = &[6, 8, 3];

/// Rows of class 0, 1 and 2: 40, 15 and 5 (every 12 rows: 8, 3, 1), with class names.
fn imbalanced(dir: &Path) {
    let (x, _) = synthetic(N, D, 3, 21);
    let y: Vec<i32> = (0..N)
        .map(|i| match i % 12 {
            0..=7 => 0,
            8..=10 => 1,
            _ => 2,
        })
        .collect();
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let f = hdf5::File::open_rw(dir.join("d.h5")).unwrap();
    let names: Vec<VarLenUnicode> = ["common", "rare", "rarest"].iter().map(|s| s.parse().unwrap()).collect();
    write_dataset(&f, "y_classes", &names, &[3]);
}

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    imbalanced(&dir);
    job(&dir, LAYERS, "d.h5", None, "[optimizer]\nkind = \"sgd\"\nmomentum = 0.0\nlr = 0.1\n");
    dir
}

fn run(dir: &Path, out: &str, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    train_weights(dir, out, 2, LAYERS.len() - 1, &[], &[], sets)
}

#[test]
fn uniform_weights_are_a_larger_step_and_balanced_tables_and_lists_agree() {
    let _g = common::mpi_lock();
    let dir = setup("class_weights");
    let (plain, log) = run(&dir, "plain", &[]);
    assert!(!log.contains("class weights"), "{log}");
    // Weights of 2 double every gradient: SGD without momentum then takes the step of twice
    // the learning rate (2·g·lr = g·2lr exactly in float32).
    let (doubled, log) = run(&dir, "doubled", &["optimizer.lr=0.05", "model.class_weights=[2, 2, 2]"]);
    assert_eq!(doubled, plain, "class weights of 2 with lr 0.05 must be lr 0.1 unweighted");
    assert!(
        log.contains("class weights: 0 (common): 2 (40 rows), 1 (rare): 2 (15 rows), 2 (rarest): 2 (5 rows)"),
        "{log}"
    );
    // "balanced": 60 / (3 × rows of the class) = 0.5, 4/3 and 4.
    let (balanced, log) = run(&dir, "balanced", &["model.class_weights=\"balanced\""]);
    assert!(log.contains("0 (common): 0.5 (40 rows), 1 (rare): 1.3333 (15 rows), 2 (rarest): 4 (5 rows)"), "{log}");
    assert!(log.contains("\"balanced\": rows / (classes × the class's rows) over 60 training rows"), "{log}");
    let listed = format!("model.class_weights=[0.5, {}, 4.0]", 60.0f64 / 45.0);
    let (list, _) = run(&dir, "list", &[&listed]);
    assert_eq!(balanced, list, "\"balanced\" must be the list of its weights");
    assert!(max_diff(&balanced, &plain) > 1e-4, "the weights changed nothing");
    // A table names classes by number or name; the others weigh 1.
    let (by_name, _) = run(&dir, "by_name", &["model.class_weights={ rarest = 4.0, 1 = 0.25 }"]);
    let (by_list, _) = run(&dir, "by_list", &["model.class_weights=[1.0, 0.25, 4.0]"]);
    assert_eq!(by_name, by_list, "a table must be the list it stands for");
}

#[test]
fn every_mode_weighs_pipeline_tensor_accumulation_and_parameter_servers() {
    let _g = common::mpi_lock();
    let dir = setup("class_weights_modes");
    for (mode, sets) in [
        ("pipeline", &["parallel.pipeline=2"][..]),
        ("tensor", &["parallel.tensor=2"][..]),
        ("accumulate", &["training.accumulate=2"][..]),
        ("ps", &["distribution.strategy=\"parameter_server\"", "distribution.servers=1", "training.batch_size=8"][..]),
    ] {
        let (plain, _) = run(&dir, &format!("{mode}_plain"), sets);
        let mut doubled_sets = sets.to_vec();
        doubled_sets.extend(["optimizer.lr=0.05", "model.class_weights=[2, 2, 2]"]);
        let (doubled, log) = run(&dir, &format!("{mode}_doubled"), &doubled_sets);
        assert!(log.contains("class weights: 0 (common): 2"), "{mode}: {log}");
        assert_eq!(doubled, plain, "{mode}: class weights of 2 with lr 0.05 must be lr 0.1 unweighted");
    }
}

#[test]
fn bad_class_weights_stop_the_job_naming_the_key() {
    let _g = common::mpi_lock();
    let dir = setup("class_weights_bad");
    for (set, says) in [
        ("model.class_weights=[1.0, 2.0]", "lists 2 weights, and the model has 3 classes"),
        ("model.class_weights=[1.0, -1.0, 2.0]", "gives class 1 the weight -1"),
        ("model.class_weights=\"balance\"", "unknown value \"balance\""),
        ("model.class_weights={ 5 = 2.0 }", "names class 5, and the model's classes are 0 to 2"),
        (
            "model.class_weights={ rarer = 2.0 }",
            "names class \"rarer\", which the training data's classes (common, rare, rarest) do not include",
        ),
    ] {
        let o = "output.dir=\"bad\"";
        let r = mpirun(2, &["train", "job.toml", "--set", o, "--set", set], &dir, 60);
        assert!(!r.ok(), "{set}: must fail\n{}", r.all());
        assert!(r.stderr.contains("model.class_weights") && r.stderr.contains(says), "{set}:\n{}", r.all());
        assert!(!dir.join("bad/weights.h5").exists(), "{set}: wrote weights");
    }
    // A loss without classes.
    let r = mpirun(
        2,
        &["train", "job.toml", "--set", "model.loss=\"mse\"", "--set", "model.class_weights=\"balanced\""],
        &dir,
        60,
    );
    assert!(!r.ok() && r.stderr.contains("only model.loss = \"softmax_cross_entropy\" has classes"), "{}", r.all());
}

/// The per-class figures of the test data (`metrics.jsonl`'s balanced accuracy and macro F1,
/// the report at the end, `hvtrain eval`'s JSON, the confusion matrix) are those of `hvtrain
/// predict`'s classes against the labels, computed here; `val_balanced_accuracy` can be monitored; a shuffle window
/// smaller than the training rows gets the advice to widen it.
#[test]
fn per_class_metrics_are_those_of_the_predictions() {
    let _g = common::mpi_lock();
    let dir = setup("class_weights_report");
    job(&dir, LAYERS, "d.h5", Some("d.h5"), "[optimizer]\nkind = \"sgd\"\nlr = 0.1\n");
    let sets = [
        "data.validation_split=0.2",
        "data.shuffle_block=8",
        "data.shuffle_window=16",
        "training.epochs=3",
        "model.class_weights=\"balanced\"",
        "training.early_stopping={ monitor = \"val_balanced_accuracy\", patience = 5 }",
    ];
    let (_, log) = run(&dir, "out", &sets);
    let p = hvtrain(
        &["predict", "job.toml", "--weights", "out/weights.h5", "--input", "d.h5", "--output", "p.h5"],
        &dir,
        60,
    );
    assert!(p.ok(), "{}", p.all());
    let pred: Vec<i32> = hdf5::File::open(dir.join("p.h5")).unwrap().dataset("classes").unwrap().read_raw().unwrap();
    let y: Vec<i32> = hdf5::File::open(dir.join("d.h5")).unwrap().dataset("y").unwrap().read_raw().unwrap();
    let (mut recall, mut f1) = (Vec::new(), Vec::new());
    for c in 0..3 {
        let right = pred.iter().zip(&y).filter(|(&p, &t)| p == c && t == c).count() as f64;
        let rows = y.iter().filter(|&&t| t == c).count() as f64;
        let predicted = pred.iter().filter(|&&p| p == c).count() as f64;
        recall.push(right / rows);
        if rows + predicted > 0.0 {
            f1.push(2.0 * right / (rows + predicted));
        }
    }
    let balanced = recall.iter().sum::<f64>() / 3.0;
    let macro_f1 = f1.iter().sum::<f64>() / f1.len() as f64;
    let last = metrics(&dir).pop().unwrap();
    let close = |a: f64, b: f64, what: &str| assert!((a - b).abs() < 1e-12, "{what}: {a} vs {b} from predict");
    close(last["test_balanced_accuracy"].as_f64().unwrap(), balanced, "test_balanced_accuracy");
    close(last["test_macro_f1"].as_f64().unwrap(), macro_f1, "test_macro_f1");
    assert!(last["val_balanced_accuracy"].as_f64().is_some(), "{last}");
    let end = format!("balanced accuracy (mean recall) {balanced:.4}, macro F1 {macro_f1:.4}");
    assert!(log.contains(&end) && log.contains("per class on the test data: rarest  0."), "{log}");
    // The window hint: 16 of the 48 training rows shuffled together.
    assert!(log.contains("data.shuffle_window = 16 shuffles 16 of the 48 training rows together"), "{log}");
    assert!(log.contains("--set data.shuffle_window=48"), "{log}");
    let e = mpirun(2, &["eval", "job.toml", "--weights", "out/weights.h5"], &dir, 60);
    assert!(e.ok(), "{}", e.all());
    let j: serde_json::Value = serde_json::from_str(e.stdout.lines().last().unwrap()).unwrap();
    close(j["test_balanced_accuracy"].as_f64().unwrap(), balanced, "eval's test_balanced_accuracy");
    assert_eq!(j["test_per_class"][2]["name"], "rarest", "{j}");
    close(j["test_per_class"][2]["recall"].as_f64().unwrap(), recall[2], "eval's recall of class 2");
    // The confusion matrix: row = the label, column = predict's class.
    let mut confusion = vec![vec![0u64; 3]; 3];
    for (&p, &t) in pred.iter().zip(&y) {
        confusion[t as usize][p as usize] += 1;
    }
    assert_eq!(j["test_confusion"], serde_json::json!(confusion), "{j}");
    let row = |m: &[Vec<u64>], c: usize| m[c].iter().map(|v| format!("{v:>6}")).collect::<Vec<_>>().join("  ");
    let rarest = format!("confusion on the test data:           rarest  {}", row(&confusion, 2));
    assert!(e.stderr.contains(&rarest) && log.contains(&rarest), "{rarest}\n{}", e.stderr);
    // A regression has no classes to watch.
    let r = mpirun(
        2,
        &["train", "job.toml", "--set", "model.loss=\"mse\"", "--set", "model.class_weights=[1.0, 1.0, 1.0]"],
        &dir,
        60,
    );
    assert!(!r.ok(), "{}", r.all());
    let r = mpirun(
        2,
        &[
            "train",
            "job.toml",
            "--set",
            "model.loss=\"mse\"",
            "--set",
            "data.validation_split=0.2",
            "--set",
            "training.early_stopping={ monitor = \"val_macro_f1\" }",
        ],
        &dir,
        60,
    );
    assert!(!r.ok() && r.stderr.contains("watches val_macro_f1, a classifier's per-class metric"), "{}", r.all());
}
