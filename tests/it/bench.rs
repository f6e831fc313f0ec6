//! `hvtrain bench allreduce` under a real `mpirun`: every path (raw `MPI_Allreduce`, the
//! engine's fused path inline and on its communication thread) writes into a buffer of its
//! own, reset before it runs, and the bench checks every element against the sum it computes
//! itself; a wrong sum aborts the run. Small sizes and several buckets per size.

use crate::common;
use common::*;

#[test]
fn bench_allreduce_checks_every_path_and_succeeds() {
    let _g = mpi_lock();
    let dir = scratch("bench-allreduce");
    for ranks in [2, 3] {
        let args = [
            "bench",
            "allreduce",
            "--min-bytes",
            "4096",
            "--max-bytes",
            "1048576",
            "--threshold-mb",
            "0.01",
            "--seconds",
            "0.02",
        ];
        let run = mpirun(ranks, &args, &dir, 120);
        assert!(run.ok(), "{ranks} ranks\n{}", run.all());
        let rows: Vec<Vec<&str>> = run
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().collect())
            .collect();
        let sizes: Vec<&str> = rows.iter().map(|r| r[0]).collect();
        assert_eq!(sizes, ["4096", "16384", "65536", "262144", "1048576"], "{}", run.all());
        // The larger sizes span several buckets, so a bucket left out would show.
        let buckets: usize = rows.last().unwrap().last().unwrap().parse().unwrap();
        assert!(buckets > 10, "{buckets} buckets\n{}", run.all());
    }
}

/// `hvtrain bench step` on the CPU: one JSON object with the rates the GPU benchmark reads
/// (`bench/gpu.sh`), consistent with each other: samples/s = batch / step time, and the
/// step's FLOP rate a plausible fraction of the same run's GEMM rate.
#[test]
fn bench_step_reports_consistent_rates() {
    let dir = scratch("bench-step");
    let json = dir.join("step.json");
    let args = ["bench", "step", "--device", "cpu", "--layers", "40,64,64,5", "--batch", "64", "--steps", "20"];
    let mut args: Vec<&str> = args.to_vec();
    let js = json.display().to_string();
    args.extend(["--json", &js]);
    let run = hvtrain(&args, &dir, 120);
    assert!(run.ok(), "{}", run.all());
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    let (sps, ms, step, gemm) = (f("samples_per_s"), f("step_ms"), f("step_tflops"), f("gemm_tflops"));
    assert!(sps > 0.0 && step > 0.0 && gemm > 0.0, "{v}");
    assert!((sps - 64.0 / (ms / 1e3)).abs() <= 1e-6 * sps, "samples/s must be batch / step time: {v}");
    // FLOPs of the step's products: forward and weight gradient per layer, input gradient
    // for all but the first: 2·64·(2·(40·64 + 64·64 + 64·5) + 64·64 + 64·5).
    let flops = 2.0 * 64.0 * (2.0 * (40.0 * 64.0 + 64.0 * 64.0 + 64.0 * 5.0) + 64.0 * 64.0 + 64.0 * 5.0);
    assert!((step * 1e12 - flops / (ms / 1e3)).abs() <= 1e-6 * step * 1e12, "step_tflops: {v}");
    assert!(f("fraction_of_gemm") > 0.0 && f("fraction_of_gemm") < 3.0, "{v}");
}

/// `hvtrain selftest`: the whole suite passes on the CPU (exit 0, a line per check); asking
/// for CUDA where there is none is a clear error (exit 1), not a panic.
#[test]
fn selftest_passes_on_the_cpu_and_refuses_a_missing_gpu() {
    let dir = scratch("selftest");
    let run = hvtrain(&["selftest", "--device", "cpu"], &dir, 120);
    assert!(run.ok(), "{}", run.all());
    // The suite's 9 checks, and on a CPU with AVX512-BF16 the bf16 products and the bf16
    // outputs' reference too; with AMX, the tiles against their emulation.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (bf16, amx) = (cpuinfo.contains("avx512_bf16"), cpuinfo.contains("amx_bf16"));
    // (A CPU with AMX whose tiles Linux refuses says so in a skip line instead.)
    let tiles = run.stdout.contains("ok    bf16 products on AMX tiles against the emulated");
    assert_eq!(tiles || run.stdout.contains("skip  bf16 products on AMX tiles"), amx, "{}", run.all());
    let want = 9 + 2 * bf16 as usize + tiles as usize;
    assert_eq!(run.stdout.lines().filter(|l| l.trim_start().starts_with("ok ")).count(), want, "{}", run.all());
    assert_eq!(run.stdout.contains("ok    gemm with bf16 operands"), bf16, "{}", run.all());
    assert_eq!(
        run.stdout.contains("ok    bf16 layer outputs (HVTRAIN_BF16_OUTPUTS) on the CPU"),
        bf16,
        "{}",
        run.all()
    );
    assert!(run.stdout.contains("all checks passed"), "{}", run.all());
    assert!(run.stdout.contains("ok    dense layer"), "{}", run.all());
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return;
    }
    let run = hvtrain(&["selftest", "--device", "cuda"], &dir, 60);
    assert_eq!(run.code, Some(1), "{}", run.all());
    assert!(run.stderr.contains("training.device = \"cuda\" but") && !run.stderr.contains("panicked"), "{}", run.all());
}
