//! An evaluation's sums: their layout (loss, correct predictions, rows, then what the targets
//! call for: top-5 hits, per-class counts, the confusion matrix, score histograms, regression
//! sums), what each chunk of outputs adds to them, and the metrics from the sums every rank
//! added up (`EvalResult`).
//!
//! Must not: read data, run the model, or call MPI (the evaluation loops in `mod.rs` do).

use crate::data::shard::{Labels, Shard};
use crate::device::Backend;
use crate::error::Result;
use crate::metrics::auc::{self, Ranking};
use crate::metrics::classes::{self as per_class, PerClass, PER_CLASS};
use crate::metrics::confusion;
use crate::metrics::regression::{self, Regression};
use crate::model::{Mlp, Workspace};
use log::warn;

/// The length of an evaluation's sums: loss, correct predictions (rows for classes, elements
/// for multi-label), rows, then for more than 5 classes the rows whose label is among the 5
/// largest outputs and for up to `classes::MAX_CLASSES` classes `classes::PER_CLASS` counts
/// per class, for up to `confusion::MAX_CLASSES` classes the confusion matrix, then for
/// classifiers and multi-label models with up to `auc::MAX_PROBLEMS`
/// problems their score histograms (`metrics::auc`); for regression targets
/// `regression::PER_OUTPUT` sums per output. From the shard's targets (the whole model's
/// outputs), not a pipeline stage's model: every rank's sums have the same length.
pub fn sums_len(shard: &Shard) -> usize {
    match &shard.labels {
        Labels::Values(_, k) => 3 + regression::PER_OUTPUT * k,
        Labels::Classes(_) | Labels::Bits(..) => auc_at(shard) + auc::len(auc_problems(shard)),
    }
}

/// The ranking problems (`metrics::auc`) whose histograms the shard's sums keep: a
/// classifier's (one for two classes, one per class above), a multi-label model's labels;
/// 0 for regression and above `auc::MAX_PROBLEMS`.
pub(super) fn auc_problems(shard: &Shard) -> usize {
    let p = match &shard.labels {
        Labels::Classes(_) => auc::softmax_problems(shard.outputs),
        Labels::Bits(_, k) => *k,
        Labels::Values(..) => 0,
    };
    if p <= auc::MAX_PROBLEMS {
        p
    } else {
        0
    }
}

/// Where a classifier's confusion matrix starts in its sums (None: not kept).
fn confusion_at(shard: &Shard) -> Option<usize> {
    per_class_at(shard).filter(|_| shard.outputs <= confusion::MAX_CLASSES).map(|at| at + PER_CLASS * shard.outputs)
}

/// Where the score histograms start in a classifier's or multi-label model's sums.
pub(super) fn auc_at(shard: &Shard) -> usize {
    let k = shard.outputs;
    match (confusion_at(shard), per_class_at(shard)) {
        (Some(at), _) => at + confusion::len(k),
        (None, Some(at)) => at + PER_CLASS * k,
        (None, None) => 3 + has_top5(shard) as usize,
    }
}

/// Where a classifier's per-class counts start in its sums (None: not kept, too many classes).
fn per_class_at(shard: &Shard) -> Option<usize> {
    (matches!(shard.labels, Labels::Classes(_)) && shard.outputs <= per_class::MAX_CLASSES)
        .then(|| 3 + has_top5(shard) as usize)
}

/// Whether the shard's classes are more than 5 (top-5 accuracy is then a metric).
fn has_top5(shard: &Shard) -> bool {
    matches!(shard.labels, Labels::Classes(_)) && shard.outputs > 5
}

/// Add a chunk's outputs (downloaded when needed) to the sums that need them: the top-5 hits
/// for more than 5 classes, the per-class counts, the score histograms, the regression sums
/// for regression targets.
pub(super) fn add_outputs<B: Backend>(
    be: &B,
    model: &Mlp,
    ws: &Workspace<B>,
    shard: &Shard,
    rows: std::ops::Range<usize>,
    out: &mut [f32],
    sums: &mut [f64],
) -> Result<()> {
    let (c, k) = (rows.len(), shard.outputs);
    match &shard.labels {
        Labels::Classes(y) if has_top5(shard) || per_class_at(shard).is_some() || auc_problems(shard) > 0 => {
            ws.output_host(be, model, c, &mut out[..c * k])?;
            if has_top5(shard) {
                sums[3] += crate::model::loss::top5_hits(&out[..c * k], &y[rows.clone()], k) as f64;
            }
            if let Some(at) = per_class_at(shard) {
                per_class::add(&mut sums[at..], &out[..c * k], &y[rows.clone()], k);
            }
            if let Some(at) = confusion_at(shard) {
                confusion::add(&mut sums[at..], &out[..c * k], &y[rows.clone()], k);
            }
            if auc_problems(shard) > 0 {
                auc::add_softmax(&mut sums[auc_at(shard)..], &out[..c * k], &y[rows], k);
            }
        }
        Labels::Bits(t, _) if auc_problems(shard) > 0 => {
            ws.output_host(be, model, c, &mut out[..c * k])?;
            auc::add_labels(&mut sums[auc_at(shard)..], &out[..c * k], &t[rows.start * k..rows.end * k], k);
        }
        Labels::Values(v, _) => {
            ws.output_host(be, model, c, &mut out[..c * k])?;
            regression::add(&mut sums[3..], &out[..c * k], &v[rows.start * k..rows.end * k], k, shard.norm());
        }
        _ => {}
    }
    Ok(())
}

/// What an evaluation gives: the mean loss, accuracy for classes (top-5 too for more than 5)
/// and multi-label (the share of labels right), MAE/RMSE/R² for regression.
pub struct EvalResult {
    pub loss: f64,
    pub accuracy: Option<f64>,
    pub top5: Option<f64>,
    pub regression: Option<Regression>,
    /// A classifier's per-class figures (up to `classes::MAX_CLASSES` classes).
    pub classes: Option<PerClass>,
    /// ROC AUC and average precision of a classifier or multi-label model (up to
    /// `auc::MAX_PROBLEMS` problems).
    pub ranking: Option<Ranking>,
}

/// The metrics from sums (`sums_len` of them) added over every rank.
pub fn eval_result(sums: &[f64], shard: &Shard) -> EvalResult {
    if sums[2] == 0.0 {
        warn!("the test set is empty");
    }
    let accuracy = match &shard.labels {
        Labels::Classes(_) => Some(sums[1] / sums[2]),
        Labels::Bits(_, k) => Some(sums[1] / (sums[2] * *k as f64)),
        Labels::Values(..) => None,
    };
    let top5 = has_top5(shard).then(|| sums[3] / sums[2]);
    let regression = match &shard.labels {
        Labels::Values(_, k) if sums.len() > 3 => Some(regression::finish(&sums[3..], sums[2], *k)),
        _ => None,
    };
    let ranking = match auc_problems(shard) {
        0 => None,
        p => Some(auc::finish(&sums[auc_at(shard)..], p)),
    };
    let classes = per_class_at(shard).map(|at| PerClass {
        confusion: confusion_at(shard).map(|m| confusion::finish(&sums[m..], shard.outputs)),
        ..per_class::finish(&sums[at..], shard.outputs)
    });
    EvalResult { loss: sums[0] / sums[2], accuracy, top5, regression, classes, ranking }
}
