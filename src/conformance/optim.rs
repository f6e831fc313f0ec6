//! The optimizers' conformance checks: SGD (momentum, Nesterov), Adam and AdamW, their fused
//! update over consecutive tensors, and RMSprop (with and without momentum and weight decay,
//! on a piece of a buffer, scratch handed over dirty), each against a float64 reference
//! written here.
//!
//! Must not: use a backend's own code as the reference.

use super::check::{close, host, random};
use crate::device::backend::{rmsprop_scratch_count, AdamHyper, Backend, RmspropHyper, SgdHyper};

pub(super) fn optimizers<B: Backend>(be: &B) {
    let n = 23;
    let (p0, g, m0, v0) =
        (random(n, 8), random(n, 9), random(n, 10), random(n, 11).iter().map(|v| v.abs()).collect::<Vec<_>>());
    for (momentum, nesterov) in [(0.0f32, false), (0.9, false), (0.9, true)] {
        let h = SgdHyper { lr: 0.1, grad_scale: 0.5, weight_decay: 0.01, momentum, nesterov };
        let (mut wp, mut wm) = (Vec::new(), Vec::new());
        for i in 0..n {
            let gi = g[i] as f64 * 0.5 + 0.01 * p0[i] as f64;
            let (p, m) = if momentum == 0.0 {
                (p0[i] as f64 - 0.1 * gi, 0.0)
            } else {
                let m = momentum as f64 * m0[i] as f64 + gi;
                (p0[i] as f64 - 0.1 * if nesterov { gi + momentum as f64 * m } else { m }, m)
            };
            wp.push(p);
            wm.push(m);
        }
        let (mut pd, gd, mut md) = (be.upload(&p0).unwrap(), be.upload(&g).unwrap(), be.upload(&m0).unwrap());
        let mv = (momentum > 0.0).then(|| be.view_mut(&mut md, 0..n));
        be.sgd(be.view_mut(&mut pd, 0..n), be.view(&gd, 0..n), mv, &h).unwrap();
        close(&host(be, &pd, n), &wp, 1e-6, &format!("sgd momentum {momentum} nesterov {nesterov}"));
        if momentum > 0.0 {
            close(&host(be, &md, n), &wm, 1e-6, "sgd momentum buffer");
        }
    }
    for decoupled in [false, true] {
        let wd = 0.1f64;
        let (h, bc1, bc2) = adam_at(3, if decoupled { 0.0 } else { wd }, if decoupled { LR * wd } else { 0.0 });
        let (lr, b1, b2, eps) = (LR, B1, B2, EPS);
        let mut wp = Vec::new();
        for i in 0..n {
            let p = p0[i] as f64;
            let gi = g[i] as f64 * 0.25 + if decoupled { 0.0 } else { wd * p };
            let m = b1 * m0[i] as f64 + (1.0 - b1) * gi;
            let v = b2 * v0[i] as f64 + (1.0 - b2) * gi * gi;
            wp.push(p - lr * (m / bc1) / ((v / bc2).sqrt() + eps) - if decoupled { lr * wd * p } else { 0.0 });
        }
        let (mut pd, gd) = (be.upload(&p0).unwrap(), be.upload(&g).unwrap());
        let (mut md, mut vd) = (be.upload(&m0).unwrap(), be.upload(&v0).unwrap());
        let (pv, mv, vv) = (be.view_mut(&mut pd, 0..n), be.view_mut(&mut md, 0..n), be.view_mut(&mut vd, 0..n));
        be.adam(pv, be.view(&gd, 0..n), mv, vv, &h).unwrap();
        close(&host(be, &pd, n), &wp, 1e-5, &format!("adam decoupled={decoupled}"));
    }
    fused(be, &p0, &g, &m0, &v0);
    rmsprop(be, &p0, &g, &m0, &v0);
}

/// RMSprop (`Backend::rmsprop`: a GPU composes it of its Adam and SGD kernels, the CPU runs
/// one pass) on elements 2..n of the buffer, two steps, against PyTorch's update in float64;
/// the scratch a composing backend takes starts as NaN (an earlier tensor's leftovers).
fn rmsprop<B: Backend>(be: &B, p0: &[f32], g: &[f32], m0: &[f32], v0: &[f32]) {
    let n = p0.len();
    let pr = 2..n;
    for (l2, momentum) in [(0.0f32, 0.0f32), (0.01, 0.0), (0.0, 0.9), (0.01, 0.9)] {
        let h = RmspropHyper { lr: 0.01, grad_scale: 0.5, rho: 0.9, eps: 1e-7, l2, momentum };
        let (mut wp, mut wv, mut wm): (Vec<f64>, Vec<f64>, Vec<f64>) = (
            p0.iter().map(|&x| f64::from(x)).collect(),
            v0[pr.clone()].iter().map(|&x| f64::from(x)).collect(),
            m0[pr.clone()].iter().map(|&x| f64::from(x)).collect(),
        );
        let (mut pd, gd) = (be.upload(p0).unwrap(), be.upload(&g[pr.clone()]).unwrap());
        let (mut vd, mut md) = (be.upload(&v0[pr.clone()]).unwrap(), be.upload(&m0[pr.clone()]).unwrap());
        let k = if be.fuses_rmsprop() { 0 } else { rmsprop_scratch_count(momentum > 0.0, l2 > 0.0) };
        let mut scratch: Vec<B::Buf> = (0..k).map(|_| be.upload(&vec![f32::NAN; n]).unwrap()).collect();
        for _ in 0..2 {
            for (j, i) in pr.clone().enumerate() {
                let gi = f64::from(g[i]) * 0.5 + f64::from(l2) * wp[i];
                wv[j] = 0.9 * wv[j] + 0.1 * gi * gi;
                let u = gi / (wv[j].sqrt() + 1e-7);
                wm[j] = f64::from(momentum) * wm[j] + u;
                wp[i] -= 0.01 * if momentum > 0.0 { wm[j] } else { u };
            }
            let m = (momentum > 0.0).then(|| be.view_mut(&mut md, 0..n - 2));
            let (gv, vv) = (be.view(&gd, 0..n - 2), be.view_mut(&mut vd, 0..n - 2));
            be.rmsprop(&mut pd, pr.clone(), gv, vv, m, &mut scratch, &h).unwrap();
        }
        let what = format!("rmsprop l2 {l2} momentum {momentum}");
        close(&host(be, &pd, n), &wp, 1e-5, &what);
        close(&host(be, &vd, n - 2), &wv, 1e-5, &format!("{what}: v"));
        if momentum > 0.0 {
            close(&host(be, &md, n - 2), &wm, 1e-4, &format!("{what}: momentum buffer"));
        }
    }
}

/// The fused update of consecutive tensors (`sgd_segments`, `adam_segments`: one launch on a
/// GPU) against float64, the weight decay only on the segments that take it.
fn fused<B: Backend>(be: &B, p0: &[f32], g: &[f32], m0: &[f32], v0: &[f32]) {
    use crate::device::Segment;
    let n = p0.len();
    let segs = [(0..7, true), (7..9, false), (9..n, true)].map(|(range, decayed)| Segment { range, decayed });
    let wd_at = |i: usize| if !(7..9).contains(&i) { 0.01 } else { 0.0 };
    let h = SgdHyper { lr: 0.1, grad_scale: 0.5, weight_decay: 0.01, momentum: 0.9, nesterov: false };
    let (mut wp, mut wm) = (Vec::new(), Vec::new());
    for i in 0..n {
        let gi = g[i] as f64 * 0.5 + wd_at(i) * p0[i] as f64;
        let m = 0.9 * m0[i] as f64 + gi;
        wp.push(p0[i] as f64 - 0.1 * m);
        wm.push(m);
    }
    let (mut pd, gd, mut md) = (be.upload(p0).unwrap(), be.upload(g).unwrap(), be.upload(m0).unwrap());
    be.sgd_segments(&mut pd, &gd, 0, Some(&mut md), &segs, &h).unwrap();
    close(&host(be, &pd, n), &wp, 1e-6, "fused sgd over 3 tensors");
    close(&host(be, &md, n), &wm, 1e-6, "fused sgd momentum");
    let (h, bc1, bc2) = adam_at(2, 0.0, LR * 0.01);
    let (lr, b1, b2, eps) = (LR, B1, B2, EPS);
    let mut wp = Vec::new();
    for i in 0..n {
        let (p, gi) = (p0[i] as f64, g[i] as f64 * 0.25);
        let m = b1 * m0[i] as f64 + (1.0 - b1) * gi;
        let v = b2 * v0[i] as f64 + (1.0 - b2) * gi * gi;
        wp.push(p - lr * (m / bc1) / ((v / bc2).sqrt() + eps) - lr * wd_at(i) * p);
    }
    let (mut pd, gd) = (be.upload(p0).unwrap(), be.upload(g).unwrap());
    let (mut md, mut vd) = (be.upload(m0).unwrap(), be.upload(v0).unwrap());
    be.adam_segments(&mut pd, &gd, 0, &mut md, &mut vd, &segs, &h).unwrap();
    close(&host(be, &pd, n), &wp, 1e-5, "fused adamw over 3 tensors");
}

/// The Adam checks' constants (the gradient scale is 0.25).
const LR: f64 = 0.01;
const B1: f64 = 0.9;
const B2: f64 = 0.999;
const EPS: f64 = 1e-7;

/// Adam's hyperparameters at step `t` with L2 `l2` and decoupled decay `decay`, and the two
/// bias corrections in float64 for the reference.
fn adam_at(t: i32, l2: f64, decay: f64) -> (AdamHyper, f64, f64) {
    let (bc1, bc2) = (1.0 - B1.powi(t), 1.0 - B2.powi(t));
    let h = AdamHyper {
        lr: LR as f32,
        grad_scale: 0.25,
        b1: B1 as f32,
        b2: B2 as f32,
        eps: EPS as f32,
        bc1: bc1 as f32,
        bc2_sqrt: bc2.sqrt() as f32,
        l2: l2 as f32,
        decay: decay as f32,
    };
    (h, bc1, bc2)
}
