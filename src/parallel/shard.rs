//! Sharded state over the data-parallel ranks (`distribution.shard`, ZeRO stages 1 and 2):
//! which part of the parameter arena each rank updates, and the collectives that keep the
//! parts together: the reduce-scatter of a gradient bucket (`ReduceScatter`, a `Reducer`), the
//! all-gather of the updated parameters after each step, the sum of the parts' partial norms
//! (clipping), and the optimizer state gathered for a checkpoint.
//!
//! The parts are contiguous pieces of the whole arena, one per data rank in rank order, as
//! even as the arena's length allows (`Layout`). They do not follow the fusion buckets, so a
//! bucket may fall to one rank or several, and autotune's new buckets leave every rank's
//! optimizer state where it is; a checkpoint's state is the parts end to end.
//!
//! Must not: know what an optimizer does with its part (the optimizer does), or decide when a
//! bucket travels (the engine does).

use super::comm::Channel;
use super::fusion::FusionPlan;
use super::reduce::Reducer;
use std::ops::Range;

/// The arena split over `ranks` contiguous parts, part r = [⌊n·r/k⌋, ⌊n·(r+1)/k⌋).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub parts: Vec<Range<usize>>,
}

impl Layout {
    pub fn new(n: usize, ranks: usize) -> Layout {
        assert!(ranks >= 1);
        Layout { parts: (0..ranks).map(|r| n * r / ranks..n * (r + 1) / ranks).collect() }
    }

    /// Each rank's part of the arena range `r` (a bucket's), as lengths in rank order; they
    /// sum to `r`'s length.
    pub fn counts_in(&self, r: &Range<usize>) -> Vec<usize> {
        self.parts.iter().map(|p| intersect(p, r).len()).collect()
    }

    pub fn lens(&self) -> Vec<usize> {
        self.parts.iter().map(|p| p.len()).collect()
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

/// One rank's view of the sharded state: the layout, its own part, and a channel of the data
/// group for the main thread's collectives (the engine's reducer has its own).
pub struct Sharder {
    pub layout: Layout,
    chan: Channel,
}

impl Sharder {
    /// `chan`: a communicator of this rank's data group that only the main thread uses.
    pub fn new(chan: Channel, n_params: usize) -> Sharder {
        Sharder { layout: Layout::new(n_params, chan.size), chan }
    }

    /// This rank's part of the arena.
    pub fn own(&self) -> Range<usize> {
        self.layout.parts[self.chan.rank].clone()
    }

    /// This rank's place in the data group.
    pub fn rank(&self) -> usize {
        self.chan.rank
    }

    /// Collective over the data group: every rank's updated part of `params` (the whole
    /// arena, host memory) from the rank that updated it.
    pub fn gather_params(&self, params: &mut [f32]) {
        self.chan.all_gather_parts_f32(params, &self.layout.lens());
    }

    /// Collective over the data group: `v` summed over the ranks, in place (each rank's sums of
    /// squares over its parts of the tensors).
    pub fn sum(&self, v: &mut [f64]) {
        self.chan.all_reduce_sum_f64(v);
    }

    /// Collective over the data group: the whole arena's state on data rank 0 from every
    /// rank's part (`mine`, empty where the optimizer keeps none); None on the others.
    pub fn gather_state(&self, mine: &[f32]) -> Option<Vec<f32>> {
        self.chan.gather_f32s(mine).map(|parts| parts.concat())
    }
}

/// The gradient sum of a bucket, reduce-scattered: each rank receives only its part of the
/// bucket's sum (`MPI_Reduce_scatter`), into the start of its reduced buffer, which is that
/// part's length (`reduced_lens`). Each rank's gradients arrive divided by the step's global
/// row count, so the sums are the means.
pub struct ReduceScatter {
    chan: Channel,
    /// Per bucket: each rank's count, in rank order.
    counts: Vec<Vec<usize>>,
}

impl ReduceScatter {
    /// `chan`: the engine's communicator of the data group.
    pub fn new(chan: Channel, layout: &Layout, plan: &FusionPlan) -> ReduceScatter {
        assert_eq!(chan.size, layout.parts.len(), "a layout of another data group");
        ReduceScatter { counts: plan.buckets.iter().map(|b| layout.counts_in(b)).collect(), chan }
    }
}

/// The length of each bucket's reduced buffer on data rank `rank` under `layout` (at least 1,
/// so that no device buffer is empty): its part of the bucket.
pub fn reduced_lens(layout: &Layout, rank: usize, plan: &FusionPlan) -> Vec<usize> {
    plan.buckets.iter().map(|b| intersect(&layout.parts[rank], b).len().max(1)).collect()
}

impl Reducer for ReduceScatter {
    fn reduce(&mut self, _grads: &[f32], _out: &mut [f32]) {
        unreachable!("the reduce-scatter needs the bucket's index (reduce_bucket)")
    }
    fn reduce_bucket(&mut self, index: usize, grads: &[f32], out: &mut [f32]) {
        self.chan.reduce_scatter_sum_f32(grads, out, &self.counts[index]);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "reduce-scatter"
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        Some(self.chan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_arena_in_order_as_evenly_as_it_divides() {
        for (n, k) in [(10, 3), (7, 4), (3, 4), (1000, 1), (0, 2)] {
            let l = Layout::new(n, k);
            assert_eq!(l.parts.len(), k);
            assert_eq!(l.parts[0].start, 0);
            assert_eq!(l.parts[k - 1].end, n);
            for w in l.parts.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{n} over {k}: contiguous");
            }
            let (lo, hi) = (l.lens().into_iter().min().unwrap(), l.lens().into_iter().max().unwrap());
            assert!(hi - lo <= 1, "{n} over {k}: {:?}", l.parts);
        }
        assert_eq!(Layout::new(10, 3).parts, vec![0..3, 3..6, 6..10]);
    }

    #[test]
    fn a_buckets_counts_are_each_parts_overlap() {
        let l = Layout::new(10, 3); // 0..3, 3..6, 6..10
        assert_eq!(l.counts_in(&(2..8)), vec![1, 3, 2]);
        assert_eq!(l.counts_in(&(6..10)), vec![0, 0, 4]);
        assert_eq!(l.counts_in(&(0..10)), vec![3, 3, 4]);
        let plan = FusionPlan::new(&[4, 4, 2], 16); // buckets 0..4, 4..8, 8..10
        assert_eq!(plan.buckets, vec![0..4, 4..8, 8..10]);
        assert_eq!(reduced_lens(&l, 0, &plan), vec![3, 1, 1]); // 3, 0 (kept 1), 0 (kept 1)
        assert_eq!(reduced_lens(&l, 2, &plan), vec![1, 2, 2]);
        assert_eq!(intersect(&(0..3), &(5..9)), 5..5);
    }
}
