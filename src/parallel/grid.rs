//! The rank grid of a job's `[parallel]` block: `tensor = T` ranks split each dense layer,
//! `pipeline = P` stages split the stack of layers, and the data-parallel degree is
//! D = ranks / (T × P). A model replica is T × P consecutive ranks: rank
//! r = d·(P·T) + p·T + t is tensor rank t of stage p of replica d. So a tensor group (same d
//! and p) is T consecutive ranks, inside a node under block placement, since its members talk
//! most (two all-reduces of activations per layer pair, per micro-batch); a pipeline (same d
//! and t) is the P ranks T apart that pass activations forward and gradients back; data group
//! (p, t) is the ranks {p·T + t + k·P·T}, the copies of the same slice of the model, whose
//! gradients the engine all-reduces. Every rank of replica d takes data rank d's part of
//! every global batch.
//!
//! Pure arithmetic on ranks (and the start-up description of the grid); which part of the
//! model each rank holds is `model::placement`'s. Must not know the model or the device.

use super::comm::Comm;
use crate::error::{Error, Result};
use std::ops::Range;

/// Where this rank sits in the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub world: usize,
    pub rank: usize,
    /// Ranks per tensor group (T).
    pub tensor: usize,
    /// Pipeline stages (P).
    pub pipeline: usize,
    /// Data-parallel degree (D = world / (T × P)).
    pub data: usize,
    /// This rank's index in its tensor group (t).
    pub t: usize,
    /// Its pipeline stage (p).
    pub p: usize,
    /// Its replica's index = its index in its data group = its data shard (d).
    pub d: usize,
}

impl Grid {
    /// The grid of `world` ranks with `tensor` ranks per tensor group and `pipeline` stages;
    /// Err names what does not fit.
    pub fn new(world: usize, rank: usize, tensor: usize, pipeline: usize) -> std::result::Result<Grid, String> {
        let tp = tensor * pipeline;
        if !world.is_multiple_of(tp) {
            return Err(format!(
                "parallel.tensor = {tensor} × parallel.pipeline = {pipeline} = {tp} does not divide the job's {world} \
                 rank(s); the data-parallel degree is ranks / (tensor × pipeline), so start a multiple of {tp} ranks \
                 or change parallel.tensor / parallel.pipeline"
            ));
        }
        let (t, p, d) = (rank % tensor, rank / tensor % pipeline, rank / tp);
        Ok(Grid { world, rank, tensor, pipeline, data: world / tp, t, p, d })
    }

    /// Ranks per model replica (T × P).
    pub fn replica(&self) -> usize {
        self.tensor * self.pipeline
    }

    /// The world rank of tensor rank `t` of stage `p` of replica `d`.
    pub fn rank_of(&self, d: usize, p: usize, t: usize) -> usize {
        d * self.replica() + p * self.tensor + t
    }

    /// The ranks of stage `p`'s tensor group in replica `d`.
    pub fn tensor_group(&self, d: usize, p: usize) -> Vec<usize> {
        (0..self.tensor).map(|t| self.rank_of(d, p, t)).collect()
    }

    /// The ranks of data group (`p`, `t`): that slice of the model in every replica.
    pub fn data_group(&self, p: usize, t: usize) -> Vec<usize> {
        (0..self.data).map(|d| self.rank_of(d, p, t)).collect()
    }

    /// The stages of pipeline (`d`, `t`), first to last.
    pub fn pipeline_group(&self, d: usize, t: usize) -> Vec<usize> {
        (0..self.pipeline).map(|p| self.rank_of(d, p, t)).collect()
    }
}

/// Collective over the world: the grid for the job's `[parallel]` block, or the same error on
/// every rank.
pub fn grid(comm: &Comm, job: &crate::config::Job) -> Result<Grid> {
    let p = &job.parallel;
    let field = if p.pipeline > 1 { "parallel.pipeline" } else { "parallel.tensor" };
    Grid::new(comm.size, comm.rank, p.tensor, p.pipeline).map_err(|m| Error::config(&job.source, field, m))
}

/// Rank 0's start-up lines: which ranks (on which hosts) form each tensor group, pipeline
/// and data group, and the layers of each stage.
pub fn describe(g: &Grid, hosts: &[String], stages: &[Range<usize>]) -> Vec<String> {
    let show = |ranks: Vec<usize>| -> String {
        let parts: Vec<String> = ranks.iter().map(|&r| format!("{r}@{}", hosts[r])).collect();
        format!("[{}]", parts.join(", "))
    };
    let mut lines = vec![format!(
        "rank grid: {} rank(s) = data {} × pipeline {} × tensor {}; a replica is {} consecutive rank(s), tensor \
         groups are consecutive ranks",
        g.world,
        g.data,
        g.pipeline,
        g.tensor,
        g.replica()
    )];
    if g.pipeline > 1 {
        let st: Vec<String> = stages.iter().enumerate().map(|(p, r)| format!("stage {p}: layers {r:?}")).collect();
        lines.push(format!("  pipeline stages (balanced by FLOPs): {}", st.join(", ")));
    }
    let cap = 16;
    let mut shown = 0;
    'outer: for d in 0..g.data {
        for p in 0..g.pipeline {
            if g.tensor == 1 {
                break 'outer;
            }
            if shown == cap {
                lines.push(format!("  ... {} more tensor group(s)", g.data * g.pipeline - cap));
                break 'outer;
            }
            let ranks = g.tensor_group(d, p);
            let mut spans: Vec<&str> = ranks.iter().map(|&r| hosts[r].as_str()).collect();
            spans.dedup();
            let note = if spans.len() > 1 { " (spans hosts: its activations cross the network)" } else { "" };
            lines.push(format!("  tensor group of replica {d}, stage {p}: {}{note}", show(ranks)));
            shown += 1;
        }
    }
    if g.pipeline > 1 {
        for (k, (d, t)) in (0..g.data).flat_map(|d| (0..g.tensor).map(move |t| (d, t))).enumerate() {
            if k == cap {
                lines.push(format!("  ... {} more pipeline(s)", g.data * g.tensor - cap));
                break;
            }
            lines.push(format!("  pipeline of replica {d}, tensor slice {t}: {}", show(g.pipeline_group(d, t))));
        }
    }
    for (k, (p, t)) in (0..g.pipeline).flat_map(|p| (0..g.tensor).map(move |t| (p, t))).enumerate() {
        if k == cap {
            lines.push(format!("  ... {} more data group(s)", g.replica() - cap));
            break;
        }
        lines.push(format!("  data group of stage {p}, tensor slice {t}: {}", show(g.data_group(p, t))));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_places_tensor_groups_on_consecutive_ranks() {
        let g = Grid::new(8, 5, 4, 1).unwrap();
        assert_eq!((g.data, g.t, g.p, g.d), (2, 1, 0, 1));
        assert_eq!(g.tensor_group(1, 0), [4, 5, 6, 7]);
        assert_eq!(g.data_group(0, 1), [1, 5]);
        let e = Grid::new(6, 0, 4, 1).unwrap_err();
        assert!(e.contains("does not divide the job's 6 rank(s)"), "{e}");
        let hosts: Vec<String> = (0..8).map(|r| format!("n{}", r / 3)).collect();
        let one_stage = vec![0..3];
        let lines = describe(&g, &hosts, &one_stage);
        assert!(lines[1].contains("[0@n0, 1@n0, 2@n0, 3@n1]") && lines[1].contains("spans hosts"), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("data group of stage 0, tensor slice 3: [3@n1, 7@n2]")), "{lines:?}");
    }

    #[test]
    fn grid_with_pipeline_stages_tensor_innermost() {
        // 8 ranks = data 2 × pipeline 2 × tensor 2.
        let g = Grid::new(8, 6, 2, 2).unwrap();
        assert_eq!((g.data, g.t, g.p, g.d), (2, 0, 1, 1));
        assert_eq!(g.tensor_group(1, 1), [6, 7]);
        assert_eq!(g.pipeline_group(1, 0), [4, 6]);
        assert_eq!(g.data_group(1, 0), [2, 6]);
        let e = Grid::new(6, 0, 2, 2).unwrap_err();
        assert!(e.contains("parallel.pipeline = 2 = 4 does not divide the job's 6"), "{e}");
        let hosts: Vec<String> = (0..8).map(|r| format!("n{}", r / 4)).collect();
        let lines = describe(&g, &hosts, &[0..2, 2..3]);
        assert!(lines[0].contains("data 2 × pipeline 2 × tensor 2"), "{lines:?}");
        assert!(lines[1].contains("stage 0: layers 0..2, stage 1: layers 2..3"), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("pipeline of replica 1, tensor slice 1: [5@n1, 7@n1]")), "{lines:?}");
    }
}
