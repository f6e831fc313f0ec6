//! `data.sample_weight` (Keras' `sample_weight` in `fit`) under a real `mpirun -n 2` on real
//! HDF5 files: a weight of 2 on every row is plain SGD's step of twice the learning rate, bit
//! for bit (classes on the all-reduce path, a 2-stage pipeline whose last stage holds the loss,
//! parameter servers; squared error); per-row weights equal to their rows' class weights train
//! exactly as `model.class_weights` (so each row met its own weight through the shuffle, the
//! split over ranks and the loader); and bad weights stop the job naming the file, the dataset
//! and the row. Validation and test loss are weighted where their files hold the weights (as
//! Keras' `val_loss` and `evaluate`), in training and in `hvtrain eval`, accuracy not; a file
//! without them is evaluated unweighted, and `{rank}` files that disagree are an error.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

/// 64 rows: every step holds 8 or 16 rows, so the gradient's 1/rows is a power of two and
/// weighing a row before or after it gives the same bits.
const N: usize = 64;
const D: usize = 6;
const LAYERS: &[usize] = &[6, 8, 3];
const CLASS_W: [f32; 3] = [0.5, 4.0, 1.25];

/// `d.h5`: x, class labels y, and the weight datasets `twos` (2 on every row), `by_class` (each
/// row its class's weight in CLASS_W), `neg` (one negative), `zeros` (all 0); `r.h5`: x,
/// regression targets [N, 3] and `twos`.
fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(N, D, 3, 31);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let f = hdf5::File::open_rw(dir.join("d.h5")).unwrap();
    write_dataset(&f, "twos", &[2.0f32; N], &[N]);
    let by_class: Vec<f64> = y.iter().map(|&c| CLASS_W[c as usize] as f64).collect();
    write_dataset(&f, "by_class", &by_class, &[N, 1]);
    let mut neg = vec![1.0f32; N];
    neg[37] = -0.25;
    write_dataset(&f, "neg", &neg, &[N]);
    write_dataset(&f, "zeros", &[0u8; N], &[N]);
    let r = hdf5::File::create(dir.join("r.h5")).unwrap();
    write_dataset(&r, "x", &x, &[N, D]);
    let t: Vec<f32> = (0..N * 3).map(|i| x[i % (N * D)] * 0.5 + (i % 3) as f32).collect();
    write_dataset(&r, "y", &t, &[N, 3]);
    write_dataset(&r, "twos", &[2.0f32; N], &[N]);
    job(&dir, LAYERS, "d.h5", None, "[optimizer]\nkind = \"sgd\"\nmomentum = 0.0\nlr = 0.1\n");
    dir
}

fn run(dir: &Path, out: &str, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    train_weights(dir, out, 2, LAYERS.len() - 1, &[], &["training.epochs=2"], sets)
}

#[test]
fn uniform_sample_weights_are_a_larger_step_in_every_mode() {
    let _g = common::mpi_lock();
    let dir = setup("sample_weights");
    let regression = ["data.train=\"r.h5\"", "model.loss=\"mse\""];
    for (mode, sets) in [
        ("allreduce", &[][..]),
        ("pipeline", &["parallel.pipeline=2"][..]),
        ("ps", &["distribution.strategy=\"parameter_server\"", "distribution.servers=1", "training.batch_size=8"][..]),
        ("mse", &regression[..]),
    ] {
        let (plain, log) = run(&dir, &format!("{mode}_plain"), sets);
        assert!(!log.contains("sample weights"), "{mode}: {log}");
        let mut doubled_sets = sets.to_vec();
        doubled_sets.extend(["optimizer.lr=0.05", "data.sample_weight=\"twos\""]);
        let (doubled, log) = run(&dir, &format!("{mode}_doubled"), &doubled_sets);
        assert!(log.contains("sample weights: dataset twos, 64 training rows, from 2 to 2 (mean 2)"), "{mode}: {log}");
        assert_eq!(doubled, plain, "{mode}: sample weights of 2 with lr 0.05 must be lr 0.1 unweighted");
    }
}

#[test]
fn per_row_weights_of_the_class_weights_train_as_class_weights() {
    let _g = common::mpi_lock();
    let dir = setup("sample_weights_rows");
    let (plain, _) = run(&dir, "plain", &[]);
    let (by_row, log) = run(&dir, "by_row", &["data.sample_weight=\"by_class\""]);
    assert!(log.contains("sample weights: dataset by_class, 64 training rows, from 0.5 to 4"), "{log}");
    let (by_class, _) = run(&dir, "by_class", &["model.class_weights=[0.5, 4.0, 1.25]"]);
    assert_eq!(by_row, by_class, "each row weighed by its class's weight must be model.class_weights");
    assert!(max_diff(&by_row, &plain) > 1e-4, "the weights changed nothing");
}

#[test]
fn bad_sample_weights_stop_the_job_naming_file_and_row() {
    let _g = common::mpi_lock();
    let dir = setup("sample_weights_bad");
    for (set, says) in [
        ("data.sample_weight=\"w\"", "d.h5: w: dataset not found (the file has: [by_class, neg, twos, x, y, zeros])"),
        ("data.sample_weight=\"neg\"", "d.h5: neg: sample weight -0.25 at row 37 is negative"),
        ("data.sample_weight=\"zeros\"", "every sample weight of the 64 training rows is 0"),
        ("data.sample_weight=\"y\"", "`data.sample_weight`: must name a dataset of its own"),
    ] {
        let o = "output.dir=\"bad\"";
        let r = mpirun(2, &["train", "job.toml", "--set", o, "--set", set], &dir, 60);
        assert!(!r.ok(), "{set}: must fail\n{}", r.all());
        assert!(r.stderr.contains(says), "{set}:\n{}", r.all());
        assert!(!dir.join("bad/weights.h5").exists(), "{set}: wrote weights");
    }
}

/// The numbers of the epochs' `key` in `dir/out/metrics.jsonl`.
fn per_epoch(dir: &Path, out: &str, key: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join(out).join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    rows.iter().map(|r| r[key].as_f64().unwrap_or_else(|| panic!("{key} in {r}"))).collect()
}

#[test]
fn validation_and_test_loss_are_weighted_where_their_files_hold_the_weights() {
    let _g = common::mpi_lock();
    let dir = setup("sample_weights_eval");
    // t.h5: d.h5's rows without any weights; u-0.h5 holds `twos`, u-1.h5 does not.
    let (x, y) = synthetic(N, D, 3, 31);
    write_classes(&dir.join("t.h5"), &x, D, &y);
    write_classes(&dir.join("u-0.h5"), &x[..32 * D], D, &y[..32]);
    write_classes(&dir.join("u-1.h5"), &x[32 * D..], D, &y[32..]);
    let f = hdf5::File::open_rw(dir.join("u-0.h5")).unwrap();
    write_dataset(&f, "twos", &[2.0f32; 32], &[32]);
    drop(f);
    let split = ["data.validation_split=0.25", "data.test=\"d.h5\""];
    let (plain, _) = run(&dir, "plain", &split);
    let mut sets = split.to_vec();
    sets.extend(["optimizer.lr=0.05", "data.sample_weight=\"twos\""]);
    let (doubled, log) = run(&dir, "doubled", &sets);
    assert_eq!(doubled, plain, "sample weights of 2 at lr 0.05 must train as lr 0.1 unweighted");
    assert!(log.contains("data.validation_split: the loss weighted by the sample weights in twos"), "{log}");
    assert!(log.contains("data.test: the loss weighted by the sample weights in twos"), "{log}");
    // Weights of 2 double each row's loss: the weighted losses are twice the plain ones, to
    // the bit; accuracy is the same.
    for key in ["val_loss", "test_loss"] {
        let (p, w) = (per_epoch(&dir, "plain", key), per_epoch(&dir, "doubled", key));
        assert_eq!(w, p.iter().map(|l| 2.0 * l).collect::<Vec<_>>(), "{key}: weighted by 2 must be twice unweighted");
    }
    for key in ["val_accuracy", "test_accuracy"] {
        assert_eq!(per_epoch(&dir, "doubled", key), per_epoch(&dir, "plain", key), "{key} is not weighted");
    }
    // hvtrain eval weighs the test loss so too.
    let eval = |sets: &[&str]| {
        let mut a = vec!["eval", "job.toml", "--weights", "plain/weights.h5", "--set", "data.test=\"d.h5\""];
        for s in sets {
            a.extend(["--set", s]);
        }
        let r = mpirun(2, &a, &dir, 60);
        assert!(r.ok(), "{}", r.all());
        let j: serde_json::Value = serde_json::from_str(r.stdout.lines().last().unwrap()).unwrap();
        j["test_loss"].as_f64().unwrap()
    };
    assert_eq!(eval(&["data.sample_weight=\"twos\""]), 2.0 * eval(&[]), "hvtrain eval: test_loss weighted by 2");

    // A test file without the weights: evaluated unweighted, and the log says so.
    let mut sets = vec!["optimizer.lr=0.05", "data.sample_weight=\"twos\"", "data.test=\"t.h5\""];
    let (_, log) = run(&dir, "unweighted_test", &sets);
    assert!(log.contains("data.test: t.h5 holds no dataset twos, so its loss is not weighted"), "{log}");
    let (_, _) = run(&dir, "plain_t", &["data.test=\"t.h5\""]);
    assert_eq!(per_epoch(&dir, "unweighted_test", "test_loss"), per_epoch(&dir, "plain_t", "test_loss"));
    // {rank} files of which one holds them and one does not: the job ends naming the other.
    sets[2] = "data.test=\"u-{rank}.h5\"";
    let mut a = vec!["train", "job.toml", "--set", "output.dir=\"bad\""];
    for s in &sets {
        a.extend(["--set", s]);
    }
    let r = mpirun(2, &a, &dir, 60);
    assert!(
        !r.ok() && r.stderr.contains("u-1.h5: twos: dataset not found, though 1 other file(s) of data.test hold it"),
        "{}",
        r.all()
    );
}
