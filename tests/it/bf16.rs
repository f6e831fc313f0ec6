//! bf16 mixed precision on the CPU (`training.precision = "bf16"`) under a real `mpirun`.
//!
//! On a CPU with AVX512-BF16: training uses the bf16 products (the weights differ from a
//! float32 run by more than float32's rounding, yet learn as well: losses and accuracy), a
//! run repeats bit for bit, 1 and 2 ranks learn alike (not bit for bit: the two sum a step's
//! gradients in another order, and a difference of one float32 rounding in a weight can move
//! its bf16 rounding by 2^-9, which training then carries on), and the log names the backend.
//! On a CPU without it: the job ends at start-up with an error naming `training.precision`,
//! AVX512-BF16 and the way out, on every rank, non-zero.

use crate::common;
use common::*;

const D: usize = 12;
const K: usize = 4;
const LAYERS: [usize; 4] = [D, 48, 40, K];

fn has_bf16() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").map(|s| s.contains("avx512_bf16")).unwrap_or(false)
}

fn has_amx() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").map(|s| s.contains("amx_bf16")).unwrap_or(false)
}

/// Rows of `synthetic`'s features, labelled by the largest of K fixed linear scores (a
/// problem an MLP learns well, so accuracy can tell bf16 from a broken product).
fn linear_classes(n: usize, seed: u64) -> (Vec<f32>, Vec<i32>) {
    let (x, _) = synthetic(n, D, K, seed);
    let w = |k: usize, j: usize| ((k * 7 + j * 3) as f32 * 0.7).sin();
    let y = x
        .chunks(D)
        .map(|row| {
            let score = |k: usize| row.iter().enumerate().map(|(j, v)| v * w(k, j)).sum::<f32>();
            (0..K).max_by(|&a, &b| score(a).total_cmp(&score(b))).unwrap() as i32
        })
        .collect();
    (x, y)
}

fn train(name: &str, ranks: usize, precision: &str) -> (Run, std::path::PathBuf) {
    train_env(name, ranks, precision, &[])
}

fn train_env(name: &str, ranks: usize, precision: &str, env: &[(&str, &str)]) -> (Run, std::path::PathBuf) {
    let dir = scratch(name);
    let (x, y) = linear_classes(400, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let (xt, yt) = linear_classes(200, 6);
    write_classes(&dir.join("t.h5"), &xt, D, &yt);
    job(&dir, &LAYERS, "d.h5", Some("t.h5"), "[optimizer]\nlr = 0.05\nmomentum = 0.9\n");
    let bsz = format!("training.batch_size={}", 16 / ranks);
    let prec = format!("training.precision=\"{precision}\"");
    let args = [
        "train",
        "job.toml",
        "--set",
        &bsz,
        "--set",
        "training.epochs=6",
        "--set",
        &prec,
        "--set",
        "training.device=\"cpu\"",
    ];
    let r = mpirun_env(ranks, env, &args, &dir, 120);
    (r, dir)
}

fn max_rel_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    let scale = a.iter().flatten().fold(0.0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0.0, f32::max) / scale
}

#[test]
fn bf16_learns_as_fp32_does_repeats_bit_for_bit_and_alike_on_1_and_2_ranks() {
    let _g = mpi_lock();
    if !has_bf16() {
        eprintln!("skipped: this CPU has no AVX512-BF16 (the refusal is tested below)");
        return;
    }
    let (r1, d1) = train("bf16-1", 1, "bf16");
    assert!(r1.ok(), "{}", r1.all());
    // AMX tiles where the CPU has them (and Linux grants them), else AVX512-BF16.
    let kernel = if has_amx() { "AMX tiles" } else { "AVX512-BF16" };
    assert!(r1.stderr.contains(&format!("backend: cpu (bf16 products, {kernel})")), "{}", r1.all());
    let (r2, d2) = train("bf16-2", 2, "bf16");
    assert!(r2.ok(), "{}", r2.all());
    let (r2b, d2b) = train("bf16-2-again", 2, "bf16");
    assert!(r2b.ok(), "{}", r2b.all());
    let (rf, df) = train("bf16-fp32", 2, "fp32");
    assert!(rf.ok(), "{}", rf.all());
    let n = LAYERS.len() - 1;
    let (w2, w2b, wf) = (
        layer_tensors(&d2.join("out/weights.h5"), n),
        layer_tensors(&d2b.join("out/weights.h5"), n),
        layer_tensors(&df.join("out/weights.h5"), n),
    );
    assert_eq!(w2, w2b, "two bf16 runs on 2 ranks differ");
    let precision = max_rel_diff(&wf, &w2);
    assert!(precision > 1e-4, "bf16 weights equal fp32's to {precision}: the products were not bf16");
    let (m16, m32) = (metrics(&d2), metrics(&df));
    let (a16, a32) = (
        m16.last().unwrap()["test_accuracy"].as_f64().unwrap(),
        m32.last().unwrap()["test_accuracy"].as_f64().unwrap(),
    );
    let (l16, l32) =
        (m16.last().unwrap()["train_loss"].as_f64().unwrap(), m32.last().unwrap()["train_loss"].as_f64().unwrap());
    let l0 = m32[0]["train_loss"].as_f64().unwrap();
    assert!(l16 < 0.5 * l0, "bf16 did not learn: train loss {l16} after 6 epochs, fp32 started at {l0}");
    assert!(a16 > 0.8, "bf16 test accuracy {a16} after 6 epochs (fp32 {a32})");
    assert!((l16 - l32).abs() < 0.1 * l32 + 0.02, "train loss bf16 {l16} vs fp32 {l32}");
    assert!((a16 - a32).abs() < 0.05, "test accuracy bf16 {a16} vs fp32 {a32}");
    let m1 = metrics(&d1);
    for (e1, e2) in m1.iter().zip(&m16) {
        let (l1, l2) = (e1["train_loss"].as_f64().unwrap(), e2["train_loss"].as_f64().unwrap());
        assert!((l1 - l2).abs() < 0.05 * l2 + 0.01, "bf16 train loss on 1 rank {l1}, on 2 ranks {l2}");
    }
}

/// The AMX tile kernel in training, on every CPU: with HVTRAIN_CPU_BF16=emulated the tile
/// kernel's blocking, packing and fused forward epilogue run on the emulated tile unit, and the
/// job learns as float32 does (and differs from it: the products were bf16); the log names
/// the kernel. On a CPU with AMX the default (auto) run takes the real tiles, and the log
/// counts their tile products on every rank.
#[test]
fn the_tile_kernel_trains_on_the_emulated_unit_and_on_amx() {
    let _g = mpi_lock();
    let emu = [("HVTRAIN_CPU_BF16", "emulated")];
    let (re, de) = train_env("bf16-emulated", 2, "bf16", &emu);
    assert!(re.ok(), "{}", re.all());
    assert!(re.stderr.contains("backend: cpu (bf16 products, emulated AMX tiles)"), "{}", re.all());
    let (rf, df) = train("bf16-emulated-fp32", 2, "fp32");
    assert!(rf.ok(), "{}", rf.all());
    let n = LAYERS.len() - 1;
    let (we, wf) = (layer_tensors(&de.join("out/weights.h5"), n), layer_tensors(&df.join("out/weights.h5"), n));
    let precision = max_rel_diff(&wf, &we);
    assert!(precision > 1e-4, "emulated-tile weights equal fp32's to {precision}: the products were not bf16");
    let (me, mf) = (metrics(&de), metrics(&df));
    let last = |m: &[serde_json::Value], k: &str| m.last().unwrap()[k].as_f64().unwrap();
    let (le, lf) = (last(&me, "train_loss"), last(&mf, "train_loss"));
    assert!((le - lf).abs() < 0.1 * lf + 0.02, "train loss on emulated tiles {le} vs fp32 {lf}");
    let (ae, af) = (last(&me, "test_accuracy"), last(&mf, "test_accuracy"));
    assert!(ae > 0.8 && (ae - af).abs() < 0.05, "test accuracy on emulated tiles {ae} vs fp32 {af}");
    // The tiles' counter counts only real tiles.
    assert!(!re.stderr.contains("AMX: "), "{}", re.all());
    if !has_amx() {
        eprintln!("this CPU has no AMX: the real tiles were not run");
        return;
    }
    let (ra, _) = train("bf16-amx", 2, "bf16");
    assert!(ra.ok(), "{}", ra.all());
    assert!(ra.stderr.contains("bf16 products on the CPU: AMX tiles"), "{}", ra.all());
    let counted = ra.stderr.lines().filter(|l| l.contains("AMX: ") && l.contains("tile products (TDPBF16PS)")).count();
    assert_eq!(counted, 2, "each rank logs its tile products\n{}", ra.all());
}

#[test]
fn bf16_without_avx512_bf16_is_refused_naming_the_key_and_the_way_out() {
    let _g = mpi_lock();
    if has_bf16() {
        // The refusal needs a CPU without the instructions; `bench gemm --precision bf16`
        // takes the same check and must run here.
        let r = hvtrain(&["bench", "gemm", "--seconds", "0.05", "--precision", "bf16"], &scratch("bf16-gemm"), 60);
        assert!(r.ok() && r.stdout.contains("\"precision\":\"bf16\""), "{}", r.all());
        return;
    }
    let (r, _) = train("bf16-refused", 2, "bf16");
    assert_ne!(r.code, Some(0), "{}", r.all());
    for want in ["training.precision = \"bf16\"", "AVX512-BF16", "use training.precision = \"fp32\""] {
        assert!(r.stderr.contains(want), "missing {want:?}\n{}", r.all());
    }
}
