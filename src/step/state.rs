//! The stepper's state in host memory: the whole state a whole checkpoint writes
//! (`WholeState`), the parameters read back and replaced, the optimizer state and step set from
//! a checkpoint, and the wait for the device's queued work.
//!
//! Must not: write files (`train::save` and the checkpoint writer do) or run a step.

use super::Stepper;
use crate::device::Backend;
use crate::error::Result;

/// The whole model's state after a step, in host memory, for a whole checkpoint: parameters,
/// optimizer moments (m, v) and the parameters' moving average (each empty where none is
/// kept), and the global step.
pub struct WholeState {
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    pub ema: Vec<f32>,
    pub step: u64,
}

impl WholeState {
    /// No arrays (a checkpoint written in parts: its index), at `step`.
    pub fn empty(step: u64) -> WholeState {
        WholeState { params: Vec::new(), m: Vec::new(), v: Vec::new(), ema: Vec::new(), step }
    }
}

impl<B: Backend> Stepper<B>
where
    B::Buf: crate::parallel::engine::HostBuf,
{
    /// The whole model's parameters, optimizer state (m, v), moving average and step, for a
    /// whole checkpoint: only without sharded state and without tensor or pipeline
    /// parallelism, whose checkpoints are written in parts, each rank its own (`own_ranges`,
    /// `own_values`).
    pub fn whole_state(&self) -> Result<WholeState> {
        assert!(self.shard.is_none() && self.tp.is_whole(), "this state is checkpointed in parts");
        let (m, v, step) = self.opt.state(&self.be)?;
        let ema = self.ema_host(None)?.unwrap_or_default();
        Ok(WholeState { params: self.params_host()?, m, v, ema, step })
    }
    /// Collective over the tensor group: the whole model's parameters on its rank 0. With
    /// sharded parameters, collective over the data group first (every data rank calls it; the
    /// ranks other than the group's rank 0 get None).
    pub fn whole_params(&self) -> Result<Option<Vec<f32>>> {
        if self.params_sharded() {
            return Ok(match self.gather_whole(false)? {
                Some(p) => self.tp.gather(p),
                None => None,
            });
        }
        Ok(self.tp.gather(self.params_host()?))
    }
    /// Continue from a checkpoint: optimizer state and the global step.
    pub fn restore(&mut self, m: &[f32], v: &[f32], step: u64) -> std::result::Result<(), String> {
        self.opt.restore(&self.be, m, v, step)?;
        self.step = step;
        Ok(())
    }
    /// The parameters, copied to host memory (checkpoints, checks, final weights). With
    /// sharded parameters, collective over the data group (gathered layer by layer).
    pub fn params_host(&self) -> Result<Vec<f32>> {
        if self.params_sharded() {
            return Ok(self.gather_whole(true)?.expect("gathered everywhere"));
        }
        let mut p = vec![0.0; self.model.n_params];
        self.be.download(&self.params, 0..p.len(), &mut p)?;
        Ok(p)
    }
    /// Wait until the device has finished every step queued so far (one parameter is read
    /// back, after the last optimizer update): for timing, without `params_host`'s copy of
    /// the whole model (150 MB on a 37 M-parameter model: 130 ms on an H100 host).
    pub fn wait(&self) -> Result<()> {
        let mut one = [0.0f32];
        self.be.download(&self.params, 0..1, &mut one)?;
        Ok(())
    }
    /// Replace the parameters (fault injection).
    /// With sharded parameters, this rank keeps its pieces of `p`.
    pub fn set_params_host(&mut self, p: &[f32]) -> Result<()> {
        assert_eq!(p.len(), self.model.n_params, "parameters of another model");
        self.params = if self.params_sharded() { self.be.upload(&self.pieces_of(p))? } else { self.be.upload(p)? };
        self.gather_params()?; // a layer window holds stale values now
        self.graphs.clear();
        Ok(())
    }
    /// Add 1 to the first parameter this rank holds, as a bit flip would (the `diverge`
    /// fault; this rank only, so never a collective).
    pub fn nudge_one_parameter(&mut self) -> Result<()> {
        let mut p = vec![0.0; self.be.len(&self.params)];
        self.be.download(&self.params, 0..p.len(), &mut p)?;
        p[0] += 1.0;
        self.params = self.be.upload(&p)?;
        self.graphs.clear();
        Ok(())
    }
}
