//! The moving average of the parameters (`optimizer.ema`, Keras' `use_ema`): a buffer laid out
//! as `Stepper::params` is (the whole arena, or this rank's pieces under `shard =
//! "parameters"`), updated after every step once the parameters are whole again,
//! ema ← β·ema + (1 − β)·params (after the run's first step: the parameters), by the backend's SGD kernel (p = ema, g = params,
//! lr = 1 − β, grad_scale = −1, weight_decay = 1: ema − (1 − β)(ema − params)), so it runs
//! where the parameters live, on every backend. Evaluation and the weights files read it by
//! swapping it with the parameters (`swap_ema`) and back; checkpoints keep both.
//!
//! Must not: change the trained parameters, or leave the average swapped in across a step.

use super::Stepper;
use crate::device::{Backend, SgdHyper};
use crate::error::Result;
use crate::parallel::engine::HostBuf;

/// The average, its β, and whether it is swapped in (held in `Stepper::params`).
pub(super) struct Ema<B: Backend> {
    buf: B::Buf,
    beta: f32,
    swapped: bool,
}

/// `dst` ← `dst` − lr·(dst − src), elementwise, on `be`: with lr = 1 and `dst` zeros, a copy
/// of `src` (exact: 0 − (0 − x) = x); with lr = 1 − β, the moving average's step.
fn blend<B: Backend>(be: &B, dst: &mut B::Buf, src: &B::Buf, lr: f32) -> Result<()> {
    let n = be.len(src);
    let h = SgdHyper { lr, grad_scale: -1.0, weight_decay: 1.0, momentum: 0.0, nesterov: false };
    be.sgd(be.view_mut(dst, 0..n), be.view(src, 0..n), None, &h)
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// Keep a moving average of the parameters with factor `beta`, starting from `start` (as
    /// the parameters are kept: a checkpoint's average) or, empty, from the parameters now.
    pub fn set_ema(&mut self, beta: f64, start: &[f32]) -> Result<()> {
        let n = self.be.len(&self.params);
        let _a = crate::mem::allocating("the parameters' moving average (optimizer.ema)");
        let buf = if start.is_empty() {
            let mut b = self.be.zeros(n)?;
            blend(&self.be, &mut b, &self.params, 1.0)?;
            b
        } else {
            assert_eq!(start.len(), n, "a moving average of another layout");
            // (A rank without pieces keeps one float and reads none: `start` is then empty.)
            self.be.upload(start)?
        };
        self.ema = Some(Ema { buf, beta: beta as f32, swapped: false });
        Ok(())
    }

    /// After a step's update, the parameters whole again (or this rank's pieces current). The
    /// run's first step sets the average to the parameters (Keras' rule: β is 0 at the first
    /// iteration), so that the random starting weights do not linger in it.
    pub(super) fn update_ema(&mut self) -> Result<()> {
        let Some(e) = &mut self.ema else { return Ok(()) };
        assert!(!e.swapped, "a step with the moving average swapped in");
        if self.step == 1 {
            let n = self.be.len(&e.buf);
            self.be.fill_zero(self.be.view_mut(&mut e.buf, 0..n))?;
            return blend(&self.be, &mut e.buf, &self.params, 1.0);
        }
        blend(&self.be, &mut e.buf, &self.params, 1.0 - e.beta)
    }

    /// Swap the moving average with the parameters (every rank of the data group together,
    /// as the layer window's gathers are collective): what evaluation and the weights files
    /// read is then the average, until the second call swaps back. False (nothing done)
    /// without one.
    pub fn swap_ema(&mut self) -> bool {
        let Some(e) = &mut self.ema else { return false };
        std::mem::swap(&mut e.buf, &mut self.params);
        e.swapped = !e.swapped;
        self.invalidate_window();
        true
    }

    /// The moving average on the host at this rank's `ranges` of the arena, end to end (its
    /// pieces as kept under "parameters", `own_part_of`); the whole of it for `ranges` None.
    /// None without one.
    pub(super) fn ema_host(&self, ranges: Option<&[std::ops::Range<usize>]>) -> Result<Option<Vec<f32>>> {
        let Some(e) = &self.ema else { return Ok(None) };
        assert!(!e.swapped, "the moving average read while swapped in");
        let whole = [0..self.be.len(&e.buf)];
        Ok(Some(self.own_part_of(&e.buf, ranges.unwrap_or(&whole))?))
    }
}
