//! `Shard`: this rank's part of a dataset in one HDF5 file, opened and validated up front
//! (shapes, types, label range, finite targets), with the features `x` read lazily by rows.
//!
//! A path containing `{rank}` names one file per rank, read whole. Otherwise every rank
//! opens the same file and takes its own contiguous slice: rows [r*N/n, (r+1)*N/n).

use super::h5;
use crate::config::{DataCfg, LossKind};
use crate::error::{Error, Result};
use crate::model::Mlp;
use std::ops::Range;
use std::path::PathBuf;

/// Targets of a whole shard, kept in memory (they are small next to `x`).
#[derive(Clone, Debug)]
pub enum Labels {
    Classes(Vec<i32>),
    /// Row-major [rows, k].
    Values(Vec<f32>, usize),
}

pub struct Shard {
    pub path: PathBuf,
    pub x_name: String,
    /// Rows of the file that belong to this rank.
    pub rows: Range<usize>,
    pub features: usize,
    pub labels: Labels,
    _file: hdf5::File,
    x: hdf5::Dataset,
}

/// The file this rank reads, and whether it reads all of it.
pub fn resolve(template: &str, rank: usize) -> (PathBuf, bool) {
    if template.contains("{rank}") {
        (PathBuf::from(template.replace("{rank}", &rank.to_string())), true)
    } else {
        (PathBuf::from(template), false)
    }
}

impl Shard {
    pub fn open(cfg: &DataCfg, key: &str, template: &str, rank: usize, ranks: usize, model: &Mlp) -> Result<Shard> {
        let (path, whole) = resolve(template, rank);
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
        if d != model.n_inputs() {
            return Err(Error::data(
                &path,
                xn,
                format!(
                    "has {d} features per sample but the model's input width (model.layers[0]) is {}",
                    model.n_inputs()
                ),
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
        if rows.is_empty() {
            return Err(Error::data(
                &path,
                xn,
                format!("rank {rank} gets no samples: the file has {n} rows for {ranks} ranks"),
            ));
        }
        let k = model.n_outputs();
        let labels = match model.loss {
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
                        format!(
                            "mse needs float targets [samples, {k}] (the model's output width), found shape {ys:?}"
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
        Ok(Shard { path, x_name: xn.to_string(), rows, features: d, labels, _file: file, x })
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Read `count` rows starting at shard row `start` into `out` ([count, features]),
    /// rejecting NaN or infinite features with the file row that holds them.
    pub fn read_rows(&self, start: usize, count: usize, out: &mut [f32]) -> Result<()> {
        let a = self.rows.start + start;
        let arr = self
            .x
            .read_slice_2d::<f32, _>((a..a + count, ..))
            .map_err(|e| Error::hdf5(&self.path, format!("read {} rows {}..{}", self.x_name, a, a + count), e))?;
        let src = arr.as_slice().expect("hdf5 returns standard-layout arrays");
        if let Some(i) = src.iter().position(|v| !v.is_finite()) {
            return Err(Error::data(
                &self.path,
                &self.x_name,
                format!("non-finite value {} at row {}, column {}", src[i], a + i / self.features, i % self.features),
            ));
        }
        out[..src.len()].copy_from_slice(src);
        Ok(())
    }
}
