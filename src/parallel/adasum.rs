//! Adasum (Maleki et al., 2021; Horovod's `op=hvd.Adasum`): gradients combined pairwise,
//! recursively over ranks, each pair per tensor as
//!
//! adasum(a, b) = (1 − a·b / 2‖a‖²) a + (1 − a·b / 2‖b‖²) b
//!
//! (a coefficient is 1 where that norm² is below 1e-8, as Horovod has it): two equal gradients
//! give their mean, two orthogonal ones their sum. The pairs are Horovod's: at level d = 1, 2,
//! 4, … rank r pairs with r XOR d, so 4 ranks give adasum(adasum(g0, g1), adasum(g2, g3)).
//!
//! Rank counts that are not a power of two, which Horovod refuses ("Running Adasum with
//! non-power-of-two ranks is not supported yet"), are folded first: with p the largest power of
//! two below n, rank p + i hands its gradient to rank i, which combines the two as one pair
//! (adasum(g_i, g_{p+i})); the p ranks then run the levels above and rank i sends the result
//! back. So 3 ranks give adasum(adasum(g0, g2), g1).
//!
//! Each level here exchanges the whole bucket with the partner (recursive doubling), and both
//! compute the pair with the lower rank's vector as `a`, in the same order, so every rank ends
//! with the same bits and the norms are those of whole tensors without a second collective.
//! That is log2(n) bucket exchanges against the ring all-reduce's two: Horovod's vector-halving
//! form, which needs an all-reduce of the dot products per level, is not done here.
//!
//! Each rank's gradient arrives divided by the step's global row count (`step`), so it is
//! multiplied by the data-parallel rank count first: Adasum then sees each rank's own mean
//! gradient, as Horovod's does (and equal gradients still come out as their mean).
//!
//! Must not: call MPI but through `Channel`.

use super::comm::Channel;
use std::ops::Range;

/// A pair's coefficients for one tensor: (for a, for b), from float64 sums.
pub fn coefficients(a: &[f32], b: &[f32]) -> (f64, f64) {
    let (mut dot, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    let ca = if aa >= 1e-8 { 1.0 - dot / aa * 0.5 } else { 1.0 };
    let cb = if bb >= 1e-8 { 1.0 - dot / bb * 0.5 } else { 1.0 };
    (ca, cb)
}

/// Combine the pair tensor by tensor (`tensors`: ranges of the bucket) into `mine`.
/// `mine_is_a`: this rank is the lower of the two, so its vector is `a`; the other side runs
/// the same arithmetic with the roles named the same way and gets the same bits.
pub fn combine(mine: &mut [f32], theirs: &[f32], tensors: &[Range<usize>], mine_is_a: bool) {
    for t in tensors {
        let (m, o) = (&mut mine[t.clone()], &theirs[t.clone()]);
        if mine_is_a {
            let (ca, cb) = coefficients(m, o);
            m.iter_mut().zip(o).for_each(|(x, &y)| *x = (ca * f64::from(*x) + cb * f64::from(y)) as f32);
        } else {
            let (ca, cb) = coefficients(o, m);
            m.iter_mut().zip(o).for_each(|(x, &y)| *x = (ca * f64::from(y) + cb * f64::from(*x)) as f32);
        }
    }
}

/// The message tag of the fold (the channel is the engine's own).
const FOLD: i32 = 7;

/// The largest power of two not above `n` (n ≥ 1).
pub fn fold_size(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// Adasum of every rank's `buf` over `chan`, in place (each tensor of `tensors` combined on its
/// own). `tmp` is scratch, grown to the bucket's length. Collective over `chan`.
pub fn all_reduce(chan: &Channel, buf: &mut [f32], tensors: &[Range<usize>], tmp: &mut Vec<f32>) {
    let (n, r) = (chan.size, chan.rank);
    if n == 1 {
        return;
    }
    let scale = n as f32;
    buf.iter_mut().for_each(|x| *x *= scale);
    tmp.resize(buf.len(), 0.0);
    let p = fold_size(n);
    if r >= p {
        // Folded into rank r - p, which sends the result back.
        chan.send_f32(r - p, FOLD, buf);
        chan.recv_f32(r - p, FOLD, buf);
        return;
    }
    if r + p < n {
        chan.recv_f32(r + p, FOLD, tmp);
        combine(buf, tmp, tensors, true);
    }
    let mut d = 1;
    while d < p {
        let partner = r ^ d;
        chan.exchange(buf, partner, tmp, partner);
        combine(buf, tmp, tensors, r < partner);
        d <<= 1;
    }
    if r + p < n {
        chan.send_f32(r + p, FOLD, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut m = a.to_vec();
        combine(&mut m, b, &[0..a.len()], true);
        m
    }

    #[test]
    fn equal_gradients_average_and_orthogonal_ones_add() {
        let g = [0.5f32, -1.0, 2.0];
        assert_eq!(pair(&g, &g), g.to_vec());
        assert_eq!(pair(&[1.0, 0.0], &[0.0, 3.0]), vec![1.0, 3.0]);
        // Opposite gradients: each coefficient 1.5, so they cancel.
        assert_eq!(pair(&[1.0, 2.0], &[-1.0, -2.0]), vec![0.0, 0.0]);
        // A zero gradient leaves the other as it is.
        assert_eq!(pair(&[0.0, 0.0], &[1.0, -2.0]), vec![1.0, -2.0]);
    }

    #[test]
    fn both_sides_get_the_same_bits_and_tensors_are_separate() {
        let a: Vec<f32> = (0..10).map(|i| (i as f32 * 0.7).sin()).collect();
        let b: Vec<f32> = (0..10).map(|i| (i as f32 * 1.3).cos()).collect();
        let ts = [0..4, 4..10];
        let (mut lo, mut hi) = (a.clone(), b.clone());
        combine(&mut lo, &b, &ts, true);
        combine(&mut hi, &a, &ts, false);
        assert_eq!(lo, hi);
        // Per tensor: the first tensor's result does not depend on the second's values.
        let mut b2 = b.clone();
        b2[7] = 100.0;
        let mut lo2 = a.clone();
        combine(&mut lo2, &b2, &ts, true);
        assert_eq!(lo[..4], lo2[..4]);
        assert_ne!(lo[4..], lo2[4..]);
    }

    #[test]
    fn fold_sizes() {
        assert_eq!([1, 2, 3, 4, 5, 7, 8, 9].map(fold_size), [1, 2, 2, 4, 4, 4, 8, 8]);
    }
}
