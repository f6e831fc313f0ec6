//! `[sweep]`: `hvtrain sweep`'s search (the space over `--set` keys, the sampler, the early
//! halving scheduler, the metric) and its checks. Sampling and scheduling are `sweep/`'s; the
//! keys themselves are checked there too, by building every trial's job.
//!
//! Must not: sample, or touch files.

use super::{count, Targets};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How trials' values are drawn.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    /// Independent draws from the seeded generator.
    #[default]
    Random,
    /// Every combination of the (finite) dimensions, the first key varying slowest.
    Grid,
    /// A Sobol sequence (quasi-random: spreads the trials evenly), shifted by the seed.
    Sobol,
}

/// Early halving.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerKind {
    /// Asynchronous successive halving (Li et al., 2020): rungs at min_epochs·ηᵏ.
    #[default]
    Asha,
    /// ASHA brackets of different first rungs, trials dealt to them in turn (Ray Tune's
    /// asynchronous Hyperband).
    Hyperband,
    /// Every trial trains every epoch.
    None,
}

/// What a trial that reaches a rung does (ASHA and Hyperband).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RungRule {
    /// Goes on at once when it is in the top 1/η of the trials recorded at that rung before
    /// it (the first to arrive goes on), else stops: Ray Tune's ASHA and Optuna's pruner.
    /// Every trial that is good enough trains to training.epochs.
    #[default]
    Continue,
    /// Pauses; a paused trial is promoted when it is among the best ⌊n/η⌋ of the n trials
    /// that reached the rung (Li et al.'s promotion rule). With few trials at a rung nobody
    /// may go on: 1 or 2 trials at a rung with η = 3 promote none.
    Promote,
}

/// Whose checkpoints stay when the sweep ends (every trial ended: none resumes from one).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum KeepCheckpoints {
    /// The best trial's (to train it further); the others' are removed.
    #[default]
    Best,
    /// Every trial's.
    All,
    /// No trial's (weights.h5 and metrics.jsonl stay).
    None,
}

/// Whether the metric is minimized or maximized.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    Minimize,
    Maximize,
}

/// One dimension of the space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "toml::Value", into = "toml::Value")]
pub enum Range {
    /// `[a, b, c]` or `{ choice = [a, b, c] }`: one of these values (any TOML value).
    Choice(Vec<toml::Value>),
    /// `{ uniform = [lo, hi] }`.
    Uniform(f64, f64),
    /// `{ log_uniform = [lo, hi] }`, 0 < lo < hi.
    LogUniform(f64, f64),
    /// `{ int = [lo, hi] }`, both included.
    Int(i64, i64),
    /// `{ log_int = [lo, hi] }`, 1 ≤ lo ≤ hi, uniform in the logarithm, rounded.
    LogInt(i64, i64),
}

impl Range {
    /// The number of values (None: continuous).
    pub fn points(&self) -> Option<u64> {
        match self {
            Range::Choice(v) => Some(v.len() as u64),
            Range::Int(lo, hi) | Range::LogInt(lo, hi) => Some((hi - lo) as u64 + 1),
            _ => None,
        }
    }
}

impl TryFrom<toml::Value> for Range {
    type Error = String;
    fn try_from(v: toml::Value) -> std::result::Result<Range, String> {
        use toml::Value;
        let shape = "a list of values, or a table with one of choice = [...], uniform = [lo, hi], \
                     log_uniform = [lo, hi], int = [lo, hi], log_int = [lo, hi]";
        let t = match v {
            Value::Array(a) => return choice(a),
            Value::Table(t) if t.len() == 1 => t,
            other => return Err(format!("is {other}; give {shape}")),
        };
        let (kind, val) = t.into_iter().next().expect("one entry");
        if kind == "choice" {
            return match val {
                Value::Array(a) => choice(a),
                other => Err(format!("choice is {other}; give a list of values")),
            };
        }
        let pair = match &val {
            Value::Array(a) if a.len() == 2 => [&a[0], &a[1]],
            other => return Err(format!("{kind} is {other}; give two bounds [lo, hi]")),
        };
        let real = |x: &Value| match x {
            Value::Float(f) => Ok(*f),
            Value::Integer(i) => Ok(*i as f64),
            other => Err(format!("{kind}'s bound {other} is not a number")),
        };
        let int = |x: &Value| match x {
            Value::Integer(i) => Ok(*i),
            other => Err(format!("{kind}'s bound {other} is not a whole number")),
        };
        let r = match kind.as_str() {
            "uniform" => Range::Uniform(real(pair[0])?, real(pair[1])?),
            "log_uniform" => Range::LogUniform(real(pair[0])?, real(pair[1])?),
            "int" => Range::Int(int(pair[0])?, int(pair[1])?),
            "log_int" => Range::LogInt(int(pair[0])?, int(pair[1])?),
            other => return Err(format!("has `{other}`; give {shape}")),
        };
        r.check()?;
        Ok(r)
    }
}

fn choice(a: Vec<toml::Value>) -> std::result::Result<Range, String> {
    if a.is_empty() {
        return Err("is an empty list: give at least one value".into());
    }
    Ok(Range::Choice(a))
}

impl Range {
    /// Bounds that make a range: finite, ordered, a log range above zero.
    fn check(&self) -> std::result::Result<(), String> {
        match *self {
            Range::Uniform(lo, hi) | Range::LogUniform(lo, hi) if !(lo.is_finite() && hi.is_finite()) => {
                Err(format!("has a bound that is not finite ({lo}, {hi})"))
            }
            Range::Uniform(lo, hi) if lo >= hi => Err(format!("uniform = [{lo}, {hi}] is empty: give lo < hi")),
            Range::LogUniform(lo, hi) if lo <= 0.0 => {
                Err(format!("log_uniform = [{lo}, {hi}] reaches zero or below, where no logarithm is; give 0 < lo < hi (or use uniform)"))
            }
            Range::LogUniform(lo, hi) if lo >= hi => Err(format!("log_uniform = [{lo}, {hi}] is empty: give lo < hi")),
            Range::Int(lo, hi) if lo > hi => Err(format!("int = [{lo}, {hi}] is empty: give lo <= hi")),
            Range::LogInt(lo, hi) if lo < 1 => {
                Err(format!("log_int = [{lo}, {hi}] reaches zero or below, where no logarithm is; give 1 <= lo <= hi"))
            }
            Range::LogInt(lo, hi) if lo > hi => Err(format!("log_int = [{lo}, {hi}] is empty: give lo <= hi")),
            _ => Ok(()),
        }
    }
}

impl From<Range> for toml::Value {
    fn from(r: Range) -> toml::Value {
        use toml::Value;
        let pair = |k: &str, a: Value, b: Value| {
            Value::Table([(k.to_string(), Value::Array(vec![a, b]))].into_iter().collect())
        };
        match r {
            Range::Choice(v) => Value::Table([("choice".to_string(), Value::Array(v))].into_iter().collect()),
            Range::Uniform(a, b) => pair("uniform", Value::Float(a), Value::Float(b)),
            Range::LogUniform(a, b) => pair("log_uniform", Value::Float(a), Value::Float(b)),
            Range::Int(a, b) => pair("int", Value::Integer(a), Value::Integer(b)),
            Range::LogInt(a, b) => pair("log_int", Value::Integer(a), Value::Integer(b)),
        }
    }
}

/// Keys that are not `--set` keys but a sweep may vary: the hidden layers' width and count,
/// which rewrite `model.layers` to [inputs, width × depth, outputs].
pub const LAYER_KEYS: [&str; 2] = ["model.width", "model.depth"];

/// The metrics of `metrics.jsonl` a sweep can rank trials by.
pub const METRICS: [&str; 26] = [
    "val_loss",
    "val_accuracy",
    "val_top5_accuracy",
    "val_balanced_accuracy",
    "val_macro_f1",
    "val_auc",
    "val_average_precision",
    "val_mae",
    "val_rmse",
    "val_r2",
    "test_loss",
    "test_accuracy",
    "test_top5_accuracy",
    "test_balanced_accuracy",
    "test_macro_f1",
    "test_auc",
    "test_average_precision",
    "test_mae",
    "test_rmse",
    "test_r2",
    "train_loss",
    "train_accuracy",
    "train_top5_accuracy",
    "train_mae",
    "train_rmse",
    "train_r2",
];

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SweepCfg {
    /// Trials to run (0: the grid's size with `sampler = "grid"`, else 16).
    #[serde(default)]
    pub trials: usize,
    /// Ranks that train one trial together; the world splits into groups of this many.
    #[serde(default = "super::one")]
    pub ranks_per_trial: usize,
    /// The metric trials are ranked by (any of `METRICS` the run produces).
    #[serde(default = "default_metric")]
    pub metric: String,
    /// minimize or maximize (default: maximize accuracies and r2, minimize the rest).
    #[serde(default)]
    pub goal: Option<Goal>,
    #[serde(default)]
    pub scheduler: SchedulerKind,
    #[serde(default)]
    pub sampler: Sampler,
    /// The sampler's seed (random and sobol).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Early halving's reduction factor η: a trial goes on past a rung when it is in the top
    /// 1/η of the trials that reached it.
    #[serde(default = "default_eta")]
    pub eta: usize,
    /// How a trial at a rung goes on (`continue`: at once when in the top 1/η of those
    /// recorded there, as Ray's ASHA; `promote`: paused until among the best ⌊n/η⌋).
    #[serde(default)]
    pub rung_rule: RungRule,
    /// The first rung, in epochs (ASHA's grace period r); rungs at r·ηᵏ up to training.epochs.
    #[serde(default = "super::one")]
    pub min_epochs: usize,
    /// Hyperband's brackets (0: every bracket the epochs allow).
    #[serde(default)]
    pub brackets: usize,
    /// Whose checkpoints stay when the sweep ends (`best`, `all`, `none`).
    #[serde(default)]
    pub keep_checkpoints: KeepCheckpoints,
    /// Dotted `--set` keys (and `model.width`, `model.depth`) and their ranges.
    #[serde(default)]
    pub space: BTreeMap<String, Range>,
}

fn default_metric() -> String {
    "val_loss".into()
}
fn default_seed() -> u64 {
    1
}
fn default_eta() -> usize {
    3
}

impl SweepCfg {
    /// The goal, given or from the metric's name.
    pub fn goal(&self) -> Goal {
        self.goal.unwrap_or(if super::training::higher_is_better(&self.metric) {
            Goal::Maximize
        } else {
            Goal::Minimize
        })
    }

    /// The trials to run: `trials`, or its default.
    pub fn trial_count(&self) -> u64 {
        match (self.trials, self.sampler) {
            (0, Sampler::Grid) => self.grid_size().unwrap_or(0),
            (0, _) => 16,
            (n, _) => n as u64,
        }
    }

    /// The grid's size when every dimension is finite.
    pub fn grid_size(&self) -> Option<u64> {
        self.space.values().try_fold(1u64, |acc, r| r.points().and_then(|p| acc.checked_mul(p)))
    }

    pub(super) fn validate(&self, origin: &str, job: &super::Job) -> Result<()> {
        let e = |field: &str, msg: String| Err(Error::config(origin, format!("sweep.{field}"), msg));
        count(origin, "sweep.ranks_per_trial", self.ranks_per_trial as u64, super::limits::RANKS_PER_TRIAL)?;
        count(origin, "sweep.eta", self.eta as u64, super::limits::ETA)?;
        count(origin, "sweep.trials", self.trials as u64, super::limits::TRIALS)?;
        if self.space.is_empty() {
            return e(
                "space",
                "is empty: give [sweep.space] at least one key, e.g. \"optimizer.lr\" = { log_uniform = [1e-4, 0.3] }"
                    .into(),
            );
        }
        for (k, r) in &self.space {
            if let Err(m) = r.check() {
                return e(&format!("space.\"{k}\""), m);
            }
            if k.starts_with("sweep.") || k == "output.dir" || k.split('.').any(str::is_empty) {
                return e(
                    &format!("space.\"{k}\""),
                    "cannot be varied by a sweep (give a dotted key of the job file, such as optimizer.lr)".into(),
                );
            }
            if k == "training.epochs" && self.scheduler != SchedulerKind::None {
                return e(
                    &format!("space.\"{k}\""),
                    "is what early halving allots (its rungs end at training.epochs); vary it with scheduler = \"none\"".into(),
                );
            }
            if k == "model.layers" && self.space.keys().any(|k| LAYER_KEYS.contains(&k.as_str())) {
                return e(
                    &format!("space.\"{k}\""),
                    "and model.width/model.depth both set the layers; vary one or the other".into(),
                );
            }
        }
        if self.sampler == Sampler::Grid {
            match self.grid_size() {
                None => {
                    let k = self
                        .space
                        .iter()
                        .find(|(_, r)| r.points().is_none())
                        .map(|(k, _)| k.clone())
                        .unwrap_or_default();
                    return e(
                        &format!("space.\"{k}\""),
                        "is a continuous range, and sampler = \"grid\" needs lists, choices or int ranges; use sampler = \"random\" or \"sobol\"".into(),
                    );
                }
                Some(n) if self.trials as u64 > n => {
                    return e(
                        "trials",
                        format!(
                            "is {}, and the grid has {n} points; give at most {n} (or 0: all of them)",
                            self.trials
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        if !METRICS.contains(&self.metric.as_str()) {
            return e(
                "metric",
                format!("is \"{}\"; the metrics a sweep can rank by are {}", self.metric, METRICS.join(", ")),
            );
        }
        if self.metric.starts_with("val_") && !job.has_validation() {
            return e(
                "metric",
                format!("is {}, and the run has no validation data; set data.validation_split (a fraction of the training rows) or data.validation, or rank by another metric", self.metric),
            );
        }
        if self.metric.starts_with("test_") && job.data.test.is_none() {
            return e("metric", format!("is {}, and the run has no test data (data.test)", self.metric));
        }
        let targets = job.model.loss.targets();
        let regression_metric = ["_mae", "_rmse", "_r2"].iter().any(|s| self.metric.ends_with(s));
        let per_class = self.metric.ends_with("_balanced_accuracy") || self.metric.ends_with("_macro_f1");
        if (regression_metric != (targets == Targets::Regression) && !self.metric.ends_with("_loss"))
            || (per_class && targets != Targets::Classes)
        {
            return e(
                "metric",
                format!("is {}, which model.loss = \"{}\" does not produce", self.metric, job.model.loss.name()),
            );
        }
        if self.scheduler != SchedulerKind::None && (self.min_epochs == 0 || self.min_epochs > job.training.epochs) {
            return e(
                "min_epochs",
                format!(
                    "is {}; the first rung must be at least 1 and at most training.epochs ({})",
                    self.min_epochs, job.training.epochs
                ),
            );
        }
        Ok(())
    }
}
