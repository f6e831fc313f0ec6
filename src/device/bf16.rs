//! bf16 mixed-precision matrix products on the CPU (`training.precision = "bf16"`): the
//! operands are rounded to bfloat16 (round to nearest even, as `torch.autocast` and
//! `half::bf16::from_f32` do) while they are packed, multiplied with AVX512-BF16's
//! `vdpbf16ps` (two bf16 products summed into each float32 lane) and accumulated in float32.
//! Master weights, gradients and the optimizer stay float32: only the products see bf16.
//!
//! The layout is GotoBLAS': C is computed in MR × NR tiles; B is packed per (KC × NC) block
//! into NR-column strips of k-pairs (one u32 = two bf16 of rows k and k+1, what one lane of
//! `vdpbf16ps` takes), A per (MC × KC) block into MR-row strips of the same pairs, broadcast
//! one row at a time. Edges (m, n not multiples of the tile, k odd) are packed with zeros, so
//! the kernel has no edge cases; the write-back clips the tile. Transposed operands are read
//! through strides while packing, nothing else is copied.
//!
//! Must not: run without `supported()` (the kernel's instructions fault on other CPUs), or
//! change what `cpu::gemm` computes (fp32 stays the reference).

use super::backend::Gemm;
use super::tile::{write_back, CPtr, Out, Split, View, MR, NR};
use std::cell::RefCell;
/// Block sizes: a packed B block (KC × NC bf16 = 1 MiB) is what L2 holds on Zen 4, one B
/// strip (KC × NR = 32 KiB) what L1 holds while the A strips of the block pass it. Measured
/// on the step's shapes (batch 128, 2-vCPU EPYC): KC 512 / NC 1024 125-130 GFLOP/s against
/// 120-125 for 256 / 1024, 512 / 512 and 1024 / 256 (±10 % run to run).
const KC: usize = 512;
const MC: usize = 128;
const NC: usize = 1024;

/// Whether this CPU has the instructions the kernel needs.
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The bits of `x` rounded to bfloat16, to nearest even; a NaN stays a (quiet) NaN.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b + 0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
    (if nan { (b >> 16) | 0x40 } else { rounded }) as u16
}

/// `x` rounded to bfloat16 and back: what the kernel multiplies.
pub fn round(x: f32) -> f32 {
    f32::from_bits((to_bf16(x) as u32) << 16)
}

/// One lane of `vdpbf16ps`: `lo` (row k) in the low half, `hi` (row k + 1) in the high half.
#[inline(always)]
fn pair(lo: f32, hi: f32) -> u32 {
    to_bf16(lo) as u32 | (to_bf16(hi) as u32) << 16
}

/// Packed A and B blocks, and scratch for 16 rows' (or columns') pairs and their transpose.
type Packed = (Vec<u32>, Vec<u32>, Vec<u32>);

thread_local! {
    /// Each thread's `Packed`, kept between calls (no allocation per product).
    static PACKED: RefCell<Packed> = const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// C = alpha · op(A) · op(B) + beta · C with bf16 operands and float32 sums (see `Gemm`).
/// Panics unless `supported()`.
pub fn gemm(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    g.check(a.len(), b.len(), c.len());
    assert!(supported(), "bf16 gemm on a CPU without AVX512-BF16");
    if super::tile::trivial(g, c) {
        return;
    }
    let Gemm { m, k, n, ta, tb, alpha, beta } = g;
    let (av, bv) = (View::op(a, m, k, ta), View::op(b, k, n, tb));
    // Threads take column ranges of C (whole NR strips: each packs its own B columns), or row
    // ranges where C is narrower than a strip per thread (`Split`).
    let split = Split::of(m, k, n);
    let c = CPtr(c.as_mut_ptr());
    let product = |shared: Option<&SharedA>| {
        super::pool::run(split.parts, &|i| {
            let (rows, cols) = split.block(i, m, n);
            // SAFETY: supported(); the parts write disjoint blocks of C, which `check` sized.
            unsafe { block(av, bv, k, n, rows, cols, &c, alpha, beta, shared) }
        })
    };
    // One thread on a layer wider than NC would pack A once for each NC-column block: packed
    // once instead (`SharedA`). Not between threads: packed once by all of them, each part
    // then reading the others' blocks, it lost on a Zen 4 in some periods of a run and was
    // even in others (the VM's two vCPUs placed near or apart, presumably), where packing per
    // part never lost: 2 threads, batch 256, GFLOP/s per product, per part → shared, in a bad
    // period: the small model's forward 359-389 → 275-307, its dW 334-373 → 205-225, dX
    // 383-396 → 297-313; the wide model's dW1 364-383 → 290-327. A Zen 5 had put sharing at
    // +2-3 % on the step.
    let share = split.parts == 1 && n > NC && m * k <= SHARE_A_MAX;
    if !share {
        return product(None);
    }
    SHARED_A.with(|s| {
        let buf = &mut *s.borrow_mut();
        let blocks = SharedA::blocks(m, k);
        buf.resize(blocks.last().map_or(0, |b| b.at + b.len), 0);
        PACKED.with(|p| {
            let row = &mut p.borrow_mut().2;
            row.resize(32 * KC.div_ceil(2), 0);
            for b in &blocks {
                // SAFETY: supported().
                unsafe { pack_a(av, b.ic, b.mc, b.pc, b.kc, &mut buf[b.at..b.at + b.len], row) };
            }
        });
        product(Some(&SharedA { buf, blocks, per_k: m.div_ceil(MC) }))
    })
}

/// The most elements of A packed once (`SharedA`): 8 Mi floats, 16 MiB packed, a batch of
/// 8192 rows of 1024 features; a larger A is packed block by block as it is used.
const SHARE_A_MAX: usize = 8 << 20;

thread_local! {
    /// The calling thread's packed A (`SharedA`), kept between calls.
    static SHARED_A: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// A packed once for every NC-column block of one thread's product, every (KC × MC) block
/// as `pack_a` lays it out, k-block by k-block.
struct SharedA<'a> {
    buf: &'a [u32],
    blocks: Vec<ABlock>,
    /// Row blocks per k-block.
    per_k: usize,
}

/// One block of A: rows ic..ic+mc, columns pc..pc+kc, packed at buf[at..at + len].
struct ABlock {
    ic: usize,
    mc: usize,
    pc: usize,
    kc: usize,
    at: usize,
    len: usize,
}

impl SharedA<'_> {
    /// A's blocks for an m × k A, in the order `block` reads them.
    fn blocks(m: usize, k: usize) -> Vec<ABlock> {
        let mut at = 0;
        let mut v = Vec::new();
        for pc in (0..k).step_by(KC) {
            for ic in (0..m).step_by(MC) {
                let (mc, kc) = (MC.min(m - ic), KC.min(k - pc));
                let len = mc.div_ceil(MR) * MR * kc.div_ceil(2);
                v.push(ABlock { ic, mc, pc, kc, at, len });
                at += len;
            }
        }
        v
    }

    /// The packed block of rows from `ic`, columns from `pc`.
    fn at(&self, ic: usize, pc: usize) -> &[u32] {
        let b = &self.blocks[pc / KC * self.per_k + ic / MC];
        debug_assert_eq!((b.ic, b.pc), (ic, pc));
        &self.buf[b.at..b.at + b.len]
    }
}

/// C[rows, cols] of the product (C's rows `n` apart), on this thread; A's blocks from
/// `shared` where it was packed once for the whole product, else packed here.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    av: View,
    bv: View,
    k: usize,
    n: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    c: &CPtr,
    alpha: f32,
    beta: f32,
    shared: Option<&SharedA>,
) {
    PACKED.with(|p| {
        let (pa, pb, row) = &mut *p.borrow_mut();
        pa.resize(MC.div_ceil(MR) * MR * KC.div_ceil(2), 0);
        pb.resize(NC.div_ceil(NR) * NR * KC.div_ceil(2), 0);
        row.resize(32 * KC.div_ceil(2), 0);
        let mut tile = [0f32; MR * NR];
        for jc in cols.clone().step_by(NC) {
            let nc = NC.min(cols.end - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                let kp = kc.div_ceil(2);
                // The first k-block applies beta; the others add to what it wrote.
                let beta = if pc == 0 { beta } else { 1.0 };
                pack_b(bv, pc, kc, jc, nc, pb, row);
                for ic in rows.clone().step_by(MC) {
                    let mc = MC.min(rows.end - ic);
                    let pa: &[u32] = match shared {
                        Some(s) => s.at(ic, pc),
                        None => {
                            pack_a(av, ic, mc, pc, kc, pa, row);
                            pa
                        }
                    };
                    for js in 0..nc.div_ceil(NR) {
                        let bs = &pb[js * NR * kp..(js + 1) * NR * kp];
                        let (j0, w) = (jc + js * NR, NR.min(nc - js * NR));
                        for is in 0..mc.div_ceil(MR) {
                            let as_ = &pa[is * MR * kp..(is + 1) * MR * kp];
                            let (i0, rows) = (ic + is * MR, MR.min(mc - is * MR));
                            let at = c.0.add(i0 * n + j0);
                            if rows == MR && w == NR {
                                kernel(kp, as_, bs, Out::C { c: at, ldc: n, alpha, beta });
                            } else {
                                kernel(kp, as_, bs, Out::Tile(&mut tile));
                                write_back(&tile, at, n, rows, w, alpha, beta);
                            }
                        }
                    }
                }
            }
        }
    });
}

/// A's rows ic..ic+mc, columns pc..pc+kc into MR-row strips: strip s, pair p, lane r holds
/// (A[ic + s·MR + r, pc + 2p], A[.., pc + 2p + 1]); rows past m and the odd k's partner are 0.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16"))]
unsafe fn pack_a(a: View, ic: usize, mc: usize, pc: usize, kc: usize, out: &mut [u32], row: &mut [u32]) {
    let kp = kc.div_ceil(2);
    for s in 0..mc.div_ceil(MR) {
        let strip = &mut out[s * MR * kp..(s + 1) * MR * kp];
        let rows = MR.min(mc - s * MR);
        if rows < MR {
            strip.fill(0);
        }
        if a.cs == 1 && rows == MR && s % 2 == 0 && mc >= (s + 2) * MR {
            // Row-major A, this strip and the next whole: 16 rows' pairs, dealt 16 × 16 in
            // registers to a scratch strip of 16 lanes, then halved.
            for r in 0..2 * MR {
                let i = ic + s * MR + r;
                pairs_within(&a.d[i * a.rs + pc..i * a.rs + pc + kc], &mut row[r * kp..(r + 1) * kp]);
            }
            let (rows16, wide) = row.split_at_mut(16 * kp);
            deal16(rows16, kp, &mut wide[..16 * kp], 16, 0);
            let (lo, hi) = out[s * MR * kp..(s + 2) * MR * kp].split_at_mut(MR * kp);
            for p in 0..kp {
                lo[p * MR..(p + 1) * MR].copy_from_slice(&wide[p * 16..p * 16 + MR]);
                hi[p * MR..(p + 1) * MR].copy_from_slice(&wide[p * 16 + MR..(p + 1) * 16]);
            }
        } else if a.cs == 1 && rows == MR && s % 2 == 1 && mc >= (s + 1) * MR {
            // Packed with the strip before.
        } else if a.cs == 1 {
            // Row-major A: a row's k-pairs are adjacent floats; convert, then spread over the strip.
            for r in 0..rows {
                let i = ic + s * MR + r;
                pairs_within(&a.d[i * a.rs + pc..i * a.rs + pc + kc], &mut row[..kp]);
                for (p, &v) in row[..kp].iter().enumerate() {
                    strip[p * MR + r] = v;
                }
            }
        } else {
            // Aᵀ stored row-major ([k, m]): rows k and k + 1 are contiguous over i.
            for p in 0..kp {
                let k0 = pc + 2 * p;
                let i0 = ic + s * MR;
                let lo = &a.d[k0 * a.cs + i0..k0 * a.cs + i0 + rows];
                let hi = (2 * p + 1 < kc).then(|| &a.d[(k0 + 1) * a.cs + i0..(k0 + 1) * a.cs + i0 + rows]);
                pairs_across(lo, hi, &mut strip[p * MR..p * MR + rows]);
            }
        }
    }
}

/// B's rows pc..pc+kc, columns jc..jc+nc into NR-column strips: strip s, pair p, lane j holds
/// (B[pc + 2p, jc + s·NR + j], B[pc + 2p + 1, ..]); columns past n and the odd k's partner are 0.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16"))]
unsafe fn pack_b(b: View, pc: usize, kc: usize, jc: usize, nc: usize, out: &mut [u32], col: &mut [u32]) {
    let kp = kc.div_ceil(2);
    let strips = nc.div_ceil(NR);
    if !nc.is_multiple_of(NR) {
        out[(strips - 1) * NR * kp..strips * NR * kp].fill(0);
    }
    if b.cs == 1 {
        // Row-major B: rows k and k + 1 are contiguous over j. PB pairs (2·PB rows) at a
        // time, read front to back (2·PB streams, what the prefetcher follows), each strip
        // dealt its PB pairs as one contiguous run. One pair at a time over every strip
        // wrote 128 bytes to each strip in turn, strips NR·kp·4 bytes (32 KiB) apart: the
        // same L1 set every time, and pack_b took 15 % of a 256×2048×2048 product on Zen 5.
        const PB: usize = 4;
        for p0 in (0..kp).step_by(PB) {
            for s in 0..strips {
                let (j, cols) = (s * NR, NR.min(nc - s * NR));
                for p in p0..(p0 + PB).min(kp) {
                    let k0 = pc + 2 * p;
                    let lo = &b.d[k0 * b.rs + jc + j..k0 * b.rs + jc + j + cols];
                    let hi = (2 * p + 1 < kc).then(|| &b.d[(k0 + 1) * b.rs + jc + j..(k0 + 1) * b.rs + jc + j + cols]);
                    let dst = &mut out[s * NR * kp + p * NR..s * NR * kp + p * NR + cols];
                    pairs_across(lo, hi, dst);
                }
            }
        }
    } else {
        // Bᵀ stored row-major ([n, k]): a column's k-pairs are adjacent floats. 16 columns'
        // pairs at a time, dealt to the strip 16 × 16 in registers (`tile::transpose16`).
        for s in 0..strips {
            let strip = &mut out[s * NR * kp..(s + 1) * NR * kp];
            let (j0, cols) = (jc + s * NR, NR.min(nc - s * NR));
            let mut j = 0;
            while j + 16 <= cols {
                for q in 0..16 {
                    let at = (j0 + j + q) * b.cs + pc;
                    pairs_within(&b.d[at..at + kc], &mut col[q * kp..(q + 1) * kp]);
                }
                deal16(&col[..16 * kp], kp, strip, NR, j);
                j += 16;
            }
            for j in j..cols {
                pairs_within(&b.d[(j0 + j) * b.cs + pc..(j0 + j) * b.cs + pc + kc], &mut col[..kp]);
                for (p, &v) in col[..kp].iter().enumerate() {
                    strip[p * NR + j] = v;
                }
            }
        }
    }
}

/// Sixteen runs of `kp` pairs (`src`, run q at q·kp) into lanes j0..j0 + 16 of `out`'s rows
/// (`ld` apart): out[p·ld + j0 + q] = src[q·kp + p], through `tile::deal16` (the pairs' bits
/// moved as floats).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn deal16(src: &[u32], kp: usize, out: &mut [u32], ld: usize, j0: usize) {
    assert!(src.len() >= 16 * kp);
    // SAFETY: u32 and f32 have the same size and alignment; the bits are only moved.
    let srcf = std::slice::from_raw_parts(src.as_ptr() as *const f32, 16 * kp);
    let outf = std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f32, out.len());
    let runs: [&[f32]; 16] = std::array::from_fn(|q| &srcf[q * kp..(q + 1) * kp]);
    super::tile::deal16(&runs, kp, outf, ld, j0);
}

/// out[j] = pair(lo[j], hi[j]) (hi absent: 0), 16 lanes at a time: `vcvtneps2bf16` rounds
/// (to nearest even; it takes denormal inputs as zero, which `to_bf16` of the tails does not:
/// values under 1.2e-38, far below what a product of activations and weights can tell).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(super) unsafe fn pairs_across(lo: &[f32], hi: Option<&[f32]>, out: &mut [u32]) {
    use std::arch::x86_64::*;
    let n = out.len();
    assert!(lo.len() >= n && hi.is_none_or(|h| h.len() >= n));
    let mut j = 0;
    while j + 16 <= n {
        // SAFETY: j + 16 ≤ n ≤ every slice's length.
        let l: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(lo.as_ptr().add(j))));
        let mut v = _mm512_cvtepu16_epi32(l);
        if let Some(hi) = hi {
            let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(hi.as_ptr().add(j))));
            v = _mm512_or_si512(v, _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)));
        }
        _mm512_storeu_si512(out.as_mut_ptr().add(j) as *mut _, v);
        j += 16;
    }
    if j + 8 <= n {
        // SAFETY: j + 8 ≤ n ≤ every slice's length (an MR-row strip of Aᵀ is 8 lanes).
        let l: __m128i = std::mem::transmute(_mm256_cvtneps_pbh(_mm256_loadu_ps(lo.as_ptr().add(j))));
        let mut v = _mm256_cvtepu16_epi32(l);
        if let Some(hi) = hi {
            let h: __m128i = std::mem::transmute(_mm256_cvtneps_pbh(_mm256_loadu_ps(hi.as_ptr().add(j))));
            v = _mm256_or_si256(v, _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)));
        }
        _mm256_storeu_si256(out.as_mut_ptr().add(j) as *mut _, v);
        j += 8;
    }
    for j in j..n {
        out[j] = pair(lo[j], hi.map_or(0.0, |h| h[j]));
    }
}

/// out[p] = pair(x[2p], x[2p + 1]) (an odd last one's partner 0), 16 pairs at a time: one
/// `vcvtne2ps2bf16` of 32 floats is the 16 pairs in order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(super) unsafe fn pairs_within(x: &[f32], out: &mut [u32]) {
    use std::arch::x86_64::*;
    let n = out.len();
    assert!(x.len() <= 2 * n && x.len() + 1 >= 2 * n);
    let mut p = 0;
    while 2 * p + 32 <= x.len() {
        // SAFETY: 2p + 32 ≤ x.len() and p + 16 ≤ n.
        let v =
            _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x.as_ptr().add(2 * p + 16)), _mm512_loadu_ps(x.as_ptr().add(2 * p)));
        _mm512_storeu_si512(out.as_mut_ptr().add(p) as *mut _, std::mem::transmute::<__m512bh, __m512i>(v));
        p += 16;
    }
    for p in p..n {
        out[p] = pair(x[2 * p], *x.get(2 * p + 1).unwrap_or(&0.0));
    }
}

/// Σ_p A strip's pair p (one per row, broadcast) · B strip's pair p (NR lanes), in float32:
/// MR × 2 zmm accumulators, `kp` steps of 2 loads, MR broadcasts and 2·MR `vdpbf16ps`; then
/// into `out` (a whole tile of C with alpha and beta, or the edge tile).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn kernel(kp: usize, a: &[u32], b: &[u32], out: Out) {
    use std::arch::x86_64::*;
    assert!(a.len() >= kp * MR && b.len() >= kp * NR);
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    for p in 0..kp {
        // SAFETY: p < kp and the asserts above keep every read inside the strips.
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(pb.add(p * NR) as *const _));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(pb.add(p * NR + 16) as *const _));
        for (r, acc) in acc.iter_mut().enumerate() {
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*pa.add(p * MR + r) as i32));
            acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
            acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
        }
    }
    super::tile::epilogue!(acc, out);
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn kernel(_kp: usize, _a: &[u32], _b: &[u32], _out: Out) {
    unreachable!("supported() is false off x86_64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::backend::Trans;

    use crate::device::tile::check::{self, data, reference_of};

    #[test]
    fn rounding_is_to_nearest_even_and_keeps_nan_and_infinities() {
        assert_eq!(round(1.0), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even (1.0).
        assert_eq!(round(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round(-1.0 - 1.5 / 256.0), -1.0 - 2.0 / 256.0);
        assert!(round(f32::NAN).is_nan());
        assert_eq!(round(f32::INFINITY), f32::INFINITY);
        assert_eq!(round(f32::MAX), f32::INFINITY); // rounds up past the largest bf16
        for x in data(1000, 7) {
            assert_eq!(round(x), half::bf16::from_f32(x).to_f32(), "{x}");
        }
    }

    /// Every transpose, edges on every side (m, n past a tile, k odd, several k- and
    /// n-blocks), alpha and beta: within float32 summation error of the bf16 operands' exact
    /// product. A kernel that drops a pair, swaps a pair's halves, misses an edge or
    /// mis-applies beta on the second k-block is off by far more.
    #[test]
    fn bf16_gemm_equals_the_exact_product_of_the_rounded_operands() {
        if !supported() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return;
        }
        check::exact_over_shapes(gemm, round);
    }

    /// Threads split C's columns; each element is summed by the same code in the same order,
    /// so any thread count gives the same bits.
    #[test]
    fn threads_give_the_same_bits() {
        if !supported() {
            return;
        }
        check::same_bits_on_threads(gemm, round);
    }

    /// One thread on a product wider than NC packs A once for its column blocks
    /// (`SharedA`): two row blocks, two k-blocks, two column blocks with edges, each operand
    /// layout, within summation error of the rounded operands' exact product.
    #[test]
    fn one_thread_reads_a_packed_once_over_column_blocks() {
        if !supported() {
            return;
        }
        let (m, k, n) = (140, 530, 1060);
        assert!(m > MC && k > KC && n > NC);
        for (ta, tb) in [(Trans::N, Trans::N), (Trans::T, Trans::N), (Trans::N, Trans::T)] {
            check::exact(gemm, Gemm { m, k, n, ta, tb, alpha: 1.0, beta: 0.5 }, round);
        }
    }

    /// bf16 differs from the exact float32 product by the operands' rounding, no more:
    /// relative to Σ|a||b|, under 2^-7 (each operand is off by at most 2^-9 relative) and
    /// over 1e-5 (it did round).
    #[test]
    fn bf16_gemm_is_near_the_fp32_product() {
        if !supported() {
            return;
        }
        let (m, k, n) = (64, 256, 96);
        let g = Gemm::new(m, k, n, Trans::N, Trans::N);
        let (a, b) = (data(m * k, 4), data(k * n, 5));
        let mut c16 = vec![0.0; m * n];
        gemm(g, &a, &b, &mut c16);
        let (c32, scale) = reference_of(g, &a, &b, &c16, |x| x);
        let num: f64 = c16.iter().zip(&c32).map(|(x, y)| (*x as f64 - y).abs()).sum();
        let den: f64 = scale.iter().sum();
        assert!(num / den > 1e-5, "bf16 gave the float32 product: the operands were not rounded");
        assert!(num / den < 2.0f64.powi(-7), "relative difference {}", num / den);
    }
}
