//! Per-epoch metrics: the log line and `OUTPUT_DIR/metrics.jsonl` (rank 0 only), one JSON
//! object per epoch.
//!
//! Must not: compute metrics (the training loop does) or write on any rank but 0.

pub mod auc;
pub mod classes;
pub mod confusion;
pub mod regression;
pub mod tensorboard;

use crate::error::{Error, Result};
pub use regression::PerOutput;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default, Serialize)]
pub struct EpochMetrics {
    pub epoch: usize,
    pub train_loss: f64,
    /// Running train metrics over the epoch's steps (as Keras reports them): accuracy for
    /// classes and multi-label, top-5 for more than 5 classes, MAE, RMSE and R² (targets'
    /// units, as the test ones) for regression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_top5_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_mae: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_rmse: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_r2: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_per_output: Option<PerOutput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    /// More than 5 classes: the share of rows whose label is among the 5 largest outputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_top5_accuracy: Option<f64>,
    /// On the validation data (`data.validation` or `data.validation_split`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_top5_accuracy: Option<f64>,
    /// A classifier's mean recall over its classes (scikit-learn's `balanced_accuracy_score`)
    /// and mean F1 (`f1_score(average="macro")`) on the test and validation data
    /// (`metrics/classes.rs`): what an imbalanced problem is judged by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_balanced_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_macro_f1: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_balanced_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_macro_f1: Option<f64>,
    /// A classifier's or multi-label model's ROC AUC and average precision (`metrics/auc.rs`;
    /// one vs rest for more than two classes, means over the labels), on the test and
    /// validation data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_auc: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_average_precision: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_auc: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_average_precision: Option<f64>,
    /// Regression, in the targets' units: means over the outputs, and per output (K ≤ 16).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_mae: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_rmse: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_r2: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_per_output: Option<PerOutput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_mae: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_rmse: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_r2: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_per_output: Option<PerOutput>,
    /// Global training samples per second of wall time in this epoch (evaluation excluded).
    pub samples_per_sec: f64,
    pub epoch_seconds: f64,
    /// Mean time per step the optimizer waited for reduced gradients (communication not
    /// hidden behind backward).
    pub exposed_comm_ms_per_step: f64,
    pub steps: usize,
    /// Training rows used in the epoch, summed over ranks (every row once, unless
    /// `data.drop_last`).
    pub samples: usize,
    pub ranks: usize,
    pub lr: f64,
    /// Under pipeline parallelism: the ranks' mean share of the epoch spent waiting for the
    /// neighbouring stages' messages (the measured bubble).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline_bubble: Option<f64>,
    /// With gradient clipping: the global gradient norm (after the all-reduce, before
    /// clipping) over the epoch's steps, and how many steps were clipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<GradNorm>,
}

/// The global gradient norm over some steps (`optimizer.global_clipnorm`, `clipnorm`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct GradNorm {
    pub mean: f64,
    pub max: f64,
    pub steps: u64,
    /// Steps at which a limit scaled some gradient down.
    pub clipped: u64,
}

impl GradNorm {
    pub fn add(&mut self, norm: f64, clipped: bool) {
        self.mean += (norm - self.mean) / (self.steps + 1) as f64;
        self.max = self.max.max(norm);
        self.steps += 1;
        self.clipped += u64::from(clipped);
    }
}

pub struct MetricsLog {
    path: PathBuf,
    /// The TensorBoard event files beside it (`output.tensorboard`).
    board: Option<tensorboard::Board>,
}

impl MetricsLog {
    /// Open `dir/metrics.jsonl` for a run whose first epoch to log is `first_epoch`: lines
    /// of earlier epochs (a resumed run's) are kept, later ones dropped.
    pub fn open(dir: &Path, first_epoch: usize) -> Result<MetricsLog> {
        let path = dir.join("metrics.jsonl");
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        let kept: String = old
            .lines()
            .filter(|l| {
                let e = serde_json::from_str::<serde_json::Value>(l).ok().and_then(|v| v["epoch"].as_u64());
                e.is_some_and(|e| (e as usize) < first_epoch)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, kept).map_err(|e| Error::io(&path, "write", e))?;
        Ok(MetricsLog { path, board: None })
    }

    /// Also write each epoch as TensorBoard event files (`tensorboard::Board`) beside
    /// `metrics.jsonl`, with the job (`job_toml`) as a text summary; the same epochs are kept
    /// from a resumed run's earlier files.
    pub fn with_tensorboard(mut self, first_epoch: usize, done_steps: u64, job_toml: &str) -> Result<MetricsLog> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let board = tensorboard::Board::open(dir, first_epoch, done_steps, job_toml)?;
        log::info!("TensorBoard event files in {} (tensorboard --logdir {})", board.dir().display(), dir.display());
        self.board = Some(board);
        Ok(self)
    }

    /// The steps' scalars into the TensorBoard files (`tensorboard::Board::steps`), if any.
    pub fn steps(&mut self, step: u64, loss: f64, samples_per_sec: f64, lr: f64) -> Result<()> {
        match self.board.as_mut() {
            Some(b) => b.steps(step, loss, samples_per_sec, lr),
            None => Ok(()),
        }
    }

    /// Histograms of each layer's weights and biases of `model` (the whole model's arena
    /// `params`) at `epoch` into the TensorBoard files (`output.histogram_freq`), if any.
    pub fn histograms(&mut self, epoch: usize, model: &crate::model::Mlp, params: &[f32]) -> Result<()> {
        let made =
            (0..model.layers.len()).flat_map(|l| Self::layer_histograms(model, l, &params[model.slot(l)])).collect();
        self.histograms_made(epoch, made)
    }

    /// The histograms of layer `l`'s tensors from `slot`, its slot of the arena (`Mlp::slot`):
    /// what `histograms` makes of them, a layer at a time (`shard = "parameters"`).
    pub fn layer_histograms(
        model: &crate::model::Mlp,
        l: usize,
        slot: &[f32],
    ) -> Vec<(String, tensorboard::proto::HistogramProto)> {
        let s = model.slot(l);
        let inside = |t: &crate::model::TensorInfo| t.range.start >= s.start && t.range.end <= s.end;
        let at = |t: &crate::model::TensorInfo| &slot[t.range.start - s.start..t.range.start - s.start + t.used];
        model
            .tensors()
            .iter()
            .filter(|t| inside(t))
            .map(|t| (t.name.clone(), tensorboard::histogram(at(t), tensorboard::BUCKETS)))
            .collect()
    }

    /// Histograms made already (`layer_histograms` of every layer), written as `histograms`
    /// writes them (sorted by name).
    pub fn histograms_made(
        &mut self,
        epoch: usize,
        mut made: Vec<(String, tensorboard::proto::HistogramProto)>,
    ) -> Result<()> {
        let Some(b) = self.board.as_mut() else { return Ok(()) };
        made.sort_by(|a, b| a.0.cmp(&b.0));
        b.histograms_made(epoch, made)
    }

    pub fn append(&mut self, m: &EpochMetrics) -> Result<()> {
        let mut f =
            std::fs::OpenOptions::new().append(true).open(&self.path).map_err(|e| Error::io(&self.path, "open", e))?;
        let line = serde_json::to_string(m).expect("metrics serialize");
        writeln!(f, "{line}").map_err(|e| Error::io(&self.path, "append", e))?;
        match self.board.as_mut() {
            Some(b) => b.epoch(m, crate::sys::peak_rss_mib()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod histogram_tests {
    use super::*;
    use crate::config::{Activation, LossKind};

    /// The histograms made a layer at a time (`shard = "parameters"`) are those of the whole
    /// arena, tag for tag; a slot of another layer's values makes others.
    #[test]
    fn layer_histograms_are_the_whole_models() {
        let model = crate::model::Mlp::new(&[5, 7, 4, 3], Activation::Relu, LossKind::SoftmaxCrossEntropy);
        let params = model.init_params(3);
        let whole: Vec<_> = model
            .tensors()
            .into_iter()
            .map(|t| {
                (t.name, tensorboard::histogram(&params[t.range.start..t.range.start + t.used], tensorboard::BUCKETS))
            })
            .collect();
        let mut layered: Vec<_> = (0..model.layers.len())
            .flat_map(|l| MetricsLog::layer_histograms(&model, l, &params[model.slot(l)]))
            .collect();
        assert_eq!(layered.len(), whole.len());
        let mut whole = whole;
        whole.sort_by(|a, b| a.0.cmp(&b.0));
        layered.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(layered, whole);
        let other = MetricsLog::layer_histograms(&model, 1, &params[model.slot(0)][..model.slot(1).len()]);
        assert_ne!(other, MetricsLog::layer_histograms(&model, 1, &params[model.slot(1)]));
    }
}
