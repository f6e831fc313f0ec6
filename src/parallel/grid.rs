//! The rank grid of a job with `[parallel] tensor = T` (pipeline = 1 in this version): the
//! data-parallel degree is D = ranks / T. Rank r is tensor rank t = r mod T of tensor group
//! d = r div T, so a tensor group is T consecutive ranks (inside a node under block
//! placement, since its members talk most: two all-reduces of activations per layer pair and
//! step); data group t is the ranks {t, t + T, t + 2T, ...}, the copies of the same shard,
//! whose gradients the engine all-reduces. A tensor group reads data-parallel shard d.
//!
//! `TensorGroup` is the tensor communicator as the model and the step use it: the sums of
//! forward and backward (through the backend's download/upload, so any backend works), and
//! the whole model assembled from the shards (checkpoints, weights.h5).

use super::comm::{Channel, Comm};
use super::liveness;
use super::watchdog::{SharedWatchdog, MAIN};
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::model::{tensor, Mlp, TensorSum};
use log::info;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where this rank sits in the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub world: usize,
    pub rank: usize,
    /// Ranks per tensor group (T).
    pub tensor: usize,
    /// Data-parallel degree (D = world / T).
    pub data: usize,
    /// This rank's index in its tensor group (t).
    pub t: usize,
    /// Its tensor group's index = its index in its data group = its data shard (d).
    pub d: usize,
}

impl Grid {
    /// The grid of `world` ranks with `tensor` ranks per tensor group and `pipeline` stages;
    /// Err names what does not fit.
    pub fn new(world: usize, rank: usize, tensor: usize, pipeline: usize) -> std::result::Result<Grid, String> {
        let tp = tensor * pipeline;
        if world % tp != 0 {
            return Err(format!(
                "parallel.tensor = {tensor} × parallel.pipeline = {pipeline} = {tp} does not divide the job's {world} \
                 rank(s); the data-parallel degree is ranks / (tensor × pipeline), so start a multiple of {tp} ranks \
                 or change parallel.tensor"
            ));
        }
        Ok(Grid { world, rank, tensor, data: world / tp, t: rank % tensor, d: rank / tensor })
    }

    /// The ranks of tensor group `d`.
    pub fn tensor_group(&self, d: usize) -> Vec<usize> {
        (d * self.tensor..(d + 1) * self.tensor).collect()
    }

    /// The ranks of data group `t`.
    pub fn data_group(&self, t: usize) -> Vec<usize> {
        (0..self.data).map(|d| d * self.tensor + t).collect()
    }
}

/// Collective over the world: the grid for the job's `[parallel]` block, or the same error on
/// every rank.
pub fn grid(comm: &Comm, job: &crate::config::Job) -> Result<Grid> {
    let p = &job.parallel;
    Grid::new(comm.size, comm.rank, p.tensor, p.pipeline).map_err(|m| Error::config(&job.source, "parallel.tensor", m))
}

/// Rank 0's start-up lines: which ranks (on which hosts) form each tensor and data group.
pub fn describe(g: &Grid, hosts: &[String]) -> Vec<String> {
    let show = |ranks: Vec<usize>| -> String {
        let parts: Vec<String> = ranks.iter().map(|&r| format!("{r}@{}", hosts[r])).collect();
        format!("[{}]", parts.join(", "))
    };
    let mut lines = vec![format!(
        "rank grid: {} rank(s) = data {} × tensor {} × pipeline 1; tensor groups are consecutive ranks",
        g.world, g.data, g.tensor
    )];
    let cap = 16;
    for d in 0..g.data.min(cap) {
        let ranks = g.tensor_group(d);
        let mut spans: Vec<&str> = ranks.iter().map(|&r| hosts[r].as_str()).collect();
        spans.dedup();
        let note = if spans.len() > 1 { " (spans hosts: its activations cross the network)" } else { "" };
        lines.push(format!("  tensor group {d} (data shard {d}): {}{note}", show(ranks)));
    }
    if g.data > cap {
        lines.push(format!("  ... {} more tensor group(s)", g.data - cap));
    }
    for t in 0..g.tensor.min(cap) {
        lines.push(format!("  data group {t} (tensor slice {t}): {}", show(g.data_group(t))));
    }
    if g.tensor > cap {
        lines.push(format!("  ... {} more data group(s)", g.tensor - cap));
    }
    lines
}

/// Time in the tensor-parallel all-reduces (`TensorGroup::sum`: the download, the
/// all-reduce and the upload) since the last `log_sum_time`, in nanoseconds, and their count.
static SUM_NANOS: AtomicU64 = AtomicU64::new(0);
static SUMS: AtomicU64 = AtomicU64::new(0);

/// Rank 0 (under tensor parallelism): the epoch's time in tensor-parallel all-reduces (its
/// own; training steps only when called before evaluation). Every rank resets its count.
pub fn log_sum_time(rank: usize, epoch: usize, epoch_secs: f64, steps: usize) {
    let (ns, n) = (SUM_NANOS.swap(0, Ordering::Relaxed), SUMS.swap(0, Ordering::Relaxed));
    if rank == 0 && n > 0 {
        let s = ns as f64 * 1e-9;
        info!(
            "epoch {epoch}: tensor-parallel all-reduces {s:.3} s ({:.1}% of the epoch's {epoch_secs:.2} s), {n} sums, {:.3} ms/step",
            100.0 * s / epoch_secs.max(1e-9),
            s * 1e3 / steps.max(1) as f64
        );
    }
}

pub fn reset_sum_time() {
    SUM_NANOS.store(0, Ordering::Relaxed);
    SUMS.store(0, Ordering::Relaxed);
}

/// This rank's tensor group, as forward, backward and the whole-model I/O use it. Main
/// thread only.
pub struct TensorGroup {
    /// None for a group of one (no tensor parallelism).
    chan: Option<Channel>,
    pub index: usize,
    pub size: usize,
    /// The whole model, for assembling and cutting shards.
    pub whole: Mlp,
    send: Vec<f32>,
    recv: Vec<f32>,
    watchdog: Option<SharedWatchdog>,
    /// The training step, for the watchdog's phase.
    pub step: u64,
}

impl TensorGroup {
    /// `chan`: the tensor communicator (None when T = 1).
    pub fn new(chan: Option<Channel>, whole: Mlp) -> TensorGroup {
        let (index, size) = chan.as_ref().map_or((0, 1), |c| (c.rank, c.size));
        TensorGroup { chan, index, size, whole, send: Vec::new(), recv: Vec::new(), watchdog: None, step: 0 }
    }

    /// Record the sums as waits on other ranks (the fallback deadline without heartbeats).
    pub fn set_watchdog(&mut self, wd: SharedWatchdog) {
        self.watchdog = Some(wd);
    }

    /// This rank's shard of the model.
    pub fn local_model(&self) -> Mlp {
        let w = &self.whole;
        Mlp::with_tensor(&w.sizes, w.act, w.loss, self.index, self.size)
    }

    /// This rank's part of a whole arena (parameters or optimizer state).
    pub fn scatter(&self, all: &[f32]) -> Vec<f32> {
        let _a = crate::mem::allocating("this rank's shard of the starting state");
        if self.size == 1 {
            return all.to_vec();
        }
        tensor::scatter(&self.local_model(), &self.whole, all)
    }

    /// Collective over the tensor group: the whole arena on its rank 0 (None elsewhere) from
    /// every rank's shard arena `mine` (parameters or optimizer state). An empty `mine`
    /// (an optimizer without that state) stays empty.
    pub fn gather(&self, mine: Vec<f32>) -> Option<Vec<f32>> {
        let Some(chan) = &self.chan else { return Some(mine) };
        let _a = crate::mem::allocating("the whole model on tensor rank 0 (checkpoint, weights.h5)");
        let parts = chan.gather_f32s(&mine)?;
        if parts.iter().all(Vec::is_empty) {
            return Some(Vec::new());
        }
        Some(tensor::assemble(&self.whole, &parts))
    }
}

impl<B: Backend> TensorSum<B> for TensorGroup {
    fn sum(&mut self, be: &B, buf: &mut B::Buf, n: usize) -> Result<()> {
        let Some(chan) = &self.chan else { return Ok(()) };
        let t0 = std::time::Instant::now();
        self.send.resize(n, 0.0);
        self.recv.resize(n, 0.0);
        be.download(buf, 0..n, &mut self.send)?;
        {
            let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, "a tensor-parallel all-reduce", self.step));
            chan.all_reduce_sum_f32(&self.send, &mut self.recv);
        }
        be.upload_into(&self.recv, buf)?;
        SUM_NANOS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        SUMS.fetch_add(1, Ordering::Relaxed);
        liveness::progress();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_places_tensor_groups_on_consecutive_ranks() {
        let g = Grid::new(8, 5, 4, 1).unwrap();
        assert_eq!((g.data, g.t, g.d), (2, 1, 1));
        assert_eq!(g.tensor_group(1), [4, 5, 6, 7]);
        assert_eq!(g.data_group(1), [1, 5]);
        let e = Grid::new(6, 0, 4, 1).unwrap_err();
        assert!(e.contains("does not divide the job's 6 rank(s)"), "{e}");
        let hosts: Vec<String> = (0..8).map(|r| format!("n{}", r / 3)).collect();
        let lines = describe(&g, &hosts);
        assert!(lines[1].contains("[0@n0, 1@n0, 2@n0, 3@n1]") && lines[1].contains("spans hosts"), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("data group 3 (tensor slice 3): [3@n1, 7@n2]")), "{lines:?}");
    }
}
