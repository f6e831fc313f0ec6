//! Optimizers over the flat parameter arena: SGD (momentum, Nesterov), Adam and AdamW,
//! with optional linear warm-up. Gradients arrive as the *sum* over ranks, each rank's
//! already divided by the step's global row count, so `grad_scale` is 1 in training (the
//! factor is kept for callers whose sums need scaling inside the same pass).

use crate::config::{OptimizerCfg, OptimizerKind};
use crate::model::TensorInfo;

pub struct Optimizer {
    cfg: OptimizerCfg,
    base_lr: f64,
    tensors: Vec<TensorInfo>,
    m: Vec<f32>,
    v: Vec<f32>,
    step: u64,
    lr_now: f32,
}

impl Optimizer {
    /// `world_size` scales the learning rate when `scale_lr_by_world_size` is set.
    pub fn new(cfg: &OptimizerCfg, tensors: Vec<TensorInfo>, n_params: usize, world_size: usize) -> Optimizer {
        let base_lr = if cfg.scale_lr_by_world_size { cfg.lr * world_size as f64 } else { cfg.lr };
        let (m_len, v_len) = Optimizer::state_lens(cfg, n_params);
        Optimizer {
            cfg: cfg.clone(),
            base_lr,
            tensors,
            m: vec![0.0; m_len],
            v: vec![0.0; v_len],
            step: 0,
            lr_now: 0.0,
        }
    }

    /// The lengths of the state (m, v) that `cfg` keeps for `n_params` parameters.
    pub fn state_lens(cfg: &OptimizerCfg, n_params: usize) -> (usize, usize) {
        let needs_m = cfg.kind != OptimizerKind::Sgd || cfg.momentum > 0.0;
        let needs_v = cfg.kind != OptimizerKind::Sgd;
        (if needs_m { n_params } else { 0 }, if needs_v { n_params } else { 0 })
    }

    /// The learning rate the next update will use.
    pub fn lr(&self) -> f64 {
        let w = self.cfg.warmup_steps as u64;
        if w > 0 && self.step < w {
            self.base_lr * (self.step + 1) as f64 / w as f64
        } else {
            self.base_lr
        }
    }

    /// The state a checkpoint needs: (first moments / momentum, second moments, steps taken).
    pub fn state(&self) -> (&[f32], &[f32], u64) {
        (&self.m, &self.v, self.step)
    }

    /// Restore what `state` returned.
    pub fn restore(&mut self, m: &[f32], v: &[f32], step: u64) -> Result<(), String> {
        if m.len() != self.m.len() || v.len() != self.v.len() {
            return Err(format!(
                "optimizer state sizes (m {}, v {}) do not fit this optimizer (m {}, v {}): was it written with another optimizer.kind or momentum?",
                m.len(), v.len(), self.m.len(), self.v.len()
            ));
        }
        self.m.copy_from_slice(m);
        self.v.copy_from_slice(v);
        self.step = step;
        Ok(())
    }

    /// One whole step over every tensor.
    #[cfg(test)]
    pub fn update(&mut self, params: &mut [f32], grad_sum: &[f32], grad_scale: f32) {
        self.begin_step();
        let all: Vec<usize> = (0..self.tensors.len()).collect();
        self.apply(params, grad_sum, grad_scale, &all);
    }

    /// Start a step: fixes this step's learning rate and bias corrections. Then `apply` each
    /// group of tensors as its reduced gradients arrive.
    pub fn begin_step(&mut self) {
        self.lr_now = self.lr() as f32;
        self.step += 1;
    }

    /// Update the tensors `which` (indices into the tensor list) from `grad_sum` × `grad_scale`.
    pub fn apply(&mut self, params: &mut [f32], grad_sum: &[f32], grad_scale: f32, which: &[usize]) {
        let lr = self.lr_now;
        let c = &self.cfg;
        for &ti in which {
            let t = &self.tensors[ti];
            let r = t.range.clone();
            let wd = if t.is_weight { c.weight_decay as f32 } else { 0.0 };
            let (p, g) = (&mut params[r.clone()], &grad_sum[r.clone()]);
            match c.kind {
                OptimizerKind::Sgd => {
                    sgd(p, g, self.m.get_mut(r).unwrap_or(&mut []), grad_scale, lr, wd, c.momentum as f32, c.nesterov)
                }
                OptimizerKind::Adam | OptimizerKind::Adamw => {
                    let decoupled = c.kind == OptimizerKind::Adamw;
                    let bc1 = 1.0 - c.beta1.powi(self.step as i32);
                    let bc2 = 1.0 - c.beta2.powi(self.step as i32);
                    let h = AdamHyper {
                        lr,
                        b1: c.beta1 as f32,
                        b2: c.beta2 as f32,
                        eps: c.eps as f32,
                        bc1: bc1 as f32,
                        bc2_sqrt: bc2.sqrt() as f32,
                        l2: if decoupled { 0.0 } else { wd },
                        decay: if decoupled { lr * wd } else { 0.0 },
                    };
                    adam(p, g, &mut self.m[r.clone()], &mut self.v[r], grad_scale, &h)
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn sgd(p: &mut [f32], g: &[f32], m: &mut [f32], scale: f32, lr: f32, wd: f32, mu: f32, nesterov: bool) {
    if m.is_empty() {
        for (p, &g) in p.iter_mut().zip(g) {
            *p -= lr * (g * scale + wd * *p);
        }
        return;
    }
    for ((p, &g), m) in p.iter_mut().zip(g).zip(m) {
        let g = g * scale + wd * *p;
        *m = mu * *m + g;
        *p -= lr * if nesterov { g + mu * *m } else { *m };
    }
}

struct AdamHyper {
    lr: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    bc1: f32,
    bc2_sqrt: f32,
    l2: f32,
    decay: f32,
}

fn adam(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], scale: f32, h: &AdamHyper) {
    let step = h.lr / h.bc1;
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
        let g = g * scale + h.l2 * *p;
        *m = h.b1 * *m + (1.0 - h.b1) * g;
        *v = h.b2 * *v + (1.0 - h.b2) * g * g;
        *p -= step * *m / (v.sqrt() / h.bc2_sqrt + h.eps) + h.decay * *p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Job;

    fn opt(sets: &[&str]) -> (Optimizer, Vec<f32>) {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let j = Job::parse("t", "[data]\ntrain='x'\n[model]\nlayers=[1,2]\n", &sets).unwrap();
        let t = vec![TensorInfo { name: "w".into(), range: 0..1, is_weight: true }];
        (Optimizer::new(&j.optimizer, t, 1, 2), vec![1.0])
    }

    #[test]
    fn momentum_sgd_matches_hand_computation() {
        let (mut o, mut p) = opt(&["optimizer.lr=0.1", "optimizer.momentum=0.9"]);
        o.update(&mut p, &[4.0], 0.5); // g=2, m=2, p=1-0.2
        assert!((p[0] - 0.8).abs() < 1e-6);
        o.update(&mut p, &[4.0], 0.5); // m=0.9*2+2=3.8, p=0.8-0.38
        assert!((p[0] - 0.42).abs() < 1e-6);
    }

    #[test]
    fn nesterov_and_warmup_and_scaling() {
        let (mut o, mut p) = opt(&["optimizer.lr=0.1", "optimizer.momentum=0.5", "optimizer.nesterov=true"]);
        o.update(&mut p, &[1.0], 1.0); // m=1, step=1+0.5
        assert!((p[0] - (1.0 - 0.15)).abs() < 1e-6);
        let (o, _) = opt(&["optimizer.lr=0.1", "optimizer.warmup_steps=4", "optimizer.scale_lr_by_world_size=true"]);
        assert!((o.lr() - 0.05).abs() < 1e-12); // 0.1 * 2 ranks * 1/4
    }

    #[test]
    fn adam_first_step_moves_by_lr() {
        let (mut o, mut p) = opt(&["optimizer.kind='adam'", "optimizer.lr=0.01"]);
        o.update(&mut p, &[3.0], 1.0);
        assert!((p[0] - 0.99).abs() < 1e-5, "{}", p[0]);
        let (mut o, mut p) = opt(&["optimizer.kind='adamw'", "optimizer.lr=0.01", "optimizer.weight_decay=0.1"]);
        o.update(&mut p, &[3.0], 1.0);
        assert!((p[0] - (0.99 - 0.001)).abs() < 1e-5, "{}", p[0]);
    }
}
