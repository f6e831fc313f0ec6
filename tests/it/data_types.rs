//! Data as users have it, under a real `mpirun -n 2`: `x` stored as any integer or float
//! type (with `data.x_scale` / `data.x_offset`), labels of any integer type, regression
//! targets of integers, datasets inside groups, and `hvtrain data shard` keeping the stored
//! types. Each run must give exactly the weights of a run on the same numbers stored as
//! float32 (the conversion happens as rows are read, before anything else sees them).

use crate::common;

use common::{hvtrain, job, mpirun, read_f32, scratch, write_dataset};
use hdf5::H5Type;
use std::path::Path;

const N: usize = 40;
const D: usize = 5;
const LAYERS: &[usize] = &[5, 8, 3];

/// Whole numbers 0..=100 (they fit every integer type), and labels 0..3 from them.
fn numbers() -> (Vec<u8>, Vec<u8>) {
    let x: Vec<u8> = (0..N * D).map(|i| (i * 37 % 101) as u8).collect();
    let y = (0..N).map(|i| (x[i * D..(i + 1) * D].iter().map(|&v| v as usize).sum::<usize>() % 3) as u8).collect();
    (x, y)
}

/// Train 1 epoch on 2 ranks in a fresh dir whose `d.h5` `write` fills; the weights.
fn weights(name: &str, write: impl FnOnce(&hdf5::File), sets: &[&str], layers: &[usize]) -> Vec<Vec<f32>> {
    let dir = scratch(name);
    write(&hdf5::File::create(dir.join("d.h5")).unwrap());
    job(&dir, layers, "d.h5", None, "");
    weights_in(&dir, sets, layers)
}

fn weights_in(dir: &Path, sets: &[&str], layers: &[usize]) -> Vec<Vec<f32>> {
    let mut args = vec!["train", "job.toml"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let run = mpirun(2, &args, dir, 60);
    assert!(run.ok(), "{}", run.all());
    let w = dir.join("out/weights.h5");
    (0..layers.len() - 1)
        .flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")])
        .map(|t| read_f32(&w, &t))
        .collect()
}

/// x stored as `X` and labels as `Y`, both from `numbers()`.
fn stored<X: H5Type, Y: H5Type>(
    xn: &'static str,
    yn: &'static str,
    fx: impl Fn(u8) -> X,
    fy: impl Fn(u8) -> Y,
) -> impl FnOnce(&hdf5::File) {
    move |f| {
        let (x, y) = numbers();
        write_dataset(f, xn, &x.into_iter().map(fx).collect::<Vec<_>>(), &[N, D]);
        write_dataset(f, yn, &y.into_iter().map(fy).collect::<Vec<_>>(), &[N]);
    }
}

#[test]
fn every_stored_type_trains_exactly_as_its_float32_values() {
    let _g = common::mpi_lock();
    // The reference: the numbers times 0.01 (in float64, rounded once), stored as float32.
    let want = weights("types_ref", stored("x", "y", |v| (v as f64 * 0.01) as f32, |c| c as i32), &[], LAYERS);
    let scale = "data.x_scale=0.01";
    let cases: Vec<(&str, Vec<Vec<f32>>)> = vec![
        ("uint8", weights("types_u8", stored("x", "y", |v| v, |c| c), &[scale], LAYERS)),
        ("int8", weights("types_i8", stored("x", "y", |v| v as i8, |c| c as i8), &[scale], LAYERS)),
        ("uint16", weights("types_u16", stored("x", "y", |v| v as u16, |c| c as u16), &[scale], LAYERS)),
        ("int16", weights("types_i16", stored("x", "y", |v| v as i16, |c| c as i16), &[scale], LAYERS)),
        ("uint32", weights("types_u32", stored("x", "y", |v| v as u32, |c| c as u32), &[scale], LAYERS)),
        ("int32", weights("types_i32", stored("x", "y", |v| v as i32, |c| c as i32), &[scale], LAYERS)),
        ("uint64", weights("types_u64", stored("x", "y", |v| v as u64, |c| c as u64), &[scale], LAYERS)),
        ("int64", weights("types_i64", stored("x", "y", |v| v as i64, |c| c as i64), &[scale], LAYERS)),
        ("float32 scaled", weights("types_f32", stored("x", "y", |v| v as f32, |c| c as i16), &[scale], LAYERS)),
        ("float64", weights("types_f64", stored("x", "y", |v| v as f64 * 0.01, |c| c as u32), &[], LAYERS)),
        (
            "uint8 in groups",
            weights(
                "types_groups",
                stored("train/images", "train/labels", |v| v, |c| c),
                &[scale, "data.x_dataset=train/images", "data.y_dataset=train/labels"],
                LAYERS,
            ),
        ),
    ];
    for (what, w) in cases {
        assert_eq!(w, want, "{what}: the weights differ from the float32 run's");
    }
}

#[test]
fn offset_is_added_after_the_scale() {
    let _g = common::mpi_lock();
    // x * 0.02 - 1 (scale first, then offset): pixels 0..=100 become -1..=1.
    let want = weights("offset_ref", stored("x", "y", |v| (v as f64 * 0.02 - 1.0) as f32, |c| c as i32), &[], LAYERS);
    let got = weights("offset_u8", stored("x", "y", |v| v, |c| c), &["data.x_scale=0.02", "data.x_offset=-1"], LAYERS);
    assert_eq!(got, want);
}

#[test]
fn integer_regression_targets() {
    let _g = common::mpi_lock();
    let targets = |f: &hdf5::File, float: bool| {
        let (x, _) = numbers();
        let xf: Vec<f32> = x.iter().map(|&v| v as f32 / 100.0).collect();
        write_dataset(f, "x", &xf, &[N, D]);
        let t: Vec<i16> = (0..N * 2).map(|i| (i as i16 * 7 % 11) - 5).collect();
        if float {
            write_dataset(f, "y", &t.iter().map(|&v| v as f32).collect::<Vec<_>>(), &[N, 2]);
        } else {
            write_dataset(f, "y", &t, &[N, 2]);
        }
    };
    let layers = &[5, 8, 2];
    let want = weights("targets_f32", |f| targets(f, true), &["model.loss=mse"], layers);
    let got = weights("targets_i16", |f| targets(f, false), &["model.loss=mse"], layers);
    assert_eq!(got, want);
}

#[test]
fn shard_keeps_uint8_and_training_from_the_shards_matches() {
    let _g = common::mpi_lock();
    let want = weights("shard_u8_one", stored("x", "y", |v| v, |c| c), &["data.x_scale=0.01"], LAYERS);
    let dir = scratch("shard_u8_parts");
    stored("x", "y", |v| v, |c| c)(&hdf5::File::create(dir.join("d.h5")).unwrap());
    let run = hvtrain(&["data", "shard", "d.h5", "--parts", "2", "--out", "parts"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    for i in 0..2 {
        let f = hdf5::File::open(dir.join(format!("parts/d-{i}.h5"))).unwrap();
        for name in ["x", "y"] {
            let t = f.dataset(name).unwrap().dtype().unwrap().to_descriptor().unwrap();
            assert_eq!(t.to_string(), "uint8", "parts/d-{i}.h5 {name}");
        }
    }
    job(&dir, LAYERS, "parts/d-{rank}.h5", None, "");
    assert_eq!(weights_in(&dir, &["data.x_scale=0.01"], LAYERS), want);
}

/// `hvtrain predict` reads inputs as training does: uint8 `x` with the job's `x_scale` gives
/// exactly the outputs of the same numbers scaled and stored as float32.
#[test]
fn predict_converts_and_scales_like_training() {
    let _g = common::mpi_lock();
    let dir = scratch("types_predict");
    stored("x", "y", |v| v, |c| c)(&hdf5::File::create(dir.join("d.h5")).unwrap());
    stored("x", "y", |v| (v as f64 * 0.01) as f32, |c| c)(&hdf5::File::create(dir.join("f.h5")).unwrap());
    job(&dir, LAYERS, "d.h5", None, "");
    let run = mpirun(2, &["train", "job.toml", "--set", "data.x_scale=0.01"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let predict = |input: &str, output: &str, sets: &[&str]| {
        let mut args = vec!["predict", "job.toml", "--weights", "out/weights.h5", "--input", input, "--output", output];
        for s in sets {
            args.extend(["--set", s]);
        }
        let run = hvtrain(&args, &dir, 60);
        assert!(run.ok(), "{}", run.all());
        read_f32(&dir.join(output), "outputs")
    };
    let from_u8 = predict("d.h5", "p8.h5", &["data.x_scale=0.01"]);
    let from_f32 = predict("f.h5", "p32.h5", &[]);
    assert_eq!(from_u8.len(), N * 3);
    assert_eq!(from_u8, from_f32, "predict on uint8 with x_scale must equal predict on the scaled float32 values");
}

/// Data as Keras users keep it: x as images [N, h, w] (read flattened, row-major, as
/// `Flatten` reads them) and labels as a column vector of floats [N, 1] or one-hot rows
/// [N, classes]; training gives exactly the weights of x [N, D] float32 with int32 labels,
/// and `predict` on the images the outputs of `predict` on the flat rows; `data check` says
/// the input width such a file needs.
#[test]
fn images_and_one_hot_or_column_labels_train_as_flat_rows_and_indices() {
    let _g = common::mpi_lock();
    let want = weights("forms_ref", stored("x", "y", |v| (v as f64 * 0.01) as f32, |c| c as i32), &[], LAYERS);
    let scale = "data.x_scale=0.01";
    let forms = |shape: &'static [usize], one_hot: bool| {
        move |f: &hdf5::File| {
            let (x, y) = numbers();
            write_dataset(f, "x", &x, shape);
            if one_hot {
                let oh: Vec<f32> = y.iter().flat_map(|&c| (0..3).map(move |j| f32::from(j == c))).collect();
                write_dataset(f, "y", &oh, &[N, 3]);
            } else {
                write_dataset(f, "y", &y.iter().map(|&c| f64::from(c)).collect::<Vec<_>>(), &[N, 1]);
            }
        }
    };
    let cases = [
        ("x [N, 5, 1] uint8, y float64 [N, 1]", weights("forms_col", forms(&[N, D, 1], false), &[scale], LAYERS)),
        ("x [N, 1, 5] uint8, y one-hot [N, 3]", weights("forms_onehot", forms(&[N, 1, D], true), &[scale], LAYERS)),
    ];
    for (what, w) in cases {
        assert_eq!(w, want, "{what}: the weights differ from the flat float32 run's");
    }
    let dir = scratch("forms_predict");
    forms(&[N, D, 1], false)(&hdf5::File::create(dir.join("img.h5")).unwrap());
    stored("x", "y", |v| v, |c| c)(&hdf5::File::create(dir.join("flat.h5")).unwrap());
    job(&dir, LAYERS, "flat.h5", None, "");
    let run = mpirun(2, &["train", "job.toml", "--set", scale], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let predict = |input: &str, output: &str| {
        let args = ["predict", "job.toml", "--weights", "out/weights.h5", "--input", input, "--output", output];
        let run = hvtrain(&[&args[..], &["--set", scale]].concat(), &dir, 60);
        assert!(run.ok(), "{}", run.all());
        read_f32(&dir.join(output), "outputs")
    };
    let check = hvtrain(&["data", "check", "img.h5"], &dir, 60);
    assert!(check.ok(), "{}", check.all());
    let says = format!("/x: shape [{N}, {D}, 1] (as x: {D} × 1 = {D} features per sample, read flattened)");
    assert!(check.stdout.contains(&says), "data check must say the width a model needs: {}", check.all());
    let (img, flat) = (predict("img.h5", "pi.h5"), predict("flat.h5", "pf.h5"));
    assert_eq!(img.len(), N * 3);
    assert_eq!(img, flat, "predict on [N, 5, 1] must equal predict on [N, 5]");
}
