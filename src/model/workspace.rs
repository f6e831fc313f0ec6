//! `Workspace`: the scratch buffers of one batch size that forward and backward use
//! (activations per layer, pre-activations where the activation's backward reads them
//! (`Activation::needs_z`), the two gradient buffers backward ping-pongs between, a pipeline
//! stage's input gradient), grown on demand, and dropout's state for the step's rows.
//!
//! Must not: compute (the layers' arithmetic is `Mlp`'s).

use super::Mlp;
use crate::device::Backend;
use crate::error::Result;

/// Scratch buffers for one batch size: activations per layer, pre-activations (where
/// `act.needs_z()`), two gradient buffers that backward ping-pongs between, and (a pipeline stage after the
/// first) the gradient of the stage's input.
pub struct Workspace<B: Backend> {
    cap: usize,
    pub(super) a: Vec<B::Buf>,
    pub(super) z: Vec<B::Buf>,
    pub(super) d: Vec<B::Buf>,
    pub(super) dx: B::Buf,
    /// Training with dropout: the rates, the seed, this step's rows (`set_rows`). None in
    /// evaluation and prediction.
    pub(super) drop: Option<DropState<B>>,
}

/// Dropout's state in a training workspace.
pub(super) struct DropState<B: Backend> {
    /// Per whole-model hidden layer.
    pub(super) rates: Vec<f32>,
    pub(super) seed: u64,
    /// The global step of the rows in `keys`.
    pub(super) step: u64,
    /// The global ids of the batch's rows (their row in the training data), on the device.
    pub(super) keys: B::Labels,
}

impl<B: Backend> Workspace<B> {
    pub fn new(be: &B, model: &Mlp, batch: usize) -> Result<Workspace<B>> {
        let mut ws = Workspace { cap: 0, a: Vec::new(), z: Vec::new(), d: Vec::new(), dx: be.zeros(0)?, drop: None };
        ws.ensure(be, model, batch)?;
        Ok(ws)
    }

    /// Train with dropout of `rates` (per whole-model hidden layer; all 0: none) drawn from
    /// `seed`; each step's rows then come through `set_rows`.
    pub fn enable_dropout(&mut self, be: &B, rates: &[f32], seed: u64) -> Result<()> {
        if rates.iter().all(|&p| p == 0.0) {
            self.drop = None;
            return Ok(());
        }
        let keys = be.labels(self.cap)?;
        self.drop = Some(DropState { rates: rates.to_vec(), seed, step: 0, keys });
        Ok(())
    }

    /// The next forward's rows: their global ids and the global step (dropout's masks are a
    /// function of these, not of the rank that holds a row). A no-op without dropout.
    pub fn set_rows(&mut self, be: &B, ids: &[u32], step: u64) -> Result<()> {
        let cap = self.cap;
        let Some(d) = self.drop.as_mut() else { return Ok(()) };
        assert!(ids.len() <= cap, "more rows than the workspace holds");
        let keys: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        be.upload_labels(&keys, &mut d.keys)?;
        d.step = step;
        Ok(())
    }

    pub(super) fn ensure(&mut self, be: &B, m: &Mlp, b: usize) -> Result<()> {
        if b <= self.cap && self.a.len() == m.layers.len() {
            return Ok(());
        }
        self.a = m.layers.iter().map(|s| be.zeros(b * s.out)).collect::<Result<_>>()?;
        self.z = (m.layers.iter().enumerate())
            .map(|(l, s)| be.zeros(if m.out_act(l).needs_z() { b * s.out } else { 0 }))
            .collect::<Result<_>>()?;
        self.d = vec![be.zeros(b * m.max_width())?, be.zeros(b * m.max_width())?];
        self.dx = be.zeros(if m.first > 0 { b * m.layers[0].inp } else { 0 })?;
        if let Some(d) = self.drop.as_mut() {
            d.keys = be.labels(b)?;
        }
        self.cap = b;
        Ok(())
    }

    /// The last forward's outputs, writable (softmax in place for `predict`).
    pub fn output_mut<'a>(&'a mut self, be: &B, model: &Mlp, b: usize) -> B::ViewMut<'a> {
        be.view_mut(&mut self.a[model.layers.len() - 1], 0..b * model.n_outputs())
    }

    /// The last forward's outputs (a pipeline stage's message to the next one).
    pub fn output(&self, model: &Mlp) -> &B::Buf {
        &self.a[model.layers.len() - 1]
    }

    /// The gradient of the outputs `backward` starts from, to be written (a pipeline stage's
    /// message from the next one), the workspace sized for `b` rows.
    pub fn output_grad_mut(&mut self, be: &B, model: &Mlp, b: usize) -> Result<&mut B::Buf> {
        self.ensure(be, model, b)?;
        Ok(&mut self.d[0])
    }

    /// The gradient of the inputs after `backward` (a pipeline stage's message to the previous one).
    pub fn input_grad_buf(&self) -> &B::Buf {
        &self.dx
    }

    /// The last forward's outputs copied to the host.
    pub fn output_host(&self, be: &B, model: &Mlp, b: usize, host: &mut [f32]) -> Result<()> {
        be.download(&self.a[model.layers.len() - 1], 0..b * model.n_outputs(), host)
    }

    /// A pipeline stage before the last: set the gradient of its outputs (from the next
    /// stage) for `backward`. Sizes the workspace for `b` rows.
    pub fn output_grad(&mut self, be: &B, model: &Mlp, b: usize, host: &[f32]) -> Result<()> {
        self.ensure(be, model, b)?;
        assert_eq!(host.len(), b * model.n_outputs(), "an output gradient of another shape");
        be.upload_into(host, &mut self.d[0])
    }

    /// A pipeline stage after the first: the gradient of its inputs after `backward`, copied
    /// to the host.
    pub fn input_grad(&self, be: &B, model: &Mlp, b: usize, host: &mut [f32]) -> Result<()> {
        be.download(&self.dx, 0..b * model.n_inputs(), host)
    }
}
