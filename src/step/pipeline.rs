//! One training step as micro-batches: this stage's 1F1B schedule (`model::pipeline`) with
//! activations and their gradients passed to the neighbouring stages through the
//! `PipeLink`. Without pipeline parallelism (one stage) the same code accumulates the
//! gradients of several micro-batches.
//!
//! Every rank of a replica reads the same batch (its data shard), so every stage splits it
//! into the same micro-batches (`part`: the first rows % M micro-batches get one row more;
//! an empty one is skipped by every stage alike). The gradient buckets are zeroed at the
//! step's start and each micro-batch's backward adds to them; the engine hears that a tensor
//! is ready only during the last non-empty micro-batch's backward, which is the stage's last
//! operation, so communication overlaps that backward as it does without micro-batches.
//! The loss is the last stage's: it is broadcast over the pipeline at the end of the step,
//! so every rank of a replica returns the same value.
//!
//! Where the link goes device to device (`PipeLink::on_device`: NCCL, or its emulation), the
//! workspaces' buffers are the messages: activations sent from the slot's output, received
//! into its input; gradients received into the slot's output gradient, sent from its input
//! gradient. A sent buffer is written again only by the same micro-batch's backward (tanh's
//! dropout rescales the activations), which starts once the next stage's gradient has come,
//! sent after that stage received our activations whole; or in the next step, after
//! `finish_sends`.
//!
//! Must not: announce a gradient before the step's last micro-batch backward.

use super::{Sink, Stepper, Sums};
use crate::data::loader::Batch;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::model::pipeline::{one_f_one_b, Op};
use crate::model::{part, Targets, Workspace};
use crate::parallel::engine::HostBuf;
use crate::parallel::pipe::{Dir, PipeLink};
use std::time::Instant;

/// Send `buf[..n]` device to device when the link does: true; false when it goes through
/// host memory.
fn send_device<B: Backend>(be: &B, p: &mut PipeLink, buf: &B::Buf, n: usize, dir: Dir) -> Result<bool> {
    if !p.on_device() {
        return Ok(false);
    }
    let ptr = be.idle_address(buf, n)?.ok_or_else(unaddressable)?;
    // SAFETY: n floats of a workspace buffer, complete, unwritten until the step's
    // `finish_sends` (see the module's doc).
    unsafe { p.send_device(ptr, n, dir) };
    Ok(true)
}

/// Receive into `buf[..n]` device to device when the link does: true.
fn recv_device<B: Backend>(be: &B, p: &mut PipeLink, buf: &mut B::Buf, n: usize, dir: Dir) -> Result<bool> {
    if !p.on_device() {
        return Ok(false);
    }
    let ptr = be.idle_address_mut(buf, n)?.ok_or_else(unaddressable)?;
    // SAFETY: room for n floats, idle (the backend waited for its queued work), and nothing
    // reads or writes them until this returns.
    unsafe { p.recv_device(ptr, n, dir) };
    Ok(true)
}

fn unaddressable() -> Error {
    Error::Training("pipeline messages chose the device path on a backend whose memory has no address".into())
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// `run` for a batch of at least one row, as `self.micro` micro-batches.
    pub(super) fn run_pipelined(&mut self, batch: &Batch, global_rows: usize) -> Result<Sums> {
        let m_n = self.micro;
        let rows: Vec<std::ops::Range<usize>> = (0..m_n).map(|m| part(batch.rows, m, m_n)).collect();
        let last = rows.iter().rposition(|r| !r.is_empty()).expect("a batch of at least one row");
        let inp = self.model.n_inputs();
        let cap = batch.rows.div_ceil(m_n).max(self.batch.div_ceil(m_n));
        let (stage, stages) = self.tp.pipe.as_ref().map_or((0, 1), |p| (p.stage, p.stages));
        // One stage runs each micro-batch's forward and backward back to back: one workspace
        // serves them all, so activations do not grow with the micro-batch count (gradient
        // accumulation). Pipeline stages keep micro-batches in flight: one each.
        let slots = if stages == 1 { 1 } else { m_n };
        let slot = |m: usize| if stages == 1 { 0 } else { m };
        while self.mws.len() < slots {
            let mut ws = Workspace::new(&self.be, &self.model, cap)?;
            ws.enable_dropout(&self.be, &self.dropout.0, self.dropout.1)?;
            self.mws.push(ws);
            self.mx.push(self.be.zeros(cap * inp)?);
        }
        let head = self.model.head;
        self.tp.step = self.step;
        if let Some(p) = &mut self.tp.pipe {
            p.step = self.step;
        }

        self.engine.begin_step(self.step);
        for t in 0..self.names.len() {
            let (buf, range) = self.engine.slot(t);
            self.be.fill_zero(self.be.view_mut(buf, range))?;
        }
        let mut sums = vec![0.0; self.sums_len()];
        for op in one_f_one_b(stage, stages, m_n) {
            match op {
                Op::Forward(m) if !rows[m].is_empty() => {
                    let t = Instant::now();
                    let s = self.forward_micro(batch, m, slot(m), &rows[m], global_rows, head)?;
                    sums.iter_mut().zip(s).for_each(|(a, b)| *a += b);
                    self.span(format!("forward micro-batch {m}"), t);
                }
                Op::Backward(m) if !rows[m].is_empty() => {
                    let t = Instant::now();
                    self.backward_micro(slot(m), rows[m].len(), head, m == last)?;
                    self.span(format!("backward micro-batch {m}"), t);
                }
                // An empty micro-batch still joins the layers' gathers (sharded parameters).
                Op::Forward(_) => self.fetch_without_rows(true, false)?,
                Op::Backward(_) => self.fetch_without_rows(false, true)?,
            }
        }
        if let Some(p) = &mut self.tp.pipe {
            p.finish_sends();
        }
        self.engine.flush();
        self.apply_buckets()?;
        if let Some(p) = &self.tp.pipe {
            p.broadcast_from_last(&mut sums);
        }
        Ok(sums)
    }

    /// `fetch_without_rows` for a whole step without rows: its micro-batches' forward and
    /// backward halves in the schedule's order (one of each without micro-batches).
    pub(super) fn fetch_without_rows_all(&mut self) -> Result<()> {
        if self.tp.pipe.is_none() && self.micro == 1 {
            return self.fetch_without_rows(true, true);
        }
        let (stage, stages) = self.tp.pipe.as_ref().map_or((0, 1), |p| (p.stage, p.stages));
        for op in one_f_one_b(stage, stages, self.micro) {
            match op {
                Op::Forward(_) => self.fetch_without_rows(true, false)?,
                Op::Backward(_) => self.fetch_without_rows(false, true)?,
            }
        }
        Ok(())
    }

    /// Backward of the micro-batch in workspace `w` (`r` rows): its output gradient from the
    /// next stage (before the last stage), gradients accumulated into the buckets (announced to
    /// the engine when `announce`: the step's last micro-batch), its input gradient sent back.
    fn backward_micro(&mut self, w: usize, r: usize, head: bool, announce: bool) -> Result<()> {
        let (inp, outp) = (self.model.n_inputs(), self.model.n_outputs());
        if !head {
            let p = self.tp.pipe.as_mut().expect("a stage before the last");
            let dst = self.mws[w].output_grad_mut(&self.be, &self.model, r)?;
            if !recv_device(&self.be, p, dst, r * outp, Dir::Backward)? {
                self.h_out.resize(r * outp, 0.0);
                p.recv_backward(&mut self.h_out);
                self.mws[w].output_grad(&self.be, &self.model, r, &self.h_out)?;
            }
        }
        let mut sink = Sink {
            be: &self.be,
            engine: &mut self.engine,
            timeline: &self.timeline,
            names: &self.names,
            step: self.step,
            mark: Instant::now(),
            accumulate: true,
            announce,
        };
        let mut params = super::shard::step_params(&self.params, &mut self.shard, self.step);
        self.model.backward_tp(&self.be, &mut params, &self.mx[w], r, &mut self.mws[w], &mut sink, &mut self.tp)?;
        if let Some(p) = self.tp.pipe.as_mut().filter(|p| !p.is_first()) {
            if !send_device(&self.be, p, self.mws[w].input_grad_buf(), r * inp, Dir::Backward)? {
                self.h_in.resize(r * inp, 0.0);
                self.mws[w].input_grad(&self.be, &self.model, r, &mut self.h_in)?;
                p.send_backward(&self.h_in);
            }
        }
        Ok(())
    }

    /// Forward of micro-batch `m` (rows `r` of the batch) in workspace `w`: its input from the
    /// batch (first stage) or the previous stage, then the loss (last stage) or the activations
    /// sent on. Returns the micro-batch's loss sum (0 on a stage before the last).
    fn forward_micro(
        &mut self,
        batch: &Batch,
        m: usize,
        w: usize,
        r: &std::ops::Range<usize>,
        global_rows: usize,
        head: bool,
    ) -> Result<Sums> {
        let (be, n) = (&self.be, r.len());
        let (inp, outp) = (self.model.n_inputs(), self.model.n_outputs());
        match self.tp.pipe.as_mut().filter(|p| !p.is_first()) {
            Some(p) => {
                if !recv_device(be, p, &mut self.mx[w], n * inp, Dir::Forward)? {
                    self.h_in.resize(n * inp, 0.0);
                    p.recv_forward(&mut self.h_in);
                    be.upload_into(&self.h_in, &mut self.mx[w])?;
                }
            }
            None => be.upload_into(&batch.x[r.start * inp..r.end * inp], &mut self.mx[w])?,
        }
        self.mws[w].set_rows(be, &batch.ids[r.clone()], self.step)?;
        let mut params = super::shard::step_params(&self.params, &mut self.shard, self.step);
        self.model.forward_tp(be, &mut params, &self.mx[w], n, &mut self.mws[w], &mut self.tp)?;
        if !head {
            let p = self.tp.pipe.as_mut().expect("a stage before the last");
            if !send_device(be, p, self.mws[w].output(&self.model), n * outp, Dir::Forward)? {
                self.h_out.resize(n * outp, 0.0);
                self.mws[w].output_host(be, &self.model, n, &mut self.h_out)?;
                p.send_forward(&self.h_out);
            }
            return Ok(vec![0.0; self.sums_len()]);
        }
        self.upload_sample_weights(batch, r.clone())?;
        let be = &self.be;
        let rw = self.sample_weights.as_ref().map(|w| be.view(w, 0..n));
        let targets = if batch.classes.is_empty() {
            be.upload_into(&batch.values[r.start * outp..r.end * outp], &mut self.values)?;
            Targets::Values(be.view(&self.values, 0..n * outp), rw)
        } else {
            be.upload_labels(&batch.classes[r.clone()], &mut self.labels)?;
            Targets::Classes(&self.labels, self.class_weights.as_ref().map(|w| be.view(w, 0..outp)), rw)
        };
        let (loss, correct) = self.model.loss(be, targets, n, 1.0 / global_rows as f32, &mut self.mws[w], true)?;
        let (classes, values) = if batch.classes.is_empty() {
            (&[][..], &batch.values[r.start * outp..r.end * outp])
        } else {
            (&batch.classes[r.clone()], &[][..])
        };
        let sums = self.extra.sums(be, &self.model, &self.mws[w], n, classes, values, loss, correct)?;
        if !loss.is_finite() {
            return Err(Error::Training(format!(
                "the loss became {loss} at step {} (micro-batch {m}); lower optimizer.lr, or check the data for extreme \
                 values",
                self.step
            )));
        }
        Ok(sums)
    }
}
