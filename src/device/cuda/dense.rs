//! The CUDA backend's dense-layer forward: one cublasLt call with the bias and activation in
//! its epilogue where `lt_map` finds one (float32 and TF32 products), else cuBLAS then
//! `hv_bias_act`; and the start-up check that turns cublasLt off, with the reason, unless it
//! gives what the separate kernels give on a small layer of every epilogue.
//!
//! Must not: choose the cublasLt call (`lt_map`) or build its descriptors (`lt`).

use super::backend::Cuda;
use super::buf::{DView, DViewMut, DevBuf};
use super::lt::Lt;
use super::lt_map::forward_call;
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
            if let Ok(call) = forward_call(g, act, keep_z.is_some(), [xp, wp, op]) {
                let mut z = keep_z.map(DViewMut::cu);
                let zp = z.as_mut().map(|z| z.device_ptr_mut(s));
                // SAFETY: the views hold the shapes `forward_call` was given (checked above;
                // bias: the layer's width, z: as out); they live until the guards drop, after
                // the call is queued on this stream.
                return unsafe { lt.run(&call, [wp, xp, op], bp, zp.as_ref().map(|z| z.0), s) }
                    .map_err(|e| Error::Cuda(format!("cublasLt dense layer {}x{}x{}: {e}", g.m, g.k, g.n)));
            }
        }
        self.gemm(g, x, w, self.view_mut(out, 0..n))?;
        self.bias_act(self.view_mut(out, 0..n), bias, act, keep_z)
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
        match self.check_lt() {
            Ok(()) => "cublasLt with the bias and activation in the epilogue (checked at start-up)".into(),
            Err(e) => {
                self.lt = None;
                log::warn!("cublasLt's fused dense layers are off: {e}; the layers use cuBLAS + hv_bias_act");
                format!("cuBLAS + hv_bias_act (cublasLt failed its start-up check: {e})")
            }
        }
    }

    /// One 5 × 24 · 24 × 16 layer per epilogue, with cublasLt and without. Inputs are multiples
    /// of 1/8 below 2 (exact in TF32), so both give the same sums up to the order of adding.
    fn check_lt(&mut self) -> std::result::Result<(), String> {
        let (b, i, o) = (5usize, 24usize, 16usize);
        let val = |k: usize, seed: usize| ((k * 7 + seed * 13) % 15) as f32 / 8.0 - 0.875;
        let up = |v: Vec<f32>| self.upload(&v).map_err(|e| e.to_string());
        let x = up((0..b * i).map(|k| val(k, 1)).collect())?;
        let w = up((0..i * o).map(|k| val(k, 2)).collect())?;
        let bias = up((0..o).map(|k| val(k, 3)).collect())?;
        let g = Gemm::new(b, i, o, Trans::N, Trans::N);
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
                let lt = if use_lt { None } else { self.lt.take() };
                let keep_z = keep.then(|| self.view_mut(z, 0..b * o));
                let (xv, wv, bv) = (self.view(&x, 0..b * i), self.view(&w, 0..i * o), self.view(&bias, 0..o));
                let r = self.dense_fused(g, xv, wv, out, b * o, bv, act, keep_z);
                if lt.is_some() {
                    self.lt = lt;
                }
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
