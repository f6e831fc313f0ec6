//! Optimizers over the flat parameter arena: SGD (momentum, Nesterov), Adam, AdamW, LARS and
//! LAMB (layer-wise trust ratios over whole tensors; LAMB composed of the Adam and SGD kernels),
//! RMSprop (`Backend::rmsprop`: one pass on the CPU, the Adam and SGD kernels composed on a
//! GPU, with the scratch this file keeps for them),
//! with the learning rate of `schedule.rs` (warm-up, then `optimizer.schedule`). This file
//! holds the state and the per-tensor hyperparameters; the element-wise update runs on the backend (`Backend::sgd`/`adam`), so
//! it runs where the parameters live. Gradients arrive as the sum over ranks, each rank's
//! already divided by the step's global row count, so `grad_scale` is 1 in training (the
//! factor is kept for callers whose sums need scaling inside the same pass).
//!
//! Must not: touch gradients before their bucket has come back reduced.

use crate::config::{OptimizerCfg, OptimizerKind};
use crate::device::{AdamHyper, Backend, RmspropHyper, Segment, SgdHyper};
use crate::error::Result;
use crate::model::TensorInfo;

mod own;
pub mod schedule;
pub use own::TensorGrad;
pub use schedule::{Best, LrSchedule, Plateau};

/// The lengths of the state (m, v) that `cfg` keeps for `n_params` parameters.
pub fn state_lens(cfg: &OptimizerCfg, n_params: usize) -> (usize, usize) {
    let sgd_like = matches!(cfg.kind, OptimizerKind::Sgd | OptimizerKind::Lars);
    // RMSprop keeps the squared gradients' average, and with momentum PyTorch's momentum buffer
    // (Adam's kernel's first moment is a scratch, `scratch_len`).
    let needs_m = if cfg.kind == OptimizerKind::Rmsprop { cfg.momentum > 0.0 } else { !sgd_like || cfg.momentum > 0.0 };
    let needs_v = !sgd_like;
    (if needs_m { n_params } else { 0 }, if needs_v { n_params } else { 0 })
}

/// The scratch `cfg` keeps beside its state, in elements, for tensors `lens` (the model's, or
/// with `own` pieces of `own_len` elements in all): LAMB's r (the largest tensor; sharded, every
/// piece at once, as `layerwise_sums` computes them together); RMSprop's `rms_scratches`
/// buffers (rewritten each tensor, so each the largest tensor's, or piece's, length) on a
/// backend that composes it (`Backend::fuses_rmsprop` false: a GPU; the CPU keeps none).
pub fn scratch_len(cfg: &OptimizerCfg, lens: impl Iterator<Item = usize>, own_len: Option<usize>) -> usize {
    let largest = lens.max().unwrap_or(0);
    match (cfg.kind, own_len) {
        (OptimizerKind::Lamb, Some(n)) => n,
        (OptimizerKind::Lamb, None) => largest,
        (OptimizerKind::Rmsprop, Some(n)) => largest.min(n) * rms_scratches(cfg),
        (OptimizerKind::Rmsprop, None) => largest * rms_scratches(cfg),
        _ => 0,
    }
}

/// RMSprop's scratch buffers: the Adam kernel's first moment; with momentum the step
/// g / (√v + eps) that the momentum takes, and with weight decay as well the decayed gradient
/// g + wd·w it is computed from (`backend::rmsprop_composed`).
fn rms_scratches(cfg: &OptimizerCfg) -> usize {
    crate::device::backend::rmsprop_scratch_count(cfg.momentum > 0.0, cfg.weight_decay > 0.0)
}

/// Pieces of the arena, each with its place in the state that holds them end to end.
pub type Pieces = Vec<(std::ops::Range<usize>, usize)>;

pub struct Optimizer<B: Backend> {
    cfg: OptimizerCfg,
    sched: LrSchedule,
    tensors: Vec<TensorInfo>,
    /// Momentum / Adam's first moments (None when the optimizer keeps none).
    m: Option<B::Buf>,
    /// Adam's second moments.
    v: Option<B::Buf>,
    /// LAMB's per-tensor update direction r before its ratio is known (the largest tensor's
    /// length; sharded, the length of this rank's pieces, all of them at once).
    scratch: Option<B::Buf>,
    /// RMSprop's scratch buffers (`rms_scratches`), each the largest tensor's (or piece's)
    /// length, on a backend that composes its update (none where it `fuses_rmsprop`).
    rms_scratch: Vec<B::Buf>,
    n_params: usize,
    step: u64,
    lr_now: f32,
    /// A parameter-server worker's "optimizer": `apply` copies the pulled parameters in
    /// (the servers apply the real optimizer).
    assign: bool,
    /// `apply` does nothing: a parameter-server worker whose parameters arrive after the
    /// step (`optimizer.global_clipnorm`).
    idle: bool,
    /// Sharded state (`distribution.shard`): the pieces of the arena this rank updates, each
    /// with where it starts in m and v, which hold those pieces only, end to end.
    own: Option<Pieces>,
    /// With `own`: the parameters given to `apply` are this rank's pieces too, end to end at
    /// the state's places (`shard = "parameters"`), not the whole arena.
    pieces_kept: bool,
}

impl<B: Backend> Optimizer<B> {
    /// `world_size` scales the learning rate when `scale_lr_by_world_size` is set.
    pub fn new(
        be: &B,
        cfg: &OptimizerCfg,
        tensors: Vec<TensorInfo>,
        n_params: usize,
        world_size: usize,
    ) -> Result<Self> {
        Optimizer::with_own(be, cfg, tensors, n_params, world_size, None)
    }

    /// `new` for a rank that updates only the arena's pieces `own` (sharded state,
    /// `distribution.shard`), keeping the state of those alone: m and v hold them end to end,
    /// each at its given place (`own.rs`).
    pub fn with_own(
        be: &B,
        cfg: &OptimizerCfg,
        tensors: Vec<TensorInfo>,
        n_params: usize,
        world_size: usize,
        own: Option<Pieces>,
    ) -> Result<Self> {
        if let Some(o) = &own {
            assert!(o.iter().all(|(p, _)| p.end <= n_params), "a piece beyond the arena");
        }
        let base_lr = if cfg.scale_lr_by_world_size { cfg.lr * world_size as f64 } else { cfg.lr };
        let (m_len, v_len) = state_lens(cfg, own.as_ref().map_or(n_params, pieces_len));
        let _a = crate::mem::allocating("the optimizer state (momentum or Adam's moments)");
        Ok(Optimizer {
            cfg: cfg.clone(),
            sched: LrSchedule::new(cfg, base_lr),
            m: if m_len > 0 { Some(be.zeros(m_len)?) } else { None },
            v: if v_len > 0 { Some(be.zeros(v_len)?) } else { None },
            scratch: match cfg.kind {
                OptimizerKind::Lamb => Some(be.zeros(scratch_len(
                    cfg,
                    tensors.iter().map(|t| t.range.len()),
                    own.as_ref().map(pieces_len),
                ))?),
                _ => None,
            },
            rms_scratch: match cfg.kind {
                OptimizerKind::Rmsprop if !be.fuses_rmsprop() => {
                    let k = rms_scratches(cfg);
                    let n = scratch_len(cfg, tensors.iter().map(|t| t.range.len()), own.as_ref().map(pieces_len)) / k;
                    (0..k).map(|_| be.zeros(n)).collect::<Result<Vec<_>>>()?
                }
                _ => Vec::new(),
            },
            tensors,
            n_params,
            step: 0,
            lr_now: 0.0,
            assign: false,
            idle: false,
            own,
            pieces_kept: false,
        })
    }

    /// The parameters `apply` updates are this rank's pieces only, where the state keeps
    /// them (`shard = "parameters"`). A sharded optimizer only.
    pub fn set_pieces_kept(&mut self) {
        assert!(self.own.is_some(), "pieces kept without pieces");
        self.pieces_kept = true;
    }

    /// Whether `apply` takes this rank's pieces of the parameters (`set_pieces_kept`).
    pub fn pieces_kept(&self) -> bool {
        self.pieces_kept
    }

    /// The pieces of the arena this optimizer updates (None: all of it).
    pub fn own(&self) -> Option<&Pieces> {
        self.own.as_ref()
    }

    /// For a parameter-server worker: keeps no state; `apply` sets the parameters to the
    /// "gradients", which are the parameters pulled from the servers.
    pub fn assign(be: &B, cfg: &OptimizerCfg, tensors: Vec<TensorInfo>, n_params: usize) -> Result<Self> {
        // The servers clip; what the worker assigns is parameters, never clipped.
        let cfg = OptimizerCfg {
            kind: OptimizerKind::Sgd,
            momentum: 0.0,
            nesterov: false,
            global_clipnorm: None,
            clipnorm: None,
            clipvalue: None,
            ..cfg.clone()
        };
        Ok(Optimizer { assign: true, ..Optimizer::new(be, &cfg, tensors, n_params, 1)? })
    }

    /// `apply` from now on leaves the parameters alone (see `idle`).
    pub fn idle(mut self) -> Self {
        self.idle = true;
        self
    }

    /// The job's `[optimizer]` table.
    pub fn cfg(&self) -> &OptimizerCfg {
        &self.cfg
    }

    /// Tensor `ti`'s range of the parameter arena.
    pub fn range(&self, ti: usize) -> std::ops::Range<usize> {
        self.tensors[ti].range.clone()
    }

    /// How many tensors this optimizer updates.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// The learning rate the next update will use.
    pub fn lr(&self) -> f64 {
        self.sched.at(self.step)
    }

    /// The learning-rate schedule: the run's length (cosine), updates per step (an
    /// asynchronous server), plateau's epoch-end input and its state for checkpoints.
    pub fn schedule(&self) -> &LrSchedule {
        &self.sched
    }
    pub fn schedule_mut(&mut self) -> &mut LrSchedule {
        &mut self.sched
    }

    /// The state a checkpoint needs, in host memory: (first moments / momentum, second
    /// moments, steps taken); empty vectors where the optimizer keeps none. Sharded: this
    /// rank's part (`with_own`).
    /// One of `state`'s moments, v (or m), alone: None where the optimizer keeps none.
    pub fn moment(&self, be: &B, v: bool) -> Result<Option<Vec<f32>>> {
        let n = self.own.as_ref().map_or(self.n_params, pieces_len);
        let Some(b) = (if v { &self.v } else { &self.m }) else { return Ok(None) };
        let mut out = crate::mem::zeros(n)?;
        be.download(b, 0..n, &mut out)?;
        Ok(Some(out))
    }

    pub fn state(&self, be: &B) -> Result<(Vec<f32>, Vec<f32>, u64)> {
        let n = self.own.as_ref().map_or(self.n_params, pieces_len);
        let host = |b: &Option<B::Buf>| -> Result<Vec<f32>> {
            let Some(b) = b else { return Ok(Vec::new()) };
            let mut v = vec![0.0; n];
            be.download(b, 0..n, &mut v)?;
            Ok(v)
        };
        Ok((host(&self.m)?, host(&self.v)?, self.step))
    }

    /// Restore the whole arena's state (what `state` returned unsharded); sharded, this rank
    /// keeps its part of it, or takes `m` and `v` as they are when they are that part's length
    /// already (read from a checkpoint in parts). Empty `m` and `v`: a fresh start, the zeros
    /// `new` made stay.
    pub fn restore(&mut self, be: &B, m: &[f32], v: &[f32], step: u64) -> std::result::Result<(), String> {
        if m.is_empty() && v.is_empty() {
            self.step = step;
            return Ok(());
        }
        if let Some(o) = &self.own {
            let (m_len, v_len) = state_lens(&self.cfg, pieces_len(o));
            if (m.len(), v.len()) == (m_len, v_len) && pieces_len(o) < self.n_params {
                return self.restore_own(be, m, v, step);
            }
        }
        let (m_len, v_len) = state_lens(&self.cfg, self.n_params);
        if m.len() != m_len || v.len() != v_len {
            return Err(format!(
                "optimizer state sizes (m {}, v {}) do not fit this optimizer (m {m_len}, v {v_len}): was it written with another optimizer.kind or momentum?",
                m.len(), v.len()
            ));
        }
        let part = |h: &'_ [f32]| -> Vec<f32> {
            match &self.own {
                Some(o) if !h.is_empty() => o.iter().flat_map(|(p, _)| h[p.clone()].iter().copied()).collect(),
                _ => h.to_vec(),
            }
        };
        let (m, v) = (&part(m)[..], &part(v)[..]);
        self.restore_own(be, m, v, step)
    }

    /// This rank's part of m and v (its buffers' lengths), into the buffers `new` made: no
    /// second copy.
    fn restore_own(&mut self, be: &B, m: &[f32], v: &[f32], step: u64) -> std::result::Result<(), String> {
        for (buf, h) in [(&mut self.m, m), (&mut self.v, v)] {
            if let Some(b) = buf {
                be.upload_into(h, b).map_err(|e| e.to_string())?;
            }
        }
        self.step = step;
        Ok(())
    }

    /// Start a step: fixes this step's learning rate and bias corrections. Then `apply` each
    /// group of tensors as its reduced gradients arrive.
    pub fn begin_step(&mut self) {
        self.lr_now = self.lr() as f32;
        self.step += 1;
    }

    /// Update the tensors `which` (indices into the tensor list) from `grads` × `grad_scale`,
    /// where `grads` holds the arena range starting at element `offset` (a reduced bucket).
    pub fn apply(
        &mut self,
        be: &B,
        params: &mut B::Buf,
        grads: &B::Buf,
        offset: usize,
        grad_scale: f32,
        which: &[usize],
    ) -> Result<()> {
        if self.idle {
            return Ok(());
        }
        if let Some(own) = self.own.take() {
            let r = self.apply_own(be, params, grads, offset, grad_scale, which, &own);
            self.own = Some(own);
            return r;
        }
        let lr = self.lr_now;
        let c = &self.cfg;
        // SGD and Adam(W) over several tensors (a bucket's): one fused update (one launch on a
        // GPU), the same bits as tensor by tensor.
        if !self.assign
            && which.len() > 1
            && matches!(c.kind, OptimizerKind::Sgd | OptimizerKind::Adam | OptimizerKind::Adamw)
        {
            let segs: Vec<Segment> = which
                .iter()
                .map(|&ti| Segment { range: self.tensors[ti].range.clone(), decayed: self.tensors[ti].is_weight })
                .collect();
            let wd = c.weight_decay as f32;
            if c.kind == OptimizerKind::Sgd {
                let h = self.sgd_hyper(lr, grad_scale, wd);
                return be.sgd_segments(params, grads, offset, self.m.as_mut(), &segs, &h);
            }
            let h = self.adam_hyper_decayed(lr, grad_scale, wd);
            let (m, v) = (self.m.as_mut().expect("adam keeps m"), self.v.as_mut().expect("adam keeps v"));
            return be.adam_segments(params, grads, offset, m, v, &segs, &h);
        }
        for &ti in which {
            let t = &self.tensors[ti];
            let r = t.range.clone();
            if self.assign {
                // p = 0 - (-1) * (g * 1 + 0 * 0) = g, exactly, on any backend.
                be.fill_zero(be.view_mut(params, r.clone()))?;
                let g = be.view(grads, r.start - offset..r.end - offset);
                let h = SgdHyper { lr: -1.0, grad_scale: 1.0, weight_decay: 0.0, momentum: 0.0, nesterov: false };
                be.sgd(be.view_mut(params, r), g, None, &h)?;
                continue;
            }
            let wd = if t.is_weight { c.weight_decay as f32 } else { 0.0 };
            // LARS reads the tensor's norms before the update.
            let lars = match c.kind {
                OptimizerKind::Lars => {
                    Some(lars_hyper(be, c, lr, grad_scale, params, grads, r.clone(), offset, t.is_weight)?)
                }
                _ => None,
            };
            if c.kind == OptimizerKind::Lamb {
                let h = self.adam_hyper(lr, grad_scale);
                let (m, v) = (self.m.as_mut().expect("lamb keeps m"), self.v.as_mut().expect("lamb keeps v"));
                let s = self.scratch.as_mut().expect("lamb keeps a scratch buffer");
                let g = be.view(grads, r.start - offset..r.end - offset);
                lamb(be, params, r.clone(), g, be.view_mut(m, r.clone()), be.view_mut(v, r), s, wd, t.is_weight, &h)?;
                continue;
            }
            if c.kind == OptimizerKind::Rmsprop {
                let h = self.rmsprop_hyper(lr, grad_scale, wd);
                let g = be.view(grads, r.start - offset..r.end - offset);
                let v = be.view_mut(self.v.as_mut().expect("rmsprop keeps v"), r.clone());
                let m = self.m.as_mut().map(|m| be.view_mut(m, r.clone()));
                be.rmsprop(params, r, g, v, m, &mut self.rms_scratch, &h)?;
                continue;
            }
            let g = be.view(grads, r.start - offset..r.end - offset);
            let p = be.view_mut(params, r.clone());
            match c.kind {
                OptimizerKind::Sgd => {
                    let h = self.sgd_hyper(lr, grad_scale, wd);
                    be.sgd(p, g, self.m.as_mut().map(|m| be.view_mut(m, r)), &h)?
                }
                OptimizerKind::Lars => {
                    let h = lars.expect("computed above for lars");
                    be.sgd(p, g, self.m.as_mut().map(|m| be.view_mut(m, r)), &h)?
                }
                OptimizerKind::Adam | OptimizerKind::Adamw => {
                    let h = self.adam_hyper_decayed(lr, grad_scale, wd);
                    let (m, v) = (self.m.as_mut().expect("adam keeps m"), self.v.as_mut().expect("adam keeps v"));
                    be.adam(p, g, be.view_mut(m, r.clone()), be.view_mut(v, r), &h)?
                }
                OptimizerKind::Lamb | OptimizerKind::Rmsprop => unreachable!("handled above"),
            }
        }
        Ok(())
    }

    /// SGD's hyperparameters (momentum, Nesterov from the config) with weight decay `wd`.
    fn sgd_hyper(&self, lr: f32, grad_scale: f32, wd: f32) -> SgdHyper {
        let c = &self.cfg;
        SgdHyper { lr, grad_scale, weight_decay: wd, momentum: c.momentum as f32, nesterov: c.nesterov }
    }

    /// Adam's hyperparameters for this step with weight decay `wd`: in the gradient (Adam's L2)
    /// or decoupled (AdamW: lr × wd).
    fn adam_hyper_decayed(&self, lr: f32, grad_scale: f32, wd: f32) -> AdamHyper {
        let decoupled = self.cfg.kind == OptimizerKind::Adamw;
        AdamHyper {
            l2: if decoupled { 0.0 } else { wd },
            decay: if decoupled { lr * wd } else { 0.0 },
            ..self.adam_hyper(lr, grad_scale)
        }
    }

    /// RMSprop's hyperparameters for this step, weight decay `wd` in the gradient (PyTorch's).
    fn rmsprop_hyper(&self, lr: f32, grad_scale: f32, wd: f32) -> RmspropHyper {
        let c = &self.cfg;
        RmspropHyper { lr, grad_scale, rho: c.rho as f32, eps: c.eps as f32, l2: wd, momentum: c.momentum as f32 }
    }

    /// Adam's hyperparameters for this step, without weight decay.
    fn adam_hyper(&self, lr: f32, grad_scale: f32) -> AdamHyper {
        let c = &self.cfg;
        let bc1 = 1.0 - c.beta1.powi(self.step as i32);
        let bc2 = 1.0 - c.beta2.powi(self.step as i32);
        AdamHyper {
            lr,
            grad_scale,
            b1: c.beta1 as f32,
            b2: c.beta2 as f32,
            eps: c.eps as f32,
            bc1: bc1 as f32,
            bc2_sqrt: bc2.sqrt() as f32,
            l2: 0.0,
            decay: 0.0,
        }
    }

    /// One whole step over every tensor (tests).
    #[cfg(test)]
    pub fn update(&mut self, be: &B, params: &mut B::Buf, grad_sum: &B::Buf, grad_scale: f32) -> Result<()> {
        self.begin_step();
        let all: Vec<usize> = (0..self.tensors.len()).collect();
        self.apply(be, params, grad_sum, 0, grad_scale, &all)
    }
}

/// The elements of `pieces` in all.
pub fn pieces_len(pieces: &Pieces) -> usize {
    pieces.iter().map(|(p, _)| p.len()).sum()
}

/// LARS's update of one tensor as the SGD kernel's hyperparameters. TensorFlow's
/// `LARSOptimizer`: trust = η ‖w‖ / (‖g‖ + wd ‖w‖ + ε) when both norms are positive, else 1;
/// accum = μ accum + lr·trust·(g + wd w); w −= accum. The kernel computes g' = g·scale + wd'·w,
/// m = μ m + g', w −= lr'·m: so lr' = 1, scale = grad_scale·lr·trust, wd' = wd·lr·trust.
/// Biases (`is_weight` false) are excluded from the trust ratio and the decay, as the paper's
/// reference code excludes them.
#[allow(clippy::too_many_arguments)]
fn lars_hyper<B: Backend>(
    be: &B,
    c: &OptimizerCfg,
    lr: f32,
    grad_scale: f32,
    params: &B::Buf,
    grads: &B::Buf,
    r: std::ops::Range<usize>,
    offset: usize,
    is_weight: bool,
) -> Result<SgdHyper> {
    let (mut w, mut g) = (0.0, 0.0);
    if is_weight {
        w = be.sum_squares(params, r.clone())?.sqrt();
        g = be.sum_squares(grads, r.start - offset..r.end - offset)?.sqrt() * f64::from(grad_scale);
    }
    Ok(lars_scaled(c, lr, grad_scale, w, g, is_weight))
}

/// `lars_hyper` from the tensor's norms: `w` of the weights, `g` of the gradient times
/// `grad_scale` (unused for a bias).
fn lars_scaled(c: &OptimizerCfg, lr: f32, grad_scale: f32, w: f64, g: f64, is_weight: bool) -> SgdHyper {
    let mut scaled = f64::from(lr);
    let mut wd = 0.0;
    if is_weight {
        wd = c.weight_decay;
        scaled *= lars_trust(c.trust_coefficient, w, g, wd);
    }
    SgdHyper {
        lr: 1.0,
        grad_scale: (f64::from(grad_scale) * scaled) as f32,
        weight_decay: (wd * scaled) as f32,
        momentum: c.momentum as f32,
        nesterov: c.nesterov,
    }
}

/// LAMB's update of one tensor, from the backend's Adam and SGD kernels (no kernel of its
/// own, so every backend has it): Adam with lr −1 on a zeroed scratch `s` updates m and v and
/// leaves s = m̂ / (√v̂ + eps); SGD adds weight_decay · w to it (weights only); the ratio is
/// ‖w‖ / ‖s‖ (1 for biases, or where a norm is 0); SGD then takes w −= lr · ratio · s.
#[allow(clippy::too_many_arguments)]
fn lamb<B: Backend>(
    be: &B,
    params: &mut B::Buf,
    r: std::ops::Range<usize>,
    g: B::View<'_>,
    m: B::ViewMut<'_>,
    v: B::ViewMut<'_>,
    s: &mut B::Buf,
    wd: f32,
    is_weight: bool,
    h: &AdamHyper,
) -> Result<()> {
    let len = r.len();
    let wd = if is_weight { wd } else { 0.0 };
    lamb_direction(be, s, 0..len, be.view(params, r.clone()), g, m, v, wd, h)?;
    let mut ratio = 1.0;
    if is_weight {
        ratio = lamb_ratio(be.sum_squares(params, r.clone())?.sqrt(), be.sum_squares(s, 0..len)?.sqrt());
    }
    be.sgd(be.view_mut(params, r), be.view(s, 0..len), None, &plain((f64::from(h.lr) * ratio) as f32, 1.0))
}

/// LAMB's first half on one range `dr` of `d`: Adam with lr −1 on it, zeroed, updates m and v and
/// leaves it m̂ / (√v̂ + eps); SGD then adds `wd` · w (0 for a bias).
#[allow(clippy::too_many_arguments)]
fn lamb_direction<B: Backend>(
    be: &B,
    d: &mut B::Buf,
    dr: std::ops::Range<usize>,
    w: B::View<'_>,
    g: B::View<'_>,
    m: B::ViewMut<'_>,
    v: B::ViewMut<'_>,
    wd: f32,
    h: &AdamHyper,
) -> Result<()> {
    be.fill_zero(be.view_mut(d, dr.clone()))?;
    be.adam(be.view_mut(d, dr.clone()), g, m, v, &AdamHyper { lr: -1.0, l2: 0.0, decay: 0.0, ..*h })?;
    if wd != 0.0 {
        // d − 1 · (w · −wd) = d + wd · w.
        be.sgd(be.view_mut(d, dr), w, None, &plain(1.0, -wd))?;
    }
    Ok(())
}

/// LAMB's trust ratio ‖w‖ / ‖r‖ from the two norms (1 where either is 0).
fn lamb_ratio(w_norm: f64, r_norm: f64) -> f64 {
    if w_norm > 0.0 && r_norm > 0.0 {
        w_norm / r_norm
    } else {
        1.0
    }
}

/// SGD's hyperparameters for a plain step −lr · grad_scale · g (no momentum, no decay).
fn plain(lr: f32, grad_scale: f32) -> SgdHyper {
    SgdHyper { lr, grad_scale, weight_decay: 0.0, momentum: 0.0, nesterov: false }
}

/// LARS's trust ratio from the weight and gradient norms (1 where either is 0).
pub fn lars_trust(eta: f64, w_norm: f64, g_norm: f64, wd: f64) -> f64 {
    if w_norm > 0.0 && g_norm > 0.0 {
        eta * w_norm / (g_norm + wd * w_norm + 1e-9)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests;
