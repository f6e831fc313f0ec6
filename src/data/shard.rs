//! `Shard`: this rank's part of a dataset, opened and validated up front (shapes, types,
//! label range, finite targets), with the features `x` read lazily by rows.
//!
//! A path containing `{rank}` names numbered files `0, 1, 2, ...` (as many as exist,
//! counted from 0): rank r reads files r, r+N, r+2N, ... whole, so every file is read by
//! someone; fewer files than ranks is an error. Otherwise every rank opens the same file and
//! takes its own contiguous slice, rows [r*n/N, (r+1)*n/N), which together cover every row.
//! A shard of several files is their rows one after another.

use super::h5;
use crate::config::{DataCfg, LossKind};
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
}

pub struct Shard {
    pub x_name: String,
    pub features: usize,
    pub labels: Labels,
    parts: Vec<Part>,
    len: usize,
}

/// The files this rank reads, with their numbers, and whether it reads them whole (a
/// `{rank}` template) or a slice of one file. `key` names the job field in errors.
pub fn files(template: &str, key: &str, rank: usize, ranks: usize) -> Result<(Vec<(usize, PathBuf)>, bool)> {
    if !template.contains("{rank}") {
        return Ok((vec![(0, PathBuf::from(template))], false));
    }
    let path = |i: usize| PathBuf::from(template.replace("{rank}", &i.to_string()));
    let found = (0..).take_while(|&i| path(i).exists()).count();
    if rank >= found {
        let which = match found {
            0 => format!("matches no file ({} does not exist)", path(0).display()),
            1 => format!("matches 1 file ({})", path(0).display()),
            n => format!("matches {n} files ({} to {})", path(0).display(), path(n - 1).display()),
        };
        return Err(Error::data(
            &path(rank),
            key,
            format!(
                "no such file: `{template}` {which} but the job has {ranks} ranks, so rank {rank} has none to read; \
                 every rank needs at least one file: give {ranks} or more (`hvtrain data shard FILE --parts {ranks}`), \
                 or run with at most {found} rank(s)"
            ),
        ));
    }
    Ok(((rank..found).step_by(ranks).map(|i| (i, path(i))).collect(), true))
}

impl Shard {
    pub fn open(cfg: &DataCfg, key: &str, template: &str, rank: usize, ranks: usize, want: Expect) -> Result<Shard> {
        let (paths, whole) = files(template, key, rank, ranks)?;
        let mut parts = Vec::with_capacity(paths.len());
        let mut labels: Option<Labels> = None;
        let mut len = 0;
        for (number, path) in paths {
            let (part, l) = open_part(cfg, key, &path, number, whole, rank, ranks, want, len)?;
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
        if len == 0 {
            let p = &parts[0];
            let what = match parts.len() {
                1 => format!("the file has 0 rows for {ranks} ranks"),
                n => format!("its {n} files have 0 rows"),
            };
            return Err(Error::data(&p.path, &cfg.x_dataset, format!("rank {rank} gets no samples: {what}")));
        }
        Ok(Shard {
            x_name: cfg.x_dataset.clone(),
            features: want.inputs,
            labels: labels.expect("at least one file"),
            parts,
            len,
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
    /// rejecting NaN or infinite features with the file row that holds them.
    pub fn read_rows(&self, start: usize, count: usize, out: &mut [f32]) -> Result<()> {
        let d = self.features;
        let (mut at, mut done) = (start, 0);
        while done < count {
            let p = &self.parts[self.part_of(at)];
            let a = p.rows.start + (at - p.first);
            let n = (count - done).min(p.rows.end - a);
            read_part(p, &self.x_name, a, n, d, &mut out[done * d..(done + n) * d])?;
            (at, done) = (at + n, done + n);
        }
        Ok(())
    }
}

/// Read file rows a..a+n of one part into `out`, rejecting non-finite values.
fn read_part(p: &Part, x_name: &str, a: usize, n: usize, d: usize, out: &mut [f32]) -> Result<()> {
    let arr =
        p.x.read_slice_2d::<f32, _>((a..a + n, ..))
            .map_err(|e| Error::hdf5(&p.path, format!("read {} rows {}..{}", x_name, a, a + n), e))?;
    let src = arr.as_slice().expect("hdf5 returns standard-layout arrays");
    if let Some(i) = src.iter().position(|v| !v.is_finite()) {
        return Err(Error::data(
            &p.path,
            x_name,
            format!("non-finite value {} at row {}, column {}", src[i], a + i / d, i % d),
        ));
    }
    out[..src.len()].copy_from_slice(src);
    Ok(())
}

/// Open and validate one file; its labels are read whole (this rank's rows of them).
#[allow(clippy::too_many_arguments)]
fn open_part(
    cfg: &DataCfg,
    key: &str,
    path: &Path,
    number: usize,
    whole: bool,
    rank: usize,
    ranks: usize,
    want: Expect,
    first: usize,
) -> Result<(Part, Labels)> {
    let path = path.to_path_buf();
    let file = h5::open(&path, key)?;
    let xn = cfg.x_dataset.as_str();
    let yn = cfg.y_dataset.as_str();
    let x = h5::dataset(&file, &path, xn)?;
    let y = h5::dataset(&file, &path, yn)?;

    let xs = x.shape();
    let x_kind = h5::kind(&x, &path, xn)?;
    if xs.len() != 2 || x_kind != "float" {
        return Err(Error::data(
            &path,
            xn,
            format!("must be a 2-D float32 array [samples, features], found shape {xs:?} of {x_kind}"),
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
    let rows = if whole { 0..n } else { rank * n / ranks..(rank + 1) * n / ranks };
    if rows.is_empty() && !whole {
        return Err(Error::data(
            &path,
            xn,
            format!("rank {rank} gets no samples: the file has {n} rows for {ranks} ranks"),
        ));
    }
    let k = want.outputs;
    let labels = match want.loss {
        LossKind::SoftmaxCrossEntropy => {
            let y_kind = h5::kind(&y, &path, yn)?;
            if ys.len() != 1 || y_kind != "int" {
                return Err(Error::data(
                    &path,
                    yn,
                    format!("softmax_cross_entropy needs 1-D integer class labels, found shape {ys:?} of {y_kind}"),
                ));
            }
            let v: Vec<i32> = y
                .read_slice_1d::<i32, _>(rows.clone())
                .map_err(|e| Error::hdf5(&path, format!("read {yn}"), e))?
                .to_vec();
            if let Some(i) = v.iter().position(|&c| c < 0 || c as usize >= k) {
                return Err(Error::data(
                    &path,
                    yn,
                    format!(
                        "label {} at row {} is out of range: the model has {k} classes, so labels must be in 0..{}",
                        v[i],
                        rows.start + i,
                        k - 1
                    ),
                ));
            }
            Labels::Classes(v)
        }
        LossKind::Mse => {
            let width = if ys.len() == 1 { 1 } else { ys[1] };
            if ys.len() > 2 || width != k || h5::kind(&y, &path, yn)? != "float" {
                return Err(Error::data(
                    &path,
                    yn,
                    format!("mse needs float targets [samples, {k}] (the model's output width), found shape {ys:?}"),
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
    Ok((Part { path, number, rows, first, _file: file, x }, labels))
}
