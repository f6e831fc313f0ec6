//! Gradient compression on the wire: a ring all-reduce of fp16 or bf16 values (MPI has no
//! half-precision sum, so we run the ring ourselves over point-to-point exchanges).
//!
//! Summing without overflow: each rank's gradients arrive already divided by the step's
//! global row count (the rows all ranks use in the step; see `Stepper::run`), so every
//! summand is a per-sample gradient sum over the global count, and every partial sum is
//! bounded by the largest per-sample gradient: it stays near the gradients' own magnitude,
//! and the full sum is the global mean. Partial sums travel compressed and are added in f32;
//! each chunk's final value is rounded once by the rank that owns it and then travels
//! unchanged, so every rank ends with bit-identical results.
//!
//! Must not: be used for the exact (compression = "none") path.

use super::comm::Channel;
use crate::config::Compression;

/// Reusable buffers for the ring.
#[derive(Default)]
pub struct Scratch {
    send: Vec<u16>,
    recv: Vec<u16>,
    wide: Vec<f32>,
}

/// out = compressed src (whole slices; SIMD conversions where the CPU has them).
fn compress(src: &[f32], out: &mut [u16], kind: Compression) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    match kind {
        Compression::Fp16 => out.reinterpret_cast_mut::<half::f16>().convert_from_f32_slice(src),
        Compression::Bf16 => out.reinterpret_cast_mut::<half::bf16>().convert_from_f32_slice(src),
        Compression::None => unreachable!("uncompressed buckets take MPI_Allreduce"),
    }
}

/// wide = decompressed inp.
fn decompress(inp: &[u16], wide: &mut [f32], kind: Compression) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    match kind {
        Compression::Fp16 => inp.reinterpret_cast::<half::f16>().convert_to_f32_slice(wide),
        Compression::Bf16 => inp.reinterpret_cast::<half::bf16>().convert_to_f32_slice(wide),
        Compression::None => unreachable!("uncompressed buckets take MPI_Allreduce"),
    }
}

/// out = `bits` (fp16 or bf16) widened to f32: a bucket that a GPU packed for the copy.
pub fn widen(bits: &[u16], out: &mut [f32], kind: Compression) {
    decompress(bits, out, kind)
}

/// bits = `v` narrowed to fp16 or bf16 (round to nearest even): a result going back to a GPU.
pub fn narrow(v: &[f32], bits: &mut [u16], kind: Compression) {
    compress(v, bits, kind)
}

/// Round `v` in place through fp16 or bf16 (what a value becomes on the wire); the CPU's
/// half of the backend seam's `round_half`.
pub fn round_trip(v: &mut [f32], kind: Compression) {
    let mut bits = vec![0u16; v.len()];
    compress(v, &mut bits, kind);
    decompress(&bits, v, kind);
}

/// dst = sum over ranks of src (already divided by the step's global row count), through a
/// compressed ring. `dst` doubles as the f32 accumulator.
pub fn ring_allreduce_sum(chan: &Channel, src: &[f32], dst: &mut [f32], kind: Compression, s: &mut Scratch) {
    let (n, r) = (chan.size, chan.rank);
    dst.copy_from_slice(src);
    if n == 1 {
        return;
    }
    let len = src.len();
    let chunk = |i: usize| (i % n) * len / n..((i % n) + 1) * len / n;
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let biggest = len.div_ceil(n);
    s.send.resize(biggest, 0);
    s.recv.resize(biggest, 0);
    s.wide.resize(biggest, 0.0);

    // Reduce-scatter: after n-1 steps rank r holds the full sum of chunk r+1.
    for step in 0..n - 1 {
        let (out, inp) = (chunk(r + n - step), chunk(r + 2 * n - step - 1));
        compress(&dst[out.clone()], &mut s.send[..out.len()], kind);
        chan.exchange(&s.send[..out.len()], next, &mut s.recv[..inp.len()], prev);
        decompress(&s.recv[..inp.len()], &mut s.wide[..inp.len()], kind);
        dst[inp].iter_mut().zip(&s.wide).for_each(|(d, &v)| *d += v);
    }
    // The owner rounds its finished chunk once, exactly as the others will receive it.
    let own = chunk(r + 1);
    compress(&dst[own.clone()], &mut s.send[..own.len()], kind);
    decompress(&s.send[..own.len()], &mut dst[own], kind);

    // All-gather: pass finished chunks around the ring.
    for step in 0..n - 1 {
        let (out, inp) = (chunk(r + 1 + n - step), chunk(r + n - step));
        compress(&dst[out.clone()], &mut s.send[..out.len()], kind);
        chan.exchange(&s.send[..out.len()], next, &mut s.recv[..inp.len()], prev);
        decompress(&s.recv[..inp.len()], &mut dst[inp], kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_bits(x: f32, kind: Compression) -> u16 {
        let mut o = [0u16];
        compress(&[x], &mut o, kind);
        o[0]
    }

    fn from_bits(b: u16, kind: Compression) -> f32 {
        let mut w = [0f32];
        decompress(&[b], &mut w, kind);
        w[0]
    }

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
