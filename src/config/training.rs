//! `[training]`: epochs, the per-rank batch, the seed, the device and its precision, the
//! progress lines, and their checks.
//!
//! Must not: pick the device (`device::select` does).

use super::limits;
use super::{count, real};
use crate::error::Result;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda,
}

/// `training.threads`: "auto" or a count. Written in the job file as a number or the string
/// "auto"; anything else is an error naming both forms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Threads {
    #[default]
    Auto,
    Fixed(usize),
}

impl Serialize for Threads {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Threads::Auto => s.serialize_str("auto"),
            Threads::Fixed(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for Threads {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Threads, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Threads;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a thread count (1 to 64) or \"auto\" (the cores the launcher gave this rank)")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Threads, E> {
                Ok(Threads::Fixed(v as usize))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Threads, E> {
                u64::try_from(v)
                    .map(|v| Threads::Fixed(v as usize))
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Threads, E> {
                match v {
                    "auto" => Ok(Threads::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The dense layers' matrix products: exact float32 (SGEMM); TF32 tensor cores on a GPU
/// (inputs rounded to 10 mantissa bits, sums in float32; the CPU computes float32 for it); or
/// bf16 mixed precision (operands rounded to bfloat16, sums, master weights, gradients and
/// optimizer state in float32; on the CPU through AVX512-BF16).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    Fp32,
    Tf32,
    Bf16,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingCfg {
    #[serde(default = "super::one")]
    pub epochs: usize,
    /// Samples per rank per micro-batch; the global batch is this times `accumulate` times
    /// the number of data-parallel ranks.
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// Gradient accumulation (Horovod's `backward_passes_per_step`): each optimizer step sums
    /// the gradients of this many micro-batches of `batch_size` rows per rank, then all-reduces
    /// once and updates once: the step of a batch `accumulate` times larger, within float32
    /// rounding, with one micro-batch's activations in memory.
    #[serde(default = "super::one")]
    pub accumulate: usize,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_device")]
    pub device: DeviceChoice,
    /// "fp32" (default), "tf32" (TF32 tensor cores on the GPU; the CPU ignores it) or "bf16"
    /// (bf16 operands, float32 sums and state).
    #[serde(default)]
    pub precision: Precision,
    /// Threads of one rank's CPU work (matrix products, element-wise passes, the optimizer):
    /// "auto" (the default: the cores the launcher gave this rank, `device::cpu_threads`) or a
    /// number (1: N ranks of one thread; 2 on a node of 2 cores: one rank that uses both).
    #[serde(default)]
    pub threads: Threads,
    /// Log a progress line every this many steps (0: only per epoch).
    #[serde(default)]
    pub log_every: usize,
    /// Also log progress (step, running loss, samples/s, time left) at least this often,
    /// in seconds (0: off).
    #[serde(default = "default_progress")]
    pub progress_seconds: f64,
    /// End the run when `monitor` has not improved by more than `min_delta` for `patience`
    /// epochs (Keras' EarlyStopping). Off when absent.
    #[serde(default)]
    pub early_stopping: Option<EarlyStopping>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EarlyStopping {
    /// train_loss | val_loss | val_accuracy (lower is better but for accuracy).
    #[serde(default = "default_monitor")]
    pub monitor: String,
    #[serde(default = "default_patience")]
    pub patience: usize,
    #[serde(default)]
    pub min_delta: f64,
    /// Epochs at the start that are not watched (Keras' `start_from_epoch`): epochs 1 to N
    /// neither set a best nor count toward the patience (nor, with `output.keep_best`, are kept
    /// as the best). 0: every epoch.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_from_epoch: usize,
    /// A value the metric must beat (Keras' `baseline`): the patience's count restarts only at
    /// an epoch that improves on the best and beats this by more than `min_delta`, so a run
    /// that never beats it stops after `patience` epochs. None: no baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn default_monitor() -> String {
    "val_loss".into()
}
fn default_patience() -> usize {
    5
}

/// The metrics a run can monitor (early stopping, plateau, keep_best).
pub const MONITORS: [&str; 7] = [
    "train_loss",
    "val_loss",
    "val_accuracy",
    "val_balanced_accuracy",
    "val_macro_f1",
    "val_auc",
    "val_average_precision",
];

/// `hvtrain lr-find`'s range test (Smith's, fastai's `lr_find`): the learning rate grows
/// geometrically from `min` to `max` over `steps` optimizer steps (the last at `max`), and
/// the run ends there or where the loss diverges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrFind {
    pub min: f64,
    pub max: f64,
    pub steps: usize,
}

/// Whether a larger value of `metric` (a name of metrics.jsonl) is better: accuracies, F1,
/// R², ROC AUC and average precision; losses and errors are smaller when better.
pub fn higher_is_better(metric: &str) -> bool {
    ["accuracy", "f1", "r2", "auc", "average_precision"].iter().any(|s| metric.ends_with(s))
}

fn default_batch() -> usize {
    32
}
fn default_device() -> DeviceChoice {
    DeviceChoice::Auto
}
fn default_progress() -> f64 {
    30.0
}

impl Default for TrainingCfg {
    fn default() -> Self {
        TrainingCfg {
            epochs: super::one(),
            batch_size: default_batch(),
            accumulate: super::one(),
            seed: 0,
            device: default_device(),
            precision: Precision::Fp32,
            threads: Threads::Auto,
            log_every: 0,
            progress_seconds: default_progress(),
            early_stopping: None,
        }
    }
}

impl TrainingCfg {
    /// Rows per data-parallel rank in one optimizer step: `batch_size` × `accumulate`.
    pub fn rows_per_step(&self) -> usize {
        self.batch_size * self.accumulate
    }

    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        count(origin, "training.epochs", self.epochs as u64, limits::EPOCHS)?;
        count(origin, "training.batch_size", self.batch_size as u64, limits::BATCH_SIZE)?;
        count(origin, "training.accumulate", self.accumulate as u64, limits::ACCUMULATE)?;
        count(origin, "training.log_every", self.log_every as u64, limits::LOG_EVERY)?;
        if let Threads::Fixed(n) = self.threads {
            count(origin, "training.threads", n as u64, limits::THREADS)?;
        }
        // (training.seed needs no bound: every u64 is a seed.)
        if let Some(e) = &self.early_stopping {
            count(origin, "training.early_stopping.patience", e.patience as u64, limits::PATIENCE)?;
            real(origin, "training.early_stopping.min_delta", e.min_delta, limits::MIN_DELTA)?;
            if e.start_from_epoch > 0 {
                count(origin, "training.early_stopping.start_from_epoch", e.start_from_epoch as u64, limits::EPOCHS)?;
            }
            if let Some(b) = e.baseline.filter(|b| !b.is_finite()) {
                return Err(crate::error::Error::config(
                    origin,
                    "training.early_stopping.baseline",
                    format!("is {b}; a baseline is a value of the monitored metric to beat, a finite number"),
                ));
            }
            if !MONITORS.contains(&e.monitor.as_str()) {
                return Err(crate::error::Error::config(
                    origin,
                    "training.early_stopping.monitor",
                    format!("is \"{}\"; the run's metrics it can watch are {}", e.monitor, MONITORS.join(", ")),
                ));
            }
        }
        real(origin, "training.progress_seconds", self.progress_seconds, limits::PROGRESS_SECONDS)
    }
}
