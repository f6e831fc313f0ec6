//! Which part of the model each rank of the grid holds, and the model-parallel side as the
//! model and the step use it. `cut` (tests only) is the part of a whole arena a rank holds, the
//! reference that `init_local` and the checkpoint maps are tested against; `TensorGroup` is the tensor communicator's sums in forward and
//! backward (through the backend's download/upload, so any backend works), the pipeline link
//! to the neighbouring stages, and the whole model assembled from the shards and stages
//! (checkpoints, weights.h5). The grid's arithmetic is `parallel::grid`'s; MPI calls go
//! through `parallel::comm`'s channels only.
//!
//! Must not: call MPI directly.

use super::{pipeline, tensor, Mlp, TensorSum};
use crate::device::Backend;
use crate::error::Result;
use crate::parallel::comm::Channel;
use crate::parallel::liveness;
use crate::parallel::pipe::PipeLink;
use crate::parallel::watchdog::{SharedWatchdog, MAIN};
use log::info;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// The part of the whole model `full`'s arena `all` (parameters or optimizer state; empty
/// stays empty) that tensor rank `t` of `ts` holds in the stage of layers `layers`.
#[cfg(test)]
pub fn cut(full: &Mlp, layers: Range<usize>, t: usize, ts: usize, all: &[f32]) -> Vec<f32> {
    if all.is_empty() {
        return Vec::new();
    }
    assert_eq!(all.len(), full.n_params, "a whole arena of another model");
    let stage = &all[pipeline::arena_range(&full.sizes, &layers)];
    if ts == 1 {
        return stage.to_vec();
    }
    let whole_stage = Mlp::stage(&full.sizes, full.acts.clone(), full.loss, layers);
    tensor::scatter(&whole_stage.shard(t, ts), &whole_stage, stage)
}

/// The whole model `full`'s starting parameters (`Mlp::init_params(seed)`) at ranges `ranges`
/// of the arena of `local`, a tensor shard of the whole stage `stage` (itself without tensor
/// parallelism) whose arena starts at `offset` in `full`'s: end to end, the padding zeros,
/// without the whole model. Each range's runs are mapped to the whole arena and drawn there
/// (`Mlp::init_pieces`), so a rank of `shard = "parameters"` under model parallelism draws
/// only its pieces, the same values as the whole model cut (`cut`).
pub fn init_local(full: &Mlp, stage: &Mlp, offset: usize, local: &Mlp, seed: u64, ranges: &[Range<usize>]) -> Vec<f32> {
    let mut runs = tensor::runs_in_whole(local, stage);
    runs.sort_by_key(|r| r.0.start);
    // (where it goes in the output, its whole-arena range)
    let mut targets: Vec<(usize, Range<usize>)> = Vec::new();
    let mut at = 0;
    for r in ranges {
        for (l, w, _) in &runs {
            let ov = crate::parallel::shard::intersect(r, l);
            if !ov.is_empty() {
                let from = offset + w.start + ov.start - l.start;
                targets.push((at + ov.start - r.start, from..from + ov.len()));
            }
        }
        at += r.len();
    }
    let values = full.init_pieces(seed, targets.iter().map(|t| t.1.clone()));
    let mut out = vec![0.0; at];
    let mut k = 0;
    for (to, w) in targets {
        out[to..to + w.len()].copy_from_slice(&values[k..k + w.len()]);
        k += w.len();
    }
    out
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

/// This rank's tensor group and pipeline, as forward, backward and the whole-model I/O use
/// them. Main thread only.
pub struct TensorGroup {
    /// None for a group of one (no tensor parallelism).
    chan: Option<Channel>,
    pub index: usize,
    pub size: usize,
    /// This rank's stage of the model, whole (the whole model without pipeline parallelism),
    /// for assembling and cutting tensor shards.
    pub stage: Mlp,
    /// The whole model: what checkpoints and weights.h5 hold.
    pub full: Mlp,
    /// Where the stage's parameters sit in the whole model's arena.
    pub arena: Range<usize>,
    /// The neighbouring stages (None without pipeline parallelism).
    pub pipe: Option<PipeLink>,
    send: Vec<f32>,
    recv: Vec<f32>,
    watchdog: Option<SharedWatchdog>,
    /// The training step, for the watchdog's phase.
    pub step: u64,
    /// Sums GPU to GPU (NCCL over the tensor group), when the job chose that; else through
    /// host copies and `chan`.
    device: Option<Box<dyn crate::parallel::reduce::Reducer>>,
}

impl TensorGroup {
    /// `chan`: the tensor communicator (None when T = 1); `full` the whole model. Without
    /// a pipeline the stage is the whole model.
    pub fn new(chan: Option<Channel>, full: Mlp) -> TensorGroup {
        let (index, size) = chan.as_ref().map_or((0, 1), |c| (c.rank, c.size));
        TensorGroup {
            chan,
            index,
            size,
            stage: full.clone(),
            arena: 0..full.n_params,
            full,
            pipe: None,
            send: Vec::new(),
            recv: Vec::new(),
            watchdog: None,
            step: 0,
            device: None,
        }
    }

    /// The tensor communicator (None for a group of one).
    pub fn channel(&self) -> Option<&Channel> {
        self.chan.as_ref()
    }

    /// Sum on the devices with `r` (a reducer that takes device pointers: NCCL over this
    /// group) instead of host copies and MPI.
    pub fn set_device_reducer(&mut self, r: Box<dyn crate::parallel::reduce::Reducer>) {
        self.device = Some(r);
    }

    /// Hold stage `link.stage` of `stages` (the layers of each) and pass activations and
    /// gradients through `link`.
    pub fn set_pipeline(&mut self, link: PipeLink, stages: &[Range<usize>]) {
        let layers = stages[link.stage].clone();
        let f = &self.full;
        self.stage = Mlp::stage(&f.sizes, f.acts.clone(), f.loss, layers.clone());
        self.arena = pipeline::arena_range(&f.sizes, &layers);
        self.pipe = Some(link);
    }

    /// Record the sums and the pipeline's waits as waits on other ranks (the fallback
    /// deadline without heartbeats).
    pub fn set_watchdog(&mut self, wd: SharedWatchdog) {
        if let Some(p) = &mut self.pipe {
            p.set_watchdog(wd.clone());
        }
        self.watchdog = Some(wd);
    }

    /// Collective over the replica (every tensor rank and stage): `sq`, this rank's sum of
    /// squares of each of its tensors, becomes each whole tensor's (summed over the tensor
    /// group; a tensor every tensor rank holds whole, a replicated bias, counted once); returns
    /// the whole model's sum over every tensor of every stage (gradient clipping's norms).
    pub fn whole_sums_of_squares(&self, sq: &mut [f64]) -> f64 {
        self.whole_tensor_sums(sq, 1);
        let mut total = [sq.iter().sum::<f64>()];
        if let Some(pipe) = &self.pipe {
            pipe.sum_over_stages(&mut total);
        }
        total[0]
    }

    /// The whole model's starting parameters at ranges `local` of this rank's arena
    /// (`init_local`), without the whole model.
    pub fn init_local(&self, seed: u64, local: &[Range<usize>]) -> Vec<f32> {
        init_local(&self.full, &self.stage, self.arena.start, &self.local_model(), seed, local)
    }

    /// Collective over the tensor group (nothing without one): `sq`, `per` sums of squares for
    /// each of this rank's tensors in turn, become the whole tensors' (summed over the group's
    /// shards; a tensor every rank holds whole, a replicated bias, counted once).
    fn whole_tensor_sums(&self, sq: &mut [f64], per: usize) {
        let Some(chan) = &self.chan else { return };
        let (local, stage) = (self.local_model().tensors(), self.stage.tensors());
        assert_eq!(sq.len(), per * local.len(), "sums of another model's tensors");
        for ((s, l), w) in sq.chunks_mut(per).zip(&local).zip(&stage) {
            if l.used == w.used && self.index != 0 {
                s.fill(0.0); // replicated: tensor rank 0's counts
            }
        }
        let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, "the tensor group's norm sums", self.step));
        chan.all_reduce_sum_f64(sq);
    }

    /// Collective over the tensor group: LARS's and LAMB's two squared norms of each tensor
    /// ([2 ti], [2 ti + 1], `Optimizer::layerwise_sums`), each tensor's whole (no sum over
    /// pipeline stages: each stage's tensors are its own).
    pub fn whole_tensor_pair_sums(&self, sums: &mut [f64]) {
        self.whole_tensor_sums(sums, 2);
    }

    /// This rank's shard of its stage.
    pub fn local_model(&self) -> Mlp {
        self.stage.shard(self.index, self.size)
    }

    /// Collective over the replica: the whole model's arena on its rank 0 (None elsewhere)
    /// from every rank's shard arena `mine` (parameters or optimizer state): each stage's
    /// tensor rank 0 assembles the stage, and stage 0's gathers the stages. An empty `mine`
    /// (an optimizer without that state) stays empty.
    /// Whether this group holds the whole model (no tensor or pipeline parallelism).
    pub fn is_whole(&self) -> bool {
        self.chan.is_none() && self.pipe.is_none()
    }

    pub fn gather(&self, mine: Vec<f32>) -> Option<Vec<f32>> {
        let _a = crate::mem::allocating("the whole model on rank 0 (checkpoint, weights.h5)");
        let stage = match &self.chan {
            None => mine,
            Some(chan) => {
                let parts = chan.gather_f32s(&mine)?;
                if parts.iter().all(Vec::is_empty) {
                    Vec::new()
                } else {
                    tensor::assemble(&self.stage, &parts)
                }
            }
        };
        let Some(pipe) = &self.pipe else { return Some(stage) };
        let parts = pipe.gather_stages(&stage)?;
        if parts.iter().all(Vec::is_empty) {
            return Some(Vec::new());
        }
        // The whole arena is the last stage's first (it holds the last layers).
        Some(parts.into_iter().rev().flatten().collect())
    }
}

impl<B: Backend> TensorSum<B> for TensorGroup {
    fn sum(&mut self, be: &B, buf: &mut B::Buf, n: usize) -> Result<()> {
        let Some(chan) = &self.chan else { return Ok(()) };
        let t0 = std::time::Instant::now();
        let on_device = match self.device.as_mut() {
            Some(r) => {
                let _g =
                    self.watchdog.as_ref().map(|w| w.guard(MAIN, "a tensor-parallel all-reduce (NCCL)", self.step));
                let done = be.reduce_in_place(buf, n, r.as_mut())?;
                if SUMS.load(Ordering::Relaxed) == 0 {
                    log::debug!(
                        "tensor-parallel sums: the first ({n} floats) {}",
                        if done { r.what() } else { "on the host" }
                    );
                }
                done
            }
            None => false,
        };
        if !on_device {
            self.send.resize(n, 0.0);
            self.recv.resize(n, 0.0);
            be.download(buf, 0..n, &mut self.send)?;
            {
                let _g = self.watchdog.as_ref().map(|w| w.guard(MAIN, "a tensor-parallel all-reduce", self.step));
                chan.all_reduce_sum_f32(&self.send, &mut self.recv);
            }
            be.upload_into(&self.recv, buf)?;
        }
        SUM_NANOS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        SUMS.fetch_add(1, Ordering::Relaxed);
        liveness::progress();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rank's part of a whole arena (`cut`) is what `TensorGroup::gather` puts back
    /// together: tensor shards assembled per stage, stages concatenated last first.
    #[test]
    fn cut_parts_reassemble_to_the_whole_arena() {
        use crate::config::{Activation, LossKind};
        for sizes in [vec![6, 10, 8, 7, 3], vec![5, 9, 4, 6, 2, 3]] {
            let full = Mlp::new(&sizes, Activation::Tanh, LossKind::SoftmaxCrossEntropy);
            let all = full.pad(&(0..full.n_logical()).map(|i| i as f32 + 1.0).collect::<Vec<_>>()).unwrap();
            for p_n in 1..=sizes.len() - 1 {
                let stages = pipeline::stages(&sizes, p_n).unwrap();
                for ts in [1, 2, 3] {
                    let mut whole = Vec::new();
                    for layers in stages.iter().rev() {
                        let stage = Mlp::stage(&sizes, full.acts.clone(), full.loss, layers.clone());
                        let parts: Vec<Vec<f32>> = (0..ts).map(|t| cut(&full, layers.clone(), t, ts, &all)).collect();
                        for (t, part) in parts.iter().enumerate() {
                            assert_eq!(part.len(), stage.shard(t, ts).n_params, "{sizes:?} P={p_n} T={ts}");
                        }
                        whole.extend(if ts == 1 { parts[0].clone() } else { tensor::assemble(&stage, &parts) });
                    }
                    assert_eq!(whole, all, "{sizes:?} P={p_n} T={ts}");
                }
            }
            assert!(cut(&full, 0..2, 0, 2, &[]).is_empty());
        }
    }

    /// A rank's starting pieces drawn without the whole model (`init_local`) are the whole
    /// model's starting parameters cut (`cut`), on every tensor rank and stage, for ranges
    /// that cut layers anywhere.
    #[test]
    fn init_local_draws_what_the_whole_model_cut_holds() {
        use crate::config::{Activation, LossKind};
        for sizes in [vec![6, 10, 8, 7, 3], vec![5, 9, 4, 6, 2, 3]] {
            let full = Mlp::new(&sizes, Activation::Tanh, LossKind::SoftmaxCrossEntropy);
            let all = full.init_params(7);
            for p_n in [1, 2, 3] {
                let stages = pipeline::stages(&sizes, p_n).unwrap();
                for ts in [1, 2, 3] {
                    for (p, layers) in stages.iter().enumerate() {
                        let stage = Mlp::stage(&sizes, full.acts.clone(), full.loss, layers.clone());
                        let offset = pipeline::arena_range(&sizes, layers).start;
                        for t in 0..ts {
                            let cut = cut(&full, layers.clone(), t, ts, &all);
                            let n = cut.len();
                            for ranges in [vec![0..n], vec![1..n / 3, n / 2..n - 1], vec![n / 4..n / 4 + 5]] {
                                let want: Vec<f32> = ranges.iter().flat_map(|r| cut[r.clone()].to_vec()).collect();
                                let got = init_local(&full, &stage, offset, &stage.shard(t, ts), 7, &ranges);
                                assert_eq!(got, want, "{sizes:?} P={p_n} p={p} T={ts} t={t} {ranges:?}");
                            }
                        }
                    }
                }
            }
        }
    }
}
