//! `[optimizer]`: the kind (sgd, adam, adamw, lars, lamb, rmsprop), its hyperparameters, warm-up
//! and learning-rate scaling, their checks, and the log's line naming them. The update itself
//! is `optim.rs`'s.
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
    /// Layer-wise adaptive rate scaling (You, Gitman and Ginsburg, 2017), as TensorFlow's
    /// `LARSOptimizer` computes it: per weight tensor lr × trust_coefficient × ‖w‖ /
    /// (‖g‖ + weight_decay ‖w‖), momentum on the scaled step; biases take plain momentum SGD
    /// without weight decay.
    Lars,
    /// Layer-wise adaptive moments (You et al., 2019), as TensorFlow Addons' `LAMB` computes
    /// it: Adam's bias-corrected moments give r = m̂ / (√v̂ + eps) + weight_decay · w, and each
    /// weight tensor moves by lr × ‖w‖ / ‖r‖ × r (ratio 1 where a norm is 0); biases are
    /// excluded from the decay and the ratio, as the paper's reference code excludes them.
    Lamb,
    /// RMSprop (Hinton, 2012), as PyTorch's `RMSprop` computes it (not centered): v = rho·v +
    /// (1 − rho)·g², w −= lr·g / (√v + eps), weight decay as an L2 term in g; with `momentum` μ,
    /// buf = μ·buf + g / (√v + eps), w −= lr·buf. Keras' `RMSprop` adds eps inside the root,
    /// √(v + eps): the same once v ≫ eps.
    Rmsprop,
}

/// `optimizer.schedule`: how the learning rate moves after warm-up, per step (Keras'
/// `LearningRateSchedule`s and `ReduceLROnPlateau`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// `lr` throughout.
    #[default]
    Constant,
    /// lr × decay_rate^floor(s / decay_steps) (Keras: ExponentialDecay, staircase = true).
    Step,
    /// lr × decay_rate^(s / decay_steps) (Keras: ExponentialDecay).
    Exponential,
    /// min_lr + (lr − min_lr) × (1 + cos(π · min(s, decay_steps) / decay_steps)) / 2
    /// (Keras: CosineDecay with alpha = min_lr / lr); decay_steps 0: the run's steps after warm-up.
    Cosine,
    /// min_lr + (lr − min_lr) × (1 − min(s, decay_steps) / decay_steps)^power (Keras:
    /// PolynomialDecay; LARS and LAMB's schedule with power 2); decay_steps 0: the run's steps.
    Polynomial,
    /// lr × factor each time the monitored metric (`training.early_stopping.monitor`, else
    /// `val_loss`, else `train_loss`) has not improved by min_delta for `patience` epochs,
    /// never below min_lr (Keras: ReduceLROnPlateau).
    Plateau,
    /// lr × factor^(the `milestones` passed): the rate drops by `factor` at the start of each
    /// epoch listed, counted from the run's start (PyTorch: MultiStepLR; Keras:
    /// PiecewiseConstantDecay with values lr, lr·factor, lr·factor², ...).
    Multistep,
    /// Cosine decay to min_lr over decay_steps, then a restart at lr × m_mul over a period
    /// t_mul times longer, and so on (SGDR, Loshchilov and Hutter 2017; Keras:
    /// CosineDecayRestarts with alpha = min_lr / lr; PyTorch: CosineAnnealingWarmRestarts).
    CosineRestarts,
    /// The 1cycle policy (Smith and Topin 2018) as PyTorch's `OneCycleLR` computes it
    /// (cosine annealing, two phases, `cycle_momentum = False`): from lr / div_factor up to lr
    /// over the first pct_start of decay_steps (0: the run's steps), then down to
    /// lr / div_factor / final_div_factor at the last step.
    OneCycle,
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
    /// rmsprop: the decay of the squared gradients' average (Keras' `rho`, PyTorch's `alpha`).
    #[serde(default = "default_rho")]
    pub rho: f64,
    /// L2 penalty for sgd/adam (added to the gradient), decoupled decay for adamw. Weights only.
    #[serde(default)]
    pub weight_decay: f64,
    /// Multiply `lr` by the number of ranks (the usual rule when the global batch grows with it).
    #[serde(default)]
    pub scale_lr_by_world_size: bool,
    /// Ramp the learning rate linearly from lr/warmup_steps to lr over this many steps.
    #[serde(default)]
    pub warmup_steps: usize,
    /// Ramp the learning rate over this many epochs' steps (rounded up) instead: Horovod's
    /// `LearningRateWarmupCallback(warmup_epochs)`; 0: off.
    #[serde(default)]
    pub warmup_epochs: f64,
    /// After warm-up: constant | step | exponential | cosine | plateau (see `Schedule`).
    #[serde(default)]
    pub schedule: Schedule,
    /// step, exponential: steps per decay; cosine: steps to reach min_lr (0: the whole run).
    #[serde(default)]
    pub decay_steps: usize,
    /// step, exponential: the factor per `decay_steps`.
    #[serde(default = "default_decay_rate")]
    pub decay_rate: f64,
    /// cosine, plateau: the floor.
    #[serde(default)]
    pub min_lr: f64,
    /// plateau: epochs without improvement before the rate drops.
    #[serde(default = "default_patience")]
    pub patience: usize,
    /// plateau, multistep: the factor of each drop.
    #[serde(default = "default_factor")]
    pub factor: f64,
    /// multistep: the epochs (counted from 1, increasing) after which the rate drops by
    /// `factor` (PyTorch MultiStepLR's `milestones`).
    #[serde(default)]
    pub milestones: Vec<usize>,
    /// cosine_restarts: each period's length over the one before (Keras' `t_mul`, PyTorch's
    /// `T_mult`).
    #[serde(default = "default_t_mul")]
    pub t_mul: f64,
    /// cosine_restarts: each restart's peak over the one before, as a factor of lr − min_lr
    /// (Keras' `m_mul`).
    #[serde(default = "default_m_mul")]
    pub m_mul: f64,
    /// one_cycle: the share of the steps spent rising to lr (PyTorch's `pct_start`).
    #[serde(default = "default_pct_start")]
    pub pct_start: f64,
    /// one_cycle: the start is lr / div_factor (PyTorch's `div_factor`).
    #[serde(default = "default_div_factor")]
    pub div_factor: f64,
    /// one_cycle: the end is the start / final_div_factor (PyTorch's `final_div_factor`).
    #[serde(default = "default_final_div_factor")]
    pub final_div_factor: f64,
    /// plateau: epochs after a drop before the patience counts again (Keras' and PyTorch's
    /// `cooldown`).
    #[serde(default)]
    pub cooldown: usize,
    /// plateau: the least decrease of the monitored metric that counts as an improvement.
    #[serde(default)]
    pub min_delta: f64,
    /// Keras' `global_clipnorm` (torch's `clip_grad_norm_`): after the all-reduce, when the
    /// L2 norm of every gradient together exceeds this, all are scaled by limit / norm.
    #[serde(default)]
    pub global_clipnorm: Option<f64>,
    /// polynomial: the exponent of the decay (1: linear).
    #[serde(default = "default_power")]
    pub power: f64,
    /// lars: η of the trust ratio η ‖w‖ / (‖g‖ + weight_decay ‖w‖) (0.001 in the paper).
    #[serde(default = "default_trust")]
    pub trust_coefficient: f64,
    /// Keras' `clipnorm`: each tensor's gradient (a layer's weight, its bias) scaled to this L2
    /// norm when its norm exceeds it.
    #[serde(default)]
    pub clipnorm: Option<f64>,
    /// Keras' `clipvalue`: every gradient element clamped to [-clipvalue, clipvalue], after
    /// the all-reduce and after any norm clipping.
    #[serde(default)]
    pub clipvalue: Option<f64>,
    /// Keras' `use_ema` with `ema_momentum` β (PyTorch's `AveragedModel` with an EMA): a moving
    /// average of the parameters, ema ← β·ema + (1 − β)·params after every step (after the
    /// run's first step, the parameters themselves). Evaluation, the best weights and weights.h5 use it; checkpoints
    /// keep it beside the trained parameters (`optimizer/ema`), so a resume continues both.
    #[serde(default)]
    pub ema: Option<f64>,
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
fn default_rho() -> f64 {
    0.9
}
fn default_power() -> f64 {
    1.0
}
fn default_trust() -> f64 {
    0.001
}
fn default_decay_rate() -> f64 {
    0.5
}
fn default_t_mul() -> f64 {
    2.0
}
fn default_m_mul() -> f64 {
    1.0
}
fn default_pct_start() -> f64 {
    0.3
}
fn default_div_factor() -> f64 {
    25.0
}
fn default_final_div_factor() -> f64 {
    1e4
}
fn default_patience() -> usize {
    5
}
fn default_factor() -> f64 {
    0.1
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
            rho: default_rho(),
            weight_decay: 0.0,
            scale_lr_by_world_size: false,
            warmup_steps: 0,
            warmup_epochs: 0.0,
            schedule: Schedule::Constant,
            decay_steps: 0,
            decay_rate: default_decay_rate(),
            min_lr: 0.0,
            patience: default_patience(),
            factor: default_factor(),
            milestones: Vec::new(),
            t_mul: default_t_mul(),
            m_mul: default_m_mul(),
            pct_start: default_pct_start(),
            div_factor: default_div_factor(),
            final_div_factor: default_final_div_factor(),
            min_delta: 0.0,
            cooldown: 0,
            global_clipnorm: None,
            clipnorm: None,
            clipvalue: None,
            ema: None,
            trust_coefficient: default_trust(),
            power: default_power(),
        }
    }
}

impl OptimizerCfg {
    /// Whether gradients are clipped (by a norm: every bucket must be back before any update;
    /// by value).
    pub fn clips(&self) -> bool {
        self.global_clipnorm.is_some() || self.clipnorm.is_some() || self.clipvalue.is_some()
    }

    /// The log's start-up line for the optimizer: its kind and the hyperparameters it reads
    /// (`optimizer rmsprop: lr 0.001, rho 0.9, eps 1e-8`), then the decay, schedule, clipping
    /// and moving average where set.
    pub fn describe(&self) -> String {
        let n = limits::num;
        let kind = match self.kind {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adam => "adam",
            OptimizerKind::Adamw => "adamw",
            OptimizerKind::Lars => "lars",
            OptimizerKind::Lamb => "lamb",
            OptimizerKind::Rmsprop => "rmsprop",
        };
        let mut s = format!("optimizer {kind}: lr {}", n(self.lr));
        match self.kind {
            OptimizerKind::Sgd | OptimizerKind::Lars if self.momentum > 0.0 => {
                s += &format!(", momentum {}{}", n(self.momentum), if self.nesterov { " (Nesterov)" } else { "" })
            }
            OptimizerKind::Sgd | OptimizerKind::Lars => {}
            OptimizerKind::Adam | OptimizerKind::Adamw | OptimizerKind::Lamb => {
                s += &format!(", beta1 {}, beta2 {}, eps {}", n(self.beta1), n(self.beta2), n(self.eps))
            }
            OptimizerKind::Rmsprop => {
                s += &format!(", rho {}, eps {}", n(self.rho), n(self.eps));
                if self.momentum > 0.0 {
                    s += &format!(", momentum {}", n(self.momentum));
                }
            }
        }
        if self.kind == OptimizerKind::Lars {
            s += &format!(", trust coefficient {}", n(self.trust_coefficient));
        }
        if self.weight_decay > 0.0 {
            s += &format!(", weight decay {} (weights, not biases)", n(self.weight_decay));
        }
        if self.warmup_steps > 0 {
            s += &format!(", {} warm-up steps", self.warmup_steps);
        }
        if self.warmup_epochs > 0.0 {
            s += &format!(", warm-up over {} epochs", n(self.warmup_epochs));
        }
        if self.schedule != Schedule::Constant {
            s += &format!(", schedule {}", self.schedule.name());
            s += &self.schedule_detail();
        }
        for (name, v) in
            [("global_clipnorm", self.global_clipnorm), ("clipnorm", self.clipnorm), ("clipvalue", self.clipvalue)]
        {
            if let Some(v) = v {
                s += &format!(", {name} {}", n(v));
            }
        }
        if let Some(b) = self.ema {
            s += &format!(", moving average of the weights (ema {})", n(b));
        }
        s
    }

    /// `decay_steps` in the log's words: "the run" when 0.
    fn span_words(&self) -> String {
        match self.decay_steps {
            0 => "the run".to_string(),
            d => format!("{d} steps"),
        }
    }

    /// What the schedule reads, as the log shows it after its name (` (× 0.1 at epochs 30, 60)`).
    fn schedule_detail(&self) -> String {
        let n = limits::num;
        match self.schedule {
            Schedule::Constant => String::new(),
            Schedule::Step => format!(" (× {} every {} steps)", n(self.decay_rate), self.decay_steps),
            Schedule::Exponential => format!(" (× {} per {} steps)", n(self.decay_rate), self.decay_steps),
            Schedule::Cosine | Schedule::Polynomial => {
                let span = self.span_words();
                let power = match self.schedule {
                    Schedule::Polynomial => format!(", power {}", n(self.power)),
                    _ => String::new(),
                };
                format!(" (to {} over {span}{power})", n(self.min_lr))
            }
            Schedule::Plateau => {
                let cooldown = match self.cooldown {
                    0 => String::new(),
                    c => format!(", cooldown {c} epochs"),
                };
                format!(
                    " (× {} after {} epochs without improvement, floor {}{cooldown})",
                    n(self.factor),
                    self.patience,
                    n(self.min_lr)
                )
            }
            Schedule::Multistep => {
                let at: Vec<String> = self.milestones.iter().map(|e| e.to_string()).collect();
                let s = if at.len() == 1 { "" } else { "s" };
                format!(" (× {} after epoch{s} {})", n(self.factor), at.join(", "))
            }
            Schedule::CosineRestarts => format!(
                " (to {} over {} steps, each period × {}, each restart's peak × {})",
                n(self.min_lr),
                self.decay_steps,
                n(self.t_mul),
                n(self.m_mul)
            ),
            Schedule::OneCycle => {
                let span = self.span_words();
                let start = self.lr / self.div_factor;
                format!(
                    " (from {} up to {} over {} of {span}, then down to {})",
                    n(start),
                    n(self.lr),
                    n(self.pct_start),
                    n(start / self.final_div_factor)
                )
            }
        }
    }

    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        let o = self;
        count(origin, "optimizer.warmup_steps", o.warmup_steps as u64, limits::WARMUP_STEPS)?;
        real(origin, "optimizer.warmup_epochs", o.warmup_epochs, limits::WARMUP_EPOCHS)?;
        if o.warmup_steps > 0 && o.warmup_epochs > 0.0 {
            return Err(Error::config(
                origin,
                "optimizer.warmup_epochs",
                format!(
                    "and optimizer.warmup_steps ({}) are both set; choose one: warmup_epochs counts epochs of this \
                     run's steps, warmup_steps steps",
                    o.warmup_steps
                ),
            ));
        }
        let reals = [
            ("optimizer.lr", o.lr, limits::LR),
            ("optimizer.momentum", o.momentum, limits::MOMENTUM),
            ("optimizer.beta1", o.beta1, limits::BETA),
            ("optimizer.beta2", o.beta2, limits::BETA),
            ("optimizer.rho", o.rho, limits::BETA),
            ("optimizer.eps", o.eps, limits::EPS),
            ("optimizer.weight_decay", o.weight_decay, limits::WEIGHT_DECAY),
        ];
        for (field, v, span) in reals {
            real(origin, field, v, span)?;
        }
        real(origin, "optimizer.decay_rate", o.decay_rate, limits::DECAY_RATE)?;
        real(origin, "optimizer.trust_coefficient", o.trust_coefficient, limits::TRUST)?;
        real(origin, "optimizer.power", o.power, limits::POWER)?;
        real(origin, "optimizer.factor", o.factor, limits::PLATEAU_FACTOR)?;
        real(origin, "optimizer.min_lr", o.min_lr, limits::MIN_LR)?;
        real(origin, "optimizer.min_delta", o.min_delta, limits::MIN_DELTA)?;
        count(origin, "optimizer.patience", o.patience as u64, limits::PATIENCE)?;
        count(origin, "optimizer.cooldown", o.cooldown as u64, limits::COOLDOWN)?;
        count(origin, "optimizer.decay_steps", o.decay_steps as u64, limits::DECAY_STEPS)?;
        if matches!(o.schedule, Schedule::Step | Schedule::Exponential) && o.decay_steps == 0 {
            return Err(Error::config(
                origin,
                "optimizer.decay_steps",
                format!("is needed by schedule = \"{}\": the steps per decay by decay_rate", o.schedule.name()),
            ));
        }
        o.validate_multistep(origin)?;
        real(origin, "optimizer.t_mul", o.t_mul, limits::T_MUL)?;
        real(origin, "optimizer.m_mul", o.m_mul, limits::M_MUL)?;
        real(origin, "optimizer.pct_start", o.pct_start, limits::PCT_START)?;
        real(origin, "optimizer.div_factor", o.div_factor, limits::DIV_FACTOR)?;
        real(origin, "optimizer.final_div_factor", o.final_div_factor, limits::DIV_FACTOR)?;
        if o.schedule == Schedule::OneCycle && (o.warmup_steps > 0 || o.warmup_epochs > 0.0) {
            let field = if o.warmup_steps > 0 { "optimizer.warmup_steps" } else { "optimizer.warmup_epochs" };
            return Err(Error::config(
                origin,
                field,
                "is set beside schedule = \"one_cycle\", which warms up itself (from lr / div_factor over pct_start \
                 of the steps): remove the warm-up, or set pct_start",
            ));
        }
        if o.schedule == Schedule::CosineRestarts && o.decay_steps == 0 {
            return Err(Error::config(
                origin,
                "optimizer.decay_steps",
                "is needed by schedule = \"cosine_restarts\": the steps of the first period (Keras' \
                 first_decay_steps, PyTorch's T_0), e.g. one or two epochs' steps",
            ));
        }
        if matches!(o.schedule, Schedule::Cosine | Schedule::Plateau | Schedule::Polynomial | Schedule::CosineRestarts)
            && o.min_lr >= o.lr
        {
            return Err(Error::config(
                origin,
                "optimizer.min_lr",
                format!("must be below optimizer.lr ({}), got {}", limits::num(o.lr), limits::num(o.min_lr)),
            ));
        }
        for (field, v) in [
            ("optimizer.global_clipnorm", o.global_clipnorm),
            ("optimizer.clipnorm", o.clipnorm),
            ("optimizer.clipvalue", o.clipvalue),
        ] {
            if let Some(v) = v {
                real(origin, field, v, limits::CLIPNORM)?;
            }
        }
        if let Some(b) = o.ema {
            real(origin, "optimizer.ema", b, limits::EMA)?;
        }
        if o.global_clipnorm.is_some() && o.clipnorm.is_some() {
            return Err(Error::config(
                origin,
                "optimizer.clipnorm",
                "and optimizer.global_clipnorm are both set; choose one (as Keras asks): global_clipnorm scales \
                 every gradient by one factor, clipnorm each tensor's by its own",
            ));
        }
        if o.kind == OptimizerKind::Rmsprop && o.nesterov {
            return Err(Error::config(
                origin,
                "optimizer.nesterov",
                "is not offered with kind = \"rmsprop\" (PyTorch's and Keras' RMSprop take plain momentum): set \
                 nesterov = false",
            ));
        }
        if o.nesterov && o.momentum == 0.0 {
            return Err(Error::config(origin, "optimizer.nesterov", "needs optimizer.momentum > 0"));
        }
        Ok(())
    }
}

impl OptimizerCfg {
    /// `milestones`: set with schedule = "multistep" only, then not empty, each epoch from 1
    /// and increasing.
    fn validate_multistep(&self, origin: &str) -> Result<()> {
        let field = "optimizer.milestones";
        let list: Vec<String> = self.milestones.iter().map(|e| e.to_string()).collect();
        match (self.schedule == Schedule::Multistep, self.milestones.is_empty()) {
            (true, true) => {
                return Err(Error::config(
                    origin,
                    field,
                    "is needed by schedule = \"multistep\": the epochs after which the rate drops by \
                     optimizer.factor, e.g. milestones = [30, 60, 80]",
                ))
            }
            (false, false) => {
                return Err(Error::config(
                    origin,
                    field,
                    format!(
                        "[{}] is read by schedule = \"multistep\" only, and schedule is \"{}\": set schedule = \
                         \"multistep\" or remove milestones",
                        list.join(", "),
                        self.schedule.name()
                    ),
                ))
            }
            _ => {}
        }
        if self.milestones.first() == Some(&0) || self.milestones.windows(2).any(|w| w[1] <= w[0]) {
            return Err(Error::config(
                origin,
                field,
                format!(
                    "must be epochs from 1 in increasing order (the rate drops after each), got [{}]",
                    list.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Constant => "constant",
            Schedule::Step => "step",
            Schedule::Exponential => "exponential",
            Schedule::Cosine => "cosine",
            Schedule::Polynomial => "polynomial",
            Schedule::Plateau => "plateau",
            Schedule::Multistep => "multistep",
            Schedule::CosineRestarts => "cosine_restarts",
            Schedule::OneCycle => "one_cycle",
        }
    }
}
