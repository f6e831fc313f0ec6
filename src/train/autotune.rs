//! `distribution.autotune` (Horovod's HOROVOD_AUTOTUNE, by exhaustive timing instead of its
//! Bayesian search): after a few warm-up steps, each candidate fusion setting (bucket size,
//! a smaller first bucket: when communication starts) runs `autotune_steps` training steps,
//! and when the ranks span several nodes the fastest once more with the other all-reduce
//! (flat or hierarchical);
//! its score is the median step time, the slowest rank's (one `MPI_Allreduce` max per
//! candidate, so every rank sees the same scores and picks the same setting, which keeps
//! the data group's plans equal). The fastest is kept for the rest of the run, the candidates
//! and the choice are logged, and rank 0 writes them to OUTPUT_DIR/autotune.json; a later run
//! in the same output.dir with the same model and rank count takes the choice from there.
//! The steps taken while tuning are ordinary training steps (bucketing only changes which
//! gradients travel together, not their sums).
//!
//! Must not: switch settings on one rank alone (the decision comes from collective figures).

use crate::config::Job;
use crate::error::{Error, Result};
use crate::parallel::Channel;
use log::info;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file a run's tuning is kept in.
pub const FILE: &str = "autotune.json";
/// Untimed steps before the first candidate (caches, first allocations, the loader's start).
const WARMUP: usize = 3;
const MIB: f64 = 1048576.0;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub fusion_threshold_mb: f64,
    pub first_bucket_mb: f64,
    /// The hierarchical all-reduce (`distribution.hierarchical`).
    #[serde(default)]
    pub hierarchical: bool,
}

impl Setting {
    pub fn bytes(&self) -> (usize, usize) {
        ((self.fusion_threshold_mb * MIB) as usize, (self.first_bucket_mb * MIB) as usize)
    }
}

/// The candidates: buckets of 1/4 to 64 MiB, and above 1 MiB also with a 1 MiB first bucket.
pub fn candidates() -> Vec<Setting> {
    let mut v = Vec::new();
    for t in [0.25, 1.0, 4.0, 16.0, 64.0] {
        v.push(Setting { fusion_threshold_mb: t, first_bucket_mb: 0.0, hierarchical: false });
        if t > 1.0 {
            v.push(Setting { fusion_threshold_mb: t, first_bucket_mb: 1.0, hierarchical: false });
        }
    }
    v
}

/// What autotune.json holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Record {
    pub layers: Vec<usize>,
    pub ranks: usize,
    pub steps_per_candidate: usize,
    /// (setting, median step seconds of the slowest rank), in the order tried.
    pub candidates: Vec<(Setting, f64)>,
    pub chosen: Setting,
    /// The job file's own setting, timed as the first candidate of the search.
    pub configured: Setting,
}

pub struct Autotune {
    todo: Vec<Setting>,
    /// Index into `todo` of the candidate being timed (None: warming up).
    current: Option<usize>,
    steps: usize,
    times: Vec<f64>,
    scores: Vec<f64>,
    seen: usize,
    /// Set once a choice is made (tuned or reused): the last switch to apply.
    chosen: Option<Setting>,
    done: bool,
    /// Whether the ranks span several nodes: then the fastest fusion setting is also timed with
    /// the other all-reduce (flat or hierarchical), once.
    try_other_allreduce: bool,
    path: PathBuf,
    layers: Vec<usize>,
    ranks: usize,
    configured: Setting,
}

/// What the training loop does after a step.
pub enum Switch {
    To(Setting),
    Nothing,
}

impl Autotune {
    /// None when `distribution.autotune` is off. Collective over `trainers`: rank 0 reads a
    /// earlier run's autotune.json and every rank gets its choice.
    pub fn new(
        job: &Job,
        out_dir: &Path,
        trainers: &Channel,
        rank: usize,
        ranks: usize,
        multi_node: bool,
    ) -> Result<Option<Autotune>> {
        let d = &job.distribution;
        if !d.autotune {
            return Ok(None);
        }
        let path = out_dir.join(FILE);
        let configured = Setting {
            fusion_threshold_mb: d.fusion_threshold_mb,
            first_bucket_mb: d.first_bucket_mb,
            hierarchical: d.hierarchical,
        };
        let mut todo = vec![configured];
        let same = |a: &Setting, b: &Setting| {
            a.fusion_threshold_mb == b.fusion_threshold_mb && a.first_bucket_mb == b.first_bucket_mb
        };
        todo.extend(
            candidates()
                .into_iter()
                .map(|c| Setting { hierarchical: d.hierarchical, ..c })
                .filter(|c| !same(c, &configured)),
        );
        // The other all-reduce needs exact float32 sums (the hierarchical one refuses the rest).
        let other_ok =
            d.compression == crate::config::Compression::None && d.reduction == crate::config::Reduction::Average;
        let mut a = Autotune {
            todo,
            current: None,
            steps: d.autotune_steps,
            times: Vec::new(),
            scores: Vec::new(),
            seen: 0,
            chosen: None,
            done: false,
            try_other_allreduce: multi_node && other_ok,
            path,
            layers: job.model.layers.clone(),
            ranks,
            configured,
        };
        // [found, threshold, first] from rank 0's reading of an earlier run's file.
        let mut reuse = [0.0f64; 4];
        if rank == 0 {
            if let Some(r) = a.earlier()? {
                let c = r.chosen;
                reuse = [1.0, c.fusion_threshold_mb, c.first_bucket_mb, f64::from(u8::from(c.hierarchical))];
                info!(
                    "autotune: reusing {} (fusion_threshold_mb = {}, first_bucket_mb = {}, hierarchical = {}) from an \
                     earlier run; delete it to tune again",
                    a.path.display(),
                    c.fusion_threshold_mb,
                    c.first_bucket_mb,
                    c.hierarchical
                );
            } else {
                info!(
                    "autotune: timing {} fusion settings over {} steps each after {WARMUP} warm-up steps (the job's \
                     own first), then keeping the fastest",
                    a.todo.len(),
                    a.steps
                );
            }
        }
        trainers.broadcast_f64(&mut reuse);
        if reuse[0] == 1.0 {
            a.chosen = Some(Setting {
                fusion_threshold_mb: reuse[1],
                first_bucket_mb: reuse[2],
                hierarchical: reuse[3] == 1.0,
            });
        }
        Ok(Some(a))
    }

    /// An earlier run's record in output.dir, when it fits this run (same layers and ranks).
    fn earlier(&self) -> Result<Option<Record>> {
        let Ok(text) = std::fs::read_to_string(&self.path) else { return Ok(None) };
        let r: Record = serde_json::from_str(&text).map_err(|e| {
            Error::config(
                self.path.display().to_string(),
                "distribution.autotune",
                format!("an earlier run's {FILE} cannot be read ({e}); delete it to tune again"),
            )
        })?;
        if r.layers != self.layers || r.ranks != self.ranks {
            info!(
                "autotune: {} was tuned for layers {:?} on {} ranks, not this run's {:?} on {}: tuning again",
                self.path.display(),
                r.layers,
                r.ranks,
                self.layers,
                self.ranks
            );
            return Ok(None);
        }
        Ok(Some(r))
    }

    /// After each step, with its wall time: whether to switch to another setting before the
    /// next. Collective over `trainers` at the end of each candidate (every rank calls this
    /// after every step, so they all reach it at the same step).
    pub fn after_step(&mut self, secs: f64, trainers: &Channel, rank: usize) -> Result<Switch> {
        if self.done {
            return Ok(Switch::Nothing);
        }
        if let Some(c) = self.chosen {
            self.done = true;
            return Ok(if c == self.configured { Switch::Nothing } else { Switch::To(c) });
        }
        self.seen += 1;
        let Some(i) = self.current else {
            if self.seen < WARMUP {
                return Ok(Switch::Nothing);
            }
            // Warm-up over: the job's own setting is already in place (candidate 0).
            self.current = Some(0);
            self.seen = 0;
            return Ok(Switch::Nothing);
        };
        // The first step of each candidate after a switch makes its buckets: not timed.
        if self.seen > 1 || i == 0 {
            self.times.push(secs);
        }
        if self.seen < self.steps {
            return Ok(Switch::Nothing);
        }
        let mut t = std::mem::take(&mut self.times);
        t.sort_by(f64::total_cmp);
        let median = t[t.len() / 2];
        self.scores.push(trainers.all_reduce_max_f64(median));
        self.seen = 0;
        let best =
            (0..self.scores.len()).min_by(|&a, &b| self.scores[a].total_cmp(&self.scores[b])).expect("candidates");
        if i + 1 == self.todo.len() && self.try_other_allreduce {
            // Every fusion setting timed: the fastest once more with the other all-reduce.
            self.try_other_allreduce = false;
            let b = self.todo[best];
            self.todo.push(Setting { hierarchical: !b.hierarchical, ..b });
        }
        if i + 1 < self.todo.len() {
            self.current = Some(i + 1);
            return Ok(Switch::To(self.todo[i + 1]));
        }
        self.done = true;
        let chosen = self.todo[best];
        if rank == 0 {
            self.report(chosen)?;
        }
        Ok(Switch::To(chosen))
    }

    /// Rank 0: the log lines and autotune.json.
    fn report(&self, chosen: Setting) -> Result<()> {
        let fastest = self.scores.iter().copied().fold(f64::INFINITY, f64::min);
        for (s, t) in self.todo.iter().zip(&self.scores) {
            info!(
                "autotune: fusion_threshold_mb {:>5} first_bucket_mb {:>4}{}: {:.3} ms/step ({:+.1} % of the fastest){}",
                s.fusion_threshold_mb,
                s.first_bucket_mb,
                if s.hierarchical { " hierarchical" } else { "" },
                t * 1e3,
                (t / fastest - 1.0) * 100.0,
                if *s == self.configured { "  (the job's setting)" } else { "" }
            );
        }
        let own = self.scores[0];
        info!(
            "autotune: keeping fusion_threshold_mb = {}, first_bucket_mb = {}, hierarchical = {} ({:.3} ms/step against \
             the job's {:.3}); written to {}",
            chosen.fusion_threshold_mb,
            chosen.first_bucket_mb,
            chosen.hierarchical,
            fastest * 1e3,
            own * 1e3,
            self.path.display()
        );
        let r = Record {
            layers: self.layers.clone(),
            ranks: self.ranks,
            steps_per_candidate: self.steps,
            candidates: self.todo.iter().copied().zip(self.scores.iter().copied()).collect(),
            chosen,
            configured: self.configured,
        };
        let text = serde_json::to_string_pretty(&r).expect("a record serializes");
        std::fs::write(&self.path, text + "\n").map_err(|e| Error::io(&self.path, "writing the autotune record", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_distinct_and_bounded() {
        let c = candidates();
        assert_eq!(c.len(), 8);
        for (i, a) in c.iter().enumerate() {
            assert!(c[i + 1..].iter().all(|b| b != a));
            assert!(a.first_bucket_mb < a.fusion_threshold_mb || a.first_bucket_mb == 0.0);
        }
        assert_eq!(
            Setting { fusion_threshold_mb: 4.0, first_bucket_mb: 1.0, hierarchical: false }.bytes(),
            (4 << 20, 1 << 20)
        );
        // A record of an earlier version (no hierarchical) still reads.
        let s: Setting = serde_json::from_str(r#"{"fusion_threshold_mb": 4.0, "first_bucket_mb": 0.0}"#).unwrap();
        assert!(!s.hierarchical);
    }
}
