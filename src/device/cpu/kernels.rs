//! The CPU reference's element-wise kernels on row-major `f32` slices: bias and activation
//! (forward and backward; exp, expm1, log1p, tanh and sigmoid from `vmath`, vectorizable), column sums, row
//! gathers, dropout's mask, softmax, and the SGD and Adam updates (the activations' and
//! optimizers' loops built for AVX-512 and AVX2 where the CPU has them, `widest!`, with the
//! plain formulas' bits).
//!
//! Must not: reorder or fuse the arithmetic of the plain formulas (the GPU kernels and the
//! conformance tests hold to these bits), or call libm in a loop that should vectorize.

use super::vmath::{exp, expm1_neg, ln1p_unit, sigmoid, tanh};
use crate::config::{Activation, LEAKY_RELU_SLOPE, SELU_ALPHA, SELU_LAMBDA};
use crate::device::backend::{mask_bits, AdamHyper, Mask, RmspropHyper, SgdHyper};

/// Runs `$body` compiled for AVX-512F where the CPU has it, else for AVX2, else for the
/// baseline (SSE2): the same scalar code, which LLVM vectorizes 16, 8 or 4 lanes wide. No
/// fast-math: Rust never contracts a·b + c into an FMA, so every width gives the same bits.
/// The optimizer's passes are memory-bound streams, but SSE2's 4 lanes left them
/// instruction-bound (SGD with momentum: 10 % of a bf16 step on a Zen 5, 2 threads).
macro_rules! widest {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn w512($($arg: $ty),*) { body($($arg),*) }
                #[target_feature(enable = "avx2")]
                unsafe fn w256($($arg: $ty),*) { body($($arg),*) }
                if is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F.
                    return unsafe { w512($($arg),*) };
                }
                if is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2.
                    return unsafe { w256($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

/// out[r, :] = act(z[r, :]) where z = out + bias is formed in place: `out` holds x·W on entry.
/// When `keep_z` is given, the pre-activation z is stored there (backward's input where
/// `act.needs_z()`).
pub fn bias_act_forward(out: &mut [f32], bias: &[f32], act: Activation, mut keep_z: Option<&mut [f32]>) {
    let n = bias.len();
    for (r, row) in out.chunks_exact_mut(n).enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v += bias[j];
        }
        if let Some(z) = keep_z.as_deref_mut() {
            z[r * n..(r + 1) * n].copy_from_slice(row);
        }
        act_forward_inplace(row, act);
    }
}

widest! {
/// v = act(v). The transcendental ones through `vmath` (vectorized).
fn act_forward_inplace(v: &mut [f32], act: Activation) {
    match act {
        Activation::Identity => {}
        Activation::Relu => v.iter_mut().for_each(|x| *x = x.max(0.0)),
        Activation::Tanh => v.iter_mut().for_each(|x| *x = tanh(*x)),
        Activation::Gelu => v.iter_mut().for_each(|x| *x = gelu(*x)),
        Activation::Silu => v.iter_mut().for_each(|x| *x = silu(*x)),
        Activation::Sigmoid => v.iter_mut().for_each(|x| *x = sigmoid(*x)),
        Activation::Softplus => v.iter_mut().for_each(|x| *x = softplus(*x)),
        Activation::Elu => v.iter_mut().for_each(|x| *x = elu(*x)),
        Activation::Selu => v.iter_mut().for_each(|x| *x = selu(*x)),
        Activation::LeakyRelu => v.iter_mut().for_each(|x| *x = leaky_relu(*x)),
    }
}
}

// The activations beyond relu, tanh and gelu, each with its derivative in z, in the order of
// operations kernels.cu's hv_act and hv_act_grad follow (the GPU's and CPU's agree to rounding).

#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// silu'(z) = s·(1 + z·(1 − s)), s = sigmoid(z).
#[inline(always)]
pub fn silu_grad(x: f32) -> f32 {
    let s = sigmoid(x);
    s * (1.0 + x * (1.0 - s))
}

/// log(1 + e^z) as max(z, 0) + log1p(e^−|z|): no overflow for large z, exact near 0.
#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    x.max(0.0) + ln1p_unit(exp(-x.abs()))
}

#[inline(always)]
pub fn elu(x: f32) -> f32 {
    if x > 0.0 {
        x
    } else {
        expm1_neg(x)
    }
}

#[inline(always)]
pub fn selu(x: f32) -> f32 {
    SELU_LAMBDA * if x > 0.0 { x } else { SELU_ALPHA * expm1_neg(x) }
}

#[inline(always)]
pub fn leaky_relu(x: f32) -> f32 {
    if x > 0.0 {
        x
    } else {
        LEAKY_RELU_SLOPE * x
    }
}

/// The derivative at z of the activations whose backward reads z (`Activation::needs_z`).
#[inline(always)]
pub fn act_grad_z(act: Activation, x: f32) -> f32 {
    match act {
        Activation::Gelu => gelu_grad(x),
        Activation::Silu => silu_grad(x),
        Activation::Sigmoid => {
            let s = sigmoid(x);
            s * (1.0 - s)
        }
        Activation::Softplus => sigmoid(x),
        Activation::Elu => {
            if x > 0.0 {
                1.0
            } else {
                exp(x)
            }
        }
        Activation::Selu => SELU_LAMBDA * if x > 0.0 { 1.0 } else { SELU_ALPHA * exp(x) },
        Activation::LeakyRelu => {
            if x > 0.0 {
                1.0
            } else {
                LEAKY_RELU_SLOPE
            }
        }
        Activation::Identity | Activation::Relu | Activation::Tanh => unreachable!("{act:?} reads a, not z"),
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;

/// GELU, tanh approximation (as in GPT-2 and `jax.nn.gelu(approximate=True)`).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)))
}

#[inline(always)]
pub fn gelu_grad(x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
    let t = tanh(u);
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
}

/// d[i] *= f(z[i]) (the activations whose backward reads z), each call its own loop with `f`
/// inlined into it.
#[inline(always)]
fn times(d: &mut [f32], z: Option<&[f32]>, act: Activation, f: impl Fn(f32) -> f32) {
    let z = z.unwrap_or_else(|| panic!("{act:?} backward needs the pre-activation"));
    d.iter_mut().zip(z).for_each(|(g, &x)| *g *= f(x))
}

widest! {
/// d[i] *= act'(z[i]), given the pre-activation `z` and the activation's output `a`.
/// relu and tanh use `a` (cheaper); the others (`act.needs_z()`) need `z`.
fn act_backward_inplace(d: &mut [f32], a: &[f32], z: Option<&[f32]>, act: Activation) {
    match act {
        Activation::Identity => {}
        // A select, not a branch: the compiler vectorizes it, where `if y <= 0.0 { *g = 0.0 }`
        // stayed a scalar loop that mispredicted on every other unit (7.5 % of a step).
        Activation::Relu => d.iter_mut().zip(a).for_each(|(g, &y)| *g = if y <= 0.0 { 0.0 } else { *g }),
        Activation::Tanh => d.iter_mut().zip(a).for_each(|(g, &y)| *g *= 1.0 - y * y),
        Activation::Gelu => times(d, z, act, gelu_grad),
        Activation::Silu => times(d, z, act, |x| act_grad_z(Activation::Silu, x)),
        Activation::Sigmoid => times(d, z, act, |x| act_grad_z(Activation::Sigmoid, x)),
        Activation::Softplus => times(d, z, act, |x| act_grad_z(Activation::Softplus, x)),
        Activation::Elu => times(d, z, act, |x| act_grad_z(Activation::Elu, x)),
        Activation::Selu => times(d, z, act, |x| act_grad_z(Activation::Selu, x)),
        Activation::LeakyRelu => times(d, z, act, |x| act_grad_z(Activation::LeakyRelu, x)),
    }
}
}

/// out[j] = beta · out[j] + sum over rows r of m[r, j]  (the bias gradient; beta 1 accumulates).
pub fn column_sums(m: &[f32], cols: usize, beta: f32, out: &mut [f32]) {
    // The first `cols` floats only: a bias slot's padded tail is not the layer's (a GPU's
    // product or fused epilogue writes `cols` too).
    let keep = cols.min(out.len());
    let out = &mut out[..keep];
    // β = 0 overwrites (whatever was there, NaN included), as BLAS does.
    if beta == 0.0 {
        out.fill(0.0);
    } else {
        out.iter_mut().for_each(|v| *v *= beta);
    }
    for row in m.chunks_exact(cols) {
        for (o, &v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
}

/// dst[r, :] = src[idx[r], :] (`Backend::gather_rows`).
pub fn gather_rows(src: &[f32], cols: usize, idx: &[i32], dst: &mut [f32]) {
    for (row, &i) in dst.chunks_exact_mut(cols).zip(idx) {
        let i = usize::try_from(i).expect("a row index");
        row.copy_from_slice(&src[i * cols..(i + 1) * cols]);
    }
}

/// Dropout on [rows, cols] `v` in place (see `Mask`).
pub fn dropout(v: &mut [f32], cols: usize, keys: &[i32], m: Mask) {
    for (row, &key) in v.chunks_exact_mut(cols).zip(keys) {
        for (c, e) in row.iter_mut().enumerate() {
            let keep = m.threshold == 0 || mask_bits(m.salt, key as u32, m.col0 + c as u32) >= m.threshold;
            *e = if keep { *e * m.scale } else { 0.0 };
        }
    }
}

/// Row-wise softmax of [rows, k] in place.
pub fn softmax_rows(v: &mut [f32], k: usize) {
    for row in v.chunks_exact_mut(k) {
        let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        row.iter_mut().for_each(|x| *x = (*x - max).exp());
        let sum: f32 = row.iter().sum();
        row.iter_mut().for_each(|x| *x /= sum);
    }
}

widest! {
/// SGD, optionally with momentum `m` (heavy ball or Nesterov), L2 weight decay in the gradient.
fn sgd(p: &mut [f32], g: &[f32], m: Option<&mut [f32]>, h: &SgdHyper) {
    let (lr, scale, wd, mu) = (h.lr, h.grad_scale, h.weight_decay, h.momentum);
    let Some(m) = m else {
        for (p, &g) in p.iter_mut().zip(g) {
            *p -= lr * (g * scale + wd * *p);
        }
        return;
    };
    for ((p, &g), m) in p.iter_mut().zip(g).zip(m) {
        let g = g * scale + wd * *p;
        *m = mu * *m + g;
        *p -= lr * if h.nesterov { g + mu * *m } else { *m };
    }
}

}

widest! {
/// RMSprop (PyTorch's, not centered) in one pass: the formulas `backend::rmsprop_composed`
/// spreads over the Adam and SGD kernels, in the same order (g·scale + l2·w, then v, then
/// u = g / (√v + eps), then the momentum or the step), so the same bits for non-zero values.
fn rmsprop(p: &mut [f32], g: &[f32], v: &mut [f32], m: Option<&mut [f32]>, h: &RmspropHyper) {
    let Some(m) = m else {
        for ((p, &g), v) in p.iter_mut().zip(g).zip(v) {
            let g = g * h.grad_scale + h.l2 * *p;
            *v = h.rho * *v + (1.0 - h.rho) * g * g;
            *p -= h.lr * g / (v.sqrt() + h.eps);
        }
        return;
    };
    for (((p, &g), v), m) in p.iter_mut().zip(g).zip(v).zip(m) {
        let g = g * h.grad_scale + h.l2 * *p;
        *v = h.rho * *v + (1.0 - h.rho) * g * g;
        let u = g / (v.sqrt() + h.eps);
        *m = h.momentum * *m + u;
        *p -= h.lr * *m;
    }
}
}

widest! {
/// Adam (L2 in the gradient) or AdamW (decoupled decay), with bias corrections.
fn adam(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], h: &AdamHyper) {
    let step = h.lr / h.bc1;
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
        let g = g * h.grad_scale + h.l2 * *p;
        *m = h.b1 * *m + (1.0 - h.b1) * g;
        *v = h.b2 * *v + (1.0 - h.b2) * g * g;
        *p -= step * *m / (v.sqrt() / h.bc2_sqrt + h.eps) + h.decay * *p;
    }
}
}
