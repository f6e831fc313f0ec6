//! The CUDA backend's dense layers through cublasLt (float32 and TF32 products): forward, one
//! call with the bias and activation in its epilogue where `lt_map` finds one, else cuBLAS
//! then `hv_bias_act`; backward into the layer before, one call with the activation's
//! derivative and that layer's bias gradient (DRELU_BGRAD from the bitmask the ReLU layer's
//! forward wrote, DGELU_BGRAD from GELU's kept pre-activation), else the three operations.
//! The start-up check turns cublasLt off, or only its backward, with the reason, unless it
//! gives what the separate kernels give on small layers of every epilogue.
//!
//! Must not: choose the cublasLt call (`lt_map`) or build its descriptors (`lt`).

use super::backend::Cuda;
use super::buf::{DView, DViewMut, DevBuf};
use super::lt::Lt;
use super::lt_map::{forward_call, input_grad_call, mask_bytes, Epilogue};
use crate::config::Activation;
use crate::device::backend::{Backend, Gemm, Trans};
use crate::error::{Error, Result};
use cudarc::driver::{DevicePtr, DevicePtrMut};

impl Cuda {
    /// `Backend::dense` (see there).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dense_fused(
        &self,
        g: Gemm,
        x: DView<'_>,
        w: DView<'_>,
        out: &mut DevBuf,
        n: usize,
        bias: DView<'_>,
        act: Activation,
        keep_z: Option<DViewMut<'_>>,
    ) -> Result<()> {
        if self.outputs {
            return self.dense_bf16(g, x, w, out, n, bias, act, keep_z);
        }
        if let Some(lt) = &self.lt {
            g.check(x.len, w.len, n);
            let o = self.view_mut(out, 0..n).cu();
            let (xv, wv, bv) = (x.cu(), w.cu(), bias.cu());
            let s = &self.stream;
            let (xp, _gx) = xv.device_ptr(s);
            let (wp, _gw) = wv.device_ptr(s);
            let (bp, _gb) = bv.device_ptr(s);
            let mut o = o;
            let (op, _go) = o.device_ptr_mut(s);
            let relu_mask = act == Activation::Relu && lt.backward.get();
            match forward_call(g, act, keep_z.is_some(), relu_mask, [xp, wp, op]) {
                Ok(call) => {
                    let mut z = keep_z.map(DViewMut::cu);
                    let zp = z.as_mut().map(|z| z.device_ptr_mut(s));
                    let aux = match call.epilogue {
                        Epilogue::ReluAuxBias => {
                            let (m, grew) = lt.mask_for(op, mask_bytes(g.n, g.m), s).map_err(Error::Cuda)?;
                            if grew {
                                self.scratch_grew();
                            }
                            Some(m)
                        }
                        _ => zp.as_ref().map(|z| z.0),
                    };
                    // SAFETY: the views hold the shapes `forward_call` was given (checked above;
                    // bias: the layer's width, z: as out, the bitmask `mask_bytes`); they live
                    // until the guards drop, after the call is queued on this stream.
                    return unsafe { lt.run(&call, [wp, xp, op], bp, aux, s) }
                        .map_err(|e| Error::Cuda(format!("cublasLt dense layer {}x{}x{}: {e}", g.m, g.k, g.n)));
                }
                // Written below without its bitmask: a kept one is stale.
                Err(_) => lt.forget_mask(op),
            }
        }
        self.gemm(g, x, w, self.view_mut(out, 0..n))?;
        self.bias_act(self.view_mut(out, 0..n), bias, act, keep_z)
    }

    /// `Backend::input_grad` as one cublasLt call; false (nothing written) where there is
    /// none: cublasLt off or its backward, an accumulating bias gradient, no backward epilogue
    /// for the activation, or no bitmask written with `a_prev` this step.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn input_grad_fused(
        &self,
        g: Gemm,
        dz: DView<'_>,
        w: DView<'_>,
        dprev: &mut DevBuf,
        a_prev: DView<'_>,
        z_prev: Option<DView<'_>>,
        act: Activation,
        beta: f32,
        bias_grad: &mut DViewMut<'_>,
    ) -> Result<bool> {
        let Some(lt) = self.lt.as_ref().filter(|lt| lt.backward.get() && beta == 0.0) else { return Ok(false) };
        let n = g.m * g.n;
        g.check(dz.len, w.len, n);
        g.check_input_grad(bias_grad.len, a_prev.len);
        let s = &self.stream;
        let (dzv, wv, av) = (dz.cu(), w.cu(), a_prev.cu());
        let (dzp, _g1) = dzv.device_ptr(s);
        let (wp, _g2) = wv.device_ptr(s);
        let (ap, _g3) = av.device_ptr(s);
        let mut dv = self.view_mut(dprev, 0..n).cu();
        let (dp, _g4) = dv.device_ptr_mut(s);
        let Ok(call) = input_grad_call(g, act, [dzp, wp, dp]) else { return Ok(false) };
        let zv = z_prev.map(|z| z.cu());
        let zp = zv.as_ref().map(|z| z.device_ptr(s));
        let aux = match act {
            Activation::Relu => lt.mask_of(ap, mask_bytes(g.n, g.m)),
            _ => zp.as_ref().map(|z| z.0),
        };
        let Some(aux) = aux else { return Ok(false) };
        let mut bv =
            DViewMut { buf: &mut *bias_grad.buf, start: bias_grad.start, len: bias_grad.len, low: None, whole: 0 }.cu();
        let (bp, _g5) = bv.device_ptr_mut(s);
        // SAFETY: dz [m, k], W [n, k], dprev [m, n] (checked above), the bias gradient n floats,
        // the aux written by the layer before's forward over the same [m, n] (a bitmask of
        // `mask_bytes`, or z); all live until the guards drop, after the call is queued.
        unsafe { lt.run(&call, [wp, dzp, dp], bp, Some(aux), s) }
            .map_err(|e| Error::Cuda(format!("cublasLt input gradient {}x{}x{}: {e}", g.m, g.k, g.n)))?;
        Ok(true)
    }

    /// Start cublasLt and check it against the separate kernels on one layer of every
    /// epilogue; keep it only if every output (and GELU's kept pre-activation) agrees. Returns
    /// what the log says of the dense layers.
    pub(super) fn start_lt(&mut self, major: i32, tf32: bool) -> String {
        if std::env::var("HVTRAIN_CUBLASLT").is_ok_and(|v| v == "0") {
            return "cuBLAS + hv_bias_act (HVTRAIN_CUBLASLT=0)".into();
        }
        self.lt = match Lt::new(&self.stream, major, tf32) {
            Ok(lt) => Some(lt),
            Err(e) => return format!("cuBLAS + hv_bias_act (cublasLt: {e})"),
        };
        if let Err(e) = self.check_lt() {
            self.lt = None;
            log::warn!("cublasLt's fused dense layers are off: {e}; the layers use cuBLAS + hv_bias_act");
            return format!("cuBLAS + hv_bias_act (cublasLt failed its start-up check: {e})");
        }
        let forward = "cublasLt with the bias and activation in the forward epilogue";
        // The fused backward is off unless asked for: on an H100 (2026-11-27) it made the large
        // bench model's TF32 step at batch 8192 15 % slower (1,029,019 against 1,200,863
        // samples/s with the three operations); the GPU check times both ways on every shape.
        if !std::env::var("HVTRAIN_CUBLASLT_BACKWARD").is_ok_and(|v| v == "1") {
            return format!(
                "{forward} (checked at start-up); backward unfused (the fused one was slower where measured; \
                 HVTRAIN_CUBLASLT_BACKWARD=1 turns it on)"
            );
        }
        self.lt.as_ref().expect("started above").backward.set(true);
        match self.check_lt_backward() {
            Ok(()) => format!("{forward}, and dReLU/dGELU + the bias gradient in the backward's (checked at start-up)"),
            Err(e) => {
                self.lt.as_ref().expect("started above").backward.set(false);
                log::warn!(
                    "cublasLt's fused backward is off: {e}; backward uses cuBLAS + hv_act_backward + column sums"
                );
                format!("{forward} (checked at start-up); backward unfused (its start-up check failed: {e})")
            }
        }
    }

    /// Two layers, 24 → 16 (ReLU, then GELU) → 8, batch 5: the first's forward writes its aux
    /// (bitmask, pre-activation), then backward into it by one call and by the three
    /// operations; the input and bias gradients must agree, the bias gradient in a slot longer
    /// than the layer as the arena pads one (its tail untouched by both).
    fn check_lt_backward(&mut self) -> std::result::Result<(), String> {
        let (b, p, i, o) = (5usize, 24usize, 16usize, 8usize);
        let val = |k: usize, seed: usize| ((k * 7 + seed * 13) % 15) as f32 / 8.0 - 0.875;
        let up = |v: Vec<f32>| self.upload(&v).map_err(|e| e.to_string());
        let zeros = |n: usize| self.zeros(n).map_err(|e| e.to_string());
        let (x, w0, b0) = (
            up((0..b * p).map(|k| val(k, 4)).collect())?,
            up((0..p * i).map(|k| val(k, 5)).collect())?,
            up((0..i).map(|k| val(k, 6)).collect())?,
        );
        let (dz, w1) = (up((0..b * o).map(|k| val(k, 7)).collect())?, up((0..i * o).map(|k| val(k, 8)).collect())?);
        for act in [Activation::Relu, Activation::Gelu] {
            let gelu = act == Activation::Gelu;
            let (mut a, mut z) = (zeros(b * i)?, zeros(b * i)?);
            let keep = gelu.then(|| self.view_mut(&mut z, 0..b * i));
            let g0 = Gemm::new(b, p, i, Trans::N, Trans::N);
            let (xv, wv, bv) = (self.view(&x, 0..b * p), self.view(&w0, 0..p * i), self.view(&b0, 0..i));
            self.dense_fused(g0, xv, wv, &mut a, b * i, bv, act, keep).map_err(|e| format!("{act:?} forward: {e}"))?;
            let g = Gemm::new(b, o, i, Trans::N, Trans::T);
            // The bias gradient's slot as the arena pads it (longer than the layer): only the
            // first i floats are written, by both ways.
            let pad = i + 5;
            let (mut d1, mut d2, mut bg1, mut bg2) = (zeros(b * i)?, zeros(b * i)?, zeros(pad)?, zeros(pad)?);
            let (dzv, w1v, av) = (self.view(&dz, 0..b * o), self.view(&w1, 0..i * o), self.view(&a, 0..b * i));
            let zv = gelu.then(|| self.view(&z, 0..b * i));
            let mut bgv = self.view_mut(&mut bg1, 0..pad);
            let fused = self.input_grad_fused(g, dzv, w1v, &mut d1, av, zv, act, 0.0, &mut bgv);
            if !fused.map_err(|e| format!("{act:?}: {e}"))? {
                return Err(format!("{act:?}: no fused call for the checked shape"));
            }
            let bgv = self.view_mut(&mut bg2, 0..pad);
            crate::device::backend::input_grad_separate(self, g, dzv, w1v, &mut d2, av, zv, act, 0.0, bgv)
                .map_err(|e| e.to_string())?;
            for (got, want, n, what) in [(&d1, &d2, b * i, "input gradient"), (&bg1, &bg2, pad, "bias gradient")] {
                let (mut h1, mut h2) = (vec![0.0; n], vec![0.0; n]);
                self.download(got, 0..n, &mut h1).map_err(|e| e.to_string())?;
                self.download(want, 0..n, &mut h2).map_err(|e| e.to_string())?;
                if let Some(e) = (0..n).find(|&e| !((h1[e] - h2[e]).abs() <= 1e-4 * (1.0 + h2[e].abs()))) {
                    return Err(format!(
                        "{act:?} {what} element {e}: {} where the separate kernels give {}",
                        h1[e], h2[e]
                    ));
                }
            }
        }
        Ok(())
    }

    /// The layer of the forward start-up checks (`check_lt`, `bf16_dense`'s): its product,
    /// 5 × 24 · 24 × 16, and x, W and the bias on the GPU, multiples of 1/8 below 1 (exact in
    /// TF32 and bf16, and every sum exact in float32).
    pub(super) fn check_layer(&self) -> std::result::Result<(Gemm, [DevBuf; 3]), String> {
        self.check_layer_of((5, 24, 16), |k, seed| ((k * 7 + seed * 13) % 15) as f32 / 8.0 - 0.875)
    }

    /// A start-up check's layer of `(b, i, o)`: x, W and the bias filled by `val(k, seed)`
    /// (seeds 1, 2, 3), uploaded.
    pub(super) fn check_layer_of(
        &self,
        (b, i, o): (usize, usize, usize),
        val: impl Fn(usize, usize) -> f32,
    ) -> std::result::Result<(Gemm, [DevBuf; 3]), String> {
        let up = |n: usize, seed: usize| self.upload(&(0..n).map(|k| val(k, seed)).collect::<Vec<_>>());
        let bufs = [up(b * i, 1), up(i * o, 2), up(o, 3)];
        let [x, w, bias] = bufs.map(|r| r.map_err(|e| e.to_string()));
        Ok((Gemm::new(b, i, o, Trans::N, Trans::N), [x?, w?, bias?]))
    }

    /// `f` on this backend with cublasLt (`use_lt`) or with it put aside (the separate
    /// kernels), as the start-up checks compare them.
    pub(super) fn lt_if<R>(&mut self, use_lt: bool, f: impl FnOnce(&Self) -> R) -> R {
        let lt = if use_lt { None } else { self.lt.take() };
        let r = f(self);
        if lt.is_some() {
            self.lt = lt;
        }
        r
    }

    /// One 5 × 24 · 24 × 16 layer per epilogue, with cublasLt and without. Inputs are multiples
    /// of 1/8 below 2 (exact in TF32), so both give the same sums up to the order of adding.
    fn check_lt(&mut self) -> std::result::Result<(), String> {
        let (g, [x, w, bias]) = self.check_layer()?;
        let (b, i, o) = (g.m, g.k, g.n);
        for (act, keep) in [
            (Activation::Identity, false),
            (Activation::Relu, false),
            (Activation::Gelu, false),
            (Activation::Gelu, true),
        ] {
            let mut got =
                (self.zeros(b * o).map_err(|e| e.to_string())?, self.zeros(b * o).map_err(|e| e.to_string())?);
            let mut want =
                (self.zeros(b * o).map_err(|e| e.to_string())?, self.zeros(b * o).map_err(|e| e.to_string())?);
            for (use_lt, (out, z)) in [(true, &mut got), (false, &mut want)] {
                let r = self.lt_if(use_lt, |be| {
                    let keep_z = keep.then(|| be.view_mut(z, 0..b * o));
                    let (xv, wv, bv) = (be.view(&x, 0..b * i), be.view(&w, 0..i * o), be.view(&bias, 0..o));
                    be.dense_fused(g, xv, wv, out, b * o, bv, act, keep_z)
                });
                r.map_err(|e| format!("{act:?}: {e}"))?;
            }
            let host = |buf: &DevBuf| -> std::result::Result<Vec<f32>, String> {
                let mut h = vec![0.0; b * o];
                self.download(buf, 0..b * o, &mut h).map_err(|e| e.to_string())?;
                Ok(h)
            };
            let mut pairs = vec![(host(&got.0)?, host(&want.0)?, "output")];
            if keep {
                pairs.push((host(&got.1)?, host(&want.1)?, "kept pre-activation"));
            }
            for (g, w, what) in pairs {
                if let Some(e) = (0..b * o).find(|&e| !((g[e] - w[e]).abs() <= 1e-4 * (1.0 + w[e].abs()))) {
                    return Err(format!(
                        "{act:?} {what} element {e}: {} where cuBLAS + hv_bias_act give {}",
                        g[e], w[e]
                    ));
                }
            }
        }
        Ok(())
    }
}
