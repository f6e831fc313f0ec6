//! Normalization from the data (`data.normalize`, `data.normalize_y`): per-feature statistics
//! over all training rows, and what they turn into — a per-feature scale and offset that
//! `shard::read_x` applies as rows are read (training, `eval`, `predict` alike), and the
//! targets standardized in place.
//!
//! The statistics do not depend on the rank count: the rows are cut into a fixed number of
//! blocks that depends only on the row and feature counts; each block's count, mean, sum of
//! squared deviations, min and max are computed in float64 (Welford) by the one rank that
//! owns it; the callers sum the blocks' slots over ranks (each slot has one non-zero
//! contributor, so the sum is exact) and `merge` combines them in block order (Chan et al.).
//! So 1, 2 or 3 ranks give the same bits.
//!
//! Must not: call MPI (the caller sums the partials over ranks), read files (`Shard::
//! stat_partials` feeds `fill` its rows) or know the model.

use crate::config::Normalize;
use crate::error::Result;
use std::ops::Range;

/// Per-feature statistics, for x (after `data.x_scale`/`x_offset`) or for the targets.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub rows: usize,
    pub mean: Vec<f64>,
    /// Population variance (ddof 0, as numpy's `var` and Keras' `Normalization`).
    pub var: Vec<f64>,
    pub min: Vec<f64>,
    pub max: Vec<f64>,
}

/// What training learned about the data: v_norm = (v − shift) / div per feature of x (v
/// after x_scale and x_offset), and per output of y. Empty vectors: not normalized.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Norm {
    pub x_kind: Normalize,
    pub x_shift: Vec<f64>,
    pub x_div: Vec<f64>,
    pub y_shift: Vec<f64>,
    pub y_div: Vec<f64>,
}

impl Norm {
    pub fn is_none(&self) -> bool {
        self.x_shift.is_empty() && self.y_shift.is_empty()
    }

    /// x's shift and divisor from its statistics: mean and standard deviation, or min and
    /// range; a constant feature (zero spread) is divided by 1, so it becomes 0.
    pub fn set_x(&mut self, kind: Normalize, s: &Stats) {
        self.x_kind = kind;
        (self.x_shift, self.x_div) = match kind {
            Normalize::None => (Vec::new(), Vec::new()),
            Normalize::Standard => (s.mean.clone(), s.var.iter().map(|v| spread(v.sqrt())).collect()),
            Normalize::Minmax => (s.min.clone(), s.min.iter().zip(&s.max).map(|(a, b)| spread(b - a)).collect()),
        };
    }

    /// y's mean and standard deviation.
    pub fn set_y(&mut self, s: &Stats) {
        self.y_shift = s.mean.clone();
        self.y_div = s.var.iter().map(|v| spread(v.sqrt())).collect();
    }

    /// Standardize targets [rows, k] in place.
    pub fn apply_y(&self, values: &mut [f32]) {
        if self.y_shift.is_empty() {
            return;
        }
        let k = self.y_shift.len();
        for (i, v) in values.iter_mut().enumerate() {
            *v = ((*v as f64 - self.y_shift[i % k]) / self.y_div[i % k]) as f32;
        }
    }

    /// Model outputs [rows, k] back to the targets' units.
    pub fn unapply_y(&self, outputs: &mut [f32]) {
        if self.y_shift.is_empty() {
            return;
        }
        let k = self.y_shift.len();
        for (i, v) in outputs.iter_mut().enumerate() {
            *v = (*v as f64 * self.y_div[i % k] + self.y_shift[i % k]) as f32;
        }
    }

    /// For the log: "x (standard): features 0-7: shift [..] div [..]", a line per group of 8
    /// features, the first `max_lines` of them, then a summary of the rest.
    pub fn describe(&self, max_lines: usize) -> Vec<String> {
        let mut out = Vec::new();
        let (what, a) = if self.x_kind == Normalize::Minmax { ("min", "range") } else { ("mean", "std") };
        group_lines(&mut out, &format!("x ({})", self.x_kind.name()), what, a, &self.x_shift, &self.x_div, max_lines);
        group_lines(&mut out, "y (standard)", "mean", "std", &self.y_shift, &self.y_div, max_lines);
        out
    }
}

fn group_lines(out: &mut Vec<String>, name: &str, a: &str, b: &str, shift: &[f64], div: &[f64], max_lines: usize) {
    let f = |v: &[f64]| v.iter().map(|x| format!("{x:.4e}")).collect::<Vec<_>>().join(" ");
    let groups = shift.len().div_ceil(8);
    for g in 0..groups.min(max_lines) {
        let r = g * 8..((g + 1) * 8).min(shift.len());
        out.push(format!(
            "normalize {name}, features {}-{}: {a} [{}], {b} [{}]",
            r.start,
            r.end - 1,
            f(&shift[r.clone()]),
            f(&div[r.clone()])
        ));
    }
    if groups > max_lines {
        let rest = max_lines * 8..shift.len();
        let lo = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = |v: &[f64]| v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let constant = div[rest.clone()].iter().zip(&shift[rest.clone()]).filter(|(d, _)| **d == 1.0).count();
        out.push(format!(
            "normalize {name}, features {}-{}: {a} from {:.4e} to {:.4e}, {b} from {:.4e} to {:.4e} ({constant} divided by 1)",
            rest.start,
            rest.end - 1,
            lo(&shift[rest.clone()]),
            hi(&shift[rest.clone()]),
            lo(&div[rest.clone()]),
            hi(&div[rest.clone()])
        ));
    }
}

/// A spread of 0 (a constant feature) or one too small to divide by becomes 1.
fn spread(s: f64) -> f64 {
    if s.is_finite() && s > 1e-30 {
        s
    } else {
        1.0
    }
}

/// How many blocks `rows` rows of `features` features are cut into: at most 256, at least
/// 4096 rows each (fewer for small data), and at most 2^22 doubles of partials in all.
pub fn block_count(rows: usize, features: usize) -> usize {
    let by_rows = rows.div_ceil(4096).max(1);
    let by_size = ((1usize << 22) / (SLOT * features.max(1))).max(1);
    by_rows.min(256).min(by_size)
}

/// Block `b` of `n` blocks of `rows` rows.
pub fn block_rows(b: usize, n: usize, rows: usize) -> Range<usize> {
    b * rows / n..(b + 1) * rows / n
}

/// Doubles per feature in a block's slot: mean, M2, min, max (plus one count per block).
const SLOT: usize = 4;

/// The length of the partials array: per block, its row count and 4 values per feature.
pub fn partials_len(blocks: usize, features: usize) -> usize {
    blocks * (1 + SLOT * features)
}

/// Fill the slots of blocks `mine` (of `blocks` over `total` rows of `f` features) from
/// `rows(first, count, out)` (out: [count, f]); the other slots are left as they are (zero).
pub fn fill(
    partials: &mut [f64],
    blocks: usize,
    total: usize,
    f: usize,
    mine: Range<usize>,
    mut rows: impl FnMut(usize, usize, &mut [f32]) -> Result<()>,
) -> Result<()> {
    const CHUNK: usize = 1024;
    let mut buf = vec![0f32; CHUNK * f];
    for b in mine {
        let r = block_rows(b, blocks, total);
        let slot = &mut partials[b * (1 + SLOT * f)..(b + 1) * (1 + SLOT * f)];
        let (count, rest) = slot.split_first_mut().expect("slot");
        let (mean, rest) = rest.split_at_mut(f);
        let (m2, rest) = rest.split_at_mut(f);
        let (min, max) = rest.split_at_mut(f);
        min.fill(f64::INFINITY);
        max.fill(f64::NEG_INFINITY);
        let mut n = 0.0f64;
        let mut at = r.start;
        while at < r.end {
            let c = CHUNK.min(r.end - at);
            rows(at, c, &mut buf[..c * f])?;
            for row in buf[..c * f].chunks_exact(f) {
                n += 1.0;
                for (j, &v) in row.iter().enumerate() {
                    let v = v as f64;
                    let d = v - mean[j];
                    mean[j] += d / n;
                    m2[j] += d * (v - mean[j]);
                    min[j] = min[j].min(v);
                    max[j] = max[j].max(v);
                }
            }
            at += c;
        }
        *count = n;
    }
    Ok(())
}

/// The statistics of values [rows, k] held whole (the targets, which every rank holds).
pub fn stats_of(values: &[f32], k: usize) -> Stats {
    let n = values.len() / k;
    let blocks = block_count(n, k);
    let mut p = vec![0.0; partials_len(blocks, k)];
    fill(&mut p, blocks, n, k, 0..blocks, |a, c, out| {
        out.copy_from_slice(&values[a * k..(a + c) * k]);
        Ok(())
    })
    .expect("reading from memory cannot fail");
    merge(&p, blocks, k)
}

/// Combine the blocks' slots in block order (summed over ranks: each slot from its owner).
pub fn merge(partials: &[f64], blocks: usize, f: usize) -> Stats {
    let mut s = Stats {
        rows: 0,
        mean: vec![0.0; f],
        var: vec![0.0; f],
        min: vec![f64::INFINITY; f],
        max: vec![f64::NEG_INFINITY; f],
    };
    let mut m2 = vec![0.0; f];
    let mut n = 0.0f64;
    for b in 0..blocks {
        let slot = &partials[b * (1 + SLOT * f)..(b + 1) * (1 + SLOT * f)];
        let nb = slot[0];
        if nb == 0.0 {
            continue;
        }
        let total = n + nb;
        for j in 0..f {
            let (mb, m2b) = (slot[1 + j], slot[1 + f + j]);
            let d = mb - s.mean[j];
            s.mean[j] += d * nb / total;
            m2[j] += m2b + d * d * n * nb / total;
            s.min[j] = s.min[j].min(slot[1 + 2 * f + j]);
            s.max[j] = s.max[j].max(slot[1 + 3 * f + j]);
        }
        n = total;
    }
    s.rows = n as usize;
    s.var = m2.iter().map(|m| if n > 0.0 { m / n } else { 0.0 }).collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_pass(values: &[f32], k: usize) -> (Vec<f64>, Vec<f64>) {
        let n = (values.len() / k) as f64;
        let mut mean = vec![0.0; k];
        for (i, &v) in values.iter().enumerate() {
            mean[i % k] += v as f64 / n;
        }
        let mut var = vec![0.0; k];
        for (i, &v) in values.iter().enumerate() {
            var[i % k] += (v as f64 - mean[i % k]).powi(2) / n;
        }
        (mean, var)
    }

    #[test]
    fn block_statistics_match_two_passes_and_do_not_depend_on_the_split() {
        // Raw simulation units: offsets up to 3e5, spreads from 1e-3 to 1e5, a constant column.
        let (n, k) = (10_000, 4);
        let mut r = crate::rng::Rng::new(3, 1);
        let values: Vec<f32> = (0..n * k)
            .map(|i| match i % k {
                0 => 3e5 + 1e-3 * r.uniform() as f32,
                1 => 1e5 * (r.uniform() as f32 - 0.5),
                2 => 7.0,
                _ => (r.uniform() as f32) * 2.0,
            })
            .collect();
        let s = stats_of(&values, k);
        let (mean, var) = two_pass(&values, k);
        assert_eq!(s.rows, n);
        for j in 0..k {
            assert!((s.mean[j] - mean[j]).abs() <= 1e-12 * mean[j].abs().max(1.0), "mean {j}");
            assert!((s.var[j] - var[j]).abs() <= 1e-9 * var[j].max(1e-12), "var {j}: {} vs {}", s.var[j], var[j]);
        }
        assert_eq!(s.var[2], 0.0);
        let mut norm = Norm::default();
        norm.set_x(Normalize::Standard, &s);
        assert_eq!(norm.x_div[2], 1.0, "a constant feature is divided by 1");
        norm.set_x(Normalize::Minmax, &s);
        assert_eq!(norm.x_div[2], 1.0);
        assert!((norm.x_div[3] - (s.max[3] - s.min[3])).abs() < 1e-15);
        // Owners of the blocks split 1, 2 or 3 ways and summed: the same bits.
        let blocks = block_count(n, k);
        let by = |ranks: usize| {
            let mut sum = vec![0.0; partials_len(blocks, k)];
            for rank in 0..ranks {
                let mut p = vec![0.0; sum.len()];
                let mine = rank * blocks / ranks..(rank + 1) * blocks / ranks;
                fill(&mut p, blocks, n, k, mine, |a, c, out| {
                    out.copy_from_slice(&values[a * k..(a + c) * k]);
                    Ok(())
                })
                .unwrap();
                sum.iter_mut().zip(&p).for_each(|(s, v)| *s += v);
            }
            merge(&sum, blocks, k)
        };
        assert_eq!(by(1), s);
        assert_eq!(by(2), s);
        assert_eq!(by(3), s);
    }

    #[test]
    fn targets_round_trip() {
        let s = Stats { rows: 2, mean: vec![10.0, -1.0], var: vec![4.0, 0.0], min: vec![0.0; 2], max: vec![0.0; 2] };
        let mut norm = Norm::default();
        norm.set_y(&s);
        let mut v = vec![12.0f32, -1.0, 8.0, 5.0];
        norm.apply_y(&mut v);
        assert_eq!(v, [1.0, 0.0, -1.0, 6.0]);
        norm.unapply_y(&mut v);
        assert_eq!(v, [12.0, -1.0, 8.0, 5.0]);
    }
}
