//! Ranking metrics of a classifier's evaluation: ROC AUC (scikit-learn's `roc_auc_score`,
//! Keras' `AUC()`) and average precision (`average_precision_score`), from histograms of
//! each problem's scores that each rank adds up and the ranks sum, as Keras' `AUC` sums
//! confusion counts at fixed thresholds. A problem is one class against the rest (two
//! classes: class 1's), or one label of a multi-label model. The scores are binned by their
//! log-odds (`BINS` bins from −`SPAN` to +`SPAN`, 512 per unit: near p = 0.5 a bin is
//! 0.0005 wide in probability), so a confident model's scores near 0 and 1 stay apart; rows
//! in one bin count as ties (half a pair each), which is where the figures can differ from
//! scikit-learn's exact ones (tests/it/ranking.rs: by 2e-5 in ROC AUC and 2.3e-4 in average
//! precision on 400 rows). The price: 256 KiB of sums per problem in the evaluation's
//! all-reduce.
//!
//! Must not: weigh rows (evaluation's metrics count every row once, as Keras' `metrics`).

/// Bins per problem and class side (positives, negatives).
pub const BINS: usize = 16384;
/// The log-odds the bins cover; beyond it, the end bins.
const SPAN: f64 = 16.0;
/// Above this many problems (classes or labels) the histograms are not kept (2 × `BINS`
/// sums per problem and rank).
pub const MAX_PROBLEMS: usize = 100;

/// The problems of a softmax classifier with `k` classes: one for two classes (class 1's
/// score), one per class above.
pub fn softmax_problems(k: usize) -> usize {
    match k {
        0 | 1 => 0,
        2 => 1,
        k => k,
    }
}

/// The sums `problems` problems take.
pub fn len(problems: usize) -> usize {
    problems * 2 * BINS
}

/// The bin of a score with log-odds `x` (NaN in bin 0).
fn bin(x: f64) -> usize {
    let b = ((x + SPAN) * (BINS as f64 / (2.0 * SPAN))).floor();
    if b.is_nan() || b < 0.0 {
        0
    } else {
        (b as usize).min(BINS - 1)
    }
}

fn count(sums: &mut [f64], problem: usize, positive: bool, x: f64) {
    let at = problem * 2 * BINS + if positive { 0 } else { BINS } + bin(x);
    sums[at] += 1.0;
}

/// Add a chunk of a softmax classifier's rows: `logits` [rows, k], `labels` one class per row.
/// The log-odds of class c are z_c − log Σ_{j≠c} e^{z_j}, in float64.
pub fn add_softmax(sums: &mut [f64], logits: &[f32], labels: &[i32], k: usize) {
    if k == 2 {
        for (row, &y) in logits.chunks_exact(2).zip(labels) {
            count(sums, 0, y == 1, row[1] as f64 - row[0] as f64);
        }
        return;
    }
    let mut e = vec![0.0f64; k];
    for (row, &y) in logits.chunks_exact(k).zip(labels) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v)) as f64;
        for (e, &z) in e.iter_mut().zip(row) {
            *e = (z as f64 - m).exp();
        }
        let s: f64 = e.iter().sum();
        for c in 0..k {
            // The rest's sum directly where class c holds most of it (no cancellation).
            let rest = if e[c] > 0.5 * s {
                e.iter().enumerate().filter(|&(j, _)| j != c).map(|(_, v)| v).sum()
            } else {
                s - e[c]
            };
            count(sums, c, y as usize == c, (row[c] as f64 - m) - rest.ln());
        }
    }
}

/// Add a chunk of a multi-label model's rows: `logits` [rows, k] (before the sigmoid, so
/// they are the log-odds), `targets` [rows, k] of 0 and 1.
pub fn add_labels(sums: &mut [f64], logits: &[f32], targets: &[f32], k: usize) {
    for (row, t) in logits.chunks_exact(k).zip(targets.chunks_exact(k)) {
        for (c, (&z, &t)) in row.iter().zip(t).enumerate() {
            count(sums, c, t >= 0.5, z as f64);
        }
    }
}

/// One problem's figures; None where it has no positive (or, for ROC AUC, no negative) rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    pub auc: Option<f64>,
    pub average_precision: Option<f64>,
    pub positives: u64,
}

/// The figures of every problem and their means over the problems that have them
/// (scikit-learn's `average="macro"`; one-vs-rest for more than two classes).
#[derive(Clone, Debug, PartialEq)]
pub struct Ranking {
    pub problems: Vec<Problem>,
    pub auc: Option<f64>,
    pub average_precision: Option<f64>,
}

/// The figures from summed histograms (`add_*`'s, over every rank).
pub fn finish(sums: &[f64], problems: usize) -> Ranking {
    let problems: Vec<Problem> = sums.chunks_exact(2 * BINS).take(problems).map(problem).collect();
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Ranking {
        auc: mean(problems.iter().filter_map(|p| p.auc).collect()),
        average_precision: mean(problems.iter().filter_map(|p| p.average_precision).collect()),
        problems,
    }
}

/// One point of a problem's ROC and precision-recall curves: the rows at or above a
/// threshold on the probability are called positive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub threshold: f64,
    pub tp: u64,
    pub fp: u64,
    pub fn_: u64,
    pub tn: u64,
}

/// The probability at the lower edge of bin `b` (0 for the first: every row is above it).
fn edge(b: usize) -> f64 {
    if b == 0 {
        return 0.0;
    }
    let x = -SPAN + b as f64 * (2.0 * SPAN / BINS as f64);
    1.0 / (1.0 + (-x).exp())
}

/// Problem `p`'s curves from summed histograms (`add_*`'s): the counts at the lower edge of
/// every bin that holds rows, highest threshold first. Exact at those thresholds (each row
/// lies wholly above or below a bin's edge), so `hvtrain predict --threshold` at one of them
/// calls the same rows positive, up to rows within float rounding of the edge.
pub fn curve(sums: &[f64], p: usize) -> Vec<Point> {
    let h = &sums[p * 2 * BINS..(p + 1) * 2 * BINS];
    let (pos, neg) = h.split_at(BINS);
    let (np, nn) = (pos.iter().sum::<f64>() as u64, neg.iter().sum::<f64>() as u64);
    let (mut tp, mut fp) = (0u64, 0u64);
    let mut points = Vec::new();
    for b in (0..BINS).rev() {
        if pos[b] + neg[b] == 0.0 {
            continue;
        }
        tp += pos[b] as u64;
        fp += neg[b] as u64;
        points.push(Point { threshold: edge(b), tp, fp, fn_: np - tp, tn: nn - fp });
    }
    points
}

fn problem(h: &[f64]) -> Problem {
    let (pos, neg) = h.split_at(BINS);
    let (p, n): (f64, f64) = (pos.iter().sum(), neg.iter().sum());
    // Mann–Whitney: each positive above a negative counts 1, a tie (one bin) ½.
    let mut below = 0.0;
    let mut pairs = 0.0;
    for (&a, &b) in pos.iter().zip(neg) {
        pairs += a * (below + 0.5 * b);
        below += b;
    }
    // Average precision: over the thresholds from the top, Σ (recall gained) × precision.
    let (mut tp, mut fp, mut ap) = (0.0, 0.0, 0.0);
    for (&a, &b) in pos.iter().zip(neg).rev() {
        tp += a;
        fp += b;
        if a > 0.0 {
            ap += a / p * (tp / (tp + fp));
        }
    }
    Problem {
        auc: (p > 0.0 && n > 0.0).then(|| pairs / (p * n)),
        average_precision: (p > 0.0).then_some(ap),
        positives: p as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }

    #[test]
    fn binary_scores_in_distinct_bins_are_scikit_learns_figures() {
        // Two classes, logits (0, z): class 1's log-odds z. y [0, 0, 1, 1, 0, 1] with scores
        // ranked 1 < 2 < 3 < 4 < 5 < 6 in the order [1, 3, 2, 6, 4, 5]: scikit-learn gives
        // roc_auc_score 7/9 and average_precision_score (1 + 1 + 3/5) / 3.
        let z = [-3.0f32, -1.0, -2.0, 3.0, 1.0, 2.0];
        let y = [0, 0, 1, 1, 0, 1];
        let logits: Vec<f32> = z.iter().flat_map(|&z| [0.0, z]).collect();
        let mut sums = vec![0.0; len(1)];
        add_softmax(&mut sums, &logits, &y, 2);
        let r = finish(&sums, 1);
        close(r.auc.unwrap(), 7.0 / 9.0);
        close(r.average_precision.unwrap(), (1.0 + 1.0 + 0.6) / 3.0);
        assert_eq!(r.problems[0].positives, 3);
    }

    #[test]
    fn ties_count_half_and_undefined_problems_are_left_out() {
        // All scores equal: every pair a tie, AUC ½; precision at the one threshold ½.
        let mut sums = vec![0.0; len(2)];
        add_labels(&mut sums, &[0.0, 5.0, 0.0, 5.0], &[1.0, 0.0, 0.0, 0.0], 2);
        let r = finish(&sums, 2);
        close(r.problems[0].auc.unwrap(), 0.5);
        close(r.problems[0].average_precision.unwrap(), 0.5);
        // Label 1 has no positives: neither figure, and the means are label 0's alone.
        assert_eq!(r.problems[1], Problem { auc: None, average_precision: None, positives: 0 });
        close(r.auc.unwrap(), 0.5);
    }

    #[test]
    fn one_vs_rest_scores_each_class_by_its_log_odds() {
        // Three classes; each row's probabilities (softmax of the logits) in the comments.
        let logits = [
            4.0f32, 0.0, 0.0, // 0.965, 0.018, 0.018
            0.0, 0.0, 0.0, // 1/3 each
            0.0, -3.0, 4.0, // 0.018, 0.001, 0.981
            0.0, 2.0, -1.0, // 0.114, 0.844, 0.042
        ];
        let y = [0, 1, 2, 0];
        let mut sums = vec![0.0; len(3)];
        add_softmax(&mut sums, &logits, &y, 3);
        let r = finish(&sums, 3);
        // Class 0: rows 0 and 3 against rows 1 and 2: row 0 above both, row 3 above row 2 only.
        close(r.problems[0].auc.unwrap(), 0.75);
        // Class 1: row 1 above rows 0 and 2, below row 3.
        close(r.problems[1].auc.unwrap(), 2.0 / 3.0);
        close(r.problems[2].auc.unwrap(), 1.0);
        close(r.auc.unwrap(), (0.75 + 2.0 / 3.0 + 1.0) / 3.0);
        // Each class's score is its log-odds, z_c − log Σ_{j≠c} e^{z_j}: where it is binned.
        let row = [3.0f32, 1.0, 0.0];
        let mut sums = vec![0.0; len(3)];
        add_softmax(&mut sums, &row, &[0], 3);
        let at = |c: usize, positive: bool| {
            sums[c * 2 * BINS + if positive { 0 } else { BINS }..][..BINS].iter().position(|&v| v == 1.0)
        };
        let e = std::f64::consts::E;
        assert_eq!(at(0, true), Some(bin(3.0 - (e + 1.0).ln())));
        assert_eq!(at(1, false), Some(bin(1.0 - (e * e * e + 1.0).ln())));
        assert_eq!(at(2, false), Some(bin(-(e * e * e + e).ln())));
    }

    #[test]
    fn curves_count_the_rows_at_or_above_each_bins_edge() {
        // Log-odds [-3, -1, -2, 3, 1, 2] for y [0, 0, 1, 1, 0, 1] (the first test's rows).
        let z = [-3.0f32, -1.0, -2.0, 3.0, 1.0, 2.0];
        let logits: Vec<f32> = z.iter().flat_map(|&z| [0.0, z]).collect();
        let mut sums = vec![0.0; len(1)];
        add_softmax(&mut sums, &logits, &[0, 0, 1, 1, 0, 1], 2);
        let c = curve(&sums, 0);
        let counts: Vec<(u64, u64, u64, u64)> = c.iter().map(|p| (p.tp, p.fp, p.fn_, p.tn)).collect();
        assert_eq!(counts, vec![(1, 0, 2, 3), (2, 0, 1, 3), (2, 1, 1, 2), (2, 2, 1, 1), (3, 2, 0, 1), (3, 3, 0, 0)]);
        // Each threshold is its bin's lower edge: the row's probability is at or above it and
        // below the next bin's.
        for (p, &z) in c.iter().zip(&[3.0f64, 2.0, 1.0, -1.0, -2.0, -3.0]) {
            let prob = 1.0 / (1.0 + (-z).exp());
            assert!(p.threshold <= prob && prob < edge(bin(z) + 1), "{p:?} for {prob}");
        }
        assert_eq!(edge(0), 0.0);
        assert!((edge(BINS / 2) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn bins_cover_the_log_odds_and_clamp_beyond() {
        assert_eq!(bin(-SPAN - 1.0), 0);
        assert_eq!(bin(f64::NAN), 0);
        assert_eq!(bin(f64::INFINITY), BINS - 1);
        assert_eq!(bin(0.0), BINS / 2);
        assert_eq!(bin(-1e-9), BINS / 2 - 1);
        assert_eq!(bin(1.0 / 512.0), BINS / 2 + 1);
    }
}
