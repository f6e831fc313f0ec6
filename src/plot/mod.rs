//! `hvtrain plot`: one PNG of runs' curves (`runs.rs`: each run's metrics.jsonl), or of a
//! sweep (`sweep.rs`: a folder with `sweep.jsonl`: the metric against each searched key and
//! every trial's curve). `style.rs` holds what both draw with; `lr_find.rs` draws
//! `hvtrain lr-find`'s curve from the points its caller passes.
//!
//! Must not: read anything but `metrics.jsonl`, `sweep.jsonl` and `sweep.json`.

pub mod lr_find;
mod runs;
pub mod style;
mod sweep;

use crate::error::Result;
use std::path::{Path, PathBuf};

/// Draw `dirs` into `output`: a sweep's folder (it has `sweep.jsonl`) alone, or runs
/// overlaid. Returns the path written.
pub fn plot(dirs: &[PathBuf], output: Option<&Path>) -> Result<PathBuf> {
    match dirs {
        [d] if d.join(sweep::TRIALS).exists() => sweep::plot_sweep(d, output),
        _ => runs::plot_runs(dirs, output),
    }
}
