//! Which trial a free group trains next, and to how many epochs: asynchronous successive
//! halving (ASHA, Li et al. 2020) over rungs at r·ηᵏ epochs (and training.epochs last), in one
//! bracket (`asha`), in several with first rungs r·ηˢ dealt trials in turn (`hyperband`, as
//! Ray Tune's asynchronous Hyperband), or one rung at the last epoch (`none`).
//!
//! At a rung (`sweep.rung_rule`): `continue` (the default, Ray Tune's ASHA) decides the moment
//! a trial reports it: it goes on to the next rung when its metric is at least the cutoff of
//! the values recorded at that rung before it (numpy's linear percentile at 1 − 1/η, as Ray's
//! `nanpercentile`), and the first to arrive always goes on; else it stops there. `promote`
//! (Li et al.'s promotion rule) pauses it, and a paused trial goes on when it is among the best
//! ⌊n/η⌋ of the n trials that reached the rung so far. A free group takes a trial that goes on
//! first (highest rung first), else a new trial, else waits while trials still run.
//!
//! The state is the trials' records (`sweep.jsonl`): a resumed sweep rebuilds it from them,
//! and trials that were running resume from their checkpoints before anything else.
//!
//! Must not: talk to ranks or touch files (pure; `mod.rs` and `record.rs` do).

use crate::config::{Goal, RungRule, SchedulerKind, SweepCfg};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not started.
    Pending,
    /// A group trains it (or did when the sweep stopped: it resumes from its checkpoint).
    Running,
    /// Reached its rung's epochs; goes on if promoted (or, `continue`, is about to).
    Paused,
    /// Trained every epoch (or early stopping ended it).
    Completed,
    /// Halved away at a rung: not in the top 1/η there (`continue`), or paused there when the
    /// sweep ended (`promote`).
    Stopped,
    /// Its run failed (the reason is kept); the sweep went on.
    Failed,
}

/// One trial: what `sweep.jsonl` holds per line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Trial {
    pub trial: usize,
    pub status: Status,
    /// The trial's values (`--set` keys, and model.width/model.depth).
    pub params: BTreeMap<String, serde_json::Value>,
    pub bracket: usize,
    /// The epochs it trains (or trained) to this time.
    pub target: usize,
    /// Epochs done.
    pub epochs: usize,
    /// The metric at each rung it reached (epoch → value; null where it was not finite).
    pub rungs: BTreeMap<usize, Option<f64>>,
    /// The metric after its last epoch.
    pub metric: Option<f64>,
    /// Seconds of training, all its runs together.
    pub seconds: f64,
    pub ranks: usize,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its output folder (metrics.jsonl, checkpoints, weights.h5).
    pub dir: String,
}

/// How a trial's run ended, from its group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Ended {
    /// Trained to its target (a rung below the last): paused with a checkpoint.
    Paused,
    /// Trained every epoch, or early stopping ended it.
    Completed,
    Failed(String),
    /// A signal stopped it (stop checkpoint written): it resumes when the sweep does.
    Interrupted,
}

/// A group's report of one run of a trial.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub trial: usize,
    pub ended: Ended,
    /// The metric after each epoch done so far (epoch, value; None where metrics.jsonl has
    /// none).
    pub curve: Vec<(usize, Option<f64>)>,
    pub seconds: f64,
}

/// What a free group does next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Next {
    /// Train `trial` to `target` epochs (from its checkpoint when `resume`).
    Run { trial: usize, target: usize, resume: bool },
    /// Nothing to hand out until a running trial reports.
    Wait,
    /// The sweep is over for this group.
    Done,
}

pub struct Scheduler {
    goal: Goal,
    eta: usize,
    rule: RungRule,
    /// Trials that go on from their rung (`continue`), with the next rung, in arrival order.
    going_on: Vec<(usize, usize)>,
    /// Each bracket's rungs, in epochs, ascending; the last is training.epochs.
    brackets: Vec<Vec<usize>>,
    pub trials: Vec<Trial>,
    /// Trials to resume first (running when the sweep stopped).
    resume: Vec<usize>,
}

/// Each bracket's rungs: r·ηˢ·ηᵏ below `epochs`, then `epochs`.
pub fn brackets(cfg: &SweepCfg, epochs: usize) -> Vec<Vec<usize>> {
    let rungs_from = |first: usize| {
        let mut v = Vec::new();
        let mut e = first;
        while e < epochs {
            v.push(e);
            e = e.saturating_mul(cfg.eta);
        }
        v.push(epochs);
        v
    };
    match cfg.scheduler {
        SchedulerKind::None => vec![vec![epochs]],
        SchedulerKind::Asha => vec![rungs_from(cfg.min_epochs)],
        SchedulerKind::Hyperband => {
            // s_max = ⌊log_η(epochs / r)⌋: the brackets whose first rung is below the last.
            let mut s_max = 0;
            while cfg.min_epochs.saturating_mul(cfg.eta.pow(s_max as u32 + 1)) <= epochs {
                s_max += 1;
            }
            let n = if cfg.brackets == 0 { s_max + 1 } else { cfg.brackets.min(s_max + 1) };
            (0..n).map(|s| rungs_from(cfg.min_epochs * cfg.eta.pow(s as u32))).collect()
        }
    }
}

impl Scheduler {
    /// A new sweep's trials, all pending: `params[i]` trial i's values; `dir(i)` its folder.
    pub fn new(
        cfg: &SweepCfg,
        epochs: usize,
        params: Vec<BTreeMap<String, serde_json::Value>>,
        ranks: usize,
        dir: impl Fn(usize) -> String,
    ) -> Scheduler {
        let brackets = brackets(cfg, epochs);
        let trials = params
            .into_iter()
            .enumerate()
            .map(|(i, p)| Trial {
                trial: i,
                status: Status::Pending,
                params: p,
                bracket: i % brackets.len(),
                target: 0,
                epochs: 0,
                rungs: BTreeMap::new(),
                metric: None,
                seconds: 0.0,
                ranks,
                reason: None,
                dir: dir(i),
            })
            .collect();
        Scheduler {
            goal: cfg.goal(),
            eta: cfg.eta,
            rule: cfg.rung_rule,
            going_on: Vec::new(),
            brackets,
            trials,
            resume: Vec::new(),
        }
    }

    /// Continue from the records of an earlier run of this sweep (`sweep.jsonl`): trials that
    /// were running resume first, in trial order.
    pub fn restore(&mut self, saved: Vec<Trial>) {
        for t in saved {
            let i = t.trial;
            if i < self.trials.len() {
                self.trials[i] = t;
            }
        }
        self.resume = self.trials.iter().filter(|t| t.status == Status::Running).map(|t| t.trial).collect();
        // `continue`: a trial paused at a rung (the sweep stopped before it went on, or an
        // earlier run used `promote`) is decided now, against every other trial there.
        if self.rule == RungRule::Continue {
            let paused: Vec<usize> =
                self.trials.iter().filter(|t| t.status == Status::Paused).map(|t| t.trial).collect();
            for i in paused {
                self.decide(i);
            }
        }
    }

    pub fn rungs(&self, bracket: usize) -> &[usize] {
        &self.brackets[bracket]
    }

    /// The next work for a free group, marked running.
    pub fn next(&mut self) -> Next {
        if !self.resume.is_empty() {
            let i = self.resume.remove(0);
            let t = &self.trials[i];
            return Next::Run { trial: i, target: t.target, resume: true };
        }
        if !self.going_on.is_empty() {
            let (i, target) = self.going_on.remove(0);
            let t = &mut self.trials[i];
            t.status = Status::Running;
            t.target = target;
            return Next::Run { trial: i, target, resume: true };
        }
        if let Some((i, target)) = self.promotion() {
            let t = &mut self.trials[i];
            t.status = Status::Running;
            t.target = target;
            return Next::Run { trial: i, target, resume: true };
        }
        if let Some(t) = self.trials.iter_mut().find(|t| t.status == Status::Pending) {
            t.status = Status::Running;
            t.target = self.brackets[t.bracket][0];
            return Next::Run { trial: t.trial, target: t.target, resume: false };
        }
        if self.trials.iter().any(|t| t.status == Status::Running) {
            Next::Wait
        } else {
            Next::Done
        }
    }

    /// `continue`'s decision on trial `i`, paused at a rung: it goes on to the next rung when
    /// its metric is at least as good as the cutoff of the others recorded at that rung (the
    /// linear percentile at 1/η of their badness; none recorded: it goes on), else it stops.
    /// A non-finite metric stops. The log's line on it.
    fn decide(&mut self, i: usize) -> String {
        let (b, at) = (self.trials[i].bracket, self.trials[i].epochs);
        let rungs = &self.brackets[b];
        let Some(k) = rungs.iter().position(|&r| r == at).filter(|&k| k + 1 < rungs.len()) else {
            return String::new();
        };
        let next = rungs[k + 1];
        let mine = self.badness(self.trials[i].rungs.get(&at).copied().flatten().unwrap_or(f64::NAN));
        let mut others: Vec<f64> = self
            .trials
            .iter()
            .filter(|t| t.bracket == b && t.trial != i)
            .filter_map(|t| t.rungs.get(&at).copied().flatten())
            .map(|m| self.badness(m))
            .filter(|v| v.is_finite())
            .collect();
        others.sort_by(f64::total_cmp);
        let cutoff = percentile(&others, 1.0 / self.eta as f64);
        let goes_on = mine.is_finite() && cutoff.is_none_or(|c| mine <= c);
        if goes_on {
            self.going_on.push((i, next));
        } else {
            self.trials[i].status = Status::Stopped;
        }
        let n = others.len();
        match (goes_on, n) {
            (true, 0) => format!("goes on to epoch {next}: the first at epoch {at}"),
            (true, _) => {
                format!("goes on to epoch {next}: in the top 1/{} of the {} recorded at epoch {at}", self.eta, n + 1)
            }
            (false, _) if !mine.is_finite() => format!("stops at epoch {at}: its metric is not finite"),
            (false, _) => format!("stops at epoch {at}: not in the top 1/{} of the {} recorded there", self.eta, n + 1),
        }
    }

    /// A paused trial among the best ⌊n/η⌋ of its rung, highest rung first: (trial, next rung).
    fn promotion(&self) -> Option<(usize, usize)> {
        if self.rule != RungRule::Promote {
            return None;
        }
        let top_rung = self.brackets.iter().map(|r| r.len()).max().unwrap_or(0);
        for k in (0..top_rung.saturating_sub(1)).rev() {
            for (b, rungs) in self.brackets.iter().enumerate() {
                if k + 1 >= rungs.len() {
                    continue;
                }
                let at = rungs[k];
                let mut reached: Vec<(f64, usize)> = self
                    .trials
                    .iter()
                    .filter(|t| t.bracket == b)
                    .filter_map(|t| t.rungs.get(&at).map(|&m| (self.badness(m.unwrap_or(f64::NAN)), t.trial)))
                    .collect();
                reached.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let top = reached.len() / self.eta;
                let found = reached[..top].iter().find(|(_, i)| {
                    let t = &self.trials[*i];
                    t.status == Status::Paused && t.epochs == at
                });
                if let Some(&(_, i)) = found {
                    return Some((i, rungs[k + 1]));
                }
            }
        }
        None
    }

    /// Lower is better; a non-finite metric is the worst.
    fn badness(&self, m: f64) -> f64 {
        let b = if self.goal == Goal::Maximize { -m } else { m };
        if b.is_finite() {
            b
        } else {
            f64::INFINITY
        }
    }

    /// A group's report on `r.trial`; what became of it at its rung (`continue`), for the log
    /// (empty otherwise).
    pub fn report(&mut self, r: Report) -> String {
        let rungs = self.brackets[self.trials[r.trial].bracket].clone();
        let t = &mut self.trials[r.trial];
        t.seconds += r.seconds;
        if let Some(&(e, m)) = r.curve.last() {
            t.epochs = e;
            t.metric = m.filter(|v| v.is_finite());
        }
        for &(e, m) in &r.curve {
            if rungs.contains(&e) && e <= t.target {
                t.rungs.entry(e).or_insert(m.filter(|v| v.is_finite()));
            }
        }
        match r.ended {
            Ended::Paused => {
                t.status = Status::Paused;
                if self.rule == RungRule::Continue {
                    return self.decide(r.trial);
                }
            }
            Ended::Completed => t.status = Status::Completed,
            Ended::Failed(why) => {
                t.status = Status::Failed;
                t.reason = Some(why);
            }
            Ended::Interrupted => {
                // Stays running: the resumed sweep continues it from its stop checkpoint.
                t.status = Status::Running;
                self.resume.push(r.trial);
            }
        }
        String::new()
    }

    /// At the sweep's end: trials paused at a rung were halved away.
    pub fn finish(&mut self) {
        for t in &mut self.trials {
            if t.status == Status::Paused {
                t.status = Status::Stopped;
            }
        }
    }

    /// Whether every trial has ended (none pending, running or to resume).
    pub fn over(&self) -> bool {
        self.trials.iter().all(|t| !matches!(t.status, Status::Pending | Status::Running))
    }

    /// The trials that have a metric, best first: by the metric after their last epoch, the
    /// ones that trained longer first among equals (Ray Tune's `scope="last"`).
    pub fn ranking(&self) -> Vec<&Trial> {
        let mut v: Vec<&Trial> =
            self.trials.iter().filter(|t| t.metric.is_some() && t.status != Status::Failed).collect();
        v.sort_by(|a, b| {
            let (x, y) = (self.badness(a.metric.unwrap()), self.badness(b.metric.unwrap()));
            x.total_cmp(&y).then(b.epochs.cmp(&a.epochs)).then(a.trial.cmp(&b.trial))
        });
        v
    }
}

/// numpy's `percentile(v, 100·q)` with linear interpolation, of `v` sorted ascending; None
/// for an empty `v`.
fn percentile(v: &[f64], q: f64) -> Option<f64> {
    let last = v.len().checked_sub(1)?;
    let pos = q * last as f64;
    let (lo, frac) = (pos.floor() as usize, pos - pos.floor());
    let hi = (lo + 1).min(last);
    Some(v[lo] + (v[hi] - v[lo]) * frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> SweepCfg {
        toml::from_str(&format!("{text}\n[space]\n\"x\" = [1]")).unwrap()
    }

    fn sched(text: &str, epochs: usize, n: usize) -> Scheduler {
        Scheduler::new(&cfg(text), epochs, vec![BTreeMap::new(); n], 1, |i| format!("t{i}"))
    }

    fn paused(s: &mut Scheduler, trial: usize, metric: f64) {
        let target = s.trials[trial].target;
        let curve = (1..=target).map(|e| (e, Some(metric))).collect();
        let ended =
            if target == *s.rungs(s.trials[trial].bracket).last().unwrap() { Ended::Completed } else { Ended::Paused };
        s.report(Report { trial, ended, curve, seconds: 1.0 });
    }

    #[test]
    fn rungs_of_each_scheduler() {
        assert_eq!(brackets(&cfg("scheduler = \"asha\"\neta = 3"), 27), vec![vec![1, 3, 9, 27]]);
        assert_eq!(brackets(&cfg("scheduler = \"asha\"\neta = 3"), 10), vec![vec![1, 3, 9, 10]]);
        assert_eq!(brackets(&cfg("scheduler = \"none\""), 10), vec![vec![10]]);
        assert_eq!(brackets(&cfg("scheduler = \"hyperband\"\neta = 3"), 9), vec![vec![1, 3, 9], vec![3, 9], vec![9]]);
        assert_eq!(brackets(&cfg("scheduler = \"hyperband\"\neta = 2\nbrackets = 2"), 8).len(), 2);
    }

    /// Three trials reach rung 1: the best (and only it, ⌊3/3⌋ = 1) goes on to rung 3.
    #[test]
    fn the_best_third_of_a_rung_is_promoted() {
        let mut s = sched("eta = 3\nrung_rule = \"promote\"", 9, 4);
        for i in 0..3 {
            assert_eq!(s.next(), Next::Run { trial: i, target: 1, resume: false });
        }
        paused(&mut s, 0, 0.5);
        paused(&mut s, 1, 0.2);
        // Two at the rung: ⌊2/3⌋ = 0 promotions yet; a new trial instead.
        assert_eq!(s.next(), Next::Run { trial: 3, target: 1, resume: false });
        paused(&mut s, 2, 0.9);
        assert_eq!(s.next(), Next::Run { trial: 1, target: 3, resume: true }, "trial 1 is the best of three");
        paused(&mut s, 3, 0.1);
        // Four at rung 1: ⌊4/3⌋ = 1, and the best (trial 3) has not gone on yet.
        assert_eq!(s.next(), Next::Run { trial: 3, target: 3, resume: true });
        // Nothing left to start or promote while 1 and 3 run.
        assert_eq!(s.next(), Next::Wait);
        paused(&mut s, 1, 0.15);
        paused(&mut s, 3, 0.05);
        assert_eq!(s.next(), Next::Done, "two at rung 3: none promoted to 9");
        s.finish();
        assert_eq!(s.trials.iter().filter(|t| t.status == Status::Stopped).count(), 4);
        assert_eq!(s.ranking()[0].trial, 3);
        assert_eq!(s.trials[3].rungs, BTreeMap::from([(1, Some(0.1)), (3, Some(0.05))]));
    }

    #[test]
    fn maximized_metrics_promote_the_largest_and_nan_is_worst() {
        let mut s = sched("eta = 2\nmetric = \"val_accuracy\"\nrung_rule = \"promote\"", 4, 4);
        for _ in 0..4 {
            s.next();
        }
        paused(&mut s, 0, 0.7);
        paused(&mut s, 1, f64::NAN);
        paused(&mut s, 2, 0.9);
        paused(&mut s, 3, 0.8);
        assert_eq!(s.next(), Next::Run { trial: 2, target: 2, resume: true });
        assert_eq!(s.next(), Next::Run { trial: 3, target: 2, resume: true });
        assert_eq!(s.next(), Next::Wait);
    }

    /// The sweep: one trial at a time, 300 epochs. The first at each rung goes on, so
    /// the best trial trains to the end; `promote` left it at epoch 9 (⌊1/3⌋ = 0 promoted).
    #[test]
    fn the_first_at_a_rung_goes_on_to_the_last_epoch() {
        let mut s = sched("eta = 3", 300, 2);
        assert_eq!(brackets(&cfg("eta = 3"), 300), vec![vec![1, 3, 9, 27, 81, 243, 300]]);
        let mut targets = Vec::new();
        while let Next::Run { trial: 0, target, .. } = s.next() {
            targets.push(target);
            paused(&mut s, 0, 1.0 / target as f64);
        }
        assert_eq!(targets, vec![1, 3, 9, 27, 81, 243, 300]);
        assert_eq!(s.trials[0].status, Status::Completed);
        assert_eq!(s.trials[0].epochs, 300);
        // The same sweep under the promotion rule stops at the first rung.
        let mut p = sched("eta = 3\nrung_rule = \"promote\"", 300, 1);
        assert_eq!(p.next(), Next::Run { trial: 0, target: 1, resume: false });
        paused(&mut p, 0, 0.5);
        assert_eq!(p.next(), Next::Done);
    }

    /// Ray's cutoff: numpy's linear percentile at 1 − 1/η of the rewards recorded before.
    #[test]
    fn a_trial_goes_on_when_in_the_top_third_of_those_recorded_before_it() {
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 1.0 / 3.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0], 0.5), Some(1.5));
        assert_eq!(percentile(&[7.0], 0.25), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
        let mut s = sched("eta = 3", 9, 6);
        let go = |s: &mut Scheduler, i: usize, m: f64| {
            assert_eq!(s.next(), Next::Run { trial: i, target: 1, resume: false });
            s.report(Report { trial: i, ended: Ended::Paused, curve: vec![(1, Some(m))], seconds: 1.0 })
        };
        assert!(go(&mut s, 0, 0.5).contains("the first at epoch 1"));
        assert_eq!(s.next(), Next::Run { trial: 0, target: 3, resume: true });
        // Worse than the one before: stops. Equal or better: goes on.
        assert!(go(&mut s, 1, 0.6).contains("stops at epoch 1"));
        assert_eq!(s.trials[1].status, Status::Stopped);
        assert!(go(&mut s, 2, 0.5).contains("goes on to epoch 3"));
        assert_eq!(s.next(), Next::Run { trial: 2, target: 3, resume: true });
        // Recorded 0.5, 0.6, 0.5 (losses): the cutoff is the 1/3 percentile, 0.5.
        assert!(go(&mut s, 3, 0.51).contains("not in the top 1/3 of the 4"));
        assert!(go(&mut s, 4, 0.1).contains("goes on"));
        assert_eq!(s.next(), Next::Run { trial: 4, target: 3, resume: true });
        assert!(go(&mut s, 5, f64::NAN).contains("not finite"));
        assert_eq!(s.next(), Next::Wait, "0, 2 and 4 are running");
        // Four recorded (0.1 … 0.4): the cutoff is their 1/3 percentile, 0.2 (the median would be 0.25).
        let mut c = sched("eta = 3", 9, 5);
        for (i, v) in [0.4, 0.1, 0.3, 0.2, 0.22].into_iter().enumerate() {
            c.trials[i].rungs.insert(1, Some(v));
            (c.trials[i].epochs, c.trials[i].status) = (1, Status::Stopped);
        }
        c.trials[4].status = Status::Paused;
        assert!(c.decide(4).contains("stops"), "0.22 is worse than the cutoff 0.2");
        c.trials[4].rungs.insert(1, Some(0.2));
        assert!(c.decide(4).contains("goes on"), "0.2 is the cutoff");
        // A maximized metric: the larger goes on.
        let mut m = sched("eta = 2\nmetric = \"val_accuracy\"", 4, 2);
        go(&mut m, 0, 0.8);
        m.next();
        assert!(go(&mut m, 1, 0.7).contains("stops"));
    }

    /// A sweep resumed with trials paused at a rung (stopped before they went on, or run with
    /// `promote` before) decides them at once.
    #[test]
    fn paused_trials_are_decided_when_a_sweep_resumes() {
        let mut p = sched("eta = 3\nrung_rule = \"promote\"", 9, 2);
        for i in 0..2 {
            p.next();
            p.report(Report { trial: i, ended: Ended::Paused, curve: vec![(1, Some(0.4 + i as f64))], seconds: 1.0 });
        }
        let mut r = sched("eta = 3", 9, 2);
        r.restore(p.trials.clone());
        assert_eq!(r.trials[1].status, Status::Stopped);
        assert_eq!(r.next(), Next::Run { trial: 0, target: 3, resume: true });
        assert_eq!(r.next(), Next::Wait);
    }

    #[test]
    fn failures_are_kept_and_interrupted_trials_resume_first() {
        let mut s = sched("scheduler = \"none\"", 5, 3);
        s.next();
        s.next();
        s.report(Report { trial: 0, ended: Ended::Failed("loss became NaN".into()), curve: vec![], seconds: 0.5 });
        s.report(Report {
            trial: 1,
            ended: Ended::Interrupted,
            curve: vec![(1, Some(0.3)), (2, Some(0.2))],
            seconds: 2.0,
        });
        assert_eq!(s.trials[0].status, Status::Failed);
        assert_eq!(s.next(), Next::Run { trial: 1, target: 5, resume: true });
        // The records alone give the same decisions after a restart.
        let mut r = sched("scheduler = \"none\"", 5, 3);
        let mut saved = s.trials.clone();
        saved[1].status = Status::Running;
        r.restore(saved);
        assert_eq!(r.next(), Next::Run { trial: 1, target: 5, resume: true });
        assert_eq!(r.next(), Next::Run { trial: 2, target: 5, resume: false });
        assert_eq!(r.next(), Next::Wait);
    }

    #[test]
    fn hyperband_deals_trials_to_brackets_in_turn() {
        let mut s = sched("scheduler = \"hyperband\"\neta = 3", 9, 6);
        let targets: Vec<Next> = (0..6).map(|_| s.next()).collect();
        let t = |n: &Next| match n {
            Next::Run { target, .. } => *target,
            _ => 0,
        };
        assert_eq!(targets.iter().map(t).collect::<Vec<_>>(), vec![1, 3, 9, 1, 3, 9]);
    }
}
