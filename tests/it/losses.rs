//! The losses beyond softmax cross-entropy and MSE, and the metrics that go with them, under a
//! real `mpirun` on real HDF5 files: binary cross-entropy learns multi-label targets, `predict`
//! writes sigmoid probabilities and 0/1 labels, and eval's loss and accuracy are what those
//! predictions give; Huber, MAE, log-cosh, MAPE and MSLE report the loss their formula gives on
//! `predict`'s outputs; the pinball loss's outputs sit above about τ of the targets;
//! top-5 accuracy counts the rows whose label is among the 5 largest outputs; label smoothing
//! trains against (1 − ε)·one-hot + ε/k (at ε = 1 the labels no longer matter, bit for bit;
//! ε = 0 is no smoothing) and eval's loss is that target's cross-entropy on `predict`'s
//! outputs; bad values name the key or the file, dataset and row.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const D: usize = 6;

/// Rows of x in [-1, 1] and `k` targets per row: bits (x_j > 0 for label j, learnable) or
/// real values (a smooth function of x with a few large outliers, where Huber and MAE differ
/// from MSE).
fn write_values(path: &Path, n: usize, k: usize, seed: u64, bits: bool) {
    let (x, _) = synthetic(n, D, 2, seed);
    let y: Vec<f32> = (0..n * k)
        .map(|i| {
            let (r, j) = (i / k, i % k);
            let row = &x[r * D..(r + 1) * D];
            if bits {
                (row[j % D] + 0.3 * row[(j + 1) % D] > 0.0) as u8 as f32
            } else {
                let v = row[j % D] * 2.0 - row[(j + 2) % D];
                if r % 17 == 3 {
                    v + 8.0
                } else {
                    v
                }
            }
        })
        .collect();
    let f = hdf5::File::create(path).unwrap();
    write_dataset(&f, "x", &x, &[n, D]);
    write_dataset(&f, "y", &y, &[n, k]);
}

fn setup(name: &str, k: usize, bits: bool, loss: &str, extra: &str) -> PathBuf {
    let dir = scratch(name);
    write_values(&dir.join("d.h5"), 800, k, 1, bits);
    write_values(&dir.join("t.h5"), 203, k, 2, bits);
    job(&dir, &[D, 32, 32, k], "d.h5", Some("t.h5"), "[optimizer]\nkind = \"adam\"\nlr = 0.01\n");
    let p = dir.join("job.toml");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("[model]\n", &format!("[model]\nloss = \"{loss}\"\n{extra}"))
        .replace("epochs = 1", "epochs = 6")
        .replace("batch_size = 4", "batch_size = 16");
    std::fs::write(&p, text).unwrap();
    dir
}

/// `hvtrain eval`'s JSON line and `predict`'s file for the test data, from weights.h5.
fn eval_and_predict(dir: &Path) -> (serde_json::Value, PathBuf) {
    let e = hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5"], dir, 60);
    assert!(e.ok(), "{}", e.all());
    let j: serde_json::Value = serde_json::from_str(e.stdout.lines().last().unwrap()).unwrap();
    let p = hvtrain(
        &["predict", "job.toml", "--weights", "out/weights.h5", "--input", "t.h5", "--output", "p.h5"],
        dir,
        60,
    );
    assert!(p.ok(), "{}", p.all());
    (j, dir.join("p.h5"))
}

fn close(got: f64, want: f64, rel: f64, what: &str) {
    assert!((got - want).abs() <= rel * want.abs().max(1e-3), "{what}: hvtrain {got}, from the predictions {want}");
}

#[test]
fn binary_cross_entropy_learns_multi_label_targets_and_predicts_probabilities() {
    binary_cross_entropy_case("loss-bce", 0.0);
}

/// Keras' `BinaryCrossentropy(label_smoothing=0.2)`: the loss against t·0.8 + 0.1, accuracy
/// still against the 0/1 labels.
#[test]
fn binary_cross_entropy_with_label_smoothing_reports_the_smoothed_loss() {
    binary_cross_entropy_case("loss-bce-smooth", 0.2);
}

/// Train 4 multi-label outputs with label smoothing `eps`; eval's loss and accuracy are what
/// `predict`'s outputs give.
fn binary_cross_entropy_case(name: &str, eps: f64) {
    let _g = mpi_lock();
    let k = 4;
    let dir = setup(name, k, true, "binary_cross_entropy", &format!("label_smoothing = {eps}\n"));
    let r = mpirun(2, &["train", "job.toml"], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let m = metrics(&dir);
    let (first, last) = (&m[0], m.last().unwrap());
    assert!(last["train_loss"].as_f64().unwrap() < first["train_loss"].as_f64().unwrap(), "{first}\n{last}");
    let acc = last["test_accuracy"].as_f64().expect("multi-label accuracy in metrics.jsonl");
    assert!(acc > 0.9, "labels are a linear rule of x: accuracy {acc}");
    let train_acc = last["train_accuracy"].as_f64().expect("multi-label train accuracy");
    assert!(train_acc > 0.85 && train_acc <= 1.0 && m[0]["train_accuracy"].as_f64().unwrap() < train_acc, "{m:?}");

    let (j, pred) = eval_and_predict(&dir);
    let (z, p) = (read_f32(&pred, "outputs"), read_f32(&pred, "probabilities"));
    let labels: Vec<u8> = hdf5::File::open(&pred).unwrap().dataset("labels").unwrap().read_raw().unwrap();
    let y = read_f32(&dir.join("t.h5"), "y");
    assert_eq!((z.len(), p.len(), labels.len()), (203 * k, 203 * k, 203 * k));
    let (mut loss, mut right) = (0.0f64, 0usize);
    for i in 0..z.len() {
        let (zi, yi) = (z[i] as f64, y[i] as f64);
        let s = 1.0 / (1.0 + (-zi).exp());
        assert!((p[i] as f64 - s).abs() < 1e-6, "probabilities[{i}] {} is not sigmoid({zi})", p[i]);
        assert_eq!(labels[i], (s > 0.5) as u8, "labels[{i}]");
        let q = yi * (1.0 - eps) + 0.5 * eps;
        loss += -(q * s.ln() + (1.0 - q) * (1.0 - s).ln()) / k as f64;
        right += (labels[i] as f64 == yi) as usize;
    }
    close(j["test_loss"].as_f64().unwrap(), loss / 203.0, 1e-4, "test_loss");
    close(j["test_accuracy"].as_f64().unwrap(), right as f64 / (203 * k) as f64, 1e-9, "test_accuracy");
}

#[test]
fn huber_and_mae_report_the_loss_their_formula_gives() {
    let _g = mpi_lock();
    let k = 2;
    for (loss, extra, delta) in [("huber", "huber_delta = 0.5\n", 0.5f64), ("mae", "", 0.0)] {
        let dir = setup(&format!("loss-{loss}"), k, false, loss, extra);
        let r = mpirun(2, &["train", "job.toml"], &dir, 120);
        assert!(r.ok(), "{}", r.all());
        let m = metrics(&dir);
        assert!(
            m.last().unwrap()["train_loss"].as_f64().unwrap() < m[0]["train_loss"].as_f64().unwrap(),
            "{loss}: {m:?}"
        );
        // Running train MAE and RMSE over the epoch's steps: RMSE ≥ MAE, both fall.
        let errors = |e: &serde_json::Value| (e["train_mae"].as_f64().unwrap(), e["train_rmse"].as_f64().unwrap());
        let ((m0, _), (m1, r1)) = (errors(&m[0]), errors(m.last().unwrap()));
        assert!(m1 < m0 && r1 >= m1 && m.last().unwrap().get("train_accuracy").is_none(), "{loss}: {m:?}");
        let (j, pred) = eval_and_predict(&dir);
        let (z, y) = (read_f32(&pred, "outputs"), read_f32(&dir.join("t.h5"), "y"));
        let (mut want, mut abs) = (0.0f64, 0.0f64);
        for (&p, &t) in z.iter().zip(&y) {
            let e = p as f64 - t as f64;
            let l = match loss {
                "huber" if e.abs() <= delta => 0.5 * e * e,
                "huber" => delta * (e.abs() - 0.5 * delta),
                _ => e.abs(),
            };
            want += l / k as f64;
            abs += e.abs();
        }
        close(j["test_loss"].as_f64().unwrap(), want / 203.0, 1e-4, &format!("{loss} test_loss"));
        close(j["test_mae"].as_f64().unwrap(), abs / (203 * k) as f64, 1e-4, &format!("{loss} test_mae"));
        if loss == "mae" {
            // The loss is the MAE.
            close(j["test_loss"].as_f64().unwrap(), j["test_mae"].as_f64().unwrap(), 1e-4, "mae loss vs test_mae");
        }
    }
}

/// Rewrites a setup's y in both files as `f` of each row's x and its index (x, y as written).
fn remap_targets(dir: &Path, k: usize, f: impl Fn(&[f32], usize, usize, f32) -> f32) {
    for name in ["d.h5", "t.h5"] {
        let path = dir.join(name);
        let (x, y) = (read_f32(&path, "x"), read_f32(&path, "y"));
        let n = y.len() / k;
        let y: Vec<f32> = (0..n * k).map(|i| f(&x[(i / k) * D..][..D], i / k, i % k, y[i])).collect();
        let file = hdf5::File::create(&path).unwrap();
        write_dataset(&file, "x", &x, &[n, D]);
        write_dataset(&file, "y", &y, &[n, k]);
    }
}

#[test]
fn log_cosh_mape_and_msle_report_the_loss_their_formula_gives() {
    let _g = mpi_lock();
    let k = 2;
    for loss in ["log_cosh", "mape", "msle"] {
        let dir = setup(&format!("loss-{loss}"), k, false, loss, "");
        if loss != "log_cosh" {
            // Positive targets from 0.5 up (MAPE divides by them, MSLE takes their logarithm).
            remap_targets(&dir, k, |_, _, _, y| y.abs() + 0.5);
        }
        let r = mpirun(2, &["train", "job.toml"], &dir, 120);
        assert!(r.ok(), "{}", r.all());
        assert!(r.all().contains(&format!("loss {loss}")), "the start-up line names the loss: {}", r.all());
        let m = metrics(&dir);
        let first = m[0]["train_loss"].as_f64().unwrap();
        assert!(m.last().unwrap()["train_loss"].as_f64().unwrap() < first, "{loss}: {m:?}");
        let (j, pred) = eval_and_predict(&dir);
        let (z, y) = (read_f32(&pred, "outputs"), read_f32(&dir.join("t.h5"), "y"));
        let mut want = 0.0f64;
        for (&p, &t) in z.iter().zip(&y) {
            let (p, t) = (p as f64, t as f64);
            want += match loss {
                "log_cosh" => (p - t).cosh().ln(),
                "mape" => 100.0 * (p - t).abs() / t.abs(),
                _ => ((p.max(1e-7) + 1.0).ln() - (t + 1.0).ln()).powi(2),
            } / k as f64;
        }
        close(j["test_loss"].as_f64().unwrap(), want / 203.0, 1e-4, &format!("{loss} test_loss"));
    }
}

/// The pinball loss learns a quantile: with noisy targets, the outputs of τ = 0.1 and τ = 0.9
/// sit above about that share of the test targets, and eval's loss is the pinball formula.
#[test]
fn quantile_outputs_sit_above_that_share_of_the_targets() {
    let _g = mpi_lock();
    let k = 1;
    for tau in [0.1f64, 0.9] {
        let dir = setup(
            &format!("loss-quantile-{tau}"),
            k,
            false,
            "quantile",
            &format!(
                "quantile = {tau}
"
            ),
        );
        // A smooth function plus noise of spread ±1 drawn per row (no outliers).
        remap_targets(&dir, k, |x, r, _, _| {
            let h = (r as u64 ^ 0x9e37_79b9).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 40;
            x[0] * 2.0 - x[2] + (h as f32 / (1u64 << 24) as f32 * 2.0 - 1.0)
        });
        let r = mpirun(2, &["train", "job.toml", "--set", "training.epochs=12"], &dir, 120);
        assert!(r.ok(), "{}", r.all());
        assert!(r.all().contains(&format!("loss quantile, quantile {tau}")), "{}", r.all());
        let (j, pred) = eval_and_predict(&dir);
        let (z, y) = (read_f32(&pred, "outputs"), read_f32(&dir.join("t.h5"), "y"));
        let below = z.iter().zip(&y).filter(|(p, t)| t < p).count() as f64 / y.len() as f64;
        assert!((below - tau).abs() < 0.1, "τ {tau}: {below} of the test targets lie below the outputs");
        let want: f64 = z
            .iter()
            .zip(&y)
            .map(|(&p, &t)| {
                let u = t as f64 - p as f64;
                (tau * u).max((tau - 1.0) * u)
            })
            .sum::<f64>()
            / 203.0;
        close(j["test_loss"].as_f64().unwrap(), want, 1e-4, "pinball test_loss");
    }
}

#[test]
fn top5_accuracy_counts_labels_among_the_five_largest_outputs() {
    let _g = mpi_lock();
    let dir = scratch("loss-top5");
    let k = 10;
    let (x, y) = synthetic(600, D, k, 3);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let (tx, ty) = synthetic(211, D, k, 4);
    write_classes(&dir.join("t.h5"), &tx, D, &ty);
    job(&dir, &[D, 32, k], "d.h5", Some("t.h5"), "");
    let r = mpirun(2, &["train", "job.toml", "--set", "training.epochs=2"], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let m = metrics(&dir);
    let t5 = m[1]["test_top5_accuracy"].as_f64().expect("test_top5_accuracy with 10 classes");
    let train5 = m[1]["train_top5_accuracy"].as_f64().expect("train_top5_accuracy with 10 classes");
    assert!(train5 >= m[1]["train_accuracy"].as_f64().unwrap() && train5 < 1.0, "{}", m[1]);
    assert!(t5 >= m[1]["test_accuracy"].as_f64().unwrap(), "{}", m[1]);
    let (j, pred) = eval_and_predict(&dir);
    let z = read_f32(&pred, "outputs");
    let hits =
        z.chunks_exact(k).zip(&ty).filter(|(row, &c)| row.iter().filter(|&&o| o > row[c as usize]).count() < 5).count();
    close(j["test_top5_accuracy"].as_f64().unwrap(), hits as f64 / 211.0, 1e-9, "test_top5_accuracy");
    assert!(hits < 211, "a 2-epoch model on 10 noisy classes should miss some: the check would be vacuous");

    // 3 classes: no top-5 metric.
    let dir = scratch("loss-top5-few");
    let (x, y) = synthetic(100, D, 3, 3);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &[D, 8, 3], "d.h5", Some("d.h5"), "");
    let r = hvtrain(&["train", "job.toml"], &dir, 60);
    assert!(r.ok(), "{}", r.all());
    assert!(metrics(&dir)[0].get("test_top5_accuracy").is_none());
}

#[test]
fn bad_loss_values_name_the_key_or_the_file_and_row() {
    let dir = setup("loss-bad", 3, true, "binary_cross_entropy", "");
    // A target that is neither 0 nor 1.
    let f = hdf5::File::create(dir.join("bad.h5")).unwrap();
    let (x, _) = synthetic(20, D, 2, 9);
    let mut y = vec![0.0f32; 20 * 3];
    y[7 * 3 + 2] = 2.0;
    write_dataset(&f, "x", &x, &[20, D]);
    write_dataset(&f, "y", &y, &[20, 3]);
    drop(f);
    let r = hvtrain(&["train", "job.toml", "--set", "data.train=\"bad.h5\""], &dir, 30);
    let all = r.all();
    assert!(!r.ok() && all.contains("bad.h5") && all.contains("at row 7 column 2") && all.contains("0 or 1"), "{all}");
    for (sets, key) in [
        (vec!["model.loss=\"huber\"", "model.huber_delta=0.0"], "model.huber_delta"),
        (vec!["model.loss=\"huber\"", "model.huber_delta=-1.0"], "model.huber_delta"),
        (vec!["data.normalize_y=\"standard\""], "data.normalize_y"),
        (
            vec![
                "model.loss=\"mae\"",
                "training.early_stopping={monitor=\"val_accuracy\"}",
                "data.validation_split=0.2",
            ],
            "training.early_stopping.monitor",
        ),
        (vec!["model.loss=\"hinge\""], "hinge"),
        (
            vec!["model.loss=\"mse\"", "model.label_smoothing=0.1"],
            "`model.label_smoothing`: smooths class or 0/1 labels",
        ),
        (vec!["model.label_smoothing=1.5"], "`model.label_smoothing`: is 1.5"),
        (vec!["model.loss=\"quantile\"", "model.quantile=1.0"], "`model.quantile`: is 1"),
        (vec!["model.loss=\"mse\"", "model.quantile=0.9"], "read by loss = \"quantile\" only"),
        (vec!["model.loss=\"mape\"", "data.normalize_y=\"standard\""], "a percentage of each target's size"),
    ] {
        let mut args = vec!["train", "job.toml"];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let r = hvtrain(&args, &dir, 30);
        assert!(!r.ok() && r.all().contains(key), "{sets:?}: {}", r.all());
    }
    // Multi-label val_accuracy is a metric the run has.
    let r = hvtrain(
        &[
            "train",
            "job.toml",
            "--set",
            "training.epochs=1",
            "--set",
            "training.early_stopping={monitor=\"val_accuracy\"}",
            "--set",
            "data.validation_split=0.2",
        ],
        &dir,
        60,
    );
    assert!(r.ok(), "{}", r.all());
    assert!(metrics(&dir)[0]["val_accuracy"].as_f64().is_some());
}

/// With weights that do not move (SGD at lr 1e-30), the running train metrics over an epoch
/// are an evaluation of the training data: they must equal `eval` on the training file, also
/// with the layers split into 2 pipeline stages (the last stage computes them).
#[test]
fn train_metrics_equal_an_evaluation_of_the_training_data_when_the_weights_stay() {
    let _g = mpi_lock();
    for (loss, k, bits) in
        [("binary_cross_entropy", 4, true), ("huber", 2, false), ("softmax_cross_entropy", 10, false)]
    {
        let dir = setup(
            &format!("loss-train-{loss}"),
            k,
            bits,
            if loss == "softmax_cross_entropy" { "mse" } else { loss },
            "",
        );
        if loss == "softmax_cross_entropy" {
            let (x, y) = synthetic(800, D, k, 3);
            write_classes(&dir.join("d.h5"), &x, D, &y);
            let text = std::fs::read_to_string(dir.join("job.toml"))
                .unwrap()
                .replace("loss = \"mse\"", "loss = \"softmax_cross_entropy\"");
            std::fs::write(dir.join("job.toml"), text).unwrap();
        }
        let sets = [
            "--set",
            "optimizer.kind=\"sgd\"",
            "--set",
            "optimizer.lr=1e-30",
            "--set",
            "training.epochs=1",
            "--set",
            "data.test=\"d.h5\"",
        ];
        for split in ["parallel.pipeline=1", "parallel.pipeline=2"] {
            let r = mpirun(2, &[&["train", "job.toml", "--set", split][..], &sets].concat(), &dir, 120);
            assert!(r.ok(), "{}", r.all());
            let m = &metrics(&dir)[0];
            let close = |a: &str, b: &str| {
                let (x, y) = (m[a].as_f64().unwrap_or_else(|| panic!("{loss}: no {a}: {m}")), m[b].as_f64().unwrap());
                assert!((x - y).abs() <= 1e-9 * y.abs().max(1e-3), "{loss} {split}: {a} {x} vs {b} {y}");
            };
            close("train_loss", "test_loss");
            match loss {
                "huber" => {
                    close("train_mae", "test_mae");
                    close("train_rmse", "test_rmse");
                    close("train_r2", "test_r2");
                    let per = |key: &str| -> Vec<f64> {
                        m[key]["r2"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
                    };
                    let (a, b) = (per("train_per_output"), per("test_per_output"));
                    assert!(a.len() == 2 && a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-9), "{a:?} vs {b:?}");
                }
                "softmax_cross_entropy" => {
                    close("train_accuracy", "test_accuracy");
                    close("train_top5_accuracy", "test_top5_accuracy");
                }
                _ => close("train_accuracy", "test_accuracy"),
            }
        }
    }
}

#[test]
fn label_smoothing_trains_against_the_smoothed_target() {
    let _g = mpi_lock();
    let dir = scratch("loss-smoothing");
    let k = 3;
    let (x, y) = synthetic(240, D, k, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    // The same rows with other labels.
    let other: Vec<i32> = y.iter().map(|&c| (c + 1) % k as i32).collect();
    write_classes(&dir.join("o.h5"), &x, D, &other);
    let (tx, ty) = synthetic(97, D, k, 6);
    write_classes(&dir.join("t.h5"), &tx, D, &ty);
    job(&dir, &[D, 16, k], "d.h5", Some("t.h5"), "");
    let train = |out: &str, sets: &[&str]| {
        let (w, _) = train_weights(&dir, out, 2, 2, &[], &["training.epochs=2"], sets);
        w
    };
    // ε = 1: the target is uniform whatever the label, so other labels train the same bits.
    let a = train("a", &["model.label_smoothing=1.0"]);
    let b = train("b", &["model.label_smoothing=1.0", "data.train=\"o.h5\""]);
    assert_eq!(a, b, "at label_smoothing = 1 the labels must not matter");
    let plain = train("plain", &[]);
    assert!(max_diff(&plain, &train("plain_o", &["data.train=\"o.h5\""])) > 1e-3, "labels changed nothing");
    // ε = 0 is no smoothing.
    assert_eq!(train("zero", &["model.label_smoothing=0.0"]), plain);
    // ε = 0.1: the model differs, and eval's loss is the smoothed target's cross-entropy.
    let smooth = train("out", &["model.label_smoothing=0.1"]);
    assert!(max_diff(&smooth, &plain) > 1e-4, "label smoothing changed nothing");
    let e =
        hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5", "--set", "model.label_smoothing=0.1"], &dir, 60);
    assert!(e.ok(), "{}", e.all());
    let j: serde_json::Value = serde_json::from_str(e.stdout.lines().last().unwrap()).unwrap();
    let p = hvtrain(
        &["predict", "job.toml", "--weights", "out/weights.h5", "--input", "t.h5", "--output", "p.h5"],
        &dir,
        60,
    );
    assert!(p.ok(), "{}", p.all());
    let z = read_f32(&dir.join("p.h5"), "outputs");
    let eps = 0.1f64;
    let want: f64 = z
        .chunks_exact(k)
        .zip(&ty)
        .map(|(row, &c)| {
            let m = row.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
            let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
            (0..k)
                .map(|i| -((1.0 - eps) * (i == c as usize) as u8 as f64 + eps / k as f64) * (row[i] as f64 - lse))
                .sum::<f64>()
        })
        .sum::<f64>()
        / ty.len() as f64;
    close(j["test_loss"].as_f64().unwrap(), want, 1e-5, "smoothed test_loss");
}
