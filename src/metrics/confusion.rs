//! A classifier's confusion matrix (scikit-learn's `confusion_matrix`: row i the rows whose
//! class is i, column j those predicted as class j, the first largest output being the
//! prediction), counts each rank adds per chunk and the ranks sum; the table logged with the
//! per-class report and `hvtrain eval`'s `test_confusion`.
//!
//! Must not: weigh rows (evaluation counts every row once).

/// Above this many classes the matrix is not kept (classes² sums per rank).
pub const MAX_CLASSES: usize = 100;
/// Above this many classes the log shows no table (the JSON still has the matrix).
pub const SHOWN: usize = 20;

/// The predicted class of a row of outputs: the first largest.
pub fn predicted(row: &[f32]) -> usize {
    let mut amax = 0;
    for (j, &v) in row.iter().enumerate() {
        if v > row[amax] {
            amax = j;
        }
    }
    amax
}

/// The sums a matrix of `k` classes takes.
pub fn len(k: usize) -> usize {
    k * k
}

/// Add a chunk's rows: `out` [rows, k] outputs, `labels` one per row, into `sums` [k × k].
pub fn add(sums: &mut [f64], out: &[f32], labels: &[i32], k: usize) {
    for (row, &y) in out.chunks_exact(k).zip(labels) {
        sums[y as usize * k + predicted(row)] += 1.0;
    }
}

/// The matrix from summed counts (`add`'s, over every rank): `[true class][predicted class]`.
pub fn finish(sums: &[f64], k: usize) -> Vec<Vec<u64>> {
    sums[..k * k].chunks_exact(k).map(|r| r.iter().map(|&v| v as u64).collect()).collect()
}

/// The matrix as log lines (up to `SHOWN` classes, else none): a header of the predicted
/// classes, then a line per true class; `names` where the data has them, `what` the data.
pub fn table(m: &[Vec<u64>], names: &[String], what: &str) -> Vec<String> {
    let k = m.len();
    if k > SHOWN {
        return Vec::new();
    }
    let name = |c: usize| names.get(c).cloned().unwrap_or_else(|| c.to_string());
    let first = (0..k).map(|c| name(c).chars().count()).max().unwrap_or(0).max("true \\ predicted".len());
    let most = m.iter().flatten().max().copied().unwrap_or(0).to_string().len();
    let width = (0..k).map(|c| name(c).chars().count()).max().unwrap_or(1).max(most);
    let at = format!("confusion on the {what} data:");
    let mut head = format!("{at} {:>first$}", "true \\ predicted");
    for c in 0..k {
        head += &format!("  {:>width$}", name(c));
    }
    let mut lines = vec![head];
    for (c, row) in m.iter().enumerate() {
        let mut line = format!("{at} {:>first$}", name(c));
        for v in row {
            line += &format!("  {v:>width$}");
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_true_classes_and_columns_predictions() {
        // y_true [0, 0, 0, 1, 1, 2], y_pred [0, 0, 1, 1, 0, 0]: scikit-learn's confusion_matrix
        // [[2, 1, 0], [1, 1, 0], [1, 0, 0]].
        let pred = [0usize, 0, 1, 1, 0, 0];
        let out: Vec<f32> = pred.iter().flat_map(|&p| (0..3).map(move |j| (j == p) as u8 as f32)).collect();
        let mut sums = vec![0.0; len(3)];
        add(&mut sums, &out, &[0, 0, 0, 1, 1, 2], 3);
        let m = finish(&sums, 3);
        assert_eq!(m, vec![vec![2, 1, 0], vec![1, 1, 0], vec![1, 0, 0]]);
        let names: Vec<String> = ["cat", "dog", "bird"].iter().map(|s| s.to_string()).collect();
        let t = table(&m, &names, "test");
        assert_eq!(t[0], "confusion on the test data: true \\ predicted   cat   dog  bird");
        assert_eq!(t[1], "confusion on the test data:              cat     2     1     0");
        assert_eq!(t[3], "confusion on the test data:             bird     1     0     0");
        // Ties go to the first largest output, as accuracy counts them.
        let mut sums = vec![0.0; len(2)];
        add(&mut sums, &[0.5, 0.5], &[1], 2);
        assert_eq!(finish(&sums, 2), vec![vec![0, 0], vec![1, 0]]);
        assert!(table(&vec![vec![0; SHOWN + 1]; SHOWN + 1], &[], "test").is_empty());
    }
}
