//! bf16 layer outputs on the CUDA backend (`precision = "bf16"` with HVTRAIN_BF16_OUTPUTS=1;
//! opt-in until a GPU run has passed it): every layer's output is stored rounded to bf16, as
//! autocast keeps activations and as the CPU reference stores them (`Cpu::with_outputs`).
//!
//! Where `lt_map::forward_call_bf16` has a call (identity and ReLU: cuBLAS's bf16 GELU was
//! two bf16 steps off on an H200) and cublasLt an algorithm for it, a layer is one cublasLt call on the bf16
//! operands (kept copies, or rounded into scratch by `bf16_operands`) with the bias and the
//! activation in its epilogue, writing a bf16 D (the output's kept copy, or scratch); the
//! bias is read in bf16 (cuBLAS 13.1 takes no float32 bias with a bf16 D), so every path rounds
//! it (`hv_bias_act` with `BIAS_BF16`, the CPU reference's `bias_act`), as autocast does; then
//! `hv_unpack_bf16` widens D into the float32 output, so float32 holds the rounded values and
//! everything after reads what the CPU reference reads. Per output element that is 2 bytes
//! written by the product and 6 by the widening, against 14 for the separate path (float32
//! product, bias+activation's read and write, its copy). Elsewhere: cublasGemmEx, then
//! hv_bias_act and `hv_round_bf16` (`elementwise.rs`).
//!
//! `start_bf16_dense` checks the cublasLt path against the separate one on a small layer of
//! each epilogue at start-up; if it fails, every layer takes the separate kernels, with the
//! reason in the log.
//!
//! Must not: build cublasLt's descriptors (`lt.rs`) or choose the call (`lt_map.rs`).

use super::backend::Cuda;
use super::bf16_gemm::bf16_operand;
use super::buf::{drv, DView, DViewMut, DevBuf};
use super::launch::config_1d;
use super::lt::Lt;
use super::lt_map::forward_call_bf16;
use crate::config::Activation;
use crate::device::backend::{Backend, Gemm};
use crate::error::{Error, Result};
use cudarc::driver::{CudaViewMut, DevicePtr, DevicePtrMut, PushKernelArg};

impl Cuda {
    /// A bf16 backend's dense layers: with bf16 outputs, start cublasLt for them and check it;
    /// returns what the log says of the dense layers.
    pub(super) fn start_bf16_dense(&mut self, major: i32) -> String {
        let products = if self.low_copies {
            "cublasGemmEx on bf16 copies kept by the kernels that write the values (HVTRAIN_BF16_COPIES=1; \
             CUDA graphs off)"
        } else {
            "cublasGemmEx"
        };
        if !self.outputs {
            return format!("{products} + hv_bias_act");
        }
        let separate = format!("bf16 outputs (HVTRAIN_BF16_OUTPUTS=1): {products} + hv_bias_act + hv_round_bf16");
        if std::env::var("HVTRAIN_CUBLASLT").is_ok_and(|v| v == "0") {
            return format!("{separate} (HVTRAIN_CUBLASLT=0)");
        }
        self.lt = match Lt::new(&self.stream, major, false) {
            Ok(lt) => Some(lt),
            Err(e) => return format!("{separate} (cublasLt: {e})"),
        };
        if let Err(e) = self.check_bf16_dense() {
            self.lt = None;
            log::warn!(
                "cublasLt's bf16 epilogues are off: {e}; the layers use cublasGemmEx + hv_bias_act + hv_round_bf16"
            );
            return format!("{separate} (cublasLt's bf16 epilogues failed their start-up check: {e})");
        }
        let from = if self.low_copies { "kept copies" } else { "operands rounded into scratch" };
        format!(
            "bf16 outputs (HVTRAIN_BF16_OUTPUTS=1): cublasLt on bf16 {from}, the bias and activation in the \
             epilogue writing bf16, widened to float32 (checked at start-up); tanh and GELU: {products} + \
             hv_bias_act + hv_round_bf16"
        )
    }

    /// `Backend::dense` with bf16 outputs: one cublasLt call where there is one, else the
    /// separate kernels (`bias_act` rounds the output and GELU's kept pre-activation).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dense_bf16(
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
            if n > 0 && forward_call_bf16(g, act, keep_z.is_some(), [0; 3]).is_ok() {
                g.check(x.len, w.len, n);
                if self.dense_lt_bf16(lt, g, x, w, out, n, bias, act)? {
                    return Ok(());
                }
            }
        }
        self.gemm(g, x, w, self.view_mut(out, 0..n))?;
        self.bias_act(self.view_mut(out, 0..n), bias, act, keep_z)
    }

    /// The cublasLt bf16 layer, then the widening; false (nothing written to `out`) where
    /// cublasLt has no algorithm for the call.
    #[allow(clippy::too_many_arguments)]
    fn dense_lt_bf16(
        &self,
        lt: &Lt,
        g: Gemm,
        x: DView<'_>,
        w: DView<'_>,
        out: &mut DevBuf,
        n: usize,
        bias: DView<'_>,
        act: Activation,
    ) -> Result<bool> {
        let cell = self.bf16.as_ref().expect("bf16 outputs belong to a bf16 backend");
        let mut scratch = cell.borrow_mut();
        self.bf16_operands([&x, &w], &mut scratch[..2])?;
        // The bias in bf16 too: cuBLAS's bf16 epilogue reads it in D's type (`hv_bias_act`
        // rounds it the same way where the layer takes the separate kernels).
        self.bf16_operands([&bias], &mut scratch[3..])?;
        let [s0, s1, s2, s3] = &mut *scratch;
        let (xb, wb, bb) = (bf16_operand(&x, s0), bf16_operand(&w, s1), bf16_operand(&bias, s3));
        // D: the output's bf16 copy where this backend keeps copies, else scratch.
        let (mut o, mut low) = self.with_low(self.view_mut(out, 0..n))?;
        let mut d_scratch: CudaViewMut<'_, u16>;
        let d = match low.as_mut() {
            Some(l) => &mut l.bits,
            None => {
                d_scratch = self.u16_scratch(s2, n)?.slice_mut(0..n);
                &mut d_scratch
            }
        };
        let s = &self.stream;
        let (xp, _g1) = xb.device_ptr(s);
        let (wp, _g2) = wb.device_ptr(s);
        let (bp, _g3) = bb.device_ptr(s);
        let (dp, _g4) = d.device_ptr_mut(s);
        let call = forward_call_bf16(g, act, false, [xp, wp, dp]).map_err(|e| Error::Cuda(e.into()))?;
        if lt.prepare(&call).is_err() {
            return Ok(false);
        }
        // SAFETY: the bf16 operands hold x [m, k] and W [k, n] (checked by the caller; the
        // scratch holds at least that), D n elements, the bias the layer's width in bf16;
        // all live until the guards drop, after the call is queued on this stream.
        unsafe { lt.run(&call, [wp, xp, dp], bp, None, s) }
            .map_err(|e| Error::Cuda(format!("cublasLt bf16 dense layer {}x{}x{}: {e}", g.m, g.k, g.n)))?;
        drop((_g1, _g2, _g3, _g4));
        let n64 = n as i64;
        let mut l = self.stream.launch_builder(&self.k.unpack_bf16);
        l.arg(d).arg(&mut o).arg(&n64);
        // SAFETY: hv_unpack_bf16(const unsigned short*, float*, long long) over n elements of
        // D and of the output.
        unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_unpack_bf16 of a bf16 layer output"))?;
        if let Some(l) = low {
            l.written();
        }
        Ok(true)
    }

    /// Two layers per epilogue (identity, ReLU), through cublasLt and through the separate
    /// kernels, both with bf16 outputs; cublasLt must have run each. 5 × 24 · 24 × 16 with
    /// inputs multiples of 1/8 below 1 (exact in bf16; every sum exact in float32): the two
    /// must agree to the bit. 33 × 65 · 65 × 24 with inputs in thousandths, whose sums cancel:
    /// within one bf16 step (2^-7 of the value) plus 3e-5 (float32 sums in another order), which
    /// a bf16 intermediate (a split-K sum or an epilogue in bf16) misses by far where the sum
    /// cancels (on an H200, 2026-11-29: 0.03906 for 0.04028, 5 steps). Every value a bf16 value.
    fn check_bf16_dense(&mut self) -> std::result::Result<(), String> {
        let exact = self.check_layer()?;
        let cancelling = self.cancelling_layer()?;
        for ((g, [x, w, bias]), exact) in [(exact, true), (cancelling, false)] {
            let (b, i, o) = (g.m, g.k, g.n);
            for act in [Activation::Identity, Activation::Relu] {
                let mut res = [vec![0.0f32; b * o], vec![0.0f32; b * o]];
                for (use_lt, host) in [(true, 0), (false, 1)] {
                    let mut out = self.zeros(b * o).map_err(|e| e.to_string())?;
                    let (r, ran) = self.lt_if(use_lt, |be| {
                        let before = be.bf16_epilogue_calls();
                        let (xv, wv, bv) = (be.view(&x, 0..b * i), be.view(&w, 0..i * o), be.view(&bias, 0..o));
                        let r = be.dense_bf16(g, xv, wv, &mut out, b * o, bv, act, None);
                        (r, be.bf16_epilogue_calls() - before)
                    });
                    r.map_err(|e| format!("{act:?} {b}x{i}x{o}: {e}"))?;
                    if use_lt && ran != 1 {
                        let why = self.lt.as_ref().map_or_else(String::new, |l| l.refusals());
                        return Err(format!("{act:?} {b}x{i}x{o}: the layer did not run through cublasLt ({why})"));
                    }
                    self.download(&out, 0..b * o, &mut res[host]).map_err(|e| e.to_string())?;
                }
                let [got, want] = &res;
                for e in 0..b * o {
                    let (u, v) = (got[e], want[e]);
                    let tol = if exact { 0.0 } else { 2f32.powi(-7) * v.abs() + 3e-5 };
                    if u.to_bits() & 0xffff != 0 || v.to_bits() & 0xffff != 0 || !((u - v).abs() <= tol) {
                        return Err(format!(
                            "{act:?} {b}x{i}x{o} output element {e}: {u} where cublasGemmEx + hv_bias_act + \
                             hv_round_bf16 give {v}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The start-up check's second layer: 33 × 65 · 65 × 24, inputs in thousandths in [-1, 1].
    fn cancelling_layer(&self) -> std::result::Result<(Gemm, [DevBuf; 3]), String> {
        self.check_layer_of((33, 65, 24), |k, seed| ((k * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0)
    }
}

impl Cuda {
    /// bf16 outputs go through cublasLt's bf16 epilogues (they passed the start-up check).
    pub fn bf16_epilogues(&self) -> bool {
        self.outputs && self.lt.is_some()
    }

    /// Layers run through cublasLt so far (the selftest's proof the epilogue ran).
    pub fn bf16_epilogue_calls(&self) -> u64 {
        self.lt.as_ref().map_or(0, |l| l.calls.get())
    }
}
