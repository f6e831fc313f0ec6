//! One training step on one rank: forward, loss, backward with gradients handed to the
//! communication engine as they become ready, then the optimizer applied bucket by bucket
//! as reduced gradients come back. Also the phases' timeline spans.

use crate::data::loader::Batch;
use crate::parallel::timeline::{Timeline, MAIN_TID};
use crate::parallel::Engine;
use crate::error::{Error, Result};
use crate::model::{Mlp, Targets, Workspace};
use crate::optim::Optimizer;
use std::sync::Arc;
use std::time::Instant;

pub struct Stepper {
    pub model: Mlp,
    pub params: Vec<f32>,
    grads: Vec<f32>,
    reduced: Vec<f32>,
    ws: Workspace,
    pub opt: Optimizer,
    pub engine: Engine,
    timeline: Option<Arc<Timeline>>,
    batch: usize,
    /// Global steps taken.
    pub step: u64,
}

impl Stepper {
    pub fn new(
        model: Mlp,
        params: Vec<f32>,
        opt: Optimizer,
        engine: Engine,
        batch: usize,
        timeline: Option<Arc<Timeline>>,
    ) -> Stepper {
        let n = model.n_params;
        Stepper {
            ws: Workspace::new(&model, batch),
            model,
            params,
            grads: vec![0.0; n],
            reduced: vec![0.0; n],
            opt,
            engine,
            timeline,
            batch,
            step: 0,
        }
    }

    fn span(&self, name: impl Into<String>, t: Instant) {
        if let Some(tl) = &self.timeline {
            tl.span(MAIN_TID, name, t, self.step);
        }
    }

    /// Run one step on `batch`; returns the sum of the batch's per-sample losses.
    /// `waited_since` is when the loop started waiting for this batch (for the timeline).
    pub fn run(&mut self, batch: &Batch, waited_since: Instant) -> Result<f64> {
        self.step += 1;
        self.span("data wait", waited_since);
        let b = self.batch;
        let t = Instant::now();
        let targets =
            if batch.classes.is_empty() { Targets::Values(&batch.values) } else { Targets::Classes(&batch.classes) };
        self.model.forward(&self.params, &batch.x, b, &mut self.ws);
        let (loss, _) = self.model.loss(targets, b, 1.0 / b as f32, &mut self.ws, true);
        self.span("forward + loss", t);
        if !loss.is_finite() {
            return Err(Error::Training(format!(
                "the loss became {loss} at step {}; lower optimizer.lr, or check the data for extreme values",
                self.step
            )));
        }

        // SAFETY: grads and reduced are fields of self, alive for the whole step; backward
        // writes each tensor before declaring it ready and never again this step, and
        // `reduced` is read below only for buckets that came back from wait_next.
        unsafe { self.engine.begin_step(self.step, &self.grads, &mut self.reduced) };
        let n_layers = self.model.layers.len();
        let (engine, timeline, step) = (&mut self.engine, &self.timeline, self.step);
        let mut mark = Instant::now();
        self.model.backward(&self.params, &batch.x, b, &mut self.ws, &mut self.grads, |l| {
            if let Some(tl) = timeline {
                tl.span(MAIN_TID, format!("backward dense{l}"), mark, step);
                mark = Instant::now();
            }
            // Tensor indices in arena order: layer l's weight and bias.
            let w = 2 * (n_layers - 1 - l);
            engine.tensor_ready(w);
            engine.tensor_ready(w + 1);
        });
        self.engine.flush();

        self.opt.begin_step();
        let scale = self.engine.grad_scale();
        loop {
            let t = Instant::now();
            let Some(bucket) = self.engine.wait_next() else { break };
            self.span(format!("wait for bucket {bucket}"), t);
            let t = Instant::now();
            let members = &self.engine.plan().members[bucket];
            self.opt.apply(&mut self.params, &self.reduced, scale, members);
            self.span(format!("optimizer bucket {bucket}"), t);
        }
        Ok(loss)
    }
}
