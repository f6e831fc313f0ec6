//! `[model]`: the MLP's widths, hidden activation and loss, and their checks. Owns only the
//! table; the network itself is `model/`'s.
//!
//! Must not: build the network.

use super::abbreviate;
use super::limits;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Relu,
    Tanh,
    Gelu,
    Identity,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LossKind {
    /// Classification: `y` holds integer class labels in [0, classes).
    SoftmaxCrossEntropy,
    /// Regression: `y` holds float32 targets [N, outputs]; loss is the mean over all elements.
    Mse,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCfg {
    /// Layer widths, input first: [784, 512, 512, 10] is two hidden layers of 512.
    pub layers: Vec<usize>,
    #[serde(default = "default_activation")]
    pub activation: Activation,
    #[serde(default = "default_loss")]
    pub loss: LossKind,
}

fn default_activation() -> Activation {
    Activation::Relu
}
fn default_loss() -> LossKind {
    LossKind::SoftmaxCrossEntropy
}

impl ModelCfg {
    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        let bad = |msg: String| Err(Error::config(origin, "model.layers", msg));
        let m = self;
        let l = limits::LAYER_COUNT;
        if m.layers.len() < 2 || m.layers.len() as u64 > l.1 {
            return bad(format!(
                "needs at least an input and an output width, got {:?} (allowed: {} to {} widths)",
                abbreviate(&m.layers),
                l.0,
                l.1
            ));
        }
        let w = limits::LAYER_WIDTH;
        if let Some(i) = m.layers.iter().position(|&v| v == 0) {
            return bad(format!("width {i} is 0; every layer needs at least one unit (allowed: {} to {})", w.0, w.1));
        }
        if let Some(i) = m.layers.iter().position(|&v| v as u64 > w.1) {
            return bad(format!("width {i} is {}; allowed: {} to {}", m.layers[i], w.0, w.1));
        }
        let n_params: u128 = m.layers.windows(2).map(|p| (p[0] as u128 + 1) * p[1] as u128).sum();
        if n_params > limits::MAX_PARAMS as u128 {
            return bad(format!(
                "{:?} has {n_params} parameters; at most {} are allowed (MPI element counts are 32-bit)",
                abbreviate(&m.layers),
                limits::MAX_PARAMS
            ));
        }
        if m.loss == LossKind::SoftmaxCrossEntropy && *m.layers.last().unwrap() < 2 {
            return bad("softmax_cross_entropy needs at least 2 output classes".into());
        }
        Ok(())
    }
}
