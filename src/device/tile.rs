//! The register tile shared by hvtrain's own CPU matrix kernels (`sgemm`: float32 on AVX-512;
//! `bf16`: bf16 operands on AVX512-BF16): its size, where a kernel puts its sums (`Out`), the
//! write-back of an edge tile, and the epilogue of a whole one (`epilogue!`, a macro so that
//! the 16 accumulators stay in registers: as a function call they went through memory, 6 % of
//! the kernel's time).
//!
//! Must not: know how the operands are packed (each kernel does).

use super::backend::{Gemm, Trans};

/// Rows and columns of the register tile: 8 × 2 zmm accumulators.
pub const MR: usize = 8;
pub const NR: usize = 32;

/// A row-major matrix read through strides: element (i, j) is `d[i·rs + j·cs]`.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub d: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl<'a> View<'a> {
    /// op(X), `rows` × `cols`, of `d` stored row-major as X (`Trans::N`) or Xᵀ (`Trans::T`).
    pub fn op(d: &'a [f32], rows: usize, cols: usize, t: Trans) -> View<'a> {
        match t {
            Trans::N => View { d, rs: cols, cs: 1 },
            Trans::T => View { d, rs: 1, cs: rows },
        }
    }
}

/// A product with nothing to sum: m or n zero (nothing to do), or k zero (C = beta · C, C
/// unread when beta is 0). True when `g` was such a product and is done.
pub fn trivial(g: Gemm, c: &mut [f32]) -> bool {
    if g.m == 0 || g.n == 0 {
        return true;
    }
    if g.k == 0 {
        for v in &mut c[..g.m * g.n] {
            *v = if g.beta == 0.0 { 0.0 } else { g.beta * *v };
        }
        return true;
    }
    false
}

/// How a product's C is cut over the pool's threads: column ranges of whole NR strips, or,
/// where C has fewer strips than threads (a 10-class last layer), row ranges of whole MR
/// tiles. Products under 2 MFLOP stay on one thread (a hand-off to a spinning worker costs
/// about a microsecond, to a sleeping one tens).
pub struct Split {
    pub by_cols: bool,
    /// Columns (or rows) per part, and the parts.
    pub per: usize,
    pub parts: usize,
}

impl Split {
    pub fn of(m: usize, k: usize, n: usize) -> Split {
        let threads = if 2.0 * (m * n * k) as f64 >= 2e6 { super::pool::threads() } else { 1 };
        let by_cols = n.div_ceil(NR) >= threads || m <= MR;
        let (len, unit) = if by_cols { (n, NR) } else { (m, MR) };
        let per = len.div_ceil(unit).div_ceil(threads.min(len.div_ceil(unit)).max(1)) * unit;
        Split { by_cols, per, parts: len.div_ceil(per) }
    }

    /// Part `i`'s rows and columns of the m × n C.
    pub fn block(&self, i: usize, m: usize, n: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let len = if self.by_cols { n } else { m };
        let range = i * self.per..(i * self.per + self.per).min(len);
        if self.by_cols {
            (0..m, range)
        } else {
            (range, 0..n)
        }
    }
}

/// C's base pointer, shared by the threads that write its disjoint column ranges.
pub struct CPtr(pub *mut f32);
// SAFETY: the threads of one product write disjoint columns, and the product waits for all.
unsafe impl Sync for CPtr {}

/// Where a kernel puts its MR × NR sums.
pub enum Out<'a> {
    /// An edge tile, for `write_back` to clip.
    Tile(&'a mut [f32; MR * NR]),
    /// A whole MR × NR tile of C at `c` (rows `ldc` apart): alpha · sums + beta · C (C unread
    /// when beta is 0).
    C { c: *mut f32, ldc: usize, alpha: f32, beta: f32 },
}

/// The tile's first rows × cols into C at `c` (rows `ldc` apart): alpha · tile + beta · C
/// (C unread when beta is 0).
///
/// # Safety
/// C must hold rows × cols from `c`, rows `ldc` apart.
pub unsafe fn write_back(t: &[f32; MR * NR], c: *mut f32, ldc: usize, rows: usize, cols: usize, alpha: f32, beta: f32) {
    for r in 0..rows {
        // SAFETY: the caller's tile of C holds rows × cols from c, rows ldc apart.
        let row = std::slice::from_raw_parts_mut(c.add(r * ldc), cols);
        let acc = &t[r * NR..r * NR + cols];
        if beta == 0.0 {
            row.iter_mut().zip(acc).for_each(|(c, a)| *c = alpha * a);
        } else {
            row.iter_mut().zip(acc).for_each(|(c, a)| *c = alpha * a + beta * *c);
        }
    }
}

/// `acc: [[__m512; 2]; MR]` into `out: Out`, inside an `unsafe` AVX-512 kernel (the
/// caller's whole tile of C, or the edge tile).
macro_rules! epilogue {
    ($acc:expr, $out:expr) => {{
        use std::arch::x86_64::*;
        use $crate::device::tile::{Out, NR};
        match $out {
            Out::Tile(tile) => {
                for (r, acc) in $acc.iter().enumerate() {
                    _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR), acc[0]);
                    _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR + 16), acc[1]);
                }
            }
            Out::C { c, ldc, alpha, beta } => {
                let (al, be) = (_mm512_set1_ps(alpha), _mm512_set1_ps(beta));
                for (r, acc) in $acc.iter().enumerate() {
                    for (h, acc) in acc.iter().enumerate() {
                        // SAFETY: the caller's whole tile: row r's 16 lanes h at r·ldc + 16h.
                        let q = c.add(r * ldc + 16 * h);
                        let v = if beta == 0.0 {
                            _mm512_mul_ps(al, *acc)
                        } else {
                            _mm512_fmadd_ps(al, *acc, _mm512_mul_ps(be, _mm512_loadu_ps(q)))
                        };
                        _mm512_storeu_ps(q, v);
                    }
                }
            }
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use epilogue;

/// The 16 × 16 block whose row j is the 16 floats from `rows[j]`, transposed: result p holds
/// rows[0][p], ..., rows[15][p]. Four rounds of shuffles: 32-bit elements, 64-bit, then
/// 128-bit lanes twice.
///
/// # Safety
/// AVX-512F; each pointer reads 16 floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn transpose16(rows: [*const f32; 16]) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    let r: [__m512; 16] = std::array::from_fn(|j| _mm512_loadu_ps(rows[j]));
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let pd = |x: __m512| _mm512_castps_pd(x);
    let mut u = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let b = 4 * g;
        u[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[b]), pd(t[b + 2])));
        u[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[b]), pd(t[b + 2])));
        u[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[b + 1]), pd(t[b + 3])));
        u[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[b + 1]), pd(t[b + 3])));
    }
    for h in 0..2 {
        for i in 0..4 {
            let (x, y) = (u[8 * h + i], u[8 * h + 4 + i]);
            t[8 * h + i] = _mm512_shuffle_f32x4::<0x88>(x, y);
            t[8 * h + 4 + i] = _mm512_shuffle_f32x4::<0xdd>(x, y);
        }
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        out[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
        out[8 + i] = _mm512_shuffle_f32x4::<0xdd>(t[i], t[8 + i]);
    }
    out
}

/// out[p·ld + j0 + q] = runs[q][p] for q < 16 and p < len: sixteen runs dealt to 16 lanes of
/// `out`'s rows (`ld` apart), whole blocks of 16 through `transpose16`, the last len % 16 one
/// float at a time. What packing a transposed operand into strips comes down to.
///
/// # Safety
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn deal16(runs: &[&[f32]; 16], len: usize, out: &mut [f32], ld: usize, j0: usize) {
    assert!(j0 + 16 <= ld && runs.iter().all(|r| r.len() >= len));
    assert!(len == 0 || out.len() >= (len - 1) * ld + j0 + 16);
    let whole = len / 16 * 16;
    for pb in (0..whole).step_by(16) {
        let t = transpose16(std::array::from_fn(|q| runs[q].as_ptr().add(pb)));
        for (p, v) in t.iter().enumerate() {
            std::arch::x86_64::_mm512_storeu_ps(out.as_mut_ptr().add((pb + p) * ld + j0), *v);
        }
    }
    for (q, run) in runs.iter().enumerate() {
        for (p, &v) in run[..len].iter().enumerate().skip(whole) {
            out[p * ld + j0 + q] = v;
        }
    }
}

/// The checks both kernels' tests run (each with the operands as its kernel sees them).
#[cfg(test)]
pub mod check {
    use super::super::backend::{Gemm, Trans};

    pub type GemmFn = fn(Gemm, &[f32], &[f32], &mut [f32]);

    pub fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.618 + seed as f32).sin() * 3.0).collect()
    }

    /// The product in f64 with the operands as `operand` sees them, and Σ|a||b| + |beta·c| per
    /// element (the scale of float32 summation error).
    pub fn reference_of(g: Gemm, a: &[f32], b: &[f32], c0: &[f32], operand: fn(f32) -> f32) -> (Vec<f64>, Vec<f64>) {
        let at = |i: usize, p: usize| operand(if g.ta == Trans::N { a[i * g.k + p] } else { a[p * g.m + i] }) as f64;
        let bt = |p: usize, j: usize| operand(if g.tb == Trans::N { b[p * g.n + j] } else { b[j * g.k + p] }) as f64;
        let (mut out, mut scale) = (vec![0.0; g.m * g.n], vec![0.0; g.m * g.n]);
        for i in 0..g.m {
            for j in 0..g.n {
                let (s, abs) = (0..g.k)
                    .fold((0.0, 0.0), |(s, abs), p| (s + at(i, p) * bt(p, j), abs + (at(i, p) * bt(p, j)).abs()));
                out[i * g.n + j] =
                    g.alpha as f64 * s + if g.beta == 0.0 { 0.0 } else { g.beta as f64 * c0[i * g.n + j] as f64 };
                scale[i * g.n + j] =
                    g.alpha.abs() as f64 * abs + (g.beta as f64 * c0[i * g.n + j] as f64).abs() + 1e-30;
            }
        }
        (out, scale)
    }

    /// Every transpose, edges on every side (m, n past a tile, k odd, several k- and
    /// n-blocks; the last shape takes sgemm's Cᵀ route for B transposed), alpha and beta (beta 0 must not read C): within float32 summation error of
    /// the exact product of the operands as `operand` sees them.
    pub fn exact_over_shapes(gemm: GemmFn, operand: fn(f32) -> f32) {
        let shapes = [
            (1, 1, 1),
            (3, 5, 2),
            (8, 2, 32),
            (13, 37, 45),
            (17, 300, 70),
            (130, 513, 33),
            (9, 20, 1100),
            (2, 300, 200),
        ];
        for &(m, k, n) in &shapes {
            for ta in [Trans::N, Trans::T] {
                for tb in [Trans::N, Trans::T] {
                    for (alpha, beta) in [(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25)] {
                        exact(gemm, Gemm { m, k, n, ta, tb, alpha, beta }, operand);
                    }
                }
            }
        }
    }

    /// One product against the exact product of the operands as `operand` sees them, within
    /// float32 summation error (beta 0 must not read C: C starts as NaN then).
    pub fn exact(gemm: GemmFn, g: Gemm, operand: fn(f32) -> f32) {
        let (a, b) = (data(g.m * g.k, 1), data(g.k * g.n, 2));
        let c0 = data(g.m * g.n, 3);
        let mut c = c0.clone();
        if g.beta == 0.0 {
            c.fill(f32::NAN);
        }
        gemm(g, &a, &b, &mut c);
        let (want, scale) = reference_of(g, &a, &b, &c0, operand);
        for (idx, (&got, (&w, &s))) in c.iter().zip(want.iter().zip(&scale)).enumerate() {
            let err = (got as f64 - w).abs() / s;
            assert!(err < 1e-6 * (g.k as f64).sqrt().max(1.0) * 4.0, "{g:?} at {idx}: {got} vs {w} (scale {s})");
        }
    }

    /// Threads split C's columns (or its rows, where C is narrower than a strip per thread);
    /// each element is summed by the same code in the same order, so 1 and 3 threads give the
    /// same bits (and the product is right). Shapes: square-ish, a narrow last layer (n 10),
    /// one whose transposed B is cheaper to pack than dY and dX to transpose, one whose
    /// weights outweigh them (sgemm's Cᵀ route), and one of several row and k blocks, whose A
    /// the parts pack once between them (bf16's `SharedA`).
    pub fn same_bits_on_threads(gemm: GemmFn, operand: fn(f32) -> f32) {
        for (m, k, n) in [(37, 300, 200), (600, 200, 10), (300, 100, 60), (8, 1000, 600), (300, 1100, 200)] {
            for (ta, tb) in [(Trans::N, Trans::N), (Trans::T, Trans::N), (Trans::N, Trans::T)] {
                let g = Gemm { m, k, n, ta, tb, alpha: 1.0, beta: 0.5 };
                let (a, b, c0) = (data(m * k, 7), data(k * n, 8), data(m * n, 9));
                let mut one = c0.clone();
                gemm(g, &a, &b, &mut one);
                let mut three = c0.clone();
                super::super::pool::set_threads(3);
                gemm(g, &a, &b, &mut three);
                super::super::pool::set_threads(1);
                assert_eq!(one, three, "{g:?}");
                let (want, scale) = reference_of(g, &a, &b, &c0, operand);
                assert!(three
                    .iter()
                    .zip(want.iter().zip(&scale))
                    .all(|(&x, (&w, &s))| (x as f64 - w).abs() / s < 1e-4));
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    /// Sixteen runs of 23 (a whole block and a tail) dealt to lanes 5..21 of rows 32 apart:
    /// every element where the definition puts it, the other lanes untouched.
    #[test]
    fn deal16_transposes() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let runs: Vec<Vec<f32>> = (0..16).map(|q| (0..23).map(|p| (q * 100 + p) as f32).collect()).collect();
        let src: [&[f32]; 16] = std::array::from_fn(|q| &runs[q][..]);
        let mut out = vec![-1.0; 23 * 32];
        unsafe { super::deal16(&src, 23, &mut out, 32, 5) };
        for p in 0..23 {
            for j in 0..32 {
                let want = if (5..21).contains(&j) { ((j - 5) * 100 + p) as f32 } else { -1.0 };
                assert_eq!(out[p * 32 + j], want, "p {p} j {j}");
            }
        }
    }
}
