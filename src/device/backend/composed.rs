//! Backend operations composed of other backend operations: the defaults of the trait's
//! composite methods, and what a backend that fuses one falls back to (`input_grad_separate`,
//! `sgd_each`, `adam_each`, `rmsprop_composed`). Each runs on any backend through `Backend`'s
//! own methods, so a GPU runs only kernels it already has.
//!
//! Must not: touch a device's memory other than through `Backend`'s methods.

use super::{AdamHyper, Backend, Gemm, RmspropHyper, Segment, SgdHyper};
use crate::config::Activation;
use crate::error::Result;
use std::ops::Range;

/// `Backend::input_grad` as three operations: the product, the activation's backward, the
/// column sums (the default, and a fusing backend's fallback).
#[allow(clippy::too_many_arguments)]
pub fn input_grad_separate<B: Backend + ?Sized>(
    be: &B,
    g: Gemm,
    dz: B::View<'_>,
    w: B::View<'_>,
    dprev: &mut B::Buf,
    a_prev: B::View<'_>,
    z_prev: Option<B::View<'_>>,
    act: Activation,
    beta: f32,
    bias_grad: B::ViewMut<'_>,
) -> Result<()> {
    let n = g.m * g.n;
    be.gemm(g, dz, w, be.view_mut(dprev, 0..n))?;
    be.act_backward(be.view_mut(dprev, 0..n), a_prev, z_prev, act)?;
    be.column_sums(be.view(dprev, 0..n), g.n, beta, bias_grad)
}

/// The scratch buffers `rmsprop_composed` takes: Adam's first moment; with momentum the step
/// g / (√v + eps) the momentum takes, and with weight decay as well the decayed gradient.
pub fn rmsprop_scratch_count(momentum: bool, decay: bool) -> usize {
    1 + usize::from(momentum) + usize::from(momentum && decay)
}

/// `Backend::rmsprop` from existing kernels (the default, and a GPU's): Adam's with β1 = 0 and
/// no bias correction gives v = ρ·v + (1 − ρ)·g² and g / (√v + eps), where g = g·scale + l2·w.
/// Without momentum (`m` None) it updates the parameters itself: w −= lr·g / (√v + eps). With
/// momentum μ it writes the step u = g / (√v + eps) into a zeroed scratch (lr −1 on zeros:
/// exactly u), and the SGD kernel takes buf = μ·buf + u, w −= lr·buf. Weight decay then needs
/// g + l2·w first, in a scratch of its own: two SGD passes on zeros, w·l2 then + g·scale, the
/// same two products and one addition the Adam kernel would make. Adam's first moment is a
/// zeroed scratch, so m = 0·0 + 1·g is the gradient exactly, whatever an earlier tensor left.
#[allow(clippy::too_many_arguments)]
pub fn rmsprop_composed<B: Backend + ?Sized>(
    be: &B,
    params: &mut B::Buf,
    pr: Range<usize>,
    g: B::View<'_>,
    v: B::ViewMut<'_>,
    m: Option<B::ViewMut<'_>>,
    scratch: &mut [B::Buf],
    h: &RmspropHyper,
) -> Result<()> {
    let n = pr.len();
    let a = AdamHyper {
        lr: h.lr,
        grad_scale: h.grad_scale,
        b1: 0.0,
        b2: h.rho,
        eps: h.eps,
        bc1: 1.0,
        bc2_sqrt: 1.0,
        l2: h.l2,
        decay: 0.0,
    };
    let (first, rest) = scratch.split_first_mut().expect("rmsprop keeps a scratch");
    be.fill_zero(be.view_mut(first, 0..n))?;
    let Some(buf) = m else {
        return be.adam(be.view_mut(params, pr), g, be.view_mut(first, 0..n), v, &a);
    };
    let (u, rest) = rest.split_first_mut().expect("rmsprop with momentum keeps the step's scratch");
    be.fill_zero(be.view_mut(u, 0..n))?;
    let to_u = AdamHyper { lr: -1.0, l2: 0.0, ..a };
    if h.l2 > 0.0 {
        let d = rest.first_mut().expect("rmsprop with momentum and decay keeps the gradient's scratch");
        be.fill_zero(be.view_mut(d, 0..n))?;
        let add =
            |scale: f32| SgdHyper { lr: -1.0, grad_scale: scale, weight_decay: 0.0, momentum: 0.0, nesterov: false };
        be.sgd(be.view_mut(d, 0..n), be.view(params, pr.clone()), None, &add(h.l2))?;
        be.sgd(be.view_mut(d, 0..n), g, None, &add(h.grad_scale))?;
        let to_u = AdamHyper { grad_scale: 1.0, ..to_u };
        be.adam(be.view_mut(u, 0..n), be.view(d, 0..n), be.view_mut(first, 0..n), v, &to_u)?;
    } else {
        be.adam(be.view_mut(u, 0..n), g, be.view_mut(first, 0..n), v, &to_u)?;
    }
    let step = SgdHyper { lr: h.lr, grad_scale: 1.0, weight_decay: 0.0, momentum: h.momentum, nesterov: false };
    be.sgd(be.view_mut(params, pr), be.view(u, 0..n), Some(buf), &step)
}

/// `Backend::sgd_segments` as one `sgd` per segment (the default, and a GPU's fallback).
pub fn sgd_each<B: Backend + ?Sized>(
    be: &B,
    params: &mut B::Buf,
    grads: &B::Buf,
    goff: usize,
    mut m: Option<&mut B::Buf>,
    segs: &[Segment],
    h: &SgdHyper,
) -> Result<()> {
    for s in segs {
        let r = s.range.clone();
        let hs = SgdHyper { weight_decay: if s.decayed { h.weight_decay } else { 0.0 }, ..*h };
        let g = be.view(grads, r.start - goff..r.end - goff);
        let mv = m.as_deref_mut().map(|m| be.view_mut(m, r.clone()));
        be.sgd(be.view_mut(params, r), g, mv, &hs)?;
    }
    Ok(())
}

/// `Backend::adam_segments` as one `adam` per segment (the default, and a GPU's fallback).
#[allow(clippy::too_many_arguments)]
pub fn adam_each<B: Backend + ?Sized>(
    be: &B,
    params: &mut B::Buf,
    grads: &B::Buf,
    goff: usize,
    m: &mut B::Buf,
    v: &mut B::Buf,
    segs: &[Segment],
    h: &AdamHyper,
) -> Result<()> {
    for s in segs {
        let r = s.range.clone();
        let hs =
            AdamHyper { l2: if s.decayed { h.l2 } else { 0.0 }, decay: if s.decayed { h.decay } else { 0.0 }, ..*h };
        let g = be.view(grads, r.start - goff..r.end - goff);
        be.adam(be.view_mut(params, r.clone()), g, be.view_mut(m, r.clone()), be.view_mut(v, r), &hs)?;
    }
    Ok(())
}
