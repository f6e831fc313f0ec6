//! The one error type of hvtrain. Library code returns `Result<T>`; only `main.rs`
//! turns an error into a message and an exit code (and, under MPI, an `MPI_Abort`).
//!
//! Must not: print or exit (only `main` does).

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad value in the job file or a `--set` override. `field` is the dotted key.
    #[error("config {file}: field `{field}`: {msg}")]
    Config { file: String, field: String, msg: String },

    /// A problem with an input data file: missing, unreadable, wrong shape or bad values.
    #[error("data {file}: {field}: {msg}")]
    Data { file: PathBuf, field: String, msg: String },

    /// A checkpoint that cannot be used; `kind` says whether it is damaged (another one may
    /// do) or fine but not this job's (no other one will do either).
    #[error("checkpoint {file}: {field}: {msg}")]
    Checkpoint { file: PathBuf, field: String, kind: CheckpointKind, msg: String },

    /// HDF5 library error while touching `file`.
    #[error("hdf5 {file}: {what}: {source}")]
    Hdf5 {
        file: PathBuf,
        what: String,
        #[source]
        source: hdf5::Error,
    },

    /// Plain I/O error while touching `file`.
    #[error("io {file}: {what}: {source}")]
    Io {
        file: PathBuf,
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// Ranks disagree about something they must share (config, model, fusion plan, step count).
    #[error("ranks disagree: {0}")]
    Mismatch(String),

    /// A device choice that cannot be met: `device = "cuda"` on a machine without one.
    #[error("device: {0}")]
    Device(String),

    /// The CUDA driver or a CUDA library failed: not loadable, too old, out of memory, a
    /// failed launch. The message names the library or the sizes involved.
    #[error("cuda: {0}")]
    Cuda(String),

    /// A host allocation failed (the CPU backend's buffers, the starting state): names what,
    /// its size, this rank's model state and the way out (`mem::message`).
    #[error("out of memory: {0}")]
    OutOfMemory(String),

    /// MPI failed to start or cannot give what hvtrain needs (thread level).
    #[error("mpi: {0}")]
    Mpi(String),

    /// The preemption signal handlers (SIGTERM, SIGINT, SIGUSR1) could not be installed.
    #[error("signals: cannot install the handlers for SIGTERM/SIGINT/SIGUSR1: {0}")]
    Signal(#[source] std::io::Error),

    /// Training diverged or produced non-finite numbers.
    #[error("training: {0}")]
    Training(String),
}

/// Why a checkpoint cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointKind {
    /// Unreadable, truncated, a dataset missing, or the checksum does not match.
    Damaged,
    /// Whole, but of another model (layers).
    OtherModel,
    /// Whole, but of a checkpoint format this hvtrain does not read.
    Format,
}

impl Error {
    pub fn data(file: impl Into<PathBuf>, field: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Data { file: file.into(), field: field.into(), msg: msg.into() }
    }
    pub fn checkpoint(
        file: impl Into<PathBuf>,
        field: impl Into<String>,
        kind: CheckpointKind,
        msg: impl Into<String>,
    ) -> Self {
        Error::Checkpoint { file: file.into(), field: field.into(), kind, msg: msg.into() }
    }
    pub fn config(file: impl Into<String>, field: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Config { file: file.into(), field: field.into(), msg: msg.into() }
    }
    pub fn hdf5(file: impl Into<PathBuf>, what: impl Into<String>, source: hdf5::Error) -> Self {
        Error::Hdf5 { file: file.into(), what: what.into(), source }
    }
    pub fn io(file: impl Into<PathBuf>, what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { file: file.into(), what: what.into(), source }
    }
}
