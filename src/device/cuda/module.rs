//! The kernels of `kernels.cu`, compiled by NVRTC for this GPU's architecture once per
//! process (the PTX is cached by architecture, so several contexts in one process compile
//! once), loaded into the context, and looked up by name.
//!
//! Must not: compile more than once per architecture and process.

use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub struct Kernels {
    pub fill: CudaFunction,
    pub gather_rows: CudaFunction,
    pub bias_act: CudaFunction,
    pub act_backward: CudaFunction,
    pub softmax_xent: CudaFunction,
    pub softmax_xent_smooth: CudaFunction,
    pub pointwise_loss: CudaFunction,
    pub weigh_rows: CudaFunction,
    pub binary_xent_smooth: CudaFunction,
    pub regression_loss: CudaFunction,
    pub dropout: CudaFunction,
    pub softmax_rows: CudaFunction,
    pub sgd: CudaFunction,
    pub adam: CudaFunction,
    pub pack_f16: CudaFunction,
    pub unpack_f16: CudaFunction,
    pub pack_bf16: CudaFunction,
    pub unpack_bf16: CudaFunction,
    pub round_bf16: CudaFunction,
    pub sum_squares: CudaFunction,
    pub clamp: CudaFunction,
    pub sgd_seg: CudaFunction,
    pub adam_seg: CudaFunction,
}

/// PTX for `compute_XY` (NVRTC, `nvrtc.rs`), compiled once per process.
fn ptx_for(arch: &str) -> Result<String> {
    static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().expect("ptx cache").get(arch) {
        return Ok(p.clone());
    }
    let t = std::time::Instant::now();
    let ptx = super::nvrtc::compile_ptx(arch)
        .map_err(|e| Error::Cuda(format!("NVRTC could not compile kernels.cu for {arch}: {e}")))?;
    log::debug!("NVRTC compiled kernels.cu for {arch} in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    cache.lock().expect("ptx cache").insert(arch.to_string(), ptx.clone());
    Ok(ptx)
}

impl Kernels {
    pub fn load(ctx: &Arc<CudaContext>, (major, minor): (i32, i32)) -> Result<Kernels> {
        let arch = format!("compute_{major}{minor}");
        let ptx = ptx_for(&arch)?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)).map_err(|e| {
            Error::Cuda(format!(
                "loading the kernels compiled for {arch}: {e}; is the driver older than the NVRTC library?"
            ))
        })?;
        let f = |name: &str| {
            module.load_function(name).map_err(|e| Error::Cuda(format!("kernel {name} missing from the module: {e}")))
        };
        Ok(Kernels {
            fill: f("hv_fill")?,
            gather_rows: f("hv_gather_rows")?,
            bias_act: f("hv_bias_act")?,
            act_backward: f("hv_act_backward")?,
            softmax_xent: f("hv_softmax_xent")?,
            softmax_xent_smooth: f("hv_softmax_xent_smooth")?,
            pointwise_loss: f("hv_pointwise_loss")?,
            weigh_rows: f("hv_weigh_rows")?,
            binary_xent_smooth: f("hv_binary_xent_smooth")?,
            regression_loss: f("hv_regression_loss")?,
            dropout: f("hv_dropout")?,
            softmax_rows: f("hv_softmax_rows")?,
            sgd: f("hv_sgd")?,
            adam: f("hv_adam")?,
            pack_f16: f("hv_pack_f16")?,
            unpack_f16: f("hv_unpack_f16")?,
            pack_bf16: f("hv_pack_bf16")?,
            unpack_bf16: f("hv_unpack_bf16")?,
            round_bf16: f("hv_round_bf16")?,
            sum_squares: f("hv_sum_squares")?,
            clamp: f("hv_clamp")?,
            sgd_seg: f("hv_sgd_seg")?,
            adam_seg: f("hv_adam_seg")?,
        })
    }
}
