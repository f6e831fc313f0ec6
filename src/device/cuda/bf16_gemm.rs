//! bf16 products on the CUDA backend (`precision = "bf16"`): `cublasGemmEx` on bf16 operands
//! with float32 output and compute, so master weights and gradients stay float32. An operand
//! is read from its buffer's bf16 copy where the copy is current on the whole operand (the
//! weights after the optimizer's update, activations after bias+activation, deltas after the
//! activation's backward: `buf.rs`, `elementwise.rs`), else rounded by `hv_pack_bf16` into a
//! scratch buffer first. Either way the product sees the same bits: the copy is the rounding.
//! Copies are opt-in (`HVTRAIN_BF16_COPIES=1`) until a GPU run has passed them.
//!
//! Must not: be reached except through `Backend::gemm` (`backend.rs`) and, for its operands,
//! the bf16 outputs' layers (`bf16_dense.rs`).

use super::backend::Cuda;
use super::buf::drv;
use super::buf::{DView, DViewMut};
use super::launch::config_1d;
use crate::error::{Error, Result};
use cudarc::cublas::{sys as blas_sys, GemmConfig};
use cudarc::driver::{CudaSlice, CudaView, PushKernelArg};

impl Cuda {
    /// `gemm` with bf16 operands: each operand its buffer's bf16 copy where current, else
    /// rounded to bf16 into its scratch buffer (`hv_pack_bf16`, round to nearest even as the
    /// CPU's `bf16.rs`), then `cublasGemmEx` with bf16 A and B, float32 C and float32 compute
    /// (`CUBLAS_COMPUTE_32F`): the tensor cores multiply bf16 and sum in float32. The
    /// arguments are gemm_map's, as for SGEMM.
    pub(super) fn gemm_bf16(
        &self,
        cfg: &GemmConfig<f32>,
        a: DView<'_>,
        b: DView<'_>,
        c: DViewMut<'_>,
        scratch: &mut [Option<CudaSlice<u16>>],
    ) -> Result<()> {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        self.bf16_operands([&a, &b], scratch)?;
        let (sa, sb) = (bf16_operand(&a, &scratch[0]), bf16_operand(&b, &scratch[1]));
        let mut cc = c.cu();
        let (pa, _ga) = sa.device_ptr(&self.stream);
        let (pb, _gb) = sb.device_ptr(&self.stream);
        let (pc, _gc) = cc.device_ptr_mut(&self.stream);
        let bf = blas_sys::cudaDataType::CUDA_R_16BF;
        // SAFETY: device pointers of live buffers holding the operands gemm_map sized; alpha
        // and beta are host floats (the handle's default pointer mode). cuBLAS's A is our b.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                cfg.transa,
                cfg.transb,
                cfg.m,
                cfg.n,
                cfg.k,
                (&cfg.alpha) as *const f32 as *const _,
                pb as *const _,
                bf,
                cfg.lda,
                pa as *const _,
                bf,
                cfg.ldb,
                (&cfg.beta) as *const f32 as *const _,
                pc as *mut _,
                blas_sys::cudaDataType::CUDA_R_32F,
                cfg.ldc,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Cuda(format!("cuBLAS GemmEx (bf16): {e}")))
    }
}

impl Cuda {
    /// Each of `ops` in bf16: from its buffer's copy where current on the whole operand (nothing
    /// to do), else rounded by `hv_pack_bf16` into the scratch slot of the same index (grown on
    /// demand); counted for the log (`operands`). `bf16_operand` then gives the bits to read.
    pub(super) fn bf16_operands<const N: usize>(
        &self,
        ops: [&DView<'_>; N],
        scratch: &mut [Option<CudaSlice<u16>>],
    ) -> Result<()> {
        let mut counts = self.operands.get();
        for (slot, v) in scratch.iter_mut().zip(ops) {
            if v.low.is_some() {
                counts[0] += 1;
                continue;
            }
            counts[1] += 1;
            let dst = self.u16_scratch(slot, v.len)?;
            let (n64, src) = (v.len as i64, v.cu());
            let mut l = self.stream.launch_builder(&self.k.pack_bf16);
            l.arg(&src).arg(dst).arg(&n64);
            // SAFETY: hv_pack_bf16(const float*, unsigned short*, long long) over v.len elements,
            // the scratch holding at least that many.
            unsafe { l.launch(config_1d(v.len.max(1))) }
                .map_err(drv("launching the bf16 rounding of a GEMM operand"))?;
        }
        self.operands.set(counts);
        Ok(())
    }

    /// `slot`'s bf16 scratch, (re)allocated to hold `n` elements (a captured graph is told).
    pub(super) fn u16_scratch<'s>(
        &self,
        slot: &'s mut Option<CudaSlice<u16>>,
        n: usize,
    ) -> Result<&'s mut CudaSlice<u16>> {
        if slot.as_ref().is_none_or(|s| s.len() < n) {
            *slot = None; // free the old one first
            *slot = Some(self.stream.alloc_zeros::<u16>(n.max(1)).map_err(|e| self.oom(e, n * 2))?);
            self.scratch_grew();
        }
        Ok(slot.as_mut().expect("allocated above"))
    }
}

/// The bf16 bits `bf16_operands` readied for `v`: its copy's range, or the scratch `slot`.
pub(super) fn bf16_operand<'a>(v: &DView<'a>, slot: &'a Option<CudaSlice<u16>>) -> CudaView<'a, u16> {
    match v.low {
        Some(bits) => bits.slice(v.start..v.start + v.len),
        None => slot.as_ref().expect("readied by bf16_operands").slice(0..v.len.max(1)),
    }
}
