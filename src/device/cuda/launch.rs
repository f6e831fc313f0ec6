//! Launch geometry of the element-wise kernels (`kernels.cu`), shared by the CUDA launches
//! and by the host shim that runs the same kernels on the CPU in tests, so the tests run the
//! grids the GPU runs. Every kernel is a grid-stride loop, so any grid is correct; the cap
//! only bounds the launch size (a grid-stride loop then covers the rest).
//!
//! Must not: launch anything (it computes geometry).

/// Threads per block.
pub const BLOCK: u32 = 256;
/// At most this many blocks (8 per SM on a 132-SM H100 and more: enough to fill the GPU).
pub const MAX_GRID: u32 = 4096;

/// (blocks, threads per block) for `n` independent work items (elements or rows).
pub fn grid_1d(n: usize) -> (u32, u32) {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, MAX_GRID as usize) as u32;
    (blocks, BLOCK)
}

/// The kernels of `kernels.cu`, by name: what NVRTC must produce and the module must hold
/// (the NVRTC check and the shim tests walk it).
#[cfg_attr(not(test), allow(dead_code))]
pub const KERNELS: &[&str] = &[
    "hv_fill",
    "hv_gather_rows",
    "hv_bias_act",
    "hv_act_backward",
    "hv_softmax_xent",
    "hv_softmax_xent_smooth",
    "hv_pointwise_loss",
    "hv_binary_xent_smooth",
    "hv_regression_loss",
    "hv_weigh_rows",
    "hv_softmax_rows",
    "hv_dropout",
    "hv_sgd",
    "hv_adam",
    "hv_pack_f16",
    "hv_unpack_f16",
    "hv_pack_bf16",
    "hv_unpack_bf16",
    "hv_sum_squares",
    "hv_clamp",
    "hv_sgd_seg",
    "hv_adam_seg",
];

/// At most this many tensors in one fused optimizer launch (`hv_segs` in kernels.cu).
pub const MAX_SEGS: usize = 32;

/// `struct hv_segs` of kernels.cu, passed by value: segment k ends at `end[k]` (offsets in the
/// launch's range) and takes the weight decay when `decayed[k]` is 1.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Segs {
    pub end: [i64; MAX_SEGS],
    pub decayed: [i32; MAX_SEGS],
    pub n: i32,
}

// SAFETY: a plain repr(C) struct of integers, laid out as kernels.cu's `struct hv_segs`.
unsafe impl cudarc::driver::DeviceRepr for Segs {}

impl Segs {
    /// The table for consecutive `segments` (arena ranges, each with its decay flag), offsets
    /// from the first's start; None when they are more than `MAX_SEGS` or not adjacent.
    pub fn of(segments: &[crate::device::Segment]) -> Option<Segs> {
        let first = segments.first()?.range.start;
        if segments.len() > MAX_SEGS || segments.windows(2).any(|w| w[0].range.end != w[1].range.start) {
            return None;
        }
        let mut s = Segs { end: [0; MAX_SEGS], decayed: [0; MAX_SEGS], n: segments.len() as i32 };
        for (k, seg) in segments.iter().enumerate() {
            s.end[k] = (seg.range.end - first) as i64;
            s.decayed[k] = i32::from(seg.decayed);
        }
        Some(s)
    }
}

/// The sets a clipping kernel splits `n` elements into (one partial result each, added on
/// the host): enough threads to keep the GPU's memory busy, few enough that reading the
/// partials back is cheap (at most 256 KiB of float64).
pub fn reduce_parts(n: usize) -> usize {
    n.clamp(1, 32_768)
}

/// The kernel source, compiled by NVRTC at run time.
pub const SOURCE: &str = include_str!("kernels.cu");

/// The launch configuration of a kernel over `n` elements (`grid_1d`'s grid).
pub fn config_1d(n: usize) -> cudarc::driver::LaunchConfig {
    let (g, b) = grid_1d(n);
    cudarc::driver::LaunchConfig { grid_dim: (g, 1, 1), block_dim: (b, 1, 1), shared_mem_bytes: 0 }
}

/// The activation codes `kernels.cu` uses.
/// Or'ed into `act_code` for `hv_bias_act`: the bias rounded to bf16 before it is added (bf16
/// layer outputs: cuBLAS's bf16 epilogue reads the bias in bf16, and every path agrees).
pub const BIAS_BF16: i32 = 16;

pub fn act_code(act: crate::config::Activation) -> i32 {
    use crate::config::Activation::*;
    match act {
        Identity => 0,
        Relu => 1,
        Tanh => 2,
        Gelu => 3,
        Silu => 4,
        Sigmoid => 5,
        Softplus => 6,
        Elu => 7,
        Selu => 8,
        LeakyRelu => 9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_cover_every_item_and_stay_capped() {
        for n in [0usize, 1, 255, 256, 257, 1 << 20, 1 << 30] {
            let (g, b) = grid_1d(n);
            assert!((1..=MAX_GRID).contains(&g) && b == BLOCK);
            // With a grid-stride loop, coverage needs only g·b ≥ 1; below the cap the grid
            // covers n in one pass.
            if n <= (MAX_GRID * BLOCK) as usize {
                assert!(g as usize * b as usize >= n, "n = {n}");
            }
        }
    }

    #[test]
    fn every_kernel_is_in_the_source() {
        for k in KERNELS {
            assert!(SOURCE.contains(&format!("__global__ void {k}(")), "{k} missing from kernels.cu");
        }
    }
}
