//! Losses on the network's output: softmax cross-entropy for classes, mean squared error
//! for regression. Both return a sum over samples, so that ranks can add them up.
//!
//! Must not: divide by the batch (the caller scales by the global row count).

use crate::config::LossKind;
use crate::device::Backend;
use crate::error::{Error, Result};

/// The training targets of a batch, on the device.
pub enum Targets<'a, B: Backend + 'a> {
    /// Class labels, one per sample (the first b of the buffer).
    Classes(&'a B::Labels),
    /// Regression targets, [b, outputs].
    Values(B::View<'a>),
}

impl<B: Backend> Clone for Targets<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Targets<'_, B> {}

/// (sum of per-sample losses, correct predictions: classification only, else 0).
#[allow(clippy::too_many_arguments)]
pub fn compute<B: Backend>(
    be: &B,
    kind: LossKind,
    out: B::View<'_>,
    targets: Targets<B>,
    _b: usize,
    k: usize,
    grad_scale: f32,
    d: Option<B::ViewMut<'_>>,
) -> Result<(f64, usize)> {
    match (kind, targets) {
        (LossKind::SoftmaxCrossEntropy, Targets::Classes(y)) => be.softmax_xent(out, y, k, grad_scale, d),
        (LossKind::Mse, Targets::Values(t)) => Ok((be.mse(out, t, k, grad_scale, d)?, 0)),
        (kind, _) => Err(Error::Training(format!(
            "loss {kind:?} got the wrong kind of targets (an internal error: checked when the data is opened)"
        ))),
    }
}
