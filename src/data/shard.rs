//! `Shard`: a dataset, or one rank's slice of it, opened and validated up front (shapes,
//! types, label range, finite targets), with the features `x` read lazily by rows.
//!
//! `x` may be stored as any integer or float type; rows are converted to float32 as they are
//! read, with `data.x_scale` and `data.x_offset` applied (x * scale + offset, computed in
//! float64 and rounded once). Class labels may be any integer type, regression targets any
//! integer or float type (read as float32, not scaled).
//!
//! A path containing `{rank}` names numbered files `0, 1, 2, ...` (as many as exist,
//! counted from 0), whatever the rank count; otherwise it is one file. The dataset's global
//! rows are its files' rows one after another, in file order. Training opens them all (every
//! rank: the loader takes each step's rows from anywhere, see `order.rs`), keeping a handle
//! per file; evaluation gives rank r of N the global rows [r*n/N, (r+1)*n/N). The labels of
//! the opened rows are read whole (4 bytes a row for classes).

use super::h5::{self, with_elem, Elem, Num};
use crate::config::{num, DataCfg, LossKind};
use crate::error::{Error, Result};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// What the model expects of the data (the shard knows nothing else of the model).
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// Features per sample (model.layers[0]).
    pub inputs: usize,
    /// Classes, or regression targets per sample (the last layer's width).
    pub outputs: usize,
    pub loss: LossKind,
}

/// Targets of a whole shard, kept in memory (they are small next to `x`).
#[derive(Clone, Debug)]
pub enum Labels {
    Classes(Vec<i32>),
    /// Row-major [rows, k].
    Values(Vec<f32>, usize),
}

/// One file's rows of a shard.
struct Part {
    path: PathBuf,
    /// The file's number (the `{rank}` value; 0 for a single file).
    number: usize,
    /// Rows of the file that belong to this rank.
    rows: Range<usize>,
    /// Shard row of `rows.start`.
    first: usize,
    _file: hdf5::File,
    x: hdf5::Dataset,
    /// How `x` is stored.
    elem: Elem,
}

/// What `read_rows` does to each stored feature value: None keeps it (converted to float32),
/// Some((scale, offset)) gives value * scale + offset.
pub type Affine = Option<(f64, f64)>;

pub struct Shard {
    pub x_name: String,
    pub features: usize,
    pub labels: Labels,
    parts: Vec<Part>,
    len: usize,
    affine: Affine,
}

/// Every file of the dataset, with its number: the numbered files `0, 1, 2, ...` of a
/// `{rank}` template (as many as exist, counted from 0), else the one path. `key` names the
/// job field in errors.
pub fn files(template: &str, key: &str) -> Result<Vec<(usize, PathBuf)>> {
    if !template.contains("{rank}") {
        return Ok(vec![(0, PathBuf::from(template))]);
    }
    let path = |i: usize| PathBuf::from(template.replace("{rank}", &i.to_string()));
    let found = (0..).take_while(|&i| path(i).exists()).count();
    if found == 0 {
        return Err(Error::data(
            &path(0),
            key,
            format!("no such file: `{template}` matches no file ({} does not exist)", path(0).display()),
        ));
    }
    Ok((0..found).map(|i| (i, path(i))).collect())
}

impl Shard {
    /// Rank `rank` of `ranks`' slice of the dataset's global rows (every file's rows one after
    /// another, in file order): rows [rank·n/ranks, (rank+1)·n/ranks). Training opens it whole
    /// (rank 0 of 1) and the loader picks each step's rows; evaluation splits the test data.
    pub fn open(cfg: &DataCfg, key: &str, template: &str, rank: usize, ranks: usize, want: Expect) -> Result<Shard> {
        let mut opened = Vec::new();
        for (number, path) in files(template, key)? {
            let f = open_file(cfg, key, &path, want)?;
            if f.n == 0 {
                return Err(Error::data(&path, &cfg.x_dataset, "gets no samples: the file has 0 rows"));
            }
            opened.push((number, path, f));
        }
        let total: usize = opened.iter().map(|o| o.2.n).sum();
        let (lo, hi) = (rank * total / ranks, (rank + 1) * total / ranks);
        if lo == hi {
            return Err(Error::data(
                &opened[0].1,
                &cfg.x_dataset,
                format!("rank {rank} gets no samples: the data has {total} rows for {ranks} ranks"),
            ));
        }
        let mut parts = Vec::with_capacity(opened.len());
        let mut labels: Option<Labels> = None;
        let (mut len, mut at) = (0, 0);
        for (number, path, f) in opened {
            let rows = lo.max(at) - at..hi.min(at + f.n).max(lo.max(at)) - at;
            at += f.n;
            if rows.is_empty() {
                continue;
            }
            let (part, l) = f.part(cfg, path, number, rows, want, len)?;
            len += part.rows.len();
            labels = Some(match (labels, l) {
                (None, l) => l,
                (Some(Labels::Classes(mut a)), Labels::Classes(b)) => {
                    a.extend(b);
                    Labels::Classes(a)
                }
                (Some(Labels::Values(mut a, k)), Labels::Values(b, _)) => {
                    a.extend(b);
                    Labels::Values(a, k)
                }
                _ => unreachable!("one loss, one kind of labels"),
            });
            parts.push(part);
        }
        Ok(Shard {
            x_name: cfg.x_dataset.clone(),
            features: want.inputs,
            labels: labels.expect("at least one file"),
            parts,
            len,
            affine: affine_of(cfg),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The files and rows this shard reads, for the log: `d-0.h5 rows 0..70, d-2.h5 rows 0..25`.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        for p in &self.parts {
            v.push(format!("{} rows {}..{}", p.path.display(), p.rows.start, p.rows.end));
        }
        v.join(", ")
    }

    /// Which row of which file shard row `i` is: (file number, row in the file).
    pub fn row_id(&self, i: usize) -> (usize, usize) {
        let p = &self.parts[self.part_of(i)];
        (p.number, p.rows.start + (i - p.first))
    }

    fn part_of(&self, i: usize) -> usize {
        self.parts.partition_point(|p| p.first + p.rows.len() <= i)
    }

    /// Read `count` rows starting at shard row `start` into `out` ([count, features]),
    /// converted to float32 with the scale and offset applied, rejecting NaN or infinite
    /// results with the file row that holds them.
    pub fn read_rows(&self, start: usize, count: usize, out: &mut [f32]) -> Result<()> {
        let d = self.features;
        let (mut at, mut done) = (start, 0);
        while done < count {
            let p = &self.parts[self.part_of(at)];
            let a = p.rows.start + (at - p.first);
            let n = (count - done).min(p.rows.end - a);
            let dst = &mut out[done * d..(done + n) * d];
            with_elem!(p.elem, T => read_part::<T>(p, &self.x_name, a, n, d, self.affine, dst))?;
            (at, done) = (at + n, done + n);
        }
        Ok(())
    }
}

/// The scale and offset of `data` (None when they leave values as stored).
pub fn affine_of(cfg: &DataCfg) -> Affine {
    (cfg.x_scale != 1.0 || cfg.x_offset != 0.0).then_some((cfg.x_scale, cfg.x_offset))
}

/// Read file rows a..a+n of one part into `out` as float32 (see `read_x`).
fn read_part<T: Num>(
    p: &Part,
    x_name: &str,
    a: usize,
    n: usize,
    d: usize,
    affine: Affine,
    out: &mut [f32],
) -> Result<()> {
    read_x::<T>(&p.x, &p.path, p.elem, x_name, a, n, d, affine, out)
}

/// Read rows a..a+n of dataset `x` (file `path`, stored as `T`, element type `elem`) into
/// `out` as float32, scale and offset applied, rejecting non-finite results with the row.
/// Training's shards and `predict` read inputs through this one function.
#[allow(clippy::too_many_arguments)]
pub fn read_x<T: Num>(
    x: &hdf5::Dataset,
    path: &Path,
    elem: Elem,
    x_name: &str,
    a: usize,
    n: usize,
    d: usize,
    affine: Affine,
    out: &mut [f32],
) -> Result<()> {
    let arr = x
        .read_slice_2d::<T, _>((a..a + n, ..))
        .map_err(|e| Error::hdf5(path, format!("read {} rows {}..{}", x_name, a, a + n), e))?;
    let src = arr.as_slice().expect("hdf5 returns standard-layout arrays");
    let out = &mut out[..src.len()];
    match affine {
        None => out.iter_mut().zip(src).for_each(|(o, &v)| *o = v.to_f32()),
        Some((scale, offset)) => out.iter_mut().zip(src).for_each(|(o, &v)| *o = (v.to_f64() * scale + offset) as f32),
    }
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        let mut msg = format!("non-finite value {} at row {}, column {}", out[i], a + i / d, i % d);
        let stored = match elem {
            Elem::F32 | Elem::F64 | Elem::F16 => num(src[i].to_f64()),
            _ => src[i].to_string(),
        };
        if let Some((scale, offset)) = affine {
            msg += &format!(
                " after scaling (stored {} value {stored}, data.x_scale {}, data.x_offset {})",
                elem.name(),
                num(scale),
                num(offset)
            );
        } else if elem != Elem::F32 {
            msg += &format!(" after conversion to float32 (stored {} value {stored})", elem.name());
        }
        return Err(Error::data(path, x_name, msg));
    }
    Ok(())
}

/// One file, opened and its shapes checked; its labels not read yet.
struct OpenFile {
    file: hdf5::File,
    x: hdf5::Dataset,
    y: hdf5::Dataset,
    elem: Elem,
    n: usize,
}

/// Open one file and check its datasets' shapes and types against the model.
fn open_file(cfg: &DataCfg, key: &str, path: &Path, want: Expect) -> Result<OpenFile> {
    let path = path.to_path_buf();
    let file = h5::open(&path, key)?;
    let xn = cfg.x_dataset.as_str();
    let yn = cfg.y_dataset.as_str();
    let x = h5::dataset(&file, &path, xn)?;
    let y = h5::dataset(&file, &path, yn)?;

    let xs = x.shape();
    let need =
        "x must be a 2-D array [samples, features] of integers (int8 to uint64) or floats (float16, float32, float64)";
    let elem = h5::elem(&x, &path, xn, need)?;
    if xs.len() != 2 {
        return Err(Error::data(
            &path,
            xn,
            format!("must be a 2-D array [samples, features], found shape {xs:?} of {}", elem.name()),
        ));
    }
    let (n, d) = (xs[0], xs[1]);
    if d != want.inputs {
        return Err(Error::data(
            &path,
            xn,
            format!("has {d} features per sample but the model's input width (model.layers[0]) is {}", want.inputs),
        ));
    }
    let ys = y.shape();
    if ys.first() != Some(&n) {
        return Err(Error::data(
            &path,
            yn,
            format!(
                "has {} rows but {xn} has {n}; x and y must have one row per sample",
                ys.first().copied().unwrap_or(0)
            ),
        ));
    }
    Ok(OpenFile { file, x, y, elem, n })
}

impl OpenFile {
    /// The part of this shard in file rows `rows`, with its labels read (and checked) whole.
    fn part(
        self,
        cfg: &DataCfg,
        path: PathBuf,
        number: usize,
        rows: Range<usize>,
        want: Expect,
        first: usize,
    ) -> Result<(Part, Labels)> {
        let OpenFile { file, x, y, elem, .. } = self;
        let yn = cfg.y_dataset.as_str();
        let ys = y.shape();
        let k = want.outputs;
        let labels = match want.loss {
            LossKind::SoftmaxCrossEntropy => {
                let y_kind = h5::kind(&y, &path, yn)?;
                if ys.len() != 1 || y_kind != "int" {
                    return Err(Error::data(
                        &path,
                        yn,
                        format!(
                            "softmax_cross_entropy needs 1-D integer class labels, found shape {ys:?} of {}",
                            type_name(&y)
                        ),
                    ));
                }
                let need = "class labels must be integers (int8 to uint64)";
                let v =
                    with_elem!(h5::elem(&y, &path, yn, need)?, T => read_labels::<T>(&y, &path, yn, rows.clone(), k))?;
                Labels::Classes(v)
            }
            LossKind::Mse => {
                let width = if ys.len() == 1 { 1 } else { ys[1] };
                let y_kind = h5::kind(&y, &path, yn)?;
                if ys.len() > 2 || width != k || y_kind == "other" {
                    return Err(Error::data(
                    &path,
                    yn,
                    format!(
                        "mse needs numeric targets [samples, {k}] (the model's output width; floats or integers), found shape {ys:?} of {}",
                        type_name(&y)
                    ),
                ));
                }
                let v: Vec<f32> = if ys.len() == 1 {
                    y.read_slice_1d::<f32, _>(rows.clone()).map(|a| a.to_vec())
                } else {
                    y.read_slice_2d::<f32, _>((rows.clone(), ..)).map(|a| a.iter().copied().collect())
                }
                .map_err(|e| Error::hdf5(&path, format!("read {yn}"), e))?;
                if let Some(i) = v.iter().position(|t| !t.is_finite()) {
                    return Err(Error::data(
                        &path,
                        yn,
                        format!("non-finite target {} at row {}", v[i], rows.start + i / k),
                    ));
                }
                Labels::Values(v, k)
            }
        };
        Ok((Part { path, number, rows, first, _file: file, x, elem }, labels))
    }
}

/// The element type of `ds` as a person reads it (`uint8`, `compound (2 fields)`).
fn type_name(ds: &hdf5::Dataset) -> String {
    ds.dtype().and_then(|t| t.to_descriptor()).map(|d| d.to_string()).unwrap_or_else(|_| "an unknown type".into())
}

/// Class labels `rows` of `y`, stored as `T`, checked to be in 0..k, as i32.
fn read_labels<T: Num>(y: &hdf5::Dataset, path: &Path, yn: &str, rows: Range<usize>, k: usize) -> Result<Vec<i32>> {
    let raw = y.read_slice_1d::<T, _>(rows.clone()).map_err(|e| Error::hdf5(path, format!("read {yn}"), e))?;
    let mut v = Vec::with_capacity(raw.len());
    for (i, &c) in raw.iter().enumerate() {
        let c = c.to_i128();
        if c < 0 || c >= k as i128 {
            return Err(Error::data(
                path,
                yn,
                format!(
                    "label {c} at row {} is out of range: the model has {k} classes, so labels must be in 0..{}",
                    rows.start + i,
                    k - 1
                ),
            ));
        }
        v.push(c as i32);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdf5::H5Type;

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
        let s = Shard::open(cfg, "data.train", &path.display().to_string(), 0, 1, want)?;
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
        check::<u16>(
            &(0..N * D).map(|i| (i * 4099) as u16).collect::<Vec<_>>(),
            |c| Some(c as u16),
            1.0 / 65535.0,
            -0.5,
        );
        check::<i16>(&(0..N * D).map(|i| s(i) as i16 * 3000).collect::<Vec<_>>(), |c| Some(c as i16), 0.001, 2.0);
        check::<u32>(&(0..N * D).map(|i| i as u32 * 238_609_294).collect::<Vec<_>>(), |c| Some(c as u32), 1.0, 0.0);
        check::<i32>(&(0..N * D).map(|i| s(i) as i32 * 100_003).collect::<Vec<_>>(), |c| Some(c), 1e-5, 0.0);
        // Beyond 2^24 (float32's exact integers) and 2^53 (float64's): rounded as `as` does.
        check::<u64>(
            &(0..N * D).map(|i| u64::MAX - i as u64 * 1_000_000_007).collect::<Vec<_>>(),
            |c| Some(c as u64),
            1.0,
            0.0,
        );
        check::<i64>(
            &(0..N * D).map(|i| s(i) * 1_000_000_000_007).collect::<Vec<_>>(),
            |c| Some(c as i64),
            1e-12,
            0.25,
        );
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
        want[1] = 0.0999755859375; // float16's nearest to 0.1
        want[31] = 65504.0;
        let expect = Expect { inputs: 4, outputs: 3, loss: LossKind::SoftmaxCrossEntropy };
        let read = |extra: &str| {
            let s = Shard::open(&cfg(&p, extra), "data.train", p.to_str().unwrap(), 0, 1, expect).unwrap();
            let mut out = vec![0.0; 32];
            s.read_rows(0, 8, &mut out).unwrap();
            (out, s.labels.clone())
        };
        let (x, y) = read("");
        assert_eq!(x, want);
        assert!(matches!(y, Labels::Classes(v) if v == [0, 1, 2, 0, 1, 2, 0, 1]));
        let (x, _) = read("x_scale = 0.5\nx_offset = 1.0");
        assert_eq!(x, want.iter().map(|&v| (v as f64 * 0.5 + 1.0) as f32).collect::<Vec<_>>());
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
        assert!(e.contains("d.h5: s: element type string (len 4) is not supported; x must be a 2-D array"), "{e}");
        let e = rows(&cfg(&p, "x_dataset = \"c\""), &p, classes(2)).err().unwrap().to_string();
        assert!(e.contains("d.h5: c: element type compound (2 fields) is not supported"), "{e}");
        let e = rows(&cfg(&p, "x_dataset = \"c\"\ny_dataset = \"ys\""), &p, classes(2)).err().unwrap().to_string();
        assert!(e.contains("d.h5: c: element type compound"), "{e}");
        let e = rows(&cfg(&p, "y_dataset = \"ys\"\nx_dataset = \"y\""), &p, classes(2)).err().unwrap().to_string();
        assert!(e.contains("d.h5: y: must be a 2-D array [samples, features], found shape [6] of int32"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
