//! The float32 matrix product on CPUs with AVX-512: an 8 × 32 register tile of 16 zmm
//! accumulators, one k per step (2 loads of B, 8 broadcasts of A, 16 FMAs). The broadcast
//! operand (A or Aᵀ, any strides) is read where it lies; the vector operand B is copied
//! into 32-column strips block by block (rows front to back: read in place, a strip's rows n
//! floats apart thrash a few L1 sets). matrixmultiply (the crate this replaces where AVX-512
//! is there) runs a kernel as fast but packs both operands on every call: about 20 % of its
//! time on a training step's shapes.
//!
//! The one product whose B is transposed, the input gradient dX = dY · Wᵀ (W stored n × k),
//! takes the cheaper of two routes: Wᵀ's strips packed straight from W's rows (n·k floats
//! moved, transposed 16 × 16 in registers), or Cᵀ = W · dYᵀ, W then the broadcast operand
//! read in place, dY transposed into scratch and the result written back transposed (m·k +
//! m·n floats moved). The first wins at training batches (256 on both models); the second
//! where the weights outweigh a small batch's dY and dX more than eightfold.
//!
//! Blocking: k in blocks of KC (the first applies beta, the others add), rows of C in blocks
//! of MC (the broadcast operand's block, MC × KC, stays in L2 while every 32-column strip of B
//! passes it); threads take column ranges of C (whole strips), or row ranges where C has
//! fewer strips than threads (the 10 classes of a last layer), and every element is summed in
//! the same order on any thread count (the same bits). Edges: columns past n are
//! masked loads and stores, rows past m repeat the last row and are not written.
//!
//! Must not: run without `supported()` (the instructions fault on other CPUs).

use super::backend::{Gemm, Trans};
use super::tile::{write_back, CPtr, Out, Split, View, MR, NR};
use std::cell::RefCell;

/// Whether this CPU can run the kernel.
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// k per block: a 32-column strip of B (KC rows) is 32 KiB.
const KC: usize = 256;
/// Rows of C per block: the broadcast operand's block (MC × KC floats) is 256 KiB of L2.
const MC: usize = 256;
/// Columns of B per packed block (KC × NC floats = 1 MiB).
const NC: usize = 1024;

thread_local! {
    /// A packed block of B (KC × NC at most).
    static STRIP: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Scratch for the transposed product (op(A)ᵀ and the result), kept between calls.
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// C = alpha · op(A) · op(B) + beta · C in float32 (see `Gemm`). Panics unless `supported()`.
pub fn gemm(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    g.check(a.len(), b.len(), c.len());
    assert!(supported(), "AVX-512 sgemm on a CPU without AVX-512");
    if super::tile::trivial(g, c) {
        return;
    }
    let Gemm { m, k, n, ta, tb, alpha, beta } = g;
    let av = View::op(a, m, k, ta);
    // B transposed (the input gradient dX = dY · Wᵀ): packing Wᵀ's strips moves n·k floats
    // (16 × 16 blocks transposed in registers); the route below moves m·k + m·n one float at a
    // time (dY and the result transposed) but reads W in place. Packing wins unless the
    // weights outweigh dY and dX eightfold: on 2 threads, 2048 × 2048 at batch 128 and 256
    // packed 148-175 GFLOP/s against 126-164 for the route below; at batch 64 (16-fold)
    // 123-124 against 139-147; 512 × 512 at batch 32 (8-fold) about even.
    if tb == Trans::N || n * k <= 8 * (m * k + m * n) {
        return direct(av, View::op(b, k, n, tb), m, k, n, c, alpha, beta, &|_, _| ());
    }
    // Cᵀ (n × m) = B (n × k, row-major: broadcast) · op(A)ᵀ (k × m: vector, unit stride in m).
    SCRATCH.with(|s| {
        let (at, t) = &mut *s.borrow_mut();
        let vec_op: &[f32] = match ta {
            Trans::T => a, // A is stored k × m already
            Trans::N => {
                at.resize(k * m, 0.0);
                transpose(a, m, k, at);
                at
            }
        };
        t.resize(n * m, 0.0);
        // Each thread, once its block of t (rows `tr`, columns `tc`) is done, writes C's rows
        // `tc`, columns `tr`: C = alpha · tᵀ + beta · C, in 32 × 32 blocks (both sides in cache).
        let cp = CPtr(c.as_mut_ptr());
        let tp = CPtr(t.as_mut_ptr());
        let (cp, tp) = (&cp, &tp); // the closure shares the wrappers (Sync), not raw pointers
        let write = |tr: std::ops::Range<usize>, tc: std::ops::Range<usize>| {
            for i0 in tc.clone().step_by(32) {
                for j0 in tr.clone().step_by(32) {
                    for i in i0..(i0 + 32).min(tc.end) {
                        // SAFETY: row i of C (this part's rows only) and t, both sized above.
                        let row = unsafe { std::slice::from_raw_parts_mut(cp.0.add(i * n), n) };
                        let cols = j0..(j0 + 32).min(tr.end);
                        for (j, x) in cols.clone().zip(&mut row[cols]) {
                            let v = alpha * unsafe { *tp.0.add(j * m + i) };
                            *x = if beta == 0.0 { v } else { v + beta * *x };
                        }
                    }
                }
            }
        };
        // SAFETY: `t` is only read through `tp` by `write`, after `direct` wrote this part.
        let t = unsafe { std::slice::from_raw_parts_mut(tp.0, n * m) };
        direct(View { d: b, rs: k, cs: 1 }, View::op(vec_op, k, m, Trans::N), n, k, m, t, 1.0, 0.0, &write);
    });
}

/// out (cols × rows) = x (rows × cols)ᵀ, in 32 × 32 blocks.
fn transpose(x: &[f32], rows: usize, cols: usize, out: &mut [f32]) {
    for i0 in (0..rows).step_by(32) {
        for j0 in (0..cols).step_by(32) {
            for i in i0..(i0 + 32).min(rows) {
                for j in j0..(j0 + 32).min(cols) {
                    out[j * rows + i] = x[i * cols + j];
                }
            }
        }
    }
}

/// C (m × n, row-major) = alpha · A · B + beta · C with A read through `av` and B through
/// `b`: B row-major (`cs` 1) or stored transposed (n × k, `rs` 1), transposed while packed;
/// on the pool's threads: by column ranges (whole strips), or by row ranges where C has fewer
/// strips than threads (a narrow last layer). `after(rows, cols)` runs on the same thread once
/// that block of C is complete.
#[allow(clippy::too_many_arguments)]
fn direct(
    av: View,
    b: View,
    m: usize,
    k: usize,
    n: usize,
    c: &mut [f32],
    alpha: f32,
    beta: f32,
    after: &(dyn Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Sync),
) {
    assert!(b.d.len() >= k * n && c.len() >= m * n);
    assert!(av.d.len() > (m - 1) * av.rs + (k - 1) * av.cs);
    let split = Split::of(m, k, n);
    let cp = CPtr(c.as_mut_ptr());
    super::pool::run(split.parts, &|part| {
        let (rows, cols) = split.block(part, m, n);
        // SAFETY: supported() (checked by `gemm`); the asserts above bound every read; the
        // parts write disjoint blocks of C.
        unsafe { block(av, b, k, n, rows.clone(), cols.clone(), &cp, alpha, beta) };
        after(rows, cols);
    });
}

/// C's block rows × cols (C row-major, rows `n` apart).
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    av: View,
    b: View,
    k: usize,
    n: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    c: &CPtr,
    alpha: f32,
    beta: f32,
) {
    let mut tile = [0f32; MR * NR];
    STRIP.with(|packed| {
        let packed = &mut *packed.borrow_mut();
        for jc in cols.clone().step_by(NC) {
            let nc = NC.min(cols.end - jc);
            let strips = nc.div_ceil(NR);
            packed.resize(strips * KC * NR, 0.0);
            // k in equal blocks of at most KC (784 = 4 × 196, not 3 × 256 + 16: a short last
            // block pays a whole pass over C for little work).
            let kb = k.div_ceil(KC).max(1);
            let step = k.div_ceil(kb);
            for pc in (0..k).step_by(step) {
                let kc = step.min(k - pc);
                let beta = if pc == 0 { beta } else { 1.0 };
                if b.cs == 1 {
                    pack_b(b.d, n, pc, kc, jc, nc, packed)
                } else {
                    pack_bt(b.d, k, pc, kc, jc, nc, packed)
                }
                for ic in (rows.start..rows.end).step_by(MC) {
                    let mc = MC.min(rows.end - ic);
                    for s in 0..strips {
                        let (j0, w) = (jc + s * NR, NR.min(nc - s * NR));
                        let bp = packed.as_ptr().add(s * kc * NR);
                        for i0 in (ic..ic + mc).step_by(MR) {
                            let rows = MR.min(ic + mc - i0);
                            let ap = av.d.as_ptr().add(i0 * av.rs + pc * av.cs);
                            let at = c.0.add(i0 * n + j0);
                            if rows == MR && w == NR {
                                kernel(kc, ap, av.rs, av.cs, MR, bp, NR, NR, Out::C { c: at, ldc: n, alpha, beta });
                            } else {
                                kernel(kc, ap, av.rs, av.cs, rows, bp, NR, w, Out::Tile(&mut tile));
                                write_back(&tile, at, n, rows, w, alpha, beta);
                            }
                        }
                    }
                }
            }
        }
    });
}

/// B's rows pc..pc+kc, columns jc..jc+nc (B row-major, rows `n` apart) into NR-column strips
/// of kc rows each (a strip's row is 2 zmm, contiguous). B's rows are read front to back, one
/// stream the prefetcher follows; read in place instead, a strip's rows (n floats apart) fall
/// on a few L1 sets and evict each other. PB rows at a time, so that each strip is written
/// PB rows (PB·128 bytes) in a run: one row over every strip wrote to strips kc·NR·4 bytes
/// (32 KiB) apart, the same L1 set each time (pack_b was 12 % of a 256×2048×2048 product
/// on a Zen 5 core).
fn pack_b(b: &[f32], n: usize, pc: usize, kc: usize, jc: usize, nc: usize, out: &mut [f32]) {
    const PB: usize = 8;
    for p0 in (0..kc).step_by(PB) {
        for (s, j) in (0..nc).step_by(NR).enumerate() {
            let cols = NR.min(nc - j);
            for p in p0..(p0 + PB).min(kc) {
                let chunk = &b[(pc + p) * n + jc + j..][..cols];
                let at = s * kc * NR + p * NR;
                if let Ok(whole) = <&[f32; NR]>::try_from(chunk) {
                    let dst: &mut [f32; NR] = (&mut out[at..at + NR]).try_into().expect("NR");
                    *dst = *whole;
                } else {
                    out[at..at + cols].copy_from_slice(chunk);
                }
            }
        }
    }
}

/// As `pack_b`, from B stored transposed (row-major n × k, rows `k` apart): a strip's 32
/// columns are 32 rows of the stored matrix, each read front to back; whole 16 × 16 blocks
/// are dealt through registers (`tile::deal16`), the edges one float at a time.
fn pack_bt(bt: &[f32], k: usize, pc: usize, kc: usize, jc: usize, nc: usize, out: &mut [f32]) {
    for s in 0..nc.div_ceil(NR) {
        let strip = &mut out[s * kc * NR..(s + 1) * kc * NR];
        let cols = NR.min(nc - s * NR);
        let row = |j: usize| &bt[(jc + s * NR + j) * k + pc..][..kc];
        let mut j = 0;
        #[cfg(target_arch = "x86_64")]
        if supported() {
            while j + 16 <= cols {
                let runs: [&[f32]; 16] = std::array::from_fn(|q| row(j + q));
                // SAFETY: supported(); `deal16` checks the bounds.
                unsafe { super::tile::deal16(&runs, kc, strip, NR, j) };
                j += 16;
            }
        }
        for j in j..cols {
            for (p, &v) in row(j).iter().enumerate() {
                strip[p * NR + j] = v;
            }
        }
    }
}

/// Σ_p A(r, p) (broadcast; element (r, p) at a + r·a_rs + p·a_ps, rows past `rows` repeat
/// the last) · B(p, 0..cols) (b + p·ldb, columns past `cols` masked to 0), kc steps: MR × 2
/// zmm accumulators; then into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    kc: usize,
    a: *const f32,
    a_rs: usize,
    a_ps: usize,
    rows: usize,
    b: *const f32,
    ldb: usize,
    cols: usize,
    out: Out,
) {
    use std::arch::x86_64::*;
    let m0: __mmask16 = if cols >= 16 { 0xffff } else { (1u16 << cols) - 1 };
    let m1: __mmask16 = if cols >= 32 {
        0xffff
    } else if cols > 16 {
        (1u16 << (cols - 16)) - 1
    } else {
        0
    };
    let mut ar = [a; MR];
    for (r, p) in ar.iter_mut().enumerate() {
        *p = a.add(r.min(rows - 1) * a_rs);
    }
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let mut bp = b;
    if a_ps == 1 {
        for p in 0..kc {
            let b0 = _mm512_maskz_loadu_ps(m0, bp);
            let b1 = _mm512_maskz_loadu_ps(m1, bp.add(16));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ar[r].add(p));
                acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
            }
            bp = bp.add(ldb);
        }
    } else {
        let mut ap = ar;
        for _ in 0..kc {
            let b0 = _mm512_maskz_loadu_ps(m0, bp);
            let b1 = _mm512_maskz_loadu_ps(m1, bp.add(16));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap[r]);
                acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
                ap[r] = ap[r].add(a_ps);
            }
            bp = bp.add(ldb);
        }
    }
    super::tile::epilogue!(acc, out);
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    _kc: usize,
    _a: *const f32,
    _a_rs: usize,
    _a_ps: usize,
    _rows: usize,
    _b: *const f32,
    _ldb: usize,
    _cols: usize,
    _out: Out,
) {
    unreachable!("supported() is false off x86_64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::tile::check;

    /// Every transpose, edge, alpha and beta (beta 0 never reads C): within float32 summation
    /// error of the exact product. A kernel that drops a k, misplaces a lane, misses an edge
    /// or mis-applies beta on the second k-block is off by far more.
    #[test]
    fn sgemm_equals_the_exact_product() {
        if !supported() {
            eprintln!("skipped: this CPU has no AVX-512");
            return;
        }
        check::exact_over_shapes(gemm, |x| x);
    }

    #[test]
    fn threads_give_the_same_bits() {
        if !supported() {
            return;
        }
        check::same_bits_on_threads(gemm, |x| x);
    }
}
