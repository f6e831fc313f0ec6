//! Per-class metrics of a classifier's evaluation (scikit-learn's `classification_report`):
//! each class's recall, precision, F1 and rows, and the averages over the classes that an
//! imbalanced problem is judged by (balanced accuracy: the mean recall; macro F1), from
//! counts each rank adds up and the ranks sum.
//!
//! Must not: weigh rows (evaluation counts every row once, whatever `model.class_weights` says).

use super::auc::Ranking;
use super::confusion::predicted;

/// Counts per class in an evaluation's sums: rows predicted right, rows predicted as the
/// class, rows of the class.
pub const PER_CLASS: usize = 3;

/// Above this many classes the per-class counts are not kept (3 × classes sums per rank and
/// a report nobody reads).
pub const MAX_CLASSES: usize = 1000;

/// Add a chunk's rows: `out` [rows, k] outputs (the first largest is the prediction, as the
/// loss kernels count accuracy), `labels` one per row, into `sums` [k × PER_CLASS].
pub fn add(sums: &mut [f64], out: &[f32], labels: &[i32], k: usize) {
    for (row, &y) in out.chunks_exact(k).zip(labels) {
        let amax = predicted(row);
        let y = y as usize;
        sums[y * PER_CLASS] += (amax == y) as u8 as f64;
        sums[amax * PER_CLASS + 1] += 1.0;
        sums[y * PER_CLASS + 2] += 1.0;
    }
}

/// One class's figures; None where the ratio has no rows to count (a recall without rows of
/// the class, a precision without predictions of it).
#[derive(Clone, Debug, PartialEq)]
pub struct Class {
    pub recall: Option<f64>,
    pub precision: Option<f64>,
    pub f1: f64,
    pub rows: u64,
    pub predicted: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PerClass {
    pub classes: Vec<Class>,
    /// The mean recall over the classes with rows (scikit-learn's `balanced_accuracy_score`).
    pub balanced_accuracy: f64,
    /// The mean F1 over the classes with rows or predictions (`f1_score(average="macro")`; a
    /// class predicted but never right, or present but never predicted, counts 0).
    pub macro_f1: f64,
    /// The confusion matrix (`metrics::confusion`, up to its `MAX_CLASSES` classes), set by
    /// the evaluation that counted it.
    pub confusion: Option<Vec<Vec<u64>>>,
}

/// The figures from summed counts (`add`'s, over every rank).
pub fn finish(sums: &[f64], k: usize) -> PerClass {
    let classes: Vec<Class> = (0..k)
        .map(|c| {
            let (right, predicted, rows) = (sums[c * PER_CLASS], sums[c * PER_CLASS + 1], sums[c * PER_CLASS + 2]);
            let f1 = if rows + predicted > 0.0 { 2.0 * right / (rows + predicted) } else { 0.0 };
            Class {
                recall: (rows > 0.0).then(|| right / rows),
                precision: (predicted > 0.0).then(|| right / predicted),
                f1,
                rows: rows as u64,
                predicted: predicted as u64,
            }
        })
        .collect();
    let recalls: Vec<f64> = classes.iter().filter_map(|c| c.recall).collect();
    let seen: Vec<f64> = classes.iter().filter(|c| c.rows + c.predicted > 0).map(|c| c.f1).collect();
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    PerClass { balanced_accuracy: mean(&recalls), macro_f1: mean(&seen), classes, confusion: None }
}

/// The report as log lines: a header, one line per class (`names` where the data has them),
/// and the averages; `what` names the data ("test", "validation"). With the scores'
/// `ranking` (`metrics::auc`), each class's one-vs-rest ROC AUC where it has one per class,
/// and the means.
pub fn report(p: &PerClass, ranking: Option<&Ranking>, names: &[String], what: &str) -> Vec<String> {
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0).max(5);
    let ratio = |v: Option<f64>| v.map_or("     -".to_string(), |v| format!("{v:6.4}"));
    let per_class_auc = ranking.filter(|g| g.problems.len() == p.classes.len());
    let mut lines = vec![format!(
        "per class on the {what} data: {:>width$}  recall  precision      f1    rows  predicted{}",
        "class",
        if per_class_auc.is_some() { "     auc" } else { "" }
    )];
    for (c, k) in p.classes.iter().enumerate() {
        let name = names.get(c).cloned().unwrap_or_else(|| c.to_string());
        lines.push(format!(
            "per class on the {what} data: {name:>width$}  {}     {}  {:6.4} {:7} {:10}{}",
            ratio(k.recall),
            ratio(k.precision),
            k.f1,
            k.rows,
            k.predicted,
            per_class_auc.map_or(String::new(), |g| format!("  {}", ratio(g.problems[c].auc)))
        ));
    }
    let ranked = match ranking {
        Some(g) => format!(
            ", ROC AUC{} {}, average precision {}",
            if per_class_auc.is_some() { " (one vs rest, macro)" } else { "" },
            ratio(g.auc).trim(),
            ratio(g.average_precision).trim()
        ),
        None => String::new(),
    };
    lines.push(format!(
        "per class on the {what} data: balanced accuracy (mean recall) {:.4}, macro F1 {:.4}{ranked}",
        p.balanced_accuracy, p.macro_f1
    ));
    if let Some(m) = &p.confusion {
        lines.extend(super::confusion::table(m, names, what));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_figures_are_scikit_learns() {
        // y_true [0, 0, 0, 1, 1, 2], y_pred [0, 0, 1, 1, 0, 0]: scikit-learn gives recall
        // [2/3, 1/2, 0], precision [1/2, 1/2, 0 (warned)], F1 [4/7, 1/2, 0], balanced accuracy
        // 7/18, macro F1 (4/7 + 1/2 + 0) / 3.
        let preds = [0, 0, 1, 1, 0, 0];
        let labels = [0, 0, 0, 1, 1, 2];
        let mut out = [0.0f32; 6 * 3];
        for (r, &p) in preds.iter().enumerate() {
            out[r * 3 + p] = 1.0;
        }
        // A tie goes to the first largest output: row 5's [1, 0, 1] is class 0.
        out[5 * 3 + 2] = 1.0;
        let mut sums = vec![0.0; 3 * PER_CLASS];
        add(&mut sums[..], &out[..9], &labels[..3], 3);
        add(&mut sums[..], &out[9..], &labels[3..], 3);
        let p = finish(&sums, 3);
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        close(p.classes[0].recall.unwrap(), 2.0 / 3.0);
        close(p.classes[1].recall.unwrap(), 0.5);
        close(p.classes[2].recall.unwrap(), 0.0);
        close(p.classes[0].precision.unwrap(), 0.5);
        assert_eq!(p.classes[2].precision, None, "class 2 is never predicted");
        close(p.classes[0].f1, 4.0 / 7.0);
        close(p.balanced_accuracy, 7.0 / 18.0);
        close(p.macro_f1, (4.0 / 7.0 + 0.5) / 3.0);
        assert_eq!((p.classes[0].rows, p.classes[0].predicted), (3, 4));
        let lines = report(&p, None, &[], "test");
        assert_eq!(lines.len(), 5);
        assert!(lines[3].contains("     2  0.0000          -  0.0000       1          0"), "{lines:#?}");
        assert!(lines[4].ends_with("balanced accuracy (mean recall) 0.3889, macro F1 0.3571"), "{lines:#?}");
        // With the scores' ranking: a column of each class's AUC, and the means.
        let mut h = vec![0.0; crate::metrics::auc::len(3)];
        crate::metrics::auc::add_softmax(&mut h, &out, &labels, 3);
        let g = crate::metrics::auc::finish(&h, 3);
        let lines = report(&p, Some(&g), &[], "test");
        assert!(lines[0].ends_with("predicted     auc"), "{lines:#?}");
        assert!(lines[1].ends_with(&format!("  {:6.4}", g.problems[0].auc.unwrap())), "{lines:#?}");
        let means = format!(
            ", ROC AUC (one vs rest, macro) {:.4}, average precision {:.4}",
            g.auc.unwrap(),
            g.average_precision.unwrap()
        );
        assert!(lines[4].ends_with(&means), "{lines:#?}");
    }

    #[test]
    fn a_class_without_rows_or_predictions_is_left_out_of_the_means() {
        let mut sums = vec![0.0; 3 * PER_CLASS];
        add(&mut sums, &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], &[0, 1], 3);
        let p = finish(&sums, 3);
        assert_eq!(p.classes[2].recall, None);
        assert_eq!((p.balanced_accuracy, p.macro_f1), (1.0, 1.0));
    }
}
