//! `[parallel]`: the rank grid's tensor and pipeline degrees and the micro-batches, with
//! their checks against the model; and the rule that splits the layers into pipeline stages
//! (`stages`, a pure function of the widths, here because validation needs it; the model and
//! the step use it through `model::pipeline`).
//!
//! Must not: know the rank count (the grid is checked against it at start-up, `parallel/grid.rs`).

use super::{abbreviate, Job};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// How the ranks split the work: `tensor` ranks split each pair of dense layers
/// (Megatron-style), `pipeline` stages split the stack of layers (balanced by FLOPs), each
/// step runs as `micro_batches` micro-batches (1F1B), and the data-parallel degree is what
/// remains, ranks / (tensor × pipeline).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ParallelCfg {
    /// Ranks that split each dense layer pair (consecutive ranks, so inside a node).
    #[serde(default = "super::one")]
    pub tensor: usize,
    /// Pipeline stages: contiguous runs of layers, balanced by FLOPs.
    #[serde(default = "super::one")]
    pub pipeline: usize,
    /// Micro-batches per step (the 1F1B schedule's; gradient accumulation on one stage).
    #[serde(default = "super::one")]
    pub micro_batches: usize,
}

impl Default for ParallelCfg {
    fn default() -> Self {
        ParallelCfg { tensor: 1, pipeline: 1, micro_batches: 1 }
    }
}

impl Job {
    /// The `[parallel]` block against the model (the world size is checked at start-up, in
    /// `parallel::grid`). Pipeline stages are contiguous runs of layers, balanced by FLOPs
    /// (`stages`), at least one layer each. Tensor parallelism pairs the
    /// layers of each stage and splits the hidden width between a pair's two layers (the
    /// first's outputs, the second's inputs); a width that does not divide by `tensor` is
    /// split unevenly (the first width % tensor ranks get one unit more), so every split
    /// width needs at least `tensor` units.
    pub(super) fn validate_parallel(&self, origin: &str) -> Result<()> {
        let bad = |field: &str, msg: String| Err(Error::config(origin, field, msg));
        let p = &self.parallel;
        let layers = &self.model.layers;
        let n = layers.len() - 1;
        let stages = match stages(layers, p.pipeline) {
            Ok(s) => s,
            Err(m) => return bad("parallel.pipeline", format!("parallel.pipeline = {}: {m}", p.pipeline)),
        };
        if self.distribution.reduction == super::Reduction::Adasum && p.tensor > 1 {
            return bad(
                "distribution.reduction",
                format!(
                    "\"adasum\" with parallel.tensor = {}: Adasum's coefficients need each tensor's whole norm and \
                     dot product, and a tensor rank holds a shard; use tensor = 1 (pipeline stages hold whole tensors) \
                     or reduction = \"average\"",
                    p.tensor
                ),
            );
        }
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
}

/// The layers of each of `p` stages (contiguous, in order, none empty), balanced by FLOPs;
/// Err when there are fewer layers than stages.
pub fn stages(sizes: &[usize], p: usize) -> std::result::Result<Vec<Range<usize>>, String> {
    let n = sizes.len() - 1;
    if p == 0 || p > n {
        return Err(format!(
            "{p} pipeline stage(s) for a model of {n} dense layer(s); every stage needs at least one layer, so use \
             parallel.pipeline ≤ {n}"
        ));
    }
    let cost: Vec<u128> = (0..n).map(|l| (sizes[l] * sizes[l + 1]) as u128).collect();
    let prefix: Vec<u128> = std::iter::once(0)
        .chain(cost.iter().scan(0u128, |a, &c| {
            *a += c;
            Some(*a)
        }))
        .collect();
    let span = |a: usize, b: usize| prefix[b] - prefix[a];
    // best[k][j]: the least possible maximum stage cost splitting layers 0..j into k stages;
    // ties go to the split with the later cut, which keeps the answer unique.
    let inf = u128::MAX;
    let mut best = vec![vec![inf; n + 1]; p + 1];
    let mut cut = vec![vec![0usize; n + 1]; p + 1];
    best[0][0] = 0;
    for k in 1..=p {
        for j in k..=n {
            for i in (k - 1)..j {
                if best[k - 1][i] == inf {
                    continue;
                }
                let c = best[k - 1][i].max(span(i, j));
                if c <= best[k][j] {
                    best[k][j] = c;
                    cut[k][j] = i;
                }
            }
        }
    }
    let mut out = vec![0..0; p];
    let mut j = n;
    for k in (1..=p).rev() {
        let i = cut[k][j];
        out[k - 1] = i..j;
        j = i;
    }
    Ok(out)
}
