//! The multi-layer perceptron: dense layers, an activation between them, a loss on top.
//!
//! Parameters live in one flat arena (`Vec<f32>`), and so do gradients, laid out in the
//! order backward produces them: the last layer's weight and bias first. That order is the
//! fusion order, so a fusion bucket is a contiguous range of the gradient arena and packing
//! costs no copy (gradients are written straight into their bucket, like PyTorch DDP's
//! "gradient as bucket view"). Every operation goes through `device::Backend`, so the same
//! code runs on every device.
//!
//! Must not: call MPI or know the rank (a tensor shard's sums go through `TensorSum`).

pub mod gradcheck;
mod init;
pub mod loss;
pub mod params;
pub mod pipeline;
pub mod placement;
pub mod tensor;
mod workspace;

use crate::config::{Activation, Init, Loss};
use crate::device::{Backend, Gemm, Mask, Trans};
use crate::error::Result;
use std::ops::Range;

pub use loss::Targets;
pub use params::{Held, Params};
pub use tensor::{part, Split, TensorSum, Whole};
use workspace::DropState;
pub use workspace::Workspace;

/// Where one dense layer's tensors sit in the arena. Weight is [inp, out], row-major; under
/// tensor parallelism `inp` and `out` are this rank's slice (see `tensor.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct DenseSlot {
    pub inp: usize,
    pub out: usize,
    pub w: Range<usize>,
    pub b: Range<usize>,
    /// Where the layer's slot ends: `b.end` rounded up to `ARENA_ALIGN` (the padding after
    /// the bias, zero always, is part of the bias's tensor in `tensors()`).
    pub end: usize,
    /// Whether this rank holds the whole layer, a slice of its output columns, or a slice
    /// of its input rows.
    pub split: Split,
}

/// Every layer's slot in the arena starts at a multiple of this many floats (256 bytes, what
/// cudaMalloc gives): each weight is then aligned for cuBLAS's tensor-core kernels (an
/// operand 8 bytes off a 16-byte boundary makes it pick `align1` kernels at half the rate).
/// The padding after each bias is zero and stays zero (its gradient is never written, so
/// every optimizer leaves it); checkpoints, weights.h5 and the logs never show it
/// (`unpad`, `pad`, `n_logical`).
pub const ARENA_ALIGN: usize = 64;

#[derive(Clone, Debug)]
pub struct Mlp {
    /// The whole model's widths (also for a tensor-parallel shard).
    pub sizes: Vec<usize>,
    /// The activation after each hidden layer of the whole model (one entry: the same after
    /// every one); `act(l)` reads it for this arena's layer `l`.
    pub acts: Vec<Activation>,
    pub loss: Loss,
    /// How `init_params` draws the weights (`model.init`; glorot_uniform unless set).
    pub init: Init,
    pub layers: Vec<DenseSlot>,
    /// Floats in this arena (this rank's shard under tensor parallelism), the padding after
    /// each layer included (`ARENA_ALIGN`); `n_logical` counts the parameters.
    pub n_params: usize,
    /// (this rank's index in its tensor group, the group's size); (0, 1) for a whole model.
    pub tensor: (usize, usize),
    /// The index of this arena's first layer in the whole model (a pipeline stage's; 0 for
    /// the whole model). A stage after the first also computes its input's gradient.
    pub first: usize,
    /// Whether this arena ends with the model's output layer (no activation, then the loss).
    /// A pipeline stage before the last applies the activation to its last layer instead.
    pub head: bool,
}

/// The hidden activations a model is built with: one for all hidden layers (from an
/// `Activation`), or one per hidden layer of the whole model (from a list).
pub struct Acts(pub Vec<Activation>);

impl From<Activation> for Acts {
    fn from(a: Activation) -> Acts {
        Acts(vec![a])
    }
}

impl From<Vec<Activation>> for Acts {
    fn from(v: Vec<Activation>) -> Acts {
        Acts(v)
    }
}

impl From<&[Activation]> for Acts {
    fn from(v: &[Activation]) -> Acts {
        Acts(v.to_vec())
    }
}

/// A named tensor of the arena, in arena (= gradient-ready) order.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub range: Range<usize>,
    /// Its values, the arena's padding after a bias left out (`range.len()` for a weight).
    pub used: usize,
    /// Weights get weight decay; biases do not.
    pub is_weight: bool,
}

impl Mlp {
    /// The whole model a job's `[model]` table describes.
    pub fn from_cfg(m: &crate::config::ModelCfg) -> Mlp {
        let mut mlp = Mlp::new(&m.layers, m.activation.as_given(), m.loss());
        mlp.init = m.init;
        mlp
    }

    /// `acts`: one activation for every hidden layer, or a list of one per hidden layer.
    pub fn new(sizes: &[usize], acts: impl Into<Acts>, loss: impl Into<Loss>) -> Mlp {
        Mlp::with_tensor(sizes, acts, loss, 0, 1)
    }

    /// Tensor rank `t`'s shard of the model split over `ts` ranks (`ts` = 1: the whole
    /// model). Layers pair up, 2i column-parallel and 2i+1 row-parallel; an unpaired last
    /// layer is whole on every rank. The arena keeps backward's order.
    pub fn with_tensor(sizes: &[usize], acts: impl Into<Acts>, loss: impl Into<Loss>, t: usize, ts: usize) -> Mlp {
        let loss = loss.into();
        let acts = acts.into().0;
        assert!(!acts.is_empty(), "one activation for all hidden layers, or one per hidden layer");
        assert!(sizes.len() >= 2 && t < ts);
        let n_layers = sizes.len() - 1;
        let mut layers: Vec<Option<DenseSlot>> = vec![None; n_layers];
        let mut off = 0;
        for l in (0..n_layers).rev() {
            let split = tensor::split_of(l, n_layers, ts);
            let (inp, out) = match split {
                Split::Whole => (sizes[l], sizes[l + 1]),
                Split::Column => (sizes[l], part(sizes[l + 1], t, ts).len()),
                Split::Row => (part(sizes[l], t, ts).len(), sizes[l + 1]),
            };
            let w = off..off + inp * out;
            let b = w.end..w.end + out;
            off = b.end.next_multiple_of(ARENA_ALIGN);
            layers[l] = Some(DenseSlot { inp, out, w, b, end: off, split });
        }
        Mlp {
            sizes: sizes.to_vec(),
            acts,
            loss,
            init: Init::default(),
            layers: layers.into_iter().map(Option::unwrap).collect(),
            n_params: off,
            tensor: (t, ts),
            first: 0,
            head: true,
        }
    }

    /// The pipeline stage of the whole model `sizes` that holds layers `layers`, whole
    /// (its tensor shards: `shard`). Its `sizes` are the stage's own widths.
    pub fn stage(sizes: &[usize], acts: impl Into<Acts>, loss: impl Into<Loss>, layers: Range<usize>) -> Mlp {
        let mut m = Mlp::new(&sizes[layers.start..=layers.end], acts, loss);
        m.first = layers.start;
        m.head = layers.end + 1 == sizes.len();
        m
    }

    /// Tensor rank `t`'s shard of this (whole, or whole-stage) model split over `ts` ranks.
    pub fn shard(&self, t: usize, ts: usize) -> Mlp {
        assert_eq!(self.tensor.1, 1, "shard a whole model or stage");
        let mut m = Mlp::with_tensor(&self.sizes, self.acts.clone(), self.loss, t, ts);
        m.first = self.first;
        m.head = self.head;
        m
    }

    /// The activation after this arena's layer `l` when it is a hidden layer of the whole
    /// model (a stage's last layer before the head is one).
    pub fn act(&self, l: usize) -> Activation {
        match self.acts.as_slice() {
            [a] => *a,
            v => v[self.first + l],
        }
    }

    /// What forward applies after layer `l`: its activation, or none (identity) on the
    /// model's output layer.
    pub fn out_act(&self, l: usize) -> Activation {
        if l + 1 == self.layers.len() && self.head {
            Activation::Identity
        } else {
            self.act(l)
        }
    }

    /// The log's and weights file's spelling of the hidden activations (`relu`, or
    /// `relu,tanh` per layer).
    pub fn act_names(&self) -> String {
        crate::config::activation_names(&self.acts)
    }

    pub fn n_inputs(&self) -> usize {
        self.sizes[0]
    }
    pub fn n_outputs(&self) -> usize {
        *self.sizes.last().unwrap()
    }
    /// The widest activation this arena's layers read or write.
    pub fn max_width(&self) -> usize {
        self.layers.iter().map(|s| s.inp.max(s.out)).max().unwrap()
    }

    /// The tensors in arena order (backward's order: last layer first, weight then bias).
    pub fn tensors(&self) -> Vec<TensorInfo> {
        let mut v = Vec::with_capacity(2 * self.layers.len());
        for (l, s) in self.layers.iter().enumerate().rev() {
            let l = l + self.first;
            v.push(TensorInfo {
                name: format!("dense{l}/weight"),
                range: s.w.clone(),
                used: s.w.len(),
                is_weight: true,
            });
            v.push(TensorInfo {
                name: format!("dense{l}/bias"),
                range: s.b.start..s.end,
                used: s.out,
                is_weight: false,
            });
        }
        v
    }

    /// The parameters without the arena's padding (weights, biases): what a user counts.
    pub fn n_logical(&self) -> usize {
        self.layers.iter().map(|s| s.b.end - s.w.start).sum()
    }

    /// An arena (parameters or optimizer state of this arena's layout) without its padding:
    /// each layer's weight and bias back to back, last layer first, as checkpoints store
    /// optimizer state (checkpoints write `stored_runs` one at a time; tests compare with this).
    /// An empty vector stays empty.
    #[cfg(test)]
    pub fn unpad(&self, arena: &[f32]) -> Vec<f32> {
        if arena.is_empty() {
            return Vec::new();
        }
        assert_eq!(arena.len(), self.n_params, "an arena of another model");
        let mut out = Vec::with_capacity(self.n_logical());
        for r in self.stored_runs() {
            out.extend_from_slice(&arena[r]);
        }
        out
    }

    /// The arena ranges that make up the stored (unpadded) order, in that order: `unpad` is
    /// their values end to end.
    pub fn stored_runs(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        self.layers.iter().rev().map(|s| s.w.start..s.b.end)
    }

    /// The inverse of `unpad`: a padded arena (zero padding) from `logical`; None when its
    /// length is neither this model's parameter count nor 0 (empty stays empty).
    pub fn pad(&self, logical: &[f32]) -> Option<Vec<f32>> {
        if logical.is_empty() {
            return Some(Vec::new());
        }
        if logical.len() != self.n_logical() {
            return None;
        }
        let mut out = vec![0.0; self.n_params];
        let mut at = 0;
        for s in self.layers.iter().rev() {
            let n = s.b.end - s.w.start;
            out[s.w.start..s.b.end].copy_from_slice(&logical[at..at + n]);
            at += n;
        }
        Some(out)
    }

    /// Tensor id (index into `tensors()`, arena order) of layer `l`'s weight; its bias is
    /// the next id. The one place that knows the arena order besides `Mlp::new`.
    pub fn weight_id(&self, l: usize) -> usize {
        2 * (self.layers.len() - 1 - l)
    }

    /// Forward pass of `b` samples `x` [b, inputs] (the first b rows of `x`); the outputs
    /// [b, outputs] are then `ws.output(..)`. A whole model only (see `forward_tp`).
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        params: &B::Buf,
        x: &B::Buf,
        b: usize,
        ws: &mut Workspace<B>,
    ) -> Result<()> {
        self.forward_tp(be, &mut Held(params), x, b, ws, &mut Whole)
    }

    /// `forward` of a tensor-parallel shard: a row-parallel layer's partial products are
    /// summed over the tensor group by `tp` before its bias (added once) and activation.
    /// The outputs are the whole logits on every rank of the group.
    pub fn forward_tp<B: Backend>(
        &self,
        be: &B,
        params: &mut impl Params<B>,
        x: &B::Buf,
        b: usize,
        ws: &mut Workspace<B>,
        tp: &mut impl TensorSum<B>,
    ) -> Result<()> {
        ws.ensure(be, self, b)?;
        for (l, s) in self.layers.iter().enumerate() {
            let (before, rest) = ws.a.split_at_mut(l);
            let input = if l == 0 { be.view(x, 0..b * s.inp) } else { be.view(&before[l - 1], 0..b * s.inp) };
            let out = &mut rest[0];
            params.fetch(be, self, l)?;
            let w = params.view(be, s.w.clone());
            let g = Gemm::new(b, s.inp, s.out, Trans::N, Trans::N);
            let act = self.out_act(l);
            let keep_z = if act.needs_z() { Some(be.view_mut(&mut ws.z[l], 0..b * s.out)) } else { None };
            let bias = params.view(be, s.b.clone());
            if s.split == Split::Row {
                // The partial products are summed over the tensor group before the bias.
                be.gemm(g, input, w, be.view_mut(out, 0..b * s.out))?;
                tp.sum(be, out, b * s.out)?;
                be.bias_act(be.view_mut(out, 0..b * s.out), bias, act, keep_z)?;
            } else {
                be.dense(g, input, w, out, b * s.out, bias, act, keep_z)?;
            }
            if let Some((m, keys)) = self.mask(&ws.drop, l) {
                be.dropout(be.view_mut(out, 0..b * s.out), s.out, keys, m)?;
            }
        }
        Ok(())
    }

    /// Layer `l`'s dropout mask in this step (with the rows' ids), when the workspace trains
    /// with dropout and the layer is hidden with a non-zero rate. The mask is the whole
    /// model's layer's: a column-parallel shard takes its columns of it.
    fn mask<'a, B: Backend>(&self, drop: &'a Option<DropState<B>>, l: usize) -> Option<(Mask, &'a B::Labels)> {
        let d = drop.as_ref()?;
        if l + 1 == self.layers.len() && self.head {
            return None;
        }
        let gl = self.first + l;
        let p = *d.rates.get(gl)?;
        if p == 0.0 {
            return None;
        }
        let s = &self.layers[l];
        let col0 =
            if s.split == Split::Column { part(self.sizes[l + 1], self.tensor.0, self.tensor.1).start } else { 0 };
        Some((Mask::new(d.seed, d.step, gl, p).at_col(col0), &d.keys))
    }

    /// Backward through layer `l`'s dropout, before its activation's backward: the same
    /// mask on the gradient `g` [b, out], and for tanh (whose derivative reads the activation)
    /// the kept activations scaled back to their value before dropout.
    fn dropout_backward<B: Backend>(
        &self,
        be: &B,
        drop: &Option<DropState<B>>,
        l: usize,
        b: usize,
        g: &mut B::Buf,
        a: &mut B::Buf,
    ) -> Result<()> {
        let Some((m, keys)) = self.mask(drop, l) else { return Ok(()) };
        let w = self.layers[l].out;
        be.dropout(be.view_mut(g, 0..b * w), w, keys, m)?;
        if self.act(l) == Activation::Tanh {
            be.dropout(be.view_mut(a, 0..b * w), w, keys, Mask::scale_only(1.0 / m.scale))?;
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
        match self.loss_maybe_later(be, targets, b, grad_scale, ws, want_grad, false)? {
            Some(s) => Ok(s),
            None => be.pending_loss_sums(),
        }
    }

    /// `loss` with its gradient, the sums left pending where the backend defers them (None:
    /// `Backend::pending_loss_sums` reads them, after the step's backward and optimizer are
    /// queued, so a GPU does not idle while the host waits for the loss).
    pub fn loss_later<B: Backend>(
        &self,
        be: &B,
        targets: Targets<B>,
        b: usize,
        grad_scale: f32,
        ws: &mut Workspace<B>,
    ) -> Result<Option<(f64, usize)>> {
        self.loss_maybe_later(be, targets, b, grad_scale, ws, true, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn loss_maybe_later<B: Backend>(
        &self,
        be: &B,
        targets: Targets<B>,
        b: usize,
        grad_scale: f32,
        ws: &mut Workspace<B>,
        want_grad: bool,
        later: bool,
    ) -> Result<Option<(f64, usize)>> {
        let k = self.n_outputs();
        let Workspace { a, d, .. } = ws;
        let out = be.view(&a[self.layers.len() - 1], 0..b * k);
        let d = if want_grad { Some(be.view_mut(&mut d[0], 0..b * k)) } else { None };
        loss::compute_maybe_later(be, self.loss, out, targets, b, k, grad_scale, d, later)
    }

    /// Backward pass after `forward` and `loss` (with want_grad). Writes every gradient where
    /// `grads` says and calls `grads.ready(t)` as soon as tensor `t` is complete, last layer
    /// first: the hook where communication can start. A whole model only (see `backward_tp`).
    pub fn backward<B: Backend>(
        &self,
        be: &B,
        params: &B::Buf,
        x: &B::Buf,
        b: usize,
        ws: &mut Workspace<B>,
        grads: &mut impl GradSink<B>,
    ) -> Result<()> {
        self.backward_tp(be, &mut Held(params), x, b, ws, grads, &mut Whole)
    }

    /// `backward` of a tensor-parallel shard: a column-parallel layer's input gradient is a
    /// partial sum over its output slice and is summed over the tensor group by `tp`; a
    /// row-parallel layer's is local (its slice of the inputs).
    ///
    /// A pipeline stage before the last (`!head`) starts from the gradient of its output
    /// activations, put in by `Workspace::output_grad`; a stage after the first (`first > 0`)
    /// leaves its input's gradient in `Workspace::input_grad`. With `grads.accumulate()` the
    /// gradients are added to what the slots hold (micro-batches).
    #[allow(clippy::too_many_arguments)]
    pub fn backward_tp<B: Backend>(
        &self,
        be: &B,
        params: &mut impl Params<B>,
        x: &B::Buf,
        b: usize,
        ws: &mut Workspace<B>,
        grads: &mut impl GradSink<B>,
        tp: &mut impl TensorSum<B>,
    ) -> Result<()> {
        let Workspace { a, z, d, dx, drop, .. } = ws;
        let (d0, d1) = d.split_at_mut(1);
        let (mut dz, mut dprev) = (&mut d0[0], &mut d1[0]);
        let n = self.layers.len();
        if !self.head {
            let s = &self.layers[n - 1];
            self.dropout_backward(be, drop, n - 1, b, dz, &mut a[n - 1])?;
            let act = self.act(n - 1);
            let zin = if act.needs_z() { Some(be.view(&z[n - 1], 0..b * s.out)) } else { None };
            be.act_backward(be.view_mut(dz, 0..b * s.out), be.view(&a[n - 1], 0..b * s.out), zin, act)?;
        }
        let beta = if grads.accumulate() { 1.0 } else { 0.0 };
        // Whether the layer's bias gradient was written by the layer after it (`input_grad`).
        let mut bias_done = false;
        for l in (0..n).rev() {
            let s = &self.layers[l];
            let input = if l == 0 { be.view(x, 0..b * s.inp) } else { be.view(&a[l - 1], 0..b * s.inp) };
            let g = be.view(dz, 0..b * s.out);
            let (wt, bt) = (self.weight_id(l), self.weight_id(l) + 1);
            be.gemm(Gemm::new(s.inp, b, s.out, Trans::T, Trans::N).beta(beta), input, g, grads.slot(wt))?;
            grads.ready(wt);
            if !std::mem::take(&mut bias_done) {
                be.column_sums(g, s.out, beta, grads.slot(bt))?;
            }
            grads.ready(bt);
            if l == 0 && self.first > 0 {
                params.fetch(be, self, l)?;
                let w = params.view(be, s.w.clone());
                be.gemm(Gemm::new(b, s.out, s.inp, Trans::N, Trans::T), g, w, be.view_mut(dx, 0..b * s.inp))?;
                if s.split == Split::Column {
                    tp.sum(be, dx, b * s.inp)?;
                }
            }
            if l > 0 {
                params.fetch(be, self, l)?;
                let w = params.view(be, s.w.clone());
                let gi = Gemm::new(b, s.out, s.inp, Trans::N, Trans::T);
                let act = self.act(l - 1);
                let zin = if act.needs_z() { Some(be.view(&z[l - 1], 0..b * s.inp)) } else { None };
                if s.split != Split::Column && self.mask(drop, l - 1).is_none() {
                    // Nothing between the product and the activation's backward: one call, with
                    // the layer before's bias gradient (its turn then skips it).
                    let (ap, pb) = (be.view(&a[l - 1], 0..b * s.inp), self.weight_id(l - 1) + 1);
                    be.input_grad(gi, g, w, dprev, ap, zin, act, beta, grads.slot(pb))?;
                    bias_done = true;
                } else {
                    be.gemm(gi, g, w, be.view_mut(dprev, 0..b * s.inp))?;
                    if s.split == Split::Column {
                        tp.sum(be, dprev, b * s.inp)?;
                    }
                    self.dropout_backward(be, drop, l - 1, b, dprev, &mut a[l - 1])?;
                    let ap = be.view(&a[l - 1], 0..b * s.inp);
                    be.act_backward(be.view_mut(dprev, 0..b * s.inp), ap, zin, act)?;
                }
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
    /// Whether backward adds to the slots (a micro-batch after the first) instead of
    /// overwriting them.
    fn accumulate(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
