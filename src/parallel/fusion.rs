//! The fusion plan: which gradient tensors travel together in one all-reduce.
//!
//! Tensors are taken in bucket order and packed greedily into buckets of at most
//! `threshold` bytes (Horovod's tensor fusion); the first bucket may have a smaller
//! threshold of its own, so communication starts sooner (as PyTorch DDP does). A tensor
//! larger than the threshold travels alone; a threshold of 0 gives one bucket per tensor.
//! The plan is fixed at start-up, from the model alone, and checked once across ranks.
//!
//! Tensor offsets (`slots`) are always in the given (arena) order; with `BucketOrder::Forward`
//! the buckets are formed from the other end, and each is still one contiguous range.
//!
//! Must not: change between ranks or steps (the plan is fixed and checked once).

use crate::config::BucketOrder;
use std::ops::Range;

#[derive(Clone, Debug, PartialEq)]
pub struct FusionPlan {
    /// Element offset and length of each tensor inside the packed buffer, in input order.
    pub slots: Vec<Range<usize>>,
    /// Element ranges of the packed buffer, one per bucket, in reduction order.
    pub buckets: Vec<Range<usize>>,
    /// For each tensor, the bucket it belongs to.
    pub bucket_of: Vec<usize>,
    /// For each bucket, its tensors (indices into `slots`).
    pub members: Vec<Vec<usize>>,
    pub threshold_bytes: usize,
}

const F32: usize = std::mem::size_of::<f32>();

// pack/unpack serve tensors that do not live in a bucket view (the CUDA and compression
// paths); the CPU trainer writes gradients into the buckets directly.
#[allow(dead_code)]
impl FusionPlan {
    /// `lens`: element counts of the tensors in readiness (arena) order.
    pub fn new(lens: &[usize], threshold_bytes: usize) -> FusionPlan {
        FusionPlan::with_options(lens, threshold_bytes, threshold_bytes, BucketOrder::Backward)
    }

    pub fn with_options(lens: &[usize], threshold_bytes: usize, first_bytes: usize, order: BucketOrder) -> FusionPlan {
        let mut slots = Vec::with_capacity(lens.len());
        let mut off = 0;
        for &len in lens {
            slots.push(off..off + len);
            off += len;
        }
        let order: Vec<usize> = match order {
            BucketOrder::Backward => (0..lens.len()).collect(),
            BucketOrder::Forward => (0..lens.len()).rev().collect(),
        };
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut used = 0;
        for &t in &order {
            // The bucket being filled is the first one while there is at most one.
            let limit = if members.len() <= 1 { first_bytes } else { threshold_bytes };
            let bytes = lens[t] * F32;
            match members.last_mut() {
                Some(m) if used > 0 && used + bytes <= limit => {
                    m.push(t);
                    used += bytes;
                }
                _ => {
                    members.push(vec![t]);
                    used = bytes;
                }
            }
        }
        let mut bucket_of = vec![0; lens.len()];
        let buckets = members
            .iter()
            .enumerate()
            .map(|(b, m)| {
                m.iter().for_each(|&t| bucket_of[t] = b);
                let start = m.iter().map(|&t| slots[t].start).min().unwrap();
                let end = m.iter().map(|&t| slots[t].end).max().unwrap();
                start..end
            })
            .collect();
        FusionPlan { slots, buckets, bucket_of, members, threshold_bytes }
    }

    pub fn total_len(&self) -> usize {
        self.slots.last().map_or(0, |s| s.end)
    }

    /// Copy tensors into the packed buffer (for tensors that do not already live there).
    pub fn pack(&self, tensors: &[&[f32]], buf: &mut [f32]) {
        assert_eq!(tensors.len(), self.slots.len());
        for (t, s) in tensors.iter().zip(&self.slots) {
            buf[s.clone()].copy_from_slice(t);
        }
    }

    /// Copy the packed buffer back out into tensors.
    pub fn unpack(&self, buf: &[f32], tensors: &mut [&mut [f32]]) {
        assert_eq!(tensors.len(), self.slots.len());
        for (t, s) in tensors.iter_mut().zip(&self.slots) {
            t.copy_from_slice(&buf[s.clone()]);
        }
    }

    /// A fingerprint for the cross-rank check.
    pub fn fingerprint(&self) -> u64 {
        let mut bytes = Vec::new();
        for b in &self.buckets {
            bytes.extend_from_slice(&(b.start as u64).to_le_bytes());
            bytes.extend_from_slice(&(b.end as u64).to_le_bytes());
        }
        crate::config::fnv1a(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_unpack_round_trip() {
        let lens = [3, 1, 4, 2];
        let plan = FusionPlan::new(&lens, 16);
        let tensors: Vec<Vec<f32>> =
            lens.iter().enumerate().map(|(i, &n)| (0..n).map(|j| (10 * i + j) as f32).collect()).collect();
        let mut buf = vec![0.0; plan.total_len()];
        plan.pack(&tensors.iter().map(|t| &t[..]).collect::<Vec<_>>(), &mut buf);
        let mut back: Vec<Vec<f32>> = lens.iter().map(|&n| vec![-1.0; n]).collect();
        plan.unpack(&buf, &mut back.iter_mut().map(|t| &mut t[..]).collect::<Vec<_>>());
        assert_eq!(back, tensors);
    }

    #[test]
    fn buckets_close_at_the_threshold() {
        // 16-byte threshold = 4 floats: [3] then 1 fits exactly (4) -> [3,1], then [4], then [2].
        let plan = FusionPlan::new(&[3, 1, 4, 2], 16);
        assert_eq!(plan.buckets, vec![0..4, 4..8, 8..10]);
        assert_eq!(plan.bucket_of, vec![0, 0, 1, 2]);
        // One float less: 3 and 1 no longer share.
        let plan = FusionPlan::new(&[3, 1, 4, 2], 15);
        assert_eq!(plan.buckets, vec![0..3, 3..4, 4..8, 8..10]);
    }

    #[test]
    fn first_bucket_threshold_and_forward_order() {
        // First bucket limited to 4 bytes: tensor 0 alone, then the 16-byte threshold.
        let plan = FusionPlan::with_options(&[1, 1, 2, 1], 16, 4, BucketOrder::Backward);
        assert_eq!(plan.buckets, vec![0..1, 1..5]);
        assert_eq!(plan.members, vec![vec![0], vec![1, 2, 3]]);
        // Forward order fills from the other end; buckets are still contiguous ranges.
        let plan = FusionPlan::with_options(&[3, 1, 4, 2], 16, 16, BucketOrder::Forward);
        assert_eq!(plan.buckets, vec![8..10, 4..8, 0..4]);
        assert_eq!(plan.bucket_of, vec![2, 2, 1, 0]);
        assert_eq!(plan.slots[0], 0..3);
    }

    #[test]
    fn big_tensor_travels_alone_and_extremes() {
        let plan = FusionPlan::new(&[1, 100, 1], 8);
        assert_eq!(plan.buckets, vec![0..1, 1..101, 101..102]);
        let one = FusionPlan::new(&[5, 6, 7], usize::MAX);
        assert_eq!(one.buckets, vec![0..18]);
        let each = FusionPlan::new(&[5, 6, 7], 0);
        assert_eq!(each.buckets.len(), 3);
        assert_ne!(one.fingerprint(), each.fingerprint());
        let covered: usize = each.buckets.iter().map(|b| b.len()).sum();
        assert_eq!(covered, 18);
    }
}
