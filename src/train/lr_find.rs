//! `hvtrain lr-find`: the learning-rate range test (Smith 2017; fastai's `lr_find`, PyTorch
//! Lightning's `Tuner.lr_find`). The job's own training, on its ranks and global batch, with
//! the learning rate growing geometrically from `min` to `max` over `steps` optimizer steps;
//! each step's loss over every rank's rows (the all-reduce mode's end-of-step agreement) is
//! smoothed, and the test ends after `steps` or where the smoothed loss passes 4× its lowest
//! (or a loss is not finite). Rank 0 writes `lr_find.csv` and `lr_find.png` and logs the
//! suggested rates: where the smoothed loss falls fastest against log(lr), and a tenth of
//! where it is lowest.
//!
//! Must not: write weights.h5 or checkpoints (the run is a probe, not a training), or decide
//! anything on one rank alone (every rank sees the same losses and ends at the same step).

use crate::config::{Job, LrFind, Schedule, Strategy};
use crate::error::{Error, Result};
use log::info;
use std::path::Path;

/// The smoothing of the losses (fastai's: an exponential mean, bias-corrected).
const BETA: f64 = 0.98;
/// The smoothed loss past this many times its lowest ends the test.
const DIVERGED: f64 = 4.0;
/// Steps before divergence is judged (the smoothing's first values are noisy).
const SETTLE: usize = 10;

/// The job `hvtrain lr-find` runs: `job` with the range test's schedule (optimizer.lr = min,
/// exponential growth to max over the steps, no warm-up), no evaluation, checkpoints,
/// TensorBoard, early stopping or autotuning, its outputs in `output.dir/lr-find`, and epochs
/// enough for the steps.
pub fn job(job: &Job, f: LrFind) -> Result<Job> {
    let bad = |field: &str, msg: String| Err(Error::config("command line", field, msg));
    if !(f.min > 0.0 && f.min.is_finite()) {
        return bad("--min", format!("is {}; the smallest learning rate must be above 0", f.min));
    }
    if !(f.max > f.min && f.max.is_finite()) {
        return bad("--max", format!("is {}; the largest learning rate must be above --min ({})", f.max, f.min));
    }
    if f.steps < 2 * SETTLE {
        return bad("--steps", format!("is {}; the test needs at least {} steps", f.steps, 2 * SETTLE));
    }
    if job.distribution.strategy == Strategy::ParameterServer {
        return Err(Error::config(
            &job.source,
            "distribution.strategy",
            "is \"parameter_server\"; hvtrain lr-find runs the all-reduce mode (data, tensor and pipeline \
             parallelism), whose ranks agree on every step's loss: run it with strategy = \"allreduce\" and \
             the same batch",
        ));
    }
    let mut j = job.clone();
    let o = &mut j.optimizer;
    o.lr = f.min;
    o.schedule = Schedule::Exponential;
    o.decay_rate = f.max / f.min;
    o.decay_steps = f.steps - 1;
    o.warmup_steps = 0;
    o.warmup_epochs = 0.0;
    // The rate the test reports is the one the optimizer takes.
    o.scale_lr_by_world_size = false;
    j.data.test = None;
    j.data.validation = None;
    j.data.validation_split = 0.0;
    j.training.epochs = f.steps; // every epoch has a step at least; the test ends first
    j.training.early_stopping = None;
    j.output.keep_best = false;
    j.output.tensorboard = false;
    j.output.histogram_freq = 0;
    j.output.dir = Path::new(&job.output.dir).join("lr-find").display().to_string();
    j.checkpoint.every_steps = 0;
    j.checkpoint.every_minutes = 0.0;
    j.distribution.autotune = false;
    j.pause_after_epoch = None;
    j.lr_find = Some(f);
    Ok(j)
}

/// One step of the test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub step: usize,
    pub lr: f64,
    pub loss: f64,
    pub smoothed: f64,
}

/// The rates the curve suggests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Suggestion {
    /// Where the smoothed loss falls fastest against log(lr).
    pub steepest: f64,
    /// Where the smoothed loss is lowest (a tenth of it is the other rule of thumb).
    pub lowest: f64,
}

/// The test's record, the same on every rank.
pub struct Finder {
    cfg: LrFind,
    avg: f64,
    best: f64,
    pub points: Vec<Point>,
    /// Why the test ended (None: still running).
    pub ended: Option<String>,
}

impl Finder {
    pub fn new(cfg: LrFind) -> Finder {
        Finder { cfg, avg: 0.0, best: f64::INFINITY, points: Vec::new(), ended: None }
    }

    /// Record a step taken at rate `lr` whose mean loss was `loss`; true when the test ends
    /// here.
    pub fn observe(&mut self, lr: f64, loss: f64) -> bool {
        let n = self.points.len() + 1;
        if !loss.is_finite() {
            self.ended = Some(format!("the loss was not finite at step {n} (lr {lr:.3e})"));
            return true;
        }
        self.avg = BETA * self.avg + (1.0 - BETA) * loss;
        let smoothed = self.avg / (1.0 - BETA.powi(n as i32));
        self.points.push(Point { step: n, lr, loss, smoothed });
        if n > SETTLE && smoothed > DIVERGED * self.best {
            self.ended = Some(format!(
                "the smoothed loss {smoothed:.4} passed {DIVERGED}× its lowest ({:.4}) at step {n} (lr {lr:.3e})",
                self.best
            ));
            return true;
        }
        self.best = self.best.min(smoothed);
        if n >= self.cfg.steps {
            self.ended = Some(format!("{n} steps done (lr {lr:.3e}, --max)"));
            return true;
        }
        false
    }

    /// The suggested rates, from the points before the smoothed loss's lowest (after the
    /// first few): None when the loss never fell.
    pub fn suggestion(&self) -> Option<Suggestion> {
        let p = &self.points;
        let low = (0..p.len()).min_by(|&a, &b| p[a].smoothed.total_cmp(&p[b].smoothed))?;
        let start = (SETTLE / 2).min(low);
        let slope = |i: usize| (p[i + 1].smoothed - p[i].smoothed) / (p[i + 1].lr / p[i].lr).ln();
        let steep = (start..low).min_by(|&a, &b| slope(a).total_cmp(&slope(b)))?;
        (slope(steep) < 0.0).then(|| Suggestion { steepest: p[steep].lr, lowest: p[low].lr })
    }

    /// `lr_find.csv`: step, lr, loss, smoothed loss (rank 0).
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut text = String::from("step,lr,loss,smoothed_loss\n");
        for q in &self.points {
            text += &format!("{},{},{},{}\n", q.step, q.lr, q.loss, q.smoothed);
        }
        let tmp = crate::weights::tmp_path(path);
        std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, "write", e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io(path, "rename into place", e))
    }

    /// `lr_find.png` (rank 0): the curve and the suggested rates (`plot::lr_find`). A
    /// picture that cannot be written is a warning: the CSV and the log hold the result.
    pub fn draw(&self, path: &Path, job: &str) {
        let steps: Vec<crate::plot::lr_find::Step> = self.points.iter().map(|q| (q.lr, q.loss, q.smoothed)).collect();
        let s = self.suggestion();
        let title = format!("hvtrain lr-find: {job} ({} steps)", self.points.len());
        match crate::plot::lr_find::plot_lr_find(&steps, s.map(|s| s.steepest), s.map(|s| s.lowest), &title, path) {
            Ok(()) => info!("lr-find: the curve in {}", path.display()),
            Err(e) => log::warn!("lr-find: no picture: {e}"),
        }
    }

    /// Rank 0's report: why it ended, the curve every few steps, the suggestion.
    pub fn report(&self, job: &Job, ranks: usize, path: &Path) {
        info!(
            "lr-find: {}; {} steps in {}",
            self.ended.as_deref().unwrap_or("ended"),
            self.points.len(),
            path.display()
        );
        let every = (self.points.len() / 12).max(1);
        for q in self.points.iter().filter(|q| q.step % every == 0) {
            info!("lr-find: step {:4}  lr {:10.3e}  loss {:9.4}  smoothed {:9.4}", q.step, q.lr, q.loss, q.smoothed);
        }
        match self.suggestion() {
            Some(s) => {
                let scaled = if job.optimizer.scale_lr_by_world_size {
                    format!(
                        " (the job scales optimizer.lr by its {ranks} rank(s): set optimizer.lr = {:.2e} for that)",
                        s.steepest / ranks as f64
                    )
                } else {
                    String::new()
                };
                info!(
                    "lr-find: suggested optimizer.lr = {:.2e} (where the loss fell fastest){scaled}; the loss was lowest \
                     at lr {:.2e} (a tenth of it, {:.2e}, is the other rule of thumb)",
                    s.steepest,
                    s.lowest,
                    s.lowest / 10.0
                );
            }
            None => info!(
                "lr-find: the loss never fell between lr {:.1e} and {:.1e}; try a smaller --min, or more --steps",
                self.cfg.min, self.cfg.max
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LrFind {
        LrFind { min: 1e-4, max: 1.0, steps: 100 }
    }

    #[test]
    fn a_falling_then_rising_loss_suggests_the_steepest_fall_and_ends_on_divergence() {
        let mut f = Finder::new(cfg());
        // lr from 1e-4 to 1; the loss: flat, falls fastest around lr 1e-2, rises past 0.1.
        let mut ended = 0;
        for s in 0..100 {
            let lr = 1e-4 * 1e4f64.powf(s as f64 / 99.0);
            let x = lr.log10(); // -4 .. 0
            let loss =
                if x < -1.0 { 2.0 - 1.5 / (1.0 + (-(x + 2.0) * 4.0).exp()) } else { 0.5 + 40.0 * (x + 1.0).powi(2) };
            if f.observe(lr, loss) {
                ended = s + 1;
                break;
            }
        }
        assert!(ended > 0 && ended < 100, "diverged before the last step: {ended}");
        assert!(f.ended.as_deref().unwrap().contains("passed 4× its lowest"), "{:?}", f.ended);
        let s = f.suggestion().unwrap();
        // The smoothing lags the curve: the steepest smoothed fall is a little after lr 1e-2.
        assert!(s.steepest > 5e-3 && s.steepest < 5e-2, "{s:?}");
        assert!(s.lowest > s.steepest, "{s:?}");
    }

    #[test]
    fn the_test_ends_after_its_steps_or_at_a_non_finite_loss() {
        let mut f = Finder::new(LrFind { steps: 20, ..cfg() });
        assert!((1..20).all(|i| !f.observe(i as f64, 1.0 / i as f64)));
        assert!(f.observe(20.0, 0.05));
        assert!(f.ended.as_deref().unwrap().starts_with("20 steps done"));
        let mut f = Finder::new(cfg());
        assert!(!f.observe(1e-4, 1.0));
        assert!(f.observe(2e-4, f64::NAN));
        assert_eq!(f.points.len(), 1);
        assert!(f.suggestion().is_none(), "one point has no slope");
        // A loss that never falls suggests nothing.
        let mut f = Finder::new(cfg());
        for i in 0..30 {
            f.observe(1e-4 * (i + 1) as f64, 1.0 + i as f64 * 0.01);
        }
        assert!(f.suggestion().is_none());
    }
}
