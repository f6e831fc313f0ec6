//! `[data]`: where the training and test rows are, how they are shuffled and scaled, and
//! the checks of those keys. Reading the files is `data/`'s.
//!
//! Must not: open files (paths are checked when `data/` opens them).

use super::count;
use super::limits;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// `data.normalize`: per-feature scaling of x learned from the training rows (Keras'
/// `Normalization` layer adapted on the training data; `MinMaxScaler`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Normalize {
    #[default]
    None,
    /// (x − mean) / std per feature (std over all training rows, ddof 0; 1 for a constant feature).
    Standard,
    /// (x − min) / (max − min) per feature (1 for a constant feature).
    Minmax,
}

/// `data.normalize_y`: targets of `mse` standardized per output (outputs de-standardized by
/// `predict` and the ONNX export).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NormalizeY {
    #[default]
    None,
    Standard,
}

/// `data.on_device`: keep the training rows in the device's memory and gather each batch
/// there by index, instead of copying each batch from host memory.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnDevice {
    /// On a GPU when the rows fit in half of its free memory and the step is not pipelined
    /// (no micro-batches); else host copies. The log says which and why.
    #[default]
    Auto,
    /// Always (on the CPU too: a copy of the rows in memory); an error when it cannot be.
    On,
    Off,
}

impl Normalize {
    pub fn name(self) -> &'static str {
        match self {
            Normalize::None => "none",
            Normalize::Standard => "standard",
            Normalize::Minmax => "minmax",
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataCfg {
    /// Training data. `{rank}` in the path selects one file per rank; otherwise each rank
    /// reads its own contiguous slice of the one file.
    pub train: String,
    /// Test data, split across ranks the same way. Optional.
    #[serde(default)]
    pub test: Option<String>,
    #[serde(default = "default_x")]
    pub x_dataset: String,
    #[serde(default = "default_y")]
    pub y_dataset: String,
    /// A dataset of one weight per training row beside x and y (Keras' `sample_weight` in
    /// `fit`): each row's loss and gradient × its weight; validation and test loss weighted
    /// too where their files hold it (`eval::weigh`), metrics never. None: every row weighs 1.
    #[serde(default)]
    pub sample_weight: Option<String>,
    /// Shuffle the order of samples every epoch (seeded by `training.seed` and the epoch).
    #[serde(default = "super::yes")]
    pub shuffle: bool,
    /// Rows per contiguous block read from HDF5; blocks are shuffled, then rows within a window.
    #[serde(default = "default_block")]
    pub shuffle_block: usize,
    /// Rows held in memory at once by the reader (a multiple of `shuffle_block`).
    #[serde(default = "default_window")]
    pub shuffle_window: usize,
    /// Keep the training rows in memory after their first read (float32, as converted) when
    /// they fit in this many MiB per process; 0: read them from HDF5 every epoch. Larger data
    /// streams as before, one window at a time.
    #[serde(default = "default_cache_mb")]
    pub cache_mb: f64,
    /// Leave out each rank's rows past the smallest share's full batches, every epoch (the
    /// old behaviour; logged at warn). Off: every row is used once per epoch, with short
    /// last batches and the gradient average weighted by the rows each rank used.
    #[serde(default)]
    pub drop_last: bool,
    /// Training rows in the device's memory, each batch gathered there by index: auto | on |
    /// off (`OnDevice`).
    #[serde(default)]
    pub on_device: OnDevice,
    /// Features are read as x * x_scale + x_offset (in float64, then rounded to float32),
    /// whatever their stored type: 1/255 turns uint8 pixels into [0, 1]. Targets are not scaled.
    #[serde(default = "default_x_scale")]
    pub x_scale: f64,
    #[serde(default)]
    pub x_offset: f64,
    /// Per-feature normalization of x from the training rows, after x_scale and x_offset:
    /// none | standard | minmax. Its statistics go into checkpoints and weights.h5.
    #[serde(default)]
    pub normalize: Normalize,
    /// Standardize `mse` targets per output: none | standard.
    #[serde(default)]
    pub normalize_y: NormalizeY,
    /// Validation data (a file, or `{rank}` files, as `test`), evaluated every epoch.
    #[serde(default)]
    pub validation: Option<String>,
    /// Or hold out this fraction of the training rows for validation: the last ones, as
    /// Keras' `validation_split` (rows [⌊N·(1 − f)⌋, N) of the training data in file order).
    #[serde(default)]
    pub validation_split: f64,
}

fn default_x() -> String {
    "x".into()
}
fn default_y() -> String {
    "y".into()
}
fn default_x_scale() -> f64 {
    1.0
}
fn default_block() -> usize {
    256
}
fn default_window() -> usize {
    4096
}
fn default_cache_mb() -> f64 {
    1024.0
}

impl DataCfg {
    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        let d = self;
        count(origin, "data.shuffle_block", d.shuffle_block as u64, limits::SHUFFLE_BLOCK)?;
        count(origin, "data.shuffle_window", d.shuffle_window as u64, limits::SHUFFLE_WINDOW)?;
        let bad = |field: &str, msg: String| Err(Error::config(origin, field, msg));
        if d.shuffle_window < d.shuffle_block {
            return bad(
                "data.shuffle_window",
                format!("must be >= data.shuffle_block ({}), got {}", d.shuffle_block, d.shuffle_window),
            );
        }
        if !d.cache_mb.is_finite() || d.cache_mb < 0.0 {
            return bad(
                "data.cache_mb",
                format!("must be a number of MiB >= 0 (0: no cache), got {}", limits::num(d.cache_mb)),
            );
        }
        for (field, v) in [("data.x_scale", d.x_scale), ("data.x_offset", d.x_offset)] {
            if !v.is_finite() || v.abs() > limits::X_AFFINE_MAX {
                return bad(
                    field,
                    format!(
                        "must be finite, at most {} in magnitude, got {}",
                        limits::num(limits::X_AFFINE_MAX),
                        limits::num(v)
                    ),
                );
            }
        }
        if d.x_scale == 0.0 {
            return bad(
                "data.x_scale",
                "is 0, which makes every feature equal to data.x_offset; 1 leaves them as stored".into(),
            );
        }
        if !(0.0..1.0).contains(&d.validation_split) {
            return bad(
                "data.validation_split",
                format!(
                    "must be at least 0 (0: none) and less than 1 (the fraction of training rows held out), got {}",
                    limits::num(d.validation_split)
                ),
            );
        }
        if d.validation_split > 0.0 && d.validation.is_some() {
            return bad("data.validation_split", "and data.validation are both set; give one of them".into());
        }
        if d.train.is_empty() {
            return bad("data.train", "is empty; give the path of the training HDF5 file".into());
        }
        if let Some(w) = &d.sample_weight {
            if w.is_empty() || *w == d.x_dataset || *w == d.y_dataset {
                return bad(
                    "data.sample_weight",
                    format!(
                        "must name a dataset of its own beside data.x_dataset ({}) and data.y_dataset ({}), got \"{w}\"",
                        d.x_dataset, d.y_dataset
                    ),
                );
            }
        }
        Ok(())
    }
}
