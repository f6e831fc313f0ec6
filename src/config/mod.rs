//! The job file: a TOML document, parsed strictly (unknown keys are errors), with
//! `--set dotted.key=value` overrides applied before validation. One file per table of the
//! job file, each with its fields, defaults and checks (`model.rs`, `data.rs`, `training.rs`,
//! `optimizer.rs`, `distribution.rs`, `parallel.rs`, `checkpoint.rs`, `output.rs`); this file
//! holds the `Job` that gathers them, loading, overrides and the fingerprint; `limits.rs`
//! the bounds of every number, `env.rs` the HVTRAIN_* variables. Uses only `error`: config
//! is read before anything else exists.
//!
//! Paths in the job file are taken relative to the working directory the job starts in
//! (as for `srun`/`mpirun` in a batch script), not relative to the job file.
//!
//! Must not: hold a table's fields or checks (they live in the table's file).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

mod checkpoint;
mod class_weights;
mod data;
mod distribution;
mod env;
mod hint;
pub mod limits;
mod model;
mod optimizer;
mod output;
pub mod parallel;
mod sweep;
mod training;

pub use checkpoint::CheckpointCfg;
pub use class_weights::ClassWeights;
pub use data::{DataCfg, Normalize, NormalizeY, OnDevice};
pub use distribution::{roles, BucketOrder, Compression, DistributionCfg, GpuAllreduce, Reduction, Shard, Strategy};
use env::env_overrides;
pub use limits::{num, Span};
pub use model::{
    activation_names, Activation, Init, Loss, LossKind, ModelCfg, OutputActivation, Targets, LEAKY_RELU_SLOPE,
    SELU_ALPHA, SELU_LAMBDA,
};
pub use optimizer::{OptimizerCfg, OptimizerKind, Schedule};
pub use output::OutputCfg;
pub use parallel::ParallelCfg;
pub use sweep::{Goal, KeepCheckpoints, Range, RungRule, Sampler, SchedulerKind, SweepCfg, LAYER_KEYS};
pub use training::{higher_is_better, DeviceChoice, LrFind, Precision, Threads, TrainingCfg};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The job file this came from, for error messages (not serialized, not compared).
    #[serde(skip)]
    pub source: String,
    pub data: DataCfg,
    pub model: ModelCfg,
    #[serde(default)]
    pub training: TrainingCfg,
    #[serde(default)]
    pub optimizer: OptimizerCfg,
    #[serde(default)]
    pub distribution: DistributionCfg,
    #[serde(default)]
    pub output: OutputCfg,
    #[serde(default)]
    pub checkpoint: CheckpointCfg,
    #[serde(default)]
    pub parallel: ParallelCfg,
    /// `hvtrain sweep`'s search (`[sweep]`); `hvtrain train` ignores it.
    #[serde(default)]
    pub sweep: Option<SweepCfg>,
    /// Set by `hvtrain sweep`, never in a job file: end this run after this epoch with a
    /// checkpoint and weights.h5, as a rung of early halving (`train::Outcome::Paused`); a
    /// later run resumes it with the same job and schedule.
    #[serde(skip)]
    pub pause_after_epoch: Option<usize>,
    /// `hvtrain lr-find`: the learning-rate range test this run is (None: a plain run).
    #[serde(skip)]
    pub lr_find: Option<LrFind>,
}

impl Job {
    /// Read `path`, apply `overrides` (`dotted.key=value`, value in TOML syntax or a bare
    /// string), deserialize strictly and validate.
    pub fn load(path: &str, overrides: &[String]) -> Result<Job> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(path, "(file)", format!("cannot read the job file: {e}")))?;
        Job::parse(path, &text, overrides)
    }

    /// As `load`, with the HVTRAIN_* environment variables applied between the job file
    /// and `--set` (so the command line wins). Returns the variables used, for the log.
    pub fn load_with_env(path: &str, overrides: &[String]) -> Result<(Job, Vec<String>)> {
        let (mut sets, used) = env_overrides(path, |k| std::env::var(k).ok())?;
        sets.extend_from_slice(overrides);
        Ok((Job::load(path, &sets)?, used))
    }

    /// As `load`, from text; `origin` names the source in errors.
    pub fn parse(origin: &str, text: &str, overrides: &[String]) -> Result<Job> {
        let mut doc: toml::Table =
            text.parse().map_err(|e: toml::de::Error| Error::config(origin, "(syntax)", one_line(&e.to_string())))?;
        for o in overrides {
            apply_override(origin, &mut doc, o)?;
        }
        let mut job: Job = serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
            let mut field = e.path().to_string();
            // A sweep's keys are dotted themselves: quoted, as in the job file.
            if let Some(key) = field.strip_prefix("sweep.space.") {
                field = format!("sweep.space.\"{key}\"");
            }
            let msg = hint::with_hint(&field, &one_line(&e.into_inner().to_string()));
            Error::config(origin, field, msg)
        })?;
        job.validate(origin)?;
        job.source = origin.to_string();
        Ok(job)
    }

    /// Every table's checks, then those across tables.
    fn validate(&self, origin: &str) -> Result<()> {
        self.model.validate(origin)?;
        self.training.validate(origin)?;
        self.optimizer.validate(origin)?;
        self.distribution.validate(origin)?;
        self.checkpoint.validate(origin)?;
        self.data.validate(origin)?;
        count(origin, "parallel.tensor", self.parallel.tensor as u64, limits::TENSOR)?;
        count(origin, "parallel.pipeline", self.parallel.pipeline as u64, limits::PIPELINE)?;
        count(origin, "parallel.micro_batches", self.parallel.micro_batches as u64, limits::MICRO_BATCHES)?;
        if self.data.normalize_y != NormalizeY::None && matches!(self.model.loss, LossKind::Mape | LossKind::Msle) {
            return Err(Error::config(
                origin,
                "data.normalize_y",
                format!(
                    "standardizes the targets, and model.loss = \"{}\" is measured against the targets as \
                     stored ({}); leave normalize_y \"none\" with this loss",
                    self.model.loss.name(),
                    if self.model.loss == LossKind::Mape {
                        "a percentage of each target's size"
                    } else {
                        "logarithms of targets floored at 1e-7"
                    }
                ),
            ));
        }
        if self.data.normalize_y != NormalizeY::None && self.model.loss.targets() != Targets::Regression {
            return Err(Error::config(
                origin,
                "data.normalize_y",
                format!(
                    "standardizes regression targets, and model.loss = \"{}\" has {}; \
                     use it with loss = \"mse\", \"mae\", \"huber\", \"log_cosh\" or \"quantile\", or leave it \"none\"",
                    self.model.loss.name(),
                    if self.model.loss.targets() == Targets::Classes { "class labels" } else { "0/1 labels" }
                ),
            ));
        }
        self.validate_monitor(origin)?;
        self.validate_parallel(origin)?;
        self.validate_ps(origin)?;
        if let Some(s) = &self.sweep {
            s.validate(origin, self)?;
        }
        self.output.validate(origin)
    }

    /// Whether the run has validation data (a file or a split).
    pub fn has_validation(&self) -> bool {
        self.data.validation.is_some() || self.data.validation_split > 0.0
    }

    /// The metric that early stopping, plateau and keep_best watch: early_stopping.monitor,
    /// else val_loss with validation data, else train_loss.
    pub fn monitor(&self) -> &str {
        match &self.training.early_stopping {
            Some(e) => &e.monitor,
            None if self.has_validation() => "val_loss",
            None => "train_loss",
        }
    }

    /// A monitored metric the run produces, and keep_best with something to keep by.
    fn validate_monitor(&self, origin: &str) -> Result<()> {
        let m = self.monitor();
        let field =
            if self.training.early_stopping.is_some() { "training.early_stopping.monitor" } else { "output.keep_best" };
        if m.starts_with("val_") && !self.has_validation() {
            return Err(Error::config(
                origin,
                field,
                format!("watches {m}, and the run has no validation data; set data.validation (a file) or data.validation_split (a fraction of the training rows), or monitor train_loss"),
            ));
        }
        if (m == "val_auc" || m == "val_average_precision") && self.model.loss.targets() == Targets::Regression {
            return Err(Error::config(
                origin,
                field,
                format!(
                    "watches {m}, a classifier's ranking metric, which model.loss = \"{}\" (a regression) does not have; monitor val_loss",
                    self.model.loss.name()
                ),
            ));
        }
        if (m == "val_balanced_accuracy" || m == "val_macro_f1") && self.model.loss.targets() != Targets::Classes {
            return Err(Error::config(
                origin,
                field,
                format!(
                    "watches {m}, a classifier's per-class metric, which model.loss = \"{}\" does not have; monitor val_loss",
                    self.model.loss.name()
                ),
            ));
        }
        if m == "val_accuracy" && self.model.loss.targets() == Targets::Regression {
            return Err(Error::config(
                origin,
                field,
                format!(
                    "watches val_accuracy, which a regression (model.loss = \"{}\") does not have; monitor val_loss",
                    self.model.loss.name()
                ),
            ));
        }
        if self.output.keep_best && !self.has_validation() && self.training.early_stopping.is_none() {
            return Err(Error::config(
                origin,
                "output.keep_best",
                "keeps the best epoch by val_loss, and the run has no validation data; set data.validation or data.validation_split (or training.early_stopping.monitor = \"train_loss\")",
            ));
        }
        Ok(())
    }

    /// A stable fingerprint of everything that must be equal on every rank.
    pub fn fingerprint(&self) -> u64 {
        fnv1a(serde_json::to_string(self).expect("job serializes").as_bytes())
    }

    pub fn fusion_threshold_bytes(&self) -> usize {
        (self.distribution.fusion_threshold_mb * 1024.0 * 1024.0) as usize
    }

    /// The first bucket's threshold: `first_bucket_mb` when set, else the common one.
    pub fn first_bucket_bytes(&self) -> usize {
        match self.distribution.first_bucket_mb {
            f if f > 0.0 => (f * 1024.0 * 1024.0) as usize,
            _ => self.fusion_threshold_bytes(),
        }
    }
}

/// A long list of widths, shortened for an error message.
fn abbreviate(v: &[usize]) -> String {
    if v.len() <= 8 {
        format!("{v:?}")
    } else {
        format!("[{}, {}, {}, ... ({} widths)]", v[0], v[1], v[2], v.len())
    }
}

fn apply_override(origin: &str, doc: &mut toml::Table, o: &str) -> Result<()> {
    let (key, value) =
        o.split_once('=').ok_or_else(|| Error::config(origin, o, "--set needs the form dotted.key=value"))?;
    let key = key.trim();
    let value = value.trim();
    // A value is read as TOML (numbers, booleans, arrays, quoted strings); a bare word is a string.
    let parsed: toml::Value = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config(origin, key, "--set key has an empty part"));
    }
    let mut table = doc;
    for p in &parts[..parts.len() - 1] {
        let entry = table.entry(p.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| Error::config(origin, key, format!("`{p}` is a value, not a section")))?;
    }
    table.insert(parts[parts.len() - 1].to_string(), parsed);
    Ok(())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// FNV-1a, 64 bit: tiny, stable, good enough to tell configs apart.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `field`'s whole-number value `v` within `span`, or the error naming the field.
fn count(origin: &str, field: &str, v: u64, span: Span) -> Result<()> {
    if span.allows(v as f64) {
        return Ok(());
    }
    Err(Error::config(origin, field, span.error(&v.to_string())))
}

/// `field`'s real value `v` within `span`, or the error naming the field.
fn real(origin: &str, field: &str, v: f64, span: Span) -> Result<()> {
    if span.allows(v) {
        return Ok(());
    }
    Err(Error::config(origin, field, span.error(&num(v))))
}

fn yes() -> bool {
    true
}

fn one() -> usize {
    1
}

#[cfg(test)]
mod optimizer_tests;
#[cfg(test)]
mod tests;
