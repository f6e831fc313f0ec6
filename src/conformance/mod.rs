//! Conformance tests for the backend seam, written once against `Backend` and run on every
//! backend: each operation on random, odd shapes against a plain f64 reference written here
//! (not the CPU backend's code), with a tolerance that a float32 implementation must meet.
//! A new backend adds one line per test at the bottom.
//!
//! Must not: use a backend's own code as the reference (the references are written here, or the CPU
//! backend for whole steps).

mod bf16;
mod check;
mod dense;
mod losses;
mod optim;

use crate::config::Activation;
use crate::device::backend::{Backend, Gemm, Trans};
use crate::device::cpu::{gelu, gelu_grad};
use crate::rng::Rng;
use check::{close, host, random};
use dense::dense;
use losses::{dropout, losses};
use optim::optimizers;

/// Odd shapes, including 1 and sizes that are not multiples of any vector width.
const SHAPES: [(usize, usize, usize); 5] = [(1, 1, 1), (3, 5, 7), (17, 1, 9), (33, 65, 31), (2, 129, 3)];

fn gemm<B: Backend>(be: &B) {
    gemm_of(be, |x| x as f64, "gemm");
}

/// The products of a backend opened with `precision = "bf16"`: equal to the exact product of
/// the operands rounded to bf16 (nearest even, the `half` crate's rounding), within float32
/// summation. A product that does not round, rounds otherwise or truncates fails.
pub fn gemm_bf16<B: Backend>(be: &B) {
    gemm_of(be, |x| half::bf16::from_f32(x).to_f32() as f64, "bf16 gemm");
}

/// Every transpose of `SHAPES` against the float64 product of the operands as `operand` sees them.
fn gemm_of<B: Backend>(be: &B, operand: fn(f32) -> f64, label: &str) {
    for (seed, &(m, k, n)) in SHAPES.iter().enumerate() {
        for ta in [Trans::N, Trans::T] {
            for tb in [Trans::N, Trans::T] {
                let (a, b, c0) = (random(m * k, seed as u64), random(k * n, 100 + seed as u64), random(m * n, 200));
                let at = |i: usize, p: usize| operand(if ta == Trans::N { a[i * k + p] } else { a[p * m + i] });
                let bt = |p: usize, j: usize| operand(if tb == Trans::N { b[p * n + j] } else { b[j * k + p] });
                let (alpha, beta) = (0.75f32, 0.5f32);
                let want: Vec<f64> = (0..m * n)
                    .map(|ij| {
                        let (i, j) = (ij / n, ij % n);
                        alpha as f64 * (0..k).map(|p| at(i, p) * bt(p, j)).sum::<f64>() + beta as f64 * c0[ij] as f64
                    })
                    .collect();
                let (ad, bd, mut cd) = (be.upload(&a).unwrap(), be.upload(&b).unwrap(), be.upload(&c0).unwrap());
                let (av, bv) = (be.view(&ad, 0..a.len()), be.view(&bd, 0..b.len()));
                be.gemm(Gemm::new(m, k, n, ta, tb).alpha(alpha).beta(beta), av, bv, be.view_mut(&mut cd, 0..m * n))
                    .unwrap();
                close(&host(be, &cd, m * n), &want, 1e-5, &format!("{label} {m}x{k}x{n} {ta:?}{tb:?}"));
            }
        }
    }
}

/// act(z) in float64 as Keras and PyTorch define each activation (GELU's tanh approximation as
/// the CPU's float32 formula).
fn act_ref(act: Activation, z: f64) -> f64 {
    let (alpha, lambda) = (1.6732632423543772, 1.0507009873554805);
    match act {
        Activation::Identity => z,
        Activation::Relu => z.max(0.0),
        Activation::Tanh => z.tanh(),
        Activation::Gelu => gelu(z as f32) as f64,
        Activation::Silu => z / (1.0 + (-z).exp()),
        Activation::Sigmoid => 1.0 / (1.0 + (-z).exp()),
        Activation::Softplus => z.exp().ln_1p(),
        Activation::Elu => {
            if z > 0.0 {
                z
            } else {
                z.exp() - 1.0
            }
        }
        Activation::Selu => lambda * if z > 0.0 { z } else { alpha * (z.exp() - 1.0) },
        Activation::LeakyRelu => {
            if z > 0.0 {
                z
            } else {
                0.2 * z
            }
        }
    }
}

/// act'(z) in float64 (GELU's as the CPU's float32 formula: the tanh approximation's own).
fn act_deriv_ref(act: Activation, z: f64) -> f64 {
    let s = 1.0 / (1.0 + (-z).exp());
    match act {
        Activation::Identity => 1.0,
        Activation::Relu => f64::from(u8::from(z > 0.0)),
        Activation::Tanh => 1.0 - z.tanh().powi(2),
        Activation::Gelu => gelu_grad(z as f32) as f64,
        Activation::Silu => s + z * s * (1.0 - s),
        Activation::Sigmoid => s * (1.0 - s),
        Activation::Softplus => s,
        Activation::Elu => {
            if z > 0.0 {
                1.0
            } else {
                z.exp()
            }
        }
        Activation::Selu => 1.0507009873554805 * if z > 0.0 { 1.0 } else { 1.6732632423543772 * z.exp() },
        Activation::LeakyRelu => {
            if z > 0.0 {
                1.0
            } else {
                0.2
            }
        }
    }
}

fn elementwise<B: Backend>(be: &B) {
    for act in Activation::ALL {
        for &(rows, cols) in &[(1usize, 1usize), (7, 13), (33, 5)] {
            let (x, bias, d) = (random(rows * cols, 1), random(cols, 2), random(rows * cols, 3));
            let z: Vec<f64> = (0..rows * cols).map(|i| x[i] as f64 + bias[i % cols] as f64).collect();
            let mut out = be.upload(&x).unwrap();
            let mut keep = be.zeros(rows * cols).unwrap();
            let bd = be.upload(&bias).unwrap();
            let keep_z = act.needs_z().then(|| be.view_mut(&mut keep, 0..rows * cols));
            be.bias_act(be.view_mut(&mut out, 0..rows * cols), be.view(&bd, 0..cols), act, keep_z).unwrap();
            let a = host(be, &out, rows * cols);
            close(&a, &z.iter().map(|&z| act_ref(act, z)).collect::<Vec<_>>(), 1e-6, &format!("bias_act {act:?}"));
            if act.needs_z() {
                close(&host(be, &keep, rows * cols), &z, 1e-6, "bias_act keeps z");
            }
            // Backward: d * act'(z).
            let want: Vec<f64> = (0..rows * cols).map(|i| d[i] as f64 * act_deriv_ref(act, z[i])).collect();
            let mut dd = be.upload(&d).unwrap();
            let zin = act.needs_z().then(|| be.view(&keep, 0..rows * cols));
            be.act_backward(be.view_mut(&mut dd, 0..rows * cols), be.view(&out, 0..rows * cols), zin, act).unwrap();
            close(&host(be, &dd, rows * cols), &want, 1e-5, &format!("act_backward {act:?}"));
        }
    }
    // Column sums.
    let (rows, cols) = (37, 11);
    let m = random(rows * cols, 4);
    let want: Vec<f64> = (0..cols).map(|j| (0..rows).map(|r| m[r * cols + j] as f64).sum()).collect();
    let md = be.upload(&m).unwrap();
    let mut out = be.upload(&vec![9.0; cols]).unwrap();
    be.column_sums(be.view(&md, 0..rows * cols), cols, 0.0, be.view_mut(&mut out, 0..cols)).unwrap();
    close(&host(be, &out, cols), &want, 1e-5, "column_sums");
    // beta = 1 adds to what is there (gradients accumulated over micro-batches).
    be.column_sums(be.view(&md, 0..rows * cols), cols, 1.0, be.view_mut(&mut out, 0..cols)).unwrap();
    let twice: Vec<f64> = want.iter().map(|v| 2.0 * v).collect();
    close(&host(be, &out, cols), &twice, 1e-5, "column_sums with beta = 1");
    // A batch gathered by index from a data set on the device: exact copies, repeats allowed,
    // only the first `rows` rows of the destination written.
    let (n, cols, rows) = (29, 13, 9);
    let src = random(n * cols, 5);
    let idx: Vec<i32> = vec![28, 0, 3, 3, 17, 11, 1, 27, 5];
    let sd = be.upload(&src).unwrap();
    let mut ix = be.labels(rows + 2).unwrap();
    be.upload_labels(&idx, &mut ix).unwrap();
    let mut dst = be.upload(&vec![9.0; (rows + 1) * cols]).unwrap();
    be.gather_rows(be.view(&sd, 0..n * cols), cols, &ix, rows, be.view_mut(&mut dst, 0..(rows + 1) * cols)).unwrap();
    let mut want: Vec<f64> =
        idx.iter().flat_map(|&i| src[i as usize * cols..][..cols].iter().map(|&v| v as f64)).collect();
    want.extend(std::iter::repeat_n(9.0, cols));
    close(&host(be, &dst, (rows + 1) * cols), &want, 0.0, "gather_rows");
}

fn memory<B: Backend>(be: &B) {
    let h = random(19, 12);
    let mut d = be.zeros(25).unwrap();
    be.upload_into(&h, &mut d).unwrap();
    let mut back = vec![0.0; 5];
    be.download(&d, 3..8, &mut back).unwrap();
    assert_eq!(&back[..], &h[3..8]);
    assert_eq!(be.len(&d), 25);
    // Gradient clipping's sums of squares, against float64 over the same floats.
    let want: f64 = h[3..19].iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let got = be.sum_squares(&d, 3..19).unwrap();
    assert!((got - want).abs() <= 1e-12 * want.max(1.0), "sum of squares {got} vs {want}");
    // Clipping by value: two ranges, two bounds; the rest untouched.
    let mut c = be.upload(&h).unwrap();
    let n = be.clamp(&mut c, &[(2..9, 0.5), (12..19, 0.25)]).unwrap();
    let want: Vec<f32> = (0..19)
        .map(|i| match i {
            2..9 => h[i].clamp(-0.5, 0.5),
            12..19 => h[i].clamp(-0.25, 0.25),
            _ => h[i],
        })
        .collect();
    assert_eq!(host(be, &c, 19), want, "clamp");
    assert_eq!(n, (0..19).filter(|&i| h[i] != want[i]).count(), "clamped count");
    // Longer than a GPU's partial sums cover in one pass (each set several elements), a NaN kept.
    let mut big = random(100_003, 13);
    big[77_777] = f32::NAN;
    let want: f64 = big[1..77_777].iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let mut d = be.upload(&big).unwrap();
    let got = be.sum_squares(&d, 1..77_777).unwrap();
    assert!((got - want).abs() <= 1e-12 * want.max(1.0), "sum of squares of 77,776: {got} vs {want}");
    let n = be.clamp(&mut d, &[(5..100_003, 0.3)]).unwrap();
    let back = host(be, &d, 100_003);
    let mut changed = 0;
    for i in 0..100_003 {
        let w = if i >= 5 && big[i].abs() > 0.3 { 0.3f32.copysign(big[i]) } else { big[i] };
        changed += usize::from(w.to_bits() != big[i].to_bits());
        assert!(back[i].to_bits() == w.to_bits() || (i == 77_777 && back[i].is_nan()), "clamp [{i}]");
    }
    assert_eq!(n, changed, "clamped count of 100,003");
    be.fill_zero(be.view_mut(&mut d, 0..10)).unwrap();
    assert!(host(be, &d, 25)[..10].iter().all(|&v| v == 0.0));
    assert!(!be.name().is_empty());
}

/// fp16/bf16 rounding, bit-exact against the `half` crate (what the CPU path puts on the
/// wire): random bit patterns over the whole float range, and the special values.
fn half<B: Backend>(be: &B) {
    use crate::config::Compression;
    let mut r = Rng::new(17, 3);
    let mut v: Vec<f32> = (0..4099).map(|_| f32::from_bits((r.uniform() * u32::MAX as f64) as u32)).collect();
    v.extend([0.0, -0.0, 1.0, -1.0, 65504.0, 65520.0, 1e6, -1e6, 6e-8, 3e-8, 1e-40, f32::INFINITY, f32::NEG_INFINITY]);
    v.extend([1.0 + 1.0 / 2048.0, 1.0 + 3.0 / 2048.0, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0]); // ties
    for kind in [Compression::Fp16, Compression::Bf16] {
        let mut want = v.clone();
        crate::parallel::compress::round_trip(&mut want, kind);
        let mut d = be.upload(&v).unwrap();
        be.round_half(be.view_mut(&mut d, 0..v.len()), kind).unwrap();
        let got = host(be, &d, v.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{kind:?} of {:e} (#{i}): {g:e} vs {w:e}",
                v[i]
            );
        }
    }
}

/// Through the model: finite-difference gradient checks, and one step's gradients against
/// the CPU backend (`model::gradcheck`).
fn model<B: Backend>(be: &B, tol: f64) {
    use crate::config::LossKind;
    use crate::model::gradcheck;
    for (act, loss) in [
        (Activation::Relu, LossKind::SoftmaxCrossEntropy),
        (Activation::Gelu, LossKind::SoftmaxCrossEntropy),
        (Activation::Tanh, LossKind::Mse),
        (Activation::Tanh, LossKind::Huber),
        (Activation::Relu, LossKind::BinaryCrossEntropy),
        (Activation::Silu, LossKind::Mse),
        (Activation::LeakyRelu, LossKind::SoftmaxCrossEntropy),
    ] {
        gradcheck::check(be, act, loss);
        gradcheck::step_matches_cpu(be, act, loss, tol, tol);
    }
    // One activation per hidden layer: a fused GELU epilogue beside a tanh layer.
    gradcheck::check(be, vec![Activation::Gelu, Activation::Tanh], LossKind::SoftmaxCrossEntropy);
}

/// Every check, each caught and reported: (name, Ok or the failure's message). `step_tol`
/// is the tolerance of the step-against-CPU check (1e-4 for float32; `selftest` checks TF32 apart).
pub fn suite<B: Backend>(be: &B, step_tol: f64) -> Vec<(&'static str, std::result::Result<(), String>)> {
    let checks: Vec<(&'static str, Box<dyn Fn()>)> = vec![
        ("memory (upload, download, views, fill, sums of squares, clamp)", Box::new(|| memory(be))),
        ("gemm (every transpose, odd shapes)", Box::new(|| gemm(be))),
        ("element-wise (bias + activation, activation backward, column sums)", Box::new(|| elementwise(be))),
        ("dense layer (forward, and backward into it; fused where the backend fuses)", Box::new(|| dense(be))),
        ("losses (softmax cross-entropy, MSE, MAE, Huber, binary cross-entropy, log-cosh, MAPE, MSLE, pinball, softmax)", Box::new(|| losses(be))),
        ("dropout (the mask, its rate, column blocks)", Box::new(|| dropout(be))),
        ("optimizers (SGD, momentum, Nesterov, Adam, AdamW; fused over tensors; RMSprop)", Box::new(|| optimizers(be))),
        ("fp16/bf16 packing (bit-exact)", Box::new(|| half(be))),
        ("model (gradient checks, one step against the CPU)", Box::new(|| model(be, step_tol))),
    ];
    checks.into_iter().map(|(name, f)| (name, caught(f))).collect()
}

/// `f`'s value, or the message it panicked with (a failed check's assertion).
pub(super) fn caught<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// `hvtrain selftest`: the suite on this node's backend (`device`), as a table on stdout;
/// with bf16 (a GPU, or a CPU with AVX512-BF16) also the bf16 products, and on a GPU one step
/// with TF32 tensor cores against the CPU. Ok(true) when every check passed.
pub fn selftest(device: crate::config::DeviceChoice) -> crate::error::Result<bool> {
    let (kind, how) = crate::device::select(device, 0)?;
    println!("hvtrain selftest on {how}");
    let mut ok = true;
    let mut report = |name: &str, r: &std::result::Result<(), String>| {
        match r {
            Ok(()) => println!("  ok    {name}"),
            Err(e) => println!("  FAIL  {name}: {e}"),
        }
        ok &= r.is_ok();
    };
    struct Suite;
    impl crate::device::WithBackend<Vec<(&'static str, std::result::Result<(), String>)>> for Suite {
        fn run<B: crate::device::Backend>(
            self,
            be: B,
        ) -> crate::error::Result<Vec<(&'static str, std::result::Result<(), String>)>> {
            println!("  backend: {}", be.name());
            Ok(suite(&be, 1e-4))
        }
    }
    // Quiet the panic messages of failing checks: the table reports them.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let results = crate::device::with_backend(kind, crate::config::Precision::Fp32, Suite);
    std::panic::set_hook(hook);
    for (name, r) in results? {
        report(name, &r);
    }
    if matches!(kind, crate::device::Kind::Cuda(_)) || crate::device::bf16::supported() {
        struct Bf16;
        impl crate::device::WithBackend<std::result::Result<(), String>> for Bf16 {
            fn run<B: crate::device::Backend>(self, be: B) -> crate::error::Result<std::result::Result<(), String>> {
                Ok(caught(|| gemm_bf16(&be)))
            }
        }
        std::panic::set_hook(Box::new(|_| {}));
        let r = crate::device::with_backend(kind, crate::config::Precision::Bf16, Bf16);
        std::panic::set_hook(hook_default());
        report("gemm with bf16 operands (precision = \"bf16\") against the rounded operands' exact product", &r?);
    }
    if kind == crate::device::Kind::Cpu && crate::device::bf16::supported() {
        // The reference the GPU's bf16 outputs are checked against, checked itself.
        let be = crate::device::Cpu::new(crate::config::Precision::Bf16)?.with_outputs(true);
        std::panic::set_hook(Box::new(|_| {}));
        let r = caught(|| bf16::layer(&be));
        std::panic::set_hook(hook_default());
        report("bf16 layer outputs (HVTRAIN_BF16_OUTPUTS) on the CPU reference against the rounded reference", &r);
    }
    if kind == crate::device::Kind::Cpu && crate::device::amx::cpu_has_amx() {
        // The bf16 lines above ran on the tiles where they passed this check at start-up;
        // said here on its own. Where Linux refuses the tiles, training takes AVX512-BF16:
        // not a failure of this node, so said and skipped.
        let name = "bf16 products on AMX tiles against the emulated tile unit (bit for bit on exact sums)";
        match crate::device::amx::ready() {
            Ok(()) => report(name, &crate::device::amx::check_tiles()),
            Err(why) => println!("  skip  {name}: {why}"),
        }
    }
    if let crate::device::Kind::Cuda(_) = kind {
        // TF32: the gradients of this small model at initialisation cancel (sums of terms of
        // both signs over 129 rows), so TF32's input rounding (2^-11) shows up to a few per
        // cent: emulated in float64 on three seeds, 5e-4, 1.1e-2 and 2.9e-2 norm-wise (5.4e-2
        // element-wise of the largest); an H100 measured 4.3e-2 (2026-11-25). A wrong kernel
        // (a transposed product, a lost term) is off by O(1): norm-wise 0.15, element-wise
        // 0.25. The sharp check is the float32 one above (1e-4).
        struct Tf32;
        impl crate::device::WithBackend<std::result::Result<f64, String>> for Tf32 {
            fn run<B: crate::device::Backend>(self, be: B) -> crate::error::Result<std::result::Result<f64, String>> {
                Ok(caught(|| {
                    use crate::config::{Activation, LossKind};
                    let (act, loss) = (Activation::Relu, LossKind::SoftmaxCrossEntropy);
                    crate::model::gradcheck::step_matches_cpu(&be, act, loss, 0.15, 0.25)
                }))
            }
        }
        std::panic::set_hook(Box::new(|_| {}));
        let r = crate::device::with_backend(kind, crate::config::Precision::Tf32, Tf32);
        std::panic::set_hook(hook_default());
        let r = r?;
        let name = match &r {
            Ok(rel) => format!("one step with TF32 tensor cores against the CPU (norm-wise {rel:.1e}, tolerance 0.15)"),
            Err(_) => "one step with TF32 tensor cores against the CPU (norm-wise tolerance 0.15)".to_string(),
        };
        report(&name, &r.map(|_| ()));
    }
    if let crate::device::Kind::Cuda(g) = kind {
        for (what, r) in [
            ("bf16 steps reading kept bf16 copies against rounding every operand", bf16::copies(g)),
            ("bf16 layer outputs (HVTRAIN_BF16_OUTPUTS) against the rounded reference", bf16::outputs(g)),
        ] {
            let name = match &r {
                Ok(how) => format!("{what} ({how})"),
                Err(_) => what.to_string(),
            };
            report(&name, &r.map(|_| ()));
        }
    }
    Ok(ok)
}

pub(super) fn hook_default() -> Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send + 'static> {
    Box::new(|info| eprintln!("{info}"))
}

#[cfg(test)]
mod tests;
