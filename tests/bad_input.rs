//! Bad inputs under a real `mpirun -n 2`: every case must exit non-zero, quickly (no rank
//! left waiting in a collective), with one stderr line that names the rank, the file and the
//! field (dataset name or dotted config key).

mod common;

use common::{hvtrain, job, mpirun, mpirun_mpmd, scratch, write_classes, Run};
use std::path::Path;
use std::time::Duration;

/// Samples in the default data file; with 2 ranks each gets 20 rows (5 batches of 4).
const N: usize = 40;
/// Features per sample in the default data file.
const D: usize = 5;
/// Model used by most cases: 5 inputs, 3 classes.
const LAYERS: &[usize] = &[5, 8, 3];

/// Deterministic data: N rows of D features, labels 0..3.
fn data() -> (Vec<f32>, Vec<i32>) {
    let x = (0..N * D).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
    let y = (0..N).map(|i| (i % 3) as i32).collect();
    (x, y)
}

/// A scratch dir holding a good `d.h5` and a job file training on it.
fn setup(name: &str, extra: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = data();
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, LAYERS, "d.h5", None, extra);
    dir
}

/// Assert that the job failed fast with an error line naming `rank` (any rank when None)
/// and containing every one of `needles`; returns that line.
fn assert_fails(run: &Run, rank: Option<usize>, needles: &[&str]) -> String {
    assert!(!run.ok(), "expected a failure, the job succeeded:\n{}", run.all());
    assert!(
        run.elapsed < Duration::from_secs(30),
        "the job took {:?}: a rank was left hanging (or the timeout killed it)\n{}",
        run.elapsed,
        run.all()
    );
    assert!(!matches!(run.code, Some(124) | Some(137)), "the job was killed by the timeout\n{}", run.all());
    let tag = match rank {
        Some(r) => format!("error on rank {r} "),
        None => "error on rank ".to_string(),
    };
    // main.rs writes each error line in one call, so even when every rank fails at once
    // each line arrives whole.
    let line = run.stderr.lines().find(|l| l.contains(&tag) && needles.iter().all(|n| l.contains(n)));
    assert!(line.is_some(), "no stderr line contains {tag:?} and all of {needles:?}\n{}", run.all());
    line.unwrap().to_string()
}

fn train2(dir: &Path, set: &[&str]) -> Run {
    let mut args = vec!["train", "job.toml"];
    for s in set {
        args.push("--set");
        args.push(s);
    }
    mpirun(2, &args, dir, 60)
}

#[test]
fn missing_train_file() {
    let _g = common::mpi_lock();
    let dir = scratch("bad_missing_file");
    job(&dir, LAYERS, "missing.h5", None, "");
    let run = train2(&dir, &[]);
    assert_fails(&run, None, &["missing.h5", "no such file", "data.train"]);
}

#[test]
fn train_file_is_not_hdf5() {
    let _g = common::mpi_lock();
    let dir = scratch("bad_not_hdf5");
    std::fs::write(dir.join("notes.h5"), "this is plain text, not HDF5\n".repeat(20)).unwrap();
    job(&dir, LAYERS, "notes.h5", None, "");
    let run = train2(&dir, &[]);
    assert_fails(&run, None, &["notes.h5", "HDF5"]);
}

#[test]
fn dataset_absent() {
    let _g = common::mpi_lock();
    let dir = setup("bad_dataset_absent", "");
    let run = train2(&dir, &["data.x_dataset=features"]);
    assert_fails(&run, None, &["d.h5", "features", "dataset not found", "data.x_dataset"]);
}

#[test]
fn x_y_length_mismatch() {
    let _g = common::mpi_lock();
    let dir = scratch("bad_xy_mismatch");
    let (x, y) = data();
    let f = hdf5::File::create(dir.join("d.h5")).unwrap();
    f.new_dataset_builder().with_data(ndarray::ArrayView2::from_shape((N, D), &x).unwrap()).create("x").unwrap();
    f.new_dataset_builder().with_data(ndarray::ArrayView1::from(&y[..N - 1])).create("y").unwrap();
    drop(f);
    job(&dir, LAYERS, "d.h5", None, "");
    let run = train2(&dir, &[]);
    assert_fails(&run, None, &["d.h5", "has 39 rows but x has 40"]);
}

#[test]
fn feature_width_does_not_match_model() {
    let _g = common::mpi_lock();
    let dir = setup("bad_width", "");
    let run = train2(&dir, &["model.layers=[6, 8, 3]"]);
    assert_fails(&run, None, &["d.h5", "has 5 features per sample", "model.layers"]);
}

#[test]
fn label_out_of_range() {
    let _g = common::mpi_lock();
    // A label equal to the number of classes, in rank 1's half of the file (rows 20..40):
    // only rank 1 sees it, rank 0 goes on into the first collective.
    let dir = scratch("bad_label_high");
    let (x, mut y) = data();
    y[30] = 3;
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, LAYERS, "d.h5", None, "");
    let run = train2(&dir, &[]);
    assert_fails(&run, Some(1), &["d.h5", ": y:", "label 3", "row 30"]);

    // A negative label in rank 0's half.
    let dir = scratch("bad_label_negative");
    let (x, mut y) = data();
    y[4] = -1;
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, LAYERS, "d.h5", None, "");
    let run = train2(&dir, &[]);
    assert_fails(&run, Some(0), &["d.h5", ": y:", "label -1", "row 4"]);
}

#[test]
fn nan_in_x_stops_the_job_from_the_loader() {
    let _g = common::mpi_lock();
    // The features are only read by the background loader during training, so the error
    // surfaces mid-epoch on rank 1 while rank 0 waits in an all-reduce.
    let dir = scratch("bad_nan");
    let (mut x, y) = data();
    x[25 * D + 2] = f32::NAN;
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, LAYERS, "d.h5", None, "");
    let run = train2(&dir, &["training.epochs=3"]);
    assert_fails(&run, Some(1), &["d.h5", ": x:", "NaN", "row 25", "column 2"]);
}

#[test]
fn bad_config_values() {
    let _g = common::mpi_lock();
    let dir = setup("bad_config", "");
    let cases: &[(&str, &[&str])] = &[
        ("optimizer.lr=0", &["job.toml", "optimizer.lr", "must be a positive number"]),
        ("training.batch_size=0", &["job.toml", "training.batch_size", "must be at least 1"]),
        ("model.activation=swish", &["job.toml", "model.activation", "unknown variant `swish`"]),
        ("training.epochz=3", &["job.toml", "training.epochz", "unknown field `epochz`"]),
        ("model.layers=[5,0,3]", &["job.toml", "model.layers", "width 1 is 0"]),
    ];
    for (set, needles) in cases {
        eprintln!("case --set {set}");
        let run = train2(&dir, &[set]);
        assert_fails(&run, None, needles);
    }
}

#[test]
fn output_dir_cannot_be_created() {
    let _g = common::mpi_lock();
    let dir = setup("bad_output_dir", "");
    std::fs::write(dir.join("blocker"), "a regular file").unwrap();
    let run = train2(&dir, &["output.dir=blocker/out"]);
    assert_fails(&run, Some(0), &["blocker/out", "output.dir"]);
}

#[test]
fn per_rank_file_missing_on_one_rank() {
    let _g = common::mpi_lock();
    let dir = scratch("bad_per_rank");
    let (x, y) = data();
    write_classes(&dir.join("d-0.h5"), &x, D, &y);
    job(&dir, LAYERS, "d-{rank}.h5", None, "");
    let run = train2(&dir, &[]);
    assert_fails(&run, Some(1), &["d-1.h5", "no such file", "data.train"]);
}

#[test]
fn ranks_disagree_about_the_config() {
    let _g = common::mpi_lock();
    let dir = setup("bad_disagree", "");
    let run =
        mpirun_mpmd(&[vec!["train", "job.toml"], vec!["train", "job.toml", "--set", "optimizer.lr=0.5"]], &dir, 60);
    assert_fails(&run, None, &["ranks disagree", "differs", "[1]"]);
}

#[test]
fn singleton_missing_file() {
    let _g = common::mpi_lock(); // a singleton still starts MPI
    let dir = scratch("bad_singleton_missing");
    job(&dir, LAYERS, "missing.h5", None, "");
    let run = hvtrain(&["train", "job.toml"], &dir, 60);
    assert_eq!(run.code, Some(1), "{}", run.all());
    assert_fails(&run, Some(0), &["missing.h5", "no such file", "data.train"]);
}

/// `device = "cuda"` where no GPU or driver is present: a clear error, never a panic.
#[test]
fn cuda_without_a_gpu_is_a_clear_error() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let _g = common::mpi_lock();
    let dir = setup("bad_cuda", "");
    let run = train2(&dir, &["training.device=cuda"]);
    let line = assert_fails(&run, None, &["device", "training.device = \"cuda\""]);
    assert!(!run.stderr.contains("panicked"), "{}", run.all());
    assert!(line.contains("use device = \"cpu\""), "{line}");
}
