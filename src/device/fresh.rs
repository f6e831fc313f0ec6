//! Which ranges of a buffer its bf16 copy matches (`Fresh`): the bookkeeping behind the CUDA
//! backend's bf16 copies (`precision = "bf16"`, `cuda/buf.rs`). A kernel that writes a range's
//! float32 values and their bf16 rounding together marks the range; any other write into a
//! range clears it; a product may read the copy instead of rounding the float32 values again
//! only where the whole operand is marked. So the copy read is, bit for bit, the rounding the
//! product would have made itself.
//!
//! Must not: know what the buffers hold or where they live (ranges of element indices only).

use std::ops::Range;

/// Disjoint, sorted, non-touching ranges: where the copy is current.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fresh(Vec<Range<usize>>);

impl Fresh {
    /// `r` was written together with its copy: current there.
    pub fn mark(&mut self, r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        let (mut start, mut end) = (r.start, r.end);
        // Merge every range that overlaps or touches r.
        self.0.retain(|x| {
            let apart = x.end < start || x.start > end;
            if !apart {
                start = start.min(x.start);
                end = end.max(x.end);
            }
            apart
        });
        let at = self.0.partition_point(|x| x.start < start);
        self.0.insert(at, start..end);
    }

    /// `r` was written without its copy: stale there.
    pub fn clear(&mut self, r: Range<usize>) {
        if r.is_empty() || self.0.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for x in self.0.drain(..) {
            if x.end <= r.start || x.start >= r.end {
                out.push(x);
                continue;
            }
            if x.start < r.start {
                out.push(x.start..r.start);
            }
            if x.end > r.end {
                out.push(r.end..x.end);
            }
        }
        self.0 = out;
    }

    /// The whole buffer written without its copy.
    pub fn clear_all(&mut self) {
        self.0.clear();
    }

    /// Whether the copy is current on all of `r` (an empty range: trivially).
    pub fn covers(&self, r: &Range<usize>) -> bool {
        r.is_empty() || self.0.iter().any(|x| x.start <= r.start && r.end <= x.end)
    }
}

#[cfg(test)]
mod tests {
    use super::Fresh;
    use crate::device::bf16::to_bf16;
    use crate::rng::Rng;

    #[test]
    fn marks_merge_and_clears_split() {
        let mut f = Fresh::default();
        f.mark(10..20);
        f.mark(20..30); // touching: one range
        assert_eq!(f.0, vec![10..30]);
        assert!(f.covers(&(12..30)) && !f.covers(&(9..12)) && f.covers(&(5..5)));
        f.clear(14..16);
        assert_eq!(f.0, vec![10..14, 16..30]);
        assert!(!f.covers(&(12..18)));
        f.mark(0..5);
        f.mark(13..17); // bridges the hole
        assert_eq!(f.0, vec![0..5, 10..30]);
        f.clear(0..100);
        assert_eq!(f.0, Vec::<std::ops::Range<usize>>::new());
    }

    /// A buffer with its bf16 copy, driven as a training step drives one (plain writes,
    /// writes of both, reads by products) in random order: whenever `covers` lets a product
    /// read the copy, the copy is exactly the rounding of the float32 values. Against a
    /// per-element model of which copies are current.
    #[test]
    fn a_copy_read_is_always_the_rounding_of_the_values() {
        let n = 97;
        let mut rng = Rng::new(5, 0);
        let (mut data, mut bits, mut fresh) = (vec![0.0f32; n], vec![0u16; n], Fresh::default());
        let mut model = vec![false; n];
        let (mut reads, mut from_copy) = (0, 0);
        for step in 0..20_000 {
            let a = rng.below(n);
            let b = a + rng.below(n - a + 1);
            let r = a..b;
            let value = step as f32 * 1.000_123 + 0.3;
            match rng.below(3) {
                0 => {
                    // a plain write (a product's output, dropout, an upload)
                    data[r.clone()].iter_mut().for_each(|x| *x = value);
                    fresh.clear(r.clone());
                    model[r].iter_mut().for_each(|m| *m = false);
                }
                1 => {
                    // a kernel writing both (bias + activation, the optimizer)
                    for i in r.clone() {
                        data[i] = value + i as f32;
                        bits[i] = to_bf16(data[i]);
                    }
                    fresh.mark(r.clone());
                    model[r].iter_mut().for_each(|m| *m = true);
                }
                _ => {
                    reads += 1;
                    assert_eq!(fresh.covers(&r), model[r.clone()].iter().all(|&m| m), "covers {r:?} at step {step}");
                    if fresh.covers(&r) {
                        from_copy += 1;
                        for i in r {
                            assert_eq!(bits[i], to_bf16(data[i]), "element {i} at step {step}");
                        }
                    }
                }
            }
        }
        assert!(from_copy > reads / 10, "the copy was read {from_copy} times of {reads}");
    }
}
