//! The dense layer's forward through `Backend::dense` (on a GPU one cublasLt call with the
//! bias and activation in its epilogue where one exists): every activation, widths that are
//! and are not multiples of 8, operands at offsets inside larger buffers (so at 4-byte
//! alignment as well as the allocation's), against act(x · W + b) in float64; and backward
//! into it through `Backend::input_grad` (on a GPU one call with dReLU/dGELU and the bias
//! gradient in its epilogue, reading what the forward kept), overwriting and accumulating the
//! bias gradient in a slot padded as the arena pads one (its tail untouched), against
//! (g · W1ᵀ) ⊙ act'(z) and its column sums in float64.
//!
//! Must not: use a backend's own code as the reference.

use super::check::{close, host, random};
use super::{act_deriv_ref, act_ref};
use crate::config::Activation;
use crate::device::backend::{Backend, Gemm, Trans};

pub(super) fn dense<B: Backend>(be: &B) {
    let acts = Activation::ALL;
    for (seed, &(b, i, o)) in LAYERS.iter().enumerate() {
        for off in [0usize, 3] {
            let (x, w, bias, z) = layer_inputs(seed, off, (b, i, o), |v| v as f64);
            let (xd, wd, bd) = (be.upload(&x).unwrap(), be.upload(&w).unwrap(), be.upload(&bias).unwrap());
            for act in acts {
                let mut out = be.upload(&vec![f32::NAN; b * o]).unwrap();
                let mut keep = be.zeros(b * o).unwrap();
                let keep_z = act.needs_z().then(|| be.view_mut(&mut keep, 0..b * o));
                let (xv, wv) = (be.view(&xd, off..off + b * i), be.view(&wd, off..off + i * o));
                let g = Gemm::new(b, i, o, Trans::N, Trans::N);
                be.dense(g, xv, wv, &mut out, b * o, be.view(&bd, 0..o), act, keep_z).unwrap();
                let what = format!("dense {b}x{i}x{o} at offset {off}, {act:?}");
                close(&host(be, &out, b * o), &z.iter().map(|&z| act_ref(act, z)).collect::<Vec<_>>(), 1e-5, &what);
                if act.needs_z() {
                    close(&host(be, &keep, b * o), &z, 1e-5, &format!("{what}: the kept pre-activation"));
                }
                input_grad(be, &out, &keep, &z, b, o, act, &what);
            }
        }
    }
}

/// The layers' shapes (batch, inputs, outputs): widths that are and are not multiples of 8.
pub(super) const LAYERS: [(usize, usize, usize); 5] = [(1, 1, 8), (5, 7, 16), (33, 65, 24), (17, 9, 31), (3, 129, 40)];

/// Random x [b, i] and W [i, o] (each `off` elements into its buffer) and bias for layer
/// `seed`, and the pre-activation x · W + b in float64 over the operands as `operand` sees
/// them (as they are, or rounded to bf16).
#[allow(clippy::type_complexity)]
pub(super) fn layer_inputs(
    seed: usize,
    off: usize,
    (b, i, o): (usize, usize, usize),
    operand: impl Fn(f32) -> f64,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f64>) {
    let (x, w, bias) = (random(off + b * i, seed as u64), random(off + i * o, 50 + seed as u64), random(o, 99));
    let z = (0..b * o)
        .map(|e| {
            let (r, c) = (e / o, e % o);
            let dot = (0..i).map(|p| operand(x[off + r * i + p]) * operand(w[off + p * o + c]));
            dot.sum::<f64>() + bias[c] as f64
        })
        .collect();
    (x, w, bias, z)
}

/// Backward into the layer whose output (`a`, pre-activation `z`; GELU's kept in `keep`) the
/// forward above wrote: a next layer of 6 units, its weight W1 [o, 6] and gradient g [b, 6].
#[allow(clippy::too_many_arguments)]
fn input_grad<B: Backend>(
    be: &B,
    a: &B::Buf,
    keep: &B::Buf,
    z: &[f64],
    b: usize,
    o: usize,
    act: Activation,
    what: &str,
) {
    let k = 6;
    let (g, w1, bias0) = (random(b * k, 7), random(o * k, 8), random(o, 9));
    let dact = |z: f64| act_deriv_ref(act, z);
    let want: Vec<f64> = (0..b * o)
        .map(|e| {
            let (r, c) = (e / o, e % o);
            (0..k).map(|p| g[r * k + p] as f64 * w1[c * k + p] as f64).sum::<f64>() * dact(z[e])
        })
        .collect();
    let (gd, wd) = (be.upload(&g).unwrap(), be.upload(&w1).unwrap());
    // The bias gradient's slot as the arena pads it: longer than the layer (a sentinel tail
    // that must stay as it is).
    let pad = o.div_ceil(16) * 16 + 16;
    let mut slot0 = bias0.clone();
    slot0.resize(pad, 7.0);
    for beta in [0.0f32, 1.0] {
        let mut bg = be.upload(&slot0).unwrap();
        let mut d = be.zeros(b * o).unwrap();
        let zv = act.needs_z().then(|| be.view(keep, 0..b * o));
        let gm = Gemm::new(b, k, o, Trans::N, Trans::T);
        let (gv, wv, av) = (be.view(&gd, 0..b * k), be.view(&wd, 0..o * k), be.view(a, 0..b * o));
        be.input_grad(gm, gv, wv, &mut d, av, zv, act, beta, be.view_mut(&mut bg, 0..pad)).unwrap();
        let sums: Vec<f64> =
            (0..o).map(|c| beta as f64 * bias0[c] as f64 + (0..b).map(|r| want[r * o + c]).sum::<f64>()).collect();
        close(&host(be, &d, b * o), &want, 1e-4, &format!("{what}: input gradient (beta {beta})"));
        let slot = host(be, &bg, pad);
        close(&slot[..o], &sums, 1e-4, &format!("{what}: bias gradient (beta {beta})"));
        assert!(slot[o..].iter().all(|&v| v == 7.0), "{what}: the bias slot's padding was written (beta {beta})");
    }
}
