//! Command-line definitions (clap). Parsing only: `main` turns these into actions.
//!
//! Must not: validate values or act (config checks values, `main` acts).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

mod data;
pub use data::{ClassOrderArg, DataCommand};

#[derive(Parser, Debug)]
#[command(
    name = "hvtrain",
    version,
    about = "MLP training on HPC machines: data parallelism (MPI all-reduce with tensor fusion), tensor and pipeline parallelism, HDF5 shards, CPU or CUDA",
    long_about = "hvtrain trains dense neural networks (multi-layer perceptrons) on many ranks. It is an SPMD \
program: start one process per rank with mpirun or srun; each rank reads its own part of the HDF5 data, \
and gradients are averaged with MPI_Allreduce over fused buckets. The job file's [parallel] block also \
splits each layer pair over `tensor` ranks and the stack of layers over `pipeline` stages.\n\n\
Examples:\n  mpirun -n 2 hvtrain train jobs/fashion-mnist.toml\n  srun --mpi=pmix hvtrain train jobs/fashion-mnist.toml --set training.epochs=2\n  \
mpirun -n 4 hvtrain train jobs/fashion-mnist.toml --set parallel.pipeline=2 --set parallel.micro_batches=4\n  \
mpirun -n 8 hvtrain sweep jobs/sweep.toml   (a hyperparameter search, trials packed onto the ranks)\n  \
hvtrain data import-idx train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz data/train.h5\n\n\
Logging: RUST_LOG=debug|info|warn (default info); every line carries its rank."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train the model described by a job file.
    #[command(
        after_help = "Example:\n  mpirun -n 2 hvtrain train jobs/fashion-mnist.toml --set training.epochs=3 --set optimizer.lr=0.1\n\n\
  srun --mpi=pmix hvtrain train jobs/fashion-mnist.toml --resume auto\n\n\
Writes OUTPUT_DIR/metrics.jsonl (one JSON object per epoch), OUTPUT_DIR/weights.h5,\n\
TensorBoard event files in OUTPUT_DIR/tensorboard/ (tensorboard --logdir OUTPUT_DIR; off with\n\
--set output.tensorboard=false), and checkpoints OUTPUT_DIR/ckpt-step*.h5 as the job's\n\
[checkpoint] section says.\n\n\
Exit codes: 0 done; 1 error (any rank's error ends every rank); 2 bad command line;\n\
3 a rank is gone (no heartbeat for distribution.watchdog_seconds: dead, stopped or\n\
unreachable); 4 stalled (no rank made progress for distribution.stall_seconds); 75 stopped\n\
by SIGTERM/SIGINT/SIGUSR1 after writing a checkpoint (requeue and --resume auto); 101\n\
internal error; 130 a second signal before the checkpoint was done."
    )]
    Train(TrainArgs),
    /// Search the job's [sweep] space inside one allocation: trials packed onto groups of
    /// sweep.ranks_per_trial ranks, halved early (ASHA, Hyperband), resumable.
    #[command(
        after_help = "Example:\n  hvtrain sweep jobs/sweep.toml --dry-run       (the trials it would run)\n  mpirun -n 4 hvtrain sweep jobs/sweep.toml\n  srun --mpi=pmix hvtrain sweep jobs/sweep.toml --resume auto\n\n\
Writes OUTPUT_DIR/sweep.jsonl (one line per trial: values, status, the metric at each rung,\n\
epochs, seconds), OUTPUT_DIR/trials/NNNN/ (each trial's metrics.jsonl, checkpoints,\n\
weights.h5), and at the end a table of the trials, best first, OUTPUT_DIR/best.json and\n\
OUTPUT_DIR/best-weights.h5. `hvtrain plot OUTPUT_DIR` draws the metric against each key and\n\
every trial's curve.\n\n\
A trial that fails (diverges, a value it cannot take) is recorded as failed and the sweep\n\
goes on. Exit codes as train's: 75 after SIGTERM/SIGINT/SIGUSR1 (every running trial wrote\n\
a checkpoint; --resume auto continues them and does not rerun finished ones)."
    )]
    Sweep(SweepArgs),
    /// Find a learning rate: the job's training with the rate growing from --min to --max
    /// (the range test, fastai's lr_find), the loss of each step over every rank's rows.
    #[command(after_help = "Example:\n  mpirun -n 4 hvtrain lr-find jobs/fashion-mnist.toml\n  \
mpirun -n 4 hvtrain lr-find jobs/my-job.toml --min 1e-6 --max 1 --steps 200\n\n\
Runs the job as `train` would (its model, optimizer, data, ranks and global batch) for --steps\n\
optimizer steps, the learning rate growing geometrically from --min to --max, and stops early\n\
where the smoothed loss passes 4x its lowest. Writes OUTPUT_DIR/lr-find/lr_find.csv (step,\n\
lr, loss, smoothed loss) and lr_find.png (the curve, the suggestion marked) and logs the\n\
suggested optimizer.lr: where the smoothed loss fell fastest. Writes no weights and no checkpoint; the job's schedule, warm-up, evaluation and\n\
early stopping are set aside. Not with parameter servers.")]
    LrFind {
        #[command(flatten)]
        job: JobArgs,
        /// The first step's learning rate.
        #[arg(long, default_value_t = 1e-7)]
        min: f64,
        /// The last step's learning rate.
        #[arg(long, default_value_t = 10.0)]
        max: f64,
        /// Optimizer steps from --min to --max.
        #[arg(long, default_value_t = 100)]
        steps: usize,
    },
    /// Evaluate saved weights on the job's test data.
    #[command(
        after_help = "Examples:\n  mpirun -n 2 hvtrain eval jobs/fashion-mnist.toml --weights runs/fashion-mnist/weights.h5\n  \
mpirun -n 2 hvtrain eval jobs/my-job.toml --weights runs/my-job/weights.h5 --curves curves.csv\n\n\
Logs test_loss, test_accuracy, ROC AUC and average precision (classifiers, multi-label), the\n\
per-class report and confusion matrix, or MAE/RMSE/R² (regression), and prints them as one\n\
JSON line. --curves writes the ROC and precision-recall curves as CSV: a row per threshold\n\
(on the probability) and class (one vs rest; class 1 alone for two classes) or label, with\n\
tp, fp, fn, tn, precision, recall and fpr; pick a threshold there for predict --threshold."
    )]
    Eval {
        #[command(flatten)]
        job: JobArgs,
        /// Weights file written by `hvtrain train` (OUTPUT_DIR/weights.h5).
        #[arg(long)]
        weights: PathBuf,
        /// Write the ROC and precision-recall curves of the test data to this CSV file.
        #[arg(long, value_name = "FILE.csv")]
        curves: Option<PathBuf>,
    },
    /// Run a trained model on new inputs (one process, no mpirun needed).
    #[command(
        after_help = "Examples:\n  hvtrain predict jobs/fashion-mnist.toml --weights runs/fashion-mnist/weights.h5 \\\n      --input data/fashion-mnist-test.h5 --output predictions.h5\n  \
hvtrain predict jobs/my-job.toml --weights runs/my-job/weights.h5 --input new.csv --output predictions.csv --keep id\n\n\
INPUT: HDF5 (the job's x_dataset), or CSV/TSV (.gz too), Parquet, .npy or .npz, read as\n\
`hvtrain data import` reads them. When the training data named its columns (imported from a\n\
table), the input's columns are taken by name: in any order, extra ones (an id, the label)\n\
left out, a missing one an error.\n\n\
OUTPUT: HDF5 with `outputs` [N, K] and, for classification, `classes` [N] and `probabilities`\n\
[N, K] (and, when the training data named its classes, `class_names` [N], each row's name, and\n\
`y_classes`, the list); or, for a .csv/.tsv name, a table with a header: `class` and `p_NAME`\n\
per class; `p_NAME` and `label_NAME` per output (multi-label); a column per target\n\
(regression), one row per input row in its order. --weights takes weights.h5 or a checkpoint."
    )]
    Predict {
        #[command(flatten)]
        job: JobArgs,
        /// weights.h5 (OUTPUT_DIR/weights.h5) or a checkpoint.
        #[arg(long)]
        weights: PathBuf,
        /// The rows to predict on: HDF5, CSV/TSV (.gz), Parquet, .npy or .npz.
        #[arg(long)]
        input: PathBuf,
        /// Where the predictions go: HDF5, or a CSV/TSV table (by the name's ending).
        #[arg(long)]
        output: PathBuf,
        /// A table input: the value of a missing field (empty, NA, NaN, null), instead of an error.
        #[arg(long, allow_negative_numbers = true)]
        fill: Option<f32>,
        /// A CSV/TSV or Parquet input: copy this column (an id, the true label) beside each row's
        /// prediction, as it stands; repeat for several (HDF5 output: group `kept`).
        #[arg(long, value_name = "COLUMN")]
        keep: Vec<String>,
        /// Two classes: class 1 where its probability is at least this; multi-label: a label set
        /// where its probability is at least this (default: the larger probability; above 0.5).
        /// `hvtrain eval --curves` gives each threshold's precision and recall.
        #[arg(long, value_name = "PROBABILITY")]
        threshold: Option<f32>,
        /// A CSV/TSV input: the first line is data; its columns are the model's inputs in order
        /// (by position, not by name; --keep then takes 0-based indices).
        #[arg(long)]
        no_header: bool,
        /// A CSV/TSV input: the field separator (default: tab for .tsv, else comma).
        #[arg(long)]
        delimiter: Option<char>,
    },
    /// Write a trained model as a standard ONNX graph (onnxruntime, TensorRT, C++ codes).
    #[command(
        after_help = "Example:\n  hvtrain export jobs/fashion-mnist.toml --weights runs/fashion-mnist/weights.h5 \\\n      --format onnx --output model.onnx --probabilities\n\n\
Input `x` float [N, layers[0]]; outputs `outputs` [N, K] (logits or regression values, as\n\
`hvtrain predict` writes them) and, with --probabilities (or --softmax), `probabilities` [N, K]:\n\
the loss's output activation (softmax for softmax_cross_entropy, sigmoid for\n\
binary_cross_entropy), as `hvtrain predict` writes them. Opset 17.\n\
--weights takes weights.h5 or a checkpoint; the model it records must be the job's."
    )]
    Export {
        #[command(flatten)]
        job: JobArgs,
        #[arg(long)]
        weights: PathBuf,
        #[arg(long, value_enum, default_value = "onnx")]
        format: ExportFormat,
        #[arg(long)]
        output: PathBuf,
        /// Also output `probabilities`: the loss's output activation of the outputs (softmax
        /// for classes, sigmoid for multi-label; not for regression).
        #[arg(long, alias = "softmax")]
        probabilities: bool,
    },
    /// Prepare data: import CSV/TSV, NumPy or Parquet into HDF5, check a file, split one into
    /// per-rank shards, convert IDX (MNIST) files.
    #[command(subcommand)]
    Data(DataCommand),
    /// Check checkpoints before a resume (a file, or every checkpoint of an output directory),
    /// or average several into a weights file.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Check a node's backend: every backend operation, gradient checks and one training
    /// step against the CPU reference, and fp16/bf16 packing bit for bit. Exit 0 when all pass.
    #[command(
        after_help = "Example:\n  hvtrain selftest --device cuda     # on a new GPU node, before a long job\n\n\
With --device cuda it also checks a step with TF32 tensor cores (looser tolerance)."
    )]
    Selftest {
        #[arg(long, value_enum, default_value = "auto")]
        device: DeviceArg,
    },
    /// Draw a run's curves (loss, test accuracy or R², learning rate, samples/s per epoch) into one PNG, from
    /// RUN_DIR/metrics.jsonl. Several run directories are overlaid for comparison.
    #[command(
        after_help = "Examples:\n  hvtrain plot runs/fashion-mnist                 # writes runs/fashion-mnist/curves.png\n  \
hvtrain plot runs/lr-0.05 runs/lr-0.1 --output lr.png\n\n\
Panels: loss (train solid, test dashed, validation dotted), test accuracy (test R² for a\n\
regression loss; \"no test data\" when the job has none), the learning rate after each epoch\n\
(a log axis across decades), and training samples/s of all ranks. Each run has its own colour; the legend names\n\
its directory. One process, no mpirun; no Python and no system fonts needed."
    )]
    Plot {
        /// Output directories of runs (the job's output.dir), each with a metrics.jsonl.
        #[arg(value_name = "RUN_DIR", required = true)]
        runs: Vec<PathBuf>,
        /// The PNG to write [default: the first RUN_DIR's curves.png].
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Wait until rank 0 of the job's run has ended (a batch script's last step after the
    /// launcher returns), then say how the run ended: exit 75 when it left a stop checkpoint.
    #[command(after_help = "Example (the end of a batch script; jobs/*.sbatch do this):\n  \
t0=$(date +%s)\n  timeout 23h mpirun -n 64 hvtrain train JOB --resume auto; rc=$?\n  \
hvtrain wait JOB --since \"$t0\"; [ $? = 75 ] && rc=75\n\n\
A second SIGTERM or SIGINT makes Open MPI's mpirun exit at once, before its ranks: rank 0\n\
may still be writing the stop checkpoint, and a batch script that ends then takes it down\n\
with the job. Rank 0 holds a lock on OUTPUT_DIR/.hvtrain-rank0.lock until its process ends;\n\
this waits for that lock (no MPI, one process, on rank 0's node or a shared file system).\n\n\
Exit codes: 75 rank 0 ended after writing a stop checkpoint (requeue and --resume auto);\n\
0 rank 0 ended otherwise, or no run of this launch used output.dir; 1 rank 0 still held\n\
the lock after --seconds (or an error).")]
    Wait {
        #[command(flatten)]
        job: JobArgs,
        /// Give up after this many seconds (keep it under Slurm's KillWait, 30 s by default
        /// at most sites, when a scancel started the stop).
        #[arg(long, default_value_t = 25.0)]
        seconds: f64,
        /// Unix time at which the launch started (`date +%s`): a state left by an older run
        /// in output.dir is then not this launch's.
        #[arg(long, value_name = "UNIX_SECONDS")]
        since: Option<u64>,
    },
    /// Micro-benchmarks of this machine, as hvtrain sees it.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// `auto`: continue the sweep in output.dir (finished trials are kept, running ones resume
    /// from their checkpoints); a new sweep when there is none.
    #[arg(long, value_name = "auto", value_parser = ["auto"])]
    pub resume: Option<String>,
    /// Print the trials (every key's value), the rungs and each trial's `--set` overrides,
    /// then stop: no MPI, nothing written.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Write a Chrome trace of every step's phases on every rank (opens in Perfetto).
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Continue from a checkpoint: `auto` (the newest valid one in output.dir; start fresh if
    /// there is none) or a checkpoint file.
    #[arg(long, value_name = "auto|FILE")]
    pub resume: Option<String>,
}

#[derive(Args, Debug)]
pub struct JobArgs {
    /// The job file (TOML). See jobs/fashion-mnist.toml for every key.
    pub job: String,
    /// Override a job key: --set training.epochs=3 (value in TOML syntax; bare words are strings). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum CheckpointCommand {
    /// Check a checkpoint, or every one of an output directory, as `--resume` does.
    ///
    /// Checks the format, the model, the checksum and every part of one written in parts, and
    /// describes each: its step, how many data-parallel ranks wrote it,
    /// whole or in parts, its optimizer state, its run and when. Given an output directory:
    /// every checkpoint in it, and the one `--resume auto` would continue from. Exit 0 when
    /// every one is usable, 1 when one is damaged or none is found.
    #[command(after_help = "Examples:\n  hvtrain checkpoint check runs/fashion-mnist\n  \
hvtrain checkpoint check runs/fashion-mnist/ckpt-step000000470.h5\n\n\
One process, no mpirun: on a login node before resubmitting a job. Reads one layer (or one\n\
part) at a time, so it needs little memory for any model.")]
    Check { path: PathBuf },
    /// Average the parameters of several checkpoints or weights files of one model into a
    /// weights file (checkpoint averaging; along one run's last checkpoints, the averaging of
    /// stochastic weight averaging, done after the training).
    ///
    /// Each PATH is a checkpoint (whole or the index of one in parts), a weights file, or an
    /// output directory (its checkpoints: all, or the newest --last N). The model is the one
    /// the first file records; every file must record the same model and normalization. Each
    /// parameter is the mean over the files (summed in float64), written a layer at a time.
    /// The result is a weights file for eval, predict and export.
    #[command(
        after_help = "Examples:\n  hvtrain checkpoint average runs/fashion-mnist --last 3 --output runs/fashion-mnist/averaged.h5\n  \
hvtrain checkpoint average runs/a/ckpt-step000002000.h5 runs/a/ckpt-step000002500.h5 --output avg.h5\n  \
hvtrain eval jobs/fashion-mnist.toml --weights runs/fashion-mnist/averaged.h5\n\n\
Averaging helps most with checkpoints from the flat end of a run (a constant or slowly falling\n\
learning rate), as stochastic weight averaging does; checkpoint.every_steps and checkpoint.keep\n\
decide which there are. One process, no mpirun."
    )]
    Average {
        /// Checkpoints, weights files, or output directories.
        #[arg(value_name = "PATH", required = true)]
        paths: Vec<PathBuf>,
        /// Of each directory, the newest N checkpoints by step [default: all of them].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(2..))]
        last: Option<u64>,
        /// The weights file to write.
        #[arg(long, value_name = "FILE")]
        output: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// All-reduce bandwidth, osu_allreduce-style: raw MPI_Allreduce vs the engine's fused path
    /// on a gradient-like set of tensors of the same total size. Run under mpirun.
    #[command(after_help = "Example:\n  mpirun -n 2 hvtrain bench allreduce --min-bytes 4096 --max-bytes 268435456")]
    Allreduce {
        #[arg(long, default_value_t = 4096)]
        min_bytes: usize,
        #[arg(long, default_value_t = 256 << 20)]
        max_bytes: usize,
        /// Fusion threshold of the fused path, MiB.
        #[arg(long, default_value_t = 64.0)]
        threshold_mb: f64,
        /// Seconds to spend per size and path.
        #[arg(long, default_value_t = 0.5)]
        seconds: f64,
        /// The fused paths' reduction: `average` (the sum) or `adasum` (checked against a
        /// float64 Adasum of every rank's data; raw stays MPI_Allreduce's sum, for comparison).
        #[arg(long, value_enum, default_value_t = ReductionArg::Average)]
        reduction: ReductionArg,
        /// The fused paths as the hierarchical all-reduce (`distribution.hierarchical`).
        #[arg(long)]
        hierarchical: bool,
    },
    /// Buffers past MPI's 32-bit counts (2^31 - 1 elements), sent for real: a float32 broadcast
    /// and a ring exchange of 16-bit words, every element checked on every rank. Needs about
    /// 4 bytes per element and rank. Run under mpirun.
    #[command(after_help = "Example:\n  mpirun -n 2 hvtrain bench pieces --elements 2147483655")]
    Pieces {
        /// Elements per buffer (2^31 + 7 by default).
        #[arg(long, default_value_t = (1usize << 31) + 7)]
        elements: usize,
    },
    /// Training steps per second of one MLP on one device (CPU or GPU, no MPI), and the
    /// GEMM rate of the step's own matrix products on that device in the same run.
    #[command(
        after_help = "Example:\n  hvtrain bench step --device cuda --layers 784,4096,4096,4096,10 --batch 8192 --precision tf32\n\n\
Prints one JSON object (samples_per_s, step_tflops, gemm_tflops, fraction_of_gemm, ...),\n\
also written to --json FILE. The PyTorch peer on the same shapes: bench/torch_peer.py."
    )]
    Step {
        #[arg(long, value_enum, default_value = "auto")]
        device: DeviceArg,
        #[arg(long, value_delimiter = ',', default_value = "784,512,512,10")]
        layers: Vec<usize>,
        #[arg(long, default_value_t = 1024)]
        batch: usize,
        #[arg(long, value_enum, default_value = "fp32")]
        precision: PrecisionArg,
        /// The hidden layers' activation (model.activation's names).
        #[arg(long, default_value = "relu", value_parser = parse_activation)]
        activation: crate::config::Activation,
        /// Timed steps (after --warmup untimed ones).
        #[arg(long, default_value_t = 50)]
        steps: usize,
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        /// CPU threads of the one process (training.threads).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Where the batches come from: `device`, a data set of 8 batches kept in device
        /// memory, each step's rows gathered there by index (as the PyTorch peer keeps its
        /// data on the GPU); `host`, each batch copied from host memory as a step without
        /// resident data does.
        #[arg(long, value_enum, default_value = "device")]
        data: DataArg,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// GEMM rate (GFLOP/s) of the CPU backend on an MLP's step shapes (one thread unless --threads).
    #[command(after_help = "Example:\n  hvtrain bench gemm --layers 784,512,512,10 --batch 128")]
    Gemm {
        #[arg(long, value_delimiter = ',', default_value = "784,512,512,10")]
        layers: Vec<usize>,
        #[arg(long, default_value_t = 128)]
        batch: usize,
        /// Seconds to measure.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// fp32 (hvtrain's AVX-512 kernel; matrixmultiply's on CPUs without AVX-512F) or bf16 (bf16 operands, float32 sums: AVX512-BF16).
        #[arg(long, value_enum, default_value_t = PrecisionArg::Fp32)]
        precision: PrecisionArg,
        /// Threads of the one process (training.threads).
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
}

/// `hvtrain bench step --data`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataArg {
    Device,
    Host,
}

/// `--device` on the command line (the job file's `training.device`).
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DeviceArg {
    Auto,
    Cpu,
    Cuda,
}

impl DeviceArg {
    pub fn choice(self) -> crate::config::DeviceChoice {
        match self {
            DeviceArg::Auto => crate::config::DeviceChoice::Auto,
            DeviceArg::Cpu => crate::config::DeviceChoice::Cpu,
            DeviceArg::Cuda => crate::config::DeviceChoice::Cuda,
        }
    }
}

/// `hvtrain export --format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ExportFormat {
    Onnx,
}

/// `--precision` on the command line (the job file's `training.precision`).
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum PrecisionArg {
    Fp32,
    Tf32,
    Bf16,
}

impl PrecisionArg {
    pub fn precision(self) -> crate::config::Precision {
        match self {
            PrecisionArg::Fp32 => crate::config::Precision::Fp32,
            PrecisionArg::Tf32 => crate::config::Precision::Tf32,
            PrecisionArg::Bf16 => crate::config::Precision::Bf16,
        }
    }
}

/// `hvtrain bench allreduce --reduction` (the job file's `distribution.reduction`).
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ReductionArg {
    Average,
    Adasum,
}

impl ReductionArg {
    pub fn reduction(self) -> crate::config::Reduction {
        match self {
            ReductionArg::Average => crate::config::Reduction::Average,
            ReductionArg::Adasum => crate::config::Reduction::Adasum,
        }
    }
}

#[cfg(test)]
mod docs_tests;

/// `--activation`: model.activation's names (and `swish` for silu).
fn parse_activation(s: &str) -> Result<crate::config::Activation, String> {
    use crate::config::Activation;
    let all = Activation::ALL;
    all.into_iter()
        .find(|a| a.name() == s || (s == "swish" && *a == Activation::Silu))
        .ok_or_else(|| format!("one of {}", all.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")))
}
