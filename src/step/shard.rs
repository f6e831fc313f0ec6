//! The step's side of sharded state (`distribution.shard`): which piece of each reduced
//! bucket this rank holds, the all-gather of the updated pieces after the optimizer, and for
//! `shard = "parameters"` (ZeRO stage 3) the parameters themselves: this rank keeps only its
//! pieces (`Stepper::params` is them end to end, as the optimizer state is), and forward and
//! backward read each layer from a window the layer is gathered into just before it is used
//! (`Gathered`, a `model::Params`), one layer at a time.
//!
//! Must not: call MPI (`parallel::shard::Sharder` does) or update parameters itself (the
//! optimizer does, on this rank's pieces).

use super::Stepper;
use crate::device::Backend;
use crate::error::Result;
use crate::model::pipeline::{one_f_one_b, Op};
use crate::model::{Held, Mlp, Params};
use crate::optim::Optimizer;
use crate::parallel::engine::HostBuf;
use crate::parallel::gather::Gatherer;
use crate::parallel::shard::{intersect, Sharder};
use crate::parallel::timeline::Timeline;
use crate::parallel::Engine;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

/// Sharded state (`distribution.shard`): the layout and its collectives, and whether the
/// reduced buckets hold only this rank's part (reduce-scattered) or the whole bucket.
pub struct Sharded<B: Backend> {
    pub sharder: Sharder,
    pub reduce_scattered: bool,
    /// Host staging for the parameters' all-gather when they live on a GPU.
    host: Vec<f32>,
    /// `shard = "parameters"`: the layer window (None: every rank holds every parameter).
    window: Option<Window<B>>,
}

/// The layers gathered from every rank's pieces (`shard = "parameters"`): one buffer, or two
/// with prefetch, where the next layer of the step's plan is gathered on the gather thread
/// (`parallel::gather`) while the layer fetched last computes.
pub(super) struct Window<B: Backend> {
    /// Each the largest layer slot's length; None while on the gather thread.
    bufs: Vec<Option<B::Buf>>,
    /// The layer each buffer holds and that layer's slot in the arena, until the parameters
    /// change (None: none).
    held: Vec<Option<(usize, Range<usize>)>>,
    /// The buffer of the layer fetched last.
    cur: usize,
    /// Host staging for the gather when the buffers are on a GPU (gathered when fetched there).
    host: Vec<f32>,
    /// Prefetch: the gather thread (None: each layer gathered when fetched, on the main
    /// thread), the layer in flight on it (in the buffer that is not `cur`), and the fetches
    /// the step will make next, in order (`plan`; the same on every rank).
    ahead: Option<Gatherer<B::Buf>>,
    flying: Option<usize>,
    plan: VecDeque<usize>,
    /// What the fetches found (`GatherCounts`).
    counts: GatherCounts,
    /// The main thread's time in fetches that needed a gather (gathering, or waiting for the
    /// gather thread): exposed communication.
    waited: std::time::Duration,
}

/// What the layer fetches of `shard = "parameters"` found, since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatherCounts {
    /// Fetches of a layer other than the one fetched last (each needs the layer gathered).
    pub fetched: u64,
    /// Of those: gathered ahead, while the layer before computed.
    pub ahead: u64,
    /// Of those: still held in the second window (gathered before, the parameters unchanged).
    pub held: u64,
    /// Gathers made ahead for a fetch that did not come (the next fetch was another layer).
    pub wasted: u64,
}

impl<B: Backend> Window<B> {
    /// The fetches to come, in order (replacing any left), for the prefetch to run ahead of.
    pub(super) fn plan(&mut self, order: impl IntoIterator<Item = usize>) {
        self.plan.clear();
        self.plan.extend(order);
    }

    /// The parameters changed: nothing held is current (a gather in flight is waited for, as
    /// every rank started it, and dropped).
    fn invalidate(&mut self) {
        if let (Some(_), Some(g)) = (self.flying.take(), self.ahead.as_mut()) {
            let o = 1 - self.cur;
            self.bufs[o] = Some(g.wait());
            self.counts.wasted += 1;
        }
        self.held.iter_mut().for_each(|h| *h = None);
        self.plan.clear();
    }

    /// The layer fetched last, if current.
    fn current(&self) -> Option<usize> {
        self.held[self.cur].as_ref().map(|(l, _)| *l)
    }

    /// Layer `l` fetched: its plan entry taken (a fetch the plan did not foresee ends the plan).
    fn advance(&mut self, l: usize) {
        if self.plan.front() == Some(&l) {
            self.plan.pop_front();
        } else {
            self.plan.clear();
        }
    }

    /// Start gathering the plan's next layer other than the current one into the other
    /// buffer, unless it is there or a gather is in flight.
    fn prefetch(&mut self, be: &B, model: &Mlp, pieces: &B::Buf, sharder: &Sharder, step: u64) -> Result<()> {
        let (Some(g), None) = (self.ahead.as_mut(), self.flying) else { return Ok(()) };
        let now = self.held[self.cur].as_ref().map(|(l, _)| *l);
        let Some(&next) = self.plan.iter().find(|&&x| Some(x) != now) else { return Ok(()) };
        let o = 1 - self.cur;
        if self.held[o].as_ref().is_some_and(|(l, _)| *l == next) {
            return Ok(());
        }
        let slot = model.slot(next);
        let mut buf = self.bufs[o].take().expect("the other buffer is home");
        let segments = own_part(be, pieces, sharder, &slot, &mut buf.host_mut()[..slot.len()])?;
        g.start_gather(buf, segments, format!("all-gather layer {next} (ahead)"), step);
        self.held[o] = None;
        self.flying = Some(next);
        Ok(())
    }
}

/// The parameters of a step as forward and backward read them: the whole arena, or this
/// rank's pieces with a layer gathered at a time.
pub(super) enum StepParams<'a, B: Backend> {
    Held(Held<'a, B>),
    Gathered { pieces: &'a B::Buf, sharder: &'a Sharder, win: &'a mut Window<B>, step: u64 },
}

/// `params` (a stepper's) as a `model::Params`, gathered where `shard` says so.
pub(super) fn step_params<'a, B: Backend>(
    params: &'a B::Buf,
    shard: &'a mut Option<Sharded<B>>,
    step: u64,
) -> StepParams<'a, B> {
    match shard {
        Some(Sharded { sharder, window: Some(win), .. }) => StepParams::Gathered { pieces: params, sharder, win, step },
        _ => StepParams::Held(Held(params)),
    }
}

impl<B: Backend> Params<B> for StepParams<'_, B>
where
    B::Buf: HostBuf,
{
    fn fetch(&mut self, be: &B, model: &Mlp, l: usize) -> Result<()> {
        let StepParams::Gathered { pieces, sharder, win, step } = self else { return Ok(()) };
        if win.current() != Some(l) {
            let t = Instant::now();
            win.counts.fetched += 1;
            let slot = model.slot(l);
            match win.ahead.as_mut() {
                None => {
                    win.held[0] = None;
                    let buf = win.bufs[0].as_mut().expect("one buffer, never away");
                    let on_host = be.device_ordinal().is_none();
                    let host: &mut [f32] =
                        if on_host { &mut buf.host_mut()[..slot.len()] } else { &mut win.host[..slot.len()] };
                    gather_slot(be, pieces, sharder, &slot, host)?;
                    if !on_host {
                        be.upload_into(&win.host[..slot.len()], buf)?;
                    }
                    win.held[0] = Some((l, slot));
                }
                Some(g) => {
                    let o = 1 - win.cur;
                    let flew = win.flying.take();
                    if let Some(x) = flew {
                        win.bufs[o] = Some(g.wait());
                        win.held[o] = Some((x, model.slot(x)));
                    }
                    if win.held[o].as_ref().is_some_and(|(h, _)| *h == l) {
                        if flew == Some(l) {
                            win.counts.ahead += 1;
                        } else {
                            win.counts.held += 1;
                        }
                    } else {
                        win.counts.wasted += u64::from(flew.is_some());
                        // Not gathered ahead: gathered now, on the thread all the same, whose
                        // communicator keeps every rank's gathers in one order.
                        let mut buf = win.bufs[o].take().expect("the other buffer is home");
                        let segments = own_part(be, pieces, sharder, &slot, &mut buf.host_mut()[..slot.len()])?;
                        g.start_gather(buf, segments, format!("all-gather layer {l}"), *step);
                        win.bufs[o] = Some(g.wait());
                        win.held[o] = Some((l, slot));
                    }
                    win.cur = o;
                }
            }
            win.waited += t.elapsed();
        }
        win.advance(l);
        win.prefetch(be, model, pieces, sharder, *step)
    }

    fn view(&self, be: &B, r: Range<usize>) -> B::View<'_> {
        match self {
            StepParams::Held(h) => h.view(be, r),
            StepParams::Gathered { win, .. } => {
                let held = win.held[win.cur].as_ref();
                let s = held.map_or(0..0, |(_, s)| s.clone());
                assert!(
                    held.is_some() && s.start <= r.start && r.end <= s.end,
                    "{r:?} read outside the layer gathered last"
                );
                let buf = win.bufs[win.cur].as_ref().expect("the current buffer is home");
                be.view(buf, r.start - s.start..r.end - s.start)
            }
        }
    }
}

/// This rank's pieces of `whole` (an arena) as `sharder` lays them out, end to end.
pub fn pieces_of(sharder: &Sharder, whole: &[f32]) -> Vec<f32> {
    sharder.layout.cut(sharder.rank(), whole)
}

/// `pieces`, or one float where a rank has none: no device buffer is empty.
fn nonempty(mut pieces: Vec<f32>) -> Vec<f32> {
    if pieces.is_empty() {
        pieces.push(0.0);
    }
    pieces
}

/// Collective over the data group: arena range `slot` into `out` (its length) from every
/// rank's pieces, this rank's read from `pieces` (its pieces end to end): bucket by bucket,
/// the slot's part of a bucket is split over the ranks as the bucket is, in rank order.
pub(super) fn gather_slot<B: Backend>(
    be: &B,
    pieces: &B::Buf,
    sharder: &Sharder,
    slot: &Range<usize>,
    out: &mut [f32],
) -> Result<()> {
    for (seg, counts) in own_part(be, pieces, sharder, slot, out)? {
        sharder.all_gather(&mut out[seg], &counts);
    }
    Ok(())
}

/// This rank's part of arena range `slot` into `out` (its length), read from `pieces` (its
/// pieces end to end); returns the segments of `out` to all-gather, each with its parts'
/// lengths in rank order (one segment per bucket the slot overlaps).
fn own_part<B: Backend>(
    be: &B,
    pieces: &B::Buf,
    sharder: &Sharder,
    slot: &Range<usize>,
    out: &mut [f32],
) -> Result<Vec<(Range<usize>, Vec<usize>)>> {
    let (lay, me) = (&sharder.layout, sharder.rank());
    let mut segments = Vec::new();
    let mut at = 0; // where this rank's piece of bucket b starts in `pieces`
    for (b, bucket) in lay.buckets.iter().enumerate() {
        let piece = lay.piece(b, me);
        let seg = intersect(bucket, slot);
        if !seg.is_empty() {
            let counts: Vec<usize> = (0..lay.ranks).map(|r| intersect(&lay.piece(b, r), &seg).len()).collect();
            let mine = intersect(&piece, &seg);
            if !mine.is_empty() {
                let from = at + mine.start - piece.start..at + mine.end - piece.start;
                be.download(pieces, from, &mut out[mine.start - slot.start..mine.end - slot.start])?;
            }
            segments.push((seg.start - slot.start..seg.end - slot.start, counts));
        }
        at += piece.len();
    }
    Ok(segments)
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// Divide the optimizer state and update over the data group as `sharder` lays them out
    /// (before `restore`): each step this rank updates its part of the parameters, then every
    /// rank's part is all-gathered. `reduce_scattered`: the engine's reducer returns only this
    /// rank's part of each bucket (`parallel::shard::ReduceScatter` with buffers of
    /// `parallel::shard::reduced_lens`).
    /// The optimizer must update this rank's part only (`Optimizer::with_own`).
    pub fn set_shard(&mut self, sharder: Sharder, reduce_scattered: bool) {
        assert_eq!(sharder.layout.buckets, self.engine.plan().buckets, "a layout of other buckets");
        assert_eq!(self.opt.own(), Some(&sharder.own()), "an optimizer of other pieces");
        self.shard = Some(Sharded { sharder, reduce_scattered, host: Vec::new(), window: None });
    }

    /// `Stepper::new` for `shard = "parameters"` (with the buckets reduce-scattered): this
    /// rank keeps only `pieces`, its pieces of the starting parameters end to end (`pieces_of`
    /// a whole arena, or drawn by `Mlp::init_pieces`), and gathers each layer into a window
    /// before forward or backward reads it. The optimizer must update the pieces where they
    /// are kept (`Optimizer::set_pieces_kept`).
    /// `prefetch`: gather the next layer of the step on a thread of its own (collective over
    /// the data group, which must agree; host memory only) while this one computes.
    #[allow(clippy::too_many_arguments)]
    pub fn new_sharded(
        be: B,
        model: Mlp,
        pieces: Vec<f32>,
        opt: Optimizer<B>,
        engine: Engine<B::Buf>,
        batch: usize,
        timeline: Option<Arc<Timeline>>,
        sharder: Sharder,
        prefetch: bool,
    ) -> Result<Stepper<B>> {
        let len: usize = sharder.own().iter().map(|(r, _)| r.len()).sum();
        assert_eq!(pieces.len(), len, "pieces of another layout");
        assert!(opt.pieces_kept(), "sharded parameters need an optimizer of their pieces");
        assert!(!prefetch || be.device_ordinal().is_none(), "the layers are prefetched into host memory only");
        let pieces = nonempty(pieces);
        let mut st = Stepper::build(be, model, &pieces, opt, engine, batch, timeline.clone())?;
        drop(pieces);
        let ahead = prefetch.then(|| Gatherer::start(sharder.duplicate_channel(), sharder.path(), timeline));
        st.set_shard(sharder, true);
        let most = st.model.largest_slot().max(1);
        let n = if prefetch { 2 } else { 1 };
        let _a = crate::mem::allocating(if prefetch {
            "two layers' windows of the gathered parameters (one prefetched)"
        } else {
            "one layer's window of the gathered parameters"
        });
        let host = if st.be.device_ordinal().is_some() { crate::mem::zeros(most)? } else { Vec::new() };
        let bufs = (0..n).map(|_| st.be.zeros(most).map(Some)).collect::<Result<Vec<_>>>()?;
        let win = Window {
            bufs,
            held: vec![None; n],
            cur: 0,
            host,
            ahead,
            flying: None,
            plan: VecDeque::new(),
            counts: GatherCounts::default(),
            waited: std::time::Duration::ZERO,
        };
        st.shard.as_mut().expect("set above").window = Some(win);
        Ok(st)
    }

    /// Whether this rank keeps only its pieces of the parameters (`shard = "parameters"`).
    pub fn params_sharded(&self) -> bool {
        self.shard.as_ref().is_some_and(|s| s.window.is_some())
    }

    /// This rank's pieces of `whole` (an arena), end to end (at least one float, so that no
    /// device buffer is empty).
    pub(super) fn pieces_of(&self, whole: &[f32]) -> Vec<f32> {
        nonempty(pieces_of(&self.shard.as_ref().expect("sharded").sharder, whole))
    }

    /// Collective over the data group (`shard = "parameters"`): the whole arena from every
    /// rank's pieces, gathered layer by layer, on every rank (`everywhere`: evaluation) or on
    /// data rank 0 only (checkpoints, weights.h5; None on the others, which hold one layer at
    /// a time while it is gathered).
    pub(super) fn gather_whole(&self, everywhere: bool) -> Result<Option<Vec<f32>>> {
        let sh = self.shard.as_ref().expect("sharded");
        let keep = everywhere || sh.sharder.rank() == 0;
        let mut whole = if keep { crate::mem::zeros(self.model.n_params)? } else { Vec::new() };
        let mut layer = Vec::new();
        for l in 0..self.model.layers.len() {
            let slot = self.model.slot(l);
            let out = if keep {
                &mut whole[slot.clone()]
            } else {
                layer.resize(slot.len(), 0.0);
                &mut layer[..]
            };
            gather_slot(&self.be, &self.params, &sh.sharder, &slot, out)?;
        }
        Ok(keep.then_some(whole))
    }

    /// Whether forward reads the parameters a layer at a time, gathered from the data ranks'
    /// pieces (`shard = "parameters"` without model parallelism): `gathered_params` is Some.
    pub fn reads_layers_gathered(&self) -> bool {
        self.params_sharded() && self.tp.is_whole()
    }

    /// With `shard = "parameters"` and no model parallelism: the backend, and the parameters
    /// as forward reads them in a step, each layer gathered from the data ranks' pieces into
    /// the window when fetched (collective over the data group; evaluation without the whole
    /// model). None where the parameters are held whole or model parallelism splits them.
    /// `plan`: the layers the caller will fetch, in order (the same on every rank), for the
    /// prefetch to run ahead of.
    pub fn gathered_params(&mut self, plan: &[usize]) -> Option<(&B, impl Params<B> + '_)> {
        if !self.reads_layers_gathered() {
            return None;
        }
        if let Some(w) = self.shard.as_mut().and_then(|s| s.window.as_mut()) {
            w.plan(plan.iter().copied());
        }
        Some((&self.be, step_params(&self.params, &mut self.shard, self.step)))
    }

    /// With `shard = "parameters"`: the main thread's time in layer gathers since the start
    /// (gathering, or waiting for the gather thread); zero otherwise.
    pub(super) fn gathers_waited(&self) -> std::time::Duration {
        self.shard.as_ref().and_then(|s| s.window.as_ref()).map_or(std::time::Duration::ZERO, |w| w.waited)
    }

    /// With `shard = "parameters"`: what the layer fetches found since the start, and the time
    /// the main thread waited for the gather thread (None without one). None otherwise.
    pub fn gather_counts(&self) -> Option<(GatherCounts, Option<std::time::Duration>)> {
        let w = self.shard.as_ref()?.window.as_ref()?;
        Some((w.counts, w.ahead.as_ref().map(|g| g.waited)))
    }

    /// The fetches of one training step, in order (`Params::fetch`): forward then backward, or
    /// each micro-batch's half in the pipeline schedule's order; for the prefetch.
    pub(super) fn plan_step_fetches(&mut self) {
        let Some(w) = self.shard.as_mut().and_then(|s| s.window.as_mut()) else { return };
        let (fw, bw) = (self.model.forward_fetches(), self.model.backward_fetches());
        if self.tp.pipe.is_none() && self.micro == 1 {
            w.plan(fw.into_iter().chain(bw));
            return;
        }
        let (stage, stages) = self.tp.pipe.as_ref().map_or((0, 1), |p| (p.stage, p.stages));
        let order = one_f_one_b(stage, stages, self.micro).into_iter().flat_map(|op| match op {
            Op::Forward(_) => fw.clone(),
            Op::Backward(_) => bw.clone(),
        });
        w.plan(order);
    }

    /// Collective over the data group (sharded state): the largest `n` over its ranks.
    pub fn most_over_data_ranks(&self, n: usize) -> usize {
        let sh = &self.shard.as_ref().expect("sharded").sharder;
        let mut each = vec![0.0; sh.layout.ranks];
        each[sh.rank()] = n as f64;
        sh.sum(&mut each);
        each.into_iter().fold(0.0, f64::max) as usize
    }

    /// This rank's arena ranges of the sharded state (`Sharder::own`; without sharded state
    /// its whole arena), for a checkpoint written in parts.
    pub fn own_ranges(&self) -> Vec<Range<usize>> {
        match &self.shard {
            Some(s) => s.sharder.own().into_iter().map(|(r, _)| r).collect(),
            None => vec![0..self.model.n_params],
        }
    }

    /// This rank's values of `name` (`checkpoint::parts::ARRAYS`: "params", "optimizer/m",
    /// "optimizer/v", "optimizer/ema") at `own_ranges`, end to end, on the host (no collective): its pieces as
    /// kept under "parameters", read from the whole arena otherwise; None where the optimizer
    /// keeps no such state. One array at a time, for a checkpoint written in parts.
    pub fn own_values(&self, name: &str) -> Result<Option<Vec<f32>>> {
        let ranges = self.own_ranges();
        let n: usize = ranges.iter().map(|r| r.len()).sum();
        let _a = crate::mem::allocating("this rank's part of the state (a checkpoint in parts)");
        if name == "optimizer/ema" {
            return self.ema_host(Some(&ranges));
        }
        if name != "params" {
            let mut v = self.opt.moment(&self.be, name == "optimizer/v")?;
            v.iter_mut().for_each(|v| v.truncate(n));
            return Ok(v);
        }
        Ok(Some(self.own_part_of(&self.params, &ranges)?))
    }

    /// `buf` (laid out as the parameters are kept: the pieces under "parameters", the whole
    /// arena otherwise) at this rank's `ranges`, end to end, on the host.
    pub(super) fn own_part_of(&self, buf: &B::Buf, ranges: &[Range<usize>]) -> Result<Vec<f32>> {
        let n: usize = ranges.iter().map(|r| r.len()).sum();
        let mut out = crate::mem::zeros(n)?;
        if self.params_sharded() {
            // This rank's pieces end to end (a rank without any keeps one float: none read).
            self.be.download(buf, 0..n, &mut out)?;
        } else {
            let mut at = 0;
            for r in ranges {
                self.be.download(buf, r.clone(), &mut out[at..at + r.len()])?;
                at += r.len();
            }
        }
        Ok(out)
    }

    /// The gathers a step's forward and backward would make, made without them: a rank
    /// without rows in this step (`forward`/`backward`: which half), so that it joins every
    /// gather the others make (`shard = "parameters"`; nothing otherwise).
    pub(super) fn fetch_without_rows(&mut self, forward: bool, backward: bool) -> Result<()> {
        if !self.params_sharded() {
            return Ok(());
        }
        let mut order = if forward { self.model.forward_fetches() } else { Vec::new() };
        if backward {
            order.extend(self.model.backward_fetches());
        }
        let mut p = step_params(&self.params, &mut self.shard, self.step);
        for l in order {
            p.fetch(&self.be, &self.model, l)?;
        }
        Ok(())
    }

    /// The sharded state's layout and collectives, where the state is sharded.
    pub fn shard(&self) -> Option<&Sharded<B>> {
        self.shard.as_ref()
    }

    /// Where bucket `b`'s reduced gradients start in the arena: the bucket's start, or, when
    /// reduce-scattered, this rank's piece's.
    pub(super) fn reduced_offset(&self, b: usize) -> usize {
        match &self.shard {
            Some(s) if s.reduce_scattered => s.sharder.layout.piece(b, s.sharder.rank()).start,
            _ => self.engine.plan().buckets[b].start,
        }
    }

    /// The part of tensor range `r` of bucket `b` that this rank's reduced buffer holds: all of
    /// it, or when reduce-scattered its overlap with this rank's piece.
    pub(super) fn reduced_part(&self, b: usize, r: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        match &self.shard {
            Some(s) if s.reduce_scattered => intersect(r, &s.sharder.layout.piece(b, s.sharder.rank())),
            _ => r.clone(),
        }
    }

    /// The parameters changed where the layer window cannot tell (`swap_ema`): the layers it
    /// holds are out of date (nothing without one).
    pub(super) fn invalidate_window(&mut self) {
        if let Some(w) = self.shard.as_mut().and_then(|s| s.window.as_mut()) {
            w.invalidate();
        }
    }

    /// Collective over the data group (sharded state only): every rank's updated part of the
    /// parameters from the rank that updated it.
    pub(super) fn gather_params(&mut self) -> Result<()> {
        let Some(sh) = &mut self.shard else { return Ok(()) };
        if let Some(w) = &mut sh.window {
            // Each layer is gathered before it is next read; those held are out of date.
            w.invalidate();
            return Ok(());
        }
        let t = Instant::now();
        if self.be.device_ordinal().is_none() {
            // Host memory: in place.
            sh.sharder.gather_params(self.params.host_mut());
        } else {
            if sh.host.is_empty() {
                let _a = crate::mem::allocating("host staging for the parameters' all-gather");
                sh.host = crate::mem::zeros(self.model.n_params)?;
            }
            for (p, _) in sh.sharder.own() {
                self.be.download(&self.params, p.clone(), &mut sh.host[p])?;
            }
            sh.sharder.gather_params(&mut sh.host);
            self.be.upload_into(&sh.host, &mut self.params)?;
        }
        self.engine.exposed += t.elapsed();
        self.span("all-gather parameters", t);
        Ok(())
    }
}
