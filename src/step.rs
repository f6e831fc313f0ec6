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

    /// Run one step on `batch` (`batch.rows` rows: the batch size, fewer for a short last
    /// batch, 0 when this rank has run out this epoch); returns the sum of the batch's
    /// per-sample losses. `global_rows` is the step's row count over all ranks: gradients are
    /// scaled by 1/global_rows, so the all-reduce sum is already the mean over the step's
    /// rows, each rank weighted by the rows it used.
    /// `waited_since` is when the loop started waiting for this batch (for the timeline).
    pub fn run(&mut self, batch: &Batch, global_rows: usize, waited_since: Instant) -> Result<f64> {
        assert!(batch.rows <= self.batch && batch.rows <= global_rows && global_rows > 0, "bad step row counts");
        if batch.rows == 0 {
            return Ok(self.run_empty(waited_since));
        }
        self.step += 1;
        self.span("data wait", waited_since);
        let b = batch.rows;
        let t = Instant::now();
        let targets =
            if batch.classes.is_empty() { Targets::Values(&batch.values) } else { Targets::Classes(&batch.classes) };
        self.model.forward(&self.params, &batch.x, b, &mut self.ws);
        let (loss, _) = self.model.loss(targets, b, 1.0 / global_rows as f32, &mut self.ws, true);
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

    /// A step of a rank with no rows left this epoch: no forward or backward, zero gradients,
    /// but every tensor is announced ready (in backward's order) so that this rank's
    /// collectives line up with the others', and the optimizer applies the reduced result.
    fn run_empty(&mut self, waited_since: Instant) -> f64 {
        self.step += 1;
        self.span("data wait (no rows left)", waited_since);
        self.grads.fill(0.0);
        // SAFETY: as in `run`; every tensor is complete before it is declared ready.
        unsafe { self.engine.begin_step(self.step, &self.grads, &mut self.reduced) };
        (0..self.engine.plan().slots.len()).for_each(|t| self.engine.tensor_ready(t));
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
        0.0
    }
}
