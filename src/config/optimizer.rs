//! `[optimizer]`: the kind (sgd, adam, adamw), its hyperparameters, warm-up and learning-rate
//! scaling, and their checks. The update itself is `optim.rs`'s.
//!
//! Must not: compute learning rates (the schedule is `optim.rs`'s).

use super::limits;
use super::{count, real};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    Sgd,
    Adam,
    Adamw,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerCfg {
    #[serde(default = "default_opt")]
    pub kind: OptimizerKind,
    #[serde(default = "default_lr")]
    pub lr: f64,
    #[serde(default)]
    pub momentum: f64,
    #[serde(default)]
    pub nesterov: bool,
    #[serde(default = "default_beta1")]
    pub beta1: f64,
    #[serde(default = "default_beta2")]
    pub beta2: f64,
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// L2 penalty for sgd/adam (added to the gradient), decoupled decay for adamw. Weights only.
    #[serde(default)]
    pub weight_decay: f64,
    /// Multiply `lr` by the number of ranks (the usual rule when the global batch grows with it).
    #[serde(default)]
    pub scale_lr_by_world_size: bool,
    /// Ramp the learning rate linearly from lr/warmup_steps to lr over this many steps.
    #[serde(default)]
    pub warmup_steps: usize,
}

fn default_opt() -> OptimizerKind {
    OptimizerKind::Sgd
}
fn default_lr() -> f64 {
    0.01
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_eps() -> f64 {
    1e-8
}

impl Default for OptimizerCfg {
    fn default() -> Self {
        OptimizerCfg {
            kind: default_opt(),
            lr: default_lr(),
            momentum: 0.0,
            nesterov: false,
            beta1: default_beta1(),
            beta2: default_beta2(),
            eps: default_eps(),
            weight_decay: 0.0,
            scale_lr_by_world_size: false,
            warmup_steps: 0,
        }
    }
}

impl OptimizerCfg {
    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        let o = self;
        count(origin, "optimizer.warmup_steps", o.warmup_steps as u64, limits::WARMUP_STEPS)?;
        let reals = [
            ("optimizer.lr", o.lr, limits::LR),
            ("optimizer.momentum", o.momentum, limits::MOMENTUM),
            ("optimizer.beta1", o.beta1, limits::BETA),
            ("optimizer.beta2", o.beta2, limits::BETA),
            ("optimizer.eps", o.eps, limits::EPS),
            ("optimizer.weight_decay", o.weight_decay, limits::WEIGHT_DECAY),
        ];
        for (field, v, span) in reals {
            real(origin, field, v, span)?;
        }
        if o.nesterov && o.momentum == 0.0 {
            return Err(Error::config(origin, "optimizer.nesterov", "needs optimizer.momentum > 0"));
        }
        Ok(())
    }
}
