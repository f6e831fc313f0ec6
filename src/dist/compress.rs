//! Gradient compression on the wire: a ring all-reduce of fp16 or bf16 values (MPI has no
//! half-precision sum, so we run the ring ourselves over point-to-point exchanges).
//!
//! Averaging without overflow: each rank scales its gradients by 1/n *before* compressing,
//! so partial sums stay near the gradients' own magnitude. Partial sums travel compressed
//! and are added in f32; each chunk's final value is rounded once by the rank that owns it
//! and then travels unchanged, so every rank ends with bit-identical averages.

use super::comm::Channel;
use crate::config::Compression;

fn to_bits(x: f32, kind: Compression) -> u16 {
    match kind {
        Compression::Fp16 => half::f16::from_f32(x).to_bits(),
        Compression::Bf16 => half::bf16::from_f32(x).to_bits(),
        Compression::None => unreachable!("uncompressed buckets take MPI_Allreduce"),
    }
}

fn from_bits(b: u16, kind: Compression) -> f32 {
    match kind {
        Compression::Fp16 => half::f16::from_bits(b).to_f32(),
        Compression::Bf16 => half::bf16::from_bits(b).to_f32(),
        Compression::None => unreachable!("uncompressed buckets take MPI_Allreduce"),
    }
}

/// Reusable buffers for the ring.
#[derive(Default)]
pub struct Scratch {
    send: Vec<u16>,
    recv: Vec<u16>,
}

/// dst = average over ranks of src, through a compressed ring. `dst` doubles as the f32
/// accumulator.
pub fn ring_allreduce_avg(chan: &Channel, src: &[f32], dst: &mut [f32], kind: Compression, s: &mut Scratch) {
    let (n, r) = (chan.size, chan.rank);
    let inv = 1.0 / n as f32;
    dst.iter_mut().zip(src).for_each(|(d, &g)| *d = g * inv);
    if n == 1 {
        return;
    }
    let len = src.len();
    let chunk = |i: usize| (i % n) * len / n..((i % n) + 1) * len / n;
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let biggest = len.div_ceil(n);
    s.send.resize(biggest, 0);
    s.recv.resize(biggest, 0);

    // Reduce-scatter: after n-1 steps rank r holds the full sum of chunk r+1.
    for step in 0..n - 1 {
        let (out, inp) = (chunk(r + n - step), chunk(r + 2 * n - step - 1));
        for (o, &v) in s.send.iter_mut().zip(&dst[out.clone()]) {
            *o = to_bits(v, kind);
        }
        chan.exchange_u16(&s.send[..out.len()], next, &mut s.recv[..inp.len()], prev);
        for (d, &b) in dst[inp.clone()].iter_mut().zip(&s.recv) {
            *d += from_bits(b, kind);
        }
    }
    // The owner rounds its finished chunk once, exactly as the others will receive it.
    let own = chunk(r + 1);
    dst[own].iter_mut().for_each(|v| *v = from_bits(to_bits(*v, kind), kind));

    // All-gather: pass finished chunks around the ring.
    for step in 0..n - 1 {
        let (out, inp) = (chunk(r + 1 + n - step), chunk(r + n - step));
        for (o, &v) in s.send.iter_mut().zip(&dst[out.clone()]) {
            *o = to_bits(v, kind);
        }
        chan.exchange_u16(&s.send[..out.len()], next, &mut s.recv[..inp.len()], prev);
        for (d, &b) in dst[inp.clone()].iter_mut().zip(&s.recv) {
            *d = from_bits(b, kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_are_close() {
        for &x in &[0.0f32, 1.0, -3.25, 1e-3, 65000.0] {
            let f = from_bits(to_bits(x, Compression::Fp16), Compression::Fp16);
            let b = from_bits(to_bits(x, Compression::Bf16), Compression::Bf16);
            assert!((f - x).abs() <= x.abs() * 1e-3 + 1e-7, "fp16 {x} -> {f}");
            assert!((b - x).abs() <= x.abs() * 8e-3 + 1e-7, "bf16 {x} -> {b}");
        }
        // bf16 keeps f32's range where fp16 overflows.
        assert!(from_bits(to_bits(1e6, Compression::Bf16), Compression::Bf16).is_finite());
        assert!(from_bits(to_bits(1e6, Compression::Fp16), Compression::Fp16).is_infinite());
    }
}
