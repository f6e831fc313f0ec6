//! The sharded update (`distribution.shard`): a rank updates only its pieces of the arena,
//! with the optimizer state of those pieces alone (m and v hold them end to end, each piece at
//! its place). SGD and Adam(W) are element-wise, so each bucket's pieces update as the bucket
//! arrives (`apply_own`). LARS and LAMB scale each weight tensor by norms of the whole tensor,
//! which no rank holds: each rank sums squares over its pieces (`layerwise_sums`), the step sums
//! those over the data group (one small all-reduce), and the pieces update with the whole
//! tensors' ratios (`apply_layerwise`): the norms of the unsharded update, in another
//! summation order.
//!
//! Must not: update a piece twice in a step, or run `layerwise_sums` twice in a step (LAMB's
//! first half moves m and v).

use super::{lamb_direction, lamb_ratio, lars_scaled, plain, Optimizer, Pieces};
use crate::config::OptimizerKind;
use crate::device::Backend;
use crate::error::Result;
use std::ops::Range;

/// One tensor's reduced gradient as this rank holds it: the buffer (its bucket's, whole or
/// this rank's piece of it), the arena position of the buffer's first element, and the factor
/// the gradient is scaled by (the engine's, times a clipping factor).
pub struct TensorGrad<'a, Buf> {
    pub tensor: usize,
    pub buf: &'a Buf,
    pub offset: usize,
    pub scale: f32,
}

/// Where a tensor overlaps a rank's pieces: (the arena range, the same elements' place in the
/// state).
type Overlap = (Range<usize>, Range<usize>);

impl<B: Backend> Optimizer<B> {
    /// Tensor `ti`'s overlaps with the pieces `own`, in the pieces' order.
    fn overlaps(&self, own: &Pieces, ti: usize) -> Vec<Overlap> {
        own.iter()
            .map(|(piece, at)| (crate::parallel::shard::intersect(&self.tensors[ti].range, piece), piece.start, *at))
            .filter(|(r, _, _)| !r.is_empty())
            .map(|(r, start, at)| (r.clone(), at + r.start - start..at + r.end - start))
            .collect()
    }

    /// Where the parameters of an overlap are in the buffer `apply` is given: the state's place
    /// when only the pieces are kept (`shard = "parameters"`), the arena's otherwise.
    fn param_range(&self, (r, s): &Overlap) -> Range<usize> {
        if self.pieces_kept {
            s.clone()
        } else {
            r.clone()
        }
    }

    /// `apply` on a rank that updates only the pieces `own`: each tensor's overlap with each
    /// piece, the state at the overlap's place. `grads` holds the arena range starting at
    /// `offset` (a whole bucket, or this rank's piece of it when reduce-scattered).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply_own(
        &mut self,
        be: &B,
        params: &mut B::Buf,
        grads: &B::Buf,
        offset: usize,
        grad_scale: f32,
        which: &[usize],
        own: &Pieces,
    ) -> Result<()> {
        let (lr, c) = (self.lr_now, &self.cfg);
        let overlaps: Vec<(usize, Overlap)> =
            which.iter().flat_map(|&ti| self.overlaps(own, ti).into_iter().map(move |o| (ti, o))).collect();
        for (ti, o) in overlaps {
            let t = &self.tensors[ti];
            let (r, s) = o.clone();
            assert!(r.start >= offset && r.end - offset <= be.len(grads), "gradients {offset}.. lack {r:?}");
            let g = be.view(grads, r.start - offset..r.end - offset);
            let wd = if t.is_weight { c.weight_decay as f32 } else { 0.0 };
            if c.kind == OptimizerKind::Rmsprop {
                let h = self.rmsprop_hyper(lr, grad_scale, wd);
                let pr = self.param_range(&o);
                let v = be.view_mut(self.v.as_mut().expect("rmsprop keeps v"), s.clone());
                let m = self.m.as_mut().map(|m| be.view_mut(m, s));
                be.rmsprop(params, pr, g, v, m, &mut self.rms_scratch, &h)?;
                continue;
            }
            let p = be.view_mut(params, self.param_range(&o));
            match c.kind {
                OptimizerKind::Sgd => {
                    let h = self.sgd_hyper(lr, grad_scale, wd);
                    be.sgd(p, g, self.m.as_mut().map(|m| be.view_mut(m, s)), &h)?
                }
                OptimizerKind::Adam | OptimizerKind::Adamw => {
                    let h = self.adam_hyper_decayed(lr, grad_scale, wd);
                    let (m, v) = (self.m.as_mut().expect("adam keeps m"), self.v.as_mut().expect("adam keeps v"));
                    be.adam(p, g, be.view_mut(m, s.clone()), be.view_mut(v, s), &h)?
                }
                OptimizerKind::Rmsprop => unreachable!("handled above"),
                OptimizerKind::Lars | OptimizerKind::Lamb => {
                    unreachable!("sharded LARS and LAMB update through layerwise_sums and apply_layerwise")
                }
            }
        }
        Ok(())
    }

    /// Whether this optimizer scales each tensor by whole-tensor norms (LARS, LAMB): sharded,
    /// its step is `layerwise_sums`, a sum over the data group, then `apply_layerwise`,
    /// instead of `apply`.
    pub fn layerwise(&self) -> bool {
        matches!(self.cfg.kind, OptimizerKind::Lars | OptimizerKind::Lamb)
    }

    /// Sharded LARS or LAMB, first half (after `begin_step`): for every tensor of the
    /// optimizer, this rank's parts of the two squared norms its ratio needs, [2 ti] and
    /// [2 ti + 1] (LARS: ‖w‖² and ‖g × scale‖²; LAMB: ‖w‖² and ‖r‖², with
    /// r = m̂ / (√v̂ + eps) + wd · w written to the scratch buffer and m, v updated); zeros for biases and for
    /// tensors this rank holds none of.
    pub fn layerwise_sums(&mut self, be: &B, params: &B::Buf, grads: &[TensorGrad<'_, B::Buf>]) -> Result<Vec<f64>> {
        let own = self.own.clone().expect("layerwise_sums on an unsharded optimizer");
        let mut sums = vec![0.0; 2 * self.tensors.len()];
        let h = self.adam_hyper(self.lr_now, 1.0);
        for tg in grads {
            let t = &self.tensors[tg.tensor];
            let (is_weight, wd) = (t.is_weight, self.cfg.weight_decay as f32);
            for o in self.overlaps(&own, tg.tensor) {
                let (r, s) = o.clone();
                let g = be.view(tg.buf, r.start - tg.offset..r.end - tg.offset);
                let pr = self.param_range(&o);
                if self.cfg.kind == OptimizerKind::Lamb {
                    let (m, v) = (self.m.as_mut().expect("lamb keeps m"), self.v.as_mut().expect("lamb keeps v"));
                    let scratch = self.scratch.as_mut().expect("lamb keeps a scratch buffer");
                    let (m, v) = (be.view_mut(m, s.clone()), be.view_mut(v, s.clone()));
                    let wd = if is_weight { wd } else { 0.0 };
                    let h = super::AdamHyper { grad_scale: tg.scale, ..h };
                    lamb_direction(be, scratch, s.clone(), be.view(params, pr.clone()), g, m, v, wd, &h)?;
                    if is_weight {
                        sums[2 * tg.tensor + 1] += be.sum_squares(self.scratch.as_ref().expect("kept"), s)?;
                    }
                } else if is_weight {
                    let g_sq = be.sum_squares(tg.buf, r.start - tg.offset..r.end - tg.offset)?;
                    sums[2 * tg.tensor + 1] += g_sq * f64::from(tg.scale).powi(2);
                }
                if is_weight {
                    sums[2 * tg.tensor] += be.sum_squares(params, pr)?;
                }
            }
        }
        Ok(sums)
    }

    /// Sharded LARS or LAMB, second half: `sums` (`layerwise_sums`' summed over the data
    /// group, so whole tensors' squared norms) give each tensor's ratio; this rank's pieces of
    /// the tensors in `grads` update.
    pub fn apply_layerwise(
        &mut self,
        be: &B,
        params: &mut B::Buf,
        grads: &[TensorGrad<'_, B::Buf>],
        sums: &[f64],
    ) -> Result<()> {
        let own = self.own.clone().expect("apply_layerwise on an unsharded optimizer");
        let (lr, kind) = (self.lr_now, self.cfg.kind);
        for tg in grads {
            let is_weight = self.tensors[tg.tensor].is_weight;
            let (w, x) = (sums[2 * tg.tensor].sqrt(), sums[2 * tg.tensor + 1].sqrt());
            for o in self.overlaps(&own, tg.tensor) {
                let (r, s) = o.clone();
                let p = be.view_mut(params, self.param_range(&o));
                if kind == OptimizerKind::Lamb {
                    let ratio = if is_weight { lamb_ratio(w, x) } else { 1.0 };
                    let d = be.view(self.scratch.as_ref().expect("lamb keeps a scratch buffer"), s);
                    be.sgd(p, d, None, &plain((f64::from(lr) * ratio) as f32, 1.0))?;
                } else {
                    let h = lars_scaled(&self.cfg, lr, tg.scale, w, x, is_weight);
                    let g = be.view(tg.buf, r.start - tg.offset..r.end - tg.offset);
                    be.sgd(p, g, self.m.as_mut().map(|m| be.view_mut(m, s)), &h)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Job;
    use crate::device::Cpu;
    use crate::model::TensorInfo;

    /// LARS and LAMB over a weight tensor of 3 and a bias of 2 (with momentum, decay and a
    /// gradient scale), unsharded against two "ranks" holding [0, 2) and [2, 5) (the weight cut
    /// in two), their sums added as the data group's all-reduce adds them: three steps, the
    /// same weights to float rounding; with the sums left unadded (each rank's own norms) they
    /// differ. Both with the whole arena given to `apply` and with the pieces only.
    #[test]
    fn sharded_lars_and_lamb_equal_the_whole_tensors_update() {
        let kinds: [&[&str]; 2] = [
            &[
                "optimizer.kind='lars'",
                "optimizer.lr=1.0",
                "optimizer.trust_coefficient=0.05",
                "optimizer.momentum=0.9",
            ],
            &["optimizer.kind='lamb'", "optimizer.lr=0.05", "optimizer.beta1=0.8", "optimizer.beta2=0.95"],
        ];
        let grads: [[f32; 5]; 3] =
            [[0.5, 0.25, -2.0, 0.3, -0.1], [-0.4, 1.0, 0.6, 0.2, 0.05], [0.1, -0.3, 0.2, -0.6, 0.4]];
        let start = vec![0.3f32, -1.2, 0.8, 0.1, -0.4];
        let tensors = vec![
            TensorInfo { name: "w".into(), range: 0..3, used: 3, is_weight: true },
            TensorInfo { name: "b".into(), range: 3..5, used: 2, is_weight: false },
        ];
        for sets in kinds {
            let sets: Vec<String> =
                sets.iter().chain(&["optimizer.weight_decay=0.01"]).map(|s| s.to_string()).collect();
            let j = Job::parse("t", "[data]\ntrain='x'\n[model]\nlayers=[1,2]\n", &sets).unwrap();
            let mut whole = Optimizer::new(&Cpu, &j.optimizer, tensors.clone(), 5, 1).unwrap();
            let mut w = start.clone();
            for g in &grads {
                let g2: Vec<f32> = g.iter().map(|x| x / 2.0).collect();
                whole.update(&Cpu, &mut w, &g2, 2.0).unwrap();
            }
            let pieces = [vec![(0..2, 0)], vec![(2..5, 0)]];
            for (kept, summed) in [(false, true), (true, true), (false, false)] {
                let mut ranks: Vec<_> = pieces
                    .iter()
                    .map(|own| {
                        let mut o =
                            Optimizer::with_own(&Cpu, &j.optimizer, tensors.clone(), 5, 1, Some(own.clone())).unwrap();
                        if kept {
                            o.set_pieces_kept();
                        }
                        let p: Vec<f32> = if kept { start[own[0].0.clone()].to_vec() } else { start.clone() };
                        (o, p)
                    })
                    .collect();
                for g in &grads {
                    let g2: Vec<f32> = g.iter().map(|x| x / 2.0).collect();
                    let all = [
                        TensorGrad { tensor: 0, buf: &g2, offset: 0, scale: 2.0 },
                        TensorGrad { tensor: 1, buf: &g2, offset: 0, scale: 2.0 },
                    ];
                    let mut sums = Vec::new();
                    for (o, p) in &mut ranks {
                        o.begin_step();
                        sums.push(o.layerwise_sums(&Cpu, p, &all).unwrap());
                    }
                    let total: Vec<f64> = (0..4).map(|i| sums[0][i] + sums[1][i]).collect();
                    for ((o, p), own_sums) in ranks.iter_mut().zip(&sums) {
                        o.apply_layerwise(&Cpu, p, &all, if summed { &total } else { own_sums }).unwrap();
                    }
                }
                let got: Vec<f32> = if kept {
                    ranks.iter().flat_map(|(_, p)| p.iter().copied()).collect()
                } else {
                    (0..5).map(|i| ranks[usize::from(i >= 2)].1[i]).collect()
                };
                let d = got.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                let moved = w.iter().zip(&start).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(moved > 0.05, "{sets:?}: the weights hardly moved ({moved})");
                if summed {
                    assert!(d < 1e-6, "{sets:?} kept {kept}: {got:?} vs {w:?}");
                } else {
                    assert!(d > 1e-3, "{sets:?}: each rank's own norms gave the whole tensor's update ({d})");
                }
            }
        }
    }

    /// RMSprop (with weight decay, without and with momentum) updated by two "ranks" holding [0, 2)
    /// and [2, 5) of a weight of 3 and a bias of 2, each with its own v and the shared
    /// scratch of its pieces: the same bits as the whole update, three steps, with the whole
    /// arena given to `apply` and with the pieces only.
    #[test]
    fn sharded_rmsprop_gives_the_whole_update() {
        let sets: Vec<String> =
            ["optimizer.kind='rmsprop'", "optimizer.lr=0.01", "optimizer.rho=0.7", "optimizer.weight_decay=0.05"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        for mu in ["0", "0.9"] {
            let sets: Vec<String> = sets.iter().cloned().chain([format!("optimizer.momentum={mu}")]).collect();
            let j = Job::parse("t", "[data]\ntrain='x'\n[model]\nlayers=[1,2]\n", &sets).unwrap();
            let tensors = vec![
                TensorInfo { name: "w".into(), range: 0..3, used: 3, is_weight: true },
                TensorInfo { name: "b".into(), range: 3..5, used: 2, is_weight: false },
            ];
            let grads: [[f32; 5]; 3] =
                [[0.5, 0.25, -2.0, 0.3, -0.1], [-0.4, 1.0, 0.6, 0.2, 0.05], [0.1, -0.3, 0.2, -0.6, 0.4]];
            let start = vec![0.3f32, -1.2, 0.8, 0.1, -0.4];
            let mut whole = Optimizer::new(&Cpu, &j.optimizer, tensors.clone(), 5, 1).unwrap();
            let mut w = start.clone();
            for g in &grads {
                whole.update(&Cpu, &mut w, &g.to_vec(), 1.0).unwrap();
            }
            assert!(w.iter().zip(&start).any(|(a, b)| (a - b).abs() > 0.01), "{w:?}");
            for kept in [false, true] {
                let mut got = vec![0.0f32; 5];
                for own in [vec![(0..2, 0)], vec![(2..5, 0)]] {
                    let mut o =
                        Optimizer::with_own(&Cpu, &j.optimizer, tensors.clone(), 5, 1, Some(own.clone())).unwrap();
                    if kept {
                        o.set_pieces_kept();
                    }
                    let r = own[0].0.clone();
                    let mut p: Vec<f32> = if kept { start[r.clone()].to_vec() } else { start.clone() };
                    for g in &grads {
                        o.begin_step();
                        o.apply(&Cpu, &mut p, &g.to_vec(), 0, 1.0, &[0, 1]).unwrap();
                    }
                    let (m, v, _) = o.state(&Cpu).unwrap();
                    let m_len = if mu == "0" { 0 } else { r.len() };
                    assert!(m.len() == m_len && v.len() == r.len(), "{own:?}: m {} v {}", m.len(), v.len());
                    for (i, x) in r.clone().enumerate() {
                        got[x] = if kept { p[i] } else { p[x] };
                    }
                }
                assert_eq!(got, w, "momentum {mu}, kept {kept}");
            }
        }
    }
}
