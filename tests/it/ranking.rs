//! ROC AUC and average precision (`metrics/auc.rs`) under a real `mpirun`, on real HDF5
//! files: a binary classifier's, a 3-class one's (one vs rest) and a multi-label model's
//! figures in metrics.jsonl and `hvtrain eval` equal scikit-learn's `roc_auc_score` and
//! `average_precision_score` on `hvtrain predict`'s probabilities (within the binning's
//! resolution), are the same on 1 and 2 ranks (the ranks' histograms summed), and
//! `val_auc` is watched as a metric that is better high (keep_best keeps its largest epoch).

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const D: usize = 6;

/// Rows whose targets depend on x through a noisy linear score: `k` classes (the largest of
/// k scores) or, with `labels`, k independent 0/1 labels (each score above 0).
fn noisy(n: usize, k: usize, labels: bool, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 33) as f64 / (1u64 << 31) as f64 * 2.0 - 1.0) as f32
    };
    let mut x = vec![0.0f32; n * D];
    let mut y = Vec::new();
    for r in 0..n {
        for v in &mut x[r * D..(r + 1) * D] {
            *v = next();
        }
        let row = &x[r * D..(r + 1) * D];
        let scores: Vec<f32> = (0..k).map(|c| row[c] - 0.5 * row[(c + 3) % D] + 0.8 * next()).collect();
        if labels {
            y.extend(scores.iter().map(|&v| (v > 0.0) as u8 as f32));
        } else {
            let best = (0..k).fold(0, |b, c| if scores[c] > scores[b] { c } else { b });
            y.push(best as f32);
        }
    }
    (x, y)
}

fn write(path: &Path, x: &[f32], y: &[f32], k: usize, labels: bool) {
    let f = hdf5::File::create(path).unwrap();
    let n = x.len() / D;
    write_dataset(&f, "x", x, &[n, D]);
    if labels {
        write_dataset(&f, "y", y, &[n, k]);
    } else {
        let y: Vec<i32> = y.iter().map(|&v| v as i32).collect();
        write_dataset(&f, "y", &y, &[n]);
    }
}

/// A job on `k` classes (or labels) with 480 training rows (the last quarter validation) and
/// 400 test rows.
fn setup(name: &str, k: usize, labels: bool) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = noisy(480, k, labels, 7);
    write(&dir.join("train.h5"), &x, &y, k, labels);
    let (x, y) = noisy(400, k, labels, 8);
    write(&dir.join("test.h5"), &x, &y, k, labels);
    let outputs = if k == 2 && !labels { 2 } else { k };
    let loss = if labels { "binary_cross_entropy" } else { "softmax_cross_entropy" };
    let text = format!(
        "[data]\ntrain = \"train.h5\"\ntest = \"test.h5\"\nvalidation_split = 0.25\n\n[model]\nlayers = [{D}, 8, {outputs}]\n\
         loss = \"{loss}\"\n\n[training]\nbatch_size = 16\nseed = 1\n\n[optimizer]\nkind = \"adam\"\nlr = 0.01\n\n\
         [output]\ndir = \"out\"\n"
    );
    std::fs::write(dir.join("job.toml"), text).unwrap();
    dir
}

/// scikit-learn's [ROC AUC, average precision] of `test.h5`'s targets against `p.h5`'s
/// probabilities (macro over the classes, one vs rest, or over the labels).
fn sklearn(dir: &Path, k: usize, labels: bool) -> Option<[f64; 2]> {
    let py = sklearn_python()?;
    let score = if k == 2 && !labels { "p[:, 1]" } else { "p" };
    let ovr = if k > 2 && !labels { ", multi_class='ovr'" } else { "" };
    let code = format!(
        "import h5py, json\nfrom sklearn.metrics import roc_auc_score, average_precision_score\n\
         y = h5py.File('test.h5')['y'][:]; p = h5py.File('p.h5')['probabilities'][:].astype('float64')\n\
         print(json.dumps([roc_auc_score(y, {score}{ovr}), average_precision_score(y, {score})]))"
    );
    let out = std::process::Command::new(py).args(["-c", &code]).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap())
}

fn eval_json(r: &Run) -> serde_json::Value {
    serde_json::from_str(r.stdout.lines().rfind(|l| l.starts_with('{')).unwrap()).unwrap()
}

fn check(name: &str, k: usize, labels: bool) {
    let dir = setup(name, k, labels);
    let r = mpirun(2, &["train", "job.toml", "--set", "training.epochs=4"], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let m = metrics(&dir);
    let last = m.last().unwrap();
    for e in &m {
        for key in ["val_auc", "val_average_precision", "test_auc", "test_average_precision"] {
            let v = e[key].as_f64().unwrap_or_else(|| panic!("{name}: no {key} in {e}"));
            assert!((0.0..=1.0).contains(&v), "{name}: {key} {v}");
        }
    }
    assert!(r.stderr.contains(&format!("test_auc {:.4}", last["test_auc"].as_f64().unwrap())), "{}", r.all());
    // The same weights evaluated on 1 rank and on 2: the histograms are counts, so the
    // figures are equal, and equal to the last epoch's.
    let w = ["eval", "job.toml", "--weights", "out/weights.h5"];
    let (one, two) = (mpirun(1, &w, &dir, 60), mpirun(2, &w, &dir, 60));
    assert!(one.ok() && two.ok(), "{}\n{}", one.all(), two.all());
    let (one, two) = (eval_json(&one), eval_json(&two));
    for key in ["test_auc", "test_average_precision"] {
        assert_eq!(one[key], two[key], "{name}: {key} on 1 and 2 ranks");
        assert_eq!(one[key], last[key], "{name}: {key} of eval and of the last epoch");
    }
    let auc = one["test_auc"].as_f64().unwrap();
    assert!(auc > 0.65, "{name}: the model learned nothing? test_auc {auc}");
    if k > 2 && !labels {
        let per: Vec<f64> =
            one["test_per_class"].as_array().unwrap().iter().map(|c| c["auc"].as_f64().unwrap()).collect();
        assert!((per.iter().sum::<f64>() / k as f64 - auc).abs() < 1e-12, "{name}: macro of {per:?}");
    }
    if labels {
        assert_eq!(one["test_per_label"].as_array().unwrap().len(), k, "{one}");
    }
    let p = hvtrain(
        &["predict", "job.toml", "--weights", "out/weights.h5", "--input", "test.h5", "--output", "p.h5"],
        &dir,
        60,
    );
    assert!(p.ok(), "{}", p.all());
    curves(&dir, name, k, labels);
    if let Some([sk_auc, sk_ap]) = sklearn(&dir, k, labels) {
        let ap = one["test_average_precision"].as_f64().unwrap();
        eprintln!("{name}: hvtrain ROC AUC {auc}, average precision {ap}; scikit-learn {sk_auc}, {sk_ap}");
        assert!((auc - sk_auc).abs() < 1e-3, "{name}: ROC AUC hvtrain {auc}, scikit-learn {sk_auc}");
        assert!((ap - sk_ap).abs() < 1e-3, "{name}: average precision hvtrain {ap}, scikit-learn {sk_ap}");
    }
}

/// `eval --curves`: a row per threshold and problem whose counts are those of `predict
/// --threshold` at that threshold (two classes, labels); more classes: one problem a class,
/// and `--threshold` refused.
fn curves(dir: &Path, name: &str, k: usize, labels: bool) {
    let r = mpirun(2, &["eval", "job.toml", "--weights", "out/weights.h5", "--curves", "c.csv"], dir, 60);
    assert!(r.ok(), "{}", r.all());
    let text = std::fs::read_to_string(dir.join("c.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("problem,threshold,tp,fp,fn,tn,precision,recall,fpr"));
    let rows: Vec<Vec<String>> = lines.map(|l| l.split(',').map(String::from).collect()).collect();
    let problems: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    let want: Vec<String> = if k == 2 && !labels { vec!["1".into()] } else { (0..k).map(|j| j.to_string()).collect() };
    assert_eq!(problems.into_iter().collect::<Vec<_>>(), want, "{name}");
    let y = read_f32(&dir.join("test.h5"), "y");
    let y: Vec<f32> = if labels {
        y
    } else {
        hdf5::File::open(dir.join("test.h5"))
            .unwrap()
            .dataset("y")
            .unwrap()
            .read_raw::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as f32)
            .collect()
    };
    let n = 400;
    for r in &rows {
        let c: Vec<u64> = r[2..6].iter().map(|v| v.parse().unwrap()).collect();
        assert_eq!(c.iter().sum::<u64>(), n as u64, "{name}: {r:?}");
    }
    let args = |t: &str| {
        [
            "predict",
            "job.toml",
            "--weights",
            "out/weights.h5",
            "--input",
            "test.h5",
            "--output",
            "t.h5",
            "--threshold",
            t,
        ]
        .map(String::from)
    };
    if k > 2 && !labels {
        let a = args("0.5");
        let p = hvtrain(&a.iter().map(String::as_str).collect::<Vec<_>>(), dir, 60);
        assert!(
            !p.ok() && p.stderr.contains("--threshold") && p.stderr.contains("this model has 3 classes"),
            "{}",
            p.all()
        );
        return;
    }
    // Three thresholds of the first problem: predict's positives there are the curve's.
    let first: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == want[0]).collect();
    for at in [first.len() / 4, first.len() / 2, 3 * first.len() / 4] {
        let row = first[at];
        let a = args(&row[1]);
        let p = hvtrain(&a.iter().map(String::as_str).collect::<Vec<_>>(), dir, 60);
        assert!(p.ok(), "{}", p.all());
        let f = hdf5::File::open(dir.join("t.h5")).unwrap();
        let called: Vec<bool> = if labels {
            let l: Vec<u8> = f.dataset("labels").unwrap().read_raw().unwrap();
            l.iter().step_by(k).map(|&v| v == 1).collect()
        } else {
            let c: Vec<i32> = f.dataset("classes").unwrap().read_raw().unwrap();
            c.iter().map(|&v| v == 1).collect()
        };
        let truth: Vec<bool> = if labels {
            y.iter().step_by(k).map(|&v| v == 1.0).collect()
        } else {
            y.iter().map(|&v| v == 1.0).collect()
        };
        let tp = called.iter().zip(&truth).filter(|(c, t)| **c && **t).count();
        let fp = called.iter().zip(&truth).filter(|(c, t)| **c && !**t).count();
        assert_eq!(
            (tp.to_string(), fp.to_string()),
            (row[2].clone(), row[3].clone()),
            "{name}: at threshold {}",
            row[1]
        );
    }
}

#[test]
fn auc_and_average_precision_are_scikit_learns_on_any_rank_count() {
    let _g = common::mpi_lock();
    check("ranking_binary", 2, false);
    check("ranking_classes", 3, false);
    check("ranking_labels", 3, true);
}

#[test]
fn val_auc_is_watched_as_higher_is_better() {
    let _g = common::mpi_lock();
    let dir = setup("ranking_watch", 2, false);
    let sets = ["train", "job.toml", "--set", "training.epochs=6", "--set", "output.keep_best=true"];
    let mut args = sets.to_vec();
    args.extend(["--set", "training.early_stopping={ monitor = \"val_auc\", patience = 6 }"]);
    let r = mpirun(2, &args, &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let m = metrics(&dir);
    let aucs: Vec<f64> = m.iter().map(|e| e["val_auc"].as_f64().unwrap()).collect();
    let best = (0..aucs.len()).fold(0, |b, i| if aucs[i] > aucs[b] { i } else { b });
    assert!(aucs[best] > aucs[0], "val_auc never rose: {aucs:?}");
    assert!(
        r.stderr.contains(&format!(
            "keep_best: weights.h5 holds epoch {}'s weights (val_auc {:.6}",
            best + 1,
            aucs[best]
        )),
        "{aucs:?}\n{}",
        r.all()
    );
    // A regression has no AUC to watch.
    let r = mpirun(
        1,
        &[
            "train",
            "job.toml",
            "--set",
            "model.loss=\"mse\"",
            "--set",
            "training.early_stopping={ monitor = \"val_auc\" }",
        ],
        &dir,
        60,
    );
    assert!(!r.ok() && r.stderr.contains("watches val_auc, a classifier's ranking metric"), "{}", r.all());
}
