//! The learning rate of every step: linear warm-up, then `optimizer.schedule` (constant,
//! step, exponential, cosine, plateau), as Keras' schedules and `ReduceLROnPlateau` define
//! them. A pure function of the step (and, for plateau, of the epochs' monitored metric,
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

/// Plateau's state: the factor applied so far, and its metric's best and wait.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plateau {
    pub scale: f64,
    pub best: Best,
}

impl Default for Plateau {
    fn default() -> Self {
        Plateau { scale: 1.0, best: Best::default() }
    }
}

#[derive(Clone, Debug)]
pub struct LrSchedule {
    cfg: OptimizerCfg,
    /// `optimizer.lr`, times the data-parallel degree with `scale_lr_by_world_size`.
    base: f64,
    /// Steps of the whole run (cosine's default span); 0 when unknown.
    total_steps: u64,
    /// Optimizer updates per training step (an asynchronous parameter server updates a
    /// bucket once per worker's step).
    per_step: u64,
    pub plateau: Plateau,
}

impl LrSchedule {
    pub fn new(cfg: &OptimizerCfg, base: f64) -> LrSchedule {
        LrSchedule { cfg: cfg.clone(), base, total_steps: 0, per_step: 1, plateau: Plateau::default() }
    }

    pub fn set_total_steps(&mut self, steps: u64) {
        self.total_steps = steps;
    }

    pub fn set_updates_per_step(&mut self, n: u64) {
        self.per_step = n.max(1);
    }

    /// The learning rate of update number `update` (0 for the first).
    pub fn at(&self, update: u64) -> f64 {
        let c = &self.cfg;
        let step = update / self.per_step;
        let w = c.warmup_steps as u64;
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
                let span = if c.decay_steps > 0 { c.decay_steps as u64 } else { self.total_steps.saturating_sub(w) };
                let t = (s / span.max(1) as f64).min(1.0);
                let f = match c.schedule {
                    Schedule::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * t).cos()),
                    _ => (1.0 - t).powf(c.power),
                };
                c.min_lr + (lr - c.min_lr) * f
            }
            Schedule::Plateau => (lr * self.plateau.scale).max(c.min_lr),
        }
    }

    /// Plateau only: the epoch's monitored value (lower is better). Returns the new rate when
    /// it dropped.
    pub fn epoch_end(&mut self, metric: f64) -> Option<f64> {
        if self.cfg.schedule != Schedule::Plateau || !metric.is_finite() {
            return None;
        }
        let p = &mut self.plateau;
        if p.best.observe(metric, self.cfg.min_delta) || p.best.wait < self.cfg.patience as u64 {
            return None;
        }
        p.best.wait = 0;
        let floor = self.cfg.min_lr / self.base;
        if p.scale <= floor {
            return None;
        }
        p.scale = (p.scale * self.cfg.factor).max(floor);
        Some((self.base * p.scale).max(self.cfg.min_lr))
    }
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
    fn an_asynchronous_server_counts_steps_not_updates() {
        let mut s = sched(&[("schedule", "\"step\""), ("decay_steps", "10")]);
        s.set_updates_per_step(3);
        assert_eq!(s.at(29), 0.1);
        assert_eq!(s.at(30), 0.05);
    }
}
