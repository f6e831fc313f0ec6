//! The training loop's end of an epoch: the mode's meeting, the train metrics from every
//! rank's sums, evaluation (validation and test, the model gathered layer by layer where the
//! parameters are sharded), TensorBoard histograms, the monitored metric's verdict (early
//! stopping, the best weights so far, the plateau schedule), the epoch line and
//! `metrics.jsonl`.
//!
//! Must not: decide when an epoch ends or write checkpoints (the loop and the mode do).

use super::{Run, TrainMetrics, BEST};
use crate::device::Backend;
use crate::error::Result;
use crate::eval::{eval_result, evaluate_in_group, EvalResult};
use crate::metrics::{regression, EpochMetrics};
use crate::parallel::watchdog::MAIN;
use crate::step::Sums;
use crate::train::mode::Mode;
use log::info;
use std::time::Instant;

impl<B: Backend, M: Mode<B>> Run<'_, B, M> {
    /// The mode's meeting, test metrics (local work first; the watchdog then guards only the
    /// one collective), the epoch line and `metrics.jsonl`, and the monitored metric's
    /// verdict: true when early stopping ends the run here.
    pub(super) fn end_of_epoch(&mut self, epoch: usize, first: usize, t0: Instant, sums: &Sums) -> Result<bool> {
        let (steps, d) = (self.sched.steps, self.data_rank);
        let my_rows = self.sched.rows_before(d, steps) - self.sched.rows_before(d, first);
        self.mode.meet(&mut self.st, my_rows as f64 / t0.elapsed().as_secs_f64())?;
        let secs = t0.elapsed().as_secs_f64();
        let done = steps - first;
        let exposed_ms = self.st.take_exposed().as_secs_f64() * 1e3 / done.max(1) as f64;
        // The share of the epoch this rank waited for its pipeline neighbours (its bubble).
        let (_, group) = self.st.backend_and_tensor();
        let waited = group.pipe.as_mut().map_or(0.0, |p| p.take_waited().as_secs_f64() / secs.max(1e-9));
        let pipelined = group.pipe.is_some();
        crate::model::placement::log_sum_time(self.comm.rank, epoch, secs, done);
        // With optimizer.ema, the moving average is what is evaluated.
        let ema = self.st.swap_ema();
        let (test, val) = (self.evaluate(false), self.evaluate(true));
        if ema {
            self.st.swap_ema();
        }
        let (test, val) = (test?, val?);
        // Evaluation's sums are not the next epoch's.
        crate::model::placement::reset_sum_time();
        // The rows this rank uses in the whole epoch (also before a resume), summed over ranks;
        // a replica counts once (its ranks all hold its losses).
        // [loss sum, rows, waited, correct, top-5 hits, Σ|e|, Σe², test sums..., validation sums...]
        let mut totals = vec![sums[0], self.sched.epoch_rows(d) as f64, waited];
        totals.extend(&sums[1..]);
        let len = test.len();
        totals.extend(test);
        totals.extend(val);
        if !self.mode.counts_metrics() {
            totals[..2].fill(0.0);
            totals[3..].fill(0.0);
        }
        {
            let _g = self.mode.watchdog().guard(MAIN, "the end-of-epoch metrics", self.st.step());
            self.mode.trainers().all_reduce_sum_f64(&mut totals);
        }
        let ranks = self.mode.trainers().size;
        let t = 2 + sums.len(); // where the test sums start
        let test = self.test.as_ref().map(|sh| eval_result(&totals[t..t + len], sh));
        let val = self.validation.as_ref().map(|sh| eval_result(&totals[t + len..], sh));
        let train = self.train_metrics(&totals[1..t]);
        let reg = |r: &Option<EvalResult>| r.as_ref().and_then(|r| r.regression.clone());
        let (test_reg, val_reg) = (reg(&test), reg(&val));
        fn classes(r: &Option<EvalResult>) -> Option<&crate::metrics::classes::PerClass> {
            r.as_ref().and_then(|r| r.classes.as_ref())
        }
        fn ranking(r: &Option<EvalResult>) -> Option<&crate::metrics::auc::Ranking> {
            r.as_ref().and_then(|r| r.ranking.as_ref())
        }
        self.last_classes = classes(&test)
            .map(|c| (c.clone(), ranking(&test).cloned(), "test"))
            .or_else(|| classes(&val).map(|c| (c.clone(), ranking(&val).cloned(), "validation")));
        let m = EpochMetrics {
            epoch,
            train_loss: totals[0] / totals[1],
            train_accuracy: train.accuracy,
            train_top5_accuracy: train.top5,
            train_mae: train.regression.as_ref().map(|r| r.mae),
            train_rmse: train.regression.as_ref().map(|r| r.rmse),
            train_r2: train.regression.as_ref().map(|r| r.r2),
            train_per_output: train.regression.and_then(|r| r.per_output),
            test_loss: test.as_ref().map(|r| r.loss),
            test_accuracy: test.as_ref().and_then(|r| r.accuracy),
            test_top5_accuracy: test.as_ref().and_then(|r| r.top5),
            val_loss: val.as_ref().map(|r| r.loss),
            val_accuracy: val.as_ref().and_then(|r| r.accuracy),
            val_top5_accuracy: val.as_ref().and_then(|r| r.top5),
            test_balanced_accuracy: classes(&test).map(|c| c.balanced_accuracy),
            test_macro_f1: classes(&test).map(|c| c.macro_f1),
            val_balanced_accuracy: classes(&val).map(|c| c.balanced_accuracy),
            val_macro_f1: classes(&val).map(|c| c.macro_f1),
            test_auc: ranking(&test).and_then(|g| g.auc),
            test_average_precision: ranking(&test).and_then(|g| g.average_precision),
            val_auc: ranking(&val).and_then(|g| g.auc),
            val_average_precision: ranking(&val).and_then(|g| g.average_precision),
            test_mae: test_reg.as_ref().map(|r| r.mae),
            test_rmse: test_reg.as_ref().map(|r| r.rmse),
            test_r2: test_reg.as_ref().map(|r| r.r2),
            test_per_output: test_reg.and_then(|r| r.per_output),
            val_mae: val_reg.as_ref().map(|r| r.mae),
            val_rmse: val_reg.as_ref().map(|r| r.rmse),
            val_r2: val_reg.as_ref().map(|r| r.r2),
            val_per_output: val_reg.and_then(|r| r.per_output),
            samples_per_sec: self.sched.global_rows_in(first, steps) as f64 / secs,
            epoch_seconds: secs,
            exposed_comm_ms_per_step: exposed_ms,
            steps,
            samples: totals[1] as usize,
            ranks,
            lr: self.st.opt().lr(),
            pipeline_bubble: pipelined.then(|| totals[2] / ranks as f64),
            grad_norm: self.st.take_grad_norm(),
        };
        if self.metrics.is_some() {
            self.log_epoch(&m, exposed_ms)?;
        }
        self.histograms(epoch)?;
        let stop = self.watch_epoch_end(&m)?;
        self.last = Some(m);
        Ok(stop)
    }

    /// Every `output.histogram_freq` epochs, the layers' histograms in rank 0's TensorBoard
    /// files. Collective over the trainers (the whole model is gathered), as keep_best's.
    fn histograms(&mut self, epoch: usize) -> Result<()> {
        let o = &self.job.output;
        if o.histogram_freq == 0 || !o.tensorboard || !epoch.is_multiple_of(o.histogram_freq) {
            return Ok(());
        }
        // Where no rank holds the whole model (shard = "parameters", tensor or pipeline
        // parallelism): a layer at a time, never the whole model on any rank.
        let model = self.st.tensor().full.clone();
        let mut made = Vec::new();
        let sink = &mut |l: usize, slot: &[f32]| {
            made.extend(crate::metrics::MetricsLog::layer_histograms(&model, l, slot));
            Ok(())
        };
        if self.st.params_by_layer(self.data_rank, sink)? {
            if let Some(log) = self.metrics.as_mut() {
                log.histograms_made(epoch, made)?;
            }
            return Ok(());
        }
        if let Some(params) = self.mode.whole_params(&self.st)? {
            if let Some(log) = self.metrics.as_mut() {
                log.histograms(epoch, &self.st.tensor().full, &params)?;
            }
        }
        Ok(())
    }

    /// The monitored metric's verdict (the same on every rank: the metrics were summed over
    /// the trainers): the best weights (keep_best, collective), the learning-rate schedule's
    /// epoch end (plateau), and the trainer state that the next checkpoints carry. True when
    /// early stopping ends the run.
    fn watch_epoch_end(&mut self, m: &EpochMetrics) -> Result<bool> {
        let v = self.watch.epoch_end(m);
        let (name, rank0) = (self.watch.name.clone(), self.comm.rank == 0);
        if v.improved && self.job.output.keep_best {
            self.write_weights(&self.out_dir.join(BEST), true, "writing the best weights so far")?;
        }
        let o = &self.job.optimizer;
        if let Some(lr) = v.value.and_then(|x| self.st.opt_mut().schedule_mut().epoch_end(x)) {
            if rank0 {
                info!(
                    "epoch {}: {name} has not improved by more than {} for {} epoch(s): learning rate now {lr:.4e} (plateau)",
                    m.epoch, o.min_delta, o.patience
                );
            }
        }
        let is_plateau = o.schedule == crate::config::Schedule::Plateau;
        self.trainer.plateau = is_plateau.then(|| self.st.opt().schedule().plateau);
        self.watch.save(&mut self.trainer);
        self.mode.set_trainer_state(self.trainer.to_json());
        if v.stop && rank0 {
            let e = self.job.training.early_stopping.as_ref().expect("stop needs early stopping");
            let best = self.watch.best.value.map(|b| self.watch.shown(b)).unwrap_or(f64::NAN);
            let baseline = match e.baseline {
                Some(b) if !self.watch.best.value.is_some_and(|v| self.watch.beats_baseline(v)) => {
                    format!(" (the baseline {b} was never beaten)")
                }
                _ => String::new(),
            };
            info!(
                "early stopping after epoch {}: {name} has not improved by more than {} for {} epochs; the best was {best:.6} at epoch {}{baseline}",
                m.epoch, e.min_delta, e.patience, self.watch.best_epoch
            );
        }
        Ok(v.stop)
    }

    /// The epoch's train metrics from the summed [rows, waited, correct, top-5 hits,
    /// regression sums...].
    fn train_metrics(&self, t: &[f64]) -> TrainMetrics {
        use crate::config::Targets;
        let (rows, k) = (t[0], self.st.tensor().full.n_outputs());
        let targets = self.job.model.loss.targets();
        let n = if targets == Targets::MultiLabel { rows * k as f64 } else { rows };
        TrainMetrics {
            accuracy: (targets != Targets::Regression).then(|| t[2] / n),
            top5: (targets == Targets::Classes && k > 5).then(|| t[3] / rows),
            regression: (targets == Targets::Regression).then(|| regression::finish(&t[4..], rows, k)),
        }
    }

    /// This rank's test (or validation) sums (`eval::sums_len`) on the training backend
    /// (none without the data); collective over the model replica.
    fn evaluate(&mut self, validation: bool) -> Result<Vec<f64>> {
        let shard = if validation { &self.validation } else { &self.test };
        let Some(sh) = shard else { return Ok(Vec::new()) };
        if self.st.reads_layers_gathered() {
            // shard = "parameters": each layer gathered as the forward reads it, never the whole model.
            let most = self.st.most_over_data_ranks(crate::eval::chunks(sh));
            let model = self.st.model().clone();
            // Every chunk's forward fetches, for the gathers to run ahead.
            let plan: Vec<usize> = (0..most).flat_map(|_| model.forward_fetches()).collect();
            let (be, mut params) = self.st.gathered_params(&plan).expect("checked above");
            return crate::eval::evaluate_gathered(be, &model, &mut params, sh, most);
        }
        let (model, params) = (self.st.model().clone(), self.st.params_host()?);
        let (be, group) = self.st.backend_and_tensor();
        evaluate_in_group(be, &model, &params, sh, group)
    }

    /// Rank 0: the epoch line (and the pipeline's bubble line) and `metrics.jsonl`.
    fn log_epoch(&mut self, m: &EpochMetrics, exposed_ms: f64) -> Result<()> {
        let (job, epoch) = (self.job, m.epoch);
        let note = self.mode.epoch_note(exposed_ms);
        info!(
            "epoch {epoch}/{}: train_loss {:.4}{}{}{}{}{}{}{} | {} samples, {:.0} samples/s ({:.2} s){note}",
            job.training.epochs,
            m.train_loss,
            m.train_accuracy
                .map(|a| format!(" train_accuracy {a:.4}"))
                .or(m.train_mae.map(|e| format!(" train_mae {e:.4e}")))
                .unwrap_or_default(),
            m.test_loss.map(|l| format!(" test_loss {l:.4}")).unwrap_or_default(),
            m.test_accuracy
                .map(|a| format!(
                    " test_accuracy {a:.4}{}",
                    m.test_auc.map(|u| format!(" test_auc {u:.4}")).unwrap_or_default()
                ))
                .unwrap_or_default(),
            m.test_r2
                .map(|r| format!(" test_r2 {r:.4} test_mae {:.4e}", m.test_mae.unwrap_or(f64::NAN)))
                .unwrap_or_default(),
            m.val_loss.map(|l| format!(" val_loss {l:.4}")).unwrap_or_default(),
            m.val_accuracy
                .map(|a| format!(
                    " val_accuracy {a:.4}{}",
                    m.val_auc.map(|u| format!(" val_auc {u:.4}")).unwrap_or_default()
                ))
                .unwrap_or_default(),
            m.val_r2.map(|r| format!(" val_r2 {r:.4}")).unwrap_or_default(),
            m.samples,
            m.samples_per_sec,
            m.epoch_seconds,
        );
        if let Some(g) = m.grad_norm {
            let o = &job.optimizer;
            let mut limit = match (o.global_clipnorm, o.clipnorm) {
                (Some(c), _) => format!("optimizer.global_clipnorm = {c}"),
                (_, Some(c)) => format!("optimizer.clipnorm = {c}, per tensor"),
                _ => String::new(),
            };
            if let Some(v) = o.clipvalue {
                limit += &format!("{}optimizer.clipvalue = {v}", if limit.is_empty() { "" } else { ", then " });
            }
            info!(
                "epoch {epoch}/{}: gradient norm (global, after the all-reduce, before clipping) mean {:.4e}, max {:.4e}; \
                 clipped at {} of {} steps ({limit})",
                job.training.epochs,
                g.mean,
                g.max,
                g.clipped,
                g.steps
            );
        }
        if let Some(b) = m.pipeline_bubble {
            let (p, mb) = (job.parallel.pipeline, job.parallel.micro_batches);
            info!(
                "epoch {epoch}/{}: pipeline bubble {:.1}% measured (the ranks' mean share of the epoch spent waiting \
                 for their neighbouring stages), {:.1}% ideal for {p} stages and {mb} micro-batch(es) ((P−1)/(M+P−1))",
                job.training.epochs,
                100.0 * b,
                100.0 * crate::model::pipeline::ideal_bubble(p, mb)
            );
        }
        self.metrics.as_mut().expect("rank 0's metrics log").append(m)
    }
}
