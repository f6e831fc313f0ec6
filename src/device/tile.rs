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
