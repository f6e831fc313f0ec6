//! `hvtrain eval --curves FILE.csv`: the ROC and precision-recall curves of a classifier's or
//! multi-label model's test data (scikit-learn's `roc_curve`, `precision_recall_curve`), one
//! row per threshold and problem, from the score histograms every rank summed
//! (`metrics::auc::curve`); what a user picks `hvtrain predict --threshold` from.
//!
//! Must not: compute the figures (`metrics::auc` does) or write on a rank but 0.

use crate::data::shard::{Labels, Shard};
use crate::error::{Error, Result};
use crate::metrics::auc;
use std::path::Path;

/// Before the evaluation: `--curves` needs a classifier or multi-label model whose score
/// histograms are kept, and a folder to write into.
pub(super) fn check(path: &Path, shard: &Shard) -> Result<()> {
    let why = match &shard.labels {
        Labels::Values(..) => Some("a regression has no ROC or precision-recall curve".to_string()),
        _ if super::sums::auc_problems(shard) == 0 => Some(format!(
            "the curves are kept for up to {} classes or labels, and the model has {}",
            auc::MAX_PROBLEMS,
            shard.outputs
        )),
        _ => None,
    };
    if let Some(why) = why {
        return Err(Error::config("command line", "--curves", format!("{}: {why}", path.display())));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(Error::config(
            "command line",
            "--curves",
            format!(
                "{}: the folder {} does not exist; create it or name a file in another",
                path.display(),
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The name of each ranking problem of the shard, for the curves: class 1's for two classes,
/// each class's above; each label's (the targets' column names, else class names) for
/// multi-label; the index where the data names none.
pub(super) fn problem_names(shard: &Shard) -> Vec<String> {
    let k = shard.outputs;
    let name = |j: usize, list: &[String]| list.get(j).cloned().unwrap_or_else(|| j.to_string());
    match &shard.labels {
        Labels::Classes(_) if k == 2 => vec![name(1, &shard.class_names)],
        Labels::Classes(_) => (0..k).map(|j| name(j, &shard.class_names)).collect(),
        Labels::Bits(..) => {
            let list = if shard.columns.y.len() == k { &shard.columns.y } else { &shard.class_names };
            (0..k).map(|j| name(j, list)).collect()
        }
        Labels::Values(..) => Vec::new(),
    }
}

/// Write the curves of `problems` problems (`names`: each one's name) from summed histograms
/// `hist` to `path` (CSV, under a temporary name renamed into place). Returns the points.
pub fn write(path: &Path, hist: &[f64], problems: usize, names: &[String]) -> Result<usize> {
    let tmp = crate::weights::tmp_path(path);
    let err = |e: csv::Error| Error::io(&tmp, "write", std::io::Error::other(e.to_string()));
    let mut points = 0;
    {
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
        let mut w = csv::Writer::from_writer(std::io::BufWriter::new(file));
        w.write_record(["problem", "threshold", "tp", "fp", "fn", "tn", "precision", "recall", "fpr"]).map_err(err)?;
        for (p, name) in names.iter().enumerate().take(problems) {
            for q in auc::curve(hist, p) {
                let ratio = |a: u64, b: u64| if b == 0 { String::new() } else { (a as f64 / b as f64).to_string() };
                w.write_record([
                    name.clone(),
                    q.threshold.to_string(),
                    q.tp.to_string(),
                    q.fp.to_string(),
                    q.fn_.to_string(),
                    q.tn.to_string(),
                    ratio(q.tp, q.tp + q.fp),
                    ratio(q.tp, q.tp + q.fn_),
                    ratio(q.fp, q.fp + q.tn),
                ])
                .map_err(err)?;
                points += 1;
            }
        }
        w.flush().map_err(|e| Error::io(&tmp, "write", e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, "rename the finished curves into place", e))?;
    Ok(points)
}
