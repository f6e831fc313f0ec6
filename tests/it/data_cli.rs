//! The data commands end to end: `hvtrain data import-idx` and `hvtrain data shard` on
//! files the tests write, training from the shards with a `{rank}` path under
//! `mpirun -n 3`, `hvtrain eval` on the saved weights, and the `--help` texts.

use crate::common;

use common::{hvtrain, job, mpirun, scratch, synthetic, write_classes, write_dataset};
use hdf5::types::{FloatSize, IntSize, TypeDescriptor};
use std::io::Write;
use std::path::Path;

/// An IDX file: big-endian magic (0x0000_08_nd), dimensions, then the u8 data.
fn idx_bytes(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn write_plain(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

fn write_gz(path: &Path, bytes: &[u8]) {
    let f = std::fs::File::create(path).unwrap();
    let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap();
}

const IMAGES: u32 = 0x0000_0803;
const LABELS: u32 = 0x0000_0801;

fn dtype(path: &Path, name: &str) -> TypeDescriptor {
    hdf5::File::open(path).unwrap().dataset(name).unwrap().dtype().unwrap().to_descriptor().unwrap()
}

fn shape(path: &Path, name: &str) -> Vec<usize> {
    hdf5::File::open(path).unwrap().dataset(name).unwrap().shape()
}

fn read_i32(path: &Path, name: &str) -> Vec<i32> {
    hdf5::File::open(path).unwrap().dataset(name).unwrap().read_raw().unwrap()
}

/// Import `n` images of rows×cols and check what lands in the .h5.
#[allow(clippy::too_many_arguments)]
fn check_import(
    dir: &Path,
    images: &str,
    labels: &str,
    out: &str,
    pixels: &[u8],
    labs: &[u8],
    rows: usize,
    cols: usize,
) {
    let run = hvtrain(&["data", "import-idx", images, labels, out], dir, 60);
    assert!(run.ok(), "{}", run.all());
    let out = dir.join(out);
    let n = labs.len();
    assert_eq!(shape(&out, "x"), vec![n, rows * cols]);
    assert_eq!(shape(&out, "y"), vec![n]);
    assert_eq!(dtype(&out, "x"), TypeDescriptor::Float(FloatSize::U4));
    assert_eq!(dtype(&out, "y"), TypeDescriptor::Integer(IntSize::U4));
    let x = common::read_f32(&out, "x");
    let want: Vec<f32> = pixels.iter().map(|&b| b as f32 / 255.0).collect();
    assert_eq!(x, want);
    assert_eq!(read_i32(&out, "y"), labs.iter().map(|&b| b as i32).collect::<Vec<_>>());
}

#[test]
fn import_idx_gzip_and_plain() {
    let dir = scratch("data_import_idx");
    let (n, rows, cols) = (5usize, 3usize, 4usize);
    // Varied bytes, 0 and 255 included.
    let mut pixels: Vec<u8> = (0..n * rows * cols).map(|i| (i * 53 % 256) as u8).collect();
    pixels[0] = 0;
    pixels[1] = 255;
    let labs: Vec<u8> = vec![3, 0, 9, 1, 7];
    let img = idx_bytes(IMAGES, &[n as u32, rows as u32, cols as u32], &pixels);
    let lab = idx_bytes(LABELS, &[n as u32], &labs);

    // gzip-compressed images and labels.
    write_gz(&dir.join("img.idx3-ubyte.gz"), &img);
    write_gz(&dir.join("lab.idx1-ubyte.gz"), &lab);
    check_import(&dir, "img.idx3-ubyte.gz", "lab.idx1-ubyte.gz", "gz.h5", &pixels, &labs, rows, cols);

    // Uncompressed, written into a directory that does not exist yet.
    write_plain(&dir.join("img.idx3-ubyte"), &img);
    write_plain(&dir.join("lab.idx1-ubyte"), &lab);
    check_import(&dir, "img.idx3-ubyte", "lab.idx1-ubyte", "sub/plain.h5", &pixels, &labs, rows, cols);

    // Mixed: plain images, gzip labels.
    check_import(&dir, "img.idx3-ubyte", "lab.idx1-ubyte.gz", "mixed.h5", &pixels, &labs, rows, cols);
}

#[test]
fn import_idx_bad_files_name_the_file() {
    let dir = scratch("data_import_idx_bad");
    let (n, rows, cols) = (4usize, 2usize, 2usize);
    let pixels: Vec<u8> = (0..n * rows * cols).map(|i| i as u8).collect();
    let img = idx_bytes(IMAGES, &[n as u32, rows as u32, cols as u32], &pixels);
    let lab = idx_bytes(LABELS, &[n as u32], &[0, 1, 2, 3]);
    write_plain(&dir.join("good-images"), &img);
    write_gz(&dir.join("good-labels.gz"), &lab);

    let fails = |images: &str, labels: &str, needles: &[&str]| {
        let run = hvtrain(&["data", "import-idx", images, labels, "out.h5"], &dir, 60);
        assert!(!run.ok(), "expected a failure for {images} {labels}:\n{}", run.all());
        assert!(
            run.stderr.lines().any(|l| l.contains("error") && needles.iter().all(|n| l.contains(n))),
            "no error line with all of {needles:?}\n{}",
            run.all()
        );
    };

    // Truncated image data (one byte short), plain and gzip.
    write_plain(&dir.join("short-images"), &img[..img.len() - 1]);
    fails("short-images", "good-labels.gz", &["short-images", "need 16 bytes", "has 15"]);
    write_gz(&dir.join("short-images.gz"), &img[..img.len() - 1]);
    fails("short-images.gz", "good-labels.gz", &["short-images.gz", "need 16 bytes"]);
    // Truncated header.
    write_plain(&dir.join("stub-images"), &img[..9]);
    fails("stub-images", "good-labels.gz", &["stub-images", "truncated"]);
    // Wrong magic: not starting with two zero bytes, and an unsupported element type.
    write_plain(&dir.join("magic-images"), &idx_bytes(0x1234_0803, &[n as u32, rows as u32, cols as u32], &pixels));
    fails("magic-images", "good-labels.gz", &["magic-images", "not an IDX file"]);
    write_plain(&dir.join("float-images"), &idx_bytes(0x0000_0d03, &[n as u32, rows as u32, cols as u32], &pixels));
    fails("float-images", "good-labels.gz", &["float-images", "0x0d"]);
    // Label count differs from the image count.
    write_plain(&dir.join("three-labels"), &idx_bytes(LABELS, &[3], &[0, 1, 2]));
    fails("good-images", "three-labels", &["three-labels", "3 labels for 4 images"]);
    // A gzip name whose content is not gzip.
    write_plain(&dir.join("fake.gz"), &lab);
    fails("good-images", "fake.gz", &["fake.gz", "gzip"]);
    // Missing file.
    fails("nope-images", "good-labels.gz", &["nope-images"]);
    assert!(!dir.join("out.h5").exists(), "a failed import must not leave an output file");
}

#[test]
fn shard_splits_into_balanced_contiguous_parts() {
    let dir = scratch("data_shard");
    let (n, d) = (10usize, 3usize);
    let x: Vec<f32> = (0..n * d).map(|i| i as f32 * 0.5 - 3.0).collect();
    let y: Vec<i32> = (0..n as i32).map(|i| i * 7 % 4).collect();
    write_classes(&dir.join("input.h5"), &x, d, &y);
    // Beside x and y: sample weights and a bool column (a row per sample: split with x), the
    // class names (copied whole), and a dataset of neither kind (left out, with a warning).
    let w: Vec<f64> = (0..n).map(|i| i as f64 * 0.25).collect();
    let flag: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
    {
        let f = hdf5::File::open_rw(dir.join("input.h5")).unwrap();
        write_dataset(&f, "w", &w, &[n, 1]);
        write_dataset(&f, "flag", &flag, &[n]);
        let names: Vec<hdf5::types::VarLenUnicode> = ["a", "b", "c", "d"].iter().map(|s| s.parse().unwrap()).collect();
        write_dataset(&f, "y_classes", &names, &[4]);
        write_dataset(&f, "grid", &[1.0f32; 6], &[2, 3]);
    }

    let run = hvtrain(&["data", "shard", "input.h5", "--parts", "3", "--out", "parts"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stderr.contains("grid [2, 3]: left out of the parts"), "{}", run.all());
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    let (mut ws, mut flags) = (Vec::new(), Vec::new());
    let mut sizes = Vec::new();
    for i in 0..3 {
        let p = dir.join(format!("parts/input-{i}.h5"));
        assert!(p.exists(), "{} missing\n{}", p.display(), run.all());
        let rows = shape(&p, "y")[0];
        assert_eq!(shape(&p, "x"), vec![rows, d]);
        assert_eq!(dtype(&p, "x"), TypeDescriptor::Float(FloatSize::U4));
        assert_eq!(dtype(&p, "y"), TypeDescriptor::Integer(IntSize::U4));
        sizes.push(rows);
        xs.extend(common::read_f32(&p, "x"));
        ys.extend(read_i32(&p, "y"));
        let f = hdf5::File::open(&p).unwrap();
        assert_eq!(shape(&p, "w"), vec![rows, 1]);
        ws.extend(f.dataset("w").unwrap().read_raw::<f64>().unwrap());
        flags.extend(f.dataset("flag").unwrap().read_raw::<bool>().unwrap());
        let names: Vec<String> = f
            .dataset("y_classes")
            .unwrap()
            .read_raw::<hdf5::types::VarLenUnicode>()
            .unwrap()
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        assert_eq!(names, ["a", "b", "c", "d"], "every part keeps the class names");
        assert!(f.dataset("grid").is_err(), "grid is neither a row per sample nor strings");
    }
    assert_eq!(ws, w, "shards' sample weights concatenated must equal the input's");
    assert_eq!(flags, flag);
    assert!(!dir.join("parts/input-3.h5").exists());
    assert_eq!(xs, x, "shards' x concatenated must equal the input");
    assert_eq!(ys, y, "shards' y concatenated must equal the input");
    assert_eq!(sizes.iter().sum::<usize>(), n);
    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    assert!(hi - lo <= 1, "unbalanced shard sizes {sizes:?}");

    // More parts than rows.
    let run = hvtrain(&["data", "shard", "input.h5", "--parts", "11", "--out", "too-many"], &dir, 60);
    assert!(!run.ok(), "{}", run.all());
    assert!(run.stderr.contains("input.h5") && run.stderr.contains("11 parts"), "{}", run.all());
    // Zero parts.
    let run = hvtrain(&["data", "shard", "input.h5", "--parts", "0", "--out", "zero"], &dir, 60);
    assert!(!run.ok(), "{}", run.all());
    assert!(run.stderr.contains("--parts"), "{}", run.all());
}

#[test]
fn train_from_shards_then_eval() {
    let _g = common::mpi_lock();
    let dir = scratch("data_train_shards");
    let (d, k) = (4usize, 3usize);
    let (x, y) = synthetic(480, d, k, 11);
    write_classes(&dir.join("train.h5"), &x, d, &y);
    let (tx, ty) = synthetic(150, d, k, 12);
    write_classes(&dir.join("test.h5"), &tx, d, &ty);

    let run = hvtrain(&["data", "shard", "train.h5", "--parts", "3", "--out", "shards"], &dir, 60);
    assert!(run.ok(), "{}", run.all());

    let epochs = 4;
    job(&dir, &[d, 16, k], "shards/train-{rank}.h5", Some("test.h5"), "\n[optimizer]\nkind = \"adam\"\nlr = 0.02\n");
    let ep = format!("training.epochs={epochs}");
    let run = mpirun(3, &["train", "job.toml", "--set", &ep, "--set", "training.batch_size=8"], &dir, 60);
    assert!(run.ok(), "{}", run.all());

    let text = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}"))).collect();
    assert_eq!(lines.len(), epochs, "one line per epoch:\n{text}");
    for (i, m) in lines.iter().enumerate() {
        for key in ["epoch", "train_loss", "test_loss", "test_accuracy", "samples_per_sec", "ranks"] {
            assert!(m.get(key).is_some(), "key {key} missing in {m}");
        }
        assert_eq!(m["epoch"].as_u64(), Some(i as u64 + 1), "{m}");
        assert_eq!(m["ranks"].as_u64(), Some(3), "{m}");
        assert!(m["train_loss"].as_f64().unwrap().is_finite(), "{m}");
        assert!(m["test_loss"].as_f64().unwrap().is_finite(), "{m}");
        let acc = m["test_accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&acc), "{m}");
        assert!(m["samples_per_sec"].as_f64().unwrap() > 0.0, "{m}");
    }
    let first = lines[0]["train_loss"].as_f64().unwrap();
    let last_loss = lines[epochs - 1]["train_loss"].as_f64().unwrap();
    assert!(last_loss < first, "training loss did not go down: {first} -> {last_loss}\n{text}");

    let w = dir.join("out/weights.h5");
    assert_eq!(shape(&w, "dense0/weight"), vec![d, 16]);
    assert_eq!(shape(&w, "dense0/bias"), vec![16]);
    assert_eq!(shape(&w, "dense1/weight"), vec![16, k]);
    assert_eq!(shape(&w, "dense1/bias"), vec![k]);
    assert_eq!(dtype(&w, "dense0/weight"), TypeDescriptor::Float(FloatSize::U4));
    assert!(common::read_f32(&w, "dense0/weight").iter().all(|v| v.is_finite()));
    assert!(!dir.join("out/weights.h5.tmp").exists());

    // Eval on 2 ranks: the same test accuracy as the last epoch's.
    let run = mpirun(2, &["eval", "job.toml", "--weights", "out/weights.h5"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let json: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(json.len(), 1, "eval prints one JSON line (from rank 0)\n{}", run.all());
    let got = json[0]["test_accuracy"].as_f64().unwrap_or_else(|| panic!("no test_accuracy\n{}", run.all()));
    let want = lines[epochs - 1]["test_accuracy"].as_f64().unwrap();
    assert!((got - want).abs() <= 1e-9, "eval accuracy {got} != last epoch's {want}\n{}", run.all());
    assert_eq!(json[0]["ranks"].as_u64(), Some(2), "{}", run.all());
    let tl = lines[epochs - 1]["test_loss"].as_f64().unwrap();
    let el = json[0]["test_loss"].as_f64().unwrap();
    assert!((tl - el).abs() <= 1e-6 * tl.abs().max(1.0), "eval test_loss {el} vs last epoch's {tl}");
}

#[test]
fn help_texts_have_examples() {
    let dir = scratch("data_help");
    for args in [
        &["--help"][..],
        &["train", "--help"],
        &["data", "shard", "--help"],
        &["data", "import-idx", "--help"],
        &["eval", "--help"],
    ] {
        let run = hvtrain(args, &dir, 30);
        assert!(run.ok(), "{args:?}: {}", run.all());
        assert!(run.stdout.contains("Example"), "{args:?} help has no example:\n{}", run.all());
    }
}
