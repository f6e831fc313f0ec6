//! The CUDA backend, and the only module that touches cudarc (CUDA is loaded at run time:
//! the build needs no CUDA toolkit).
//!
//! - `probe`: finds the driver and libraries before anything else is called (cudarc panics
//!   when it cannot load a library), and turns their absence into one clear line;
//! - `backend`: `Cuda`, the `Backend` on one GPU (cuBLAS for the products, our kernels for
//!   the rest); `buf`: `DevBuf`, device memory with a pinned host copy for gradient
//!   buckets and batches, and the staging hooks the communication thread calls; `alloc`:
//!   allocations and the out-of-memory message;
//! - `bf16_gemm`: `precision = "bf16"`'s products (operands rounded, float32 sums);
//!   `bf16_dense`: bf16 layer outputs (opt-in), through cublasLt's bf16 epilogues;
//! - `gemm_map`: the row-major → cuBLAS argument mapping, a pure function;
//! - `dense`, `lt`, `lt_map`: a dense layer's forward as one cublasLt call with the bias and
//!   activation in its epilogue (the call chosen by a pure function, its algorithm once per
//!   shape), checked against the separate kernels at start-up;
//! - `elementwise`: the launches of the kernels whose outputs a bf16 product may read
//!   next (bias+activation, activation backward, the optimizer per tensor), which keep the
//!   output's bf16 copy with `precision = "bf16"`;
//! - `clip`: gradient clipping's sum of squares and clamp on the GPU;
//! - `fused`: the optimizer's update of a bucket's tensors in one launch;
//! - `graph`: a step's launches captured once as a CUDA graph and replayed;
//! - `loss`: the loss kernels' launches and the reading of their per-row sums (at once, or
//!   after the step's backward and optimizer are queued);
//! - `kernels.cu`, `launch`, `nvrtc`, `module`: the element-wise kernels, their launch
//!   geometry, their compilation by NVRTC, and their loading at start-up;
//! - `nccl_lib`, `nccl`, `nccl_pipe`: NCCL loaded at run time (the loader's path, CUDA's
//!   folders, the `nvidia-nccl` pip package), gradient buckets all-reduced GPU to GPU through
//!   it, and pipeline stages' messages sent GPU to GPU;
//! - `shim.cpp`, `shim` (tests): the same kernels compiled by the host C++ compiler and
//!   checked against the CPU backend.
//!
//! Must not: be reached by code outside `device/` except through `Backend`.

mod alloc;
mod backend;
mod bf16_dense;
mod bf16_gemm;
mod buf;
mod clip;
mod dense;
mod elementwise;
mod fused;
mod gemm_map;
mod graph;
pub mod launch;
mod loss;
mod lt;
mod lt_map;
mod module;
mod nccl;
pub mod nccl_lib;
mod nccl_pipe;
pub mod nvrtc;
mod probe;
#[cfg(test)]
mod shim;

pub use backend::Cuda;
pub use probe::{check_libraries, probe};

/// What a bf16 backend keeps in bf16 beside its float32 values: `copies`, a bf16 copy of what
/// the products read, written by the kernels that write the values (HVTRAIN_BF16_COPIES=1,
/// `bf16_gemm.rs`); `outputs`, the layers' outputs stored rounded (HVTRAIN_BF16_OUTPUTS=1).
/// Never-run GPU code stays opt-in until `run-gpu-check.sh` has passed it on a GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bf16Keep {
    pub copies: bool,
    pub outputs: bool,
}

impl Bf16Keep {
    /// As the environment asks.
    pub fn asked() -> Bf16Keep {
        let on = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
        Bf16Keep { copies: on("HVTRAIN_BF16_COPIES"), outputs: on("HVTRAIN_BF16_OUTPUTS") }
    }
}
