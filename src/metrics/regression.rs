//! Regression metrics in the targets' own units: MAE, RMSE and R² per output and their means
//! over the outputs (as scikit-learn's `mean_absolute_error`, `root_mean_squared_error` and
//! `r2_score` with `multioutput="uniform_average"`), from sums that add over chunks and ranks.
//! With `data.normalize_y` the outputs and targets are standardized: errors are scaled back
//! by the targets' standard deviations first.
//!
//! Must not: run the model (evaluation and the step do) or talk to other ranks (callers sum
//! the sums).

use crate::data::norm::Norm;
use serde::Serialize;

/// Regression metrics per output, in the targets' units.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PerOutput {
    pub mae: Vec<f64>,
    pub rmse: Vec<f64>,
    pub r2: Vec<f64>,
}

/// Sums per output: |e|, e², y, y² (raw units).
pub const PER_OUTPUT: usize = 4;

/// Add a chunk: `outputs` and `targets` [rows, k] as the model sees them.
pub fn add(sums: &mut [f64], outputs: &[f32], targets: &[f32], k: usize, norm: &Norm) {
    let scaled = !norm.y_div.is_empty();
    for (i, (&o, &t)) in outputs.iter().zip(targets).enumerate() {
        let j = i % k;
        let (div, shift) = if scaled { (norm.y_div[j], norm.y_shift[j]) } else { (1.0, 0.0) };
        let e = (o as f64 - t as f64) * div;
        let y = t as f64 * div + shift;
        let s = &mut sums[j * PER_OUTPUT..(j + 1) * PER_OUTPUT];
        s[0] += e.abs();
        s[1] += e * e;
        s[2] += y;
        s[3] += y * y;
    }
}

/// Means over the outputs, and per output (when there are at most 16).
#[derive(Clone, Debug, PartialEq)]
pub struct Regression {
    pub mae: f64,
    pub rmse: f64,
    pub r2: f64,
    pub per_output: Option<PerOutput>,
}

/// From sums over `rows` rows and `k` outputs. A constant target's R² is 1 when predicted
/// exactly, else 0 (scikit-learn's convention).
pub fn finish(sums: &[f64], rows: f64, k: usize) -> Regression {
    let mut p = PerOutput { mae: Vec::new(), rmse: Vec::new(), r2: Vec::new() };
    for s in sums.chunks_exact(PER_OUTPUT).take(k) {
        p.mae.push(s[0] / rows);
        p.rmse.push((s[1] / rows).sqrt());
        let sst = s[3] - s[2] * s[2] / rows;
        p.r2.push(if sst > 0.0 {
            1.0 - s[1] / sst
        } else if s[1] == 0.0 {
            1.0
        } else {
            0.0
        });
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    Regression { mae: mean(&p.mae), rmse: mean(&p.rmse), r2: mean(&p.r2), per_output: (k <= 16).then_some(p) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_mae_rmse_by_hand_and_in_raw_units() {
        // y = [1, 2, 3, 4], predictions [1.5, 2, 2.5, 4.5]: MAE 0.375, MSE 0.1875, SST 5.
        let (y, o) = ([1.0f32, 2.0, 3.0, 4.0], [1.5f32, 2.0, 2.5, 4.5]);
        let mut s = vec![0.0; PER_OUTPUT];
        add(&mut s, &o[..2], &y[..2], 1, &Norm::default());
        add(&mut s, &o[2..], &y[2..], 1, &Norm::default());
        let r = finish(&s, 4.0, 1);
        assert_eq!(r.mae, 0.375);
        assert!((r.rmse - 0.1875f64.sqrt()).abs() < 1e-15);
        assert!((r.r2 - (1.0 - 0.75 / 5.0)).abs() < 1e-15);
        // The same in standardized units with the scaling given: the same raw metrics.
        let norm = Norm { y_shift: vec![2.5], y_div: vec![2.0], ..Default::default() };
        let z = |v: &[f32]| v.iter().map(|&x| (x - 2.5) / 2.0).collect::<Vec<f32>>();
        let mut s2 = vec![0.0; PER_OUTPUT];
        add(&mut s2, &z(&o), &z(&y), 1, &norm);
        let r2 = finish(&s2, 4.0, 1);
        assert!((r2.mae - r.mae).abs() < 1e-12 && (r2.r2 - r.r2).abs() < 1e-12, "{r2:?} vs {r:?}");
    }
}
