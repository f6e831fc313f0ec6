//! The monitored metric at each epoch's end (`Job::monitor`: early_stopping.monitor, else
//! val_loss with validation data, else train_loss): whether it improved by more than
//! min_delta, the best epoch (for `output.keep_best`), and whether early stopping ends the run
//! (Keras' EarlyStopping: `patience` epochs without improvement, the first `start_from_epoch`
//! epochs not watched, a `baseline` to beat). Its state travels in checkpoints through
//! `TrainerState`.
//!
//! Must not: write files or talk to other ranks (the run loop does); every rank computes the
//! same verdict from the same summed metrics.

use super::trainer::TrainerState;
use crate::config::Job;
use crate::metrics::EpochMetrics;
use crate::optim::Best;

pub(super) struct Watch {
    pub name: String,
    /// Accuracy is better high: its value is negated, so lower is better throughout.
    negate: bool,
    min_delta: f64,
    /// Early stopping's patience (None: no early stopping).
    patience: Option<u64>,
    /// Epochs 1..=start_from are not watched.
    start_from: usize,
    /// The value to beat, lower is better (accuracy negated).
    pub baseline: Option<f64>,
    pub best: Best,
    pub best_epoch: usize,
}

/// What an epoch's end decided.
pub(super) struct Verdict {
    /// The lower-is-better value (accuracy negated), if the epoch produced the metric.
    pub value: Option<f64>,
    pub improved: bool,
    pub stop: bool,
}

impl Watch {
    pub fn new(job: &Job, state: &TrainerState) -> Watch {
        let name = job.monitor().to_string();
        let e = job.training.early_stopping.as_ref();
        let negate = crate::config::higher_is_better(&name);
        Watch {
            negate,
            name,
            min_delta: e.map_or(0.0, |e| e.min_delta),
            patience: e.map(|e| e.patience as u64),
            start_from: e.map_or(0, |e| e.start_from_epoch),
            baseline: e.and_then(|e| e.baseline).map(|b| if negate { -b } else { b }),
            best: state.best,
            best_epoch: state.best_epoch,
        }
    }

    fn value(&self, m: &EpochMetrics) -> Option<f64> {
        let v = match self.name.as_str() {
            "train_loss" => Some(m.train_loss),
            "val_loss" => m.val_loss,
            "val_accuracy" => m.val_accuracy,
            "val_balanced_accuracy" => m.val_balanced_accuracy,
            "val_macro_f1" => m.val_macro_f1,
            "val_auc" => m.val_auc,
            "val_average_precision" => m.val_average_precision,
            _ => None,
        }?;
        v.is_finite().then_some(if self.negate { -v } else { v })
    }

    pub fn epoch_end(&mut self, m: &EpochMetrics) -> Verdict {
        let Some(v) = self.value(m) else { return Verdict { value: None, improved: false, stop: false } };
        if m.epoch <= self.start_from {
            return Verdict { value: Some(v), improved: false, stop: false };
        }
        let wait = self.best.wait;
        let improved = self.best.observe(v, self.min_delta);
        if improved {
            self.best_epoch = m.epoch;
            // A new best that does not beat the baseline counts on toward the patience.
            if !self.beats_baseline(v) {
                self.best.wait = wait + 1;
            }
        }
        // As Keras: an epoch that set a new best does not stop the run.
        let stop = !improved && self.patience.is_some_and(|p| self.best.wait >= p);
        Verdict { value: Some(v), improved, stop }
    }

    /// Whether lower-is-better `v` beats the baseline by more than min_delta (true without one).
    pub fn beats_baseline(&self, v: f64) -> bool {
        self.baseline.is_none_or(|b| v < b - self.min_delta)
    }

    /// The monitored value as the metric reads (accuracy not negated).
    pub fn shown(&self, v: f64) -> f64 {
        if self.negate {
            -v
        } else {
            v
        }
    }

    pub fn save(&self, into: &mut TrainerState) {
        (into.best, into.best_epoch) = (self.best, self.best_epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(epoch: usize, val_loss: f64) -> EpochMetrics {
        EpochMetrics {
            epoch,
            train_loss: 1.0,
            train_accuracy: None,
            train_top5_accuracy: None,
            train_mae: None,
            train_rmse: None,
            train_r2: None,
            train_per_output: None,
            test_loss: None,
            test_accuracy: None,
            test_top5_accuracy: None,
            val_top5_accuracy: None,
            test_balanced_accuracy: None,
            test_macro_f1: None,
            val_balanced_accuracy: None,
            val_macro_f1: None,
            test_auc: None,
            test_average_precision: None,
            val_auc: None,
            val_average_precision: None,
            val_loss: Some(val_loss),
            val_accuracy: Some(1.0 - val_loss),
            test_mae: None,
            test_rmse: None,
            test_r2: None,
            test_per_output: None,
            val_mae: None,
            val_rmse: None,
            val_r2: None,
            val_per_output: None,
            samples_per_sec: 0.0,
            epoch_seconds: 0.0,
            exposed_comm_ms_per_step: 0.0,
            steps: 1,
            samples: 1,
            ranks: 1,
            grad_norm: None,
            lr: 0.1,
            pipeline_bubble: None,
        }
    }

    fn job(extra: &str) -> Job {
        let src = format!("[data]\ntrain = \"t.h5\"\nvalidation_split = 0.2\n[model]\nlayers = [2, 2]\n{extra}");
        Job::parse("test.toml", &src, &[]).unwrap()
    }

    #[test]
    fn stops_after_patience_epochs_without_improvement_by_min_delta() {
        let j = job("[training]\nearly_stopping = { monitor = \"val_loss\", patience = 2, min_delta = 0.05 }\n");
        let mut w = Watch::new(&j, &TrainerState::default());
        let seq = [0.9, 0.8, 0.78, 0.7, 0.69, 0.68];
        let verdicts: Vec<(bool, bool)> = seq
            .iter()
            .enumerate()
            .map(|(e, &v)| {
                let r = w.epoch_end(&metrics(e + 1, v));
                (r.improved, r.stop)
            })
            .collect();
        // 0.78 is not 0.05 below 0.8; 0.7 is; 0.69 and 0.68 are not: stop after the second.
        assert_eq!(
            verdicts,
            [(true, false), (true, false), (false, false), (true, false), (false, false), (false, true)]
        );
        assert_eq!((w.best.value, w.best_epoch), (Some(0.7), 4));
        // Through a checkpoint: the same state.
        let mut s = TrainerState::default();
        w.save(&mut s);
        let s2 = TrainerState::from_json(&s.to_json(), "c.h5".as_ref()).unwrap();
        let w2 = Watch::new(&j, &s2);
        assert_eq!((w2.best, w2.best_epoch), (w.best, w.best_epoch));
    }

    /// Each epoch's (improved, stop) for val_loss `seq` under early stopping `cfg`.
    fn verdicts(cfg: &str, seq: &[f64]) -> Vec<(bool, bool)> {
        let j = job(&format!("[training]\nearly_stopping = {{ {cfg} }}\n"));
        let mut w = Watch::new(&j, &TrainerState::default());
        seq.iter().enumerate().map(|(e, &v)| w.epoch_end(&metrics(e + 1, v))).map(|r| (r.improved, r.stop)).collect()
    }

    #[test]
    fn start_from_epoch_leaves_the_first_epochs_unwatched() {
        let seq = [0.5, 0.9, 0.8, 0.85];
        // Watched from the start: 0.5 is the best, 0.9 ends the run.
        assert_eq!(verdicts("patience = 1", &seq)[..2], [(true, false), (false, true)]);
        // Epochs 1 and 2 unwatched (Keras' start_from_epoch = 2): 0.8 is the first best.
        assert_eq!(
            verdicts("patience = 1, start_from_epoch = 2", &seq),
            [(false, false), (false, false), (true, false), (false, true)]
        );
    }

    #[test]
    fn a_baseline_not_beaten_lets_the_patience_run_on() {
        let seq = [0.9, 0.8, 0.85, 0.86];
        // Without a baseline every new best restarts the count: stop at epoch 4.
        assert_eq!(verdicts("patience = 2", &seq), [(true, false), (true, false), (false, false), (false, true)]);
        // Baseline 0.6: the bests 0.9 and 0.8 do not beat it, so the count runs on (as Keras'
        // EarlyStopping(baseline=0.6)): stop at epoch 3.
        assert_eq!(verdicts("patience = 2, baseline = 0.6", &seq)[..3], [(true, false), (true, false), (false, true)]);
        // Beaten (0.55 < 0.6): the count restarts as without one.
        let beat = [0.9, 0.55, 0.58, 0.57];
        assert_eq!(
            verdicts("patience = 2, baseline = 0.6", &beat),
            [(true, false), (true, false), (false, false), (false, true)]
        );
        // Accuracy: higher is better, the baseline too (val_accuracy here is 1 − val_loss).
        // Accuracies 0.6, 0.5, 0.55, 0.52: 0.6 beats a baseline of 0.55 (stop at epoch 3, the
        // patience of 2 counted from it), not one of 0.65 (the count runs on: stop at epoch 2).
        let acc = [0.4, 0.5, 0.45, 0.48];
        let beaten = verdicts("monitor = \"val_accuracy\", patience = 2, baseline = 0.55", &acc);
        assert_eq!(beaten[..3], [(true, false), (false, false), (false, true)]);
        let missed = verdicts("monitor = \"val_accuracy\", patience = 2, baseline = 0.65", &acc);
        assert_eq!(missed[..2], [(true, false), (false, true)]);
    }

    #[test]
    fn accuracy_is_better_high() {
        let j = job("[training]\nearly_stopping = { monitor = \"val_accuracy\", patience = 1 }\n");
        let mut w = Watch::new(&j, &TrainerState::default());
        assert!(w.epoch_end(&metrics(1, 0.5)).improved); // accuracy 0.5
        assert!(w.epoch_end(&metrics(2, 0.4)).improved); // accuracy 0.6
        let v = w.epoch_end(&metrics(3, 0.45)); // accuracy 0.55: worse
        assert!(!v.improved && v.stop);
        assert_eq!(w.shown(w.best.value.unwrap()), 0.6);
    }
}
