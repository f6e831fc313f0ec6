//! Opening and reading shards of every stored type, scaled, in groups, and the errors.
//!
//! Must not: use files outside a fresh temporary directory.
use super::*;
use crate::config::LossKind;
use crate::data::h5::Num;
use hdf5::H5Type;
use std::path::Path;

const N: usize = 6;
const D: usize = 3;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hvtrain-shard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cfg(train: &Path, extra: &str) -> DataCfg {
    toml::from_str(&format!("train = {:?}\n{extra}", train.display().to_string())).unwrap()
}

fn write<T: H5Type>(f: &hdf5::File, name: &str, v: &[T], shape: &[usize]) {
    let arr = ndarray::ArrayViewD::from_shape(ndarray::IxDyn(shape), v).unwrap();
    f.new_dataset_builder().with_data(arr).create(name).unwrap();
}

fn classes(k: usize) -> Expect {
    Expect { inputs: D, outputs: k, loss: LossKind::SoftmaxCrossEntropy }
}

/// Every row of a one-rank shard, as the loader gets them.
fn rows(cfg: &DataCfg, path: &Path, want: Expect) -> Result<(Vec<f32>, Labels)> {
    let s = Shard::open(
        cfg,
        "data.train",
        &path.display().to_string(),
        0,
        1,
        want,
        &crate::data::classes::Reference::Unknown,
    )?;
    let mut out = vec![0.0; s.len() * D];
    s.read_rows(0, s.len(), &mut out)?;
    Ok((out, s.labels.clone()))
}

/// x stored as T (values `vals`), labels 0,1,2,... stored as T too when T is an integer
/// type (else int32); the rows read must be `vals` cast to f64, times scale plus offset,
/// rounded to f32, and the labels the same numbers.
fn check<T: H5Type + Num>(vals: &[T], label: impl Fn(i32) -> Option<T>, scale: f64, offset: f64) {
    let what = std::any::type_name::<T>();
    let d = dir(what);
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    write(&f, "x", vals, &[N, D]);
    let labels: Vec<i32> = (0..N as i32).map(|i| i % 3).collect();
    match label(0) {
        Some(_) => write(&f, "y", &labels.iter().map(|&c| label(c).unwrap()).collect::<Vec<T>>(), &[N]),
        None => write(&f, "y", &labels, &[N]),
    }
    drop(f);
    let (x, y) = rows(&cfg(&p, &format!("x_scale = {scale:?}\nx_offset = {offset:?}")), &p, classes(3))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let want: Vec<f32> = if scale == 1.0 && offset == 0.0 {
        vals.iter().map(|v| v.to_f32()).collect()
    } else {
        vals.iter().map(|v| (v.to_f64() * scale + offset) as f32).collect()
    };
    assert_eq!(x, want, "{what}, x_scale {scale}, x_offset {offset}");
    match y {
        Labels::Classes(c) => assert_eq!(c, labels, "{what}"),
        _ => panic!("{what}: not classes"),
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn every_integer_and_float_type_reads_as_float32() {
    let s = |i: usize| i as i64 * 37 % 19 - 9; // -9..9, signs mixed
    check::<u8>(&(0..N * D).map(|i| (i * 53 % 256) as u8).collect::<Vec<_>>(), |c| Some(c as u8), 1.0 / 255.0, 0.0);
    check::<u8>(&(0..N * D).map(|i| (i * 53 % 256) as u8).collect::<Vec<_>>(), |c| Some(c as u8), 1.0, 0.0);
    check::<i8>(&(0..N * D).map(|i| s(i) as i8 * 14).collect::<Vec<_>>(), |c| Some(c as i8), 1.0, 0.0);
    check::<u16>(&(0..N * D).map(|i| (i * 4099) as u16).collect::<Vec<_>>(), |c| Some(c as u16), 1.0 / 65535.0, -0.5);
    check::<i16>(&(0..N * D).map(|i| s(i) as i16 * 3000).collect::<Vec<_>>(), |c| Some(c as i16), 0.001, 2.0);
    check::<u32>(&(0..N * D).map(|i| i as u32 * 238_609_294).collect::<Vec<_>>(), |c| Some(c as u32), 1.0, 0.0);
    check::<i32>(&(0..N * D).map(|i| s(i) as i32 * 100_003).collect::<Vec<_>>(), Some, 1e-5, 0.0);
    // Beyond 2^24 (float32's exact integers) and 2^53 (float64's): rounded as `as` does.
    check::<u64>(
        &(0..N * D).map(|i| u64::MAX - i as u64 * 1_000_000_007).collect::<Vec<_>>(),
        |c| Some(c as u64),
        1.0,
        0.0,
    );
    check::<i64>(&(0..N * D).map(|i| s(i) * 1_000_000_000_007).collect::<Vec<_>>(), |c| Some(c as i64), 1e-12, 0.25);
    check::<f32>(&(0..N * D).map(|i| s(i) as f32 / 7.0).collect::<Vec<_>>(), |_| None, 1.0, 0.0);
    check::<f32>(&(0..N * D).map(|i| s(i) as f32 / 7.0).collect::<Vec<_>>(), |_| None, 2.0, -1.0);
    check::<f64>(&(0..N * D).map(|i| s(i) as f64 / 7.0 + 1e-12).collect::<Vec<_>>(), |_| None, 1.0, 0.0);
    check::<f64>(&(0..N * D).map(|i| s(i) as f64 * 1e20).collect::<Vec<_>>(), |_| None, 1e-20, 0.0);
}

/// float16 (tests/fixtures/float16.h5, written by h5py: x = arange(32)/8 - 2 as float16
/// [8, 4], x[0, 1] = float16(0.1), x[7, 3] = 65504; y = arange(8) % 3 as uint8).
#[test]
fn float16_reads_as_float32() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/float16.h5");
    let mut want: Vec<f32> = (0..32).map(|i| i as f32 / 8.0 - 2.0).collect();
    want[1] = 0.099_975_586; // float16's nearest to 0.1 (0.0999755859375 exactly)
    want[31] = 65504.0;
    let expect = Expect { inputs: 4, outputs: 3, loss: LossKind::SoftmaxCrossEntropy };
    let read = |extra: &str| {
        let s = Shard::open(
            &cfg(&p, extra),
            "data.train",
            p.to_str().unwrap(),
            0,
            1,
            expect,
            &crate::data::classes::Reference::Unknown,
        )
        .unwrap();
        let mut out = vec![0.0; 32];
        s.read_rows(0, 8, &mut out).unwrap();
        (out, s.labels.clone())
    };
    let (x, y) = read("");
    assert_eq!(x, want);
    assert!(matches!(y, Labels::Classes(v) if v == [0, 1, 2, 0, 1, 2, 0, 1]));
    let (x, _) = read("x_scale = 0.5\nx_offset = 1.0");
    assert_eq!(x, want.iter().map(|&v| (v as f64 * 0.5 + 1.0) as f32).collect::<Vec<_>>());
    // float16 regression targets (the same dataset as y): read as float32 too.
    let mse = Expect { inputs: 4, outputs: 4, loss: LossKind::Mse };
    let s = Shard::open(
        &cfg(&p, "y_dataset = \"x\""),
        "data.train",
        p.to_str().unwrap(),
        0,
        1,
        mse,
        &crate::data::classes::Reference::Unknown,
    )
    .unwrap_or_else(|e| panic!("float16 targets: {e}"));
    assert!(matches!(&s.labels, Labels::Values(v, 4) if *v == want), "{:?}", s.labels);
}

#[test]
fn uint8_pixels_with_scale_are_in_0_1() {
    let d = dir("pixels");
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    write(&f, "x", &[0u8, 128, 255, 255, 0, 1], &[2, D]);
    write(&f, "y", &[1u8, 0], &[2]);
    drop(f);
    let (x, _) = rows(&cfg(&p, "x_scale = 0.00392156862745098"), &p, classes(2)).unwrap();
    assert_eq!(x, [0.0, 128.0 / 255.0, 1.0, 1.0, 0.0, 1.0 / 255.0]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn datasets_inside_groups() {
    let d = dir("groups");
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    write(&f, "train/images", &(0..N * D).map(|i| i as u8).collect::<Vec<_>>(), &[N, D]);
    write(&f, "train/labels", &(0..N).map(|i| (i % 2) as i64).collect::<Vec<_>>(), &[N]);
    drop(f);
    let c = cfg(&p, "x_dataset = \"train/images\"\ny_dataset = \"/train/labels\"");
    let (x, y) = rows(&c, &p, classes(2)).unwrap();
    assert_eq!(x, (0..N * D).map(|i| i as f32).collect::<Vec<_>>());
    assert!(matches!(y, Labels::Classes(v) if v == [0, 1, 0, 1, 0, 1]));
    // A name absent from the group: the error lists what the group holds.
    let e = rows(&cfg(&p, "x_dataset = \"train/imgs\""), &p, classes(2)).err().unwrap().to_string();
    assert!(e.contains("train/imgs: dataset not found (group /train has: [images, labels])"), "{e}");
    let e = rows(&cfg(&p, "x_dataset = \"test/images\""), &p, classes(2)).err().unwrap().to_string();
    assert!(e.contains("test/images: dataset not found (the file has: [train])"), "{e}");
    let e = rows(&cfg(&p, "x_dataset = \"train\""), &p, classes(2)).err().unwrap().to_string();
    assert!(e.contains("train: is a group, not a dataset (it holds: [images, labels])"), "{e}");
    let e = rows(&cfg(&p, "x_dataset = \"train/images/x\""), &p, classes(2)).err().unwrap().to_string();
    assert!(e.contains("/train/images is not a group"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn regression_targets_of_integers_and_labels_out_of_range() {
    let d = dir("targets");
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    write(&f, "x", &[0.5f32; N * D], &[N, D]);
    write(&f, "y", &(0..2 * N).map(|i| i as i16 - 3).collect::<Vec<_>>(), &[N, 2]);
    write(&f, "big", &(0..N).map(|i| if i == 4 { u64::MAX } else { 1 }).collect::<Vec<_>>(), &[N]);
    write(&f, "neg", &(0..N).map(|i| if i == 2 { -1i8 } else { 1 }).collect::<Vec<_>>(), &[N]);
    drop(f);
    let mse = Expect { inputs: D, outputs: 2, loss: LossKind::Mse };
    let (_, y) = rows(&cfg(&p, ""), &p, mse).unwrap();
    assert!(matches!(y, Labels::Values(v, 2) if v == (0..2 * N).map(|i| i as f32 - 3.0).collect::<Vec<_>>()));
    let e = rows(&cfg(&p, "y_dataset = \"big\""), &p, classes(3)).err().unwrap().to_string();
    assert!(e.contains("big: label 18446744073709551615 at row 4 is out of range"), "{e}");
    let e = rows(&cfg(&p, "y_dataset = \"neg\""), &p, classes(3)).err().unwrap().to_string();
    assert!(e.contains("neg: label -1 at row 2 is out of range"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn non_finite_after_conversion_names_the_stored_value() {
    let d = dir("nonfinite");
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    let mut x = vec![1.0f64; N * D];
    x[4 * D + 1] = 1e300; // finite in float64, inf in float32
    write(&f, "x", &x, &[N, D]);
    write(&f, "u", &[200u8; N * D], &[N, D]);
    write(&f, "y", &[0i32; N], &[N]);
    drop(f);
    let e = rows(&cfg(&p, ""), &p, classes(2)).err().unwrap().to_string();
    assert!(
        e.contains(
            "x: non-finite value inf at row 4, column 1 after conversion to float32 (stored float64 value 1e300)"
        ),
        "{e}"
    );
    let e = rows(&cfg(&p, "x_dataset = \"u\"\nx_scale = 1e37"), &p, classes(2)).err().unwrap().to_string();
    assert!(e.contains("u: non-finite value inf at row 0, column 0 after scaling (stored uint8 value 200, data.x_scale 1e37, data.x_offset 0)"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn strings_and_compounds_are_refused_naming_file_and_dataset() {
    #[derive(H5Type, Clone, Copy)]
    #[repr(C)]
    struct Pair {
        a: f32,
        b: i32,
    }
    let d = dir("badtypes");
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    let s: Vec<hdf5::types::FixedAscii<4>> =
        (0..N * D).map(|_| hdf5::types::FixedAscii::from_ascii(b"abc").unwrap()).collect();
    write(&f, "s", &s, &[N, D]);
    write(&f, "c", &[Pair { a: 1.0, b: 2 }; N * D], &[N, D]);
    write(&f, "y", &[0i32; N], &[N]);
    write(&f, "ys", &s[..N], &[N]);
    drop(f);
    let e = rows(&cfg(&p, "x_dataset = \"s\""), &p, classes(2)).err().unwrap().to_string();
    assert!(
        e.contains("d.h5: s: element type string (len 4) is not supported; x must be an array [samples, features]"),
        "{e}"
    );
    let e = rows(&cfg(&p, "x_dataset = \"c\""), &p, classes(2)).err().unwrap().to_string();
    assert!(e.contains("d.h5: c: element type compound (2 fields) is not supported"), "{e}");
    let e = rows(&cfg(&p, "x_dataset = \"c\"\ny_dataset = \"ys\""), &p, classes(2)).err().unwrap().to_string();
    assert!(e.contains("d.h5: c: element type compound"), "{e}");
    let e = rows(&cfg(&p, "y_dataset = \"ys\"\nx_dataset = \"y\""), &p, classes(2)).err().unwrap().to_string();
    assert!(
        e.contains(
            "d.h5: y: must be a 2-D array [samples, features] (or [samples, d1, d2, ...]), found shape [6] of int32"
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Class labels as Keras and numpy users store them: a column vector [N, 1], floats holding
/// whole numbers, bool, and one-hot rows [N, k] of any number type or bool, each read as the
/// same classes; a fraction, NaN, a row with no 1 or two, probabilities and a width that is
/// neither 1 nor k are errors naming the row or the shape.
#[test]
fn class_labels_as_column_vectors_whole_floats_bool_and_one_hot() {
    let d = dir("labelforms");
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    write(&f, "x", &[0.5f32; N * D], &[N, D]);
    let c: Vec<i32> = (0..N as i32).map(|i| (i * 2) % 3).collect();
    let one_hot = |c: &[i32]| -> Vec<f32> { c.iter().flat_map(|&c| (0..3).map(move |j| f32::from(j == c))).collect() };
    write(&f, "col", &c, &[N, 1]);
    write(&f, "f64", &c.iter().map(|&c| f64::from(c)).collect::<Vec<_>>(), &[N]);
    write(&f, "f32col", &c.iter().map(|&c| c as f32).collect::<Vec<_>>(), &[N, 1]);
    write(&f, "oh", &one_hot(&c), &[N, 3]);
    write(&f, "oh_u8", &one_hot(&c).iter().map(|&v| v as u8).collect::<Vec<_>>(), &[N, 3]);
    write(&f, "oh_bool", &one_hot(&c).iter().map(|&v| v == 1.0).collect::<Vec<_>>(), &[N, 3]);
    let b: Vec<bool> = (0..N).map(|i| i % 2 == 1).collect();
    write(&f, "bool", &b, &[N]);
    let mut frac: Vec<f64> = c.iter().map(|&c| f64::from(c)).collect();
    frac[4] = 1.5;
    write(&f, "frac", &frac, &[N]);
    frac[4] = f64::NAN;
    write(&f, "nan", &frac, &[N]);
    let mut soft = one_hot(&c);
    soft[3 * 3..3 * 3 + 3].copy_from_slice(&[0.2, 0.7, 0.1]);
    write(&f, "soft", &soft, &[N, 3]);
    let mut none = one_hot(&c);
    none[2 * 3..2 * 3 + 3].fill(0.0);
    write(&f, "none", &none, &[N, 3]);
    let mut two = one_hot(&c);
    two[5 * 3..5 * 3 + 3].copy_from_slice(&[1.0, 0.0, 1.0]);
    write(&f, "two", &two, &[N, 3]);
    write(&f, "wide", &[0i32; N * 2], &[N, 2]);
    drop(f);
    let read = |y: &str| rows(&cfg(&p, &format!("y_dataset = {y:?}")), &p, classes(3));
    for y in ["col", "f64", "f32col", "oh", "oh_u8", "oh_bool"] {
        let (_, labels) = read(y).unwrap_or_else(|e| panic!("{y}: {e}"));
        assert!(matches!(&labels, Labels::Classes(v) if *v == c), "{y}: {labels:?}");
    }
    let (_, labels) = read("bool").unwrap();
    assert!(matches!(&labels, Labels::Classes(v) if *v == [0, 1, 0, 1, 0, 1]), "{labels:?}");
    let err = |y: &str| read(y).err().unwrap_or_else(|| panic!("{y} was taken")).to_string();
    let e = err("frac");
    assert!(e.contains("frac: label 1.5 at row 4 is not a whole number"), "{e}");
    let e = err("nan");
    assert!(e.contains("nan: label NaN at row 4 is not a whole number"), "{e}");
    let e = err("soft");
    assert!(e.contains("soft: row 3 is not one-hot: 0.2 at column 0"), "{e}");
    let e = err("none");
    assert!(e.contains("none: row 2 is not one-hot: no 1 in its 3 columns"), "{e}");
    let e = err("two");
    assert!(e.contains("two: row 5 is not one-hot: a second 1 at column 2"), "{e}");
    let e = err("wide");
    assert!(e.contains("wide: softmax_cross_entropy needs class labels [samples] or [samples, 1] (class indices) or [samples, 3] (one-hot"), "{e}");
    assert!(e.contains("found shape [6, 2] of int32"), "{e}");
    // Multi-label targets as numpy keeps them: bool, read as 0 and 1.
    let bce = Expect { inputs: D, outputs: 3, loss: LossKind::BinaryCrossEntropy };
    let (_, labels) = rows(&cfg(&p, "y_dataset = \"oh_bool\""), &p, bce).unwrap();
    assert!(matches!(&labels, Labels::Bits(v, 3) if *v == one_hot(&c)), "{labels:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// x stored [N, 3, 2] is read as [N, 6] rows in row-major order; a model of another width is
/// told the dimensions and their product.
#[test]
fn x_of_three_dimensions_is_read_flattened() {
    let d = dir("xnd");
    let p = d.join("d.h5");
    let f = hdf5::File::create(&p).unwrap();
    let x: Vec<u16> = (0..N * 6).map(|i| i as u16).collect();
    write(&f, "x", &x, &[N, 3, 2]);
    write(&f, "y", &[1i32; N], &[N]);
    drop(f);
    let want = Expect { inputs: 6, outputs: 2, loss: LossKind::SoftmaxCrossEntropy };
    let s = Shard::open(
        &cfg(&p, ""),
        "data.train",
        &p.display().to_string(),
        0,
        1,
        want,
        &crate::data::classes::Reference::Unknown,
    )
    .unwrap();
    let mut out = vec![0.0; 2 * 6];
    s.read_rows(3, 2, &mut out).unwrap();
    assert_eq!(out, (18..30).map(|v| v as f32).collect::<Vec<_>>());
    let e = rows(&cfg(&p, ""), &p, classes(2)).err().unwrap().to_string();
    assert!(
        e.contains("x: has 3 × 2 = 6 features per sample but the model's input width (model.layers[0]) is 3"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `data.sample_weight`: one weight per row, [N] or [N, 1], of any number type or bool, read
/// for the shard's rows of every `{rank}` file in order; a missing dataset, a wrong length,
/// a negative or non-finite weight (or one beyond float32) are errors naming the file, the
/// dataset and the row.
#[test]
fn sample_weights_of_every_type_and_their_errors() {
    let d = dir("sample-weights");
    let x: Vec<f32> = (0..N * D).map(|i| i as f32).collect();
    let y: Vec<i32> = (0..N as i32).map(|i| i % 3).collect();
    let file = |name: &str, w: Option<(&str, &dyn Fn(&hdf5::File))>| {
        let p = d.join(name);
        let f = hdf5::File::create(&p).unwrap();
        write(&f, "x", &x, &[N, D]);
        write(&f, "y", &y, &[N]);
        if let Some((_, put)) = w {
            put(&f);
        }
        p
    };
    let open = |p: &Path| -> Result<Vec<f32>> {
        let cfg = cfg(p, "sample_weight = \"w\"");
        let mut s = Shard::open(&cfg, "data.train", &p.display().to_string(), 0, 1, classes(3), &Reference::Unknown)?;
        assert!(s.sample_weights.is_none(), "weights are read only when asked for");
        s.load_sample_weights("w")?;
        Ok(s.sample_weights.unwrap())
    };
    let want = [0.5f32, 2.0, 0.0, 1.0, 3.0, 1.5];
    let p = file("f32.h5", Some(("w", &|f| write(f, "w", &want, &[N]))));
    assert_eq!(open(&p).unwrap(), want);
    let p = file("col.h5", Some(("w", &|f| write(f, "w", &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[N, 1]))));
    assert_eq!(open(&p).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let p = file("u8.h5", Some(("w", &|f| write(f, "w", &[0u8, 1, 2, 3, 4, 255], &[N]))));
    assert_eq!(open(&p).unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 255.0]);
    let p = file("bool.h5", Some(("w", &|f| write(f, "w", &[true, false, true, true, false, true], &[N]))));
    assert_eq!(open(&p).unwrap(), [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]);
    // `{rank}` files: the rows of file 0, then file 1.
    file("part-0.h5", Some(("w", &|f| write(f, "w", &[1.0f32; N], &[N]))));
    file("part-1.h5", Some(("w", &|f| write(f, "w", &[2.0f32; N], &[N]))));
    let parts = open(&d.join("part-{rank}.h5")).unwrap();
    assert_eq!(parts, [[1.0f32; N], [2.0; N]].concat());

    let err = |p: &Path| open(p).unwrap_err().to_string();
    let e = err(&file("none.h5", None));
    assert!(e.contains("none.h5") && e.contains("w: dataset not found (the file has: [x, y])"), "{e}");
    assert!(e.contains("data.sample_weight"), "{e}");
    let e = err(&file("short.h5", Some(("w", &|f| write(f, "w", &[1.0f32; N - 1], &[N - 1])))));
    assert!(e.contains("short.h5") && e.contains("one weight per row of x (6 rows), found shape [5]"), "{e}");
    let e = err(&file("wide.h5", Some(("w", &|f| write(f, "w", &[1.0f32; 2 * N], &[N, 2])))));
    assert!(e.contains("found shape [6, 2]"), "{e}");
    let e = err(&file("neg.h5", Some(("w", &|f| write(f, "w", &[1.0f32, 1.0, 1.0, -0.5, 1.0, 1.0], &[N])))));
    assert!(e.contains("neg.h5") && e.contains("sample weight -0.5 at row 3 is negative"), "{e}");
    let e = err(&file("nan.h5", Some(("w", &|f| write(f, "w", &[1.0f32, f32::NAN, 1.0, 1.0, 1.0, 1.0], &[N])))));
    assert!(e.contains("sample weight NaN at row 1 is not finite"), "{e}");
    let e = err(&file("big.h5", Some(("w", &|f| write(f, "w", &[1.0f64, 1.0, 1.0, 1.0, 1e300, 1.0], &[N])))));
    assert!(e.contains("at row 4 is not finite (or too large for float32)"), "{e}");
}
