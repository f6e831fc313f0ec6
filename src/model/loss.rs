//! Losses on the network's output: softmax cross-entropy for classes; squared, absolute and
//! Huber error for regression; binary cross-entropy for multi-label targets. Each returns a
//! sum over samples, so that ranks can add them up.
//!
//! Must not: divide by the batch (the caller scales by the global row count).

use crate::config::{Loss, LossKind};
use crate::device::{Backend, Pointwise};
use crate::error::{Error, Result};

/// The training targets of a batch, on the device. The last field of each is the rows'
/// sample weights [b] when `data.sample_weight` weighs them (training only, as Keras'
/// `sample_weight` in `fit`).
pub enum Targets<'a, B: Backend + 'a> {
    /// Class labels, one per sample (the first b of the buffer), and the classes' weights
    /// [classes] when `model.class_weights` weighs them (training only, as Keras' `class_weight`).
    Classes(&'a B::Labels, Option<B::View<'a>>, Option<B::View<'a>>),
    /// Regression or 0/1 multi-label targets, [b, outputs].
    Values(B::View<'a>, Option<B::View<'a>>),
}

impl<B: Backend> Clone for Targets<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Targets<'_, B> {}

/// (sum of per-sample losses, correct predictions: rows for classes, elements for
/// multi-label, 0 for regression), or with `later` the sums left pending where the backend defers them (None:
/// `Backend::pending_loss_sums` reads them).
#[allow(clippy::too_many_arguments)]
pub fn compute_maybe_later<B: Backend>(
    be: &B,
    loss: Loss,
    out: B::View<'_>,
    targets: Targets<B>,
    _b: usize,
    k: usize,
    grad_scale: f32,
    d: Option<B::ViewMut<'_>>,
    later: bool,
) -> Result<Option<(f64, usize)>> {
    let f = match loss.kind {
        LossKind::SoftmaxCrossEntropy => None,
        LossKind::Mse => Some(Pointwise::Mse),
        LossKind::Mae => Some(Pointwise::Mae),
        LossKind::Huber => Some(Pointwise::Huber(loss.huber_delta)),
        LossKind::BinaryCrossEntropy => Some(Pointwise::BinaryXent(loss.label_smoothing)),
        LossKind::LogCosh => Some(Pointwise::LogCosh),
        LossKind::Mape => Some(Pointwise::Mape),
        LossKind::Msle => Some(Pointwise::Msle),
        LossKind::Quantile => Some(Pointwise::Quantile(loss.quantile)),
    };
    match (f, targets) {
        (None, Targets::Classes(y, w, rw)) if later => {
            be.softmax_xent_later(out, y, w, rw, k, loss.label_smoothing, grad_scale, d)
        }
        (None, Targets::Classes(y, w, rw)) => {
            be.softmax_xent(out, y, w, rw, k, loss.label_smoothing, grad_scale, d).map(Some)
        }
        (Some(f), Targets::Values(t, rw)) if later => be.pointwise_loss_later(f, out, t, rw, k, grad_scale, d),
        (Some(f), Targets::Values(t, rw)) => be.pointwise_loss(f, out, t, rw, k, grad_scale, d).map(Some),
        (_, _) => Err(Error::Training(format!(
            "loss {} got the wrong kind of targets (an internal error: checked when the data is opened)",
            loss.kind.name()
        ))),
    }
}

/// Rows of `logits` [c, k] whose label is among the 5 largest outputs (a label tied with the
/// fifth counts: no more than 4 outputs strictly larger; a NaN output never counts).
pub fn top5_hits(logits: &[f32], labels: &[i32], k: usize) -> usize {
    logits
        .chunks_exact(k)
        .zip(labels)
        .filter(|(row, &y)| {
            let v = row[y as usize];
            !v.is_nan() && row.iter().filter(|&&o| o > v).count() < 5
        })
        .count()
}
