//! The serve loop of one parameter server: owns some fusion buckets' parameters and their
//! optimizer state (on the CPU backend), applies pushed gradients, answers pulls, and ends
//! when every worker has said it is done. The protocol (tags, layout, who owns which bucket)
//! is `parallel::ps`'s; this file is the server's role in training, so it sits with the
//! worker, above the optimizer it applies.
//!
//! Staleness 0: a bucket's update waits for every worker's gradient of the step; they are
//! summed in worker order (0, 1, ..., W−1; each already divided by the step's global row
//! count, so the sum is the mean, as the all-reduce's) and applied once; every worker then
//! gets the new parameters. K ≥ 1 and −1: each gradient is applied as it arrives (it is that
//! worker's share of the step's mean); a worker's reply after its step t is held back until
//! every worker has pushed step t − K (K ≥ 1; never with −1), so no worker begins step
//! t + 1 more than K steps ahead of the slowest. An all-zero gradient (a worker that ran out
//! of rows in the epoch) is not applied asynchronously: it would still move momentum.
//!
//! Clipping (`optimizer.clipnorm`, `clipvalue`; Keras' order: norm, then value) happens here,
//! on what is applied: buckets hold whole tensors, so each tensor's norm is the server's to
//! take. Synchronously that is the summed gradient, the step's mean, as the all-reduce clips
//! it. Asynchronously each worker's gradient is clipped as its own step's (W times its share
//! of the mean, then scaled back), as TensorFlow's ParameterServerStrategy workers clip what
//! they apply. `global_clipnorm` (`Roles::whole_step`): a pushed bucket waits for the
//! worker's `END` (its whole step pushed, with its tensors' sums of squares). Synchronously,
//! once every worker has ended the step, each bucket is summed, the owning servers exchange
//! their tensors' sums of squares (`NORM`), and every bucket is clipped by the global norm of
//! the step's mean, summed in tensor order as the all-reduce path sums it; asynchronously each
//! worker's buckets are clipped by the global norm of its own step (W times its share).
//!
//! Must not: read data or compute gradients.

use crate::config::OptimizerCfg;
use crate::device::{Backend, Cpu};
use crate::error::{Error, Result};
use crate::fault::Fault;
use crate::model::TensorInfo;
use crate::optim::Optimizer;
use crate::parallel::comm::Link;
use crate::parallel::liveness;
use crate::parallel::ps::stats::Stats;
use crate::parallel::ps::{
    floats, get_u64, put_u64, Roles, CONTROL, DONE, END, NORM, PULL, PUSH, PUSH_HEADER, REPLY, SNAPSHOT, STATS,
    STOP_NOTE,
};
use crate::parallel::FusionPlan;
use crate::step::clip_factors;
use std::ops::Range;

/// One owned bucket.
struct Slot {
    index: usize,
    range: Range<usize>,
    /// The bucket's tensors (the model's indices), in bucket order.
    tensors: Vec<usize>,
    params: Vec<f32>,
    opt: Optimizer<Cpu>,
    /// Updates applied to this bucket.
    version: u64,
    /// Per worker: the last step whose gradient is applied (or, synchronously, summed in).
    applied: Vec<u64>,
    /// Per worker, staleness 0: this step's gradient, waiting for the others'.
    pending: Vec<Option<Vec<f32>>>,
    /// Per worker: `min(applied)` and `version` when it last pulled this bucket.
    pulled_clock: Vec<u64>,
    pulled_version: Vec<u64>,
}

impl Slot {
    fn clock(&self) -> u64 {
        self.applied.iter().copied().min().unwrap_or(0)
    }
}

/// What a server starts from: the whole model's state (a fresh start or a checkpoint) and
/// the global step it was taken at.
pub struct StartState<'a> {
    pub params: &'a [f32],
    pub m: &'a [f32],
    pub v: &'a [f32],
    pub step: u64,
}

pub struct Server {
    link: Link,
    roles: Roles,
    slots: Vec<Slot>,
    /// Replies held back by the staleness bound: (worker, slot, step pushed).
    deferred: Vec<(usize, usize, u64)>,
    stats: Stats,
    fault: Option<Fault>,
    fired_up_to: u64,
    /// `optimizer.global_clipnorm`: buckets wait for the step's `END` (see the module comment).
    global: Option<Global>,
}

/// The state of clipping by the global norm.
struct Global {
    limit: f64,
    /// The model's tensor count (the sums of squares an `END` carries).
    tensors: usize,
    /// Per worker: the last step it ended (staleness 0).
    ended: Vec<u64>,
    /// The other owning servers: (rank, the length in words of its `NORM`).
    peers: Vec<(usize, usize)>,
    /// `NORM`s that came before this server was ready for them (by sender's rank).
    early: std::collections::HashMap<usize, Vec<u32>>,
    /// This server counts the norms in its statistics (the first owning server).
    counts: bool,
}

impl Server {
    pub fn new(
        link: Link,
        roles: Roles,
        plan: &FusionPlan,
        tensors: &[TensorInfo],
        cfg: &OptimizerCfg,
        start: StartState,
        fault: Option<Fault>,
    ) -> Result<Server> {
        let w = roles.workers;
        let mut slots = Vec::new();
        for b in roles.owned_by(link.rank) {
            let range = plan.buckets[b].clone();
            let local: Vec<TensorInfo> = plan.members[b]
                .iter()
                .map(|&t| {
                    let t = &tensors[t];
                    TensorInfo { range: t.range.start - range.start..t.range.end - range.start, ..t.clone() }
                })
                .collect();
            let mut opt = Optimizer::new(&Cpu, cfg, local, range.len(), w)?;
            if roles.staleness != 0 {
                // Asynchronously each worker's step updates the bucket: the schedule counts steps.
                opt.schedule_mut().set_updates_per_step(w as u64);
            }
            let cut = |all: &[f32]| if all.is_empty() { Vec::new() } else { all[range.clone()].to_vec() };
            // Synchronously a bucket is updated once per step; asynchronously once per
            // worker's step (every worker runs every step of an epoch).
            let updates = if roles.staleness == 0 { start.step } else { start.step * w as u64 };
            opt.restore(&Cpu, &cut(start.m), &cut(start.v), updates).map_err(Error::Training)?;
            slots.push(Slot {
                index: b,
                tensors: plan.members[b].clone(),
                params: start.params[range.clone()].to_vec(),
                range,
                opt,
                version: updates,
                applied: vec![start.step; w],
                pending: vec![None; w],
                pulled_clock: vec![start.step; w],
                pulled_version: vec![updates; w],
            });
        }
        let global = cfg.global_clipnorm.filter(|_| roles.whole_step).map(|limit| {
            let owning = roles.owning_servers();
            // A NORM carries the step, then (index, sum of squares) per owned tensor.
            let words = |s: usize| 2 + 3 * roles.owned_by(s).iter().map(|&b| plan.members[b].len()).sum::<usize>();
            Global {
                limit,
                tensors: plan.slots.len(),
                ended: vec![start.step; w],
                peers: owning.iter().filter(|&&s| s != link.rank).map(|&s| (s, words(s))).collect(),
                early: Default::default(),
                counts: owning.first() == Some(&link.rank),
            }
        });
        Ok(Server {
            link,
            roles,
            slots,
            deferred: Vec::new(),
            stats: Stats::default(),
            fault,
            fired_up_to: start.step,
            global,
        })
    }

    /// Serve until every worker is done. Returns the staleness statistics of the whole run,
    /// and whether the workers stopped on a signal (their `DONE` says so).
    pub fn serve(mut self) -> Result<(Stats, bool)> {
        liveness::set("serving parameters (waiting for pushes and pulls)");
        let mut total = Stats::default();
        let mut done = vec![false; self.roles.workers];
        let (mut stopped, mut noted) = (false, false);
        while done.iter().any(|d| !d) {
            // Signalled here (a node going down signals its own ranks only): the workers,
            // which decide where to stop, hear of it at their next reply from this server.
            if !noted && crate::signals::stop_requested() {
                noted = true;
                log::info!("signalled: telling the workers, which stop at their next stop vote");
                for w in (0..self.roles.workers).filter(|&w| !done[w]) {
                    self.link.send(w, STOP_NOTE, &[]);
                }
            }
            let msg = self.link.receive_any();
            let w = msg.from;
            match msg.tag {
                PUSH => self.push(w, &msg.words)?,
                END => self.end(w, &msg.words)?,
                NORM => {
                    let g = self.global.as_mut().ok_or_else(|| Error::Training(format!("unexpected NORM from {w}")))?;
                    g.early.insert(w, msg.words);
                }
                PULL => {
                    let s = self.slot_of(msg.words[0] as usize)?;
                    self.reply(w, s);
                }
                SNAPSHOT => {
                    let mut out = Vec::new();
                    for s in &self.slots {
                        let (m, v, _) = s.opt.state(&Cpu)?;
                        for part in [&s.params, &m, &v] {
                            out.extend_from_slice(crate::parallel::ps::as_words(part));
                        }
                    }
                    self.link.send(w, CONTROL, &out);
                }
                STATS => {
                    self.link.send(w, CONTROL, &self.stats.to_words());
                    total.merge(&self.stats);
                    self.stats = Stats::default();
                }
                DONE => {
                    done[w] = true;
                    stopped |= msg.words.first() == Some(&1);
                }
                t => {
                    return Err(Error::Training(format!(
                        "parameter server got a message with unknown tag {t} from rank {w}"
                    )))
                }
            }
        }
        total.merge(&self.stats);
        Ok((total, stopped))
    }

    fn slot_of(&self, bucket: usize) -> Result<usize> {
        self.slots.iter().position(|s| s.index == bucket).ok_or_else(|| {
            Error::Training(format!("rank {} got bucket {bucket}, which another server owns", self.link.rank))
        })
    }

    fn push(&mut self, w: usize, words: &[u32]) -> Result<()> {
        let s = self.slot_of(words[0] as usize)?;
        let step = words[1] as u64 | (words[2] as u64) << 32;
        if step > self.fired_up_to {
            self.fired_up_to = step;
            liveness::step_done(self.slots.iter().map(Slot::clock).min().unwrap_or(0));
            crate::fault::at_step(&self.fault, self.link.rank, step)?;
        }
        let grads = floats(&words[PUSH_HEADER..]);
        let slot = &mut self.slots[s];
        if grads.len() != slot.range.len() || step != slot.applied[w] + 1 {
            return Err(Error::Training(format!(
                "worker {w} pushed {} values of bucket {} for step {step}; expected {} for step {}",
                grads.len(),
                slot.index,
                slot.range.len(),
                slot.applied[w] + 1
            )));
        }
        if self.global.is_some() {
            // Applied at the worker's END.
            if slot.pending[w].is_some() {
                return Err(Error::Training(format!("worker {w} pushed bucket {} twice in step {step}", slot.index)));
            }
            slot.pending[w] = Some(grads.to_vec());
            return Ok(());
        }
        let stale = (step - 1).saturating_sub(slot.pulled_clock[w]);
        if self.roles.staleness == 0 {
            slot.pending[w] = Some(grads.to_vec());
            slot.applied[w] = step;
            if slot.pending.iter().any(Option::is_none) {
                return Ok(());
            }
            // Every worker's gradient is in: sum in worker order, apply once.
            let sum = slot.take_sum();
            slot.record_sync(&mut self.stats, step);
            slot.apply(sum, 1.0, None)?;
            for worker in 0..self.roles.workers {
                self.reply(worker, s);
            }
            return Ok(());
        }
        if grads.iter().any(|&g| g != 0.0) {
            self.stats.record(stale, slot.version - slot.pulled_version[w]);
            slot.apply(grads.to_vec(), self.roles.workers as f64, None)?;
        }
        slot.applied[w] = step;
        self.deferred.push((w, s, step));
        self.release();
        Ok(())
    }

    /// Worker `w` has pushed every bucket of a step (`global_clipnorm`): asynchronously its
    /// buckets are clipped by its own step's norm and applied; synchronously, once every
    /// worker has ended the step, `global_update`.
    fn end(&mut self, w: usize, words: &[u32]) -> Result<()> {
        let Some(g) = &mut self.global else {
            return Err(Error::Training(format!("worker {w} sent END without optimizer.global_clipnorm")));
        };
        let step = get_u64(words);
        let sq: Vec<f64> = words[2..].chunks(2).map(|c| f64::from_bits(get_u64(c))).collect();
        if sq.len() != g.tensors {
            return Err(Error::Training(format!(
                "worker {w} ended step {step} with {} tensors' sums of squares; the model has {}",
                sq.len(),
                g.tensors
            )));
        }
        for slot in &self.slots {
            if slot.pending[w].is_none() || step != slot.applied[w] + 1 {
                return Err(Error::Training(format!(
                    "worker {w} ended step {step} without pushing bucket {} for it",
                    slot.index
                )));
            }
        }
        if self.roles.staleness == 0 {
            g.ended[w] = step;
            if g.ended.iter().all(|&e| e == step) {
                self.global_update(step)?;
            }
            return Ok(());
        }
        // Its own step's gradient is W times its share of the mean.
        let weight = self.roles.workers as f64;
        let total = sq.iter().sum::<f64>() * weight * weight;
        let (f, norm, clipped) = clip_factors(&[1.0], total, Some(g.limit), None);
        finite(norm, step)?;
        if g.counts {
            self.stats.record_norm(norm, clipped);
        }
        for s in 0..self.slots.len() {
            let slot = &mut self.slots[s];
            let grads = slot.pending[w].take().expect("checked");
            if grads.iter().any(|&x| x != 0.0) {
                let stale = (step - 1).saturating_sub(slot.pulled_clock[w]);
                self.stats.record(stale, slot.version - slot.pulled_version[w]);
                slot.apply(grads, weight, Some(&vec![f[0]; slot.tensors.len()]))?;
            }
            slot.applied[w] = step;
            self.deferred.push((w, s, step));
        }
        self.release();
        Ok(())
    }

    /// Staleness 0 with `global_clipnorm`: every worker has pushed `step`. Sum each bucket,
    /// take its tensors' sums of squares, exchange them with the other owning servers, clip
    /// every bucket by the global norm, apply, and send every worker its buckets.
    fn global_update(&mut self, step: u64) -> Result<()> {
        let g = self.global.as_mut().expect("called with global_clipnorm");
        let mut sq = vec![0.0f64; g.tensors];
        let mut mine = Vec::new();
        put_u64(&mut mine, step);
        let mut sums = Vec::with_capacity(self.slots.len());
        for slot in &mut self.slots {
            for p in &mut slot.applied {
                *p = step;
            }
            let sum = slot.take_sum();
            for (i, &t) in slot.tensors.iter().enumerate() {
                sq[t] = Cpu.sum_squares(&sum, slot.opt.range(i))?;
                mine.push(t as u32);
                put_u64(&mut mine, sq[t].to_bits());
            }
            sums.push(sum);
        }
        for &(peer, _) in &g.peers {
            self.link.send(peer, NORM, &mine);
        }
        for &(peer, len) in &g.peers {
            let words = match g.early.remove(&peer) {
                Some(w) => w,
                None => {
                    let mut w = vec![0u32; len];
                    self.link.receive_into(peer, NORM, &mut w);
                    w
                }
            };
            if words.len() != len || get_u64(&words) != step {
                return Err(Error::Training(format!(
                    "parameter server {} got sums of squares from server {peer} for step {} ({} words); expected                      step {step} ({len} words)",
                    self.link.rank,
                    get_u64(&words),
                    words.len()
                )));
            }
            for c in words[2..].chunks(3) {
                sq[c[0] as usize] = f64::from_bits(get_u64(&c[1..]));
            }
        }
        // The whole model's sum in tensor order, as the all-reduce path takes it.
        let total = sq.iter().sum::<f64>();
        let (factors, norm, clipped) = clip_factors(&sq, total, Some(g.limit), None);
        finite(norm, step)?;
        if g.counts {
            self.stats.record_norm(norm, clipped);
        }
        for (s, sum) in sums.into_iter().enumerate() {
            let slot = &mut self.slots[s];
            slot.record_sync(&mut self.stats, step);
            let f: Vec<f32> = slot.tensors.iter().map(|&t| factors[t]).collect();
            slot.apply(sum, 1.0, Some(&f))?;
            for worker in 0..self.roles.workers {
                self.reply(worker, s);
            }
        }
        Ok(())
    }

    /// Send every held-back reply that the bound now allows.
    fn release(&mut self) {
        let k = self.roles.staleness;
        let mut i = 0;
        while i < self.deferred.len() {
            let (w, s, step) = self.deferred[i];
            if k < 0 || self.slots[s].clock() + k as u64 >= step {
                self.deferred.swap_remove(i);
                self.reply(w, s);
            } else {
                i += 1;
            }
        }
    }

    /// Send bucket `s`'s parameters to worker `w`, noting what it saw.
    fn reply(&mut self, w: usize, s: usize) {
        let slot = &mut self.slots[s];
        slot.pulled_clock[w] = slot.clock();
        slot.pulled_version[w] = slot.version;
        self.link.send(w, REPLY + slot.index as i32, crate::parallel::ps::as_words(&slot.params));
    }
}

impl Slot {
    /// The workers' pending gradients of this bucket summed in worker order (each is its
    /// share of the step's mean, so the sum is the mean).
    fn take_sum(&mut self) -> Vec<f32> {
        let mut sum = self.pending[0].take().expect("every worker's gradient is in");
        for p in self.pending.iter_mut().skip(1) {
            for (a, g) in sum.iter_mut().zip(p.take().expect("every worker's gradient is in")) {
                *a += g;
            }
        }
        sum
    }

    /// Staleness 0: every worker's gradient of `step`, and what each had seen.
    fn record_sync(&self, stats: &mut Stats, step: u64) {
        for (x, &lag) in self.pulled_clock.iter().zip(&self.pulled_version) {
            stats.record((step - 1).saturating_sub(*x), self.version - lag);
        }
    }

    /// One update of the bucket from `grads`, clipped as a gradient `weight` times as large
    /// (1: the step's mean; W: one worker's share of it): by the global norm's `factors`
    /// (one per tensor) when given, else per tensor (`clipnorm`); then by value.
    fn apply(&mut self, mut grads: Vec<f32>, weight: f64, factors: Option<&[f32]>) -> Result<()> {
        self.opt.begin_step();
        let n = self.opt.tensor_count();
        let cfg = self.opt.cfg();
        let factors = if cfg.clips() {
            let ranges: Vec<Range<usize>> = (0..n).map(|t| self.opt.range(t)).collect();
            clip(&mut grads, &ranges, cfg.clipnorm, cfg.clipvalue, weight, factors)?
        } else {
            vec![1.0; n]
        };
        for (t, f) in factors.into_iter().enumerate() {
            self.opt.apply(&Cpu, &mut self.params, &grads, 0, f, &[t])?;
        }
        self.version += 1;
        Ok(())
    }
}

/// Clip a bucket's gradient `g` (tensors at `ranges`) as a gradient `weight` × g would be:
/// each tensor's norm to `clipnorm`, or by the global norm's `given` factors (the factor
/// returned, for the optimizer's gradient scale), then each value to `clipvalue` (done in
/// `g`, divided by the factor, as the all-reduce path's `Stepper::apply_clipped`).
fn clip(
    g: &mut Vec<f32>,
    ranges: &[Range<usize>],
    clipnorm: Option<f64>,
    clipvalue: Option<f64>,
    weight: f64,
    given: Option<&[f32]>,
) -> Result<Vec<f32>> {
    let factors = match given {
        Some(f) => f.to_vec(),
        None => {
            let mut sq = Vec::with_capacity(ranges.len());
            for r in ranges {
                sq.push(Cpu.sum_squares(g, r.clone())? * weight * weight);
            }
            let total = sq.iter().sum();
            clip_factors(&sq, total, None, clipnorm).0
        }
    };
    if let Some(v) = clipvalue {
        let parts: Vec<(Range<usize>, f32)> =
            ranges.iter().zip(&factors).map(|(r, &f)| (r.clone(), (v / (weight * f64::from(f))) as f32)).collect();
        Cpu.clamp(g, &parts)?;
    }
    Ok(factors)
}

/// A norm that is not finite ends the run, as on the all-reduce path.
fn finite(norm: f64, step: u64) -> Result<()> {
    if norm.is_finite() {
        return Ok(());
    }
    Err(Error::Training(format!(
        "the gradient norm became {norm} at step {step}; lower optimizer.lr, or check the data for extreme values"
    )))
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn a_share_is_clipped_as_its_whole_step() {
        // Two tensors; a worker's share g of 2 workers: its own step's gradient is 2g.
        let g = vec![3.0f32, 4.0, 0.5, -0.25];
        let r = [0..2, 2..4];
        // Norms of 2g: 10 and ~1.12; the first shrinks to 5, the second stays.
        let mut a = g.clone();
        let f = clip(&mut a, &r, Some(5.0), None, 2.0, None).unwrap();
        assert!((f[0] - 0.5).abs() < 1e-7 && f[1] == 1.0, "{f:?}");
        assert_eq!(a, g);
        // As the step's mean (weight 1) the first norm is 5: no clipping.
        let f = clip(&mut a, &r, Some(5.0), None, 1.0, None).unwrap();
        assert_eq!(f, vec![1.0, 1.0]);
        // By value: 2g's values to ±1, i.e. g's to ±0.5 (after the norm's factor).
        let mut b = g.clone();
        let f = clip(&mut b, &r, None, Some(1.0), 2.0, None).unwrap();
        assert_eq!(f, vec![1.0, 1.0]);
        assert_eq!(b, vec![0.5, 0.5, 0.5, -0.25]);
        // Norm then value: the first tensor's factor 0.5 makes its value limit 1 / (2 × 0.5).
        let mut c = g.clone();
        let f = clip(&mut c, &r, Some(5.0), Some(1.0), 2.0, None).unwrap();
        assert_eq!(f[0], 0.5);
        assert_eq!(c, vec![1.0, 1.0, 0.5, -0.25]);
    }
}
