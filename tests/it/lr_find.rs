//! `hvtrain lr-find` (the learning-rate range test) under a real `mpirun` on real HDF5: the
//! rate grows geometrically from --min to --max, each step's loss is the mean over every
//! rank's rows (the first step's is the same on 1 rank and on 2 at the same global batch),
//! the test stops where the loss diverges (or a loss is not finite) with exit 0, suggests a
//! rate and draws it (lr_find.png), writes no weights or checkpoints; bad flags and parameter servers are refused.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(512, 6, 3, 5);
    write_classes(&dir.join("d.h5"), &x, 6, &y);
    job(&dir, &[6, 16, 3], "d.h5", Some("d.h5"), "[optimizer]\nkind = \"sgd\"\nmomentum = 0.9\nlr = 0.1\n");
    dir
}

/// lr_find.csv's rows: (step, lr, loss, smoothed).
fn curve(dir: &Path) -> Vec<(usize, f64, f64, f64)> {
    let text = std::fs::read_to_string(dir.join("out/lr-find/lr_find.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,lr,loss,smoothed_loss"));
    lines
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            (v[0].parse().unwrap(), v[1].parse().unwrap(), v[2].parse().unwrap(), v[3].parse().unwrap())
        })
        .collect()
}

#[test]
fn the_rate_grows_geometrically_and_the_loss_is_every_ranks_mean() {
    let _g = common::mpi_lock();
    let dir = setup("lr_find");
    let find = |ranks: usize, batch: &str, args: &[&str]| {
        let mut a = vec!["lr-find", "job.toml", "--set", batch];
        a.extend(args);
        let r = mpirun(ranks, &a, &dir, 120);
        assert!(r.ok(), "{}", r.all());
        r
    };
    // Two ranks of 8 rows a step, 40 steps from 1e-3 to 1 (no divergence for this model).
    let r = find(2, "training.batch_size=8", &["--min", "1e-3", "--max", "1", "--steps", "40"]);
    let c = curve(&dir);
    assert_eq!(c.len(), 40, "{}", r.all());
    assert!(r.stderr.contains("lr-find: 40 steps done"), "{}", r.all());
    assert_eq!(c[0].1, 1e-3);
    assert!((c[39].1 - 1.0).abs() < 1e-12, "the last step at --max: {}", c[39].1);
    let ratio = 1000f64.powf(1.0 / 39.0);
    assert!(c.windows(2).all(|w| (w[1].1 / w[0].1 - ratio).abs() < 1e-9), "not geometric");
    assert!(r.stderr.contains("lr-find: suggested optimizer.lr = "), "{}", r.all());
    // The picture: a whole PNG with the smoothed curve (blue) and the suggested rate (a red
    // vertical line, at least most of the plot's height) drawn.
    let png = crate::plot::read_png(&dir.join("out/lr-find/lr_find.png"));
    assert_eq!((png.width, png.height), (1000, 640));
    assert!(png.colours() > 20, "blank? {} colours", png.colours());
    let blue = png.count([31, 119, 180]);
    let red = png.count([214, 39, 40]);
    assert!(blue > 800, "the smoothed curve is missing: {blue} pixels");
    assert!(red > 800, "the suggested rate's line is missing: {red} pixels");
    assert!(r.stderr.contains("lr-find: the curve in "), "{}", r.all());
    let files: Vec<String> = std::fs::read_dir(dir.join("out/lr-find"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!files.iter().any(|f| f.ends_with(".h5")), "weights or checkpoints written: {files:?}");
    // Its record is lr_find.csv: no metrics.jsonl without an epoch in it, and the schedule line
    // counts the test's steps, not the epochs that would hold them.
    assert!(!files.iter().any(|f| f == "metrics.jsonl"), "an empty metrics.jsonl: {files:?}");
    assert!(r.stderr.contains("lr-find: up to 40 steps (epochs of "), "{}", r.all());
    assert!(!r.stderr.contains(" epochs of "), "{}", r.all());
    assert!(!dir.join("out/weights.h5").exists());
    // One rank of 16 rows: the same global batch, so the same first step (its loss is every
    // row's mean, not one rank's).
    let one = find(1, "training.batch_size=16", &["--min", "1e-3", "--max", "1", "--steps", "40"]);
    let c1 = curve(&dir);
    assert!(
        (c1[0].2 - c[0].2).abs() < 1e-6 * c[0].2,
        "step 1's loss: 1 rank {}, 2 ranks {}\n{}",
        c1[0].2,
        c[0].2,
        one.all()
    );
    // Up to a rate that blows the loss up: the test stops early, exit 0.
    let r = find(2, "training.batch_size=8", &["--min", "1e-3", "--max", "1e6", "--steps", "80"]);
    let c = curve(&dir);
    assert!(c.len() < 80, "never diverged: {}", r.all());
    assert!(r.stderr.contains("passed 4× its lowest") || r.stderr.contains("was not finite"), "{}", r.all());
    // Rates that overflow the loss: a non-finite loss ends the test, not the job (a training
    // would stop with an error there).
    let r = find(2, "optimizer.momentum=0.0", &["--min", "1e2", "--max", "1e30", "--steps", "30"]);
    assert!(r.stderr.contains("lr-find: the loss was not finite at step"), "{}", r.all());
    assert!(curve(&dir).iter().all(|p| p.2.is_finite()), "the curve holds the finite steps only");
}

#[test]
fn bad_flags_and_parameter_servers_are_refused() {
    let _g = common::mpi_lock();
    let dir = setup("lr_find_bad");
    for (args, says) in [
        (vec!["--min", "0"], "--min"),
        (vec!["--min", "1e-2", "--max", "1e-3"], "--max"),
        (vec!["--steps", "5"], "--steps"),
        (
            vec!["--set", "distribution.strategy=\"parameter_server\"", "--set", "distribution.servers=1"],
            "distribution.strategy",
        ),
    ] {
        let mut a = vec!["lr-find", "job.toml"];
        a.extend(&args);
        let r = mpirun(2, &a, &dir, 60);
        assert!(!r.ok() && r.stderr.contains(says), "{args:?}: {}", r.all());
    }
}
