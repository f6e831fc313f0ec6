//! The sweep in TensorBoard's HParams tab (`output.tensorboard`, on by default): the
//! experiment (the space's keys with their domains, the metric ranked by) at the sweep's folder,
//! and each trial's session (its values; when it ends its status, the epochs it trained and the
//! epoch it was halved at) in its `trials/NNNN/tensorboard/` folder, beside its curves. Written
//! by the scheduler (world rank 0) whenever a trial's record changes; a resumed sweep rewrites
//! them from its records.
//!
//! Must not: decide anything about the trials (`scheduler.rs` does) or fail the sweep over
//! these files (a write that fails is a warning: the records in sweep.jsonl are what counts).

use super::scheduler::{Status, Trial};
use crate::config::{Range, SweepCfg};
use crate::metrics::tensorboard::hparams::{self as hp, Domain, HParamInfo, Interval, MetricInfo, MetricName};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// TensorBoard's run and tag of a metric of metrics.jsonl (`val_loss`: `validation`,
/// `epoch_loss`), as the trials' event files hold it.
pub fn metric_name(metric: &str) -> MetricName {
    let (group, rest) = match metric.split_once('_') {
        Some(("val", r)) => ("validation", r),
        Some((g, r)) => (g, r),
        None => ("", metric),
    };
    MetricName { group: group.into(), tag: format!("epoch_{rest}") }
}

/// The scalars each ended session holds in its own run, and what TensorBoard shows for them.
const EPOCHS: &str = "sweep/epochs";
const HALVED_AT: &str = "sweep/halved_at_epoch";

/// The experiment for a sweep over `cfg`'s space, named `name`, at `dir`.
pub fn experiment(dir: &Path, name: &str, cfg: &SweepCfg) {
    let hparams = cfg
        .space
        .iter()
        .map(|(key, r)| {
            let (r#type, domain) = match r {
                Range::Choice(v) => {
                    let values: Vec<hp::PbValue> = v
                        .iter()
                        .map(|x| hp::pb_value(&serde_json::to_value(x).expect("a TOML value is JSON")))
                        .collect();
                    (hp::data_type(&values), Domain::Discrete(hp::ListValue { values }))
                }
                Range::Uniform(lo, hi) | Range::LogUniform(lo, hi) => (3, interval(*lo, *hi)),
                Range::Int(lo, hi) | Range::LogInt(lo, hi) => (3, interval(*lo as f64, *hi as f64)),
            };
            HParamInfo { name: key.clone(), r#type, domain: Some(domain) }
        })
        .collect();
    let mut metrics = vec![MetricInfo {
        name: Some(metric_name(&cfg.metric)),
        display_name: cfg.metric.clone(),
        dataset_type: if cfg.metric.starts_with("val_") { 2 } else { 0 },
    }];
    if cfg.metric != "train_loss" {
        metrics.push(MetricInfo {
            name: Some(metric_name("train_loss")),
            display_name: "train_loss".into(),
            dataset_type: 1,
        });
    }
    for (tag, shown) in [(EPOCHS, "epochs"), (HALVED_AT, "halved at epoch (0: not halved)")] {
        let name = Some(MetricName { group: String::new(), tag: tag.into() });
        metrics.push(MetricInfo { name, display_name: shown.into(), dataset_type: 0 });
    }
    if let Err(e) = hp::write_experiment(dir, name, hparams, metrics) {
        log::warn!("sweep: TensorBoard's HParams experiment not written: {e}");
    }
}

fn interval(min_value: f64, max_value: f64) -> Domain {
    Domain::Interval(Interval { min_value, max_value })
}

/// The trials' sessions as last written: what each said (status, epochs) and when it started.
pub struct Sessions {
    on: bool,
    written: BTreeMap<usize, (Status, usize, f64)>,
}

impl Sessions {
    /// Sessions of trials in their own folders; `on`: `output.tensorboard`.
    pub fn new(on: bool) -> Sessions {
        Sessions { on, written: BTreeMap::new() }
    }

    /// Write the session of every trial that started and whose status or epochs changed
    /// since it was last written here.
    pub fn sync(&mut self, trials: &[Trial]) {
        if !self.on {
            return;
        }
        for t in trials.iter().filter(|t| t.status != Status::Pending) {
            let start = match self.written.get(&t.trial) {
                Some(&(s, e, _)) if s == t.status && e == t.epochs => continue,
                Some(&(_, _, start)) => start,
                None => crate::metrics::tensorboard::now(),
            };
            let ended = match t.status {
                Status::Completed | Status::Stopped | Status::Failed => Some(hp::Ended {
                    status: if t.status == Status::Failed { hp::Status::Failure } else { hp::Status::Success },
                    epochs: t.epochs,
                    scalars: vec![
                        (EPOCHS.into(), t.epochs as f64),
                        (HALVED_AT.into(), if t.status == Status::Stopped { t.epochs as f64 } else { 0.0 }),
                    ],
                }),
                _ => None,
            };
            let values = t.params.iter().map(|(k, v)| (k.clone(), hp::pb_value(v))).collect();
            let dir = PathBuf::from(&t.dir).join("tensorboard");
            match hp::write_session(&dir, &format!("trial {:04}", t.trial), values, start, ended) {
                Ok(()) => {
                    self.written.insert(t.trial, (t.status, t.epochs, start));
                }
                Err(e) => log::warn!("sweep: trial {}'s TensorBoard HParams session not written: {e}", t.trial),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_map_to_the_runs_and_tags_the_trials_write() {
        let m = |s: &str| {
            let n = metric_name(s);
            (n.group, n.tag)
        };
        assert_eq!(m("val_loss"), ("validation".into(), "epoch_loss".into()));
        assert_eq!(m("val_top5_accuracy"), ("validation".into(), "epoch_top5_accuracy".into()));
        assert_eq!(m("test_r2"), ("test".into(), "epoch_r2".into()));
        assert_eq!(m("train_accuracy"), ("train".into(), "epoch_accuracy".into()));
    }
}
