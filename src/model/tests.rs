//! Finite-difference gradient checks: every activation, both losses, every layer's weights
//! and biases, and the input-gradient path through stacked layers.

use super::*;
use crate::rng::Rng;

fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut r = Rng::new(seed, 99);
    (0..n).map(|_| ((r.uniform() * 2.0 - 1.0) as f32) * scale).collect()
}

fn mean_loss(m: &Mlp, p: &[f32], x: &[f32], t: Targets, b: usize) -> f64 {
    let mut ws = Workspace::new(m, b);
    m.forward(p, x, b, &mut ws);
    m.loss(t, b, 1.0, &mut ws, false).0 / b as f64
}

fn check(act: Activation, loss: LossKind) {
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
    let t = match loss {
        LossKind::SoftmaxCrossEntropy => Targets::Classes(&labels),
        LossKind::Mse => Targets::Values(&values),
    };

    let mut ws = Workspace::new(&m, b);
    let mut g = vec![0.0f32; m.n_params];
    m.forward(&p, &x, b, &mut ws);
    m.loss(t, b, 1.0 / b as f32, &mut ws, true);
    let mut order = Vec::new();
    m.backward(&p, &x, b, &mut ws, &mut g, |l| order.push(l));
    assert_eq!(order, vec![2, 1, 0], "layers must become ready last first");

    let h = if act == Activation::Relu { 1e-3 } else { 1e-2 };
    let mut worst = 0.0f64;
    for i in 0..m.n_params {
        let orig = p[i];
        p[i] = orig + h;
        let up = mean_loss(&m, &p, &x, t, b);
        p[i] = orig - h;
        let down = mean_loss(&m, &p, &x, t, b);
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
    check(Activation::Relu, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_tanh_xent() {
    check(Activation::Tanh, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_gelu_xent() {
    check(Activation::Gelu, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_identity_mse() {
    check(Activation::Identity, LossKind::Mse);
}
#[test]
fn gradcheck_tanh_mse() {
    check(Activation::Tanh, LossKind::Mse);
}
#[test]
fn gradcheck_gelu_mse() {
    check(Activation::Gelu, LossKind::Mse);
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
