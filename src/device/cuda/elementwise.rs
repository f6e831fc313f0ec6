//! The element-wise kernels whose outputs a bf16 product may read next (bias+activation,
//! activation backward, SGD and Adam per tensor): their launches, each handing the kernel
//! the output's bf16 copy when this backend keeps copies (`Cuda::low_copies`, `buf.rs`), and
//! recording the copy current once queued.
//!
//! Must not: be reached except through `Backend` (the `Cuda` impl in `backend.rs`).

use super::backend::{Cuda, NULL};
use super::buf::{drv, DView, DViewMut, LowOut};
use super::launch::{act_code, config_1d, BIAS_BF16};
use crate::config::Activation;
use crate::device::{AdamHyper, SgdHyper};
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaViewMut, LaunchArgs, PushKernelArg};

/// Push the copy's pointer, or null (the kernels' `low` argument).
pub(super) fn push_low<'a>(l: &mut LaunchArgs<'a>, low: &'a mut Option<LowOut<'_>>) {
    match low.as_mut() {
        Some(x) => l.arg(&mut x.bits),
        None => l.arg(&NULL),
    };
}

impl Cuda {
    /// `v`'s float32 range, and its bf16 copy's when this backend keeps copies.
    pub(super) fn with_low<'a>(&self, v: DViewMut<'a>) -> Result<(CudaViewMut<'a, f32>, Option<LowOut<'a>>)> {
        v.with_low(self.low_copies, |n| -> Result<CudaSlice<u16>> {
            self.stream.alloc_zeros::<u16>(n.max(1)).map_err(|e| self.oom(e, n * 2))
        })
    }

    pub(super) fn launch_bias_act(
        &self,
        out: DViewMut<'_>,
        bias: DView<'_>,
        act: Activation,
        keep_z: Option<DViewMut<'_>>,
    ) -> Result<()> {
        let cols = bias.len;
        if out.len == 0 {
            return Ok(());
        }
        // bf16 outputs: the bias rounded to bf16 too, as the cublasLt layer (`bf16_dense.rs`) adds it.
        let code = act_code(act) | if self.outputs { BIAS_BF16 } else { 0 };
        let (rows, cols32) = ((out.len / cols) as i64, cols as i32);
        let n = out.len;
        let bias = bias.cu();
        let (mut o, mut low) = self.with_low(out)?;
        if let Some(lt) = self.lt.as_ref().filter(|_| act == Activation::Relu) {
            lt.forget_mask(cudarc::driver::DevicePtr::device_ptr(&o, &self.stream).0);
            // written without one
        }
        let mut z = keep_z.map(DViewMut::cu);
        {
            let mut l = self.stream.launch_builder(&self.k.bias_act);
            l.arg(&mut o).arg(&bias);
            match z.as_mut() {
                Some(z) => l.arg(z),
                None => l.arg(&NULL),
            };
            l.arg(&rows).arg(&cols32).arg(&code);
            push_low(&mut l, &mut low);
            // SAFETY: hv_bias_act(float*, const float*, float*, long long, int, int, unsigned
            // short*) over rows·cols; the copy (when passed) is the same range of a u16 buffer.
            unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_bias_act"))?;
        }
        if self.outputs {
            // bf16 outputs: the values rounded in place (the copy above already holds them).
            self.round_bf16(&mut o, n)?;
            if let Some(z) = z.as_mut() {
                self.round_bf16(z, n)?;
            }
        }
        if let Some(l) = low {
            l.written();
        }
        Ok(())
    }

    /// v[0, n) rounded to bf16 in place (`hv_round_bf16`).
    fn round_bf16(&self, v: &mut CudaViewMut<'_, f32>, n: usize) -> Result<()> {
        let n64 = n as i64;
        let mut l = self.stream.launch_builder(&self.k.round_bf16);
        l.arg(v).arg(&n64);
        // SAFETY: hv_round_bf16(float*, long long) over n elements of v.
        unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_round_bf16"))?;
        Ok(())
    }

    pub(super) fn launch_act_backward(
        &self,
        d: DViewMut<'_>,
        a: DView<'_>,
        z: Option<DView<'_>>,
        act: Activation,
    ) -> Result<()> {
        let n = d.len;
        if n == 0 || act == Activation::Identity {
            return Ok(());
        }
        let (n64, code) = (n as i64, act_code(act));
        let a = a.cu();
        let zv = z.map(|z| z.cu());
        let (mut dv, mut low) = self.with_low(d)?;
        {
            let mut l = self.stream.launch_builder(&self.k.act_backward);
            l.arg(&mut dv).arg(&a);
            match &zv {
                Some(z) => l.arg(z),
                None => l.arg(&NULL),
            };
            l.arg(&n64).arg(&code);
            push_low(&mut l, &mut low);
            // SAFETY: hv_act_backward(float*, const float*, const float*, long long, int,
            // unsigned short*) over n elements; the copy as in launch_bias_act.
            unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_act_backward"))?;
        }
        if let Some(l) = low {
            l.written();
        }
        Ok(())
    }

    pub(super) fn launch_sgd(
        &self,
        p: DViewMut<'_>,
        g: DView<'_>,
        m: Option<DViewMut<'_>>,
        h: &SgdHyper,
    ) -> Result<()> {
        let n = p.len;
        if n == 0 {
            return Ok(());
        }
        let (n64, nesterov) = (n as i64, h.nesterov as i32);
        let gv = g.cu();
        let (mut pv, mut low) = self.with_low(p)?;
        let mut mv = m.map(DViewMut::cu);
        {
            let mut l = self.stream.launch_builder(&self.k.sgd);
            l.arg(&mut pv).arg(&gv);
            match mv.as_mut() {
                Some(mv) => l.arg(mv),
                None => l.arg(&NULL),
            };
            l.arg(&n64).arg(&h.lr).arg(&h.grad_scale).arg(&h.weight_decay).arg(&h.momentum).arg(&nesterov);
            push_low(&mut l, &mut low);
            // SAFETY: hv_sgd(float*, const float*, float*, long long, float, float, float, float,
            // int, unsigned short*) over n elements.
            unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_sgd"))?;
        }
        if let Some(l) = low {
            l.written();
        }
        Ok(())
    }

    pub(super) fn launch_adam(
        &self,
        p: DViewMut<'_>,
        g: DView<'_>,
        m: DViewMut<'_>,
        v: DViewMut<'_>,
        h: &AdamHyper,
    ) -> Result<()> {
        let n = p.len;
        if n == 0 {
            return Ok(());
        }
        let n64 = n as i64;
        let gv = g.cu();
        let (mut pv, mut low) = self.with_low(p)?;
        let (mut mv, mut vv) = (m.cu(), v.cu());
        {
            let mut l = self.stream.launch_builder(&self.k.adam);
            l.arg(&mut pv).arg(&gv).arg(&mut mv).arg(&mut vv).arg(&n64);
            l.arg(&h.lr).arg(&h.grad_scale).arg(&h.b1).arg(&h.b2).arg(&h.eps).arg(&h.bc1).arg(&h.bc2_sqrt);
            l.arg(&h.l2).arg(&h.decay);
            push_low(&mut l, &mut low);
            // SAFETY: hv_adam(float*, const float*, float*, float*, long long, float × 9,
            // unsigned short*) over n elements.
            unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_adam"))?;
        }
        if let Some(l) = low {
            l.written();
        }
        Ok(())
    }
}
