//! cublasLt for the dense layers: forward, the product with the bias and the activation in its
//! epilogue, and backward into the layer before with the activation's derivative and that
//! layer's bias gradient in it (`lt_map` says which call and why not); the algorithm chosen
//! once per call shape by cublasLt's heuristic and kept with its descriptors (`plans`), so a
//! step re-issues known calls and only the pointers change. ReLU layers' bitmasks (written
//! forward, read backward) are kept here by the address of the output they belong to.
//!
//! `Cuda::new` starts it and checks it on one small layer of every epilogue against cuBLAS +
//! `hv_bias_act` before the first step (`dense.rs`); anything that fails there, or a
//! `HVTRAIN_CUBLASLT=0`, leaves the separate kernels, with the reason in the log.
//!
//! With bf16 layer outputs (`bf16_dense.rs`) the same calls run on bf16 operands writing a
//! bf16 D from a bf16 bias, the sums float32 (`LtCall::bf16`).
//!
//! Must not: decide which layers it takes (`lt_map` does).

use super::gemm_map::Op;
use super::lt_map::{Epilogue, LtCall};
use cudarc::cublaslt::{result as lt, sys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::size_of;
use std::sync::Arc;

/// A cublasLt handle, its workspace, and the plans of the calls seen so far.
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    tf32: bool,
    plans: RefCell<HashMap<LtCall, Plan>>,
    /// Calls cublasLt found no algorithm for, and its answer (`prepare`).
    refused: RefCell<HashMap<LtCall, String>>,
    /// Calls queued so far (the selftest's proof that a path ran through cublasLt).
    pub calls: std::cell::Cell<u64>,
    /// The backward epilogues passed the start-up check: ReLU layers write their bitmask.
    pub backward: std::cell::Cell<bool>,
    /// ReLU bitmasks by the address of the layer output they were written with: its device
    /// address, and bytes written (0: stale, the output was since written without it).
    masks: RefCell<HashMap<u64, (CudaSlice<u8>, u64, usize)>>,
}

// SAFETY: the handle and descriptors are plain host objects that cublasLt lets any thread use,
// one at a time (cudarc's own CudaBlasLT is Send for the same reason); the backend that owns
// this is used by one thread at a time (it holds RefCells, so it is not Sync).
unsafe impl Send for Lt {}

/// The descriptors of one call shape and the algorithm chosen for it.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: created by `Lt::plan` and destroyed only here.
        unsafe {
            for l in self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        self.plans.borrow_mut().clear();
        // SAFETY: the handle is this struct's; its plans are gone.
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

fn err(what: &str) -> impl Fn(lt::CublasError) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

/// Set one attribute from a plain value.
unsafe fn set_desc<T>(
    d: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &T,
) -> Result<(), String> {
    lt::set_matmul_desc_attribute(d, attr, (v as *const T).cast(), size_of::<T>())
        .map_err(err("cublasLtMatmulDescSetAttribute"))
}

impl Lt {
    /// A handle and a workspace (32 MiB on Hopper and newer, 4 MiB before, NVIDIA's advice);
    /// `tf32`: the products on TF32 tensor cores (`precision = "tf32"`).
    pub fn new(stream: &Arc<CudaStream>, major: i32, tf32: bool) -> Result<Lt, String> {
        // SAFETY: only tries to dlopen the library.
        let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
        if !present {
            return Err("libcublasLt was not found on the library path".into());
        }
        let handle = lt::create_handle().map_err(err("cublasLtCreate"))?;
        let size = if major >= 9 { 32 << 20 } else { 4 << 20 };
        let workspace = stream.alloc_zeros::<u8>(size).map_err(|e| format!("allocating cublasLt's workspace: {e}"))?;
        Ok(Lt {
            handle,
            workspace,
            tf32,
            plans: RefCell::new(HashMap::new()),
            refused: Default::default(),
            calls: Default::default(),
            backward: Default::default(),
            masks: Default::default(),
        })
    }

    /// The bitmask (`bytes`) a ReLU layer writing its output at `out` writes with it: its
    /// address, and whether memory was (re)allocated for it (scratch a graph may name).
    pub fn mask_for(&self, out: u64, bytes: usize, stream: &Arc<CudaStream>) -> Result<(u64, bool), String> {
        let mut masks = self.masks.borrow_mut();
        let grew = masks.get(&out).is_none_or(|m| m.0.len() < bytes);
        if grew {
            masks.remove(&out); // free the old one first
            let m = stream.alloc_zeros::<u8>(bytes.max(1)).map_err(|e| format!("allocating a ReLU bitmask: {e}"))?;
            let ptr = m.device_ptr(stream).0;
            masks.insert(out, (m, ptr, 0));
        }
        let m = masks.get_mut(&out).expect("inserted above");
        m.2 = bytes;
        Ok((m.1, grew))
    }

    /// The bitmask written with the output at `out`, if it was, of at least `bytes`.
    pub fn mask_of(&self, out: u64, bytes: usize) -> Option<u64> {
        self.masks.borrow().get(&out).filter(|m| m.2 >= bytes).map(|m| m.1)
    }

    /// The output at `out` was written without its bitmask: the one kept is stale.
    pub fn forget_mask(&self, out: u64) {
        if let Some(m) = self.masks.borrow_mut().get_mut(&out) {
            m.2 = 0;
        }
    }

    /// The descriptors and the heuristic's first algorithm for `c`.
    fn plan(&self, call: &LtCall) -> Result<Plan, String> {
        let c = &call.g;
        // bf16 calls: bf16 A, B and D, float32 sums and scale (never TF32: the operands are
        // bf16 already); float32 calls as `precision` says.
        let compute = if self.tf32 && !call.bf16 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let f32t = sys::cudaDataType_t::CUDA_R_32F;
        let mat = if call.bf16 { sys::cudaDataType_t::CUDA_R_16BF } else { f32t };
        let desc = lt::create_matmul_desc(compute, f32t).map_err(err("cublasLtMatmulDescCreate"))?;
        let layout = |rows: usize, cols: usize, ld: usize| {
            lt::create_matrix_layout(mat, rows as u64, cols as u64, ld as i64)
                .map_err(err("cublasLtMatrixLayoutCreate"))
        };
        let (ar, ac) = if c.transa == Op::N { (c.m, c.k) } else { (c.k, c.m) };
        let (br, bc) = if c.transb == Op::N { (c.k, c.n) } else { (c.n, c.k) };
        let mut plan =
            Plan { desc, layouts: [std::ptr::null_mut(); 3], algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] } };
        plan.layouts = [layout(ar, ac, c.lda)?, layout(br, bc, c.ldb)?, layout(c.m, c.n, c.ldc)?];
        use sys::cublasLtMatmulDescAttributes_t as A;
        let op = |o: Op| if o == Op::N { 0i32 } else { 1i32 };
        let epilogue = match call.epilogue {
            Epilogue::Bias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            Epilogue::ReluBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            Epilogue::GeluBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
            Epilogue::GeluAuxBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
            Epilogue::ReluAuxBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
            Epilogue::DreluBgrad => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DRELU_BGRAD,
            Epilogue::DgeluBgrad => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DGELU_BGRAD,
        };
        // SAFETY: a fresh descriptor; each value has the attribute's documented type.
        unsafe {
            set_desc(desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &op(c.transa))?;
            set_desc(desc, A::CUBLASLT_MATMUL_DESC_TRANSB, &op(c.transb))?;
            set_desc(desc, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue)?;
            if call.bf16 {
                // The bias in bf16, D's type: cuBLAS 13.1 answers CUBLAS_STATUS_INVALID_VALUE for
                // a float32 bias with a bf16 D (tools/cublaslt_probe.py, H200, 2026-11-29).
                set_desc(desc, A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &mat)?;
            }
            if let Some(ld) = call.aux_ld {
                set_desc(desc, A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &(ld as i64))?;
            }
        }
        let pref = lt::create_matmul_pref().map_err(err("cublasLtMatmulPreferenceCreate"))?;
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let ws = self.workspace.len();
        // A bf16 D: split-K partial sums only in float32 (no reduction scheme but
        // COMPUTE_TYPE), never in D's bf16 (INPLACE, OUTPUT_TYPE). On an H200 (2026-11-29) an
        // identity layer 33x65x24 came out 5 bf16 steps off where the sum cancels: a bf16
        // intermediate, the start-up check's second layer now looks for it.
        let reduction = if call.bf16 {
            sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE as u64
        } else {
            sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_MASK as u64
        };
        let prefs: [(P, u64); 6] = [
            (P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws as u64),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, u64::from(call.align[0])),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, u64::from(call.align[1])),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, u64::from(call.align[2])),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, u64::from(call.align[2])),
            (P::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction),
        ];
        let chosen = (|| {
            for (i, (attr, v)) in prefs.iter().enumerate() {
                // The workspace size is a uint64_t, the alignments and the mask uint32_t.
                // SAFETY: a fresh preference; the value has the attribute's documented type.
                let r = unsafe {
                    if i == 0 {
                        lt::set_matmul_pref_attribute(pref, *attr, (v as *const u64).cast(), size_of::<u64>())
                    } else {
                        let v32 = *v as u32;
                        lt::set_matmul_pref_attribute(pref, *attr, (&v32 as *const u32).cast(), size_of::<u32>())
                    }
                };
                r.map_err(err("cublasLtMatmulPreferenceSetAttribute"))?;
            }
            let [a, b, d] = plan.layouts;
            // SAFETY: every descriptor is live; C and D share a layout.
            unsafe { lt::get_matmul_algo_heuristic(self.handle, desc, a, b, d, d, pref) }
                .map_err(err("cublasLtMatmulAlgoGetHeuristic (no algorithm for this shape)"))
        })();
        // SAFETY: created above, not used after.
        unsafe {
            let _ = lt::destroy_matmul_pref(pref);
        }
        plan.algo = chosen?.algo;
        Ok(plan)
    }

    /// Plan `c` (kept for every later call of its shape), or say why cublasLt has no algorithm
    /// for it; a refusal is kept too, so a shape cublasLt refuses is asked once (bf16 outputs
    /// then use the separate kernels for it; `run` returns the refusal as its error).
    pub fn prepare(&self, c: &LtCall) -> Result<(), String> {
        if self.plans.borrow().contains_key(c) {
            return Ok(());
        }
        if let Some(why) = self.refused.borrow().get(c) {
            return Err(why.clone());
        }
        match self.plan(c) {
            Ok(p) => {
                self.plans.borrow_mut().insert(*c, p);
                Ok(())
            }
            Err(why) => {
                log::debug!("cublasLt refuses {c:?}: {why}");
                self.refused.borrow_mut().insert(*c, why.clone());
                Err(why)
            }
        }
    }

    /// What cublasLt answered for the calls it refused (`prepare`), for a start-up check's error.
    pub fn refusals(&self) -> String {
        let r = self.refused.borrow();
        if r.is_empty() {
            return "no call was refused".into();
        }
        r.iter()
            .map(|(c, why)| format!("{:?} {}x{}x{}: {why}", c.epilogue, c.g.m, c.g.n, c.g.k))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// D = epilogue(A · B + bias) on `stream`, the addresses as `lt_map` was given them
    /// (`c.align` was taken from these very addresses); `aux` with the epilogues that have one
    /// (GELU's pre-activation, ReLU's bitmask). Backward epilogues write the bias gradient
    /// to `bias`.
    ///
    /// # Safety
    /// Every address holds the matrix its layout describes (bias: m floats; aux: as D, or
    /// `lt_map::mask_bytes` for a bitmask), on
    /// this context, and stays allocated until the stream has run the call.
    pub unsafe fn run(
        &self,
        c: &LtCall,
        [a, b, d]: [u64; 3],
        bias: u64,
        aux: Option<u64>,
        stream: &CudaStream,
    ) -> Result<(), String> {
        self.prepare(c)?;
        self.calls.set(self.calls.get() + 1);
        let plans = self.plans.borrow();
        let p = &plans[c];
        use sys::cublasLtMatmulDescAttributes_t as A;
        set_desc(p.desc, A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &(bias as *const c_void))?;
        if let Some(z) = aux {
            set_desc(p.desc, A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &(z as *const c_void))?;
        }
        let (one, zero) = (1.0f32, 0.0f32);
        let (ws, _guard) = self.workspace.device_ptr(stream);
        let [la, lb, ld] = p.layouts;
        lt::matmul(
            self.handle,
            p.desc,
            (&one as *const f32).cast(),
            (&zero as *const f32).cast(),
            a as *const c_void,
            la,
            b as *const c_void,
            lb,
            d as *const c_void,
            ld,
            d as *mut c_void,
            ld,
            &p.algo,
            ws as *mut c_void,
            self.workspace.len(),
            stream.cu_stream() as sys::cudaStream_t,
        )
        .map_err(err("cublasLtMatmul"))
    }
}
