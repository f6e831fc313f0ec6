//! A dense layer's forward, x · W + bias then the activation, as one cublasLt call with an
//! epilogue, written once as a pure function (tested without a GPU), and the alignment
//! cublasLt's kernels may assume of each operand.
//!
//! The product maps as `gemm_map` maps it (cuBLAS's A is our W, its B our x; its D = Cᵀ,
//! column-major [out, batch] with leading dimension out). cublasLt's epilogues work on D's
//! rows: the bias vector has D's row count (our `out`), added to every column (our row), which
//! is our bias; `RELU_BIAS` and `GELU_BIAS` apply the activation after it (GELU as the tanh
//! approximation, as our `hv_gelu`); `GELU_AUX_BIAS` also stores the pre-activation values in
//! an aux matrix laid out as D (our `keep_z`, which GELU's backward reads). Where no epilogue
//! matches (tanh; a product that accumulates; an aux leading dimension that is not a
//! multiple of 8, which cublasLt requires), the layer stays cuBLAS + `hv_bias_act`; the reason
//! is returned.
//!
//! Must not: call cublasLt (`lt.rs` does).

use super::gemm_map::{cublas_args, Cublas};
use crate::config::Activation;
use crate::device::Gemm;

/// The cublasLt epilogue of a forward layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// D = product + bias (the identity activation: the output layer).
    Bias,
    ReluBias,
    GeluBias,
    /// GELU_BIAS that also writes the pre-activation into the aux matrix.
    GeluAuxBias,
}

/// One cublasLt matmul, column-major (cuBLAS's view), with what cublasLt's heuristic must
/// know about the operands: everything but the pointers, so it is the key of a chosen
/// algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LtCall {
    /// The product, as `gemm_map` maps it.
    pub g: Cublas,
    pub epilogue: Epilogue,
    /// The aux matrix's leading dimension (GeluAuxBias only; D's).
    pub aux_ld: Option<usize>,
    /// The alignment in bytes each of cuBLAS's A, B, and C/D starts at (at most 256).
    pub align: [u32; 3],
}

/// The largest power of two, at most 256, that divides `addr` (cublasLt's
/// `MIN_ALIGNMENT_*_BYTES` preferences; it assumes 256 unless told).
pub fn alignment(addr: u64) -> u32 {
    if addr == 0 {
        return 256;
    }
    (1u64 << addr.trailing_zeros().min(8)) as u32
}

/// The cublasLt call for row-major out[b, o] = act(x[b, i] · W[i, o] + bias[o]), where
/// `g` is the product's `Gemm` (m = b, k = i, n = o, both N) and `addrs` the device
/// addresses of x, W and out; or why the layer keeps the separate kernels.
pub fn forward_call(g: Gemm, act: Activation, keep_z: bool, addrs: [u64; 3]) -> Result<LtCall, &'static str> {
    if g.alpha != 1.0 || g.beta != 0.0 {
        return Err("the product is scaled or accumulates");
    }
    let int = |v: usize| i32::try_from(v).is_ok();
    if ![g.m, g.n, g.k].into_iter().all(int) {
        return Err("a dimension exceeds cublasLt's int");
    }
    if g.m == 0 || g.n == 0 || g.k == 0 {
        return Err("an empty product");
    }
    let epilogue = match (act, keep_z) {
        (Activation::Identity, _) => Epilogue::Bias,
        (Activation::Relu, _) => Epilogue::ReluBias,
        (Activation::Gelu, false) => Epilogue::GeluBias,
        (Activation::Gelu, true) => Epilogue::GeluAuxBias,
        (Activation::Tanh, _) => return Err("cublasLt has no tanh epilogue"),
    };
    let c = cublas_args(g.m, g.k, g.n, g.ta, g.tb);
    let aux_ld = (epilogue == Epilogue::GeluAuxBias).then_some(c.ldc);
    if aux_ld.is_some_and(|ld| ld % 8 != 0) {
        return Err("the GELU aux matrix's leading dimension (the layer's width) is not a multiple of 8");
    }
    let [x, w, out] = addrs;
    Ok(LtCall {
        g: c,
        epilogue,
        aux_ld,
        // cuBLAS's A is our W, its B our x.
        align: [alignment(w), alignment(x), alignment(out)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cuda::gemm_map::Op;
    use crate::device::{Backend, Cpu, Trans};

    /// cublasLt's documented semantics of the call, column-major: D = epilogue(op(A) · op(B))
    /// with alpha 1 and beta 0; bias added to each column (length m); the aux matrix (GELU)
    /// holds the values the activation is applied to. GELU is the tanh approximation.
    fn reference(call: &LtCall, a: &[f32], b: &[f32], bias: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let c = &call.g;
        assert!(c.lda >= if c.transa == Op::N { c.m } else { c.k });
        assert!(c.ldb >= if c.transb == Op::N { c.k } else { c.n });
        assert!(c.ldc >= c.m && bias.len() == c.m);
        let at = |i: usize, p: usize| if c.transa == Op::N { a[i + p * c.lda] } else { a[p + i * c.lda] };
        let bt = |p: usize, j: usize| if c.transb == Op::N { b[p + j * c.ldb] } else { b[j + p * c.ldb] };
        let (mut d, mut aux) = (vec![f32::NAN; c.ldc * c.n], vec![f32::NAN; c.ldc * c.n]);
        for j in 0..c.n {
            for i in 0..c.m {
                let s: f64 = (0..c.k).map(|p| f64::from(at(i, p)) * f64::from(bt(p, j))).sum();
                let z = s as f32 + bias[i];
                let gelu = |x: f32| {
                    let x = f64::from(x);
                    (0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())) as f32
                };
                d[i + j * c.ldc] = match call.epilogue {
                    Epilogue::Bias => z,
                    Epilogue::ReluBias => z.max(0.0),
                    Epilogue::GeluBias | Epilogue::GeluAuxBias => gelu(z),
                };
                aux[i + j * c.ldc] = z;
            }
        }
        (d, aux)
    }

    fn fill(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// Every epilogue on odd and even shapes: cublasLt's semantics, through the mapping, give
    /// what the CPU backend's gemm + bias_act gives (and the pre-activation for GELU's aux).
    #[test]
    fn forward_epilogues_give_the_cpu_layer() {
        let acts = [
            (Activation::Identity, false),
            (Activation::Relu, false),
            (Activation::Gelu, false),
            (Activation::Gelu, true),
        ];
        for &(b, i, o) in &[(1, 1, 8), (3, 5, 8), (7, 13, 16), (16, 9, 24), (5, 2, 7)] {
            for &(act, keep) in &acts {
                let x = fill(b * i, 1);
                let w = fill(i * o, 2);
                let bias = fill(o, 3);
                let g = Gemm::new(b, i, o, Trans::N, Trans::N);
                let call = match forward_call(g, act, keep, [0, 0, 0]) {
                    Ok(c) => c,
                    Err(why) => {
                        assert!(keep && o % 8 != 0, "{b}x{i}x{o} {act:?}: {why}");
                        continue;
                    }
                };
                // Ours on the CPU, row-major.
                let mut want = vec![0.0; b * o];
                let mut z = vec![0.0; b * o];
                Cpu.gemm(g, &x, &w, &mut want).unwrap();
                Cpu.bias_act(&mut want, &bias, act, keep.then_some(&mut z[..])).unwrap();
                // cublasLt's, column-major D = Cᵀ: cuBLAS's A is W, its B is x.
                let (d, aux) = reference(&call, &w, &x, &bias);
                for e in 0..b * o {
                    assert!(
                        (d[e] - want[e]).abs() <= 1e-5 * (1.0 + want[e].abs()),
                        "{b}x{i}x{o} {act:?} element {e}: {} vs {}",
                        d[e],
                        want[e]
                    );
                    if keep {
                        assert!((aux[e] - z[e]).abs() <= 1e-5 * (1.0 + z[e].abs()), "aux {e}: {} vs {}", aux[e], z[e]);
                    }
                }
            }
        }
    }

    #[test]
    fn what_stays_on_separate_kernels() {
        let g = Gemm::new(4, 3, 16, Trans::N, Trans::N);
        assert!(forward_call(g, Activation::Tanh, false, [0; 3]).unwrap_err().contains("tanh"));
        assert!(forward_call(g.beta(1.0), Activation::Relu, false, [0; 3]).is_err());
        assert!(forward_call(g.alpha(0.5), Activation::Relu, false, [0; 3]).is_err());
        let odd = Gemm::new(4, 3, 12, Trans::N, Trans::N);
        assert!(forward_call(odd, Activation::Gelu, true, [0; 3]).unwrap_err().contains("multiple of 8"));
        assert_eq!(forward_call(odd, Activation::Gelu, false, [0; 3]).unwrap().epilogue, Epilogue::GeluBias);
        assert!(forward_call(Gemm::new(0, 3, 16, Trans::N, Trans::N), Activation::Relu, false, [0; 3]).is_err());
        let c = forward_call(g, Activation::Gelu, true, [0; 3]).unwrap();
        assert_eq!((c.epilogue, c.aux_ld, c.g.m, c.g.n, c.g.k), (Epilogue::GeluAuxBias, Some(16), 16, 4, 3));
    }

    #[test]
    fn alignment_of_views_in_an_arena() {
        assert_eq!(alignment(0x7f00_0000_0000), 256);
        assert_eq!(alignment(0x7f00_0000_0100 + 4), 4);
        assert_eq!(alignment(0x7f00_0000_0000 + 16 * 4), 64);
        assert_eq!(alignment(0x7f00_0000_0000 + 3 * 4), 4);
        assert_eq!(alignment(0x7f00_0000_0000 + 8), 8);
        // A, B, C/D order: W's, x's, out's.
        let c =
            forward_call(Gemm::new(4, 3, 16, Trans::N, Trans::N), Activation::Relu, false, [0x1000, 0x1010, 0x1004])
                .unwrap();
        assert_eq!(c.align, [16, 256, 4]);
    }
}
