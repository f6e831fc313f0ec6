//! Packing operands into AMX tiles: 16 rows of 64 bytes (16 u32 "pairs" of bf16), each tile
//! 1 KiB and contiguous (loaded with a 64-byte stride, so its rows fall in different cache
//! sets), the tiles of one 16-row strip (A) or 16-column strip (B) stored one after another
//! along k.
//!
//! - A's tile (rows i0..i0+16, k0..k0+32): row r, pair p = (A[i0+r, k0+2p], A[i0+r, k0+2p+1]),
//!   the low half the even k (what `TDPBF16PS`'s first operand reads: a row's bf16 elements in
//!   k order).
//! - B's tile (k0..k0+32, columns j0..j0+16), the "VNNI" layout: row p, column j =
//!   (B[k0+2p, j0+j], B[k0+2p+1, j0+j]): k interleaved in pairs.
//!
//! Both are the same 16 × 16 matrix of pairs T[r][p] = pair(X[r, 2p], X[r, 2p+1]) of a matrix
//! X whose rows are A's rows or B's columns (`View` of op(B)ᵀ), stored as it is (A) or
//! transposed (B). Rows past the matrix and k past its end are zeros, so the tile unit never
//! sees an edge. Rounding is `bf16::to_bf16` (to nearest even); on a CPU with AVX512-BF16
//! whole rows go through `vcvtne2ps2bf16` / `vcvtneps2bf16`, the same bits but for denormal
//! inputs, which those take as zero.
//!
//! Must not: know which tile unit runs the tiles.

use super::super::bf16;
#[cfg(target_arch = "x86_64")]
use super::super::bf16::{pairs_across, pairs_within};
use super::super::tile::View;

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pairs_within(_: &[f32], _: &mut [u32]) {
    unreachable!("vector() is false off x86_64")
}
#[cfg(not(target_arch = "x86_64"))]
unsafe fn pairs_across(_: &[f32], _: Option<&[f32]>, _: &mut [u32]) {
    unreachable!("vector() is false off x86_64")
}

/// u32 pairs in one tile (16 rows × 16 pairs).
pub const TILE: usize = 256;

/// Whether the vector conversions may be used (AVX512-BF16; every CPU with AMX-BF16 has it).
fn vector() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| bf16::supported() && std::env::var("HVTRAIN_AMX_SCALAR_PACK").is_err())
}

/// The pairs T[r][p] of X (`x`: element (i, kk) at d[i·rs + kk·cs], `rows` × `k` in all) for
/// rows r0..r0+16 and k in k0..k0+32, into `out` (one tile): T as it is when `!transposed`
/// (A's tile), Tᵀ when `transposed` (B's tile, X = op(B)ᵀ).
pub fn tile(x: View, rows: usize, k: usize, r0: usize, k0: usize, transposed: bool, out: &mut [u32]) {
    let out = &mut out[..TILE];
    let mut t = [0u32; TILE];
    let (nr, nk) = (rows.saturating_sub(r0).min(16), k.saturating_sub(k0).min(32));
    if nr > 0 && nk > 0 {
        if vector() && x.cs == 1 && nk == 32 {
            // Each row's 32 k's are adjacent floats: one conversion gives the row's 16 pairs.
            for r in 0..nr {
                let at = (r0 + r) * x.rs + k0;
                // SAFETY: vector() checked AVX512-BF16; the row's 32 floats are inside d.
                unsafe { pairs_within(&x.d[at..at + 32], &mut t[r * 16..r * 16 + 16]) };
            }
        } else if vector() && x.rs == 1 && nr == 16 {
            // Rows are adjacent floats (X stored transposed): pair p of all 16 rows at once,
            // written to a column of T.
            let mut col = [0u32; 16];
            for p in 0..nk.div_ceil(2) {
                let lo = &x.d[(k0 + 2 * p) * x.cs + r0..][..16];
                let hi = (2 * p + 1 < nk).then(|| &x.d[(k0 + 2 * p + 1) * x.cs + r0..][..16]);
                // SAFETY: as above; each run is 16 floats.
                unsafe { pairs_across(lo, hi, &mut col) };
                for (r, &v) in col.iter().enumerate() {
                    t[r * 16 + p] = v;
                }
            }
        } else {
            let at = |r: usize, kk: usize| if kk < nk { x.d[(r0 + r) * x.rs + (k0 + kk) * x.cs] } else { 0.0 };
            for r in 0..nr {
                for p in 0..nk.div_ceil(2) {
                    t[r * 16 + p] = bf16::to_bf16(at(r, 2 * p)) as u32 | (bf16::to_bf16(at(r, 2 * p + 1)) as u32) << 16;
                }
            }
        }
    }
    if transposed {
        for r in 0..16 {
            for p in 0..16 {
                out[p * 16 + r] = t[r * 16 + p];
            }
        }
    } else {
        out.copy_from_slice(&t);
    }
}

/// The tiles of X's 16-row strips s0..s0 + strips (X `rows` × `k`), strip s's kt = ⌈k/32⌉
/// tiles in k order at ((s − s0)·kt + t)·TILE of `out`.
pub fn strips(x: View, rows: usize, k: usize, s0: usize, strips: usize, transposed: bool, out: &mut [u32]) {
    let kt = k.div_ceil(32);
    for s in 0..strips {
        for t in 0..kt {
            let at = (s * kt + t) * TILE;
            tile(x, rows, k, (s0 + s) * 16, t * 32, transposed, &mut out[at..at + TILE]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::backend::Trans;

    fn un(p: u32) -> (f32, f32) {
        (f32::from_bits((p & 0xffff) << 16), f32::from_bits(p & 0xffff_0000))
    }

    /// Both layouts, both storage orders of X, edges (rows and k past the end are zeros):
    /// every pair holds the two rounded elements the definition names, low half the even k.
    #[test]
    fn tiles_hold_the_defined_pairs() {
        let (rows, k) = (21, 45);
        let d: Vec<f32> = (0..rows * k).map(|i| (i as f32 * 0.37).sin() * 5.0).collect();
        for t in [Trans::N, Trans::T] {
            // X stored row-major (N) or as Xᵀ (T); the element (i, kk) is the same number.
            let store: Vec<f32> = match t {
                Trans::N => d.clone(),
                Trans::T => {
                    (0..k).flat_map(|kk| (0..rows).map(move |i| (i, kk))).map(|(i, kk)| d[i * k + kk]).collect()
                }
            };
            let x = View::op(&store, rows, k, t);
            for transposed in [false, true] {
                for (r0, k0) in [(0, 0), (16, 32), (0, 32), (16, 0)] {
                    let mut out = vec![7u32; TILE];
                    tile(x, rows, k, r0, k0, transposed, &mut out);
                    for r in 0..16 {
                        for p in 0..16 {
                            let v = if transposed { out[p * 16 + r] } else { out[r * 16 + p] };
                            let want = |kk: usize| {
                                if r0 + r < rows && k0 + kk < k {
                                    bf16::round(d[(r0 + r) * k + k0 + kk])
                                } else {
                                    0.0
                                }
                            };
                            assert_eq!(
                                un(v),
                                (want(2 * p), want(2 * p + 1)),
                                "{t:?} {transposed} r0 {r0} k0 {k0} r {r} p {p}"
                            );
                        }
                    }
                }
            }
        }
    }
}
