//! The `hvtrain data` subcommands' command line (clap): import-idx, import (CSV, Parquet, NumPy),
//! check, shard and their options. Parsing only, as the rest of `cli`.
//!
//! Must not: validate values or act (`main` acts, `data::import` converts).

use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Convert IDX files (the MNIST format, optionally .gz) to HDF5: x float32 [N, D] scaled to [0,1], y int32 [N].
    #[command(
        after_help = "Example:\n  hvtrain data import-idx /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \\\n      /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz data/fashion-mnist-train.h5"
    )]
    ImportIdx { images: PathBuf, labels: PathBuf, out: PathBuf },
    /// Convert CSV/TSV (optionally .gz), NumPy .npy or .npz, or Parquet into the HDF5 training reads:
    /// x float32 [N, D]; y int32 [N] classes (integer labels, or strings numbered 0, 1, … in
    /// sorted order, as scikit-learn's LabelEncoder does, their names kept as y_classes) or
    /// float32 [N, K] targets. Streams in chunks, so inputs larger than memory work.
    #[command(after_help = "Examples:
  hvtrain data import measurements.csv data/train.h5 --y label
  hvtrain data import sim.tsv.gz data/sim.h5 --y energy --y pressure --compress gzip
  hvtrain data import x.npy data/train-{rank}.h5 --y-file y.npy --shard 4
  hvtrain data import arrays.npz data/train.h5          (arrays x and y)
  hvtrain data import table.parquet data/train.h5 --y label --compress lzf
  hvtrain data import test.csv data/test.h5 --y label --classes-from data/train.h5
  hvtrain data import survey.csv data/train.h5 --y label --sample-weight weight
  hvtrain data import runs.csv data/train.h5 --y label --drop run_id --drop date
  hvtrain data import patients.csv data/train.h5 --y outcome --one-hot site --one-hot sex
  hvtrain data import test.csv data/test.h5 --y label --columns-from data/train.h5 --classes-from data/train.h5
  hvtrain data import new.csv data/new.h5 --features-only         (rows for hvtrain predict)

Class names are numbered in sorted order, so files imported apart agree when they hold the
same names; training, eval and sweeps compare every file's y_classes with the training file's
and remap or refuse. --classes-from (or --classes) fixes the numbering to another file's.

Missing fields (empty, NA, NaN, null) are an error naming the line (Parquet: the 0-based row)
and column unless --fill gives their value; a missing target is always an error.")]
    Import {
        input: PathBuf,
        /// The output file; with --shard N, `{rank}` in it is each file's number (else `-0`,
        /// `-1`, … go before the extension).
        out: PathBuf,
        /// CSV/TSV/Parquet: a target column, by name or 0-based index (repeat for several
        /// targets: a [N, K] regression target).
        #[arg(long)]
        y: Vec<String>,
        /// .npy input: the targets' .npy file ([N] integer classes, or [N] / [N, K] numbers).
        #[arg(long)]
        y_file: Option<PathBuf>,
        /// Targets are numbers to regress on, even when they are integers.
        #[arg(long)]
        regression: bool,
        /// The value of a missing feature (empty, NA, NaN, null), instead of an error.
        #[arg(long, allow_negative_numbers = true)]
        fill: Option<f32>,
        /// CSV/TSV: the first line is data (columns are then named 0, 1, …).
        #[arg(long)]
        no_header: bool,
        /// CSV/TSV: the field separator (default: tab for .tsv, else comma).
        #[arg(long)]
        delimiter: Option<char>,
        /// Write N files of contiguous, balanced rows (one per rank, for a `{rank}` path).
        #[arg(long, default_value_t = 1)]
        shard: usize,
        /// Compress the written datasets (chunked either way).
        #[arg(long, value_enum, default_value = "none")]
        compress: crate::data::import::sink::Compress,
        /// String labels: number them as this file's class names (its y_classes, or a weights
        /// file's class_names); a name not among them is an error.
        #[arg(long, value_name = "FILE.h5", conflicts_with_all = ["classes", "class_order"])]
        classes_from: Option<PathBuf>,
        /// String labels: the class names in order (class 0 first), comma-separated; a name not
        /// among them is an error.
        #[arg(long, value_name = "A,B,C", conflicts_with = "class_order")]
        classes: Option<String>,
        /// String labels: number the names in sorted order (files imported apart agree) or in
        /// order of first appearance (pandas.factorize).
        #[arg(long, value_enum, default_value = "sorted")]
        class_order: ClassOrderArg,
        /// Sample weights (Keras' sample_weight), one number >= 0 a row, written as the dataset
        /// `w` for `data.sample_weight = "w"`: CSV/TSV/Parquet a column (name or 0-based index;
        /// not a feature then), .npz an array's name, .npy a .npy file of [N] weights.
        #[arg(long, value_name = "COLUMN")]
        sample_weight: Option<String>,
        /// Rows to predict on: no target column (every column but --drop's is a feature) and no
        /// `y` written; .npy needs no --y-file, .npz no array y. (`hvtrain predict` also reads
        /// CSV/TSV, Parquet and NumPy inputs itself.)
        #[arg(long, conflicts_with_all = ["y", "y_file", "sample_weight"])]
        features_only: bool,
        /// CSV/TSV/Parquet: a column that is neither a feature nor a target (an id, a
        /// timestamp), by name or 0-based index; repeat for several.
        #[arg(long, value_name = "COLUMN")]
        drop: Vec<String>,
        /// CSV/TSV/Parquet: the features are this file's columns (an imported file's
        /// x_columns, or a weights file's), by name, in its order: a test or validation file
        /// imported with the training file's columns. Other columns but --y's are left out.
        #[arg(long, value_name = "FILE.h5", conflicts_with = "drop")]
        columns_from: Option<PathBuf>,
        /// CSV/TSV/Parquet: a categorical column (strings, or numbers that are codes) made one
        /// feature per value, `COLUMN=VALUE`, 1 where the row holds it (pandas' get_dummies);
        /// repeat for several. Files imported with --columns-from, and predict's inputs,
        /// encode it the same way (a value training never saw: all 0, logged).
        #[arg(long, value_name = "COLUMN", conflicts_with = "columns_from")]
        one_hot: Vec<String>,
    },
    /// List an HDF5 file's datasets: shape, element type, chunks, compression filters, and
    /// whether this HDF5 can load each filter (what to install when it cannot). Exit 1 when
    /// one cannot be loaded.
    #[command(after_help = "Example:\n  hvtrain data check data/fashion-mnist-train.h5")]
    Check { file: PathBuf },
    /// Split one HDF5 file into N files of contiguous rows, for `{rank}` paths in a job file.
    /// Datasets beside x and y with a row per sample (sample weights) are split with them;
    /// class names (`y_classes`) are copied into every part.
    #[command(
        after_help = "Example:\n  hvtrain data shard data/fashion-mnist-train.h5 --parts 4 --out data/shards\n  \
# then in the job file: train = \"data/shards/fashion-mnist-train-{rank}.h5\""
    )]
    Shard {
        input: PathBuf,
        /// Number of shard files (usually the number of ranks).
        #[arg(long)]
        parts: usize,
        /// Directory for the shard files.
        #[arg(long)]
        out: PathBuf,
        /// Features dataset name.
        #[arg(long, default_value = "x")]
        x: String,
        /// Targets dataset name.
        #[arg(long, default_value = "y")]
        y: String,
    },
}

/// `--class-order`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClassOrderArg {
    Sorted,
    Appearance,
}
