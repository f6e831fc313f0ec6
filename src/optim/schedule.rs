//! The learning rate of every step: linear warm-up, then `optimizer.schedule` (constant,
//! step, exponential, cosine, polynomial, plateau, multistep, cosine_restarts, one_cycle), as
//! Keras' schedules and `ReduceLROnPlateau` (and PyTorch's `MultiStepLR`,
//! `CosineAnnealingWarmRestarts` and `OneCycleLR`) define them. A pure function of the step (and, for plateau, of the epochs' monitored metric,
//! whose state checkpoints carry), so a resumed run on any rank count follows the same curve.
//!
//! Must not: touch parameters or optimizer state (`mod.rs` does), or decide which metric
//! plateau monitors (the training loop passes it).

use crate::config::{OptimizerCfg, Schedule};
use serde::{Deserialize, Serialize};

/// The best value so far of a lower-is-better metric and the epochs since it. Keras' rule for
/// both `ReduceLROnPlateau` and `EarlyStopping`: an improvement is a value below best − min_delta.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Best {
    pub value: Option<f64>,
    pub wait: u64,
}

impl Best {
    /// Take an epoch's value: true when it improved (the wait starts again), else one more epoch.
    pub fn observe(&mut self, v: f64, min_delta: f64) -> bool {
        let improved = self.value.is_none_or(|b| v < b - min_delta);
        if improved {
            (self.value, self.wait) = (Some(v), 0);
        } else {
            self.wait += 1;
        }
        improved
    }
}

/// Plateau's state: the factor applied so far, its metric's best and wait, and the epochs of
/// cooldown left after the last drop (checkpoints from before `cooldown` read as 0).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plateau {
    pub scale: f64,
    pub best: Best,
    #[serde(default)]
    pub cooldown: u64,
}

impl Default for Plateau {
    fn default() -> Self {
        Plateau { scale: 1.0, best: Best::default(), cooldown: 0 }
    }
}

#[derive(Clone, Debug)]
pub struct LrSchedule {
    cfg: OptimizerCfg,
    /// `optimizer.lr`, times the data-parallel degree with `scale_lr_by_world_size`.
    base: f64,
    /// Steps of the whole run (cosine's default span); 0 when unknown.
    total_steps: u64,
    /// Steps of an epoch (multistep's milestones are epochs); 0 when unknown.
    epoch_steps: u64,
    /// Optimizer updates per training step (an asynchronous parameter server updates a
    /// bucket once per worker's step).
    per_step: u64,
    pub plateau: Plateau,
}

impl LrSchedule {
    pub fn new(cfg: &OptimizerCfg, base: f64) -> LrSchedule {
        LrSchedule { cfg: cfg.clone(), base, total_steps: 0, epoch_steps: 0, per_step: 1, plateau: Plateau::default() }
    }

    pub fn set_total_steps(&mut self, steps: u64) {
        self.total_steps = steps;
    }

    /// The steps of an epoch: multistep drops the rate at step milestone × this.
    pub fn set_epoch_steps(&mut self, steps: u64) {
        self.epoch_steps = steps;
    }

    pub fn set_updates_per_step(&mut self, n: u64) {
        self.per_step = n.max(1);
    }

    /// The warm-up's steps: `warmup_steps`, or `warmup_epochs` × an epoch's steps rounded up.
    pub fn warmup(&self) -> u64 {
        match self.cfg.warmup_epochs {
            e if e > 0.0 => (e * self.epoch_steps as f64).ceil() as u64,
            _ => self.cfg.warmup_steps as u64,
        }
    }

    /// The steps a decay spans (cosine, polynomial, one_cycle): `decay_steps`, or 0 for the
    /// run's steps after the `w` of warm-up.
    fn decay_span(&self, w: u64) -> u64 {
        match self.cfg.decay_steps {
            0 => self.total_steps.saturating_sub(w),
            d => d as u64,
        }
    }

    /// The learning rate of update number `update` (0 for the first).
    pub fn at(&self, update: u64) -> f64 {
        let c = &self.cfg;
        let step = update / self.per_step;
        let w = self.warmup();
        if w > 0 && step < w {
            return self.base * (step + 1) as f64 / w as f64;
        }
        let s = (step - w) as f64;
        let lr = self.base;
        match c.schedule {
            Schedule::Constant => lr,
            Schedule::Step => lr * c.decay_rate.powf((s / c.decay_steps as f64).floor()),
            Schedule::Exponential => lr * c.decay_rate.powf(s / c.decay_steps as f64),
            Schedule::Cosine | Schedule::Polynomial => {
                let t = (s / self.decay_span(w).max(1) as f64).min(1.0);
                let f = match c.schedule {
                    Schedule::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * t).cos()),
                    _ => (1.0 - t).powf(c.power),
                };
                c.min_lr + (lr - c.min_lr) * f
            }
            Schedule::Plateau => (lr * self.plateau.scale).max(c.min_lr),
            Schedule::Multistep => {
                // Counted from the run's first step, as PyTorch's MultiStepLR counts epochs
                // (warm-up included): epoch m's last step is m × epoch_steps − 1.
                let passed = c.milestones.iter().filter(|&&m| step >= m as u64 * self.epoch_steps).count();
                lr * c.factor.powi(passed as i32)
            }
            Schedule::OneCycle => {
                // No warm-up beside one_cycle (refused): its span is the whole run's.
                one_cycle(step as f64, self.decay_span(w).max(2) as f64, lr, c)
            }
            Schedule::CosineRestarts => {
                let (t, peak) = restart_phase(s / c.decay_steps as f64, c.t_mul, c.m_mul);
                c.min_lr + (lr - c.min_lr) * peak * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
            }
        }
    }

    /// Plateau only: the epoch's monitored value (lower is better). Returns the new rate when
    /// it dropped.
    pub fn epoch_end(&mut self, metric: f64) -> Option<f64> {
        if self.cfg.schedule != Schedule::Plateau || !metric.is_finite() {
            return None;
        }
        // Keras' ReduceLROnPlateau: an epoch of cooldown counts down and waits nothing, but a
        // new best is still taken; a drop starts `cooldown` such epochs.
        let p = &mut self.plateau;
        let cooling = p.cooldown > 0;
        if cooling {
            p.cooldown -= 1;
            p.best.wait = 0;
        }
        if p.best.observe(metric, self.cfg.min_delta) {
            return None;
        }
        if p.cooldown > 0 {
            p.best.wait = 0;
            return None;
        }
        if p.best.wait < self.cfg.patience as u64 {
            return None;
        }
        p.best.wait = 0;
        p.cooldown = self.cfg.cooldown as u64;
        let floor = self.cfg.min_lr / self.base;
        if p.scale <= floor {
            return None;
        }
        p.scale = (p.scale * self.cfg.factor).max(floor);
        Some((self.base * p.scale).max(self.cfg.min_lr))
    }
}

/// PyTorch's `OneCycleLR` (two phases, cosine annealing) at step `s` of `total`: phase one ends
/// at step pct_start·total − 1 at `max`, phase two at step total − 1 at the floor; past the
/// end, the floor.
fn one_cycle(s: f64, total: f64, max: f64, c: &OptimizerCfg) -> f64 {
    let start = max / c.div_factor;
    let floor = start / c.final_div_factor;
    let end1 = c.pct_start * total - 1.0;
    let cos = |from: f64, to: f64, pct: f64| to + (from - to) / 2.0 * ((std::f64::consts::PI * pct).cos() + 1.0);
    if end1 > 0.0 && s <= end1 {
        cos(start, max, s / end1)
    } else {
        cos(max, floor, ((s - end1) / (total - 1.0 - end1)).min(1.0))
    }
}

/// SGDR's place at `f` first periods into the schedule: the fraction of the current period
/// done and that period's peak (m_mul^restarts), as Keras' `CosineDecayRestarts` computes
/// them: period i lasts t_mul^i first periods, so restart i begins at (1 − t_mul^i) / (1 − t_mul).
fn restart_phase(f: f64, t_mul: f64, m_mul: f64) -> (f64, f64) {
    let (i, start, len) = if t_mul == 1.0 {
        let i = f.floor();
        (i, i, 1.0)
    } else {
        let i = ((1.0 - f * (1.0 - t_mul)).ln() / t_mul.ln()).floor();
        (i, (1.0 - t_mul.powf(i)) / (1.0 - t_mul), t_mul.powf(i))
    };
    (((f - start) / len).clamp(0.0, 1.0), m_mul.powf(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(sets: &[(&str, &str)]) -> LrSchedule {
        let mut src = String::from("[data]\ntrain = \"t.h5\"\n[model]\nlayers = [2, 2]\n[optimizer]\nlr = 0.1\n");
        for (k, v) in sets {
            src += &format!("{k} = {v}\n");
        }
        let job = crate::config::Job::parse("test.toml", &src, &[]).expect("valid job");
        LrSchedule::new(&job.optimizer, job.optimizer.lr)
    }

    #[test]
    fn every_schedule_follows_its_formula_after_warm_up() {
        let s = sched(&[("schedule", "\"step\""), ("decay_steps", "10"), ("decay_rate", "0.5"), ("warmup_steps", "4")]);
        assert!((s.at(0) - 0.025).abs() < 1e-15); // warm-up: 0.1 × 1/4
        assert_eq!(s.at(4), 0.1);
        assert_eq!(s.at(13), 0.1);
        assert_eq!(s.at(14), 0.05);
        assert_eq!(s.at(34), 0.0125);
        let s = sched(&[("schedule", "\"exponential\""), ("decay_steps", "10"), ("decay_rate", "0.5")]);
        assert!((s.at(5) - 0.1 * 0.5f64.sqrt()).abs() < 1e-15);
        let mut s = sched(&[("schedule", "\"cosine\""), ("min_lr", "0.01")]);
        s.set_total_steps(100);
        assert_eq!(s.at(0), 0.1);
        assert!((s.at(50) - 0.055).abs() < 1e-15);
        assert!((s.at(100) - 0.01).abs() < 1e-15);
        assert!((s.at(1000) - 0.01).abs() < 1e-15);
        // Polynomial (power 2) after a 10-step linear warm-up, over decay_steps 40.
        let s =
            sched(&[("schedule", "\"polynomial\""), ("power", "2.0"), ("decay_steps", "40"), ("warmup_steps", "10")]);
        assert!((s.at(4) - 0.05).abs() < 1e-15);
        assert_eq!(s.at(10), 0.1);
        assert!((s.at(30) - 0.025).abs() < 1e-15); // (1 - 20/40)^2
        assert_eq!(s.at(50), 0.0);
        assert_eq!(s.at(500), 0.0);
        let s = sched(&[]);
        assert_eq!(s.at(12345), 0.1);
    }

    #[test]
    fn plateau_drops_after_patience_epochs_without_improvement_and_stops_at_min_lr() {
        let mut s = sched(&[("schedule", "\"plateau\""), ("patience", "2"), ("factor", "0.5"), ("min_lr", "0.03")]);
        assert_eq!(s.epoch_end(1.0), None);
        assert_eq!(s.epoch_end(0.9), None);
        assert_eq!(s.epoch_end(0.95), None); // wait 1
        assert_eq!(s.epoch_end(0.91), Some(0.05)); // wait 2: drop
        assert_eq!(s.at(10), 0.05);
        assert_eq!(s.epoch_end(0.92), None);
        assert_eq!(s.epoch_end(0.93), Some(0.03)); // floored at min_lr
        assert_eq!(s.epoch_end(0.94), None);
        assert_eq!(s.epoch_end(0.95), None); // at the floor: no more drops
        assert_eq!(s.at(10), 0.03);
        for p in [s.plateau, Plateau::default()] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<Plateau>(&json).unwrap(), p, "{json}");
        }
    }

    #[test]
    fn multistep_drops_by_factor_at_each_milestone_epoch_from_the_runs_start() {
        // PyTorch's MultiStepLR(milestones=[2, 4], gamma=0.1) stepped once an epoch: epochs 1-2
        // at lr, 3-4 at lr/10, 5 on at lr/100; here 10 steps an epoch, warm-up 5 steps inside
        // the first epoch (the milestones count from the run's first step, not after warm-up).
        let mut s = sched(&[("schedule", "\"multistep\""), ("milestones", "[2, 4]"), ("warmup_steps", "5")]);
        s.set_epoch_steps(10);
        assert!((s.at(0) - 0.02).abs() < 1e-15);
        assert_eq!(s.at(5), 0.1);
        assert_eq!(s.at(19), 0.1);
        assert!((s.at(20) - 0.01).abs() < 1e-15);
        assert!((s.at(39) - 0.01).abs() < 1e-15);
        assert!((s.at(40) - 0.001).abs() < 1e-15);
        assert!((s.at(10_000) - 0.001).abs() < 1e-15);
        let mut s = sched(&[("schedule", "\"multistep\""), ("milestones", "[1]"), ("factor", "0.5")]);
        s.set_epoch_steps(7);
        assert_eq!((s.at(6), s.at(7)), (0.1, 0.05));
    }

    #[test]
    fn warmup_epochs_ramps_over_that_many_epochs_steps_rounded_up() {
        // Horovod's LearningRateWarmupCallback(warmup_epochs = 2.5): 2.5 × 10 steps = 25.
        let mut s = sched(&[("warmup_epochs", "2.5"), ("schedule", "\"step\""), ("decay_steps", "10")]);
        s.set_epoch_steps(10);
        assert_eq!(s.warmup(), 25);
        assert!((s.at(0) - 0.004).abs() < 1e-15);
        assert!((s.at(24) - 0.1).abs() < 1e-15);
        assert_eq!((s.at(25), s.at(34), s.at(35)), (0.1, 0.1, 0.05), "the decay counts from the warm-up's end");
        s.set_epoch_steps(7);
        assert_eq!(s.warmup(), 18, "17.5 steps rounded up");
    }

    #[test]
    fn one_cycle_rises_over_pct_start_then_falls_to_its_floor_as_pytorch_does() {
        // OneCycleLR(max_lr = 0.1, total_steps = 100): pct_start 0.3, div_factor 25,
        // final_div_factor 1e4; phase one ends at step 29, phase two at step 99.
        let mut s = sched(&[("schedule", "\"one_cycle\"")]);
        s.set_total_steps(100);
        let floor = 0.1 / 25.0 / 1e4;
        assert!((s.at(0) - 0.004).abs() < 1e-15);
        assert!((s.at(29) - 0.1).abs() < 1e-15);
        assert!((s.at(64) - (0.1 + floor) / 2.0).abs() < 1e-15, "phase two's middle: {}", s.at(64));
        assert!((s.at(99) - floor).abs() < 1e-18);
        assert!((s.at(500) - floor).abs() < 1e-18, "past the end: the floor");
        let rising: Vec<f64> = (0..30).map(|i| s.at(i)).collect();
        assert!(rising.windows(2).all(|w| w[1] > w[0]), "{rising:?}");
        // decay_steps fixes the cycle's length; pct_start, div_factor and final_div_factor move it.
        let s = sched(&[
            ("schedule", "\"one_cycle\""),
            ("decay_steps", "20"),
            ("pct_start", "0.5"),
            ("div_factor", "10"),
            ("final_div_factor", "100"),
        ]);
        assert!((s.at(0) - 0.01).abs() < 1e-15);
        assert!((s.at(9) - 0.1).abs() < 1e-15);
        assert!((s.at(19) - 1e-4).abs() < 1e-15);
    }

    #[test]
    fn cosine_restarts_follows_keras_cosine_decay_restarts() {
        // keras.optimizers.schedules.CosineDecayRestarts(0.1, first_decay_steps, t_mul, m_mul,
        // alpha = min_lr / 0.1) evaluated by Keras 3.15 at these steps (float32: 1e-6 relative, 1e-8 near zero).
        let cases: [(&str, &str, &str, &str, &[(u64, f64)]); 3] = [
            (
                "10",
                "2.0",
                "0.5",
                "0.01",
                &[
                    (0, 0.1),
                    (3, 0.08145033568143845),
                    (9, 0.012202458456158638),
                    (10, 0.055000003427267075),
                    (15, 0.04840990528464317),
                    (29, 0.01027701236307621),
                    (30, 0.032499998807907104),
                    (31, 0.03246532008051872),
                    (50, 0.021250000223517418),
                    (69, 0.010034679435193539),
                    (70, 0.021250000223517418),
                    (100, 0.017777595669031143),
                    (149, 0.010004336945712566),
                    (150, 0.015625),
                    (151, 0.015624457970261574),
                ],
            ),
            (
                "8",
                "1.0",
                "1.0",
                "0.0",
                &[(0, 0.1), (4, 0.05), (7, 0.0038060189690440893), (8, 0.1), (12, 0.05), (16, 0.1), (20, 0.05)],
            ),
            (
                "10",
                "1.5",
                "0.8",
                "0.005",
                &[
                    (0, 0.1),
                    (9, 0.0073248171247541904),
                    (10, 0.08100000023841858),
                    (24, 0.0058303880505263805),
                    (25, 0.0658000037074089),
                    (26, 0.06550415605306625),
                    (47, 0.005074052140116692),
                    (48, 0.05361366271972656),
                    (100, 0.0321621298789978),
                ],
            ),
        ];
        for (first, t_mul, m_mul, min_lr, want) in cases {
            let s = sched(&[
                ("schedule", "\"cosine_restarts\""),
                ("decay_steps", first),
                ("t_mul", t_mul),
                ("m_mul", m_mul),
                ("min_lr", min_lr),
            ]);
            for &(step, keras) in want {
                let got = s.at(step);
                assert!((got - keras).abs() < 1e-6 * keras + 1e-8, "t_mul {t_mul} step {step}: {got}, Keras {keras}");
            }
        }
        // After warm-up the periods count from the warm-up's end.
        let s = sched(&[("schedule", "\"cosine_restarts\""), ("decay_steps", "8"), ("warmup_steps", "4")]);
        assert_eq!((s.at(4), s.at(12)), (0.1, 0.1));
        assert!((s.at(8) - 0.05).abs() < 1e-15);
    }

    #[test]
    fn plateau_cooldown_waits_that_many_epochs_after_a_drop_as_keras_does() {
        // The epochs after which Keras 3.15's ReduceLROnPlateau(monitor = "loss", factor = 0.5,
        // min_delta = 0) dropped the rate, fed these losses: Keras lets the last epoch of
        // cooldown count towards the patience already, and takes a new best during cooldown.
        let drops = |patience: &str, cooldown: &str, losses: &[f64]| {
            let mut s = sched(&[
                ("schedule", "\"plateau\""),
                ("patience", patience),
                ("factor", "0.5"),
                ("cooldown", cooldown),
            ]);
            (1..=losses.len()).filter(|&e| s.epoch_end(losses[e - 1]).is_some()).collect::<Vec<_>>()
        };
        assert_eq!(drops("1", "2", &[1.0; 9]), [2, 4, 6, 8]);
        assert_eq!(drops("1", "0", &[1.0; 9]), [2, 3, 4, 5, 6, 7, 8, 9]);
        let losses = [1.0, 1.0, 1.0, 0.9, 1.0, 1.0, 1.0, 1.0, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(drops("2", "3", &losses), [3, 7, 11, 15]);
        // A checkpoint from before cooldown existed reads as none left.
        let old: Plateau = serde_json::from_str(r#"{"scale":0.5,"best":{"value":1.0,"wait":0}}"#).unwrap();
        assert_eq!(old.cooldown, 0);
    }

    #[test]
    fn an_asynchronous_server_counts_steps_not_updates() {
        let mut s = sched(&[("schedule", "\"step\""), ("decay_steps", "10")]);
        s.set_updates_per_step(3);
        assert_eq!(s.at(29), 0.1);
        assert_eq!(s.at(30), 0.05);
    }
}
