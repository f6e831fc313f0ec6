//! End to end on real data: a slice of Fashion-MNIST (Debian's `dataset-fashion-mnist`),
//! converted with `hvtrain data import-idx`, trained on 2 ranks under mpirun. It must reach
//! a stated test accuracy, write metrics.jsonl and weights.h5, and `eval` must agree.

use crate::common;
use common::*;
use std::path::Path;

/// What 3 epochs on 12,000 training samples reliably reach (Keras gets about 0.84 on this
/// slice); far above the 0.10 of guessing.
const MIN_ACCURACY: f64 = 0.80;

/// The first `n` rows of a converted file, written as a new file.
fn slice(full: &Path, n: usize, out: &Path) {
    let f = hdf5::File::open(full).unwrap();
    let x: Vec<f32> = f.dataset("x").unwrap().read_slice_2d::<f32, _>((0..n, ..)).unwrap().iter().copied().collect();
    let y: Vec<i32> = f.dataset("y").unwrap().read_slice_1d::<i32, _>(0..n).unwrap().to_vec();
    write_classes(out, &x, 784, &y);
}

#[test]
fn fashion_mnist_slice_reaches_accuracy_on_2_ranks() {
    let dir = scratch("e2e-fmnist");
    for (split, n) in [("train", 12_000), ("t10k", 2_000)] {
        let full = dir.join(format!("{split}-full.h5"));
        import_fashion_mnist(split, &full, &dir);
        slice(&full, n, &dir.join(format!("{split}.h5")));
        std::fs::remove_file(&full).unwrap();
    }
    let extra = "[optimizer]\nkind = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n";
    job(&dir, &[784, 256, 128, 10], "train.h5", Some("t10k.h5"), extra);
    let _g = mpi_lock();
    let run =
        mpirun(2, &["train", "job.toml", "--set", "training.epochs=3", "--set", "training.batch_size=64"], &dir, 300);
    assert!(run.ok(), "{}", run.all());

    let metrics = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "one line per epoch:\n{metrics}");
    let last = &lines[2];
    let acc = last["test_accuracy"].as_f64().unwrap();
    assert!(acc >= MIN_ACCURACY, "test accuracy {acc} < {MIN_ACCURACY}\n{}", run.all());
    assert!(last["train_loss"].as_f64().unwrap() < lines[0]["train_loss"].as_f64().unwrap(), "loss must fall");
    assert_eq!(last["ranks"], 2);
    assert!(run.stderr.contains("test_accuracy"), "epoch lines in the log:\n{}", run.stderr);

    let ev = mpirun(2, &["eval", "job.toml", "--weights", "out/weights.h5"], &dir, 120);
    assert!(ev.ok(), "{}", ev.all());
    let v: serde_json::Value = serde_json::from_str(ev.stdout.lines().last().unwrap()).unwrap();
    assert!((v["test_accuracy"].as_f64().unwrap() - acc).abs() < 1e-9, "eval {v} vs training's {acc}");
}
