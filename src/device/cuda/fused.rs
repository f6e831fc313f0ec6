//! The fused optimizer update of a gradient bucket on the CUDA backend: its consecutive
//! tensors (up to `launch::MAX_SEGS`) in one `hv_sgd_seg` / `hv_adam_seg` launch instead of
//! one per tensor, the weight decay per tensor from a table passed by value (no upload).
//! More tensors, or ranges that are not adjacent, go through `Backend`'s per-tensor default.
//! With `precision = "bf16"` the launch also writes the parameters' bf16 copy (`buf.rs`).
//!
//! Must not: be reached except through `Backend` (the `Cuda` impl in `backend.rs`).

use super::backend::{Cuda, NULL};
use super::buf::drv;
use super::buf::{DevBuf, LowOut};
use super::elementwise::push_low;
use super::launch::{config_1d, Segs};
use crate::device::{AdamHyper, Segment, SgdHyper};
use crate::error::Result;
use cudarc::driver::PushKernelArg;
use std::ops::Range;

/// The whole range the segments cover, and their table; None: use the per-tensor path.
fn span(segs: &[Segment]) -> Option<(Range<usize>, Segs)> {
    let table = Segs::of(segs)?;
    Some((segs[0].range.start..segs[segs.len() - 1].range.end, table))
}

impl Cuda {
    /// One launch for `segs`, or None when they need the per-tensor path.
    pub(super) fn sgd_fused(
        &self,
        params: &mut DevBuf,
        grads: &DevBuf,
        goff: usize,
        m: Option<&mut DevBuf>,
        segs: &[Segment],
        h: &SgdHyper,
    ) -> Option<Result<()>> {
        let (r, table) = span(segs)?;
        let n = r.len();
        if n == 0 {
            return Some(Ok(()));
        }
        let (n64, nesterov) = (n as i64, h.nesterov as i32);
        let gv = grads.dev().slice(r.start - goff..r.end - goff);
        let (mut pv, mut low) = match self.with_low(params.view_mut(r.clone())) {
            Ok(v) => v,
            Err(e) => return Some(Err(e)),
        };
        let mut mv = m.map(|m| m.dev_mut().slice_mut(r.clone()));
        let mut l = self.stream.launch_builder(&self.k.sgd_seg);
        l.arg(&mut pv).arg(&gv);
        match mv.as_mut() {
            Some(mv) => l.arg(mv),
            None => l.arg(&NULL),
        };
        l.arg(&n64).arg(&table).arg(&h.lr).arg(&h.grad_scale).arg(&h.weight_decay).arg(&h.momentum).arg(&nesterov);
        push_low(&mut l, &mut low);
        // SAFETY: hv_sgd_seg(float*, const float*, float*, long long, hv_segs, float, float, float,
        // float, int, unsigned short*) over n floats of each view (the bf16 copy's too, when
        // passed); `table` is hv_segs' layout (launch::Segs).
        let r = unsafe { l.launch(config_1d(n)) }.map(|_| ()).map_err(drv("launching hv_sgd_seg"));
        drop(l);
        Some(r.map(|()| low.map_or((), LowOut::written)))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn adam_fused(
        &self,
        params: &mut DevBuf,
        grads: &DevBuf,
        goff: usize,
        m: &mut DevBuf,
        v: &mut DevBuf,
        segs: &[Segment],
        h: &AdamHyper,
    ) -> Option<Result<()>> {
        let (r, table) = span(segs)?;
        let n = r.len();
        if n == 0 {
            return Some(Ok(()));
        }
        let n64 = n as i64;
        let gv = grads.dev().slice(r.start - goff..r.end - goff);
        let (mut pv, mut low) = match self.with_low(params.view_mut(r.clone())) {
            Ok(v) => v,
            Err(e) => return Some(Err(e)),
        };
        let (mut mv, mut vv) = (m.dev_mut().slice_mut(r.clone()), v.dev_mut().slice_mut(r.clone()));
        let mut l = self.stream.launch_builder(&self.k.adam_seg);
        l.arg(&mut pv).arg(&gv).arg(&mut mv).arg(&mut vv).arg(&n64).arg(&table);
        l.arg(&h.lr).arg(&h.grad_scale).arg(&h.b1).arg(&h.b2).arg(&h.eps).arg(&h.bc1).arg(&h.bc2_sqrt);
        l.arg(&h.l2).arg(&h.decay);
        push_low(&mut l, &mut low);
        // SAFETY: hv_adam_seg(float*, const float*, float*, float*, long long, hv_segs, float × 9,
        // unsigned short*) over n floats of each view (the bf16 copy's too, when passed);
        // `table` is hv_segs' layout (launch::Segs).
        let r = unsafe { l.launch(config_1d(n)) }.map(|_| ()).map_err(drv("launching hv_adam_seg"));
        drop(l);
        Some(r.map(|()| low.map_or((), LowOut::written)))
    }
}
