//! The CPU backend's own tests: the optimizers' wide builds against their scalar formulas and
//! the one-pass RMSprop against the composed kernels, bit for bit; the float32 products against
//! matrixmultiply and a naive product; bf16 outputs, element-wise work split over threads and
//! the tile-fused dense layer against their plain forms; the softmax cross-entropy's values.
//!
//! Must not: need MPI or a GPU.

use super::*;

/// `widest!`'s AVX-512 and AVX2 builds of the optimizers give the bits of the plain
/// scalar formulas (no FMA contraction, no reassociation), on lengths with tails.
#[test]
fn wide_optimizer_builds_give_the_scalar_bits() {
    let n = 1000 + 13;
    let f = |s: f32| (0..n).map(move |i| (i as f32 * 0.731 + s).sin() * 0.3).collect::<Vec<_>>();
    let (p0, g, m0, v0) = (f(1.0), f(2.0), f(3.0), f(4.0).iter().map(|x| x * x).collect::<Vec<_>>());
    for nesterov in [false, true] {
        let h = SgdHyper { lr: 0.05, grad_scale: 0.5, weight_decay: 1e-3, momentum: 0.9, nesterov };
        let (mut p, mut m) = (p0.clone(), m0.clone());
        sgd(&mut p, &g, Some(&mut m), &h);
        for i in 0..n {
            let gi = g[i] * h.grad_scale + h.weight_decay * p0[i];
            let mi = h.momentum * m0[i] + gi;
            let pi = p0[i] - h.lr * if nesterov { gi + h.momentum * mi } else { mi };
            assert_eq!((p[i].to_bits(), m[i].to_bits()), (pi.to_bits(), mi.to_bits()), "sgd {i}");
        }
    }
    let h = AdamHyper {
        lr: 1e-3,
        grad_scale: 0.5,
        b1: 0.9,
        b2: 0.999,
        eps: 1e-7,
        bc1: 0.19,
        bc2_sqrt: 0.14,
        l2: 1e-4,
        decay: 1e-5,
    };
    let (mut p, mut m, mut v) = (p0.clone(), m0.clone(), v0.clone());
    adam(&mut p, &g, &mut m, &mut v, &h);
    for i in 0..n {
        let gi = g[i] * h.grad_scale + h.l2 * p0[i];
        let mi = h.b1 * m0[i] + (1.0 - h.b1) * gi;
        let vi = h.b2 * v0[i] + (1.0 - h.b2) * gi * gi;
        let pi = p0[i] - (h.lr / h.bc1 * mi / (vi.sqrt() / h.bc2_sqrt + h.eps) + h.decay * p0[i]);
        assert_eq!([p[i], m[i], v[i]].map(f32::to_bits), [pi, mi, vi].map(f32::to_bits), "adam {i}");
    }
}

/// The CPU's one-pass RMSprop gives the bits of the composition of Adam and SGD kernels
/// that a GPU runs (`backend::rmsprop_composed`), without and with momentum and weight
/// decay, three steps over a piece of the arena with a tail, with two threads (the pool's
/// parts); and the composition's scratch starts dirty, as an earlier tensor leaves it.
#[test]
fn one_pass_rmsprop_gives_the_bits_of_the_composed_kernels() {
    use crate::device::backend::{rmsprop_composed, rmsprop_scratch_count};
    let n = 1000 + 13;
    let f = |s: f32| (0..n + 7).map(move |i| (i as f32 * 0.731 + s).sin() * 0.3 + 0.01).collect::<Vec<_>>();
    let pr = 3..n + 3;
    for (l2, momentum) in [(0.0, 0.0), (1e-3, 0.0), (0.0, 0.9), (1e-3, 0.9)] {
        let h = RmspropHyper { lr: 1e-3, grad_scale: 0.5, rho: 0.9, eps: 1e-7, l2, momentum };
        let (mut pa, mut pb) = (f(1.0), f(1.0));
        let (mut va, mut vb) = (vec![0.0f32; n], vec![0.0f32; n]);
        let (mut ma, mut mb) = (f(3.0)[..n].to_vec(), f(3.0)[..n].to_vec());
        let k = rmsprop_scratch_count(momentum > 0.0, l2 > 0.0);
        let mut scratch: Vec<Vec<f32>> = (0..k).map(|_| vec![f32::NAN; n + 5]).collect();
        for step in 0..3 {
            let g = f(2.0 + step as f32);
            let g = &g[..n];
            let (a, b) = (momentum > 0.0).then_some((&mut ma[..], &mut mb[..])).unzip();
            Cpu.rmsprop(&mut pa, pr.clone(), g, &mut va, a, &mut [], &h).unwrap();
            rmsprop_composed(&Cpu, &mut pb, pr.clone(), g, &mut vb, b, &mut scratch, &h).unwrap();
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&pa), bits(&pb), "parameters, l2 {l2} momentum {momentum}");
        assert_eq!(bits(&va), bits(&vb), "v, l2 {l2} momentum {momentum}");
        assert_eq!(bits(&ma), bits(&mb), "momentum buffer, l2 {l2} momentum {momentum}");
        assert_ne!(bits(&pa), bits(&f(1.0)), "nothing moved");
    }
}

fn naive(m: usize, k: usize, n: usize, a: &[f32], ta: Trans, b: &[f32], tb: Trans) -> Vec<f32> {
    let at = |i: usize, p: usize| if ta == Trans::N { a[i * k + p] } else { a[p * m + i] };
    let bt = |p: usize, j: usize| if tb == Trans::N { b[p * n + j] } else { b[j * k + p] };
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    c
}

/// The same as matrixmultiply's product to float32 rounding, on a training step's shapes.
#[test]
fn sgemm_agrees_with_matrixmultiply() {
    if !super::super::sgemm::supported() {
        return;
    }
    for (m, k, n, ta, tb) in [(128, 784, 512, Trans::N, Trans::N), (784, 128, 512, Trans::T, Trans::N)] {
        let g = Gemm::new(m, k, n, ta, tb);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.618 + 4.0).sin() * 3.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.618 + 5.0).sin() * 3.0).collect();
        let (mut ours, mut theirs) = (vec![0.0; m * n], vec![0.0; m * n]);
        super::super::sgemm::gemm(g, &a, &b, &mut ours);
        mm_gemm(g, &a, &b, &mut theirs);
        let worst = ours.iter().zip(&theirs).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f32::max);
        assert!(worst < 1e-4, "{g:?}: {worst}");
    }
}

#[test]
fn gemm_matches_naive_for_every_transpose() {
    let (m, k, n) = (5, 7, 3);
    let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
    for ta in [Trans::N, Trans::T] {
        for tb in [Trans::N, Trans::T] {
            let mut c = vec![1.0; m * n];
            gemm(Gemm::new(m, k, n, ta, tb), &a, &b, &mut c);
            let want = naive(m, k, n, &a, ta, &b, tb);
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "{ta:?}{tb:?}: {x} vs {y}");
            }
        }
    }
}

/// HVTRAIN_BF16_OUTPUTS's reference: the layer's output and GELU's kept pre-activation are
/// the float32 results (from the bias rounded to bf16) rounded to bf16 (to nearest even),
/// element for element; off, the float32 results themselves.
#[test]
fn bf16_outputs_store_the_float32_results_rounded() {
    let (rows, cols) = (3, 7);
    let z0: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.731).sin() * 3.3).collect();
    let bias: Vec<f32> = (0..cols).map(|i| i as f32 * 0.0123 - 0.04).collect();
    // The bias is added rounded to bf16, as cuBLAS's bf16 epilogue reads it.
    let rounded = bf16_bias(&bias);
    assert!(rounded.iter().zip(&bias).filter(|(r, b)| r != b).count() >= cols - 1, "a bias bf16 rounds");
    for act in Activation::ALL {
        let (mut want, mut want_z) = (z0.clone(), vec![0.0; z0.len()]);
        bias_act_forward(&mut want, &rounded, act, Some(&mut want_z));
        let (mut out, mut z) = (z0.clone(), vec![0.0; z0.len()]);
        let be = Cpu { bf16: true, outputs: true, ..Cpu };
        be.bias_act(&mut out, &bias, act, Some(&mut z)).unwrap();
        for (got, w) in out.iter().zip(&want).chain(z.iter().zip(&want_z)) {
            assert_eq!(got.to_bits(), super::super::bf16::round(*w).to_bits(), "{act:?}: {got} from {w}");
        }
        assert!(out.iter().zip(&want).any(|(o, w)| o != w), "{act:?}: nothing was rounded");
        let (mut out, mut z) = (z0.clone(), vec![0.0; z0.len()]);
        Cpu { bf16: true, outputs: false, ..Cpu }.bias_act(&mut out, &bias, act, Some(&mut z)).unwrap();
        let (mut want, mut want_z) = (z0.clone(), vec![0.0; z0.len()]);
        bias_act_forward(&mut want, &bias, act, Some(&mut want_z));
        assert_eq!((out, z), (want, want_z), "{act:?}: without outputs, float32");
    }
}

/// On 3 threads `bias_act` (each part whole rows) and `act_backward` give the bits the
/// plain kernels give over the whole matrix, with the kept pre-activation and bf16
/// outputs, for every activation, on a row count the parts do not divide.
#[test]
fn element_wise_parts_on_threads_give_the_whole_matrix_bits() {
    let (rows, cols) = (2001, 77);
    let v = |len: usize, s: f32| -> Vec<f32> { (0..len).map(|i| (i as f32 * 0.618 + s).sin() * 3.0).collect() };
    let (z0, bias, d0) = (v(rows * cols, 1.0), v(cols, 2.0), v(rows * cols, 3.0));
    for outputs in [false, true] {
        let be = Cpu { bf16: outputs, outputs, ..Cpu };
        for act in Activation::ALL {
            let (mut want, mut want_z) = (z0.clone(), vec![0.0; z0.len()]);
            let b = if outputs { bf16_bias(&bias) } else { bias.clone() };
            bias_act_forward(&mut want, &b, act, Some(&mut want_z));
            if outputs {
                want.iter_mut().chain(&mut want_z).for_each(|x| *x = super::super::bf16::round(*x));
            }
            let mut want_d = d0.clone();
            act_backward_inplace(&mut want_d, &want, Some(&want_z), act);
            super::super::pool::set_threads(3);
            let (mut got, mut got_z) = (z0.clone(), vec![0.0; z0.len()]);
            be.bias_act(&mut got, &bias, act, Some(&mut got_z)).unwrap();
            let mut got_d = d0.clone();
            be.act_backward(&mut got_d, &got, Some(&got_z), act).unwrap();
            let mut plain = z0.clone();
            be.bias_act(&mut plain, &bias, act, None).unwrap();
            super::super::pool::set_threads(1);
            assert_eq!((&got, &got_z), (&want, &want_z), "{act:?} outputs {outputs}");
            assert_eq!(got_d, want_d, "{act:?} outputs {outputs}: backward");
            assert_eq!(plain, want, "{act:?} outputs {outputs}: without the kept pre-activation");
        }
    }
}

/// bf16 on the tile kernel (here its emulated unit): `dense` applies bias, activation, kept
/// pre-activation and bf16 outputs where the blocks are stored, and gives bit for bit what
/// the product followed by `bias_act` gives, for every activation, with and without bf16
/// outputs, on a shape with edge blocks on both sides.
#[test]
fn dense_on_tiles_fuses_bias_act_bit_for_bit() {
    let (m, k, n) = (45, 70, 37);
    let g = Gemm::new(m, k, n, Trans::N, Trans::N);
    let v = |len: usize, s: f32| -> Vec<f32> { (0..len).map(|i| (i as f32 * 0.618 + s).sin() * 3.0).collect() };
    let (x, w, bias) = (v(m * k, 1.0), v(k * n, 2.0), v(n, 3.0));
    for outputs in [false, true] {
        let be = Cpu { bf16: true, kernel: Bf16Kernel::Emulated, outputs, ..Cpu };
        for act in Activation::ALL {
            let (mut want, mut want_z) = (vec![0.0; m * n], vec![0.0; m * n]);
            be.gemm(g, &x, &w, &mut want).unwrap();
            be.bias_act(&mut want, &bias, act, Some(&mut want_z)).unwrap();
            let (mut got, mut got_z) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            be.dense(g, &x, &w, &mut got, m * n, &bias, act, Some(&mut got_z)).unwrap();
            assert_eq!(got, want, "{act:?} outputs {outputs}");
            assert_eq!(got_z, want_z, "{act:?} outputs {outputs}: kept pre-activation");
        }
    }
}

#[test]
fn softmax_xent_of_uniform_logits_is_log_k() {
    let logits = vec![0.0f32; 2 * 4];
    let mut d = vec![0.0; 8];
    let (loss, _) = softmax_xent(&logits, &[1, 3], None, None, 4, 0.0, 0.5, Some(&mut d));
    assert!((loss / 2.0 - 4f64.ln()).abs() < 1e-6);
    assert!((d[1] - 0.5 * (0.25 - 1.0)).abs() < 1e-6 && (d[0] - 0.125).abs() < 1e-6);
}

/// Label smoothing as Keras' and PyTorch's: p = (1/4, 3/4), label 1, ε = 0.2: the target
/// (0.1, 0.9), the loss −(0.1·ln ¼ + 0.9·ln ¾) and the gradient p − target.
#[test]
fn label_smoothing_targets_the_smoothed_distribution() {
    let logits = [0.0f32, 3f32.ln()];
    let mut d = [0.0f32; 2];
    let (loss, correct) = softmax_xent(&logits, &[1], None, None, 2, 0.2, 1.0, Some(&mut d));
    let want = -(0.1 * 0.25f64.ln() + 0.9 * 0.75f64.ln());
    assert!((loss - want).abs() < 1e-6, "loss {loss} vs {want}");
    assert_eq!(correct, 1);
    assert!((d[0] - 0.15).abs() < 1e-6 && (d[1] + 0.15).abs() < 1e-6, "{d:?}");
    // ε = 1: the uniform target, whatever the label.
    let (mut d0, mut d1) = ([0.0f32; 2], [0.0f32; 2]);
    let (l0, _) = softmax_xent(&logits, &[0], None, None, 2, 1.0, 1.0, Some(&mut d0));
    let (l1, _) = softmax_xent(&logits, &[1], None, None, 2, 1.0, 1.0, Some(&mut d1));
    assert_eq!((l0, d0), (l1, d1));
}

/// The element-wise regression losses row by row against Keras 3.15's own functions
/// (`keras.losses.log_cosh`, `mean_absolute_percentage_error`, `mean_squared_logarithmic_error`
/// on these rows, float32), targets at 0 and below MSLE's floor among them; the pinball loss
/// against its definition.
#[test]
fn regression_losses_give_keras_values() {
    let t = [0.5f32, -2.0, 3.0, 10.0, 0.0, 1e-3];
    let p = [0.7f32, -1.0, 0.1, 7.5, 0.2, -0.5];
    let keras: [(Pointwise, [f64; 2]); 3] = [
        (Pointwise::LogCosh, [0.8878416419029236, 0.6513378024101257]),
        (Pointwise::Mape, [62.222225189208984, 66683376.0]),
        (Pointwise::Msle, [0.5607686042785645, 0.03323933482170105]),
    ];
    for (f, want) in keras {
        for r in 0..2 {
            let (got, _) = loss::pointwise_loss(f, &p[r * 3..][..3], &t[r * 3..][..3], None, 3, 1.0, None);
            assert!((got - want[r]).abs() <= 1e-6 * want[r], "{f:?} row {r}: {got}, Keras {}", want[r]);
        }
    }
    // τ = 0.9: under-predicting costs 0.9 per unit, over-predicting 0.1.
    let (got, _) = loss::pointwise_loss(Pointwise::Quantile(0.9), &p[..3], &t[..3], None, 3, 1.0, None);
    let want = (0.1 * 0.2 + 0.1 * 1.0 + 0.9 * 2.9) / 3.0;
    assert!((got - want).abs() < 1e-7, "pinball {got} vs {want}");
}
