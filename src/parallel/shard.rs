//! Sharded state over the data-parallel ranks (`distribution.shard`, ZeRO stages 1 to 3):
//! which part of the parameter arena each rank updates (and, for stage 3, keeps), and the
//! collectives that keep the parts together: the reduce-scatter of a gradient bucket
//! (`ReduceScatter`, a `Reducer`), the all-gather of the updated parameters after each step
//! (stages 1 and 2) or of one layer's pieces before it is used (`all_gather`, stage 3), the
//! sum of the parts' partial norms (clipping), and the state gathered for a checkpoint.
//!
//! Each fusion bucket is split into one contiguous piece per data rank, in rank order, as even
//! as its length allows (`Layout`, as FSDP splits each flat parameter): every collective on a
//! bucket is balanced over the ranks (a bucket that fell to one rank made its reduce-scatter a
//! reduce to that rank, twice as slow on 2 ranks). A rank's optimizer state is its pieces end
//! to end, in bucket order. The pieces follow the buckets, so autotune, which changes them,
//! is refused with shards.
//!
//! Must not: know what an optimizer does with its part (the optimizer does), or decide when a
//! bucket travels (the engine does).

use super::comm::{parts_of, Channel};
use super::fusion::FusionPlan;
use super::reduce::Reducer;
use std::ops::Range;

/// Every bucket of a fusion plan split over `ranks`: bucket b's piece r is
/// [s + ⌊n·r/k⌋, s + ⌊n·(r+1)/k⌋) for the bucket [s, s + n).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub buckets: Vec<Range<usize>>,
    pub ranks: usize,
}

impl Layout {
    pub fn new(plan: &FusionPlan, ranks: usize) -> Layout {
        assert!(ranks >= 1);
        Layout { buckets: plan.buckets.clone(), ranks }
    }

    /// Bucket `b`'s piece on rank `r` (arena elements).
    pub fn piece(&self, b: usize, r: usize) -> Range<usize> {
        let (s, n, k) = (self.buckets[b].start, self.buckets[b].len(), self.ranks);
        s + n * r / k..s + n * (r + 1) / k
    }

    /// Bucket `b`'s pieces' lengths, in rank order.
    pub fn counts(&self, b: usize) -> Vec<usize> {
        (0..self.ranks).map(|r| self.piece(b, r).len()).collect()
    }

    /// Rank `r`'s pieces in bucket order, each with where it starts in that rank's state.
    pub fn own(&self, r: usize) -> Vec<(Range<usize>, usize)> {
        let mut at = 0;
        (0..self.buckets.len())
            .map(|b| {
                let p = self.piece(b, r);
                at += p.len();
                (p.clone(), at - p.len())
            })
            .collect()
    }

    /// Rank `r`'s pieces of `whole` (an arena), end to end (`own`'s order).
    pub fn cut(&self, r: usize, whole: &[f32]) -> Vec<f32> {
        self.own(r).into_iter().flat_map(|(p, _)| whole[p].iter().copied()).collect()
    }

    /// The whole arena's state from every rank's (its pieces end to end, `own`'s order).
    #[cfg(test)]
    pub fn assemble(&self, parts: &[Vec<f32>], n: usize) -> Vec<f32> {
        let mut all = vec![0.0; n];
        for (r, part) in parts.iter().enumerate() {
            for (p, at) in self.own(r) {
                all[p.clone()].copy_from_slice(&part[at..at + p.len()]);
            }
        }
        all
    }
}

/// The overlap of two ranges (an empty range at `a.start` or `b.start` when none).
pub fn intersect(a: &Range<usize>, b: &Range<usize>) -> Range<usize> {
    let (s, e) = (a.start.max(b.start), a.end.min(b.end));
    if s < e {
        s..e
    } else {
        s..s
    }
}

/// How the pieces travel: MPI's own collectives (`MPI_Reduce_scatter`, `MPI_Allgatherv`), or a
/// ring of point-to-point exchanges (p − 1 steps of one piece each way, the fp16 ring's
/// pattern in float32). `HVTRAIN_SHARD_COLLECTIVES=mpi|ring`; the ring is the default, measured
/// faster with Open MPI 4.1 on one node (141 M parameters, Adam, 2 ranks: "gradients" 40
/// samples/s with the ring, 15 with MPI's collectives, whose reduce-scatter of a 256 MiB
/// bucket took longer than the all-reduce of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Mpi,
    Ring,
}

impl Path {
    pub fn from_env() -> Path {
        match std::env::var("HVTRAIN_SHARD_COLLECTIVES").as_deref() {
            Ok("mpi") => Path::Mpi,
            _ => Path::Ring,
        }
    }
}

/// Ring reduce-scatter of one bucket: `out` (at least this rank's piece long) = this rank's
/// piece of the sum of every rank's `grads`, the pieces `counts` long in rank order. Step s
/// sends piece (r − 1 − s) mod p (at s = 0 this rank's own gradients, then the partial sum just
/// received plus its own) to the next rank and receives piece (r − 2 − s) mod p from the
/// previous; after p − 1 steps the piece received is this rank's, summed over every rank.
pub fn ring_reduce_scatter(chan: &Channel, grads: &[f32], out: &mut [f32], counts: &[usize], scratch: &mut Vec<f32>) {
    let (p, r) = (chan.size, chan.rank);
    let parts = parts_of(counts);
    let piece = |k: usize| parts[k % p].clone();
    let mine = piece(r);
    if p == 1 {
        out[..mine.len()].copy_from_slice(&grads[mine]);
        return;
    }
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    let most = counts.iter().copied().max().unwrap_or(0);
    scratch.resize(2 * most, 0.0);
    let (send, recv) = scratch.split_at_mut(most);
    for step in 0..p - 1 {
        let (o, i) = (piece(r + 2 * p - 1 - step), piece(r + 2 * p - 2 - step));
        if step == 0 {
            send[..o.len()].copy_from_slice(&grads[o.clone()]);
        }
        let last = step == p - 2;
        let into = if last { &mut out[..i.len()] } else { &mut recv[..i.len()] };
        chan.exchange(&send[..o.len()], next, into, prev);
        into.iter_mut().zip(&grads[i.clone()]).for_each(|(a, &g)| *a += g);
        if !last {
            send[..i.len()].copy_from_slice(&recv[..i.len()]);
        }
    }
}

/// Ring all-gather in place: `buf` holds this rank's piece (of pieces `counts` long in rank
/// order); after p − 1 steps, each passing on the piece received last, it holds every rank's.
pub fn ring_all_gather(chan: &Channel, buf: &mut [f32], counts: &[usize]) {
    let (p, r) = (chan.size, chan.rank);
    let parts = parts_of(counts);
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    for step in 0..p.saturating_sub(1) {
        let (o, i) = (parts[(r + p - step) % p].clone(), parts[(r + 2 * p - 1 - step) % p].clone());
        // Two disjoint pieces of one buffer: the one sent, the one received.
        if o.start < i.start {
            let (a, b) = buf.split_at_mut(i.start);
            chan.exchange(&a[o], next, &mut b[..i.len()], prev);
        } else {
            let (a, b) = buf.split_at_mut(o.start);
            chan.exchange(&b[..o.len()], next, &mut a[i], prev);
        }
    }
}

/// One rank's view of the sharded state: the layout, and a channel of the data group for the
/// main thread's collectives (the engine's reducer has its own).
pub struct Sharder {
    pub layout: Layout,
    chan: Channel,
    path: Path,
}

impl Sharder {
    /// `chan`: a communicator of this rank's data group that only the main thread uses.
    pub fn new(chan: Channel, plan: &FusionPlan) -> Sharder {
        Sharder { layout: Layout::new(plan, chan.size), chan, path: Path::from_env() }
    }

    /// This rank's pieces, each with its place in this rank's state (`Layout::own`).
    pub fn own(&self) -> Vec<(Range<usize>, usize)> {
        self.layout.own(self.chan.rank)
    }

    /// This rank's place in the data group.
    pub fn rank(&self) -> usize {
        self.chan.rank
    }

    /// Collective over the data group: another communicator of it (`MPI_Comm_dup`), for a
    /// thread of its own (`gather::Gatherer`).
    pub fn duplicate_channel(&self) -> Channel {
        self.chan.duplicate()
    }

    /// How the pieces travel.
    pub fn path(&self) -> Path {
        self.path
    }

    /// Collective over the data group: every rank's updated pieces of `params` (the whole
    /// arena, host memory) from the rank that updated them, bucket by bucket.
    pub fn gather_params(&self, params: &mut [f32]) {
        for (b, r) in self.layout.buckets.iter().enumerate() {
            let (buf, counts) = (&mut params[r.clone()], self.layout.counts(b));
            match self.path {
                Path::Mpi => self.chan.all_gather_parts_f32(buf, &counts),
                Path::Ring => ring_all_gather(&self.chan, buf, &counts),
            }
        }
    }

    /// Collective over the data group: `buf` holds this rank's part (of parts `counts` long,
    /// in rank order, any of them empty); afterwards every rank's (a layer's piece of a bucket,
    /// gathered before use under `shard = "parameters"`).
    pub fn all_gather(&self, buf: &mut [f32], counts: &[usize]) {
        match self.path {
            Path::Mpi => self.chan.all_gather_parts_f32(buf, counts),
            Path::Ring => ring_all_gather(&self.chan, buf, counts),
        }
    }

    /// Collective over the data group: `v` summed over the ranks, in place (each rank's sums of
    /// squares over its pieces of the tensors).
    pub fn sum(&self, v: &mut [f64]) {
        self.chan.all_reduce_sum_f64(v);
    }
}

/// The gradient sum of a bucket, reduce-scattered: each rank receives only its piece of the
/// bucket's sum (`MPI_Reduce_scatter`), into the start of its reduced buffer, which is that
/// piece's length (`reduced_lens`). Each rank's gradients arrive divided by the step's global
/// row count, so the sums are the means.
pub struct ReduceScatter {
    chan: Channel,
    /// Per bucket: each rank's count, in rank order.
    counts: Vec<Vec<usize>>,
    path: Path,
    /// The ring's two pieces in flight.
    scratch: Vec<f32>,
}

impl ReduceScatter {
    /// `chan`: the engine's communicator of the data group.
    pub fn new(chan: Channel, layout: &Layout) -> ReduceScatter {
        assert_eq!(chan.size, layout.ranks, "a layout of another data group");
        let counts = (0..layout.buckets.len()).map(|b| layout.counts(b)).collect();
        ReduceScatter { counts, chan, path: Path::from_env(), scratch: Vec::new() }
    }
}

/// The length of each bucket's reduced buffer on data rank `rank` (at least 1, so that no
/// device buffer is empty): its piece of the bucket.
pub fn reduced_lens(layout: &Layout, rank: usize) -> Vec<usize> {
    (0..layout.buckets.len()).map(|b| layout.piece(b, rank).len().max(1)).collect()
}

impl Reducer for ReduceScatter {
    fn reduce(&mut self, _grads: &[f32], _out: &mut [f32]) {
        unreachable!("the reduce-scatter needs the bucket's index (reduce_bucket)")
    }
    fn reduce_bucket(&mut self, index: usize, grads: &[f32], out: &mut [f32]) {
        match self.path {
            Path::Mpi => self.chan.reduce_scatter_sum_f32(grads, out, &self.counts[index]),
            Path::Ring => ring_reduce_scatter(&self.chan, grads, out, &self.counts[index], &mut self.scratch),
        }
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        match self.path {
            Path::Mpi => "reduce-scatter (MPI_Reduce_scatter)",
            Path::Ring => "reduce-scatter (ring)",
        }
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        Some(self.chan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bucket_splits_over_the_ranks_in_order_as_evenly_as_it_divides() {
        let plan = FusionPlan::new(&[4, 4, 2, 7], 32); // buckets 0..8, 8..10, 10..17
        for k in [1, 2, 3, 4, 5] {
            let l = Layout::new(&plan, k);
            for (b, range) in plan.buckets.iter().enumerate() {
                let pieces: Vec<Range<usize>> = (0..k).map(|r| l.piece(b, r)).collect();
                assert_eq!(pieces[0].start, range.start);
                assert_eq!(pieces[k - 1].end, range.end);
                for w in pieces.windows(2) {
                    assert_eq!(w[0].end, w[1].start, "bucket {b} over {k}: contiguous");
                }
                let lens = l.counts(b);
                let (lo, hi) = (*lens.iter().min().unwrap(), *lens.iter().max().unwrap());
                assert!(hi - lo <= 1, "bucket {b} over {k}: {lens:?}");
            }
        }
        let l = Layout::new(&FusionPlan::new(&[4, 4, 2], 32), 3); // buckets 0..8, 8..10
        assert_eq!(l.buckets, vec![0..8, 8..10]);
        assert_eq!((l.piece(0, 0), l.piece(0, 1), l.piece(0, 2)), (0..2, 2..5, 5..8));
        assert_eq!((l.piece(1, 0), l.piece(1, 1), l.piece(1, 2)), (8..8, 8..9, 9..10));
        assert_eq!(l.own(1), vec![(2..5, 0), (8..9, 3)]);
        assert_eq!(reduced_lens(&l, 0), vec![2, 1]); // 2, and 0 kept at 1
    }

    #[test]
    fn the_ranks_pieces_assemble_the_whole_arena() {
        let plan = FusionPlan::new(&[5, 3, 6, 1], 24);
        let n = plan.total_len();
        let whole: Vec<f32> = (0..n).map(|i| i as f32 * 1.5 - 3.0).collect();
        for k in [1, 2, 3, 4] {
            let l = Layout::new(&plan, k);
            let parts: Vec<Vec<f32>> =
                (0..k).map(|r| l.own(r).iter().flat_map(|(p, _)| whole[p.clone()].to_vec()).collect()).collect();
            assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), n, "{k}: the pieces cover the arena once");
            assert_eq!(l.assemble(&parts, n), whole, "{k} ranks");
        }
        assert_eq!(intersect(&(0..3), &(5..9)), 5..5);
    }
}
