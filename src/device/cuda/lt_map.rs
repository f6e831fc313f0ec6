//! A dense layer's forward, x · W + bias then the activation, and backward into the layer
//! before, (g · Wᵀ) ⊙ act' with that layer's bias gradient, each as one cublasLt call with an
//! epilogue, written once as pure functions (tested without a GPU), and the alignment
//! cublasLt's kernels may assume of each operand.
//!
//! The product maps as `gemm_map` maps it (cuBLAS's A is our W, its B our x; its D = Cᵀ,
//! column-major [out, batch] with leading dimension out). cublasLt's epilogues work on D's
//! rows: the bias vector has D's row count (our `out`), added to every column (our row), which
//! is our bias; `RELU_BIAS` and `GELU_BIAS` apply the activation after it (GELU as the tanh
//! approximation, as our `hv_gelu`); `GELU_AUX_BIAS` also stores the pre-activation values in
//! an aux matrix laid out as D (our `keep_z`, which GELU's backward reads); `RELU_AUX_BIAS`
//! stores a bitmask of the positive pre-activations instead (one bit per element of D, its
//! leading dimension in bits a multiple of 128), which ReLU's backward reads.
//!
//! Backward, the input-gradient product g · Wᵀ maps the same way (D = dprevᵀ, [inp, rows]),
//! so its D has the layout of the layer before's forward D, and `DRELU_BGRAD` /
//! `DGELU_BGRAD` multiply it by the activation's derivative read from that layer's bitmask /
//! pre-activation, and write the bias gradient (D's row sums: our column sums) of the result
//! to the bias pointer. Where no epilogue
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
    /// RELU_BIAS that also writes the bitmask of positive pre-activations (for `DreluBgrad`).
    ReluAuxBias,
    /// Backward: D ⊙ relu' from the bitmask, and the bias gradient (D's row sums).
    DreluBgrad,
    /// Backward: D ⊙ gelu' from the pre-activation, and the bias gradient.
    DgeluBgrad,
}

/// A ReLU bitmask's leading dimension, in bits, for D's `rows` (cublasLt: a multiple of 128).
pub fn mask_ld(rows: usize) -> usize {
    rows.div_ceil(128) * 128
}

/// Bytes of the bitmask of a D of `rows` × `cols`.
pub fn mask_bytes(rows: usize, cols: usize) -> usize {
    mask_ld(rows) / 8 * cols
}

/// One cublasLt matmul, column-major (cuBLAS's view), with what cublasLt's heuristic must
/// know about the operands: everything but the pointers, so it is the key of a chosen
/// algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LtCall {
    /// The product, as `gemm_map` maps it.
    pub g: Cublas,
    pub epilogue: Epilogue,
    /// The aux matrix's leading dimension: D's for the pre-activation (GELU), `mask_ld` (in
    /// bits) for a ReLU bitmask; None without one.
    pub aux_ld: Option<usize>,
    /// The alignment in bytes each of cuBLAS's A, B, and C/D starts at (at most 256).
    pub align: [u32; 3],
    /// A, B, D and the bias in bf16 (the sums float32): `forward_call_bf16`.
    pub bf16: bool,
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
/// addresses of x, W and out; `relu_mask`: a ReLU layer also writes its bitmask (for
/// `input_grad_call`); or why the layer keeps the separate kernels.
pub fn forward_call(
    g: Gemm,
    act: Activation,
    keep_z: bool,
    relu_mask: bool,
    addrs: [u64; 3],
) -> Result<LtCall, &'static str> {
    plain_product(g)?;
    let epilogue = match (act, keep_z) {
        (Activation::Identity, _) => Epilogue::Bias,
        (Activation::Relu, _) if relu_mask => Epilogue::ReluAuxBias,
        (Activation::Relu, _) => Epilogue::ReluBias,
        (Activation::Gelu, false) => Epilogue::GeluBias,
        (Activation::Gelu, true) => Epilogue::GeluAuxBias,
        (Activation::Tanh, _) => return Err("cublasLt has no tanh epilogue"),
        _ => return Err("cublasLt has no epilogue for this activation"),
    };
    let c = cublas_args(g.m, g.k, g.n, g.ta, g.tb);
    let aux_ld = aux_ld(epilogue, c.ldc)?;
    let [x, w, out] = addrs;
    // cuBLAS's A is our W, its B our x.
    Ok(LtCall { g: c, epilogue, aux_ld, align: [alignment(w), alignment(x), alignment(out)], bf16: false })
}

/// `forward_call` for bf16 layer outputs (`HVTRAIN_BF16_OUTPUTS=1` with `precision = "bf16"`):
/// A and B are the bf16 operands (cuBLAS's A our W's bf16 bits, its B x's), D the output's
/// bf16 bits, laid out as the float32 matrices they stand for (the same leading dimensions);
/// the bias is read in bf16 (D's type: `lt.rs`) and the epilogue computes in float32 before D
/// is rounded, which is what the CPU reference stores (`Cpu::with_outputs`). `addrs`: those
/// bf16 buffers' device addresses. Identity and ReLU only: GELU and tanh stay on the separate
/// kernels (cuBLAS 13.1's GELU epilogue writing bf16 was two bf16 steps off the reference on
/// an H200, -0.09766 for -0.09668, 2026-11-29; tanh has no epilogue).
pub fn forward_call_bf16(g: Gemm, act: Activation, keep_z: bool, addrs: [u64; 3]) -> Result<LtCall, &'static str> {
    if keep_z {
        return Err("GELU's kept pre-activation (bf16 outputs keep it through the separate kernels)");
    }
    if act == Activation::Gelu {
        return Err("GELU (cuBLAS's bf16 GELU epilogue is up to two bf16 steps off; the separate kernels)");
    }
    Ok(LtCall { bf16: true, ..forward_call(g, act, false, false, addrs)? })
}

/// The cublasLt call for row-major dprev[b, i] = (dz[b, o] · W[i, o]ᵀ) ⊙ act'(the layer
/// before's output), with that layer's bias gradient: `g` is the product's `Gemm` (m = b,
/// k = o, n = i; N, T), `addrs` the addresses of dz, W and dprev; or why it stays three
/// operations. The aux read is what the layer before's forward wrote (`forward_call` with
/// `relu_mask`, or its kept pre-activation), whose D has this D's layout.
pub fn input_grad_call(g: Gemm, act: Activation, addrs: [u64; 3]) -> Result<LtCall, &'static str> {
    plain_product(g)?;
    if g.ta != crate::device::Trans::N || g.tb != crate::device::Trans::T {
        return Err("not the input-gradient product (N, T)");
    }
    let epilogue = match act {
        Activation::Relu => Epilogue::DreluBgrad,
        Activation::Gelu => Epilogue::DgeluBgrad,
        _ => return Err("cublasLt has no backward epilogue for it"),
    };
    let c = cublas_args(g.m, g.k, g.n, g.ta, g.tb);
    let aux_ld = aux_ld(epilogue, c.ldc)?;
    let [dz, w, dprev] = addrs;
    Ok(LtCall { g: c, epilogue, aux_ld, align: [alignment(w), alignment(dz), alignment(dprev)], bf16: false })
}

/// alpha 1, beta 0, dimensions in cublasLt's int, nothing empty.
fn plain_product(g: Gemm) -> Result<(), &'static str> {
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
    Ok(())
}

/// The aux leading dimension an epilogue needs for a D of leading dimension `ldc`.
fn aux_ld(e: Epilogue, ldc: usize) -> Result<Option<usize>, &'static str> {
    Ok(match e {
        Epilogue::GeluAuxBias | Epilogue::DgeluBgrad if !ldc.is_multiple_of(8) => {
            return Err("the GELU aux matrix's leading dimension (the layer's width) is not a multiple of 8")
        }
        Epilogue::GeluAuxBias | Epilogue::DgeluBgrad => Some(ldc),
        Epilogue::ReluAuxBias | Epilogue::DreluBgrad => Some(mask_ld(ldc)),
        Epilogue::Bias | Epilogue::ReluBias | Epilogue::GeluBias => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cuda::gemm_map::Op;
    use crate::device::{Backend, Cpu, Trans};

    fn gelu(x: f32) -> f32 {
        let x = f64::from(x);
        (0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())) as f32
    }
    /// The derivative of the tanh approximation, written out independently of the CPU's.
    fn dgelu(x: f32) -> f32 {
        let (x, c) = (f64::from(x), 0.797_884_560_802_865_4);
        let t = (c * (x + 0.044715 * x * x * x)).tanh();
        (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)) as f32
    }

    /// cuBLAS's product op(A) · op(B), column-major, in float64, as D's [ldc · n] elements.
    fn product(call: &LtCall, a: &[f32], b: &[f32]) -> Vec<f32> {
        let c = &call.g;
        assert!(c.lda >= if c.transa == Op::N { c.m } else { c.k });
        assert!(c.ldb >= if c.transb == Op::N { c.k } else { c.n });
        assert!(c.ldc >= c.m);
        let at = |i: usize, p: usize| if c.transa == Op::N { a[i + p * c.lda] } else { a[p + i * c.lda] };
        let bt = |p: usize, j: usize| if c.transb == Op::N { b[p + j * c.ldb] } else { b[j + p * c.ldb] };
        let mut d = vec![f32::NAN; c.ldc * c.n];
        for j in 0..c.n {
            for i in 0..c.m {
                d[i + j * c.ldc] = (0..c.k).map(|p| f64::from(at(i, p)) * f64::from(bt(p, j))).sum::<f64>() as f32;
            }
        }
        d
    }

    /// cublasLt's documented semantics of a forward call (alpha 1, beta 0): bias added to each
    /// column (length m), then the activation; the aux holds the pre-activation (GELU), or a
    /// bit per element set where it is positive (ReLU; bit i + j · aux_ld).
    fn forward_ref(call: &LtCall, a: &[f32], b: &[f32], bias: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<bool>) {
        let c = &call.g;
        assert_eq!(bias.len(), c.m);
        let mut d = product(call, a, b);
        let mut aux = vec![f32::NAN; d.len()];
        let mut mask = vec![false; call.aux_ld.unwrap_or(0) * c.n];
        for j in 0..c.n {
            for i in 0..c.m {
                let z = d[i + j * c.ldc] + bias[i];
                aux[i + j * c.ldc] = z;
                if call.epilogue == Epilogue::ReluAuxBias {
                    mask[i + j * call.aux_ld.unwrap()] = z > 0.0;
                }
                d[i + j * c.ldc] = match call.epilogue {
                    Epilogue::Bias => z,
                    Epilogue::ReluBias | Epilogue::ReluAuxBias => z.max(0.0),
                    Epilogue::GeluBias | Epilogue::GeluAuxBias => gelu(z),
                    e => panic!("{e:?} is no forward epilogue"),
                };
            }
        }
        (d, aux, mask)
    }

    /// ... of a backward call: D times the derivative read from the aux (the pre-activation
    /// for DGELU, the bitmask for DRELU), and the bias gradient, D's row sums.
    fn backward_ref(call: &LtCall, a: &[f32], b: &[f32], z: &[f32], mask: &[bool]) -> (Vec<f32>, Vec<f32>) {
        let c = &call.g;
        let ld = call.aux_ld.expect("a backward epilogue reads an aux");
        let mut d = product(call, a, b);
        let mut bias = vec![0.0f64; c.m];
        for j in 0..c.n {
            for i in 0..c.m {
                let e = &mut d[i + j * c.ldc];
                *e *= match call.epilogue {
                    Epilogue::DreluBgrad => f32::from(u8::from(mask[i + j * ld])),
                    Epilogue::DgeluBgrad => dgelu(z[i + j * ld]),
                    e => panic!("{e:?} is no backward epilogue"),
                };
                bias[i] += f64::from(*e);
            }
        }
        (d, bias.into_iter().map(|v| v as f32).collect())
    }

    fn fill(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    fn close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for e in 0..want.len() {
            assert!(
                (got[e] - want[e]).abs() <= 1e-5 * (1.0 + want[e].abs()),
                "{what} element {e}: {} vs {}",
                got[e],
                want[e]
            );
        }
    }

    /// Every epilogue on odd and even shapes: cublasLt's semantics, through the mapping, give
    /// what the CPU backend's gemm + bias_act gives (and the pre-activation for GELU's aux).
    #[test]
    fn forward_epilogues_give_the_cpu_layer() {
        let acts = [
            (Activation::Identity, false, false),
            (Activation::Relu, false, false),
            (Activation::Relu, false, true),
            (Activation::Gelu, false, false),
            (Activation::Gelu, true, false),
        ];
        for &(b, i, o) in &[(1, 1, 8), (3, 5, 8), (7, 13, 16), (16, 9, 24), (5, 2, 7), (3, 4, 130)] {
            for &(act, keep, mask) in &acts {
                let x = fill(b * i, 1);
                let w = fill(i * o, 2);
                let bias = fill(o, 3);
                let g = Gemm::new(b, i, o, Trans::N, Trans::N);
                let call = match forward_call(g, act, keep, mask, [0, 0, 0]) {
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
                let (d, aux, bits) = forward_ref(&call, &w, &x, &bias);
                close(&d, &want, &format!("{b}x{i}x{o} {act:?}"));
                if keep {
                    close(&aux, &z, "aux");
                }
                if mask {
                    assert_eq!(call.aux_ld, Some(mask_ld(o)));
                    for e in 0..b * o {
                        assert_eq!(bits[e % o + e / o * mask_ld(o)], want[e] > 0.0, "mask bit {e}");
                    }
                }
            }
        }
    }

    /// bf16 layer outputs: the call reads bf16 operands and writes a bf16 D, with the float32
    /// call's shape and epilogue; its semantics (products of the rounded operands summed in
    /// float32, the bias rounded to bf16, bias and activation in float32, then D rounded) are
    /// what the CPU reference with bf16 outputs stores (on a CPU with AVX512-BF16; elsewhere
    /// against float32 products of the rounded operands), within one bf16 step where the float32 sums' order flips a
    /// rounding; and every value is a bf16 value.
    #[test]
    fn bf16_output_epilogues_give_the_cpu_reference() {
        use crate::device::bf16::round;
        let cpu_bf16 = crate::device::bf16::supported()
            .then(|| Cpu::new(crate::config::Precision::Bf16).unwrap().with_outputs(true));
        for &(b, i, o) in &[(1, 1, 8), (3, 5, 8), (7, 13, 16), (16, 9, 24), (5, 2, 7), (3, 40, 130)] {
            for act in [Activation::Identity, Activation::Relu] {
                let (x, w, bias) = (fill(b * i, 1), fill(i * o, 2), fill(o, 3));
                let g = Gemm::new(b, i, o, Trans::N, Trans::N);
                let call = forward_call_bf16(g, act, false, [0; 3]).unwrap();
                let f32_call = forward_call(g, act, false, false, [0; 3]).unwrap();
                assert!(call.bf16, "bf16 operands and D");
                assert_eq!(LtCall { bf16: false, ..call }, f32_call, "the float32 call's shape, bf16 types");
                let (xr, wr): (Vec<f32>, Vec<f32>) =
                    (x.iter().map(|&v| round(v)).collect(), w.iter().map(|&v| round(v)).collect());
                let br: Vec<f32> = bias.iter().map(|&v| round(v)).collect();
                let (d, _, _) = forward_ref(&call, &wr, &xr, &br);
                let d: Vec<f32> = d.iter().map(|&v| round(v)).collect();
                let mut want = vec![0.0; b * o];
                match &cpu_bf16 {
                    Some(be) => {
                        be.gemm(g, &x, &w, &mut want).unwrap();
                        be.bias_act(&mut want, &bias, act, None).unwrap();
                    }
                    None => {
                        Cpu.gemm(g, &xr, &wr, &mut want).unwrap();
                        Cpu.bias_act(&mut want, &br, act, None).unwrap();
                        want.iter_mut().for_each(|v| *v = round(*v));
                    }
                }
                let mut flips = 0;
                for e in 0..b * o {
                    assert_eq!(want[e].to_bits() & 0xffff, 0, "{b}x{i}x{o} {act:?}: the reference stores bf16");
                    let tol = 2f32.powi(-8) * want[e].abs() + 1e-6;
                    assert!((d[e] - want[e]).abs() <= tol, "{b}x{i}x{o} {act:?} element {e}: {} vs {}", d[e], want[e]);
                    flips += usize::from(d[e] != want[e]);
                }
                // Equal to the bit but where the sums' order flips a rounding; unrounded, nearly
                // all would differ.
                assert!(flips <= 1 + b * o / 10, "{b}x{i}x{o} {act:?}: {flips} of {} elements differ", b * o);
            }
        }
        let g = Gemm::new(4, 3, 16, Trans::N, Trans::N);
        assert!(forward_call_bf16(g, Activation::Gelu, true, [0; 3]).unwrap_err().contains("kept pre-activation"));
        assert!(forward_call_bf16(g, Activation::Gelu, false, [0; 3]).unwrap_err().contains("two bf16 steps"));
        assert!(forward_call_bf16(g, Activation::Tanh, false, [0; 3]).is_err());
        assert!(!forward_call(g, Activation::Relu, false, false, [0; 3]).unwrap().bf16);
    }

    /// Backward into the layer before through one call: with the aux its forward call wrote
    /// (ReLU's bitmask, GELU's pre-activation), cublasLt's semantics give what the CPU's
    /// product, activation backward and column sums give (`Backend::input_grad`'s default).
    #[test]
    fn backward_epilogues_give_the_cpu_layers_gradients() {
        for &(b, p, i, o) in &[(3, 5, 8, 4), (7, 3, 16, 10), (2, 4, 130, 3), (5, 6, 24, 24)] {
            for act in [Activation::Relu, Activation::Gelu] {
                if act == Activation::Gelu && i % 8 != 0 {
                    let g = Gemm::new(b, o, i, Trans::N, Trans::T);
                    assert!(input_grad_call(g, act, [0; 3]).is_err(), "GELU's aux ld {i}");
                    continue;
                }
                // The layer before: x[b, p] · W0[p, i] + b0, then act, its aux kept.
                let (x, w0, b0) = (fill(b * p, 4), fill(p * i, 5), fill(i, 6));
                let g0 = Gemm::new(b, p, i, Trans::N, Trans::N);
                let fwd = forward_call(g0, act, act == Activation::Gelu, act == Activation::Relu, [0; 3]).unwrap();
                let (a_prev, z_prev, bits) = forward_ref(&fwd, &w0, &x, &b0);
                // This layer's gradient dz[b, o] and weight W[i, o].
                let (dz, w) = (fill(b * o, 7), fill(i * o, 8));
                let g = Gemm::new(b, o, i, Trans::N, Trans::T);
                let call = input_grad_call(g, act, [0; 3]).unwrap();
                assert_eq!(call.aux_ld, fwd.aux_ld, "the aux is read as it was written");
                let (d, bgrad) = backward_ref(&call, &w, &dz, &z_prev, &bits);
                let (mut want, mut want_b) = (vec![0.0; b * i], vec![0.0; i]);
                let z = (act == Activation::Gelu).then_some(&z_prev[..]);
                Cpu.input_grad(g, &dz, &w, &mut want, &a_prev, z, act, 0.0, &mut want_b).unwrap();
                close(&d, &want, &format!("{b}x{p}x{i}x{o} {act:?} input gradient"));
                close(&bgrad, &want_b, &format!("{b}x{p}x{i}x{o} {act:?} bias gradient"));
            }
        }
    }

    #[test]
    fn what_stays_on_separate_kernels() {
        let g = Gemm::new(4, 3, 16, Trans::N, Trans::N);
        assert!(forward_call(g, Activation::Tanh, false, false, [0; 3]).unwrap_err().contains("tanh"));
        assert!(forward_call(g.beta(1.0), Activation::Relu, false, false, [0; 3]).is_err());
        assert!(forward_call(g.alpha(0.5), Activation::Relu, false, false, [0; 3]).is_err());
        let odd = Gemm::new(4, 3, 12, Trans::N, Trans::N);
        assert!(forward_call(odd, Activation::Gelu, true, false, [0; 3]).unwrap_err().contains("multiple of 8"));
        assert_eq!(forward_call(odd, Activation::Gelu, false, false, [0; 3]).unwrap().epilogue, Epilogue::GeluBias);
        assert_eq!(forward_call(odd, Activation::Relu, false, true, [0; 3]).unwrap().aux_ld, Some(128));
        assert!(forward_call(Gemm::new(0, 3, 16, Trans::N, Trans::N), Activation::Relu, false, false, [0; 3]).is_err());
        let c = forward_call(g, Activation::Gelu, true, false, [0; 3]).unwrap();
        assert_eq!((c.epilogue, c.aux_ld, c.g.m, c.g.n, c.g.k), (Epilogue::GeluAuxBias, Some(16), 16, 4, 3));
        // Backward: only ReLU and GELU, only the plain N, T product, GELU's aux ld as forward.
        let gb = Gemm::new(4, 16, 12, Trans::N, Trans::T);
        assert!(input_grad_call(gb, Activation::Tanh, [0; 3]).is_err());
        assert!(input_grad_call(gb, Activation::Identity, [0; 3]).is_err());
        assert!(input_grad_call(gb.beta(1.0), Activation::Relu, [0; 3]).is_err());
        assert!(input_grad_call(Gemm::new(4, 16, 12, Trans::N, Trans::N), Activation::Relu, [0; 3]).is_err());
        assert!(input_grad_call(gb, Activation::Gelu, [0; 3]).unwrap_err().contains("multiple of 8"));
        let r = input_grad_call(gb, Activation::Relu, [0; 3]).unwrap();
        assert_eq!((r.epilogue, r.aux_ld, r.g.m, r.g.n, r.g.k), (Epilogue::DreluBgrad, Some(128), 12, 4, 16));
        assert_eq!((mask_ld(1), mask_ld(128), mask_ld(129), mask_bytes(130, 3)), (128, 128, 256, 96));
    }

    #[test]
    fn alignment_of_views_in_an_arena() {
        assert_eq!(alignment(0x7f00_0000_0000), 256);
        assert_eq!(alignment(0x7f00_0000_0100 + 4), 4);
        assert_eq!(alignment(0x7f00_0000_0000 + 16 * 4), 64);
        assert_eq!(alignment(0x7f00_0000_0000 + 3 * 4), 4);
        assert_eq!(alignment(0x7f00_0000_0000 + 8), 8);
        // A, B, C/D order: W's, x's, out's.
        let g = Gemm::new(4, 3, 16, Trans::N, Trans::N);
        let c = forward_call(g, Activation::Relu, false, false, [0x1000, 0x1010, 0x1004]).unwrap();
        assert_eq!(c.align, [16, 256, 4]);
        let gb = Gemm::new(4, 16, 8, Trans::N, Trans::T);
        let c = input_grad_call(gb, Activation::Relu, [0x1000, 0x1010, 0x1004]).unwrap();
        assert_eq!(c.align, [16, 256, 4], "W's, dz's, dprev's");
    }
}
