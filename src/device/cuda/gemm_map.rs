//! Row-major GEMM → cuBLAS (column-major) arguments, written once as a pure function.
//!
//! Our matrices are row-major; cuBLAS's are column-major. A row-major [r, c] buffer read as
//! column-major is its transpose, [c, r] with leading dimension c. So for row-major
//! C[m,n] = op(A)[m,k] · op(B)[k,n], cuBLAS computes Cᵀ[n,m] = op(B)ᵀ · op(A)ᵀ with the two
//! operands swapped: cuBLAS's A is our `b`, its B our `a`, its (m, n) our (n, m), and each
//! operand keeps our transpose flag (a row-major N operand is already transposed when read
//! column-major, which is what Cᵀ needs). Offsets into a larger buffer (a layer's weight in
//! the parameter arena, a bucket's slot) are plain pointer offsets and change nothing here.
//!
//! Must not: call cuBLAS (it is a pure function, tested without a GPU).

use crate::device::Trans;

/// cuBLAS's `cublasOperation_t`, by meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    N,
    T,
}

/// The arguments of one `cublasSgemm`/`cublasGemmEx` call (column-major), and which of our
/// operands goes where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cublas {
    pub transa: Op,
    pub transb: Op,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    /// Always true: cuBLAS's A is our `b` and its B our `a`.
    pub swapped: bool,
}

fn op(t: Trans) -> Op {
    match t {
        Trans::N => Op::N,
        Trans::T => Op::T,
    }
}

/// The cuBLAS call for row-major C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C, where
/// `a` holds A as [m,k] (N) or [k,m] (T) and `b` holds B as [k,n] (N) or [n,k] (T).
pub fn cublas_args(m: usize, k: usize, n: usize, ta: Trans, tb: Trans) -> Cublas {
    Cublas {
        transa: op(tb),
        transb: op(ta),
        m: n,
        n: m,
        k,
        // Our b read column-major: [n,k] with ld n (N), or [k,n] with ld k (T).
        lda: if tb == Trans::N { n } else { k },
        // Our a read column-major: [k,m] with ld k (N), or [m,k] with ld m (T).
        ldb: if ta == Trans::N { k } else { m },
        ldc: n,
        swapped: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{cpu, Gemm};

    /// cuBLAS's documented semantics, column-major: C = alpha · op(A) · op(B) + beta · C with
    /// op(A) m×k, op(B) k×n, element (i, j) of a matrix with leading dimension ld at
    /// i + j·ld. Also checks the argument rules cuBLAS enforces (it returns
    /// CUBLAS_STATUS_INVALID_VALUE otherwise).
    #[allow(clippy::too_many_arguments)]
    fn reference_col_major(g: &Cublas, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
        let (m, n, k) = (g.m, g.n, g.k);
        let rows_a = if g.transa == Op::N { m } else { k };
        let rows_b = if g.transb == Op::N { k } else { n };
        assert!(g.lda >= rows_a.max(1), "lda {} < {}", g.lda, rows_a);
        assert!(g.ldb >= rows_b.max(1), "ldb {} < {}", g.ldb, rows_b);
        assert!(g.ldc >= m.max(1), "ldc {} < {}", g.ldc, m);
        let at = |i: usize, p: usize| if g.transa == Op::N { a[i + p * g.lda] } else { a[p + i * g.lda] };
        let bt = |p: usize, j: usize| if g.transb == Op::N { b[p + j * g.ldb] } else { b[j + p * g.ldb] };
        for j in 0..n {
            for i in 0..m {
                let s: f64 = (0..k).map(|p| at(i, p) as f64 * bt(p, j) as f64).sum();
                let c0 = c[i + j * g.ldc];
                c[i + j * g.ldc] = alpha * s as f32 + if beta == 0.0 { 0.0 } else { beta * c0 };
            }
        }
    }

    fn fill(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// Every case the model uses: forward x·W (N,N), the weight gradient xᵀ·d (T,N), the
    /// input gradient d·Wᵀ (N,T), column sums as ones[1,b]·d (N,N with m = 1), and (T,T) for
    /// completeness; odd sizes and 1s; operands at offsets inside larger buffers; beta 0
    /// (overwrite, even of NaN) and 1 (accumulate).
    #[test]
    fn row_major_calls_map_to_cublas_semantics() {
        let shapes = [(1, 1, 1), (3, 5, 2), (7, 1, 9), (1, 13, 4), (17, 8, 31), (64, 33, 10), (2, 100, 1)];
        let mut cases = 0;
        for &(m, k, n) in &shapes {
            for ta in [Trans::N, Trans::T] {
                for tb in [Trans::N, Trans::T] {
                    for (alpha, beta) in [(1.0f32, 0.0f32), (0.5, 1.0)] {
                        let (oa, ob, oc) = (3, 11, 5);
                        let a = fill(oa + m * k + 2, 1);
                        let b = fill(ob + k * n + 2, 2);
                        let c0 = fill(oc + m * n + 2, 3);
                        // Ours, row-major, on the CPU backend.
                        let mut want = c0.clone();
                        cpu::gemm(
                            Gemm::new(m, k, n, ta, tb).alpha(alpha).beta(beta),
                            &a[oa..],
                            &b[ob..],
                            &mut want[oc..oc + m * n],
                        );
                        // cuBLAS's, through the mapping: its A is our b, its B our a.
                        let g = cublas_args(m, k, n, ta, tb);
                        assert!(g.swapped);
                        let mut got = c0.clone();
                        if beta == 0.0 {
                            got[oc..oc + m * n].fill(f32::NAN); // beta = 0 must not read C
                        }
                        reference_col_major(&g, alpha, &b[ob..], &a[oa..], beta, &mut got[oc..]);
                        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                                "m{m} k{k} n{n} {ta:?}{tb:?} alpha {alpha} beta {beta}: element {i}: {x} vs {y} ({g:?})"
                            );
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, shapes.len() * 8);
    }

    #[test]
    fn forward_layer_arguments_are_the_documented_ones() {
        // x[b=4, in=3] · W[3, out=5]: cuBLAS computes (x·W)ᵀ[5,4] = Wᵀ · xᵀ.
        let g = cublas_args(4, 3, 5, Trans::N, Trans::N);
        assert_eq!(g, Cublas { transa: Op::N, transb: Op::N, m: 5, n: 4, k: 3, lda: 5, ldb: 3, ldc: 5, swapped: true });
        // dW[in=3, out=5] = xᵀ[3,4] · d[4,5]: x is [k=4, m=3] row-major.
        let g = cublas_args(3, 4, 5, Trans::T, Trans::N);
        assert_eq!((g.transa, g.transb, g.lda, g.ldb, g.ldc), (Op::N, Op::T, 5, 3, 5));
    }
}
