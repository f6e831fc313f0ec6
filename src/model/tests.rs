//! Finite-difference gradient checks: every activation, both losses, every layer's weights
//! and biases, and the input-gradient path through stacked layers.

use super::*;
use crate::device::{cpu, Cpu};
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

fn mean_loss<B: Backend>(be: &B, m: &Mlp, p: &[f32], x: &B::Buf, t: Targets<B>, b: usize) -> f64 {
    let mut ws = Workspace::new(be, m, b).unwrap();
    let p = be.upload(p).unwrap();
    m.forward(be, &p, x, b, &mut ws).unwrap();
    m.loss(be, t, b, 1.0, &mut ws, false).unwrap().0 / b as f64
}

/// Finite differences against backward, on backend `be` (every backend runs this).
pub(crate) fn check<B: Backend>(be: &B, act: Activation, loss: LossKind) {
    let sizes = [5, 7, 6, 3];
    let b = 4;
    let m = Mlp::new(&sizes, act, loss);
    let mut p = m.init_params(11);
    // Non-zero biases so that bias gradients are exercised away from the symmetric point.
    for s in &m.layers {
        for (i, v) in p[s.b.clone()].iter_mut().enumerate() {
            *v = 0.1 * (i as f32 - 1.0);
        }
    }
    let x = random(b * sizes[0], 1, 1.0);
    let labels = vec![0i32, 2, 1, 2];
    let values = random(b * 3, 2, 1.0);
    let xd = be.upload(&x).unwrap();
    let mut ld = be.labels(b).unwrap();
    be.upload_labels(&labels, &mut ld).unwrap();
    let vd = be.upload(&values).unwrap();
    let t = match loss {
        LossKind::SoftmaxCrossEntropy => Targets::Classes(&ld),
        LossKind::Mse => Targets::Values(be.view(&vd, 0..values.len())),
    };

    let mut ws = Workspace::new(be, &m, b).unwrap();
    let pd = be.upload(&p).unwrap();
    let mut gd = be.zeros(m.n_params).unwrap();
    m.forward(be, &pd, &xd, b, &mut ws).unwrap();
    m.loss(be, t, b, 1.0 / b as f32, &mut ws, true).unwrap();
    let ranges = m.tensors().into_iter().map(|t| t.range).collect();
    let mut sink = Plain { be, buf: &mut gd, ranges, order: Vec::new() };
    m.backward(be, &pd, &xd, b, &mut ws, &mut sink).unwrap();
    assert_eq!(sink.order, (0..2 * m.layers.len()).collect::<Vec<_>>(), "tensors must become ready in arena order");
    let mut g = vec![0.0f32; m.n_params];
    be.download(&gd, 0..m.n_params, &mut g).unwrap();

    let h = if act == Activation::Relu { 1e-3 } else { 1e-2 };
    let mut worst = 0.0f64;
    for i in 0..m.n_params {
        let orig = p[i];
        p[i] = orig + h;
        let up = mean_loss(be, &m, &p, &xd, t, b);
        p[i] = orig - h;
        let down = mean_loss(be, &m, &p, &xd, t, b);
        p[i] = orig;
        let numeric = (up - down) / (2.0 * h as f64);
        let err = (numeric - g[i] as f64).abs() / (1e-2 + numeric.abs().max((g[i] as f64).abs()));
        worst = worst.max(err);
        assert!(err < 3e-2, "{act:?}/{loss:?}: param {i}: analytic {} numeric {numeric}", g[i]);
    }
    assert!(worst.is_finite());
}

#[test]
fn gradcheck_relu_xent() {
    check(&Cpu, Activation::Relu, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_tanh_xent() {
    check(&Cpu, Activation::Tanh, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_gelu_xent() {
    check(&Cpu, Activation::Gelu, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_identity_mse() {
    check(&Cpu, Activation::Identity, LossKind::Mse);
}
#[test]
fn gradcheck_tanh_mse() {
    check(&Cpu, Activation::Tanh, LossKind::Mse);
}
#[test]
fn gradcheck_gelu_mse() {
    check(&Cpu, Activation::Gelu, LossKind::Mse);
}

#[test]
fn gelu_derivative_matches_difference_quotient() {
    for &x in &[-3.0f32, -1.0, -0.1, 0.0, 0.4, 2.5] {
        let h = 1e-3;
        let num = (cpu::gelu(x + h) - cpu::gelu(x - h)) / (2.0 * h);
        assert!((num - cpu::gelu_grad(x)).abs() < 2e-3, "x={x}: {num} vs {}", cpu::gelu_grad(x));
    }
}

#[test]
fn arena_is_in_backward_order_and_dense() {
    let m = Mlp::new(&[784, 512, 512, 10], Activation::Relu, LossKind::SoftmaxCrossEntropy);
    assert_eq!(m.n_params, 669_706);
    let t = m.tensors();
    assert_eq!(t[0].name, "dense2/weight");
    assert_eq!(t[0].range.start, 0);
    for w in t.windows(2) {
        assert_eq!(w[0].range.end, w[1].range.start);
    }
    assert_eq!(t.last().unwrap().range.end, m.n_params);
}

#[test]
fn init_is_seeded_and_glorot_bounded() {
    let m = Mlp::new(&[20, 30, 4], Activation::Relu, LossKind::SoftmaxCrossEntropy);
    let a = m.init_params(5);
    assert_eq!(a, m.init_params(5));
    assert_ne!(a, m.init_params(6));
    let lim = (6.0f32 / 50.0).sqrt();
    assert!(a[m.layers[0].w.clone()].iter().all(|w| w.abs() <= lim));
    assert!(a[m.layers[0].b.clone()].iter().all(|&b| b == 0.0));
}
