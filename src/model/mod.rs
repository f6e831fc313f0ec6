//! The multi-layer perceptron: dense layers, an activation between them, a loss on top.
//!
//! Parameters live in one flat arena (`Vec<f32>`), and so do gradients, laid out in the
//! order backward produces them: the last layer's weight and bias first. That order is the
//! fusion order, so a fusion bucket is a contiguous range of the gradient arena and packing
//! costs no copy (gradients are written straight into their bucket, like PyTorch DDP's
//! "gradient as bucket view"). The optimizer updates the arena as one flat vector.

pub mod loss;

use crate::config::{Activation, LossKind};
use crate::device::cpu::{self, Trans};
use crate::rng::Rng;
use std::ops::Range;

pub use loss::Targets;

/// Where one dense layer's tensors sit in the arena. Weight is [inp, out], row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseSlot {
    pub inp: usize,
    pub out: usize,
    pub w: Range<usize>,
    pub b: Range<usize>,
}

#[derive(Clone, Debug)]
pub struct Mlp {
    pub sizes: Vec<usize>,
    pub act: Activation,
    pub loss: LossKind,
    pub layers: Vec<DenseSlot>,
    pub n_params: usize,
}

/// A named tensor of the arena, in arena (= gradient-ready) order.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub range: Range<usize>,
    /// Weights get weight decay; biases do not.
    pub is_weight: bool,
}

impl Mlp {
    pub fn new(sizes: &[usize], act: Activation, loss: LossKind) -> Mlp {
        assert!(sizes.len() >= 2);
        let n_layers = sizes.len() - 1;
        let mut layers: Vec<Option<DenseSlot>> = vec![None; n_layers];
        let mut off = 0;
        for l in (0..n_layers).rev() {
            let (inp, out) = (sizes[l], sizes[l + 1]);
            let w = off..off + inp * out;
            let b = w.end..w.end + out;
            off = b.end;
            layers[l] = Some(DenseSlot { inp, out, w, b });
        }
        Mlp {
            sizes: sizes.to_vec(),
            act,
            loss,
            layers: layers.into_iter().map(Option::unwrap).collect(),
            n_params: off,
        }
    }

    pub fn n_inputs(&self) -> usize {
        self.sizes[0]
    }
    pub fn n_outputs(&self) -> usize {
        *self.sizes.last().unwrap()
    }
    pub fn max_width(&self) -> usize {
        *self.sizes.iter().max().unwrap()
    }

    /// The tensors in arena order (backward's order: last layer first, weight then bias).
    pub fn tensors(&self) -> Vec<TensorInfo> {
        let mut v = Vec::with_capacity(2 * self.layers.len());
        for (l, s) in self.layers.iter().enumerate().rev() {
            v.push(TensorInfo { name: format!("dense{l}/weight"), range: s.w.clone(), is_weight: true });
            v.push(TensorInfo { name: format!("dense{l}/bias"), range: s.b.clone(), is_weight: false });
        }
        v
    }

    /// Glorot-uniform weights (Keras' default for Dense), zero biases, from `seed`.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let mut p = vec![0.0f32; self.n_params];
        for (l, s) in self.layers.iter().enumerate() {
            let mut rng = Rng::new(seed, 0x1A7E_0000 + l as u64);
            let limit = (6.0 / (s.inp + s.out) as f64).sqrt();
            for w in &mut p[s.w.clone()] {
                *w = ((rng.uniform() * 2.0 - 1.0) * limit) as f32;
            }
        }
        p
    }

    /// Forward pass of `b` samples `x` [b, inputs]; returns the logits/outputs [b, outputs].
    pub fn forward<'w>(&self, params: &[f32], x: &[f32], b: usize, ws: &'w mut Workspace) -> &'w [f32] {
        ws.ensure(self, b);
        let n = self.layers.len();
        for (l, s) in self.layers.iter().enumerate() {
            let (before, rest) = ws.a.split_at_mut(l);
            let input: &[f32] = if l == 0 { x } else { &before[l - 1][..b * s.inp] };
            let out = &mut rest[0][..b * s.out];
            cpu::gemm(b, s.inp, s.out, 1.0, input, Trans::N, &params[s.w.clone()], Trans::N, 0.0, out);
            let act = if l + 1 == n { Activation::Identity } else { self.act };
            let keep_z = if act == Activation::Gelu { Some(&mut ws.z[l][..b * s.out]) } else { None };
            cpu::bias_act_forward(out, &params[s.b.clone()], act, keep_z);
        }
        &ws.a[n - 1][..b * self.n_outputs()]
    }

    /// Loss of the last `forward` against `targets`; fills the output gradient in `ws`
    /// scaled by `grad_scale` (1/b for a mean). Returns (sum of losses, correct predictions).
    pub fn loss(
        &self,
        targets: Targets,
        b: usize,
        grad_scale: f32,
        ws: &mut Workspace,
        want_grad: bool,
    ) -> (f64, usize) {
        let k = self.n_outputs();
        let out = &ws.a[self.layers.len() - 1][..b * k];
        let d = if want_grad { Some(&mut ws.d[0][..b * k]) } else { None };
        loss::compute(self.loss, out, targets, k, grad_scale, d)
    }

    /// Backward pass after `forward` and `loss` (with want_grad). Writes every gradient into
    /// `grads` (the arena layout) and calls `ready(l)` as soon as layer `l`'s are complete,
    /// last layer first: the hook where communication can start.
    pub fn backward(
        &self,
        params: &[f32],
        x: &[f32],
        b: usize,
        ws: &mut Workspace,
        grads: &mut [f32],
        mut ready: impl FnMut(usize),
    ) {
        let Workspace { a, z, d, .. } = ws;
        let (d0, d1) = d.split_at_mut(1);
        let (mut dz, mut dprev) = (&mut d0[0], &mut d1[0]);
        for l in (0..self.layers.len()).rev() {
            let s = &self.layers[l];
            let input: &[f32] = if l == 0 { x } else { &a[l - 1][..b * s.inp] };
            let g = &dz[..b * s.out];
            cpu::gemm(s.inp, b, s.out, 1.0, input, Trans::T, g, Trans::N, 0.0, &mut grads[s.w.clone()]);
            cpu::column_sums(g, s.out, &mut grads[s.b.clone()]);
            ready(l);
            if l > 0 {
                let dp = &mut dprev[..b * s.inp];
                cpu::gemm(b, s.out, s.inp, 1.0, g, Trans::N, &params[s.w.clone()], Trans::T, 0.0, dp);
                let zin = if self.act == Activation::Gelu { Some(&z[l - 1][..b * s.inp]) } else { None };
                cpu::act_backward_inplace(dp, &a[l - 1][..b * s.inp], zin, self.act);
                std::mem::swap(&mut dz, &mut dprev);
            }
        }
    }
}

/// Scratch buffers for one batch size: activations per layer, pre-activations (gelu only),
/// and two gradient buffers that backward ping-pongs between.
#[derive(Default)]
pub struct Workspace {
    cap: usize,
    a: Vec<Vec<f32>>,
    z: Vec<Vec<f32>>,
    d: Vec<Vec<f32>>,
}

impl Workspace {
    pub fn new(model: &Mlp, batch: usize) -> Workspace {
        let mut ws = Workspace::default();
        ws.ensure(model, batch);
        ws
    }

    fn ensure(&mut self, m: &Mlp, b: usize) {
        if b <= self.cap && self.a.len() == m.layers.len() {
            return;
        }
        let keep_z = m.act == Activation::Gelu;
        self.a = m.layers.iter().map(|s| vec![0.0; b * s.out]).collect();
        self.z = m.layers.iter().map(|s| if keep_z { vec![0.0; b * s.out] } else { Vec::new() }).collect();
        self.d = vec![vec![0.0; b * m.max_width()]; 2];
        self.cap = b;
    }
}

#[cfg(test)]
mod tests;
