//! Bad inputs under a real `mpirun -n 2`: every case must exit non-zero, quickly (no rank
//! left waiting in a collective), with one stderr line that names the rank, the file and the
//! field (dataset name or dotted config key).

use crate::common;

use common::{hvtrain, job, mpirun, mpirun_mpmd, scratch, write_classes, Run};
use std::path::{Path, PathBuf};
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
        ("optimizer.lr=0", &["job.toml", "optimizer.lr", "must be greater than 0 and at most 1e30, got 0"]),
        ("training.batch_size=0", &["job.toml", "training.batch_size", "must be at least 1"]),
        ("model.activation=mish", &["job.toml", "model.activation", "unknown variant `mish`"]),
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

/// A `{rank}` template that matches no file (numbered files are counted from 0; fewer files
/// than ranks is fine: every rank reads from all of them).
#[test]
fn per_rank_files_missing() {
    let _g = common::mpi_lock();
    let dir = scratch("bad_per_rank");
    let (x, y) = data();
    write_classes(&dir.join("d-1.h5"), &x, D, &y);
    job(&dir, LAYERS, "d-{rank}.h5", None, "");
    let run = train2(&dir, &[]);
    assert_fails(&run, None, &["d-0.h5", "no such file", "data.train", "matches no file"]);
}

#[test]
fn ranks_disagree_about_the_config() {
    let _g = common::mpi_lock();
    let dir = setup("bad_disagree", "");
    let run =
        mpirun_mpmd(&[vec!["train", "job.toml"], vec!["train", "job.toml", "--set", "optimizer.lr=0.5"]], &dir, 60);
    assert_fails(&run, None, &["ranks disagree", "rank 1 (job file job.toml) at optimizer.lr (0.01 vs 0.5)"]);
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

// ---------------------------------------------------------------------------------------
// The rest of the catalogue (docs/errors.md lists every case with the message it prints).
// ---------------------------------------------------------------------------------------

/// Write `x` and `y` of any types and shapes to `path`.
fn write_xy<X: hdf5::H5Type, Y: hdf5::H5Type>(path: &Path, x: &[X], xs: &[usize], y: &[Y], ys: &[usize]) {
    let f = hdf5::File::create(path).unwrap();
    common::write_dataset(&f, "x", x, xs);
    common::write_dataset(&f, "y", y, ys);
}

/// A scratch dir whose `d.h5` holds the given x and y, and the default job file.
fn setup_xy<X: hdf5::H5Type, Y: hdf5::H5Type>(name: &str, x: &[X], xs: &[usize], y: &[Y], ys: &[usize]) -> PathBuf {
    let dir = scratch(name);
    write_xy(&dir.join("d.h5"), x, xs, y, ys);
    job(&dir, LAYERS, "d.h5", None, "");
    dir
}

/// Print the line the user sees, so that a failing run shows it (and docs/errors.md can
/// quote it).
fn show(case: &str, line: &str) {
    eprintln!("[{case}] {line}");
}

#[test]
fn truncated_hdf5_file() {
    let _g = common::mpi_lock();
    let dir = setup("bad_truncated", "");
    let bytes = std::fs::read(dir.join("d.h5")).unwrap();
    std::fs::write(dir.join("d.h5"), &bytes[..bytes.len() / 2]).unwrap();
    let run = train2(&dir, &[]);
    let line = assert_fails(&run, None, &["d.h5", "data.train", "cannot open as HDF5"]);
    show("truncated", &line);
}

#[test]
fn corrupted_hdf5_file() {
    let _g = common::mpi_lock();
    // Bytes in the middle of the file (HDF5 metadata in a file this small) overwritten.
    let dir = setup("bad_corrupted", "");
    let mut bytes = std::fs::read(dir.join("d.h5")).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid - 64..mid + 64].fill(0xff);
    std::fs::write(dir.join("d.h5"), &bytes).unwrap();
    let run = train2(&dir, &["training.epochs=2"]);
    let line = assert_fails(&run, None, &["d.h5"]);
    assert!(line.contains("data d.h5: ") || line.contains("hdf5 d.h5: "), "{line}");
    show("corrupted metadata", &line);

    // The last bytes (the raw data of y, written last) overwritten with 0xff: labels of -1.
    let dir = setup("bad_corrupted_tail", "");
    let mut bytes = std::fs::read(dir.join("d.h5")).unwrap();
    let n = bytes.len();
    bytes[n - 8..].fill(0xff);
    std::fs::write(dir.join("d.h5"), &bytes).unwrap();
    let run = train2(&dir, &[]);
    let line = assert_fails(&run, Some(1), &["d.h5", ": y:", "label -1", "row 38"]);
    show("corrupted data", &line);
}

#[test]
fn x_of_strings_or_compounds() {
    let _g = common::mpi_lock();
    // Any integer or float type is read (tests/it/data_types.rs); text and records are not.
    let (_, y) = data();
    let s: Vec<hdf5::types::FixedAscii<4>> =
        (0..N * D).map(|_| hdf5::types::FixedAscii::from_ascii(b"0.5").unwrap()).collect();
    let dir = setup_xy("bad_x_string", &s, &[N, D], &y, &[N]);
    let run = train2(&dir, &[]);
    let line = assert_fails(&run, None, &["d.h5", ": x:", "element type string (len 4) is not supported", "integers"]);
    show("x strings", &line);

    #[derive(hdf5::H5Type, Clone, Copy)]
    #[repr(C)]
    struct Pixel {
        v: u8,
        alpha: u8,
    }
    let c = vec![Pixel { v: 1, alpha: 255 }; N * D];
    let dir = setup_xy("bad_x_compound", &c, &[N, D], &y, &[N]);
    let run = train2(&dir, &[]);
    let line = assert_fails(&run, None, &["d.h5", ": x:", "element type compound (2 fields) is not supported"]);
    show("x compound", &line);

    // Labels as text.
    let (x, _) = data();
    let dir = setup_xy("bad_y_string", &x, &[N, D], &s[..N], &[N]);
    let run = train2(&dir, &[]);
    let line = assert_fails(
        &run,
        None,
        &["d.h5", ": y:", "element type string (len 4) is not supported", "class labels must be numbers"],
    );
    show("y strings", &line);
}

#[test]
fn x_of_rank_one() {
    let _g = common::mpi_lock();
    let (x, y) = data();
    let dir = setup_xy("bad_x_1d", &x, &[N * D], &y, &[N]);
    let run = train2(&dir, &[]);
    let line = assert_fails(&run, None, &["d.h5", ": x:", "must be a 2-D array", "[200] of float32"]);
    show("x 1-D", &line);
}

#[test]
fn y_of_rank_two_for_classification() {
    let _g = common::mpi_lock();
    let (x, y) = data();
    let y2: Vec<i32> = y.iter().flat_map(|&c| [c, 0]).collect();
    let dir = setup_xy("bad_y_2d", &x, &[N, D], &y2, &[N, 2]);
    let run = train2(&dir, &[]);
    let line = assert_fails(
        &run,
        None,
        &["d.h5", ": y:", "needs class labels [samples] or [samples, 1]", "[samples, 3] (one-hot", "[40, 2]"],
    );
    show("y 2-D", &line);
}

#[test]
fn inf_in_x() {
    let _g = common::mpi_lock();
    // +inf in rank 0's half, -inf in rank 1's.
    for (row, v, rank, name) in [(3, f32::INFINITY, 0, "inf"), (33, f32::NEG_INFINITY, 1, "-inf")] {
        let dir = scratch("bad_inf");
        let (mut x, y) = data();
        x[row * D + 1] = v;
        write_classes(&dir.join("d.h5"), &x, D, &y);
        job(&dir, LAYERS, "d.h5", None, "");
        let run = train2(&dir, &["training.epochs=3"]);
        let row_s = format!("row {row}");
        let value = format!("value {name} at");
        let line = assert_fails(&run, Some(rank), &["d.h5", ": x:", &value, &row_s, "column 1"]);
        show("inf in x", &line);
    }
}

#[test]
fn nan_in_y_for_mse() {
    let _g = common::mpi_lock();
    let (x, _) = data();
    let mut y: Vec<f32> = (0..N * 2).map(|i| i as f32 / 10.0).collect();
    y[27 * 2 + 1] = f32::NAN;
    let dir = scratch("bad_nan_y");
    write_xy(&dir.join("d.h5"), &x, &[N, D], &y, &[N, 2]);
    job(&dir, &[5, 8, 2], "d.h5", None, "");
    let run = train2(&dir, &["model.loss=mse"]);
    let line = assert_fails(&run, Some(1), &["d.h5", ": y:", "non-finite target NaN", "row 27"]);
    show("nan in y", &line);
}

#[test]
fn empty_shard() {
    let _g = common::mpi_lock();
    // A file with no rows at all: every rank fails.
    let x: Vec<f32> = Vec::new();
    let y: Vec<i32> = Vec::new();
    let dir = setup_xy("bad_empty", &x, &[0, D], &y, &[0]);
    let run = train2(&dir, &[]);
    let line = assert_fails(&run, None, &["d.h5", ": x:", "gets no samples", "0 rows"]);
    show("empty file", &line);

    // One of the `{rank}` files is empty: named (by whichever rank reports first).
    let dir = scratch("bad_empty_rank");
    let (x, y) = data();
    write_classes(&dir.join("d-0.h5"), &x, D, &y);
    write_xy(&dir.join("d-1.h5"), &Vec::<f32>::new(), &[0, D], &Vec::<i32>::new(), &[0]);
    job(&dir, LAYERS, "d-{rank}.h5", None, "");
    let run = train2(&dir, &[]);
    let line = assert_fails(&run, None, &["d-1.h5", ": x:", "gets no samples", "0 rows"]);
    show("empty per-rank file", &line);
}

#[test]
fn more_ranks_than_samples() {
    let _g = common::mpi_lock();
    let (x, y) = data();
    let dir = setup_xy("bad_few_rows", &x[..3 * D], &[3, D], &y[..3], &[3]);
    let run = mpirun(4, &["train", "job.toml"], &dir, 60);
    let line = assert_fails(&run, None, &["d.h5", "gets no samples", "3 rows for 4 ranks"]);
    show("more ranks than samples", &line);
}

#[test]
fn ranks_started_with_different_job_files() {
    let _g = common::mpi_lock();
    let dir = setup("bad_two_job_files", "");
    let a = std::fs::read_to_string(dir.join("job.toml")).unwrap();
    std::fs::write(dir.join("job-a.toml"), &a).unwrap();
    std::fs::write(dir.join("job-b.toml"), a.replace("batch_size = 4", "batch_size = 5")).unwrap();
    let run = mpirun_mpmd(&[vec!["train", "job-a.toml"], vec!["train", "job-b.toml"]], &dir, 60);
    let line = assert_fails(
        &run,
        None,
        &["ranks disagree", "job file job-a.toml", "rank 1 (job file job-b.toml) at training.batch_size (4 vs 5)"],
    );
    show("different job files", &line);
}

#[test]
fn output_dir_is_a_regular_file() {
    let _g = common::mpi_lock();
    let dir = setup("bad_output_file", "");
    std::fs::write(dir.join("taken"), "a regular file").unwrap();
    let run = train2(&dir, &["output.dir=taken"]);
    let line = assert_fails(&run, Some(0), &["taken", "output.dir"]);
    show("output.dir is a file", &line);
    assert_eq!(std::fs::read(dir.join("taken")).unwrap(), b"a regular file");
}

/// Another run's rank 0 holds output.dir's lock (`.hvtrain-rank0.lock`): this run waits
/// for it (10 s: an earlier rank 0 finishing its stop checkpoint), then says who holds it; once
/// it is free, the same run starts.
#[test]
fn output_dir_in_use_by_another_run() {
    let _g = common::mpi_lock();
    let dir = setup("bad_output_busy", "");
    std::fs::create_dir_all(dir.join("busy")).unwrap();
    let lock = dir.join("busy/.hvtrain-rank0.lock");
    std::fs::write(&lock, "pid 4242 on node17, started 1; running\n").unwrap();
    let held = std::fs::File::open(&lock).unwrap();
    held.lock().unwrap();
    let run = train2(&dir, &["output.dir=busy"]);
    let line = assert_fails(&run, Some(0), &["busy", "output.dir", "another hvtrain run", "pid 4242 on node17"]);
    assert!(run.stderr.contains("waiting (up to 10 s)"), "{}", run.all());
    assert!(run.elapsed >= Duration::from_secs(10), "refused before the 10 s wait: {:?}", run.elapsed);
    show("output.dir in use by another run", &line);
    drop(held);
    let run = train2(&dir, &["output.dir=busy"]);
    assert!(run.ok(), "{}", run.all());
}

/// `mpirun -n 2 hvtrain train job.toml ARGS... --set S...`.
fn train2_with(dir: &Path, args: &[&str], set: &[&str]) -> Run {
    let mut all = vec!["train", "job.toml"];
    all.extend_from_slice(args);
    for s in set {
        all.push("--set");
        all.push(s);
    }
    mpirun(2, &all, dir, 60)
}

/// Assert that `out` holds exactly the files of `before`, byte for byte.
fn assert_unchanged(out: &Path, before: &std::collections::BTreeMap<String, Vec<u8>>, case: &str) {
    let now = common::snapshot(out);
    let names = |m: &std::collections::BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&now), names(before), "{case}: the files in {} changed", out.display());
    for (name, bytes) in before {
        assert!(now[name] == *bytes, "{case}: {name} was overwritten");
    }
}

/// A good run with checkpoints every 2 steps: out/ then holds ckpt-step 2 and 4 and weights.h5.
fn trained(name: &str) -> PathBuf {
    let dir = setup(name, "");
    let run = train2(&dir, &["checkpoint.every_steps=2"]);
    assert!(run.ok(), "{}", run.all());
    assert_eq!(common::checkpoints(&dir.join("out")), ["ckpt-step000000002.h5", "ckpt-step000000004.h5"]);
    assert!(dir.join("out/weights.h5").exists());
    dir
}

#[test]
fn checkpoint_from_a_different_model() {
    let _g = common::mpi_lock();
    let dir = trained("bad_ckpt_other_model");
    let before = common::snapshot(&dir.join("out"));
    let other = ["checkpoint.every_steps=2", "model.layers=[5, 9, 3]"];

    let run = train2_with(&dir, &["--resume", "auto"], &other);
    let line = assert_fails(&run, Some(0), &["out/ckpt-step000000004.h5", ": layers:", "[5, 8, 3]", "[5, 9, 3]"]);
    show("--resume auto, other model", &line);
    assert_unchanged(&dir.join("out"), &before, "--resume auto");

    let run = train2_with(&dir, &["--resume", "out/ckpt-step000000002.h5"], &other);
    let line = assert_fails(&run, Some(0), &["out/ckpt-step000000002.h5", ": layers:", "[5, 9, 3]"]);
    show("--resume FILE, other model", &line);
    assert_unchanged(&dir.join("out"), &before, "--resume FILE");
}

#[test]
fn checkpoints_of_an_earlier_run_need_resume() {
    let _g = common::mpi_lock();
    let dir = trained("bad_ckpt_no_resume");
    let before = common::snapshot(&dir.join("out"));
    let run = train2(&dir, &["checkpoint.every_steps=2"]);
    let line = assert_fails(&run, Some(0), &["job.toml", "output.dir", "already holds checkpoints", "--resume auto"]);
    show("no --resume", &line);
    assert_unchanged(&dir.join("out"), &before, "no --resume");
}

#[test]
fn non_finite_loss_names_the_step_and_keeps_the_checkpoints() {
    let _g = common::mpi_lock();
    // With lr 1e10 the weights explode; with seed 6's data order the loss of step 9 (epoch 2,
    // step 4 of 5) is NaN.
    let dir = setup("bad_nan_loss", "");
    let set =
        ["optimizer.lr=1e10", "checkpoint.every_steps=1", "checkpoint.keep=6", "training.epochs=3", "training.seed=6"];
    let run = train2(&dir, &set);
    let line = assert_fails(&run, None, &["training:", "the loss became", "at step 9", "optimizer.lr"]);
    show("non-finite loss", &line);
    let out = dir.join("out");
    // keep = 6: the checkpoints of steps 3..8 remain; none for the failing step, no weights.
    let kept: Vec<String> = (3..=8).map(|s| format!("ckpt-step{s:09}.h5")).collect();
    assert_eq!(common::checkpoints(&out), kept);
    assert!(!out.join("weights.h5").exists(), "a failed run must not write weights.h5");
    assert!(!std::fs::read_dir(&out).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".tmp")));
    // Each remaining checkpoint is whole: eval loads it (checksums are verified on resume,
    // eval reads the parameters).
    for c in common::checkpoints(&out) {
        let w = format!("out/{c}");
        let run = common::hvtrain(&["eval", "job.toml", "--set", "data.test=\"d.h5\"", "--weights", &w], &dir, 60);
        assert!(run.ok(), "eval {c}: {}", run.all());
        assert!(run.stdout.contains("test_accuracy"), "{}", run.all());
    }
    // The oldest one still continues with a sane learning rate, to the end (those of steps 4 to
    // 8 already hold exploded weights: they fail again at step 9).
    let run = train2_with(
        &dir,
        &["--resume", "out/ckpt-step000000003.h5"],
        &["optimizer.lr=0.01", "checkpoint.every_steps=1", "checkpoint.keep=6", "training.epochs=3", "training.seed=6"],
    );
    assert!(run.ok(), "{}", run.all());
}

#[test]
fn failed_runs_never_overwrite_checkpoints_or_weights() {
    let _g = common::mpi_lock();
    let dir = setup("bad_no_overwrite", "");
    let run = train2(&dir, &["checkpoint.every_steps=5"]);
    assert!(run.ok(), "{}", run.all());
    let out = dir.join("out");
    assert_eq!(common::checkpoints(&out), ["ckpt-step000000005.h5"]);
    let keep = ["ckpt-step000000005.h5", "weights.h5"];
    let before: std::collections::BTreeMap<String, Vec<u8>> =
        common::snapshot(&out).into_iter().filter(|(n, _)| keep.contains(&n.as_str())).collect();
    assert_eq!(before.len(), 2);
    let same = |case: &str| {
        let now = common::snapshot(&out);
        for (name, bytes) in &before {
            assert!(now.get(name) == Some(bytes), "{case}: {name} was overwritten or removed");
        }
        assert_eq!(common::checkpoints(&out), ["ckpt-step000000005.h5"], "{case}");
    };
    let resume = ["--resume", "auto"];

    // The data file now has a bad label in rank 1's half.
    let good = std::fs::read(dir.join("d.h5")).unwrap();
    let (x, mut y) = data();
    y[30] = 7;
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let run = train2_with(&dir, &resume, &["checkpoint.every_steps=5", "training.epochs=2"]);
    assert_fails(&run, Some(1), &["d.h5", ": y:", "label 7", "row 30"]);
    same("bad label");
    std::fs::write(dir.join("d.h5"), &good).unwrap();

    // A bad config value.
    let run = train2_with(&dir, &resume, &["checkpoint.every_steps=5", "optimizer.lr=-1"]);
    assert_fails(&run, None, &["job.toml", "optimizer.lr", "must be greater than 0"]);
    same("bad config value");

    // A model whose input width is not the data's (and not the checkpoint's).
    let run = train2_with(&dir, &resume, &["checkpoint.every_steps=5", "model.layers=[6, 8, 3]"]);
    assert_fails(&run, None, &["model.layers"]);
    same("wrong width");

    // Training goes on from step 5 and the loss becomes non-finite before the next checkpoint.
    let run = train2_with(&dir, &resume, &["checkpoint.every_steps=5", "training.epochs=2", "optimizer.lr=1e30"]);
    let line = assert_fails(&run, None, &["the loss became", "at step"]);
    show("non-finite loss after resume", &line);
    same("non-finite loss after resume");
}

#[test]
fn output_dir_exists_but_is_not_writable() {
    // Permissions do not stop root, so use sysfs: a directory where nobody, root included,
    // may create a file.
    if !Path::new("/sys/kernel").is_dir() {
        eprintln!("skipped: no /sys/kernel");
        return;
    }
    let _g = common::mpi_lock();
    let dir = setup("bad_output_unwritable", "");
    let run = train2(&dir, &["output.dir=\"/sys/kernel\""]);
    let line = assert_fails(&run, Some(0), &["io /sys/kernel:", "write into output.dir"]);
    show("output.dir not writable", &line);
}

#[test]
fn more_bad_config_values() {
    let _g = common::mpi_lock();
    let dir = setup("bad_config_more", "");
    let cases: &[(&str, &[&str])] = &[
        ("optimizer.lr=-1", &["job.toml", "optimizer.lr", "must be greater than 0 and at most 1e30, got -1"]),
        ("optimizer.lr=nan", &["job.toml", "optimizer.lr", "must be greater than 0 and at most 1e30, got NaN"]),
        ("training.batch_size=-1", &["job.toml", "training.batch_size", "invalid value: integer `-1`"]),
        ("training.epochs=0", &["job.toml", "training.epochs", "must be at least 1"]),
        ("model.layers=[5,-8,3]", &["job.toml", "model.layers[1]", "invalid value: integer `-8`"]),
        ("model.layers=[5]", &["job.toml", "model.layers", "needs at least an input and an output width"]),
        ("model.loss=hinge", &["job.toml", "model.loss", "unknown variant `hinge`"]),
    ];
    for (set, needles) in cases {
        eprintln!("case --set {set}");
        let run = train2(&dir, &[set]);
        assert_fails(&run, None, needles);
    }
    // A global batch of 200 is larger than the 40 samples: one short step per epoch, unless
    // data.drop_last asks for full batches only.
    let run = train2(&dir, &["training.batch_size=100", "data.drop_last=true"]);
    assert_fails(
        &run,
        None,
        &[
            "job.toml",
            "training.batch_size",
            "global batch 200",
            "larger than the training data (40 samples)",
            "drop_last",
        ],
    );
    assert!(!dir.join("out/weights.h5").exists());
}

/// Durations and counts out of their range (issue: `watchdog_seconds = 1e20` passed validation
/// and then panicked converting it to a `Duration`): a clear error naming the key and the
/// allowed range, exit 1, no panic; from the job file, `--set` and the environment alike.
#[test]
fn out_of_range_duration_is_a_clear_error_not_a_panic() {
    let _g = common::mpi_lock();
    let dir = setup("bad_watchdog", "[distribution]\nwatchdog_seconds = 1e20\n");
    let range = "must be at least 1 and at most 3600 seconds without a heartbeat";
    let no_panic = |run: &Run| {
        assert!(!run.stderr.contains("panicked") && !run.stderr.contains("internal error"), "{}", run.all());
    };
    // Alone (a singleton): exactly exit 1.
    let run = hvtrain(&["train", "job.toml"], &dir, 60);
    assert_eq!(run.code, Some(1), "{}", run.all());
    let got = format!("{range}, got 1e20");
    let line = assert_fails(&run, Some(0), &["job.toml", "distribution.watchdog_seconds", &got]);
    no_panic(&run);
    show("watchdog_seconds = 1e20", &line);
    // Under mpirun, every rank refuses it; mpirun passes on exit 1.
    let run = train2(&dir, &[]);
    assert_eq!(run.code, Some(1), "{}", run.all());
    assert_fails(&run, None, &["job.toml", "distribution.watchdog_seconds", &got]);
    no_panic(&run);
    // Under a millisecond, by --set and by the environment (which names the variable).
    let run = train2(&dir, &["distribution.watchdog_seconds=0.0005"]);
    assert_eq!(run.code, Some(1), "{}", run.all());
    assert_fails(&run, None, &["distribution.watchdog_seconds", &format!("{range}, got 0.0005")]);
    no_panic(&run);
    let dir = setup("bad_watchdog_env", "");
    let run = common::mpirun_env(2, &[("HVTRAIN_WATCHDOG_SECONDS", "0.0005")], &["train", "job.toml"], &dir, 60);
    assert_eq!(run.code, Some(1), "{}", run.all());
    let line = assert_fails(
        &run,
        None,
        &["distribution.watchdog_seconds", "environment variable HVTRAIN_WATCHDOG_SECONDS=\"0.0005\"", range],
    );
    no_panic(&run);
    show("HVTRAIN_WATCHDOG_SECONDS=0.0005", &line);
    // A count: far more epochs than anyone runs.
    let run = train2(&dir, &["training.epochs=5000000"]);
    let line = assert_fails(&run, None, &["training.epochs", "must be at least 1 and at most 1000000, got 5000000"]);
    show("training.epochs = 5000000", &line);
}

/// A checkpoint whose stored numbers were changed (one bit of a weight, a plausible value that
/// no HDF5 check sees) is caught by the checkpoint's checksum: `--resume FILE` refuses it
/// naming the checksum, `--resume auto` skips it with a warning and takes the one before.
#[test]
fn checkpoint_with_a_flipped_bit_fails_its_checksum() {
    let _g = common::mpi_lock();
    let dir = trained("bad_ckpt_checksum");
    let ckpt = dir.join("out/ckpt-step000000004.h5");
    let offset = {
        let f = hdf5::File::open(&ckpt).unwrap();
        let ds = f.dataset("dense0/weight").unwrap();
        ds.offset().expect("dense0/weight is stored contiguously, at a known offset")
    };
    let mut bytes = std::fs::read(&ckpt).unwrap();
    // The low byte of the first float32 (little-endian): the weight changes in its last bits.
    bytes[offset as usize] ^= 0x01;
    std::fs::write(&ckpt, &bytes).unwrap();
    let before = common::snapshot(&dir.join("out"));
    // The file still opens and reads: only the checksum can tell.
    let w: Vec<f32> = hdf5::File::open(&ckpt).unwrap().dataset("dense0/weight").unwrap().read_raw().unwrap();
    assert!(w.iter().all(|v| v.is_finite()));

    let set = ["checkpoint.every_steps=2", "training.epochs=2"];
    let run = train2_with(&dir, &["--resume", "out/ckpt-step000000004.h5"], &set);
    assert_eq!(run.code, Some(1), "{}", run.all());
    let line = assert_fails(
        &run,
        Some(0),
        &["out/ckpt-step000000004.h5", ": checksum:", "does not match the contents: the file is damaged"],
    );
    show("checkpoint with a flipped bit, --resume FILE", &line);
    assert_unchanged(&dir.join("out"), &before, "--resume FILE of a damaged checkpoint");

    let run = train2_with(&dir, &["--resume", "auto"], &set);
    assert!(run.ok(), "{}", run.all());
    let warned = run.stderr.lines().any(|l| {
        l.contains("skipping checkpoint out/ckpt-step000000004.h5")
            && l.contains("checksum: does not match the contents")
    });
    assert!(warned, "--resume auto must skip the damaged checkpoint, naming its checksum\n{}", run.all());
    assert!(run.stderr.contains("resuming from out/ckpt-step000000002.h5 at step 2"), "{}", run.all());
}
