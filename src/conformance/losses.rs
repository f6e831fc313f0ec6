//! Conformance of the losses (softmax cross-entropy, softmax, the element-wise losses:
//! squared, absolute, Huber, binary cross-entropy, log-cosh, absolute percentage, squared
//! logarithmic, pinball) and of dropout, against f64 references and
//! masks computed here.
//!
//! Must not: use a backend's own loss or mask code as the reference.

use super::check::{close, host, random};
use crate::device::backend::{Backend, Mask, Pointwise};

pub(super) fn losses<B: Backend>(be: &B) {
    let (b, k) = (9, 7);
    let logits: Vec<f32> = random(b * k, 5).iter().map(|v| v * 8.0).collect();
    let labels: Vec<i32> = (0..b as i32).map(|i| (i * 3) % k as i32).collect();
    let scale = 1.0 / b as f32;
    // Without class weights, with one per class (0 leaves a class out), and with sample
    // weights per row too (`data.sample_weight`: 0 leaves a row out); with label smoothing
    // (`model.label_smoothing`: the target (1 − ε)·one-hot + ε/k) alone and with both weights.
    let weights: Vec<f32> = (0..k).map(|c| [1.5, 0.0, 0.25, 3.0][c % 4]).collect();
    let rows_w: Vec<f32> = (0..b).map(|r| [0.5, 2.0, 0.0, 1.0, 3.25][r % 5]).collect();
    let ld = be.upload(&logits).unwrap();
    let wd = be.upload(&weights).unwrap();
    let rwd = be.upload(&rows_w).unwrap();
    let mut d = be.zeros(b * k).unwrap();
    let mut plain = Vec::new();
    let cases = [
        (None, None, 0.0f32),
        (Some(&weights), None, 0.0),
        (None, Some(&rows_w), 0.0),
        (Some(&weights), Some(&rows_w), 0.0),
        (None, None, 0.1),
        (Some(&weights), Some(&rows_w), 0.3),
    ];
    for (cw, rw, eps) in cases {
        let (mut loss, mut correct, mut grad) = (0.0f64, 0usize, vec![0.0f64; b * k]);
        for r in 0..b {
            let row: Vec<f64> = logits[r * k..(r + 1) * k].iter().map(|&v| v as f64).collect();
            let max = row.iter().cloned().fold(f64::MIN, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            let y = labels[r] as usize;
            let w = cw.map_or(1.0, |w| w[y] as f64) * rw.map_or(1.0, |w| w[r] as f64);
            let q = |j: usize| (1.0 - eps as f64) * (j == y) as u8 as f64 + eps as f64 / k as f64;
            // −Σ_j q_j log p_j, log p_j = z_j − max − log Σ.
            loss += w * (0..k).map(|j| -q(j) * (row[j] - max - sum.ln())).sum::<f64>();
            let arg = (0..k).fold(0, |best, j| if row[j] > row[best] { j } else { best });
            correct += (arg == y) as usize;
            for j in 0..k {
                let p = (row[j] - max).exp() / sum;
                grad[r * k + j] = w * scale as f64 * (p - q(j));
            }
        }
        let mut lab = be.labels(b).unwrap();
        be.upload_labels(&labels, &mut lab).unwrap();
        let wv = cw.map(|_| be.view(&wd, 0..k));
        let rv = rw.map(|_| be.view(&rwd, 0..b));
        let dv = Some(be.view_mut(&mut d, 0..b * k));
        let (l, c) = be.softmax_xent(be.view(&ld, 0..b * k), &lab, wv, rv, k, eps, scale, dv).unwrap();
        let what = format!(
            "softmax_xent{}{}{}",
            if cw.is_some() { " with class weights" } else { "" },
            if rw.is_some() { " with sample weights" } else { "" },
            if eps > 0.0 { format!(" with label smoothing {eps}") } else { String::new() }
        );
        assert!((l - loss).abs() < 1e-4 * loss.abs().max(1.0), "{what}: loss {l} vs {loss}");
        assert_eq!(c, correct, "{what}: correct predictions");
        close(&host(be, &d, b * k), &grad, 1e-5, &format!("{what}: gradient"));
        if cw.is_none() && rw.is_none() && eps == 0.0 {
            plain = grad;
        }
    }
    let grad = plain;

    let target = random(b * k, 6);
    let bits: Vec<f32> = random(b * k, 7).iter().map(|&t| if t > 0.0 { 1.0 } else { 0.0 }).collect();
    // Binary cross-entropy also with label smoothing 0.2 (targets t·0.8 + 0.1).
    // MAPE against targets from 0.5 to 2.5 in size (either sign), MSLE against targets from 0
    // to 4 (the predictions below 1e-7 take its floor, and no gradient).
    let sized: Vec<f32> = target.iter().map(|&t| t.signum() * (0.5 + 2.0 * t.abs())).collect();
    let positive: Vec<f32> = target.iter().map(|&t| 4.0 * t.abs()).collect();
    let fs = [
        Pointwise::Mse,
        Pointwise::Mae,
        Pointwise::Huber(0.5),
        Pointwise::BinaryXent(0.0),
        Pointwise::BinaryXent(0.2),
        Pointwise::LogCosh,
        Pointwise::Mape,
        Pointwise::Msle,
        Pointwise::Quantile(0.8),
    ];
    for (f, rw) in fs.into_iter().flat_map(|f| [(f, None), (f, Some(&rows_w))]) {
        let t = match f {
            Pointwise::BinaryXent(_) => &bits,
            Pointwise::Mape => &sized,
            Pointwise::Msle => &positive,
            _ => &target,
        };
        let (mut want, mut wc) = (0.0, 0);
        let mut wg = vec![0.0; b * k];
        for i in 0..b * k {
            let (p, y) = (logits[i] as f64, t[i] as f64);
            let e = p - y;
            let (v, g) = match f {
                Pointwise::Mse => (e * e, 2.0 * e),
                Pointwise::Mae => (e.abs(), e.signum()),
                Pointwise::Huber(dl) => {
                    let dl = dl as f64;
                    if e.abs() <= dl {
                        (0.5 * e * e, e)
                    } else {
                        (dl * (e.abs() - 0.5 * dl), dl * e.signum())
                    }
                }
                Pointwise::BinaryXent(eps) => {
                    let s = 1.0 / (1.0 + (-p).exp());
                    wc += ((p > 0.0) == (y > 0.5)) as usize;
                    let q = y * (1.0 - eps as f64) + 0.5 * eps as f64;
                    (-(q * s.ln() + (1.0 - q) * (1.0 - s).ln()), s - q)
                }
                Pointwise::LogCosh => (e.cosh().ln(), e.tanh()),
                Pointwise::Mape => (100.0 * e.abs() / y.abs(), 100.0 * e.signum() / y.abs()),
                Pointwise::Msle => {
                    let floor = 1e-7f32 as f64;
                    let dl = (p.max(floor) + 1.0).ln() - (y.max(floor) + 1.0).ln();
                    (dl * dl, if p > floor { 2.0 * dl / (p + 1.0) } else { 0.0 })
                }
                Pointwise::Quantile(tau) => {
                    let tau = tau as f64;
                    ((tau * -e).max((tau - 1.0) * -e), if e < 0.0 { -tau } else { 1.0 - tau })
                }
            };
            let w = rw.map_or(1.0, |w| w[i / k] as f64);
            want += w * v / k as f64;
            wg[i] = w * scale as f64 / k as f64 * g;
        }
        let td = be.upload(t).unwrap();
        let rv = rw.map(|_| be.view(&rwd, 0..b));
        let (pv, tv, dv) = (be.view(&ld, 0..b * k), be.view(&td, 0..b * k), Some(be.view_mut(&mut d, 0..b * k)));
        let (got, c) = be.pointwise_loss(f, pv, tv, rv, k, scale, dv).unwrap();
        let what = format!("{f:?}{}", if rw.is_some() { " with sample weights" } else { "" });
        assert!((got - want).abs() < 1e-4 * want, "{what} loss {got} vs {want}");
        assert_eq!(c, wc, "{what} elements predicted right");
        close(&host(be, &d, b * k), &wg, 1e-5, &format!("{what} gradient"));
    }

    let mut sd = be.upload(&logits).unwrap();
    be.softmax(be.view_mut(&mut sd, 0..b * k), k).unwrap();
    let probs = host(be, &sd, b * k);
    for r in 0..b {
        let want: Vec<f64> =
            (0..k).map(|j| (grad[r * k + j] / scale as f64) + (j == labels[r] as usize) as u8 as f64).collect();
        close(&probs[r * k..(r + 1) * k], &want, 1e-5, "softmax");
    }
}

/// Dropout against the mask computed here: kept elements × 1/(1 − p) exactly, dropped ones 0,
/// the dropped share near p, a block of columns masked as those columns of the whole layer
/// (tensor splits), and the scale-only mask.
pub(super) fn dropout<B: Backend>(be: &B) {
    let (rows, cols, p) = (129usize, 65usize, 0.25f32);
    let v = random(rows * cols, 8);
    let keys: Vec<i32> = (0..rows as i32).map(|r| r * 3 + 1000).collect();
    let mut kd = be.labels(rows).unwrap();
    be.upload_labels(&keys, &mut kd).unwrap();
    let m = Mask::new(42, 7, 2, p);
    let mut d = be.upload(&v).unwrap();
    be.dropout(be.view_mut(&mut d, 0..rows * cols), cols, &kd, m).unwrap();
    let got = host(be, &d, rows * cols);
    let threshold = (p as f64 * 16_777_216.0).round() as u32;
    let mut dropped = 0;
    for (i, &g) in got.iter().enumerate() {
        let (r, c) = (i / cols, i % cols);
        let keep = crate::device::backend::mask_bits(m.salt, keys[r] as u32, c as u32) >= threshold;
        let want = if keep { v[i] * (1.0 / (1.0 - p)) } else { 0.0 };
        assert_eq!(g.to_bits(), want.to_bits(), "dropout [{r}, {c}]: {g} vs {want}");
        dropped += !keep as usize;
    }
    let share = dropped as f64 / (rows * cols) as f64;
    assert!((share - p as f64).abs() < 0.03, "dropout dropped {share} of the units at rate {p}");
    // Columns 20..45 as a block of their own (a tensor shard's slice).
    let block: Vec<f32> = (0..rows).flat_map(|r| v[r * cols + 20..r * cols + 45].to_vec()).collect();
    let mut bd = be.upload(&block).unwrap();
    be.dropout(be.view_mut(&mut bd, 0..rows * 25), 25, &kd, m.at_col(20)).unwrap();
    let gb = host(be, &bd, rows * 25);
    for r in 0..rows {
        assert_eq!(&gb[r * 25..(r + 1) * 25], &got[r * cols + 20..r * cols + 45], "dropout block row {r}");
    }
    let mut sd = be.upload(&v).unwrap();
    be.dropout(be.view_mut(&mut sd, 0..rows * cols), cols, &kd, Mask::scale_only(0.5)).unwrap();
    let gs = host(be, &sd, rows * cols);
    assert!(gs.iter().zip(&v).all(|(a, b)| *a == b * 0.5), "dropout scale_only");
}
