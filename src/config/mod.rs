//! The job file: a TOML document, parsed strictly (unknown keys are errors), with
//! `--set dotted.key=value` overrides applied before validation.
//!
//! Paths in the job file are taken relative to the working directory the job starts in
//! (as for `srun`/`mpirun` in a batch script), not relative to the job file.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

mod env;
pub mod limits;
mod ps;
use env::env_overrides;
pub use limits::{num, Span};
pub use ps::roles;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The job file this came from, for error messages (not serialized, not compared).
    #[serde(skip)]
    pub source: String,
    pub data: DataCfg,
    pub model: ModelCfg,
    #[serde(default)]
    pub training: TrainingCfg,
    #[serde(default)]
    pub optimizer: OptimizerCfg,
    #[serde(default)]
    pub distribution: DistributionCfg,
    #[serde(default)]
    pub output: OutputCfg,
    #[serde(default)]
    pub checkpoint: CheckpointCfg,
    #[serde(default)]
    pub parallel: ParallelCfg,
}

/// How the ranks split the work: `tensor` ranks split each pair of dense layers
/// (Megatron-style), `pipeline` stages split the stack of layers (balanced by FLOPs), each
/// step runs as `micro_batches` micro-batches (1F1B), and the data-parallel degree is what
/// remains, ranks / (tensor × pipeline).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ParallelCfg {
    /// Ranks that split each dense layer pair (consecutive ranks, so inside a node).
    #[serde(default = "one")]
    pub tensor: usize,
    /// Pipeline stages: contiguous runs of layers, balanced by FLOPs.
    #[serde(default = "one")]
    pub pipeline: usize,
    /// Micro-batches per step (the 1F1B schedule's; gradient accumulation on one stage).
    #[serde(default = "one")]
    pub micro_batches: usize,
}

impl Default for ParallelCfg {
    fn default() -> Self {
        ParallelCfg { tensor: 1, pipeline: 1, micro_batches: 1 }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CheckpointCfg {
    /// Write a checkpoint every this many steps (0: off).
    #[serde(default)]
    pub every_steps: u64,
    /// Write a checkpoint when this many minutes have passed since the last one (0: off).
    #[serde(default)]
    pub every_minutes: f64,
    /// Checkpoints kept in output.dir (the newest ones); 0 is taken as 1.
    #[serde(default = "default_keep")]
    pub keep: usize,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataCfg {
    /// Training data. `{rank}` in the path selects one file per rank; otherwise each rank
    /// reads its own contiguous slice of the one file.
    pub train: String,
    /// Test data, split across ranks the same way. Optional.
    #[serde(default)]
    pub test: Option<String>,
    #[serde(default = "default_x")]
    pub x_dataset: String,
    #[serde(default = "default_y")]
    pub y_dataset: String,
    /// Shuffle the order of samples every epoch (seeded by `training.seed` and the epoch).
    #[serde(default = "yes")]
    pub shuffle: bool,
    /// Rows per contiguous block read from HDF5; blocks are shuffled, then rows within a window.
    #[serde(default = "default_block")]
    pub shuffle_block: usize,
    /// Rows held in memory at once by the reader (a multiple of `shuffle_block`).
    #[serde(default = "default_window")]
    pub shuffle_window: usize,
    /// Leave out each rank's rows past the smallest share's full batches, every epoch (the
    /// old behaviour; logged at warn). Off: every row is used once per epoch, with short
    /// last batches and the gradient average weighted by the rows each rank used.
    #[serde(default)]
    pub drop_last: bool,
    /// Features are read as x * x_scale + x_offset (in float64, then rounded to float32),
    /// whatever their stored type: 1/255 turns uint8 pixels into [0, 1]. Targets are not scaled.
    #[serde(default = "default_x_scale")]
    pub x_scale: f64,
    #[serde(default)]
    pub x_offset: f64,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Relu,
    Tanh,
    Gelu,
    Identity,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LossKind {
    /// Classification: `y` holds integer class labels in [0, classes).
    SoftmaxCrossEntropy,
    /// Regression: `y` holds float32 targets [N, outputs]; loss is the mean over all elements.
    Mse,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCfg {
    /// Layer widths, input first: [784, 512, 512, 10] is two hidden layers of 512.
    pub layers: Vec<usize>,
    #[serde(default = "default_activation")]
    pub activation: Activation,
    #[serde(default = "default_loss")]
    pub loss: LossKind,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda,
}

/// The dense layers' arithmetic on a GPU: exact float32 (SGEMM), or TF32 tensor cores
/// (inputs rounded to 10 mantissa bits, sums in float32). The CPU always computes in fp32.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    Fp32,
    Tf32,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingCfg {
    #[serde(default = "one")]
    pub epochs: usize,
    /// Samples per rank per step; the global batch is this times the number of ranks.
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_device")]
    pub device: DeviceChoice,
    /// "fp32" (default) or "tf32" (TF32 tensor cores on the GPU; the CPU ignores it).
    #[serde(default)]
    pub precision: Precision,
    /// Log a progress line every this many steps (0: only per epoch).
    #[serde(default)]
    pub log_every: usize,
    /// Also log progress (step, running loss, samples/s, time left) at least this often,
    /// in seconds (0: off).
    #[serde(default = "default_progress")]
    pub progress_seconds: f64,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    Sgd,
    Adam,
    Adamw,
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
    /// L2 penalty for sgd/adam (added to the gradient), decoupled decay for adamw. Weights only.
    #[serde(default)]
    pub weight_decay: f64,
    /// Multiply `lr` by the number of ranks (the usual rule when the global batch grows with it).
    #[serde(default)]
    pub scale_lr_by_world_size: bool,
    /// Ramp the learning rate linearly from lr/warmup_steps to lr over this many steps.
    #[serde(default)]
    pub warmup_steps: usize,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DistributionCfg {
    /// Gradients are packed into buckets of at most this many MiB; each bucket is one
    /// MPI_Allreduce. A tensor larger than this travels alone. 0 means one bucket per tensor.
    /// Environment: HVTRAIN_FUSION_THRESHOLD (bytes, as Horovod's HOROVOD_FUSION_THRESHOLD).
    #[serde(default = "default_fusion")]
    pub fusion_threshold_mb: f64,
    /// A smaller threshold for the first bucket in reduction order, so communication starts
    /// sooner (PyTorch DDP does this with 1 MiB). 0: the same as the others.
    /// Environment: HVTRAIN_FIRST_BUCKET (bytes).
    #[serde(default)]
    pub first_bucket_mb: f64,
    /// Which end of the network fills buckets first: `backward` (the last layer's gradients,
    /// ready first: best for overlap) or `forward`. Environment: HVTRAIN_BUCKET_ORDER.
    #[serde(default = "default_order")]
    pub bucket_order: BucketOrder,
    /// Reduce a bucket on the communication thread as soon as backward has filled it, while
    /// backward goes on. Environment: HVTRAIN_OVERLAP (0/1).
    #[serde(default = "yes")]
    pub overlap: bool,
    /// Gradient compression on the wire: `none` (exact float32), `fp16` or `bf16`.
    /// Environment: HVTRAIN_COMPRESSION.
    #[serde(default = "default_compression")]
    pub compression: Compression,
    /// A rank whose heartbeats stop for this many seconds is dead, stopped or unreachable, and
    /// the job ends. A rank that is only slow keeps sending heartbeats, so this is not a
    /// deadline on any operation (it was one before heartbeats; it still is when MPI grants
    /// no MPI_THREAD_MULTIPLE). Environment: HVTRAIN_WATCHDOG_SECONDS.
    #[serde(default = "default_watchdog")]
    pub watchdog_seconds: f64,
    /// The job ends when every rank is alive but none has completed a step or moved on to
    /// another phase for this many seconds: the longest any single phase (one step, a
    /// checkpoint write, a data read, an evaluation) may take. Environment: HVTRAIN_STALL_SECONDS.
    #[serde(default = "default_stall")]
    pub stall_seconds: f64,
    /// Compare a checksum of the parameters across ranks every this many steps (0: never).
    /// Environment: HVTRAIN_CHECK_EVERY.
    #[serde(default = "default_check_every")]
    pub check_every: usize,
    /// `allreduce` (Horovod-style, the default) or `parameter_server` (see `src/parallel/ps`).
    #[serde(default)]
    pub strategy: Strategy,
    /// Parameter servers: the last `servers` ranks hold the parameters; the others are workers.
    #[serde(default = "one")]
    pub servers: usize,
    /// Parameter servers: 0 synchronous; K > 0: a worker may be at most K steps ahead of the
    /// slowest; -1 fully asynchronous.
    #[serde(default)]
    pub staleness: i64,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    #[default]
    Allreduce,
    ParameterServer,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BucketOrder {
    Backward,
    Forward,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Fp16,
    Bf16,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputCfg {
    #[serde(default = "default_out")]
    pub dir: String,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of every step's phases on every
    /// rank to this file. Also `hvtrain train --timeline FILE`, or HVTRAIN_TIMELINE.
    #[serde(default)]
    pub timeline: Option<String>,
}

fn default_x() -> String {
    "x".into()
}
fn default_y() -> String {
    "y".into()
}
fn default_x_scale() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn one() -> usize {
    1
}
fn default_block() -> usize {
    256
}
fn default_window() -> usize {
    4096
}
fn default_activation() -> Activation {
    Activation::Relu
}
fn default_loss() -> LossKind {
    LossKind::SoftmaxCrossEntropy
}
fn default_batch() -> usize {
    32
}
fn default_device() -> DeviceChoice {
    DeviceChoice::Auto
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
fn default_fusion() -> f64 {
    64.0
}
fn default_out() -> String {
    "runs/default".into()
}
fn default_progress() -> f64 {
    30.0
}
fn default_keep() -> usize {
    3
}
fn default_order() -> BucketOrder {
    BucketOrder::Backward
}
fn default_compression() -> Compression {
    Compression::None
}
fn default_watchdog() -> f64 {
    8.0
}
fn default_stall() -> f64 {
    600.0
}
fn default_check_every() -> usize {
    200
}

impl Default for TrainingCfg {
    fn default() -> Self {
        TrainingCfg {
            epochs: one(),
            batch_size: default_batch(),
            seed: 0,
            device: default_device(),
            precision: Precision::Fp32,
            log_every: 0,
            progress_seconds: default_progress(),
        }
    }
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
            weight_decay: 0.0,
            scale_lr_by_world_size: false,
            warmup_steps: 0,
        }
    }
}
impl Default for DistributionCfg {
    fn default() -> Self {
        DistributionCfg {
            fusion_threshold_mb: default_fusion(),
            first_bucket_mb: 0.0,
            bucket_order: default_order(),
            overlap: true,
            compression: default_compression(),
            watchdog_seconds: default_watchdog(),
            stall_seconds: default_stall(),
            check_every: default_check_every(),
            strategy: Strategy::Allreduce,
            servers: 1,
            staleness: 0,
        }
    }
}
impl Default for OutputCfg {
    fn default() -> Self {
        OutputCfg { dir: default_out(), timeline: None }
    }
}

impl Job {
    /// Read `path`, apply `overrides` (`dotted.key=value`, value in TOML syntax or a bare
    /// string), deserialize strictly and validate.
    pub fn load(path: &str, overrides: &[String]) -> Result<Job> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(path, "(file)", format!("cannot read the job file: {e}")))?;
        Job::parse(path, &text, overrides)
    }

    /// As `load`, with the HVTRAIN_* environment variables applied between the job file
    /// and `--set` (so the command line wins). Returns the variables used, for the log.
    pub fn load_with_env(path: &str, overrides: &[String]) -> Result<(Job, Vec<String>)> {
        let (mut sets, used) = env_overrides(path, |k| std::env::var(k).ok())?;
        sets.extend_from_slice(overrides);
        Ok((Job::load(path, &sets)?, used))
    }

    /// As `load`, from text; `origin` names the source in errors.
    pub fn parse(origin: &str, text: &str, overrides: &[String]) -> Result<Job> {
        let mut doc: toml::Table =
            text.parse().map_err(|e: toml::de::Error| Error::config(origin, "(syntax)", one_line(&e.to_string())))?;
        for o in overrides {
            apply_override(origin, &mut doc, o)?;
        }
        let mut job: Job = serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
            let field = e.path().to_string();
            Error::config(origin, field, one_line(&e.into_inner().to_string()))
        })?;
        job.validate(origin)?;
        job.source = origin.to_string();
        Ok(job)
    }

    fn validate(&self, origin: &str) -> Result<()> {
        let bad = |field: &str, msg: String| Err(Error::config(origin, field, msg));
        let m = &self.model;
        let l = limits::LAYER_COUNT;
        if m.layers.len() < 2 || m.layers.len() as u64 > l.1 {
            return bad(
                "model.layers",
                format!(
                    "needs at least an input and an output width, got {:?} (allowed: {} to {} widths)",
                    abbreviate(&m.layers),
                    l.0,
                    l.1
                ),
            );
        }
        let w = limits::LAYER_WIDTH;
        if let Some(i) = m.layers.iter().position(|&v| v == 0) {
            return bad(
                "model.layers",
                format!("width {i} is 0; every layer needs at least one unit (allowed: {} to {})", w.0, w.1),
            );
        }
        if let Some(i) = m.layers.iter().position(|&v| v as u64 > w.1) {
            return bad("model.layers", format!("width {i} is {}; allowed: {} to {}", m.layers[i], w.0, w.1));
        }
        let n_params: u128 = m.layers.windows(2).map(|p| (p[0] as u128 + 1) * p[1] as u128).sum();
        if n_params > limits::MAX_PARAMS as u128 {
            return bad(
                "model.layers",
                format!(
                    "{:?} has {n_params} parameters; at most {} are allowed (MPI element counts are 32-bit)",
                    abbreviate(&m.layers),
                    limits::MAX_PARAMS
                ),
            );
        }
        if m.loss == LossKind::SoftmaxCrossEntropy && *m.layers.last().unwrap() < 2 {
            return bad("model.layers", "softmax_cross_entropy needs at least 2 output classes".into());
        }
        let t = &self.training;
        let o = &self.optimizer;
        let dist = &self.distribution;
        let ck = &self.checkpoint;
        let d = &self.data;
        let par = &self.parallel;
        let counts: [(&str, u64, Span); 12] = [
            ("training.epochs", t.epochs as u64, limits::EPOCHS),
            ("training.batch_size", t.batch_size as u64, limits::BATCH_SIZE),
            ("training.log_every", t.log_every as u64, limits::LOG_EVERY),
            ("optimizer.warmup_steps", o.warmup_steps as u64, limits::WARMUP_STEPS),
            ("distribution.check_every", dist.check_every as u64, limits::CHECK_EVERY),
            ("checkpoint.every_steps", ck.every_steps, limits::EVERY_STEPS),
            ("checkpoint.keep", ck.keep as u64, limits::KEEP),
            ("data.shuffle_block", d.shuffle_block as u64, limits::SHUFFLE_BLOCK),
            ("data.shuffle_window", d.shuffle_window as u64, limits::SHUFFLE_WINDOW),
            ("parallel.tensor", par.tensor as u64, limits::TENSOR),
            ("parallel.pipeline", par.pipeline as u64, limits::PIPELINE),
            ("parallel.micro_batches", par.micro_batches as u64, limits::MICRO_BATCHES),
        ];
        // (training.seed needs no bound: every u64 is a seed.)
        for (field, v, span) in counts {
            if !span.allows(v as f64) {
                return bad(field, span.error(&v.to_string()));
            }
        }
        if d.shuffle_window < d.shuffle_block {
            return bad(
                "data.shuffle_window",
                format!("must be >= data.shuffle_block ({}), got {}", d.shuffle_block, d.shuffle_window),
            );
        }
        let reals: [(&str, f64, Span); 12] = [
            ("training.progress_seconds", t.progress_seconds, limits::PROGRESS_SECONDS),
            ("optimizer.lr", o.lr, limits::LR),
            ("optimizer.momentum", o.momentum, limits::MOMENTUM),
            ("optimizer.beta1", o.beta1, limits::BETA),
            ("optimizer.beta2", o.beta2, limits::BETA),
            ("optimizer.eps", o.eps, limits::EPS),
            ("optimizer.weight_decay", o.weight_decay, limits::WEIGHT_DECAY),
            ("distribution.fusion_threshold_mb", dist.fusion_threshold_mb, limits::FUSION_MB),
            ("distribution.first_bucket_mb", dist.first_bucket_mb, limits::FUSION_MB),
            ("distribution.watchdog_seconds", dist.watchdog_seconds, limits::WATCHDOG_SECONDS),
            ("distribution.stall_seconds", dist.stall_seconds, limits::STALL_SECONDS),
            ("checkpoint.every_minutes", ck.every_minutes, limits::EVERY_MINUTES),
        ];
        for (field, v, span) in reals {
            if !span.allows(v) {
                return bad(field, span.error(&num(v)));
            }
        }
        self.validate_parallel(origin)?;
        self.validate_ps(origin)?;
        for (field, v) in [("data.x_scale", d.x_scale), ("data.x_offset", d.x_offset)] {
            if !v.is_finite() || v.abs() > limits::X_AFFINE_MAX {
                return bad(
                    field,
                    format!("must be finite, at most {} in magnitude, got {}", num(limits::X_AFFINE_MAX), num(v)),
                );
            }
        }
        if d.x_scale == 0.0 {
            return bad(
                "data.x_scale",
                "is 0, which makes every feature equal to data.x_offset; 1 leaves them as stored".into(),
            );
        }
        if o.nesterov && o.momentum == 0.0 {
            return bad("optimizer.nesterov", "needs optimizer.momentum > 0".into());
        }
        if d.train.is_empty() {
            return bad("data.train", "is empty; give the path of the training HDF5 file".into());
        }
        if self.output.dir.is_empty() {
            return bad("output.dir", "is empty".into());
        }
        Ok(())
    }

    /// The `[parallel]` block against the model (the world size is checked at start-up, in
    /// `parallel::grid`). Pipeline stages are contiguous runs of layers, balanced by FLOPs
    /// (`model::pipeline::stages`), at least one layer each. Tensor parallelism pairs the
    /// layers of each stage and splits the hidden width between a pair's two layers (the
    /// first's outputs, the second's inputs); a width that does not divide by `tensor` is
    /// split unevenly (the first width % tensor ranks get one unit more), so every split
    /// width needs at least `tensor` units.
    fn validate_parallel(&self, origin: &str) -> Result<()> {
        let bad = |field: &str, msg: String| Err(Error::config(origin, field, msg));
        let p = &self.parallel;
        let layers = &self.model.layers;
        let n = layers.len() - 1;
        let stages = match crate::model::pipeline::stages(layers, p.pipeline) {
            Ok(s) => s,
            Err(m) => return bad("parallel.pipeline", format!("parallel.pipeline = {}: {m}", p.pipeline)),
        };
        if p.micro_batches > self.training.batch_size {
            return bad(
                "parallel.micro_batches",
                format!(
                    "parallel.micro_batches = {} is larger than training.batch_size = {} (rows per rank and step), so \
                     some micro-batches would be empty; use micro_batches <= {}",
                    p.micro_batches, self.training.batch_size, self.training.batch_size
                ),
            );
        }
        if p.tensor > 1 {
            if n < 2 || stages.iter().all(|s| s.len() < 2) {
                return bad(
                    "parallel.tensor",
                    format!(
                        "parallel.tensor = {}: tensor parallelism splits pairs of dense layers within a pipeline stage, \
                         and model.layers = {}{} has no stage with two layers; use tensor = 1{}",
                        p.tensor,
                        abbreviate(layers),
                        if p.pipeline > 1 { format!(" in {} stage(s)", p.pipeline) } else { String::new() },
                        if p.pipeline > 1 { " or fewer stages" } else { "" }
                    ),
                );
            }
            // The widths split: the output of each pair's first layer, in every stage.
            let split = stages.iter().flat_map(|s| (s.start..s.end - 1).step_by(2).map(|l| l + 1));
            let (i, w) = split.map(|i| (i, layers[i])).min_by_key(|&(_, w)| w).expect("a stage with two layers");
            if w < p.tensor {
                return bad(
                    "parallel.tensor",
                    format!(
                        "parallel.tensor = {} is larger than model.layers[{i}] = {w}, a hidden width that tensor \
                         parallelism splits over the tensor ranks (every rank needs at least one unit); use tensor <= {w}",
                        p.tensor
                    ),
                );
            }
        }
        Ok(())
    }

    /// A stable fingerprint of everything that must be equal on every rank.
    pub fn fingerprint(&self) -> u64 {
        fnv1a(serde_json::to_string(self).expect("job serializes").as_bytes())
    }

    pub fn fusion_threshold_bytes(&self) -> usize {
        (self.distribution.fusion_threshold_mb * 1024.0 * 1024.0) as usize
    }

    /// The first bucket's threshold: `first_bucket_mb` when set, else the common one.
    pub fn first_bucket_bytes(&self) -> usize {
        match self.distribution.first_bucket_mb {
            f if f > 0.0 => (f * 1024.0 * 1024.0) as usize,
            _ => self.fusion_threshold_bytes(),
        }
    }
}

/// A long list of widths, shortened for an error message.
fn abbreviate(v: &[usize]) -> String {
    if v.len() <= 8 {
        format!("{v:?}")
    } else {
        format!("[{}, {}, {}, ... ({} widths)]", v[0], v[1], v[2], v.len())
    }
}

fn apply_override(origin: &str, doc: &mut toml::Table, o: &str) -> Result<()> {
    let (key, value) =
        o.split_once('=').ok_or_else(|| Error::config(origin, o, "--set needs the form dotted.key=value"))?;
    let key = key.trim();
    let value = value.trim();
    // A value is read as TOML (numbers, booleans, arrays, quoted strings); a bare word is a string.
    let parsed: toml::Value = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config(origin, key, "--set key has an empty part"));
    }
    let mut table = doc;
    for p in &parts[..parts.len() - 1] {
        let entry = table.entry(p.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| Error::config(origin, key, format!("`{p}` is a value, not a section")))?;
    }
    table.insert(parts[parts.len() - 1].to_string(), parsed);
    Ok(())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// FNV-1a, 64 bit: tiny, stable, good enough to tell configs apart.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests;
