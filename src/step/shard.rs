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
use crate::model::{Held, Mlp, Params};
use crate::optim::Optimizer;
use crate::parallel::engine::HostBuf;
use crate::parallel::shard::{intersect, Sharder};
use crate::parallel::timeline::Timeline;
use crate::parallel::Engine;
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

/// One layer's parameters gathered from every rank's pieces (`shard = "parameters"`).
pub(super) struct Window<B: Backend> {
    /// The largest layer slot's length.
    buf: B::Buf,
    /// Host staging for the gather when `buf` is on a GPU.
    host: Vec<f32>,
    /// The layer `buf` holds, until the parameters change (None: none).
    at: Option<usize>,
    /// That layer's slot in the arena.
    slot: Range<usize>,
}

/// The parameters of a step as forward and backward read them: the whole arena, or this
/// rank's pieces with a layer gathered at a time.
pub(super) enum StepParams<'a, B: Backend> {
    Held(Held<'a, B>),
    Gathered { pieces: &'a B::Buf, sharder: &'a Sharder, win: &'a mut Window<B> },
}

/// `params` (a stepper's) as a `model::Params`, gathered where `shard` says so.
pub(super) fn step_params<'a, B: Backend>(params: &'a B::Buf, shard: &'a mut Option<Sharded<B>>) -> StepParams<'a, B> {
    match shard {
        Some(Sharded { sharder, window: Some(win), .. }) => StepParams::Gathered { pieces: params, sharder, win },
        _ => StepParams::Held(Held(params)),
    }
}

impl<B: Backend> Params<B> for StepParams<'_, B>
where
    B::Buf: HostBuf,
{
    fn fetch(&mut self, be: &B, model: &Mlp, l: usize) -> Result<()> {
        let StepParams::Gathered { pieces, sharder, win } = self else { return Ok(()) };
        if win.at == Some(l) {
            return Ok(());
        }
        win.at = None;
        let slot = model.slot(l);
        let on_host = be.device_ordinal().is_none();
        let host: &mut [f32] =
            if on_host { &mut win.buf.host_mut()[..slot.len()] } else { &mut win.host[..slot.len()] };
        gather_slot(be, pieces, sharder, &slot, host)?;
        if !on_host {
            be.upload_into(&win.host[..slot.len()], &mut win.buf)?;
        }
        (win.at, win.slot) = (Some(l), slot);
        Ok(())
    }

    fn view(&self, be: &B, r: Range<usize>) -> B::View<'_> {
        match self {
            StepParams::Held(h) => h.view(be, r),
            StepParams::Gathered { win, .. } => {
                let s = &win.slot;
                assert!(
                    win.at.is_some() && s.start <= r.start && r.end <= s.end,
                    "{r:?} read outside the layer gathered last"
                );
                be.view(&win.buf, r.start - s.start..r.end - s.start)
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
    let (lay, me) = (&sharder.layout, sharder.rank());
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
            sharder.all_gather(&mut out[seg.start - slot.start..seg.end - slot.start], &counts);
        }
        at += piece.len();
    }
    Ok(())
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
    ) -> Result<Stepper<B>> {
        let len: usize = sharder.own().iter().map(|(r, _)| r.len()).sum();
        assert_eq!(pieces.len(), len, "pieces of another layout");
        assert!(opt.pieces_kept(), "sharded parameters need an optimizer of their pieces");
        let pieces = nonempty(pieces);
        let mut st = Stepper::build(be, model, &pieces, opt, engine, batch, timeline)?;
        drop(pieces);
        st.set_shard(sharder, true);
        let _a = crate::mem::allocating("one layer's window of the gathered parameters");
        let most = st.model.largest_slot().max(1);
        let host = if st.be.device_ordinal().is_some() { crate::mem::zeros(most)? } else { Vec::new() };
        let win = Window { buf: st.be.zeros(most)?, host, at: None, slot: 0..0 };
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

    /// With `shard = "parameters"` and no model parallelism: the backend, and the parameters
    /// as forward reads them in a step, each layer gathered from the data ranks' pieces into
    /// the window when fetched (collective over the data group; evaluation without the whole
    /// model). None where the parameters are held whole or model parallelism splits them.
    pub fn gathered_params(&mut self) -> Option<(&B, impl Params<B> + '_)> {
        if !self.params_sharded() || !self.tp.is_whole() {
            return None;
        }
        Some((&self.be, step_params(&self.params, &mut self.shard)))
    }

    /// Collective over the data group (sharded state): the largest `n` over its ranks.
    pub fn most_over_data_ranks(&self, n: usize) -> usize {
        let sh = &self.shard.as_ref().expect("sharded").sharder;
        let mut each = vec![0.0; sh.layout.ranks];
        each[sh.rank()] = n as f64;
        sh.sum(&mut each);
        each.into_iter().fold(0.0, f64::max) as usize
    }

    /// This rank's arena ranges of the sharded state (`Sharder::own`), for a checkpoint
    /// written in parts.
    pub fn own_ranges(&self) -> Vec<Range<usize>> {
        self.shard.as_ref().expect("sharded").sharder.own().into_iter().map(|(r, _)| r).collect()
    }

    /// This rank's values of `name` (`checkpoint::parts::ARRAYS`: "params", "optimizer/m",
    /// "optimizer/v") at `own_ranges`, end to end, on the host (no collective): its pieces as
    /// kept under "parameters", read from the whole arena otherwise; None where the optimizer
    /// keeps no such state. One array at a time, for a checkpoint written in parts.
    pub fn own_values(&self, name: &str) -> Result<Option<Vec<f32>>> {
        let ranges = self.own_ranges();
        let n: usize = ranges.iter().map(|r| r.len()).sum();
        let _a = crate::mem::allocating("this rank's part of the state (a checkpoint in parts)");
        if name != "params" {
            let mut v = self.opt.moment(&self.be, name == "optimizer/v")?;
            v.iter_mut().for_each(|v| v.truncate(n));
            return Ok(v);
        }
        let mut params = crate::mem::zeros(n)?;
        if self.params_sharded() {
            self.be.download(&self.params, 0..n, &mut params)?;
        } else {
            let mut at = 0;
            for r in &ranges {
                self.be.download(&self.params, r.clone(), &mut params[at..at + r.len()])?;
                at += r.len();
            }
        }
        Ok(Some(params))
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
        let mut p = step_params(&self.params, &mut self.shard);
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

    /// Collective over the data group (sharded state only): every rank's updated part of the
    /// parameters from the rank that updated it.
    pub(super) fn gather_params(&mut self) -> Result<()> {
        let Some(sh) = &mut self.shard else { return Ok(()) };
        if let Some(w) = &mut sh.window {
            // Each layer is gathered before it is next read; the one held is out of date.
            w.at = None;
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
