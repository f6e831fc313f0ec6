//! Gradient checks on the CPU (the checks themselves are in `gradcheck.rs`, shared with
//! `hvtrain selftest`), and the model's layout invariants.
//!
//! Must not: need a GPU (CUDA runs the same checks through `gradcheck.rs` when present).

use super::gradcheck::check;
use super::*;
use crate::config::LossKind;
use crate::device::{cpu, Cpu};
use crate::rng::Rng;

#[test]
fn gradcheck_relu_xent() {
    check(&Cpu, Activation::Relu, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_tanh_xent() {
    check(&Cpu, Activation::Tanh, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_gelu_xent() {
    check(&Cpu, Activation::Gelu, LossKind::SoftmaxCrossEntropy);
}
#[test]
fn gradcheck_identity_mse() {
    check(&Cpu, Activation::Identity, LossKind::Mse);
}
#[test]
fn gradcheck_tanh_mse() {
    check(&Cpu, Activation::Tanh, LossKind::Mse);
}
#[test]
fn gradcheck_gelu_mse() {
    check(&Cpu, Activation::Gelu, LossKind::Mse);
}

#[test]
fn gradcheck_tanh_mae() {
    check(&Cpu, Activation::Tanh, LossKind::Mae);
}
#[test]
fn gradcheck_tanh_huber_both_branches() {
    // δ = 0.3: some of the outputs' errors fall inside δ, some beyond.
    check(
        &Cpu,
        Activation::Tanh,
        crate::config::Loss { kind: LossKind::Huber, huber_delta: 0.3, quantile: 0.5, label_smoothing: 0.0 },
    );
}
#[test]
fn gradcheck_label_smoothing() {
    for eps in [0.1, 1.0] {
        let loss = crate::config::Loss {
            kind: LossKind::SoftmaxCrossEntropy,
            huber_delta: 1.0,
            quantile: 0.5,
            label_smoothing: eps,
        };
        check(&Cpu, Activation::Tanh, loss);
    }
}
#[test]
fn gradcheck_relu_binary_cross_entropy() {
    check(&Cpu, Activation::Relu, LossKind::BinaryCrossEntropy);
}

#[test]
fn gradcheck_every_activation_xent_and_mse() {
    for act in Activation::ALL {
        check(&Cpu, act, LossKind::SoftmaxCrossEntropy);
        check(&Cpu, act, LossKind::Mse);
    }
}

#[test]
fn gradcheck_with_dropout_every_activation() {
    for act in Activation::ALL {
        super::gradcheck::check_with_dropout(&Cpu, act, LossKind::SoftmaxCrossEntropy, &[0.4, 0.25]);
    }
}

#[test]
fn gradcheck_an_activation_per_hidden_layer() {
    use Activation::*;
    // Each layer's own: an activation that needs z (gelu, elu) beside ones that read the
    // output (tanh, relu), in both orders; with dropout, tanh's kept outputs are rescaled on
    // its own layer only.
    for acts in [vec![Tanh, Gelu], vec![Gelu, Tanh], vec![Relu, Elu], vec![Sigmoid, Identity]] {
        check(&Cpu, acts.clone(), LossKind::SoftmaxCrossEntropy);
        check(&Cpu, acts.clone(), LossKind::Mse);
        super::gradcheck::check_with_dropout(&Cpu, acts, LossKind::SoftmaxCrossEntropy, &[0.4, 0.25]);
    }
}

#[test]
fn each_hidden_layer_applies_its_own_activation() {
    // [3, 3, 3, 2] with identity weights and zero biases: the first hidden layer's output is
    // act0(x), the second's act1(act0(x)).
    let m = Mlp::new(&[3, 3, 3, 2], vec![Activation::Relu, Activation::Tanh], LossKind::Mse);
    assert_eq!((m.act(0), m.act(1), m.out_act(2)), (Activation::Relu, Activation::Tanh, Activation::Identity));
    let mut p = vec![0.0f32; m.n_params];
    for s in &m.layers {
        for i in 0..s.inp.min(s.out) {
            p[s.w.start + i * s.out + i] = 1.0;
        }
    }
    let x = [-1.0f32, 0.5, 2.0];
    let pb = Cpu.upload(&p).unwrap();
    let xb = Cpu.upload(&x).unwrap();
    let mut ws = Workspace::new(&Cpu, &m, 1).unwrap();
    m.forward(&Cpu, &pb, &xb, 1, &mut ws).unwrap();
    let mut h2 = vec![0.0f32; 3];
    Cpu.download(&ws.a[1], 0..3, &mut h2).unwrap();
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0).tanh()).collect();
    assert_eq!(h2, want, "relu then tanh");
    // A stage holding layers 1..3 of the same model takes the second activation for its
    // first layer (its `first` offsets the list).
    let stage = Mlp::stage(&[3, 3, 3, 2], vec![Activation::Relu, Activation::Tanh], LossKind::Mse, 1..3);
    assert_eq!(stage.act(0), Activation::Tanh);
    let first = Mlp::stage(&[3, 3, 3, 2], vec![Activation::Relu, Activation::Tanh], LossKind::Mse, 0..1);
    assert_eq!((first.act(0), first.out_act(0)), (Activation::Relu, Activation::Relu));
    assert_eq!(m.act_names(), "relu,tanh");
    assert_eq!(Mlp::new(&[3, 3, 3, 2], Activation::Gelu, LossKind::Mse).act_names(), "gelu");
}

#[test]
fn dropout_drops_in_training_and_not_in_evaluation() {
    let m = Mlp::new(&[5, 64, 3], Activation::Tanh, LossKind::Mse);
    let p = Cpu.upload(&m.init_params(1)).unwrap();
    let x = Cpu.upload(&(0..8 * 5).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>()).unwrap();
    let hidden = |rates: &[f32], step: u64| {
        let mut ws = Workspace::new(&Cpu, &m, 8).unwrap();
        ws.enable_dropout(&Cpu, rates, 4).unwrap();
        ws.set_rows(&Cpu, &(0..8).collect::<Vec<_>>(), step).unwrap();
        m.forward(&Cpu, &p, &x, 8, &mut ws).unwrap();
        ws.a[0].clone()
    };
    let plain = hidden(&[], 1);
    let dropped = hidden(&[0.5], 1);
    let zeros = dropped.iter().filter(|&&v| v == 0.0).count();
    assert!((150..362).contains(&zeros), "half of 512 units dropped, got {zeros}");
    for (a, b) in plain.iter().zip(&dropped) {
        assert!(*b == 0.0 || (b - 2.0 * a).abs() <= 1e-6 * a.abs(), "kept units are scaled by 2: {a} -> {b}");
    }
    assert_eq!(dropped, hidden(&[0.5], 1), "the same step and rows, the same mask");
    assert_ne!(dropped, hidden(&[0.5], 2), "another step, another mask");
}

#[test]
fn gelu_derivative_matches_difference_quotient() {
    for &x in &[-3.0f32, -1.0, -0.1, 0.0, 0.4, 2.5] {
        let h = 1e-3;
        let num = (cpu::gelu(x + h) - cpu::gelu(x - h)) / (2.0 * h);
        assert!((num - cpu::gelu_grad(x)).abs() < 2e-3, "x={x}: {num} vs {}", cpu::gelu_grad(x));
    }
}

#[test]
fn arena_is_in_backward_order_dense_and_every_weight_aligned() {
    let m = Mlp::new(&[784, 512, 512, 10], Activation::Relu, LossKind::SoftmaxCrossEntropy);
    assert_eq!(m.n_logical(), 669_706);
    let t = m.tensors();
    assert_eq!(t[0].name, "dense2/weight");
    assert_eq!(t[0].range.start, 0);
    for w in t.windows(2) {
        assert_eq!(w[0].range.end, w[1].range.start);
    }
    assert_eq!(t.last().unwrap().range.end, m.n_params);
    // Without padding dense1/weight would start at 5130 floats (8 bytes off 16): cuBLAS's
    // align1 kernels. Each layer's slot starts on 256 bytes.
    for s in &m.layers {
        assert_eq!(s.w.start % crate::model::ARENA_ALIGN, 0, "{s:?}");
    }
    assert_eq!(m.layers[1].w.start, 5184);
    assert_eq!(t.iter().map(|t| t.used).sum::<usize>(), m.n_logical());
    // The padding is invisible to the stored form: unpad ∘ pad is the identity.
    let logical: Vec<f32> = (0..m.n_logical()).map(|i| i as f32).collect();
    let arena = m.pad(&logical).unwrap();
    assert_eq!(arena[m.layers[2].b.end..m.layers[1].w.start], vec![0.0; 5184 - 5130][..]);
    assert_eq!(m.unpad(&arena), logical);
    assert!(m.pad(&logical[1..]).is_none());
}

/// Any rank's pieces drawn alone (`init_pieces`: pieces starting and ending inside weights,
/// biases, across tensors, one value long, empty) are the whole model's values there, and
/// the whole model is the per-layer streams of draws written out (the reference here, as
/// `init_params` was before pieces).
#[test]
fn pieces_drawn_alone_are_the_whole_models_values() {
    // Widths whose tensors are padded in the arena (zeros between them).
    let m = Mlp::new(&[20, 30, 7, 4], Activation::Relu, LossKind::SoftmaxCrossEntropy);
    assert!(m.layers[1].b.end < m.layers[0].w.start, "no padding to cross");
    let mut whole = vec![0.0f32; m.n_params];
    for (l, s) in m.layers.iter().enumerate() {
        let mut rng = Rng::new(9, 0x1A7E_0000 + l as u64);
        let limit = (6.0 / (s.inp + s.out) as f64).sqrt();
        for w in &mut whole[s.w.clone()] {
            *w = ((rng.uniform() * 2.0 - 1.0) * limit) as f32;
        }
    }
    assert_eq!(m.init_params(9), whole);
    let n = m.n_params;
    let cuts: [&[std::ops::Range<usize>]; 6] = [
        &[0..n],
        &[3..17, 17..18, 40..41, 200..n - 5],
        &[m.layers[1].b.clone(), m.layers[0].w.start + 1..m.layers[0].b.end - 1],
        &[5..5, 100..400, n - 1..n],
        &[m.layers[2].w.start..m.layers[0].w.start + 3],
        &[300..310, 10..20, 305..306],
    ];
    for pieces in cuts {
        let want: Vec<f32> = pieces.iter().flat_map(|r| whole[r.clone()].to_vec()).collect();
        assert_eq!(m.init_pieces(9, pieces.iter().cloned()), want, "{pieces:?}");
    }
}

/// Every `model.init` as Keras' `VarianceScaling` draws it: the variance asked for (within 3 %
/// on 120,000 draws), uniform ones inside ±√(3·variance), normal ones cut at 2σ/0.8796 and with
/// more values near 0 than a uniform; pieces drawn alone are the whole model's values.
#[test]
fn every_init_has_its_variance_and_bounds() {
    use crate::config::Init;
    for init in [
        Init::GlorotUniform,
        Init::GlorotNormal,
        Init::HeUniform,
        Init::HeNormal,
        Init::LecunUniform,
        Init::LecunNormal,
    ] {
        let mut m = Mlp::new(&[400, 300, 3], Activation::Relu, LossKind::SoftmaxCrossEntropy);
        m.init = init;
        let p = m.init_params(4);
        let w = &p[m.layers[0].w.clone()];
        let var: f64 = w.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / w.len() as f64;
        let mean: f64 = w.iter().map(|&v| v as f64).sum::<f64>() / w.len() as f64;
        let want = init.variance(400, 300);
        assert!((var / want - 1.0).abs() < 0.03, "{init:?}: variance {var}, want {want}");
        assert!(mean.abs() < 0.02 * want.sqrt(), "{init:?}: mean {mean}");
        let max = w.iter().fold(0.0f32, |a, &v| a.max(v.abs())) as f64;
        let near0 = w.iter().filter(|&&v| (v as f64).abs() < 0.5 * want.sqrt()).count() as f64 / w.len() as f64;
        if init.normal() {
            assert!(max <= 2.0 * want.sqrt() / 0.879_625_661_034_239_8 * (1.0 + 1e-6), "{init:?}: max {max}");
            // The cut and widened normal puts 35.6 % of its values within σ/2 of 0, a uniform
            // of that variance 28.9 %.
            assert!(near0 > 0.345, "{init:?}: {near0} within σ/2");
        } else {
            assert!(max <= (3.0 * want).sqrt(), "{init:?}: max {max}");
            assert!(near0 < 0.30, "{init:?}: {near0} within σ/2");
        }
        assert!(p[m.layers[0].b.clone()].iter().all(|&b| b == 0.0), "{init:?}: biases start at 0");
        let cut = [5..9, m.layers[1].w.start..m.layers[1].w.start + 7, 1000..1001];
        let want: Vec<f32> = cut.iter().flat_map(|r| p[r.clone()].to_vec()).collect();
        assert_eq!(m.init_pieces(4, cut.iter().cloned()), want, "{init:?}: pieces drawn alone");
    }
}

#[test]
fn init_is_seeded_and_glorot_bounded() {
    let m = Mlp::new(&[20, 30, 4], Activation::Relu, LossKind::SoftmaxCrossEntropy);
    let a = m.init_params(5);
    assert_eq!(a, m.init_params(5));
    assert_ne!(a, m.init_params(6));
    let lim = (6.0f32 / 50.0).sqrt();
    assert!(a[m.layers[0].w.clone()].iter().all(|w| w.abs() <= lim));
    assert!(a[m.layers[0].b.clone()].iter().all(|&b| b == 0.0));
}

/// `steps_agree` (what `hvtrain selftest` runs on a GPU for the bf16 copies): a backend
/// against itself agrees exactly, and a difference of precision (bf16 products against
/// float32) is far above the 1e-4 the selftest allows.
#[test]
fn steps_agree_is_zero_for_the_same_products_and_sees_a_precision_change() {
    use super::gradcheck::steps_agree;
    assert_eq!(steps_agree(&Cpu, &Cpu, 4), 0.0);
    if !crate::device::bf16::supported() {
        eprintln!("skipped the bf16 half: this CPU lacks AVX512-BF16");
        return;
    }
    let bf16 = Cpu::new(crate::config::Precision::Bf16).unwrap();
    let rel = steps_agree(&bf16, &Cpu, 4);
    eprintln!("bf16 against float32 products: {rel:.1e} norm-wise");
    assert!(rel > 1e-3, "bf16 against float32 products: {rel:.1e}");
}

/// Gradients written into one arena by tensor range (the loss-weighting tests' sink).
struct Arena<'a>(&'a mut Vec<f32>, Vec<Range<usize>>);
impl GradSink<Cpu> for Arena<'_> {
    fn slot(&mut self, t: usize) -> &mut [f32] {
        &mut self.0[self.1[t].clone()]
    }
    fn ready(&mut self, _t: usize) {}
}

/// `model.class_weights` through the model: a batch whose rows weigh w (class weights 2, 0
/// and 3) gives the loss and gradients of a batch holding each row w times, unweighted.
#[test]
fn class_weights_weigh_each_row_as_that_many_copies() {
    let m = Mlp::new(&[5, 7, 3], Activation::Tanh, LossKind::SoftmaxCrossEntropy);
    let p = m.init_params(4);
    // (loss sum, gradients) of rows `x` with `labels`, each row's gradient × 1/4.
    let run = |x: &[f32], labels: &[i32], weights: Option<&[f32]>| {
        let b = labels.len();
        let mut ws = Workspace::new(&Cpu, &m, b).unwrap();
        m.forward(&Cpu, &p, &x.to_vec(), b, &mut ws).unwrap();
        let labels = labels.to_vec();
        let (loss, _) = m.loss(&Cpu, Targets::Classes(&labels, weights, None), b, 0.25, &mut ws, true).unwrap();
        let mut g = vec![0.0; m.n_params];
        let ranges = m.tensors().into_iter().map(|t| t.range).collect();
        m.backward(&Cpu, &p, &x.to_vec(), b, &mut ws, &mut Arena(&mut g, ranges)).unwrap();
        (loss, g)
    };
    let x: Vec<f32> = (0..4 * 5).map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0).collect();
    let labels = [0, 2, 1, 2];
    let weights = [2.0f32, 0.0, 3.0];
    let (loss, g) = run(&x, &labels, Some(&weights));
    let (mut xs, mut ls) = (Vec::new(), Vec::new());
    for (r, &y) in labels.iter().enumerate() {
        for _ in 0..weights[y as usize] as usize {
            xs.extend_from_slice(&x[r * 5..(r + 1) * 5]);
            ls.push(y);
        }
    }
    let (want_loss, want) = run(&xs, &ls, None);
    assert!((loss - want_loss).abs() < 1e-5 * want_loss, "weighted loss {loss} vs copies {want_loss}");
    for (i, (a, b)) in g.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "param {i}: weighted {a} vs copies {b}");
    }
    let (_, plain) = run(&x, &labels, None);
    assert!(g.iter().zip(&plain).any(|(a, b)| (a - b).abs() > 1e-3), "the weights changed nothing");
    // Weights of 1 change no bit.
    assert_eq!(run(&x, &labels, Some(&[1.0; 3])).1, plain);
}

/// `data.sample_weight` through the model: rows weighing 2, 0, 3 and 1 give the loss and
/// gradients of a batch holding each row that many times, unweighted; for the softmax
/// (with class weights too: the two multiply, as Keras folds `class_weight` into
/// `sample_weight`) and for squared error. Weights of 1 change no bit.
#[test]
fn sample_weights_weigh_each_row_as_that_many_copies() {
    let x: Vec<f32> = (0..4 * 5).map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0).collect();
    let labels = [0, 2, 1, 2];
    let rw = [2.0f32, 0.0, 3.0, 1.0];
    for loss_kind in [LossKind::SoftmaxCrossEntropy, LossKind::Mse] {
        let m = Mlp::new(&[5, 7, 3], Activation::Tanh, loss_kind);
        let p = m.init_params(4);
        let values = |labels: &[i32]| -> Vec<f32> {
            labels.iter().flat_map(|&y| [y as f32 * 0.5, 1.0 - y as f32, 0.25]).collect()
        };
        // (loss sum, gradients) of rows `x` with `labels` (or their values), class weights
        // `cw`, sample weights `sw`; each row's gradient × 1/4.
        let run = |x: &[f32], labels: &[i32], cw: Option<&[f32]>, sw: Option<&[f32]>| {
            let b = labels.len();
            let mut ws = Workspace::new(&Cpu, &m, b).unwrap();
            m.forward(&Cpu, &p, &x.to_vec(), b, &mut ws).unwrap();
            let (labels, vals) = (labels.to_vec(), values(labels));
            let t = match loss_kind {
                LossKind::Mse => Targets::Values(&vals[..], sw),
                _ => Targets::Classes(&labels, cw, sw),
            };
            let (loss, _) = m.loss(&Cpu, t, b, 0.25, &mut ws, true).unwrap();
            let mut g = vec![0.0; m.n_params];
            let ranges = m.tensors().into_iter().map(|t| t.range).collect();
            m.backward(&Cpu, &p, &x.to_vec(), b, &mut ws, &mut Arena(&mut g, ranges)).unwrap();
            (loss, g)
        };
        let cws: &[Option<&[f32]>] =
            if loss_kind == LossKind::Mse { &[None] } else { &[None, Some(&[1.0, 2.0, 0.5][..])] };
        for &cw in cws {
            let what = format!("{loss_kind:?} class weights {cw:?}");
            let (loss, g) = run(&x, &labels, cw, Some(&rw));
            let (mut xs, mut ls) = (Vec::new(), Vec::new());
            for (r, &y) in labels.iter().enumerate() {
                for _ in 0..rw[r] as usize {
                    xs.extend_from_slice(&x[r * 5..(r + 1) * 5]);
                    ls.push(y);
                }
            }
            let (want_loss, want) = run(&xs, &ls, cw, None);
            assert!((loss - want_loss).abs() < 1e-5 * want_loss, "{what}: weighted loss {loss} vs copies {want_loss}");
            for (i, (a, b)) in g.iter().zip(&want).enumerate() {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{what}: param {i}: weighted {a} vs copies {b}");
            }
            let (_, plain) = run(&x, &labels, cw, None);
            assert!(g.iter().zip(&plain).any(|(a, b)| (a - b).abs() > 1e-3), "{what}: the weights changed nothing");
            assert_eq!(run(&x, &labels, cw, Some(&[1.0; 4])).1, plain, "{what}: weights of 1 changed bits");
        }
    }
}
