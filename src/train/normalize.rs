//! `data.normalize` and `data.normalize_y` at start-up: the statistics of all training rows
//! in one distributed pass (each rank reads its blocks of rows, the blocks' float64 partials
//! are summed over the ranks that hold the data and merged in block order, so the result does
//! not depend on the rank count), or a resumed checkpoint's; applied to the training and test
//! shards; logged in a few short lines.
//!
//! Must not: read rows itself (`data::norm` does) or decide what a checkpoint holds.

use crate::config::{Job, Normalize, NormalizeY};
use crate::data::norm::{self, Norm};
use crate::data::shard::{Labels, Shard};
use crate::error::{Error, Result};
use crate::parallel::liveness::phase;
use crate::parallel::Channel;
use log::{info, warn};

/// Collective over `chan`, the ranks that hold the training data (all of it). `resumed`: the
/// checkpoint's normalization (used as it is when it has one). `others`: the test and
/// validation shards, normalized with the training rows' statistics. Returns what was applied.
pub(super) fn normalize(
    chan: &Channel,
    job: &Job,
    resumed: &Norm,
    train: &mut Shard,
    others: [Option<&mut Shard>; 2],
) -> Result<Norm> {
    let d = &job.data;
    if d.normalize == Normalize::None && d.normalize_y == NormalizeY::None {
        if !resumed.is_none() && chan.rank == 0 {
            warn!("the checkpoint was trained with normalized data; this job's data.normalize is \"none\": resuming with the checkpoint's normalization");
        }
        if resumed.is_none() {
            return Ok(Norm::default());
        }
    }
    let norm = if !resumed.is_none() {
        resumed.clone()
    } else {
        let _p = phase("the normalization statistics of the training data");
        let t = std::time::Instant::now();
        let mut norm = Norm::default();
        if d.normalize != Normalize::None {
            let (n, f) = (train.len(), train.features);
            let blocks = norm::block_count(n, f);
            let mut partials = train.stat_partials(chan.rank, chan.size)?;
            chan.all_reduce_sum_f64(&mut partials);
            let stats = norm::merge(&partials, blocks, f);
            norm.set_x(d.normalize, &stats);
        }
        if d.normalize_y == NormalizeY::Standard {
            let Labels::Values(v, k) = &train.labels else {
                return Err(Error::config(
                    &job.source,
                    "data.normalize_y",
                    "needs regression targets (model.loss = \"mse\")",
                ));
            };
            norm.set_y(&norm::stats_of(v, *k));
        }
        if chan.rank == 0 {
            info!(
                "normalization statistics of {} training rows in {:.2} s over {} rank(s) (float64, the same on any rank count)",
                train.len(),
                t.elapsed().as_secs_f64(),
                chan.size
            );
        }
        norm
    };
    if chan.rank == 0 {
        for line in norm.describe(4) {
            info!("{line}");
        }
        if !norm.y_shift.is_empty() {
            info!("losses are in standardized units of y (data.normalize_y); predict, eval's outputs and the ONNX model give raw units");
        }
    }
    train.set_norm(d, &norm);
    for t in others.into_iter().flatten() {
        t.set_norm(d, &norm);
    }
    Ok(norm)
}
