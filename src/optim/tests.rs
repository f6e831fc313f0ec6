//! The optimizers' own tests: SGD, momentum, Nesterov, warm-up and lr scaling by hand; LARS
//! and LAMB against their updates written out in float64; Adam's first step; RMSprop against
//! PyTorch's update written out in float64, and its state (v alone, no m).
//!
//! Must not: need MPI or a GPU (the CPU backend, one process).

use super::*;
use crate::config::Job;
use crate::device::Cpu;

fn opt(sets: &[&str]) -> (Optimizer<Cpu>, Vec<f32>) {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let j = Job::parse("t", "[data]\ntrain='x'\n[model]\nlayers=[1,2]\n", &sets).unwrap();
    let t = vec![TensorInfo { name: "w".into(), range: 0..1, used: 1, is_weight: true }];
    (Optimizer::new(&Cpu, &j.optimizer, t, 1, 2).unwrap(), vec![1.0])
}

/// An optimizer from `sets` over a weight tensor of 3 and a bias of 2, and their values.
fn weight_and_bias(sets: &[&str]) -> (Optimizer<Cpu>, Vec<f32>) {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let j = Job::parse("t", "[data]\ntrain='x'\n[model]\nlayers=[1,2]\n", &sets).unwrap();
    let t = vec![
        TensorInfo { name: "w".into(), range: 0..3, used: 3, is_weight: true },
        TensorInfo { name: "b".into(), range: 3..5, used: 2, is_weight: false },
    ];
    (Optimizer::new(&Cpu, &j.optimizer, t, 5, 1).unwrap(), vec![0.3, -1.2, 0.8, 0.1, -0.4])
}

#[test]
fn momentum_sgd_matches_hand_computation() {
    let (mut o, mut p) = opt(&["optimizer.lr=0.1", "optimizer.momentum=0.9"]);
    o.update(&Cpu, &mut p, &vec![4.0], 0.5).unwrap(); // g=2, m=2, p=1-0.2
    assert!((p[0] - 0.8).abs() < 1e-6);
    o.update(&Cpu, &mut p, &vec![4.0], 0.5).unwrap(); // m=0.9*2+2=3.8, p=0.8-0.38
    assert!((p[0] - 0.42).abs() < 1e-6);
}

#[test]
fn nesterov_and_warmup_and_scaling() {
    let (mut o, mut p) = opt(&["optimizer.lr=0.1", "optimizer.momentum=0.5", "optimizer.nesterov=true"]);
    o.update(&Cpu, &mut p, &vec![1.0], 1.0).unwrap(); // m=1, step=1+0.5
    assert!((p[0] - (1.0 - 0.15)).abs() < 1e-6);
    let (o, _) = opt(&["optimizer.lr=0.1", "optimizer.warmup_steps=4", "optimizer.scale_lr_by_world_size=true"]);
    assert!((o.lr() - 0.05).abs() < 1e-12); // 0.1 * 2 ranks * 1/4
}

/// LARS over a weight tensor and a bias, two steps (momentum carries the scaled step),
/// against the update written out in float64 (TensorFlow's LARSOptimizer).
#[test]
fn lars_matches_a_float64_reference() {
    let (mut o, mut p) = weight_and_bias(&[
        "optimizer.kind='lars'",
        "optimizer.lr=0.5",
        "optimizer.momentum=0.9",
        "optimizer.weight_decay=0.01",
        "optimizer.trust_coefficient=0.02",
    ]);
    let grads: [Vec<f32>; 2] = [vec![0.5, 0.25, -2.0, 0.3, -0.1], vec![-0.4, 1.0, 0.6, 0.2, 0.05]];
    let (lr, mu, wd, eta) = (0.5f64, 0.9f64, 0.01f64, 0.02f64);
    let mut wp: Vec<f64> = p.iter().map(|&x| f64::from(x)).collect();
    let mut acc = [0.0f64; 5];
    for g in &grads {
        o.update(&Cpu, &mut p, g, 1.0).unwrap();
        let g: Vec<f64> = g.iter().map(|&x| f64::from(x)).collect();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let trust = eta * norm(&wp[0..3]) / (norm(&g[0..3]) + wd * norm(&wp[0..3]));
        for i in 0..5 {
            let step = if i < 3 { lr * trust * (g[i] + wd * wp[i]) } else { lr * g[i] };
            acc[i] = mu * acc[i] + step;
            wp[i] -= acc[i];
        }
        for i in 0..5 {
            assert!((f64::from(p[i]) - wp[i]).abs() < 1e-6 * wp[i].abs().max(1.0), "{i}: {} vs {}", p[i], wp[i]);
        }
    }
    // The trust ratio is small here: the weights moved far less than plain SGD's lr would.
    assert!((f64::from(p[0]) - 0.3).abs() < 0.05 && (f64::from(p[3]) - 0.1).abs() > 0.1);
    assert_eq!(lars_trust(0.001, 0.0, 1.0, 0.0), 1.0);
}

/// LAMB over a weight tensor and a bias, three steps, against TensorFlow Addons' `LAMB`
/// written out in float64 (bias-corrected moments, decay in r, ratio ‖w‖ / ‖r‖; the bias
/// without decay or ratio).
#[test]
fn lamb_matches_a_float64_reference() {
    let (mut o, mut p) = weight_and_bias(&[
        "optimizer.kind='lamb'",
        "optimizer.lr=0.05",
        "optimizer.weight_decay=0.01",
        "optimizer.beta1=0.8",
        "optimizer.beta2=0.95",
        "optimizer.eps=1e-6",
    ]);
    let grads: [Vec<f32>; 3] =
        [vec![0.5, 0.25, -2.0, 0.3, -0.1], vec![-0.4, 1.0, 0.6, 0.2, 0.05], vec![0.1, -0.3, 0.2, -0.6, 0.4]];
    let (lr, b1, b2, eps, wd) = (0.05f64, 0.8f64, 0.95f64, 1e-6f64, 0.01f64);
    let mut wp: Vec<f64> = p.iter().map(|&x| f64::from(x)).collect();
    let (mut m, mut v) = ([0.0f64; 5], [0.0f64; 5]);
    for (k, g) in grads.iter().enumerate() {
        // grad_scale 2: the kernel's factor is part of the gradient LAMB sees.
        let g2: Vec<f32> = g.iter().map(|x| x / 2.0).collect();
        o.update(&Cpu, &mut p, &g2, 2.0).unwrap();
        let t = (k + 1) as i32;
        let mut r = [0.0f64; 5];
        for i in 0..5 {
            let gi = f64::from(g[i]);
            m[i] = b1 * m[i] + (1.0 - b1) * gi;
            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
            let (mh, vh) = (m[i] / (1.0 - b1.powi(t)), v[i] / (1.0 - b2.powi(t)));
            r[i] = mh / (vh.sqrt() + eps) + if i < 3 { wd * wp[i] } else { 0.0 };
        }
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let ratio = norm(&wp[0..3]) / norm(&r[0..3]);
        for i in 0..5 {
            wp[i] -= lr * if i < 3 { ratio } else { 1.0 } * r[i];
        }
        for i in 0..5 {
            assert!(
                (f64::from(p[i]) - wp[i]).abs() < 2e-6 * wp[i].abs().max(1.0),
                "step {t}, {i}: {} vs {}",
                p[i],
                wp[i]
            );
        }
    }
    // The bias moved by about lr per step (Adam's size), not by a ratio's.
    assert!((f64::from(p[3]) - 0.1).abs() > 0.05, "{}", p[3]);
}

#[test]
fn adam_first_step_moves_by_lr() {
    let (mut o, mut p) = opt(&["optimizer.kind='adam'", "optimizer.lr=0.01"]);
    o.update(&Cpu, &mut p, &vec![3.0], 1.0).unwrap();
    assert!((p[0] - 0.99).abs() < 1e-5, "{}", p[0]);
    let (mut o, mut p) = opt(&["optimizer.kind='adamw'", "optimizer.lr=0.01", "optimizer.weight_decay=0.1"]);
    o.update(&Cpu, &mut p, &vec![3.0], 1.0).unwrap();
    assert!((p[0] - (0.99 - 0.001)).abs() < 1e-5, "{}", p[0]);
}

/// RMSprop over a weight tensor and a bias, three steps with a gradient scale and weight
/// decay (weights only), without and with momentum, against PyTorch's `RMSprop` (not centered)
/// written out in float64: g = g·scale + wd·w, v = ρv + (1 − ρ)g², u = g / (√v + eps); without
/// momentum w −= lr·u, with it buf = μ·buf + u, w −= lr·buf. No bias correction: the first
/// step moves the bias by lr / √(1 − ρ) (where g ≫ eps). The state: v alone, or v and buf.
#[test]
fn rmsprop_matches_a_float64_reference() {
    let (lr, rho, eps) = (0.01f64, 0.8f64, 1e-6f64);
    for (wd, mu) in [(0.1f64, 0.0f64), (0.1, 0.9), (0.0, 0.5)] {
        let (mut o, mut p) = weight_and_bias(&[
            "optimizer.kind='rmsprop'",
            "optimizer.lr=0.01",
            "optimizer.rho=0.8",
            "optimizer.eps=1e-6",
            &format!("optimizer.weight_decay={wd}"),
            &format!("optimizer.momentum={mu}"),
        ]);
        let (m, v, _) = o.state(&Cpu).unwrap();
        assert_eq!((m.len(), v.len()), (if mu > 0.0 { 5 } else { 0 }, 5), "wd {wd} mu {mu}: state lens");
        let mut wp: Vec<f64> = p.iter().map(|&x| f64::from(x)).collect();
        let (mut vr, mut buf) = ([0.0f64; 5], [0.0f64; 5]);
        let grads: [[f32; 5]; 3] =
            [[0.5, 0.25, -2.0, 0.3, -0.1], [-0.4, 1.0, 0.6, 0.2, 0.05], [0.1, -0.3, 0.2, -0.6, 0.4]];
        for (k, g) in grads.iter().enumerate() {
            let g2: Vec<f32> = g.iter().map(|x| x / 2.0).collect();
            o.update(&Cpu, &mut p, &g2, 2.0).unwrap();
            for i in 0..5 {
                let gi = f64::from(g[i]) + if i < 3 { wd * wp[i] } else { 0.0 };
                vr[i] = rho * vr[i] + (1.0 - rho) * gi * gi;
                let u = gi / (vr[i].sqrt() + eps);
                buf[i] = mu * buf[i] + u;
                wp[i] -= lr * if mu > 0.0 { buf[i] } else { u };
            }
            for i in 0..5 {
                let d = (f64::from(p[i]) - wp[i]).abs();
                assert!(d < 1e-6, "wd {wd} mu {mu}, step {}, {i}: {} vs {}", k + 1, p[i], wp[i]);
            }
            if k == 0 {
                // The bias (no decay) moved by lr / √(1 − ρ): no bias correction.
                let moved = (f64::from(p[3]) - 0.1).abs();
                assert!((moved - lr / (1.0 - rho).sqrt()).abs() < 1e-5, "{moved}");
            }
        }
        let (m, v, step) = o.state(&Cpu).unwrap();
        assert_eq!(step, 3);
        for i in 0..5 {
            assert!((f64::from(v[i]) - vr[i]).abs() < 1e-6 * vr[i].max(1.0), "v[{i}]: {} vs {}", v[i], vr[i]);
            if mu > 0.0 {
                assert!((f64::from(m[i]) - buf[i]).abs() < 1e-5 * buf[i].abs().max(1.0), "buf[{i}]: {}", m[i]);
            }
        }
    }
}

/// RMSprop's scratch is shared by the tensors: a non-finite gradient in one tensor leaves the
/// next tensor's update alone (the scratch is zeroed, not multiplied by 0), with and without
/// momentum.
#[test]
fn rmsprop_scratch_carries_nothing_between_tensors() {
    for mu in ["0", "0.9"] {
        let m = format!("optimizer.momentum={mu}");
        let (mut o, mut p) =
            weight_and_bias(&["optimizer.kind='rmsprop'", "optimizer.lr=0.01", "optimizer.weight_decay=0.1", &m]);
        o.update(&Cpu, &mut p, &vec![f32::INFINITY, 1.0, 1.0, 0.5, -0.5], 1.0).unwrap();
        assert!(p[0].is_nan(), "mu {mu}: the weight took the infinite gradient: {}", p[0]);
        assert!(p[3].is_finite() && p[4].is_finite(), "mu {mu}: the bias took the weight's scratch: {p:?}");
    }
}

/// RMSprop with Nesterov momentum is refused (neither peer offers it), naming the key.
#[test]
fn rmsprop_refuses_nesterov() {
    let sets: Vec<String> = ["optimizer.kind='rmsprop'", "optimizer.momentum=0.9", "optimizer.nesterov=true"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let e = Job::parse("t", "[data]\ntrain='x'\n[model]\nlayers=[1,2]\n", &sets).unwrap_err().to_string();
    assert!(e.contains("optimizer.nesterov") && e.contains("rmsprop"), "{e}");
}
