//! The conformance suite run on the CPU reference backend (each check, and `suite` catching a
//! backend broken on purpose), and the CPU's activations against their float64 definitions.
//!
//! Must not: need a GPU (CUDA runs the same suite through `hvtrain selftest` and the unit
//! tests when present).

use super::*;
use crate::device::backend::{AdamHyper, Mask, Pointwise, SgdHyper};
use crate::device::{cpu, Cpu};

/// Each activation's forward at a few points against its definition in float64 (Keras' and
/// PyTorch's: SiLU z·σ(z), softplus log(1 + e^z), ELU α = 1, SELU's α and λ, leaky slope 0.2),
/// and its derivative in z (`act_grad_z`) against a difference quotient of the float64 forward.
#[test]
fn activations_match_their_definitions() {
    let def = act_ref;
    for act in Activation::ALL.into_iter().filter(|a| a.needs_z() && *a != Activation::Gelu) {
        for &z in &[-30.0f32, -5.0, -1.5, -0.3, -1e-4, 1e-4, 0.3, 1.5, 5.0, 30.0] {
            let mut v = [z];
            cpu::act_forward_inplace(&mut v, act);
            let want = def(act, z as f64);
            assert!((v[0] as f64 - want).abs() <= 2e-7 * want.abs().max(1e-3), "{act:?}({z}) = {}, want {want}", v[0]);
            let h = 1e-5 * (z.abs() as f64).max(1.0);
            let num = (def(act, z as f64 + h) - def(act, z as f64 - h)) / (2.0 * h);
            let got = cpu::act_grad_z(act, z) as f64;
            assert!((got - num).abs() <= 1e-5 * num.abs().max(1e-3), "{act:?}'({z}) = {got}, want {num}");
        }
    }
    // Softplus does not overflow where e^z does, and stays positive far below 0 (vmath's exp
    // stops at e^-87.3, 1.2e-38, where the true value is subnormal: 3.7e-44 at -100).
    assert_eq!(cpu::softplus(100.0), 100.0);
    assert!(cpu::softplus(-100.0) > 0.0 && cpu::softplus(-100.0) < 1.3e-38);
}

#[test]
fn cpu_gemm() {
    gemm(&Cpu);
}
/// The CPU's bf16 products pass the check, and the float32 ones (which do not round the
/// operands) fail it: the check can tell.
#[test]
fn cpu_bf16_gemm() {
    if !crate::device::bf16::supported() {
        return;
    }
    gemm_bf16(&Cpu::new(crate::config::Precision::Bf16).unwrap());
    let fp32 = std::panic::catch_unwind(|| gemm_bf16(&Cpu));
    assert!(fp32.is_err(), "float32 products passed the bf16 check");
}
#[test]
fn cpu_elementwise() {
    elementwise(&Cpu);
}
#[test]
fn cpu_dense() {
    dense(&Cpu);
}
#[test]
fn cpu_losses() {
    losses(&Cpu);
}
#[test]
fn cpu_dropout() {
    dropout(&Cpu);
}
#[test]
fn cpu_optimizers() {
    optimizers(&Cpu);
}
#[test]
fn cpu_memory() {
    memory(&Cpu);
}
#[test]
fn cpu_half() {
    half(&Cpu);
}
#[test]
fn cpu_suite_passes_and_catches_failures() {
    let r = suite(&Cpu, 1e-4);
    assert!(r.iter().all(|(_, r)| r.is_ok()), "{r:?}");
    assert_eq!(r.len(), 9);
    // A backend with one wrong operation (Nesterov's look-ahead dropped, a slightly wrong
    // GELU): the suite names exactly the checks that cover it.
    let r = suite(&Broken, 1e-4);
    let failed: Vec<&str> = r.iter().filter(|(_, r)| r.is_err()).map(|(n, _)| *n).collect();
    assert_eq!(
        failed,
        [
            "element-wise (bias + activation, activation backward, column sums)",
            "dense layer (forward, and backward into it; fused where the backend fuses)",
            "optimizers (SGD, momentum, Nesterov, Adam, AdamW; fused over tensors; RMSprop)",
            "model (gradient checks, one step against the CPU)"
        ],
        "{r:?}"
    );
}

/// The CPU backend with two planted bugs, to show the suite catches them.
struct Broken;

impl Backend for Broken {
    type Buf = Vec<f32>;
    type Labels = Vec<i32>;
    type View<'a> = &'a [f32];
    type ViewMut<'a> = &'a mut [f32];
    fn name(&self) -> String {
        "broken cpu".into()
    }
    fn zeros(&self, n: usize) -> crate::error::Result<Vec<f32>> {
        Cpu.zeros(n)
    }
    fn upload(&self, h: &[f32]) -> crate::error::Result<Vec<f32>> {
        Cpu.upload(h)
    }
    fn upload_into(&self, h: &[f32], b: &mut Vec<f32>) -> crate::error::Result<()> {
        Cpu.upload_into(h, b)
    }
    fn upload_labels(&self, h: &[i32], b: &mut Vec<i32>) -> crate::error::Result<()> {
        Cpu.upload_labels(h, b)
    }
    fn labels(&self, n: usize) -> crate::error::Result<Vec<i32>> {
        Cpu.labels(n)
    }
    fn download(&self, b: &Vec<f32>, r: std::ops::Range<usize>, h: &mut [f32]) -> crate::error::Result<()> {
        Cpu.download(b, r, h)
    }
    fn len(&self, b: &Vec<f32>) -> usize {
        b.len()
    }
    fn fill_zero(&self, v: &mut [f32]) -> crate::error::Result<()> {
        Cpu.fill_zero(v)
    }
    fn gather_rows(&self, s: &[f32], c: usize, i: &Vec<i32>, r: usize, d: &mut [f32]) -> crate::error::Result<()> {
        Cpu.gather_rows(s, c, i, r, d)
    }
    fn view<'a>(&self, b: &'a Vec<f32>, r: std::ops::Range<usize>) -> &'a [f32] {
        &b[r]
    }
    fn view_mut<'a>(&self, b: &'a mut Vec<f32>, r: std::ops::Range<usize>) -> &'a mut [f32] {
        &mut b[r]
    }
    fn gemm(&self, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) -> crate::error::Result<()> {
        Cpu.gemm(g, a, b, c)
    }
    fn bias_act(
        &self,
        out: &mut [f32],
        bias: &[f32],
        act: Activation,
        z: Option<&mut [f32]>,
    ) -> crate::error::Result<()> {
        Cpu.bias_act(out, bias, act, z)?;
        if act == Activation::Gelu {
            out.iter_mut().for_each(|v| *v *= 1.001); // planted bug
        }
        Ok(())
    }
    fn act_backward(&self, d: &mut [f32], a: &[f32], z: Option<&[f32]>, act: Activation) -> crate::error::Result<()> {
        Cpu.act_backward(d, a, z, act)
    }
    fn column_sums(&self, m: &[f32], cols: usize, beta: f32, out: &mut [f32]) -> crate::error::Result<()> {
        Cpu.column_sums(m, cols, beta, out)
    }
    fn softmax_xent(
        &self,
        l: &[f32],
        y: &Vec<i32>,
        w: Option<&[f32]>,
        rw: Option<&[f32]>,
        k: usize,
        eps: f32,
        s: f32,
        d: Option<&mut [f32]>,
    ) -> crate::error::Result<(f64, usize)> {
        Cpu.softmax_xent(l, y, w, rw, k, eps, s, d)
    }
    fn pointwise_loss(
        &self,
        f: Pointwise,
        p: &[f32],
        t: &[f32],
        rw: Option<&[f32]>,
        k: usize,
        s: f32,
        d: Option<&mut [f32]>,
    ) -> crate::error::Result<(f64, usize)> {
        Cpu.pointwise_loss(f, p, t, rw, k, s, d)
    }
    fn softmax(&self, v: &mut [f32], k: usize) -> crate::error::Result<()> {
        Cpu.softmax(v, k)
    }
    fn dropout(&self, v: &mut [f32], c: usize, keys: &Vec<i32>, m: Mask) -> crate::error::Result<()> {
        Cpu.dropout(v, c, keys, m)
    }
    fn round_half(&self, v: &mut [f32], kind: crate::config::Compression) -> crate::error::Result<()> {
        Cpu.round_half(v, kind)
    }
    fn sgd(&self, p: &mut [f32], g: &[f32], m: Option<&mut [f32]>, h: &SgdHyper) -> crate::error::Result<()> {
        Cpu.sgd(p, g, m, &SgdHyper { nesterov: false, ..*h }) // planted bug: Nesterov ignored
    }
    fn adam(&self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], h: &AdamHyper) -> crate::error::Result<()> {
        Cpu.adam(p, g, m, v, h)
    }
}

/// The same suite on the GPU when there is one; without one it says so and passes (the
/// GPU check, `run-gpu-check.sh`, runs it on a real GPU through `hvtrain selftest`).
#[test]
fn cuda_suite() {
    let n = match crate::device::cuda::probe() {
        Ok(n) => n,
        Err(why) => {
            eprintln!("skipped: no GPU ({why})");
            return;
        }
    };
    let be = crate::device::cuda::Cuda::new(0, crate::config::Precision::Fp32).expect("open GPU 0");
    let failed: Vec<_> = suite(&be, 1e-4).into_iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.is_empty(), "on {} ({n} GPU(s)): {failed:?}", be.name());
}
