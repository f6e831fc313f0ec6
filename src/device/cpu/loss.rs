//! The CPU reference of the losses: softmax cross-entropy and the element-wise losses
//! (`Pointwise`: squared, absolute, Huber, binary cross-entropy), per batch with their
//! gradients, and per element as the GPU kernels compute them.
//!
//! Must not: differ from what `kernels.cu`'s loss kernels compute operation by operation (the
//! shim tests hold them to 4 ulps).

use crate::device::backend::Pointwise;

/// Softmax cross-entropy over `logits` [b, k] with integer `labels`.
/// Writes d(mean loss)/d(logits) scaled by `grad_scale` (usually 1/b) into `dlogits`,
/// and returns (sum of per-sample losses, number of correct argmax predictions). With class
/// `weights` [k], row r's loss and gradient are × `weights[labels[r]]` (in f32, as the kernel:
/// a weight of 1 changes no bit); with sample weights `rw` [b], the finished row loss and
/// gradient are × `rw[r]` after that (as `hv_weigh_rows` after the kernel). With label
/// `smoothing` ε > 0 (`model.label_smoothing`, Keras' and PyTorch's `label_smoothing`) the
/// target is (1 − ε)·one-hot + ε/k: the loss (1 − ε)·(−log p_y) + ε·mean_j(−log p_j) and the
/// gradient p − target (as `hv_softmax_xent_smooth`); ε = 0 computes what it did without.
#[allow(clippy::too_many_arguments)]
pub fn softmax_xent(
    logits: &[f32],
    labels: &[i32],
    weights: Option<&[f32]>,
    rw: Option<&[f32]>,
    k: usize,
    smoothing: f32,
    grad_scale: f32,
    dlogits: Option<&mut [f32]>,
) -> (f64, usize) {
    let mut loss = 0.0f64;
    let mut correct = 0usize;
    let mut dl = dlogits;
    for (r, row) in logits.chunks_exact(k).enumerate() {
        let y = labels[r] as usize;
        let (mut amax, mut max) = (0usize, f32::NEG_INFINITY);
        for (j, &v) in row.iter().enumerate() {
            if v > max {
                max = v;
                amax = j;
            }
        }
        if amax == y {
            correct += 1;
        }
        let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
        let log_sum = sum.ln();
        let w = weights.map_or(1.0, |w| w[y]);
        let nll = log_sum - (row[y] - max);
        let l = if smoothing > 0.0 {
            // mean_j(−log p_j) = log Σ − mean_j (z_j − max), summed in order as the kernel.
            let mut zs = 0.0f32;
            for &v in row {
                zs += v - max;
            }
            w * ((1.0 - smoothing) * nll + smoothing * (log_sum - zs / k as f32))
        } else {
            w * nll
        };
        loss += rw.map_or(l, |rw| l * rw[r]) as f64;
        if let Some(d) = dl.as_deref_mut() {
            let drow = &mut d[r * k..(r + 1) * k];
            let inv = 1.0 / sum;
            let scale = grad_scale * w;
            let (hit, rest) = if smoothing > 0.0 {
                let rest = smoothing / k as f32;
                (1.0 - smoothing + rest, rest)
            } else {
                (1.0, 0.0)
            };
            for (j, (g, &v)) in drow.iter_mut().zip(row).enumerate() {
                let p = (v - max).exp() * inv;
                *g = scale * (p - if j == y { hit } else { rest });
            }
            if let Some(rw) = rw {
                drow.iter_mut().for_each(|g| *g *= rw[r]);
            }
        }
    }
    (loss, correct)
}

/// Loss `f` (see `Pointwise`) over `pred` [b, k] and `target` [b, k]: returns the sum over
/// samples of the per-sample mean over the k outputs (accumulated in f64) and the elements
/// predicted right (binary cross-entropy only); the gradient of (that sum × grad_scale). With
/// sample weights `rw` [b], row r's mean and gradient are × `rw[r]` (the gradient after it is
/// computed, as `hv_weigh_rows`).
pub fn pointwise_loss(
    f: Pointwise,
    pred: &[f32],
    target: &[f32],
    rw: Option<&[f32]>,
    k: usize,
    grad_scale: f32,
    dpred: Option<&mut [f32]>,
) -> (f64, usize) {
    let mut loss = 0.0f64;
    let mut correct = 0;
    for (r, (p, t)) in pred.chunks_exact(k).zip(target.chunks_exact(k)).enumerate() {
        let row: f64 = p.iter().zip(t).map(|(&a, &b)| pointwise_value(f, a, b) as f64).sum();
        loss += rw.map_or(1.0, |rw| rw[r] as f64) * row / k as f64;
        if matches!(f, Pointwise::BinaryXent(_)) {
            correct += p.iter().zip(t).filter(|(&a, &b)| (a > 0.0) == (b > 0.5)).count();
        }
    }
    if let Some(d) = dpred {
        let s = grad_scale / k as f32;
        d.iter_mut().zip(pred.iter().zip(target)).for_each(|(g, (&a, &b))| *g = s * pointwise_grad(f, a, b));
        if let Some(rw) = rw {
            d.chunks_exact_mut(k).zip(rw).for_each(|(row, &w)| row.iter_mut().for_each(|g| *g *= w));
        }
    }
    (loss, correct)
}

/// One element's loss, in f32 as the kernels compute it.
pub fn pointwise_value(f: Pointwise, p: f32, t: f32) -> f32 {
    let e = p - t;
    match f {
        Pointwise::Mse => e * e,
        Pointwise::Mae => e.abs(),
        Pointwise::Huber(delta) => {
            let a = e.abs();
            if a <= delta {
                0.5 * e * e
            } else {
                delta * (a - 0.5 * delta)
            }
        }
        Pointwise::BinaryXent(eps) => {
            let t = smoothed(t, eps);
            p.max(0.0) - p * t + (-p.abs()).exp().ln_1p()
        }
        Pointwise::LogCosh => {
            let a = e.abs();
            a + (-2.0 * a).exp().ln_1p() - std::f32::consts::LN_2
        }
        Pointwise::Mape => 100.0 * e.abs() / t.abs().max(KERAS_EPS),
        Pointwise::Msle => {
            let d = (p.max(KERAS_EPS) + 1.0).ln() - (t.max(KERAS_EPS) + 1.0).ln();
            d * d
        }
        Pointwise::Quantile(tau) => {
            let u = t - p;
            (tau * u).max((tau - 1.0) * u)
        }
    }
}

/// Keras' `epsilon()`: the floor of MAPE's divisor and of MSLE's arguments.
const KERAS_EPS: f32 = 1e-7;

/// sign(x) with 0 at 0.
fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// One element's loss gradient with respect to `p`.
pub fn pointwise_grad(f: Pointwise, p: f32, t: f32) -> f32 {
    let e = p - t;
    match f {
        Pointwise::Mse => 2.0 * e,
        Pointwise::Mae => sign(e),
        Pointwise::Huber(delta) => e.clamp(-delta, delta),
        Pointwise::BinaryXent(eps) => sigmoid(p) - smoothed(t, eps),
        Pointwise::LogCosh => e.tanh(),
        Pointwise::Mape => 100.0 * sign(e) / t.abs().max(KERAS_EPS),
        Pointwise::Msle => {
            if p > KERAS_EPS {
                2.0 * ((p + 1.0).ln() - (t.max(KERAS_EPS) + 1.0).ln()) / (p + 1.0)
            } else {
                0.0
            }
        }
        Pointwise::Quantile(tau) => {
            if e < 0.0 {
                -tau
            } else if e > 0.0 {
                1.0 - tau
            } else {
                0.0
            }
        }
    }
}

/// A 0/1 target under binary label smoothing ε: t·(1 − ε) + ε/2 (as `hv_binary_xent_smooth`; ε = 0
/// leaves it as it is).
fn smoothed(t: f32, eps: f32) -> f32 {
    if eps > 0.0 {
        t * (1.0 - eps) + 0.5 * eps
    } else {
        t
    }
}

/// The logistic function, without overflow for either sign.
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}
