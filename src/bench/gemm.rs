//! `hvtrain bench gemm`: the GEMM rate of the CPU backend (float32: hvtrain's AVX-512 kernel
//! or matrixmultiply's; bf16 with `--precision bf16`: AMX tiles or AVX512-BF16) on one thread or `--threads`, on exactly
//! the matrix products of one training step of an MLP (forward, weight gradients, input
//! gradients), so a training run's FLOP rate can be read as a fraction of it; and each
//! product's rate, within the step sequence (operands as cold as the step leaves them) and
//! alone (repeated, operands in cache), to show which shapes fall short.
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
    // Each product's time within the step sequence (operands as cold as the sequence leaves them).
    let mut in_step = vec![0f64; shapes.len()];
    let mut step = |bufs: &mut Vec<(Vec<f32>, Vec<f32>, Vec<f32>)>| {
        for ((&(m, k, n, ta, tb), (a, b, c)), acc) in shapes.iter().zip(bufs.iter_mut()).zip(&mut in_step) {
            let t = Instant::now();
            be.gemm(Gemm::new(m, k, n, ta, tb), a, b, c).expect("the CPU backend's gemm returns no error");
            *acc += t.elapsed().as_secs_f64();
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
    let in_step: Vec<f64> = in_step.iter().map(|s| s / (iters + 3) as f64).collect();
    let gflops = flops * iters as f64 / secs / 1e9;
    // Each product alone, repeated for a share of the time: which shapes fall short.
    let mut products = Vec::new();
    for ((&(m, k, n, ta, tb), (a, b, c)), in_step) in shapes.iter().zip(bufs.iter_mut()).zip(in_step) {
        let g = Gemm::new(m, k, n, ta, tb);
        let (t, mut reps) = (Instant::now(), 0u64);
        while reps < 3 || t.elapsed().as_secs_f64() < seconds / shapes.len() as f64 {
            be.gemm(g, a, b, c).expect("the CPU backend's gemm returns no error");
            reps += 1;
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        products.push(serde_json::json!({
            "m": m, "k": k, "n": n, "a": format!("{ta:?}"), "b": format!("{tb:?}"),
            "us": s * 1e6, "gflops": 2.0 * (m * k * n) as f64 / s / 1e9,
            "us_in_step": in_step * 1e6, "gflops_in_step": 2.0 * (m * k * n) as f64 / in_step / 1e9,
        }));
    }
    let per_sample = flops / batch as f64;
    println!(
        "{}",
        serde_json::json!({
            "crate": if precision == crate::config::Precision::Bf16 { be.name() } else { crate::device::cpu::fp32_kernel().to_string() },
            "precision": format!("{precision:?}").to_lowercase(), "layers": layers,
            "threads": threads, "batch": batch, "step_gemms": shapes.len(),
            "gflops": gflops, "flop_per_sample": per_sample,
            "samples_per_sec_ceiling": gflops * 1e9 / per_sample, "seconds": secs, "iters": iters,
            "products": products,
        })
    );
    Ok(())
}
