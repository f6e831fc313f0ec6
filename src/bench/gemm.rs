//! `hvtrain bench gemm`: the single-core GEMM rate of the CPU backend (float32 through the
//! matrix crate, or the bf16 kernel with `--precision bf16`), on exactly the matrix products
//! of one training step of an MLP (forward, weight gradients, input gradients), so a training
//! run's FLOP rate can be read as a fraction of it.
//!
//! Must not: call MPI or time anything but the matrix products.

use crate::device::cpu::{Gemm, Trans};
use crate::device::{Backend, Cpu};
use crate::error::Result;
use std::time::Instant;

/// `threads`: what `device::set_cpu_threads` was given (reported only).
pub fn run(
    layers: &[usize],
    batch: usize,
    seconds: f64,
    precision: crate::config::Precision,
    threads: usize,
) -> Result<()> {
    let be = Cpu::new(precision)?;
    // (m, k, n, ta, tb) for each product of a step, as Mlp::forward/backward issue them.
    let mut shapes = Vec::new();
    for w in layers.windows(2) {
        shapes.push((batch, w[0], w[1], Trans::N, Trans::N));
    }
    for (l, w) in layers.windows(2).enumerate() {
        shapes.push((w[0], batch, w[1], Trans::T, Trans::N));
        if l > 0 {
            shapes.push((batch, w[1], w[0], Trans::N, Trans::T));
        }
    }
    let bufs: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = shapes
        .iter()
        .map(|&(m, k, n, _, _)| (vec![0.5f32; m * k], vec![0.25f32; k * n], vec![0.0f32; m * n]))
        .collect();
    let flops: f64 = shapes.iter().map(|&(m, k, n, _, _)| 2.0 * (m * k * n) as f64).sum();
    let mut bufs = bufs;
    let step = |bufs: &mut Vec<(Vec<f32>, Vec<f32>, Vec<f32>)>| {
        for (&(m, k, n, ta, tb), (a, b, c)) in shapes.iter().zip(bufs.iter_mut()) {
            be.gemm(Gemm::new(m, k, n, ta, tb), a, b, c).expect("the CPU backend's gemm returns no error");
        }
    };
    for _ in 0..3 {
        step(&mut bufs);
    }
    let t = Instant::now();
    let mut iters = 0u64;
    while t.elapsed().as_secs_f64() < seconds {
        step(&mut bufs);
        iters += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    let gflops = flops * iters as f64 / secs / 1e9;
    let per_sample = flops / batch as f64;
    println!(
        "{}",
        serde_json::json!({
            "crate": if precision == crate::config::Precision::Bf16 { "hvtrain bf16 (AVX512-BF16)" } else { crate::device::cpu::fp32_kernel() },
            "precision": format!("{precision:?}").to_lowercase(), "layers": layers,
            "threads": threads, "batch": batch, "step_gemms": shapes.len(),
            "gflops": gflops, "flop_per_sample": per_sample,
            "samples_per_sec_ceiling": gflops * 1e9 / per_sample, "seconds": secs, "iters": iters
        })
    );
    Ok(())
}
