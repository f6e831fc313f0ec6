//! `data.normalize` and `data.normalize_y` under a real `mpirun`, on regression data in raw
//! simulation units (offsets up to 3e5, spreads from 1e-3 to 1e5, a constant feature):
//! the statistics in weights.h5 equal a float64 two-pass reference over the whole file and
//! are the same bits on 1, 2 and 3 ranks; a model trained on normalized data predicts in raw
//! units with R² near 1 where the same model on raw data does not learn; the statistics
//! travel in checkpoints, so a stopped run resumes to the same weights; bad values name the
//! key or the file.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const D: usize = 5;
const K: usize = 2;

/// x [n, D] in raw units and y [n, K] = smooth functions of the underlying [0, 1] values,
/// in large units.
fn data(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut u = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let z: Vec<f64> = (0..D).map(|_| u()).collect();
        x.extend([
            (3e5 + 2e3 * z[0]) as f32, // a large offset, a small spread
            (1e-3 * z[1]) as f32,      // tiny values
            (1e5 * (z[2] - 0.5)) as f32,
            42.0, // constant
            (z[4] * 10.0) as f32,
        ]);
        let t = (3.0 * z[0]).sin() + 2.0 * z[1] * z[2] - z[4];
        y.extend([(5e3 * t + 1e4) as f32, (-2e-2 * t + 3.0) as f32]);
    }
    (x, y)
}

fn write(path: &Path, x: &[f32], y: &[f32]) {
    let f = hdf5::File::create(path).unwrap();
    write_dataset(&f, "x", x, &[x.len() / D, D]);
    write_dataset(&f, "y", y, &[y.len() / K, K]);
}

fn setup(name: &str, extra: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = data(2400, 1);
    write(&dir.join("d.h5"), &x, &y);
    let (tx, ty) = data(600, 2);
    write(&dir.join("t.h5"), &tx, &ty);
    let base = "[model]\nloss = \"mse\"\nactivation = \"tanh\"\n[optimizer]\nkind = \"adam\"\nlr = 0.003\n";
    let p = job(&dir, &[D, 32, 32, K], "d.h5", Some("t.h5"), extra);
    let text =
        std::fs::read_to_string(&p).unwrap().replace("[model]\n", "[model]\nloss = \"mse\"\nactivation = \"tanh\"\n");
    let text = text + &base[base.find("[optimizer]").unwrap()..];
    std::fs::write(&p, text).unwrap();
    dir
}

fn read_f64(path: &Path, name: &str) -> Vec<f64> {
    hdf5::File::open(path).unwrap().dataset(name).unwrap().read_raw().unwrap()
}

/// Mean and population variance per column, two passes in float64.
fn reference(v: &[f32], k: usize) -> (Vec<f64>, Vec<f64>) {
    let n = (v.len() / k) as f64;
    let mut mean = vec![0.0; k];
    v.iter().enumerate().for_each(|(i, &x)| mean[i % k] += x as f64);
    mean.iter_mut().for_each(|m| *m /= n);
    let mut var = vec![0.0; k];
    v.iter().enumerate().for_each(|(i, &x)| var[i % k] += (x as f64 - mean[i % k]).powi(2));
    var.iter_mut().for_each(|s| *s /= n);
    (mean, var)
}

const NORM: [&str; 4] = ["--set", "data.normalize=\"standard\"", "--set", "data.normalize_y=\"standard\""];

#[test]
fn statistics_match_float64_and_do_not_depend_on_the_rank_count() {
    let _g = mpi_lock();
    let (x, y) = data(2400, 1);
    let ((xm, xv), (ym, yv)) = (reference(&x, D), reference(&y, K));
    let mut seen: Vec<Vec<Vec<f64>>> = Vec::new();
    for ranks in [1, 2, 3] {
        let dir = setup(&format!("norm-stats-{ranks}"), "");
        let mut args = vec!["train", "job.toml"];
        args.extend(NORM);
        let r = mpirun(ranks, &args, &dir, 120);
        assert!(r.ok(), "{}", r.all());
        assert!(r.all().contains("normalize x (standard), features 0-4: mean ["), "{}", r.all());
        let w = dir.join("out/weights.h5");
        let got: Vec<Vec<f64>> = ["x_shift", "x_div", "y_shift", "y_div"]
            .iter()
            .map(|n| read_f64(&w, &format!("normalization/{n}")))
            .collect();
        for j in 0..D {
            assert!(
                (got[0][j] - xm[j]).abs() <= 1e-12 * xm[j].abs().max(1.0),
                "x mean {j}: {} vs {}",
                got[0][j],
                xm[j]
            );
            let sd = if xv[j] == 0.0 { 1.0 } else { xv[j].sqrt() };
            assert!((got[1][j] - sd).abs() <= 1e-9 * sd, "x std {j}: {} vs {sd}", got[1][j]);
        }
        assert_eq!(got[1][3], 1.0, "the constant feature is divided by 1");
        for j in 0..K {
            assert!((got[2][j] - ym[j]).abs() <= 1e-12 * ym[j].abs().max(1.0), "y mean {j}");
            assert!((got[3][j] - yv[j].sqrt()).abs() <= 1e-9 * yv[j].sqrt(), "y std {j}");
        }
        seen.push(got);
    }
    assert_eq!(seen[0], seen[1], "1 and 2 ranks");
    assert_eq!(seen[0], seen[2], "1 and 3 ranks");
    // minmax: the exact extremes.
    let dir = setup("norm-minmax", "");
    let r = mpirun(2, &["train", "job.toml", "--set", "data.normalize=\"minmax\""], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let w = dir.join("out/weights.h5");
    let (lo, div) = (read_f64(&w, "normalization/x_shift"), read_f64(&w, "normalization/x_div"));
    for j in 0..D {
        let col: Vec<f64> = x.iter().skip(j).step_by(D).map(|&v| v as f64).collect();
        let (mn, mx) = col.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
        assert_eq!(lo[j], mn, "min {j}");
        assert_eq!(div[j], if mx > mn { mx - mn } else { 1.0 }, "range {j}");
    }
}

/// The directory a test of this file made (scratch's).
fn target_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn r2(pred: &[f32], y: &[f32], k: usize) -> f64 {
    let (mean, var) = reference(y, k);
    let mut total = 0.0;
    for (j, v) in var.iter().enumerate().take(k) {
        let ss: f64 = pred.iter().zip(y).skip(j).step_by(k).map(|(&p, &t)| (p as f64 - t as f64).powi(2)).sum();
        total += 1.0 - ss / (v * (y.len() / k) as f64);
    }
    let _ = mean;
    total / k as f64
}

#[test]
fn normalized_training_predicts_raw_units_and_raw_training_does_not() {
    let _g = mpi_lock();
    let (_, ty) = data(600, 2);
    let mut scores = Vec::new();
    for norm in [true, false] {
        let dir = setup(&format!("norm-r2-{norm}"), "");
        let mut args = vec!["train", "job.toml", "--set", "training.epochs=30", "--set", "training.batch_size=32"];
        if norm {
            args.extend(NORM);
        }
        let r = mpirun(2, &args, &dir, 300);
        assert!(r.ok(), "{}", r.all());
        let p = hvtrain(
            &["predict", "job.toml", "--weights", "out/weights.h5", "--input", "t.h5", "--output", "p.h5"],
            &dir,
            60,
        );
        assert!(p.ok(), "{}", p.all());
        let pred = read_f32(&dir.join("p.h5"), "outputs");
        scores.push(r2(&pred, &ty, K));
    }
    eprintln!("test R² with normalize: {:.4}, without: {:.4}", scores[0], scores[1]);
    // hvtrain's own R², MAE and RMSE (eval's JSON, raw units) against the reference on the
    // saved predictions, and against scikit-learn's where the test python has it.
    let dir = target_dir("norm-r2-true");
    let e = hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5"], &dir, 60);
    assert!(e.ok(), "{}", e.all());
    let j: serde_json::Value = serde_json::from_str(e.stdout.lines().last().unwrap()).unwrap();
    let got = j["test_r2"].as_f64().unwrap();
    assert!((got - scores[0]).abs() < 1e-5, "eval's test_r2 {got}, from the predictions {}", scores[0]);
    let last: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap().lines().last().unwrap())
            .unwrap();
    assert!((last["test_r2"].as_f64().unwrap() - got).abs() < 1e-9, "{last}");
    assert_eq!(last["test_per_output"]["r2"].as_array().unwrap().len(), K, "{last}");
    if let Some(py) = sklearn_python() {
        let code = "import h5py, json, sys\nfrom sklearn.metrics import r2_score, mean_absolute_error, root_mean_squared_error\n\
                    y = h5py.File('t.h5')['y'][:]; p = h5py.File('p.h5')['outputs'][:]\n\
                    print(json.dumps([r2_score(y, p), mean_absolute_error(y, p), root_mean_squared_error(y, p)]))";
        let out = std::process::Command::new(py).args(["-c", code]).current_dir(&dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let sk: Vec<f64> = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        eprintln!(
            "scikit-learn on the saved predictions: r2 {}, mae {}, rmse {}; hvtrain eval: {j}",
            sk[0], sk[1], sk[2]
        );
        assert!((got - sk[0]).abs() < 1e-5, "R²: hvtrain {got}, scikit-learn {}", sk[0]);
        for (key, want) in [("test_mae", sk[1]), ("test_rmse", sk[2])] {
            let v = j[key].as_f64().unwrap();
            assert!((v - want).abs() <= 1e-4 * want, "{key}: hvtrain {v}, scikit-learn {want}");
        }
    }
    assert!(scores[0] > 0.9, "normalized: R² {}", scores[0]);
    assert!(scores[1] < 0.5, "raw units: R² {} (the data should need normalizing)", scores[1]);
}

#[test]
fn the_statistics_travel_in_checkpoints_and_a_stopped_run_resumes_exactly() {
    let _g = mpi_lock();
    let ck = "[checkpoint]\nevery_minutes = 0.0\n";
    let mut args = vec!["train", "job.toml", "--set", "training.epochs=3"];
    args.extend(NORM);
    let clean = setup("norm-resume-clean", ck);
    assert!(mpirun(2, &args, &clean, 120).ok());
    let dir = setup("norm-resume-stopped", ck);
    let stopped = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:500:term")], &args, &dir, 120);
    assert_eq!(stopped.code, Some(75), "{}", stopped.all());
    let ckpt = checkpoints(&dir.join("out")).pop().expect("a stop checkpoint");
    let c = dir.join("out").join(&ckpt);
    assert_eq!(read_f64(&c, "normalization/x_shift"), read_f64(&clean.join("out/weights.h5"), "normalization/x_shift"));
    // Resumed: the checkpoint's statistics, not new ones (the same here anyway),
    // and the log says so by not computing them.
    let mut resume = args.clone();
    resume.extend(["--resume", "auto"]);
    let r = mpirun(2, &resume, &dir, 120);
    assert!(r.ok(), "{}", r.all());
    assert!(!r.all().contains("normalization statistics of"), "recomputed on resume\n{}", r.all());
    for t in ["dense0/weight", "dense2/bias"] {
        assert_eq!(read_f32(&dir.join("out/weights.h5"), t), read_f32(&clean.join("out/weights.h5"), t), "{t}");
    }
    // eval on the checkpoint and on weights.h5 reads the statistics from the file.
    let e = hvtrain(&["eval", "job.toml", "--weights", "out/weights.h5"], &dir, 60);
    assert!(e.ok() && e.stdout.contains("test_loss"), "{}", e.all());
}

#[test]
fn bad_values_name_the_key_or_the_file() {
    let dir = setup("norm-errors", "");
    let r = hvtrain(&["train", "job.toml", "--set", "data.normalize=\"zscore\""], &dir, 30);
    assert!(!r.ok() && r.all().contains("data.normalize"), "{}", r.all());
    let r = hvtrain(
        &[
            "train",
            "job.toml",
            "--set",
            "model.loss=\"softmax_cross_entropy\"",
            "--set",
            "data.normalize_y=\"standard\"",
        ],
        &dir,
        30,
    );
    assert!(!r.ok() && r.all().contains("data.normalize_y"), "{}", r.all());
    let (mut x, y) = data(100, 3);
    x[7 * D + 2] = f32::NAN;
    write(&dir.join("nan.h5"), &x, &y);
    let r = hvtrain(
        &["train", "job.toml", "--set", "data.train=\"nan.h5\"", "--set", "data.normalize=\"standard\""],
        &dir,
        30,
    );
    assert!(!r.ok() && r.all().contains("nan.h5") && r.all().contains("row 7"), "{}", r.all());
}

#[test]
fn tensor_pipeline_and_parameter_servers_normalize_validate_and_report_r2() {
    let _g = mpi_lock();
    for (ranks, sets) in
        [(4, vec!["parallel.tensor=2", "parallel.pipeline=2"]), (3, vec!["distribution.strategy=\"parameter_server\""])]
    {
        let dir = setup(&format!("norm-modes-{ranks}"), "");
        let mut args = vec!["train", "job.toml", "--set", "training.epochs=2", "--set", "data.validation_split=0.2"];
        args.extend(NORM);
        for s in &sets {
            args.extend(["--set", s]);
        }
        let r = mpirun(ranks, &args, &dir, 180);
        assert!(r.ok(), "{sets:?}\n{}", r.all());
        let text = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
        let m: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        for key in ["val_loss", "val_r2", "test_r2", "test_mae"] {
            assert!(m[key].as_f64().is_some_and(f64::is_finite), "{sets:?}: {key} in {m}");
        }
        assert_eq!(read_f64(&dir.join("out/weights.h5"), "normalization/y_div").len(), K, "{sets:?}");
    }
}
