//! One training step on one rank: forward, loss, backward with each gradient tensor
//! announced to the communication engine as soon as it is complete, then the optimizer
//! applied to each bucket as it comes back reduced. Also the phases' timeline spans.
//!
//! The step owns the model's device state (parameters, optimizer state, workspace, the
//! batch's staging buffers); the engine owns the gradient buckets (see `parallel::engine`).
//! This is where the bucket contract is kept: backward writes a tensor only through
//! `Engine::slot` before declaring it ready, and the optimizer reads only buckets that
//! `wait_next` handed over.
//!
//! Under pipeline parallelism, or with several micro-batches per step, `pipeline.rs` runs
//! the step instead: the stage's 1F1B schedule over the micro-batches, gradients accumulated
//! in the buckets and announced during the last micro-batch's backward.
//!
//! Must not: call MPI (the engine and the tensor group do) or decide when to stop.

mod clip;
mod ema;
mod graph;
mod inputs;
mod layers;
mod loss_weights;
pub use clip::clip_factors;
mod pipeline;
mod shard;
mod state;
pub use shard::{pieces_of, Sharded};
pub use state::WholeState;

use crate::data::loader::Batch;
use crate::data::norm::Norm;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::metrics::{regression, GradNorm};

use crate::model::placement::TensorGroup;
use crate::model::{GradSink, Mlp, Workspace};
use crate::optim::Optimizer;
use crate::parallel::engine::HostBuf;
use crate::parallel::timeline::{Timeline, MAIN_TID};
use crate::parallel::{Engine, FusionPlan};
use inputs::Resident;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A rank's sums over its rows for the epoch's train metrics: the loss, the correct
/// predictions (rows for classes, labels for multi-label), the rows whose label is among the 5
/// largest outputs (more than 5 classes), and for regression `metrics::regression`'s sums per
/// output (|e|, e², y, y² in the targets' units: the same MAE, RMSE and R² as evaluation's).
/// Running sums, like Keras' train metrics: each step's rows as the weights were at that step.
/// `sums_len` long.
pub type Sums = Vec<f64>;

/// The length of `Sums` for a model with loss `loss` and `k` outputs.
pub fn sums_len(loss: crate::config::LossKind, k: usize) -> usize {
    3 + if loss.targets() == crate::config::Targets::Regression { regression::PER_OUTPUT * k } else { 0 }
}

/// What a step adds to `Sums` beyond the loss and the correct predictions, from the outputs
/// (downloaded when needed): top-5 hits, regression error sums.
struct Extra {
    top5: bool,
    regression: bool,
    /// The targets' standardization (`data.normalize_y`), to report errors in their units.
    norm: Norm,
    host: Vec<f32>,
}

impl Extra {
    /// The step's sums of `b` rows, whose outputs are in `ws`, loss `loss` and `correct`.
    #[allow(clippy::too_many_arguments)]
    fn sums<B: Backend>(
        &mut self,
        be: &B,
        model: &Mlp,
        ws: &Workspace<B>,
        b: usize,
        classes: &[i32],
        values: &[f32],
        loss: f64,
        correct: usize,
    ) -> Result<Sums> {
        let k = model.n_outputs();
        let mut s = vec![0.0; sums_len(model.loss.kind, k)];
        (s[0], s[1]) = (loss, correct as f64);
        if !(self.top5 || self.regression) {
            return Ok(s);
        }
        self.host.resize(b * k, 0.0);
        ws.output_host(be, model, b, &mut self.host)?;
        if self.top5 {
            s[2] = crate::model::loss::top5_hits(&self.host, classes, k) as f64;
        }
        if self.regression {
            regression::add(&mut s[3..], &self.host, values, k, &self.norm);
        }
        Ok(s)
    }
}

/// Each fusion bucket's two buffers (this rank's gradients, the reduced ones) on `be`, for
/// `Engine::new`'s `alloc`, which asks for them bucket by bucket. Made up front, so that a
/// failed allocation (a GPU out of memory) is an error, not a panic inside the engine.
pub fn bucket_buffers<B: Backend>(be: &B, plan: &FusionPlan) -> Result<impl FnMut(usize) -> B::Buf> {
    let lens: Vec<usize> = plan.buckets.iter().map(|r| r.len()).collect();
    bucket_buffers_sized(be, plan, &lens)
}

/// `bucket_buffers` whose reduced buffers are `reduced[b]` floats long (a reduce-scatter
/// returns this rank's part of each bucket: `parallel::shard::reduced_lens`); the engine's
/// `alloc` takes them in its order (each bucket's gradients, then its reduced buffer), so the
/// length it asks for is not needed.
pub fn bucket_buffers_sized<B: Backend>(
    be: &B,
    plan: &FusionPlan,
    reduced: &[usize],
) -> Result<impl FnMut(usize) -> B::Buf> {
    assert_eq!(reduced.len(), plan.buckets.len(), "one reduced length per bucket");
    let _a = crate::mem::allocating("the gradient buckets (this rank's gradients and the reduced ones)");
    let mut pool = Vec::with_capacity(2 * plan.buckets.len());
    for (r, &n) in plan.buckets.iter().zip(reduced).rev() {
        pool.push(be.staged(n)?);
        pool.push(be.staged(r.len())?);
    }
    Ok(move |_n: usize| pool.pop().expect("two buffers per bucket"))
}

pub struct Stepper<B: Backend>
where
    B::Buf: HostBuf,
{
    be: B,
    model: Mlp,
    params: B::Buf,
    ws: Workspace<B>,
    opt: Optimizer<B>,
    engine: Engine<B::Buf>,
    /// This rank's tensor group (a group of one without tensor parallelism): the sums of
    /// forward and backward, and the whole model for checkpoints.
    tp: TensorGroup,
    /// Two input buffers, used in turn: a step's batch is copied in (on a GPU: from pinned
    /// memory, on a stream of their own) while the previous step's kernels may still read the
    /// other; `prefetch` copies the next step's batch in while this step's kernels run.
    xs: [B::Buf; 2],
    /// The step whose batch `prefetch` already copied in, and that batch's rows and first id.
    prefetched: Option<(u64, usize, u32)>,
    labels: B::Labels,
    /// `model.class_weights`, one per class (`set_class_weights`); None: every class 1.
    class_weights: Option<B::Buf>,
    /// The batch's sample weights (`data.sample_weight`, `set_sample_weights`), [batch]; None:
    /// every row 1.
    sample_weights: Option<B::Buf>,
    values: B::Buf,
    timeline: Option<Arc<Timeline>>,
    /// Tensor names in arena order, for the timeline's backward spans.
    names: Vec<String>,
    batch: usize,
    /// Global steps taken.
    step: u64,
    /// This rank's non-finite loss of the last step (its message): the step still runs to its
    /// end (every collective joined), and the step boundary's agreement ends the run on every
    /// rank at once (`diverged`), so that no rank waits in a collective for one that left.
    diverged: Option<String>,
    /// Micro-batches per step (`parallel.micro_batches`).
    micro: usize,
    /// Per micro-batch: its workspace and its input on the device (both live from its
    /// forward to its backward).
    mws: Vec<Workspace<B>>,
    mx: Vec<B::Buf>,
    /// What the train metrics need beyond the loss.
    extra: Extra,
    /// `set_dropout`'s rates and seed, for the micro-batches' workspaces.
    dropout: (Vec<f32>, u64),
    /// Host staging for the messages between stages.
    h_in: Vec<f32>,
    h_out: Vec<f32>,
    /// The global gradient norm of the steps since `take_grad_norm` (with clipping only).
    grad_norm: GradNorm,
    /// The training rows kept in device memory (`set_resident`): each step gathers its batch
    /// there by the rows' ids instead of copying it from host memory.
    resident: Option<Resident<B>>,
    /// The step's forward, loss and backward as replayed graphs, where the backend captures.
    graphs: graph::Graphs,
    /// Host seconds spent in each part of the unpipelined step (batch upload, the launches of
    /// forward, loss and backward (or their graph's replay), the optimizer's wait and
    /// launches, the wait for the loss's sums),
    /// for `hvtrain bench step`: on a GPU, where the host waits shows where the GPU idles.
    pub host_secs: [f64; 4],
    /// The optimizer state (and with it the update) divided over the data group (`set_shard`).
    shard: Option<Sharded<B>>,
    /// The parameters' moving average (`optimizer.ema`, `set_ema`).
    ema: Option<ema::Ema<B>>,
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// `params` in host memory (uploaded here); `batch` is the per-rank batch size.
    pub fn new(
        be: B,
        model: Mlp,
        params: &[f32],
        opt: Optimizer<B>,
        engine: Engine<B::Buf>,
        batch: usize,
        timeline: Option<Arc<Timeline>>,
    ) -> Result<Stepper<B>> {
        assert_eq!(params.len(), model.n_params, "parameter arena of another model");
        Stepper::build(be, model, params, opt, engine, batch, timeline)
    }

    /// `new` with `params` as they are kept: the whole arena, or this rank's pieces of it
    /// (`shard = "parameters"`, `new_sharded`).
    fn build(
        be: B,
        model: Mlp,
        params: &[f32],
        opt: Optimizer<B>,
        engine: Engine<B::Buf>,
        batch: usize,
        timeline: Option<Arc<Timeline>>,
    ) -> Result<Stepper<B>> {
        let _a = crate::mem::allocating("this rank's parameters and the step's activations and batch buffers");
        let params = be.upload(params)?;
        use crate::config::Targets as T;
        let extra = Extra {
            top5: model.head && model.loss.kind.targets() == T::Classes && model.n_outputs() > 5,
            regression: model.head && model.loss.kind.targets() == T::Regression,
            norm: Norm::default(),
            host: Vec::new(),
        };
        Ok(Stepper {
            ws: Workspace::new(&be, &model, batch)?,
            params,
            xs: [be.input(batch * model.n_inputs())?, be.input(batch * model.n_inputs())?],
            prefetched: None,
            labels: be.labels(batch)?,
            class_weights: None,
            sample_weights: None,
            values: be.zeros(batch * model.n_outputs())?,
            names: model.tensors().into_iter().map(|t| t.name).collect(),
            tp: TensorGroup::new(None, model.clone()),
            be,
            model,
            opt,
            engine,
            timeline,
            batch,
            step: 0,
            diverged: None,
            micro: 1,
            host_secs: [0.0; 4],
            graphs: Default::default(),
            resident: None,
            mws: Vec::new(),
            mx: Vec::new(),
            dropout: (Vec::new(), 0),
            extra,
            grad_norm: GradNorm::default(),
            h_in: Vec::new(),
            h_out: Vec::new(),
            shard: None,
            ema: None,
        })
    }

    /// This rank's model (its shard under tensor parallelism).
    pub fn model(&self) -> &Mlp {
        &self.model
    }
    /// Run with tensor group `tp`, whose shard of the model is this stepper's.
    pub fn set_tensor_group(&mut self, tp: TensorGroup) {
        assert_eq!(tp.local_model().n_params, self.model.n_params, "a tensor group of another shard");
        self.tp = tp;
    }
    /// Run each step as `m` micro-batches (a 1F1B schedule under pipeline parallelism,
    /// gradient accumulation on one stage).
    /// The whole-batch workspace and input buffers then shrink to one micro-batch's rows
    /// (`run_pipelined` reads the batch from host memory into its own), so that gradient
    /// accumulation's memory does not grow with the micro-batch count.
    pub fn set_micro_batches(&mut self, m: usize) -> Result<()> {
        assert!(m >= 1);
        self.micro = m;
        if m > 1 {
            let _a = crate::mem::allocating("the step's activations (one micro-batch)");
            let cap = self.batch.div_ceil(m);
            self.ws = Workspace::new(&self.be, &self.model, cap)?;
            let n = cap * self.model.n_inputs();
            self.xs = [self.be.input(n)?, self.be.input(n)?];
        }
        Ok(())
    }

    /// The length of the sums `run` returns.
    pub fn sums_len(&self) -> usize {
        sums_len(self.model.loss.kind, self.tp.full.n_outputs())
    }

    /// The data's normalization (`data.normalize_y`'s part), so that the train metrics are
    /// in the targets' units.
    pub fn set_norm(&mut self, norm: &Norm) {
        self.extra.norm = norm.clone();
    }

    /// Train with dropout (`model.dropout`'s rates per hidden layer, masks from `seed`, the
    /// step and each row's global id).
    pub fn set_dropout(&mut self, rates: &[f32], seed: u64) -> Result<()> {
        self.ws.enable_dropout(&self.be, rates, seed)?;
        self.dropout = (rates.to_vec(), seed);
        Ok(())
    }
    pub fn tensor(&self) -> &TensorGroup {
        &self.tp
    }
    /// The backend and the tensor group together (evaluation on the training backend).
    pub fn backend_and_tensor(&mut self) -> (&B, &mut TensorGroup) {
        (&self.be, &mut self.tp)
    }
    pub fn backend(&self) -> &B {
        &self.be
    }
    /// Global steps taken.
    pub fn step(&self) -> u64 {
        self.step
    }
    pub fn opt_mut(&mut self) -> &mut Optimizer<B> {
        &mut self.opt
    }
    pub fn opt(&self) -> &Optimizer<B> {
        &self.opt
    }

    /// Gradient buckets of `threshold_bytes` (the first `first_bytes`) from the next step on,
    /// in `order` (autotune); `remake` gives the reducer for the new plan. Collective over
    /// the data group when `remake` is.
    pub fn replan(
        &mut self,
        threshold_bytes: usize,
        first_bytes: usize,
        order: crate::config::BucketOrder,
        remake: impl FnOnce(
            Box<dyn crate::parallel::reduce::Reducer>,
            &FusionPlan,
        ) -> Box<dyn crate::parallel::reduce::Reducer>,
    ) -> Result<()> {
        let lens: Vec<usize> = self.engine.plan().slots.iter().map(|s| s.len()).collect();
        let plan = FusionPlan::with_options(&lens, threshold_bytes, first_bytes, order);
        // Sharded state follows the buckets: the job file check refuses autotune with shards.
        assert!(self.shard.is_none(), "new buckets under sharded state");
        let alloc = bucket_buffers(&self.be, &plan)?;
        self.engine.replan(plan, remake, alloc);
        self.graphs.clear();
        Ok(())
    }

    /// The fusion plan's fingerprint (the cross-rank check after autotune's switches).
    pub fn plan_fingerprint(&self) -> u64 {
        self.engine.plan().fingerprint()
    }

    /// Time the optimizer waited for the network since the last call.
    pub fn take_exposed(&mut self) -> Duration {
        std::mem::take(&mut self.engine.exposed)
    }

    fn span(&self, name: impl Into<String>, t: Instant) {
        if let Some(tl) = &self.timeline {
            tl.span(MAIN_TID, name, t, self.step);
        }
    }

    /// Run one step on `batch` (`batch.rows` rows: the batch size, fewer for a short last
    /// batch, 0 when this rank has run out this epoch); returns the sum of the batch's
    /// per-sample losses. `global_rows` is the step's row count over all ranks: gradients are
    /// scaled by 1/global_rows, so the reduced sum is already the mean over the step's rows,
    /// each rank weighted by the rows it used.
    /// `waited_since` is when the loop started waiting for this batch (for the timeline).
    pub fn run(&mut self, batch: &Batch, global_rows: usize, waited_since: Instant) -> Result<Sums> {
        assert!(batch.rows <= self.batch && batch.rows <= global_rows && global_rows > 0, "bad step row counts");
        self.step += 1;
        self.span(if batch.rows == 0 { "data wait (no rows left)" } else { "data wait" }, waited_since);
        // Sharded parameters: the layers this step fetches, for the gathers to run ahead; the
        // main thread's time in them is exposed communication.
        self.plan_step_fetches();
        let gathers_before = self.gathers_waited();
        let sums = self.run_planned(batch, global_rows)?;
        self.engine.exposed += self.gathers_waited() - gathers_before;
        self.update_ema()?;
        Ok(sums)
    }

    /// `run` after the step's counter, data wait and fetch plan.
    fn run_planned(&mut self, batch: &Batch, global_rows: usize) -> Result<Sums> {
        if batch.rows > 0 && (self.tp.pipe.is_some() || self.micro > 1) {
            return self.run_pipelined(batch, global_rows);
        }
        if batch.rows == 0 {
            // No compute, zero gradients; every tensor is still announced, in backward's
            // order, so this rank's collectives line up with the others'.
            self.engine.begin_step(self.step);
            self.fetch_without_rows_all()?;
            for t in 0..self.names.len() {
                let (buf, range) = self.engine.slot(t);
                self.be.fill_zero(self.be.view_mut(buf, range))?;
                self.engine.tensor_ready(t);
            }
            self.engine.flush();
            self.apply_buckets()?;
            return Ok(vec![0.0; self.sums_len()]);
        }
        let t = Instant::now();
        let xi = (self.step % 2) as usize;
        if !self.was_prefetched(batch) {
            self.load_inputs(batch, xi)?;
        }
        let (be, b) = (&self.be, batch.rows);
        let t_fwd = Instant::now();
        if batch.classes.is_empty() {
            be.upload_into(&batch.values, &mut self.values)?;
        } else {
            be.upload_labels(&batch.classes, &mut self.labels)?;
        }
        self.upload_sample_weights(batch, 0..b)?;
        let be = &self.be;
        self.tp.step = self.step;
        self.ws.set_rows(be, &batch.ids, self.step)?;
        self.engine.begin_step(self.step);
        let values = if batch.classes.is_empty() { batch.values.len() } else { 0 };
        let key = self.graph_key(b, 1.0 / global_rows as f32, xi, values);
        // A non-finite loss read now ends the run before this step's update (never saved);
        // read after the step (on a GPU), after it.
        let now = if self.wants_graph(&key) { self.graphed(&key, t)? } else { self.segment(&key, true, t)? };
        if let Some((loss, _)) = now {
            note_non_finite(&mut self.diverged, loss, self.step);
        }
        self.engine.flush();
        let t_opt = Instant::now();
        self.host_secs[0] += (t_fwd - t).as_secs_f64();
        self.host_secs[1] += (t_opt - t_fwd).as_secs_f64();
        self.apply_buckets()?;
        let t_wait = Instant::now();
        self.host_secs[2] += (t_wait - t_opt).as_secs_f64();
        let (loss, correct) = match now {
            Some(s) => s,
            None => {
                let s = self.be.pending_loss_sums()?;
                note_non_finite(&mut self.diverged, s.0, self.step);
                s
            }
        };
        let sums = self.extra.sums(&self.be, &self.model, &self.ws, b, &batch.classes, &batch.values, loss, correct)?;
        self.host_secs[3] += t_wait.elapsed().as_secs_f64();
        Ok(sums)
    }

    /// This rank's non-finite loss of the last step (the error's message), if it had one.
    pub fn diverged(&self) -> Option<&str> {
        self.diverged.as_deref()
    }

    /// The optimizer on each bucket as it comes back reduced.
    fn apply_buckets(&mut self) -> Result<()> {
        // Clipping, and LARS or LAMB on sharded state, need every bucket back first.
        if self.opt.cfg().clips() || (self.opt.own().is_some() && self.opt.layerwise()) {
            return self.apply_clipped();
        }
        let be = &self.be;
        self.opt.begin_step();
        let scale = self.engine.grad_scale();
        loop {
            let t = Instant::now();
            let Some(bucket) = self.engine.wait_next() else { break };
            let i = bucket.index;
            self.span(format!("wait for bucket {i}"), t);
            if let Some(e) = &bucket.failed {
                return Err(Error::Cuda(e.clone()));
            }
            let t = Instant::now();
            let offset = self.reduced_offset(i);
            let members = &self.engine.plan().members[i];
            self.opt.apply(be, &mut self.params, &bucket.reduced, offset, scale, members)?;
            self.engine.give_back(bucket);
            self.span(format!("optimizer bucket {i}"), t);
        }
        self.gather_params()
    }
}

/// Backward's gradient destination: the engine's buckets, plus the timeline's per-layer spans.
struct Sink<'a, B: Backend>
where
    B::Buf: HostBuf,
{
    be: &'a B,
    engine: &'a mut Engine<B::Buf>,
    timeline: &'a Option<Arc<Timeline>>,
    names: &'a [String],
    step: u64,
    mark: Instant,
    /// Add to the buckets (they were zeroed at the step's start) instead of overwriting.
    accumulate: bool,
    /// Tell the engine each tensor is ready (the step's last backward only).
    announce: bool,
}

impl<B: Backend> GradSink<B> for Sink<'_, B>
where
    B::Buf: HostBuf,
{
    fn slot(&mut self, t: usize) -> B::ViewMut<'_> {
        let (buf, range) = self.engine.slot(t);
        self.be.view_mut(buf, range)
    }

    fn ready(&mut self, t: usize) {
        if let Some(tl) = self.timeline {
            tl.span(MAIN_TID, format!("backward {}", self.names[t]), self.mark, self.step);
            self.mark = Instant::now();
        }
        if self.announce {
            self.engine.tensor_ready(t);
        }
    }

    fn accumulate(&self) -> bool {
        self.accumulate
    }
}

#[cfg(test)]
mod tests;

/// A non-finite loss ends the run: noted in `diverged` (the first one), acted on at the step's
/// boundary by every rank together (`Stepper::diverged`).
fn note_non_finite(diverged: &mut Option<String>, loss: f64, step: u64) {
    if !loss.is_finite() && diverged.is_none() {
        *diverged = Some(format!(
            "the loss became {loss} at step {step}; lower optimizer.lr, or check the data for extreme values"
        ));
    }
}
