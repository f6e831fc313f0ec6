//! `hvtrain checkpoint average` on real checkpoints and weights files: each parameter of the
//! result is the mean of the inputs' (read here straight from the files, whole checkpoints and
//! the parts of sharded ones alike, with the float64 sum the command documents); a directory
//! gives its newest `--last N` checkpoints of the live branch (not an abandoned one's); the result keeps the normalization and the class
//! names (which checkpoints record, so predict names them from one too) and evaluates; files of another model, a file named twice and an output that is
//! one of the inputs are refused, naming the file, with nothing written.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const LAYERS: [usize; 3] = [6, 16, 3];

/// Training data with class names ("a", "b", "c"), imported from CSV as a user would.
fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(96, 6, 3, 11);
    let mut csv = String::from("f0,f1,f2,f3,f4,f5,label\n");
    for (row, c) in x.chunks(6).zip(&y) {
        let v: Vec<String> = row.iter().map(|v| format!("{v}")).collect();
        csv += &format!("{},{}\n", v.join(","), ["a", "b", "c"][*c as usize]);
    }
    std::fs::write(dir.join("d.csv"), csv).unwrap();
    let r = hvtrain(&["data", "import", "d.csv", "d.h5", "--y", "label"], &dir, 60);
    assert!(r.ok(), "{}", r.all());
    job(
        &dir,
        &LAYERS,
        "d.h5",
        Some("d.h5"),
        "[checkpoint]\nevery_steps = 4\nkeep = 10\n[optimizer]\nkind = \"adam\"\nlr = 0.01\n",
    );
    dir
}

/// Each tensor (layer order: weight, bias) of a checkpoint, whole or in parts, read with
/// `ckpt_stored` (which knows the parts' layout, not hvtrain's reader).
fn tensors(path: &Path) -> Vec<Vec<f32>> {
    let stored = ckpt_stored(path, "params", LAYERS.len() - 1);
    // The stored order is the layers last to first, each weight then bias.
    let mut out = Vec::new();
    let mut at = 0;
    for l in (0..LAYERS.len() - 1).rev() {
        let (w, b) = (LAYERS[l] * LAYERS[l + 1], LAYERS[l + 1]);
        out.push(stored[at..at + w].to_vec());
        out.push(stored[at + w..at + w + b].to_vec());
        at += w + b;
    }
    assert_eq!(at, stored.len());
    // Back to layer order: pairs reversed.
    out.chunks(2).rev().flat_map(|p| p.to_vec()).collect()
}

/// The mean the command computes: float64 sums in the order given, divided, rounded once.
fn mean(inputs: &[Vec<Vec<f32>>]) -> Vec<Vec<f32>> {
    let n = inputs.len() as f64;
    (0..inputs[0].len())
        .map(|t| {
            (0..inputs[0][t].len()).map(|i| (inputs.iter().map(|x| x[t][i] as f64).sum::<f64>() / n) as f32).collect()
        })
        .collect()
}

fn average(dir: &Path, args: &[&str]) -> Run {
    let mut a = vec!["checkpoint", "average"];
    a.extend_from_slice(args);
    hvtrain(&a, dir, 60)
}

#[test]
fn the_average_is_the_mean_of_the_checkpoints_whole_or_in_parts() {
    let _g = mpi_lock();
    let dir = setup("average");
    let r = mpirun(1, &["train", "job.toml", "--set", "data.normalize='standard'"], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let out = dir.join("out");
    let names = checkpoints(&out);
    assert_eq!(names.len(), 6, "{names:?}");

    // The newest three of the run's directory.
    let r = average(&dir, &["out", "--last", "3", "--output", "avg.h5"]);
    assert!(r.ok(), "{}", r.all());
    assert!(r.stderr.contains("averaged 3 files (step 16, step 20, step 24)"), "{}", r.all());
    let inputs: Vec<Vec<Vec<f32>>> = names[3..].iter().map(|n| tensors(&out.join(n))).collect();
    let want = mean(&inputs);
    let got = layer_tensors(&dir.join("avg.h5"), LAYERS.len() - 1);
    assert_eq!(got, want, "the average is not the mean of the newest three checkpoints");
    assert!(max_diff(&got, &inputs[2]) > 1e-4, "the average is the last checkpoint");
    // The normalization and the run's class names (from its weights.h5) are kept.
    for g in ["normalization/x_shift", "normalization/x_div"] {
        assert_eq!(read_f32(&dir.join("avg.h5"), g), read_f32(&out.join("weights.h5"), g), "{g}");
    }
    assert!(r.stderr.contains("class and column names from out/ckpt-step000000016.h5"), "{}", r.all());
    let ev = mpirun(1, &["eval", "job.toml", "--weights", "avg.h5", "--set", "data.normalize='standard'"], &dir, 60);
    assert!(ev.ok(), "{}", ev.all());
    std::fs::write(dir.join("new.csv"), "f0,f1,f2,f3,f4,f5\n0.1,0.2,0.3,0.4,0.5,0.6\n").unwrap();
    let p =
        hvtrain(&["predict", "job.toml", "--weights", "avg.h5", "--input", "new.csv", "--output", "p.csv"], &dir, 60);
    assert!(p.ok(), "{}", p.all());
    let text = std::fs::read_to_string(dir.join("p.csv")).unwrap();
    assert!(text.starts_with("class,p_a,p_b,p_c\n"), "{}", &text[..60.min(text.len())]);
    // A checkpoint records the class names too: predict names the classes from it.
    let ck = format!("out/{}", names[5]);
    let p = hvtrain(&["predict", "job.toml", "--weights", &ck, "--input", "new.csv", "--output", "q.csv"], &dir, 60);
    assert!(p.ok(), "{}", p.all());
    let text = std::fs::read_to_string(dir.join("q.csv")).unwrap();
    assert!(text.starts_with("class,p_a,p_b,p_c\n"), "{}", &text[..60.min(text.len())]);

    // Files named, a weights file among checkpoints: all of them count.
    let (a, b) = (out.join(&names[0]), out.join("weights.h5"));
    let r = average(&dir, &[a.to_str().unwrap(), b.to_str().unwrap(), "--output", "two.h5"]);
    assert!(r.ok(), "{}", r.all());
    let want = mean(&[tensors(&a), layer_tensors(&b, LAYERS.len() - 1)]);
    assert_eq!(layer_tensors(&dir.join("two.h5"), LAYERS.len() - 1), want);

    // Checkpoints in parts (2 ranks, sharded optimizer state): the same mean of their values.
    let r = mpirun(
        2,
        &[
            "train",
            "job.toml",
            "--set",
            "training.batch_size=2",
            "--set",
            "distribution.shard='optimizer'",
            "--set",
            "output.dir='sharded'",
        ],
        &dir,
        120,
    );
    assert!(r.ok(), "{}", r.all());
    assert!(!checkpoint_parts(&dir.join("sharded")).is_empty(), "no checkpoint in parts");
    let sharded = checkpoints(&dir.join("sharded"));
    let r = average(&dir, &["sharded", "--last", "2", "--output", "parts.h5"]);
    assert!(r.ok(), "{}", r.all());
    let inputs: Vec<Vec<Vec<f32>>> =
        sharded[sharded.len() - 2..].iter().map(|n| tensors(&dir.join("sharded").join(n))).collect();
    assert_eq!(layer_tensors(&dir.join("parts.h5"), LAYERS.len() - 1), mean(&inputs));
}

/// After `--resume FILE` from an older checkpoint, the directory still holds the abandoned
/// branch's newer files: a directory's checkpoints are the live run's (as `--resume auto` would
/// continue), not the highest steps of both branches.
#[test]
fn a_directory_gives_the_live_branch_not_an_abandoned_one() {
    let _g = mpi_lock();
    let dir = setup("average-branch");
    let r = mpirun(1, &["train", "job.toml"], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    // Back to step 8, checkpoints every 3 steps: 9, 12, ..., 24 (12 and 24 replace the old
    // branch's); the old branch's 16 and 20 stay.
    let args = ["train", "job.toml", "--resume", "out/ckpt-step000000008.h5", "--set", "checkpoint.every_steps=3"];
    let r = mpirun(1, &args, &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let names = checkpoints(&dir.join("out"));
    assert!(names.contains(&"ckpt-step000000020.h5".to_string()), "{names:?}");
    let r = average(&dir, &["out", "--last", "3", "--output", "avg.h5"]);
    assert!(r.ok(), "{}", r.all());
    assert!(r.stderr.contains("averaged 3 files (step 18, step 21, step 24)"), "{}", r.all());
    assert!(r.stderr.contains("2 checkpoint(s) of an abandoned branch left out"), "{}", r.all());
}

#[test]
fn files_that_do_not_average_are_refused_naming_them() {
    let _g = mpi_lock();
    let dir = setup("average-refused");
    // The same model, a wider one, and the same model trained on standardized rows.
    for (out, set) in
        [("out", "model.layers=[6, 16, 3]"), ("wide", "model.layers=[6, 24, 3]"), ("std", "data.normalize='standard'")]
    {
        let o = format!("output.dir='{out}'");
        let r = mpirun(1, &["train", "job.toml", "--set", &o, "--set", set], &dir, 120);
        assert!(r.ok(), "{}", r.all());
    }
    let look = || ["", "out", "wide", "std"].map(|d| snapshot(&dir.join(d)));
    let before = look();
    let ck = |out: &str| dir.join(out).join("ckpt-step000000024.h5").to_str().unwrap().to_string();
    let (a, w, s) = (ck("out"), ck("wide"), ck("std"));
    let refused = |args: &[&str], says: &[&str]| {
        let r = average(&dir, args);
        assert_eq!(r.code, Some(1), "{args:?}\n{}", r.all());
        for m in says {
            assert!(r.stderr.contains(m), "{args:?}: expected {m:?}\n{}", r.all());
        }
    };
    refused(&[&a, &w, "--output", "x.h5"], &[&w, "attribute layers"]);
    refused(&[&a, &s, "--output", "x.h5"], &[&s, "normalization: differs"]);
    refused(&[&a, &a, "--output", "x.h5"], &["is given twice"]);
    refused(&["out", "--output", &a], &["is one of the files averaged"]);
    refused(&[&a, "--output", "x.h5"], &["an average needs two files or more"]);
    refused(&[&a, &s, "--last", "2", "--output", "x.h5"], &["--last: takes the newest checkpoints of a directory"]);
    assert!(look() == before, "a refused average changed or left a file");
}
