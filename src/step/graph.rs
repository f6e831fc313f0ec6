//! The step as a captured graph: on a backend that captures (CUDA graphs), a full batch's
//! forward, loss and backward are captured once per distinct set of buffers and replayed as
//! one launch from then on, instead of some ten launches per layer from the host.
//!
//! What a captured step holds is fixed at capture: every value it takes by value (the rows,
//! the loss's gradient scale, which input buffer) is in its `GraphKey`, and every buffer it
//! writes is named there by identity (one rank swaps each bucket's two buffers every step, and
//! the inputs alternate, so two graphs serve every other step). A step whose key matches no
//! graph runs plain (a short last batch), or is captured while fewer than `MAX_GRAPHS` are.
//!
//! Each capture is checked before it is used: the step runs plain, its gradients are read,
//! the buckets are zeroed, the graph is replayed, and its gradients must equal plain
//! launches' bit for bit; otherwise, or when the capture fails, graphs stay off for the run
//! with one log line saying why, and the step keeps plain launches' results.
//!
//! Graphs are off (one log line on a GPU) where a step needs the host inside it: gradient
//! buckets going out during backward (more than one rank), tensor parallelism's collectives,
//! dropout's per-step masks; and with `HVTRAIN_CUDA_GRAPHS=0`. Pipelined steps and micro-batches
//! never come here. The optimizer's launches stay outside the graph (a few fused launches
//! per bucket, which may wait for the network).
//!
//! Must not: name a device (the backend captures and replays), or change a step's results.

use super::{Sink, Stepper};
use crate::device::{Backend, Captured, Replayed};
use crate::error::Result;
use crate::model::Targets;
use crate::parallel::engine::HostBuf;
use std::time::Instant;

/// Graphs kept at once: one per input buffer and bucket-buffer parity.
pub const MAX_GRAPHS: usize = 2;
/// Captures in a run, beyond which graphs are off (each costs a checked plain step).
pub const MAX_CAPTURES: usize = 8;

/// Everything a captured step depends on that could change between steps.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphKey {
    pub rows: usize,
    /// The loss's gradient scale (1 / the step's rows over all ranks), by its bits.
    pub scale_bits: u32,
    /// The input buffer (`Stepper::xs`).
    pub xi: usize,
    /// The targets: this many values (`Stepper::values`), or class labels when 0.
    pub values: usize,
    /// Identities of the buffers the step reads and writes: parameters, input, each bucket's.
    pub bufs: Vec<usize>,
    /// The backend's own scratch memory (`Backend::scratch_generation`).
    pub scratch: u64,
}

impl GraphKey {
    pub fn scale(&self) -> f32 {
        f32::from_bits(self.scale_bits)
    }
}

/// Whether and which graphs a stepper replays, and how often it did.
#[derive(Default)]
pub struct Graphs {
    /// Why graphs are off for this run (None: on, or not decided yet).
    off: Option<String>,
    decided: bool,
    kept: Vec<(GraphKey, Captured)>,
    /// Steps replayed from a graph, and graphs captured (and checked).
    pub replays: u64,
    pub captures: usize,
}

impl Graphs {
    /// Why graphs are off for the run, if they are.
    pub fn off(&self) -> Option<&str> {
        self.off.as_deref()
    }
    /// Forget every graph (the buffers they name were replaced), keeping the decision.
    pub fn clear(&mut self) {
        self.kept.clear();
    }
    fn turn_off(&mut self, why: String, on_device: bool) {
        if on_device {
            log::info!("CUDA graphs off: {why}; the step keeps plain launches");
        }
        self.off = Some(why);
        self.kept.clear();
    }
    /// One line for `bench step` and the run's end.
    pub fn summary(&self) -> String {
        match self.off() {
            Some(why) => format!("plain launches ({why})"),
            None => format!("{} graph(s), {} step(s) replayed", self.captures, self.replays),
        }
    }
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// Why this stepper's steps cannot be graphs, if they cannot.
    fn why_no_graphs(&self) -> Option<String> {
        if !self.be.captures() {
            return Some("this backend does not capture".into());
        }
        if std::env::var("HVTRAIN_CUDA_GRAPHS").is_ok_and(|v| v == "0") {
            return Some("HVTRAIN_CUDA_GRAPHS=0".into());
        }
        if !self.engine.is_local() {
            return Some(
                "gradient buckets are exchanged while backward runs (more than one rank, or parameter servers)".into(),
            );
        }
        if self.tp.size > 1 {
            return Some("tensor parallelism's collectives run inside the step".into());
        }
        if self.dropout.0.iter().any(|&r| r > 0.0) {
            return Some("dropout's masks change every step".into());
        }
        None
    }

    /// The key of a step of `rows` rows scaled by `scale`, on input buffer `xi`, with `values`
    /// target values (0: class labels).
    pub(super) fn graph_key(&self, rows: usize, scale: f32, xi: usize, values: usize) -> GraphKey {
        let mut bufs = vec![self.params.id(), self.xs[xi].id()];
        bufs.extend(self.engine.slot_ids());
        GraphKey { rows, scale_bits: scale.to_bits(), xi, values, bufs, scratch: self.be.scratch_generation() }
    }

    /// Whether the step with `key` goes through `graphed` (else: plain, with overlap).
    pub(super) fn wants_graph(&mut self, key: &GraphKey) -> bool {
        if !self.graphs.decided {
            self.graphs.decided = true;
            if let Some(why) = self.why_no_graphs() {
                let loud = self.be.captures();
                self.graphs.turn_off(why, loud);
            }
        }
        if self.graphs.off.is_some() || key.rows != self.batch {
            return false;
        }
        let g = &mut self.graphs;
        if g.kept.len() >= MAX_GRAPHS && !g.kept.iter().any(|(k, _)| k == key) {
            // The buffers changed (scratch grown for a larger evaluation batch): capture anew,
            // unless they keep changing.
            if g.captures >= MAX_CAPTURES {
                let why = format!("the step's buffers changed after {} captures", g.captures);
                let loud = self.be.captures();
                g.turn_off(why, loud);
                return false;
            }
            g.kept.clear();
        }
        true
    }

    /// Forward, loss and backward of `key`'s step, gradients into the buckets: `announce`
    /// declares each tensor ready as backward finishes it (plain steps, so that buckets go out
    /// during backward); a graphed step's are declared after it. `since`: the step's start
    /// (the timeline's "forward + loss" span).
    pub(super) fn segment(&mut self, key: &GraphKey, announce: bool, since: Instant) -> Result<Option<(f64, usize)>> {
        let (be, b) = (&self.be, key.rows);
        let rw = self.sample_weights.as_ref().map(|w| be.view(w, 0..b));
        let targets = match key.values {
            0 => Targets::Classes(
                &self.labels,
                self.class_weights.as_ref().map(|w| be.view(w, 0..self.model.n_outputs())),
                rw,
            ),
            n => Targets::Values(be.view(&self.values, 0..n), rw),
        };
        let mut params = super::shard::step_params(&self.params, &mut self.shard, self.step);
        self.model.forward_tp(be, &mut params, &self.xs[key.xi], b, &mut self.ws, &mut self.tp)?;
        // On a GPU the loss's sums are read after backward and the optimizer are queued, so
        // that the GPU does not idle while the host waits for them (`Backend::*_later`).
        let now = self.model.loss_later(be, targets, b, key.scale(), &mut self.ws)?;
        self.span("forward + loss", since);
        let mut sink = Sink {
            be,
            engine: &mut self.engine,
            timeline: &self.timeline,
            names: &self.names,
            step: self.step,
            mark: Instant::now(),
            accumulate: false,
            announce,
        };
        let mut params = super::shard::step_params(&self.params, &mut self.shard, self.step);
        self.model.backward_tp(be, &mut params, &self.xs[key.xi], b, &mut self.ws, &mut sink, &mut self.tp)?;
        Ok(now)
    }

    /// `key`'s step from its graph: replayed, or captured, checked and replayed; plain when
    /// the capture fails or its check does. Every tensor is then declared ready.
    pub(super) fn graphed(&mut self, key: &GraphKey, since: Instant) -> Result<Option<(f64, usize)>> {
        self.be.order_after_writes(&[&self.xs[key.xi]])?;
        let now = match self.graphs.kept.iter().position(|(k, _)| k == key) {
            Some(i) => {
                self.graphs.replays += 1;
                match self.be.replay(&self.graphs.kept[i].1)? {
                    Replayed::OnDevice => None,
                    Replayed::Rerun => {
                        let k = self.graphs.kept[i].0.clone();
                        self.segment(&k, false, since)?
                    }
                }
            }
            None => self.capture(key, since)?,
        };
        for t in 0..self.names.len() {
            self.engine.tensor_ready(t);
        }
        Ok(now)
    }

    /// Run `key`'s step plain, then capture it, and keep the graph if its replay writes the
    /// same gradients.
    fn capture(&mut self, key: &GraphKey, since: Instant) -> Result<Option<(f64, usize)>> {
        let now = self.segment(key, false, since)?;
        // The plain step may have grown the backend's scratch: the graph names the new one.
        let key = &GraphKey { scratch: self.be.scratch_generation(), ..key.clone() };
        let plain = self.slots_host()?;
        let on_device = self.be.on_device();
        if let Err(e) = self.be.capture_begin() {
            self.graphs.turn_off(format!("a capture could not start ({e})"), on_device);
            return Ok(now);
        }
        let captured = self.segment(key, false, since);
        let graph = self.be.capture_end();
        let graph = match (captured, graph) {
            (Ok(_), Ok(g)) => g,
            (Err(e), _) | (Ok(_), Err(e)) => {
                self.graphs.turn_off(format!("the step could not be captured ({e})"), on_device);
                // Nothing captured ran: the buckets hold the plain step's gradients.
                return Ok(now);
            }
        };
        self.zero_slots()?;
        if self.be.replay(&graph)? == Replayed::Rerun {
            self.segment(key, false, since)?;
        }
        let replayed = self.slots_host()?;
        if let Some(t) = (0..plain.len()).find(|&t| !same_bits(&plain[t], &replayed[t])) {
            let why = format!("the replayed step's gradient of {} differs from plain launches'", self.names[t]);
            self.graphs.turn_off(why, on_device);
            return self.segment(key, false, since);
        }
        self.graphs.captures += 1;
        if self.graphs.kept.is_empty() {
            log::info!(
                "CUDA graphs: step {}'s forward, loss and backward captured and checked against plain launches \
                 (bit-identical gradients); full batches replay it as one launch",
                self.step
            );
        }
        self.graphs.kept.push((key.clone(), graph));
        Ok(now)
    }

    /// Each tensor's gradient as backward left it in the buckets.
    fn slots_host(&mut self) -> Result<Vec<Vec<f32>>> {
        (0..self.names.len())
            .map(|t| {
                let (buf, r) = self.engine.slot(t);
                let mut h = vec![0.0; r.len()];
                self.be.download(buf, r, &mut h)?;
                Ok(h)
            })
            .collect()
    }

    fn zero_slots(&mut self) -> Result<()> {
        for t in 0..self.names.len() {
            let (buf, r) = self.engine.slot(t);
            self.be.fill_zero(self.be.view_mut(buf, r))?;
        }
        Ok(())
    }

    /// How the step's launches ran (`Graphs::summary`).
    pub fn graph_summary(&self) -> String {
        self.graphs.summary()
    }
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
