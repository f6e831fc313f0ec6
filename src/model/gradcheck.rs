//! Backend checks through the model, written once against `Backend` and run by the unit
//! tests (CPU, and CUDA when a GPU is present) and by `hvtrain selftest` on any node:
//! finite-difference gradient checks (`check`), and one training step's gradients and
//! update against the CPU reference backend (`step_matches_cpu`). Failures are panics with
//! the values (the caller catches them to report).
//!
//! Must not: be used by training.

use super::*;
use crate::config::Loss;
use crate::device::Cpu;
use crate::rng::Rng;

/// Gradients into one arena-shaped buffer, recording the order tensors became ready.
struct Plain<'a, B: Backend> {
    be: &'a B,
    buf: &'a mut B::Buf,
    ranges: Vec<Range<usize>>,
    order: Vec<usize>,
}

impl<B: Backend> GradSink<B> for Plain<'_, B> {
    fn slot(&mut self, t: usize) -> B::ViewMut<'_> {
        self.be.view_mut(self.buf, self.ranges[t].clone())
    }
    fn ready(&mut self, t: usize) {
        self.order.push(t);
    }
}

fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut r = Rng::new(seed, 99);
    (0..n).map(|_| ((r.uniform() * 2.0 - 1.0) as f32) * scale).collect()
}

/// A workspace for `b` rows, with dropout of `rates` (per hidden layer; empty: none) on rows
/// with ids 100.. at step 3.
fn workspace<B: Backend>(be: &B, m: &Mlp, b: usize, rates: &[f32]) -> Workspace<B> {
    let mut ws = Workspace::new(be, m, b).unwrap();
    ws.enable_dropout(be, rates, 9).unwrap();
    ws.set_rows(be, &(100..100 + b as u32).collect::<Vec<_>>(), 3).unwrap();
    ws
}

fn mean_loss<B: Backend>(be: &B, m: &Mlp, p: &[f32], x: &B::Buf, t: Targets<B>, b: usize, rates: &[f32]) -> f64 {
    let mut ws = workspace(be, m, b, rates);
    let p = be.upload(p).unwrap();
    m.forward(be, &p, x, b, &mut ws).unwrap();
    m.loss(be, t, b, 1.0, &mut ws, false).unwrap().0 / b as f64
}

/// One step's data on the host: inputs [b, in], class labels, regression targets.
struct Data {
    b: usize,
    x: Vec<f32>,
    labels: Vec<i32>,
    values: Vec<f32>,
}

/// The value targets `m`'s loss takes from `d`: 0/1 for binary cross-entropy.
fn values_for(m: &Mlp, d: &Data) -> Vec<f32> {
    match m.loss.kind.targets() {
        crate::config::Targets::MultiLabel => d.values.iter().map(|&v| if v > 0.0 { 1.0 } else { 0.0 }).collect(),
        _ => d.values.clone(),
    }
}

/// The targets of `m`'s loss: the labels or the values.
fn targets_of<'a, B: Backend>(be: &B, m: &Mlp, ld: &'a B::Labels, vd: &'a B::Buf, n: usize) -> Targets<'a, B> {
    match m.loss.kind.targets() {
        crate::config::Targets::Classes => Targets::Classes(ld, None, None),
        _ => Targets::Values(be.view(vd, 0..n), None),
    }
}

/// Forward, loss (mean over the batch) and backward of `m` at `p` on `be`: the gradient
/// arena, the summed loss, and the order tensors became ready.
fn grads<B: Backend>(be: &B, m: &Mlp, p: &[f32], d: &Data, rates: &[f32]) -> (Vec<f32>, f64, Vec<usize>) {
    let b = d.b;
    let xd = be.upload(&d.x).unwrap();
    let mut ld = be.labels(b).unwrap();
    be.upload_labels(&d.labels, &mut ld).unwrap();
    let vd = be.upload(&values_for(m, d)).unwrap();
    let t = targets_of(be, m, &ld, &vd, d.values.len());
    let mut ws = workspace(be, m, b, rates);
    let pd = be.upload(p).unwrap();
    let mut gd = be.zeros(m.n_params).unwrap();
    m.forward(be, &pd, &xd, b, &mut ws).unwrap();
    let (l, _) = m.loss(be, t, b, 1.0 / b as f32, &mut ws, true).unwrap();
    let ranges = m.tensors().into_iter().map(|t| t.range).collect();
    let mut sink = Plain { be, buf: &mut gd, ranges, order: Vec::new() };
    m.backward(be, &pd, &xd, b, &mut ws, &mut sink).unwrap();
    let order = sink.order;
    let mut g = vec![0.0f32; m.n_params];
    be.download(&gd, 0..m.n_params, &mut g).unwrap();
    (g, l, order)
}

/// Finite differences against backward, on backend `be` (every backend runs this).
pub fn check<B: Backend>(be: &B, act: impl Into<Acts>, loss: impl Into<Loss>) {
    check_with_dropout(be, act, loss, &[]);
}

/// `check` with dropout of `rates` after the two hidden layers (a fixed mask: rows, step and
/// seed do not change between the evaluations).
/// `act`: one activation for both hidden layers, or one each.
pub fn check_with_dropout<B: Backend>(be: &B, act: impl Into<Acts>, loss: impl Into<Loss>, rates: &[f32]) {
    let loss = loss.into();
    let act = act.into().0;
    let sizes = [5, 7, 6, 3];
    let b = 4;
    let m = Mlp::new(&sizes, act.clone(), loss);
    let mut p = m.init_params(11);
    // Non-zero biases so that bias gradients are exercised away from the symmetric point.
    for s in &m.layers {
        for (i, v) in p[s.b.clone()].iter_mut().enumerate() {
            *v = 0.1 * (i as f32 - 1.0);
        }
    }
    let d = Data { b, x: random(b * sizes[0], 1, 1.0), labels: vec![0, 2, 1, 2], values: random(b * 3, 2, 1.0) };
    let (g, _, order) = grads(be, &m, &p, &d, rates);
    assert_eq!(order, (0..2 * m.layers.len()).collect::<Vec<_>>(), "tensors must become ready in arena order");

    let xd = be.upload(&d.x).unwrap();
    let mut ld = be.labels(b).unwrap();
    be.upload_labels(&d.labels, &mut ld).unwrap();
    let vd = be.upload(&values_for(&m, &d)).unwrap();
    let t = targets_of(be, &m, &ld, &vd, d.values.len());
    // Kinks (ReLU, leaky ReLU, SELU's slope jump at 0, the absolute error) need a step that does
    // not cross them.
    let kink = act.iter().any(|a| matches!(a, Activation::Relu | Activation::LeakyRelu | Activation::Selu));
    let h = if kink || loss.kind == crate::config::LossKind::Mae { 1e-3 } else { 1e-2 };
    let mut worst = 0.0f64;
    for i in 0..m.n_params {
        let orig = p[i];
        p[i] = orig + h;
        let up = mean_loss(be, &m, &p, &xd, t, b, rates);
        p[i] = orig - h;
        let down = mean_loss(be, &m, &p, &xd, t, b, rates);
        p[i] = orig;
        let numeric = (up - down) / (2.0 * h as f64);
        let err = (numeric - g[i] as f64).abs() / (1e-2 + numeric.abs().max((g[i] as f64).abs()));
        worst = worst.max(err);
        assert!(err < 3e-2, "{act:?}/{loss:?}: param {i}: analytic {} numeric {numeric}", g[i]);
    }
    assert!(worst.is_finite());
}

/// Gradients of one step on `be` against the CPU backend on the same data: a model large
/// enough for real GEMM tiles (129 rows, odd widths), every parameter. Two bounds: the
/// norm-wise relative error ‖got − want‖₂ / ‖want‖₂ within `tol` (and the loss within `tol`
/// relative), and every element within `elem_tol` of the gradient's largest magnitude (a
/// gross check, so that a small tensor that is wrong cannot hide in the norm). Returns the
/// norm-wise error, for the report.
/// float32 sums in another order (cuBLAS tiles, fused multiply-adds) differ by ~1e-6
/// relative, so 1e-4 for both bounds in fp32. TF32 rounds inputs to 10 mantissa bits: on an
/// H100 (2026-11-25) one element near a ReLU kink differed by 2.6e-2 of the largest
/// gradient, so the element-wise bound cannot be tight there; the norm-wise one can.
pub fn step_matches_cpu<B: Backend>(be: &B, act: Activation, loss: impl Into<Loss>, tol: f64, elem_tol: f64) -> f64 {
    let loss = loss.into();
    let sizes = [37, 65, 33, 5];
    let b = 129;
    let m = Mlp::new(&sizes, act, loss);
    let p = m.init_params(3);
    let d = Data {
        b,
        x: random(b * sizes[0], 4, 1.0),
        labels: (0..b).map(|i| (i * 7 % 5) as i32).collect(),
        values: random(b * 5, 5, 1.0),
    };
    let (got, loss_got, _) = grads(be, &m, &p, &d, &[0.3, 0.0]);
    let (want, loss_want, _) = grads(&Cpu, &m, &p, &d, &[0.3, 0.0]);
    assert!(
        (loss_got - loss_want).abs() <= tol * (1.0 + loss_want.abs()),
        "{act:?}/{loss:?}: loss {loss_got} on {}, {loss_want} on the CPU",
        be.name()
    );
    let scale = want.iter().fold(0.0f32, |a, &v| a.max(v.abs())) as f64;
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g as f64 - w as f64).abs() <= elem_tol * scale.max(1e-6),
            "{act:?}/{loss:?}: gradient {i}: {g} on {}, {w} on the CPU (largest {scale})",
            be.name()
        );
    }
    let diff: f64 = got.iter().zip(&want).map(|(&g, &w)| (g as f64 - w as f64).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = want.iter().map(|&w| (w as f64).powi(2)).sum::<f64>().sqrt();
    let rel = diff / norm.max(1e-30);
    assert!(
        rel <= tol,
        "{act:?}/{loss:?}: gradients differ by {rel:.2e} (norm-wise, relative) on {} from the CPU; tolerance {tol:.0e}",
        be.name()
    );
    rel
}

/// One side of `steps_agree`: a backend's parameters, gradients, momentum, data, workspace.
struct Side<B: Backend> {
    p: B::Buf,
    g: B::Buf,
    mom: B::Buf,
    x: B::Buf,
    labels: B::Labels,
    values: B::Buf,
    ws: Workspace<B>,
}

impl<B: Backend> Side<B> {
    fn new(be: &B, m: &Mlp, p0: &[f32], d: &Data, rates: &[f32]) -> Side<B> {
        let mut labels = be.labels(d.b).unwrap();
        be.upload_labels(&d.labels, &mut labels).unwrap();
        Side {
            p: be.upload(p0).unwrap(),
            g: be.zeros(m.n_params).unwrap(),
            mom: be.zeros(m.n_params).unwrap(),
            x: be.upload(&d.x).unwrap(),
            labels,
            values: be.upload(&values_for(m, d)).unwrap(),
            ws: workspace(be, m, d.b, rates),
        }
    }

    /// One SGD step (momentum, weight decay on the weights, the fused update): the gradients
    /// it took and the parameters it left.
    fn step(&mut self, be: &B, m: &Mlp, d: &Data) -> (Vec<f32>, Vec<f32>) {
        m.forward(be, &self.p, &self.x, d.b, &mut self.ws).unwrap();
        let t = targets_of(be, m, &self.labels, &self.values, d.values.len());
        m.loss(be, t, d.b, 1.0 / d.b as f32, &mut self.ws, true).unwrap();
        let tensors = m.tensors();
        let ranges = tensors.iter().map(|t| t.range.clone()).collect();
        let mut sink = Plain { be, buf: &mut self.g, ranges, order: Vec::new() };
        m.backward(be, &self.p, &self.x, d.b, &mut self.ws, &mut sink).unwrap();
        let segs: Vec<_> =
            tensors.iter().map(|t| crate::device::Segment { range: t.range.clone(), decayed: t.is_weight }).collect();
        let h =
            crate::device::SgdHyper { lr: 0.1, grad_scale: 1.0, weight_decay: 1e-3, momentum: 0.9, nesterov: false };
        be.sgd_segments(&mut self.p, &self.g, 0, Some(&mut self.mom), &segs, &h).unwrap();
        let (mut g, mut p) = (vec![0.0f32; m.n_params], vec![0.0f32; m.n_params]);
        be.download(&self.g, 0..m.n_params, &mut g).unwrap();
        be.download(&self.p, 0..m.n_params, &mut p).unwrap();
        (g, p)
    }
}

/// `steps` training steps of one small model (ReLU, dropout on the first hidden layer,
/// SGD with momentum) on `a` and on `b` side by side from the same weights and data: the
/// largest norm-wise relative difference of their gradients or parameters at any step. For
/// two ways of computing the same products on one device (bf16 products reading kept copies
/// against rounding every operand: the same bits in, so only summation order may differ),
/// where a stale copy would show as a difference of the size of a step's update.
pub fn steps_agree<A: Backend, B: Backend>(a: &A, b: &B, steps: usize) -> f64 {
    let sizes = [37, 65, 33, 5];
    let rows = 129;
    let m = Mlp::new(&sizes, Activation::Relu, crate::config::LossKind::SoftmaxCrossEntropy);
    let p0 = m.init_params(3);
    let d = Data {
        b: rows,
        x: random(rows * sizes[0], 4, 1.0),
        labels: (0..rows).map(|i| (i * 7 % 5) as i32).collect(),
        values: random(rows * 5, 5, 1.0),
    };
    let rates = [0.3, 0.0];
    let (mut sa, mut sb) = (Side::new(a, &m, &p0, &d, &rates), Side::new(b, &m, &p0, &d, &rates));
    let rel = |x: &[f32], y: &[f32]| {
        let diff: f64 = x.iter().zip(y).map(|(&u, &v)| (u as f64 - v as f64).powi(2)).sum::<f64>().sqrt();
        diff / y.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt().max(1e-30)
    };
    let mut worst = 0.0f64;
    for _ in 0..steps {
        let ((ga, pa), (gb, pb)) = (sa.step(a, &m, &d), sb.step(b, &m, &d));
        worst = worst.max(rel(&ga, &gb)).max(rel(&pa, &pb));
    }
    worst
}
