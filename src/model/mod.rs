//! The multi-layer perceptron: dense layers, an activation between them, a loss on top.
//!
//! Parameters live in one flat arena (`Vec<f32>`), and so do gradients, laid out in the
//! order backward produces them: the last layer's weight and bias first. That order is the
//! fusion order, so a fusion bucket is a contiguous range of the gradient arena and packing
//! costs no copy (gradients are written straight into their bucket, like PyTorch DDP's
//! "gradient as bucket view"). Every operation goes through `device::Backend`, so the same
//! code runs on every device.

pub mod gradcheck;
pub mod loss;

use crate::config::{Activation, LossKind};
use crate::device::{Backend, Trans};
use crate::error::Result;
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

    /// Tensor id (index into `tensors()`, arena order) of layer `l`'s weight; its bias is
    /// the next id. The one place that knows the arena order besides `Mlp::new`.
    pub fn weight_id(&self, l: usize) -> usize {
        2 * (self.layers.len() - 1 - l)
    }

    /// Forward pass of `b` samples `x` [b, inputs] (the first b rows of `x`); the outputs
    /// [b, outputs] are then `ws.output(..)`.
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        params: &B::Buf,
        x: &B::Buf,
        b: usize,
        ws: &mut Workspace<B>,
    ) -> Result<()> {
        ws.ensure(be, self, b)?;
        let n = self.layers.len();
        for (l, s) in self.layers.iter().enumerate() {
            let (before, rest) = ws.a.split_at_mut(l);
            let input = if l == 0 { be.view(x, 0..b * s.inp) } else { be.view(&before[l - 1], 0..b * s.inp) };
            let out = &mut rest[0];
            let w = be.view(params, s.w.clone());
            be.gemm(b, s.inp, s.out, 1.0, input, Trans::N, w, Trans::N, 0.0, be.view_mut(out, 0..b * s.out))?;
            let act = if l + 1 == n { Activation::Identity } else { self.act };
            let keep_z = if act == Activation::Gelu { Some(be.view_mut(&mut ws.z[l], 0..b * s.out)) } else { None };
            be.bias_act(be.view_mut(out, 0..b * s.out), be.view(params, s.b.clone()), act, keep_z)?;
        }
        Ok(())
    }

    /// Loss of the last `forward` against `targets`; fills the output gradient in `ws`
    /// scaled by `grad_scale` (1/b for a mean). Returns (sum of losses, correct predictions).
    pub fn loss<B: Backend>(
        &self,
        be: &B,
        targets: Targets<B>,
        b: usize,
        grad_scale: f32,
        ws: &mut Workspace<B>,
        want_grad: bool,
    ) -> Result<(f64, usize)> {
        let k = self.n_outputs();
        let Workspace { a, d, .. } = ws;
        let out = be.view(&a[self.layers.len() - 1], 0..b * k);
        let d = if want_grad { Some(be.view_mut(&mut d[0], 0..b * k)) } else { None };
        loss::compute(be, self.loss, out, targets, b, k, grad_scale, d)
    }

    /// Backward pass after `forward` and `loss` (with want_grad). Writes every gradient where
    /// `grads` says and calls `grads.ready(t)` as soon as tensor `t` is complete, last layer
    /// first: the hook where communication can start.
    pub fn backward<B: Backend>(
        &self,
        be: &B,
        params: &B::Buf,
        x: &B::Buf,
        b: usize,
        ws: &mut Workspace<B>,
        grads: &mut impl GradSink<B>,
    ) -> Result<()> {
        let Workspace { a, z, d, .. } = ws;
        let (d0, d1) = d.split_at_mut(1);
        let (mut dz, mut dprev) = (&mut d0[0], &mut d1[0]);
        for l in (0..self.layers.len()).rev() {
            let s = &self.layers[l];
            let input = if l == 0 { be.view(x, 0..b * s.inp) } else { be.view(&a[l - 1], 0..b * s.inp) };
            let g = be.view(dz, 0..b * s.out);
            let (wt, bt) = (self.weight_id(l), self.weight_id(l) + 1);
            be.gemm(s.inp, b, s.out, 1.0, input, Trans::T, g, Trans::N, 0.0, grads.slot(wt))?;
            grads.ready(wt);
            be.column_sums(g, s.out, grads.slot(bt))?;
            grads.ready(bt);
            if l > 0 {
                let w = be.view(params, s.w.clone());
                be.gemm(b, s.out, s.inp, 1.0, g, Trans::N, w, Trans::T, 0.0, be.view_mut(dprev, 0..b * s.inp))?;
                let zin = if self.act == Activation::Gelu { Some(be.view(&z[l - 1], 0..b * s.inp)) } else { None };
                be.act_backward(be.view_mut(dprev, 0..b * s.inp), be.view(&a[l - 1], 0..b * s.inp), zin, self.act)?;
                std::mem::swap(&mut dz, &mut dprev);
            }
        }
        Ok(())
    }
}

/// Where backward writes gradients, and who hears that a tensor is complete. The training
/// step implements it over the engine's gradient buckets; tests over one plain buffer.
pub trait GradSink<B: Backend> {
    /// The buffer for tensor `t`'s gradient (its length is the tensor's).
    fn slot(&mut self, t: usize) -> B::ViewMut<'_>;
    /// Tensor `t` is complete and is not written again this step.
    fn ready(&mut self, t: usize);
}

/// Scratch buffers for one batch size: activations per layer, pre-activations (gelu only),
/// and two gradient buffers that backward ping-pongs between.
pub struct Workspace<B: Backend> {
    cap: usize,
    a: Vec<B::Buf>,
    z: Vec<B::Buf>,
    d: Vec<B::Buf>,
}

impl<B: Backend> Workspace<B> {
    pub fn new(be: &B, model: &Mlp, batch: usize) -> Result<Workspace<B>> {
        let mut ws = Workspace { cap: 0, a: Vec::new(), z: Vec::new(), d: Vec::new() };
        ws.ensure(be, model, batch)?;
        Ok(ws)
    }

    fn ensure(&mut self, be: &B, m: &Mlp, b: usize) -> Result<()> {
        if b <= self.cap && self.a.len() == m.layers.len() {
            return Ok(());
        }
        let keep_z = m.act == Activation::Gelu;
        self.a = m.layers.iter().map(|s| be.zeros(b * s.out)).collect::<Result<_>>()?;
        self.z = m.layers.iter().map(|s| be.zeros(if keep_z { b * s.out } else { 0 })).collect::<Result<_>>()?;
        self.d = vec![be.zeros(b * m.max_width())?, be.zeros(b * m.max_width())?];
        self.cap = b;
        Ok(())
    }

    /// The last forward's outputs, writable (softmax in place for `predict`).
    pub fn output_mut<'a>(&'a mut self, be: &B, model: &Mlp, b: usize) -> B::ViewMut<'a> {
        be.view_mut(&mut self.a[model.layers.len() - 1], 0..b * model.n_outputs())
    }

    /// The last forward's outputs copied to the host.
    pub fn output_host(&self, be: &B, model: &Mlp, b: usize, host: &mut [f32]) -> Result<()> {
        be.download(&self.a[model.layers.len() - 1], 0..b * model.n_outputs(), host)
    }
}

#[cfg(test)]
mod tests;
