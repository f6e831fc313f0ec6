//! `[output]`: the run's directory and the optional timeline file, and their checks.
//!
//! Must not: create the directory (`train/restore.rs` prepares it).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputCfg {
    #[serde(default = "default_out")]
    pub dir: String,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of every step's phases on every
    /// rank to this file. Also `hvtrain train --timeline FILE`, or HVTRAIN_TIMELINE.
    #[serde(default)]
    pub timeline: Option<String>,
    /// weights.h5 holds the weights of the best epoch by the monitored metric
    /// (`training.early_stopping.monitor`, else val_loss), the checkpoints the last ones.
    #[serde(default)]
    pub keep_best: bool,
    /// TensorBoard event files under OUTPUT_DIR/tensorboard/ (train/, validation/, test/, as
    /// Keras' TensorBoard callback lays them out), written by rank 0 each epoch.
    #[serde(default = "yes")]
    pub tensorboard: bool,
    /// Also every this many steps (0: off): `batch_loss` (rank 0's running mean over the
    /// epoch so far, as Keras' `update_freq` logs it), `batch_samples_per_sec` and
    /// `batch_learning_rate` at the global step, in `train/`.
    #[serde(default)]
    pub tensorboard_every_steps: usize,
    /// Every this many epochs (0: off; Keras' `histogram_freq`): a histogram of each layer's
    /// weights and biases (`dense{l}/weight`, `dense{l}/bias`) in `train/`, for TensorBoard's
    /// Histograms and Distributions tabs. Gathers the whole model on rank 0 each time.
    #[serde(default)]
    pub histogram_freq: usize,
}

fn yes() -> bool {
    true
}

fn default_out() -> String {
    "runs/default".into()
}

impl Default for OutputCfg {
    fn default() -> Self {
        OutputCfg {
            dir: default_out(),
            timeline: None,
            keep_best: false,
            tensorboard: true,
            tensorboard_every_steps: 0,
            histogram_freq: 0,
        }
    }
}

impl OutputCfg {
    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        if self.dir.is_empty() {
            return Err(Error::config(origin, "output.dir", "is empty"));
        }
        super::count(
            origin,
            "output.tensorboard_every_steps",
            self.tensorboard_every_steps as u64,
            super::limits::LOG_EVERY,
        )?;
        super::count(origin, "output.histogram_freq", self.histogram_freq as u64, super::limits::HISTOGRAM_FREQ)?;
        if self.histogram_freq > 0 && !self.tensorboard {
            return Err(Error::config(
                origin,
                "output.histogram_freq",
                format!(
                    "is {}, and the histograms are TensorBoard's, which output.tensorboard = false turns off: set output.tensorboard = true, or histogram_freq = 0",
                    self.histogram_freq
                ),
            ));
        }
        Ok(())
    }
}
