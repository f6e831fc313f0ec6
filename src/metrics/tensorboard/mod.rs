//! TensorBoard event files of a run (`output.tensorboard`, on by default; rank 0 only), laid
//! out as Keras' `TensorBoard` callback lays them out, under OUTPUT_DIR/tensorboard/:
//! `train/` (epoch_loss, epoch_accuracy, epoch_learning_rate, … and hvtrain's own scalars:
//! samples/s, exposed communication per step, gradient norm, peak memory), `validation/`
//! (`data.validation` or `validation_split`) and `test/` (`data.test`, evaluated each epoch),
//! the same tags in each so TensorBoard draws train, validation and test on one chart. The step
//! of an epoch's scalars is the epoch (1, 2, …); the job is a text summary at step 0.
//!
//! `tensorboard --logdir OUTPUT_DIR` (or a folder of several runs) opens them; Weights & Biases
//! and MLflow import the same files.
//!
//! Resumed runs continue the same curves: the run's earlier event files are read back, the
//! events of the epochs the resumed run will log again are dropped, and what is kept goes into
//! this process's file (the old files removed), as `metrics.jsonl` keeps its earlier lines. So
//! no step appears twice and no curve runs backwards. Each epoch's records are flushed when
//! written: a run that stops leaves files TensorBoard reads to the last whole epoch.
//!
//! Must not: write on any rank but 0, or fail training over a full disk silently (errors
//! are returned, as `metrics.jsonl`'s are).

pub mod hparams;
pub mod proto;
pub mod record;

use super::EpochMetrics;
use crate::error::{Error, Result};
use prost::Message;
use proto::{
    Event, HistogramProto, PluginData, Summary, SummaryMetadata, TensorProto, TensorShapeProto, Val, Value, What,
};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The runs (subfolders) and the file of each, opened when it is first written.
pub struct Board {
    dir: PathBuf,
    name: String,
    files: Vec<(&'static str, std::fs::File)>,
}

/// The runs, in the order Keras names them, and hvtrain's test data beside them.
const RUNS: [&str; 3] = ["train", "validation", "test"];

impl Board {
    /// The event files under `out_dir/tensorboard/` for a run whose first epoch to log is
    /// `first_epoch` and whose first step is the one after `done_steps`, with the job
    /// (`job_toml`) as a text summary. Events of earlier epochs (and steps) in files already
    /// there are carried over; later ones dropped.
    pub fn open(out_dir: &Path, first_epoch: usize, done_steps: u64, job_toml: &str) -> Result<Board> {
        let dir = out_dir.join("tensorboard");
        let wall = now();
        let name = format!(
            "events.out.tfevents.{}.{}.{}.v2",
            wall as u64,
            crate::sys::hostname().replace(['/', ' '], "_"),
            std::process::id()
        );
        let mut b = Board { dir, name, files: Vec::new() };
        for run in RUNS {
            let folder = b.dir.join(run);
            let Ok(entries) = std::fs::read_dir(&folder) else { continue };
            let mut old: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("events.out.tfevents.")))
                .collect();
            old.sort();
            let mut kept = Vec::new();
            for path in &old {
                let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
                for r in record::records(&bytes) {
                    let Ok(ev) = Event::decode(r) else { continue };
                    let keep = match &ev.what {
                        Some(What::Summary(s)) if is_text(s) => false,
                        // Steps' scalars: steps done before the resumed one.
                        Some(What::Summary(s)) if s.value.iter().any(|v| v.tag.starts_with("batch_")) => {
                            ev.step >= 1 && (ev.step as u64) <= done_steps
                        }
                        Some(What::Summary(_)) => ev.step >= 1 && (ev.step as usize) < first_epoch,
                        _ => false,
                    };
                    if keep {
                        kept.push(ev);
                    }
                }
            }
            // Removed before the kept events are written: this process's file may bear the
            // name of one of them (the same second and process id).
            for path in &old {
                std::fs::remove_file(path).map_err(|e| Error::io(path, "remove the old events file", e))?;
            }
            for ev in &kept {
                b.write(run, ev)?;
            }
        }
        let text = format!("```toml\n{job_toml}\n```");
        b.write("train", &summary(0, vec![text_value("job", &text)]))?;
        b.flush()?;
        Ok(b)
    }

    /// The folder the event files are in (for the log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One epoch's scalars, each in its run, flushed.
    pub fn epoch(&mut self, m: &EpochMetrics, peak_rss_mib: Option<f64>) -> Result<()> {
        let step = m.epoch as i64;
        let mut train = vec![("epoch_loss", Some(m.train_loss))];
        train.extend(classes_and_regression(
            m.train_accuracy,
            m.train_top5_accuracy,
            m.train_mae,
            m.train_rmse,
            m.train_r2,
        ));
        train.extend([
            ("epoch_learning_rate", Some(m.lr)),
            ("epoch_samples_per_sec", Some(m.samples_per_sec)),
            ("epoch_exposed_comm_ms_per_step", Some(m.exposed_comm_ms_per_step)),
            ("epoch_seconds", Some(m.epoch_seconds)),
            ("epoch_grad_norm", m.grad_norm.map(|g| g.mean)),
            ("epoch_grad_norm_max", m.grad_norm.map(|g| g.max)),
            ("epoch_pipeline_bubble", m.pipeline_bubble),
            ("epoch_peak_rss_mib", peak_rss_mib),
        ]);
        let mut val = vec![("epoch_loss", m.val_loss)];
        val.extend(classes_and_regression(m.val_accuracy, m.val_top5_accuracy, m.val_mae, m.val_rmse, m.val_r2));
        val.extend([("epoch_balanced_accuracy", m.val_balanced_accuracy), ("epoch_macro_f1", m.val_macro_f1)]);
        val.extend([("epoch_auc", m.val_auc), ("epoch_average_precision", m.val_average_precision)]);
        let mut test = vec![("epoch_loss", m.test_loss)];
        test.extend(classes_and_regression(m.test_accuracy, m.test_top5_accuracy, m.test_mae, m.test_rmse, m.test_r2));
        test.extend([("epoch_balanced_accuracy", m.test_balanced_accuracy), ("epoch_macro_f1", m.test_macro_f1)]);
        test.extend([("epoch_auc", m.test_auc), ("epoch_average_precision", m.test_average_precision)]);
        for (run, scalars) in [("train", train), ("validation", val), ("test", test)] {
            let values: Vec<Value> = scalars.into_iter().filter_map(|(t, v)| v.map(|v| scalar(t, v))).collect();
            if !values.is_empty() {
                self.write(run, &summary(step, values))?;
            }
        }
        self.flush()
    }

    /// Scalars of the training so far at global step `step` (`output.tensorboard_every_steps`):
    /// the loss (rank 0's running mean over the epoch so far), samples/s, learning rate; flushed.
    pub fn steps(&mut self, step: u64, loss: f64, samples_per_sec: f64, lr: f64) -> Result<()> {
        let values = vec![
            scalar("batch_loss", loss),
            scalar("batch_samples_per_sec", samples_per_sec),
            scalar("batch_learning_rate", lr),
        ];
        self.write("train", &summary(step as i64, values))?;
        self.flush()
    }

    /// Histograms of named tensors' values (`output.histogram_freq`: each layer's weights and
    /// biases, made by `histogram(v, BUCKETS)`, a layer at a time where no rank holds the whole
    /// model) in `train/` at step `epoch`, as Keras' `histogram_freq` writes them, in the order
    /// given; flushed.
    pub fn histograms_made(&mut self, epoch: usize, made: Vec<(String, HistogramProto)>) -> Result<()> {
        let values =
            made.into_iter().map(|(tag, h)| Value { tag, metadata: None, value: Some(Val::Histo(h)) }).collect();
        self.write("train", &summary(epoch as i64, values))?;
        self.flush()
    }

    fn write(&mut self, run: &'static str, ev: &Event) -> Result<()> {
        if !self.files.iter().any(|(r, _)| *r == run) {
            let folder = self.dir.join(run);
            std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, "create", e))?;
            let path = folder.join(&self.name);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| Error::io(&path, "create", e))?;
            let head = file_version();
            f.write_all(&record::frame(&head.encode_to_vec())).map_err(|e| Error::io(&path, "write", e))?;
            self.files.push((run, f));
        }
        let path = self.dir.join(run).join(&self.name);
        let (_, f) = self.files.iter_mut().find(|(r, _)| *r == run).expect("opened above");
        f.write_all(&record::frame(&ev.encode_to_vec())).map_err(|e| Error::io(&path, "write", e))
    }

    fn flush(&mut self) -> Result<()> {
        for (run, f) in &mut self.files {
            f.flush().map_err(|e| Error::io(self.dir.join(*run), "flush", e))?;
        }
        Ok(())
    }
}

/// The accuracy or regression scalars of one run, as Keras names its metrics.
fn classes_and_regression(
    acc: Option<f64>,
    top5: Option<f64>,
    mae: Option<f64>,
    rmse: Option<f64>,
    r2: Option<f64>,
) -> [(&'static str, Option<f64>); 5] {
    [("epoch_accuracy", acc), ("epoch_top5_accuracy", top5), ("epoch_mae", mae), ("epoch_rmse", rmse), ("epoch_r2", r2)]
}

/// Buckets of a histogram (`tf.summary.histogram`'s default).
pub const BUCKETS: usize = 30;

/// `v`'s histogram in `n` buckets of equal width from its least to its largest value (one
/// bucket when they are equal), as TensorFlow 2's `tf.summary.histogram` bins them: bucket i
/// counts the values from its left edge up to, not including, `bucket_limit[i]`, the last one
/// including the maximum; written as the legacy `HistogramProto`, whose last limit TensorBoard
/// reads as the maximum. Non-finite values are left out of the buckets and of the sums.
pub fn histogram(v: &[f32], n: usize) -> HistogramProto {
    let finite = || v.iter().filter(|x| x.is_finite()).map(|&x| x as f64);
    let (min, max) = finite().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    if min > max {
        return HistogramProto { bucket_limit: vec![0.0], bucket: vec![0.0], ..Default::default() };
    }
    let n = if max > min { n.max(1) } else { 1 };
    let width = (max - min) / n as f64;
    let mut bucket = vec![0.0; n];
    let (mut sum, mut sum_squares, mut num) = (0.0, 0.0, 0.0);
    for x in finite() {
        let i = if width > 0.0 { (((x - min) / width) as usize).min(n - 1) } else { 0 };
        bucket[i] += 1.0;
        (sum, sum_squares, num) = (sum + x, sum_squares + x * x, num + 1.0);
    }
    let mut bucket_limit: Vec<f64> = (1..=n).map(|i| min + i as f64 * width).collect();
    bucket_limit[n - 1] = max;
    HistogramProto { min, max, num, sum, sum_squares, bucket_limit, bucket }
}

/// Seconds since the Unix epoch (events' wall time).
pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The first record of every events file.
pub(super) fn file_version() -> Event {
    Event { wall_time: now(), step: 0, what: Some(What::FileVersion("brain.Event:2".into())) }
}

pub(super) fn summary(step: i64, value: Vec<Value>) -> Event {
    Event { wall_time: now(), step, what: Some(What::Summary(Summary { value })) }
}

pub(super) fn scalar(tag: &str, v: f64) -> Value {
    Value { tag: tag.into(), metadata: None, value: Some(Val::SimpleValue(v as f32)) }
}

/// A text summary (TensorBoard's Text tab renders it as Markdown).
fn text_value(tag: &str, text: &str) -> Value {
    let plugin = PluginData { plugin_name: "text".into(), content: Vec::new() };
    Value {
        tag: tag.into(),
        metadata: Some(SummaryMetadata { plugin_data: Some(plugin), data_class: 2 }),
        value: Some(Val::Tensor(TensorProto {
            dtype: 7,
            tensor_shape: Some(TensorShapeProto {}),
            string_val: vec![text.as_bytes().to_vec()],
        })),
    }
}

fn is_text(s: &Summary) -> bool {
    s.value.iter().any(|v| matches!(v.value, Some(Val::Tensor(_))))
}

#[cfg(test)]
mod tests;
