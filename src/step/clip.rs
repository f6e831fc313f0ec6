//! Gradient clipping by norm (`optimizer.global_clipnorm`, Keras' and TensorFlow's
//! clip_by_global_norm; `optimizer.clipnorm`, per tensor) and by value (`clipvalue`, after the
//! norms, in Keras' order): every bucket must be back from the all-reduce before any update,
//! since the norm is the reduced gradients' (the same on every replica); each tensor's sum of
//! squares is the backend's (float64), summed over the replica's tensor shards (a replicated
//! bias once) and, for the global norm, its pipeline stages (`TensorGroup::whole_sums_of_squares`),
//! the factors fold into the optimizer's gradient scale,
//! and the value limit, divided by that scale, clamps the reduced buckets (`Backend::clamp`).
//!
//! Must not: take a norm before the all-reduce (a rank's own gradients are not the step's).

use super::Stepper;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::metrics::GradNorm;
use crate::optim::TensorGrad;
use crate::parallel::engine::{Bucket, HostBuf};
use std::time::Instant;

/// The factor each tensor's gradient is scaled by, from the tensors' sums of squares `sq` (of
/// the reduced gradients, whole tensors) and the whole model's `total` (every stage's):
/// `global` (Keras' global_clipnorm, TensorFlow's clip_by_global_norm: limit / max(norm,
/// limit) for all) or `per_tensor` (clipnorm: the same per tensor). Returns (factors, the
/// global norm, whether any factor is below 1).
pub fn clip_factors(sq: &[f64], total: f64, global: Option<f64>, per_tensor: Option<f64>) -> (Vec<f32>, f64, bool) {
    let norm = total.sqrt();
    let f: Vec<f32> = match (global, per_tensor) {
        (Some(c), _) => vec![(c / norm.max(c)) as f32; sq.len()],
        (None, Some(c)) => sq.iter().map(|s| (c / s.sqrt().max(c)) as f32).collect(),
        (None, None) => vec![1.0; sq.len()],
    };
    let clipped = f.iter().any(|&x| x < 1.0);
    (f, norm, clipped)
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// `apply_buckets` when the update needs every bucket back first: gradient clipping (the
    /// norm needs all of them: each tensor's sum of squares, the factors, then the optimizer
    /// on each tensor with its factor folded into the gradient scale), and LARS or LAMB on
    /// sharded state or tensor shards (each tensor's norms summed over the data group's
    /// pieces and the tensor group's shards, `optim/own.rs`).
    pub(super) fn apply_clipped(&mut self) -> Result<()> {
        self.opt.begin_step();
        let scale = self.engine.grad_scale();
        let t = Instant::now();
        let mut back = Vec::new();
        while let Some(bucket) = self.engine.wait_next() {
            if let Some(e) = &bucket.failed {
                return Err(Error::Cuda(e.clone()));
            }
            back.push(bucket);
        }
        self.span("wait for every bucket", t);
        let t = Instant::now();
        let factors =
            if self.opt.cfg().clips() { self.clip(&mut back, scale)? } else { vec![1.0; self.opt.tensor_count()] };
        if self.opt.own().is_some() && self.opt.layerwise() {
            let factors = &factors;
            let grads: Vec<TensorGrad<'_, B::Buf>> = back
                .iter()
                .flat_map(|b| {
                    let offset = self.reduced_offset(b.index);
                    self.engine.plan().members[b.index].iter().map(move |&ti| TensorGrad {
                        tensor: ti,
                        buf: &b.reduced,
                        offset,
                        scale: scale * factors[ti],
                    })
                })
                .collect();
            let mut sums = self.opt.layerwise_sums(&self.be, &self.params, &grads)?;
            if let Some(sh) = &self.shard {
                sh.sharder.sum(&mut sums); // the data group's pieces
            }
            self.tp.whole_tensor_pair_sums(&mut sums); // the tensor group's shards
            self.opt.apply_layerwise(&self.be, &mut self.params, &grads, &sums)?;
            drop(grads);
            for bucket in back {
                self.engine.give_back(bucket);
            }
        } else {
            for bucket in back {
                let offset = self.reduced_offset(bucket.index);
                for &ti in &self.engine.plan().members[bucket.index] {
                    self.opt.apply(&self.be, &mut self.params, &bucket.reduced, offset, scale * factors[ti], &[ti])?;
                }
                self.engine.give_back(bucket);
            }
        }
        self.span("clip and optimizer", t);
        self.gather_params()
    }

    /// Clipping of the reduced buckets `back`: each tensor's factor (folded into the gradient
    /// scale by the caller), values clamped in place; the norm noted for the log.
    fn clip(&mut self, back: &mut [Bucket<B::Buf>], scale: f32) -> Result<Vec<f32>> {
        let be = &self.be;
        let ranges: Vec<std::ops::Range<usize>> = (0..self.opt.tensor_count()).map(|ti| self.opt.range(ti)).collect();
        let c = self.opt.cfg();
        let mut sq = vec![0.0f64; ranges.len()];
        // Reduce-scattered, each rank holds its piece of each bucket: the pieces' sums, then
        // summed over the data group.
        let parts = self.shard.as_ref().is_some_and(|s| s.reduce_scattered);
        for b in back.iter() {
            let offset = self.reduced_offset(b.index);
            for &ti in &self.engine.plan().members[b.index] {
                let r = self.reduced_part(b.index, &ranges[ti]);
                if !r.is_empty() {
                    sq[ti] = be.sum_squares(&b.reduced, r.start - offset..r.end - offset)? * f64::from(scale).powi(2);
                }
            }
        }
        if let (Some(sh), true) = (&self.shard, parts) {
            sh.sharder.sum(&mut sq);
        }
        // Whole tensors and the whole model's norm, over this replica's tensor shards and stages.
        let total = self.tp.whole_sums_of_squares(&mut sq);
        let (factors, norm, mut clipped) = clip_factors(&sq, total, c.global_clipnorm, c.clipnorm);
        if !norm.is_finite() {
            return Err(Error::Training(format!(
                "the gradient norm became {norm} at step {}; lower optimizer.lr, or check the data for extreme values",
                self.step
            )));
        }
        if let Some(v) = c.clipvalue {
            for b in back.iter_mut() {
                let offset = self.reduced_offset(b.index);
                let held: Vec<(std::ops::Range<usize>, f32)> = self.engine.plan().members[b.index]
                    .iter()
                    .map(|&ti| (self.reduced_part(b.index, &ranges[ti]), ti))
                    .filter(|(r, _)| !r.is_empty())
                    .map(|(r, ti)| {
                        (r.start - offset..r.end - offset, (v / (f64::from(scale) * f64::from(factors[ti]))) as f32)
                    })
                    .collect();
                clipped |= be.clamp(&mut b.reduced, &held)? > 0;
            }
            if let (Some(sh), true) = (&self.shard, parts) {
                // Whether any rank's piece was clamped.
                let mut any = [f64::from(u8::from(clipped))];
                sh.sharder.sum(&mut any);
                clipped = any[0] > 0.0;
            }
        }
        self.grad_norm.add(norm, clipped);
        Ok(factors)
    }

    /// The global gradient norm since the last call (None without clipping).
    pub fn take_grad_norm(&mut self) -> Option<GradNorm> {
        let g = std::mem::take(&mut self.grad_norm);
        (g.steps > 0).then_some(g)
    }
}

#[cfg(test)]
mod tests {
    use super::clip_factors;

    #[test]
    fn factors_follow_the_limit() {
        // Tensors of norms 3 and 4: global norm 5.
        let sq = [9.0, 16.0];
        let (f, n, c) = clip_factors(&sq, 25.0, Some(2.5), None);
        assert_eq!((n, c), (5.0, true));
        assert!(f.iter().all(|&x| (x - 0.5).abs() < 1e-7), "{f:?}");
        let (f, _, c) = clip_factors(&sq, 25.0, Some(10.0), None);
        assert_eq!((f, c), (vec![1.0, 1.0], false));
        // A pipeline stage: the norm is the whole model's (another stage holds 11 more).
        let (f, n, _) = clip_factors(&sq, 36.0, Some(3.0), None);
        assert!(n == 6.0 && f.iter().all(|&x| (x - 0.5).abs() < 1e-7), "{f:?}");
        // Per tensor: only the tensor over the limit shrinks, to the limit.
        let (f, _, c) = clip_factors(&sq, 25.0, None, Some(3.5));
        assert!((f[0] - 1.0).abs() < 1e-7 && (f[1] - 3.5 / 4.0).abs() < 1e-7 && c, "{f:?}");
        let (f, _, c) = clip_factors(&[0.0], 0.0, Some(1.0), None);
        assert_eq!((f, c), (vec![1.0], false));
    }
}
