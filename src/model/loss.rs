//! Losses on the network's output: softmax cross-entropy for classes, mean squared error
//! for regression. Both return a sum over samples, so that ranks can add them up.

use crate::config::LossKind;
use crate::device::cpu;

/// The training targets of a batch.
#[derive(Clone, Copy, Debug)]
pub enum Targets<'a> {
    /// Class labels, one per sample.
    Classes(&'a [i32]),
    /// Regression targets, [b, outputs].
    Values(&'a [f32]),
}

/// (sum of per-sample losses, correct predictions: classification only, else 0).
pub fn compute(
    kind: LossKind,
    out: &[f32],
    targets: Targets,
    k: usize,
    grad_scale: f32,
    d: Option<&mut [f32]>,
) -> (f64, usize) {
    match (kind, targets) {
        (LossKind::SoftmaxCrossEntropy, Targets::Classes(y)) => cpu::softmax_xent(out, y, k, grad_scale, d),
        (LossKind::Mse, Targets::Values(t)) => (cpu::mse(out, t, k, grad_scale, d), 0),
        (kind, _) => panic!("loss {kind:?} got the wrong kind of targets (checked when the data is opened)"),
    }
}
