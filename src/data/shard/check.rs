//! One file of a shard, opened and checked against what the model expects: `x` an array
//! [samples, features] (or [samples, d1, d2, ...], read flattened) of numbers with the model's
//! input width, `y` one row per sample, class labels in range (indices
//! [N] or [N, 1] stored as integers, whole-number floats or bool, or one-hot rows [N, k]) or
//! regression targets numeric and finite; the labels of the shard's rows read whole.
//! Must not read `x` (that is `read.rs`'s, by rows, when the loader asks).

use super::Part;
use crate::config::{DataCfg, LossKind, Targets};
use crate::data::classes::{self, Relation};
use crate::data::h5::{self, with_elem, Elem, Num};
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
    /// Regression targets, row-major [rows, k].
    Values(Vec<f32>, usize),
    /// Multi-label targets of 0 and 1, row-major [rows, k] (binary cross-entropy).
    Bits(Vec<f32>, usize),
}

impl Labels {
    /// The targets as values [rows, k] (regression or multi-label), with k.
    pub fn values(&self) -> Option<(&[f32], usize)> {
        match self {
            Labels::Values(v, k) | Labels::Bits(v, k) => Some((v, *k)),
            Labels::Classes(_) => None,
        }
    }
}

/// One file, opened and its shapes checked; its labels not read yet.
pub(super) struct OpenFile {
    file: hdf5::File,
    x: hdf5::Dataset,
    y: hdf5::Dataset,
    elem: Elem,
    pub n: usize,
    /// Class names stored beside the labels (`y_classes`), read for a classifier.
    pub names: Option<Vec<String>>,
    /// The names of x's and y's columns (`x_columns`, `y_columns`), when the file has them.
    pub columns: crate::data::columns::Columns,
}

/// Open one file and check its datasets' shapes and types against the model.
pub(super) fn open_file(cfg: &DataCfg, key: &str, path: &Path, want: Expect) -> Result<OpenFile> {
    let path = path.to_path_buf();
    let file = h5::open(&path, key)?;
    let xn = cfg.x_dataset.as_str();
    let yn = cfg.y_dataset.as_str();
    let x = h5::dataset(&file, &path, xn)?;
    let y = h5::dataset(&file, &path, yn)?;

    let xs = x.shape();
    let need = "x must be an array [samples, features] (or [samples, d1, d2, ...], read flattened) of integers \
                (int8 to uint64) or floats (float16, float32, float64)";
    let elem = h5::elem(&x, &path, xn, need)?;
    let Some(d) = h5::features(&xs) else {
        return Err(Error::data(
            &path,
            xn,
            format!(
                "must be a 2-D array [samples, features] (or [samples, d1, d2, ...]), found shape {xs:?} of {}",
                elem.name()
            ),
        ));
    };
    let n = xs[0];
    if d != want.inputs {
        return Err(Error::data(
            &path,
            xn,
            format!(
                "has {} features per sample but the model's input width (model.layers[0]) is {}",
                h5::features_text(&xs),
                want.inputs
            ),
        ));
    }
    if xs.len() > 2 && crate::sys::rank().unwrap_or(0) == 0 {
        log::info!("{}: {xn} {xs:?} is read as [{n}, {d}] (each sample's values in row-major order)", path.display());
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
    let names = match want.loss {
        LossKind::SoftmaxCrossEntropy => classes::read(&file, &path, yn)?,
        _ => None,
    };
    let columns = crate::data::columns::Columns::of(&file, &path, xn, yn)?;
    Ok(OpenFile { file, x, y, elem, n, names, columns })
}

impl OpenFile {
    /// The part of this shard in file rows `rows`, with its labels read (and checked) whole,
    /// a classifier's through `relation`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn part(
        self,
        cfg: &DataCfg,
        path: PathBuf,
        number: usize,
        rows: Range<usize>,
        want: Expect,
        first: usize,
        relation: &Relation,
    ) -> Result<(Part, Labels)> {
        let OpenFile { file, x, y, elem, .. } = self;
        let yn = cfg.y_dataset.as_str();
        let ys = y.shape();
        let k = want.outputs;
        let labels = match want.loss {
            LossKind::SoftmaxCrossEntropy => {
                let remap = match relation {
                    Relation::AsStored => None,
                    Relation::Remap(t) => Some(t.as_slice()),
                };
                Labels::Classes(class_labels(&y, &path, yn, rows.clone(), k, remap)?)
            }
            loss => {
                let name = loss.name();
                let width = if ys.len() == 1 { 1 } else { ys[1] };
                // A float16 has no descriptor for `kind`; `elem` knows it, and HDF5 converts it.
                let y_kind = match h5::kind(&y, &path, yn) {
                    Err(_) if h5::elem(&y, &path, yn, "").ok() == Some(Elem::F16) => "float",
                    k => k?,
                };
                let bits = y_kind == "bool";
                if ys.len() > 2 || width != k || y_kind == "other" {
                    return Err(Error::data(
                        &path,
                        yn,
                        format!(
                            "{name} needs numeric targets [samples, {k}] (the model's output width; floats, \
                             integers or bool), found shape {ys:?} of {}",
                            type_name(&y)
                        ),
                    ));
                }
                let read = |e| Error::hdf5(&path, format!("read {yn}"), e);
                // bool (multi-label targets as numpy keeps them) as 0 and 1: HDF5 converts no
                // enum to float.
                let v: Vec<f32> = if bits {
                    h5::read_rows::<bool>(&y, rows.clone()).map_err(read)?.into_iter().map(f32::from).collect()
                } else {
                    h5::read_rows::<f32>(&y, rows.clone()).map_err(read)?
                };
                if let Some(i) = v.iter().position(|t| !t.is_finite()) {
                    return Err(Error::data(
                        &path,
                        yn,
                        format!("non-finite target {} at row {}", v[i], rows.start + i / k),
                    ));
                }
                if loss.targets() == Targets::MultiLabel {
                    if let Some(i) = v.iter().position(|&t| t != 0.0 && t != 1.0) {
                        return Err(Error::data(
                            &path,
                            yn,
                            format!(
                                "binary_cross_entropy needs targets 0 or 1 (one column per label), found {} at row {} column {}",
                                v[i],
                                rows.start + i / k,
                                i % k
                            ),
                        ));
                    }
                    Labels::Bits(v, k)
                } else {
                    Labels::Values(v, k)
                }
            }
        };
        Ok((Part { path, number, rows, first, file, x, elem }, labels))
    }
}

/// The element type of `ds` as a person reads it (`uint8`, `compound (2 fields)`).
fn type_name(ds: &hdf5::Dataset) -> String {
    ds.dtype().and_then(|t| t.to_descriptor()).map(|d| d.to_string()).unwrap_or_else(|_| "an unknown type".into())
}

/// How a classifier's `y` holds the classes: an index per row ([samples] or [samples, 1],
/// a column vector as Keras takes them), or one-hot rows ([samples, classes]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Index,
    OneHot,
}

/// The layout of labels of shape `ys` for a model of `k` classes, if they have one.
fn layout(ys: &[usize], k: usize) -> Option<Layout> {
    match ys {
        [_] | [_, 1] => Some(Layout::Index),
        [_, w] if *w == k => Some(Layout::OneHot),
        _ => None,
    }
}

/// A classifier's labels, rows `rows` of `y`, as class numbers in 0..k: stored as indices
/// (any integer type, floats holding whole numbers, or bool) or one-hot rows (any number
/// type or bool), mapped through `remap` (the file's class c is `remap[c]`, see
/// `classes::relate`) when given.
fn class_labels(
    y: &hdf5::Dataset,
    path: &Path,
    yn: &str,
    rows: Range<usize>,
    k: usize,
    remap: Option<&[i32]>,
) -> Result<Vec<i32>> {
    let ys = y.shape();
    let Some(layout) = layout(&ys, k) else {
        return Err(Error::data(
            path,
            yn,
            format!(
                "softmax_cross_entropy needs class labels [samples] or [samples, 1] (class indices) or \
                 [samples, {k}] (one-hot, the model's {k} classes), found shape {ys:?} of {}",
                type_name(y)
            ),
        ));
    };
    let read = |e| Error::hdf5(path, format!("read {yn}"), e);
    // Not `?`: a float16 has no descriptor, and `elem` below reads it.
    if h5::kind(y, path, yn).ok() == Some("bool") {
        let v = h5::read_rows::<bool>(y, rows.clone()).map_err(read)?;
        return classes_of(v.iter().map(|&b| u8::from(b)), layout, path, yn, &rows, k, remap);
    }
    let need = "class labels must be numbers: integers (int8 to uint64), floats holding whole numbers, or bool";
    with_elem!(h5::elem(y, path, yn, need)?, T => {
        let v = h5::read_rows::<T>(y, rows.clone()).map_err(read)?;
        classes_of(v.iter().copied(), layout, path, yn, &rows, k, remap)
    })
}

/// Class numbers from stored values in `layout`, range-checked (after `remap`); errors name
/// the row and the stored value.
fn classes_of<S: Num>(
    v: impl ExactSizeIterator<Item = S>,
    layout: Layout,
    path: &Path,
    yn: &str,
    rows: &Range<usize>,
    k: usize,
    remap: Option<&[i32]>,
) -> Result<Vec<i32>> {
    let mut out = Vec::with_capacity(rows.len());
    let mut push = |i: usize, c: i128| -> Result<()> {
        let c = match remap {
            Some(t) if c < 0 || c >= t.len() as i128 => {
                return Err(Error::data(
                    path,
                    yn,
                    format!(
                        "label {c} at row {} has no class name: {} holds {} names, so labels must be in 0..{}",
                        rows.start + i,
                        classes::names_dataset(yn),
                        t.len(),
                        t.len().saturating_sub(1)
                    ),
                ))
            }
            Some(t) => t[c as usize] as i128,
            None => c,
        };
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
        out.push(c as i32);
        Ok(())
    };
    match layout {
        Layout::Index => {
            for (i, s) in v.enumerate() {
                let c = s.whole().ok_or_else(|| {
                    Error::data(
                        path,
                        yn,
                        format!(
                            "label {s} at row {} is not a whole number: class labels are class indices 0..{} \
                             (integers, or floats holding whole numbers)",
                            rows.start + i,
                            k - 1
                        ),
                    )
                })?;
                push(i, c)?;
            }
        }
        Layout::OneHot => {
            let v: Vec<S> = v.collect();
            for (i, row) in v.chunks(k).enumerate() {
                let mut one = None;
                for (j, &s) in row.iter().enumerate() {
                    let f = s.to_f64();
                    if f == 0.0 {
                        continue;
                    }
                    if f == 1.0 && one.is_none() {
                        one = Some(j);
                        continue;
                    }
                    let what = if f == 1.0 { "a second 1".to_string() } else { s.to_string() };
                    return Err(Error::data(
                        path,
                        yn,
                        format!(
                            "row {} is not one-hot: {what} at column {j}; [samples, {k}] class labels \
                             hold a single 1 per row (the class) and zeros (probabilities are not taken)",
                            rows.start + i
                        ),
                    ));
                }
                let Some(c) = one else {
                    return Err(Error::data(
                        path,
                        yn,
                        format!(
                            "row {} is not one-hot: no 1 in its {k} columns; [samples, {k}] class labels hold \
                             a single 1 per row (the class) and zeros",
                            rows.start + i
                        ),
                    ));
                };
                push(i, c as i128)?;
            }
        }
    }
    Ok(out)
}
