//! Learning-rate schedules under a real `mpirun`: metrics.jsonl's `lr` column follows the
//! cosine formula after warm-up; a plateau run reduces the rate after `patience` epochs
//! without improvement and carries its state through a checkpoint, so a run stopped by
//! SIGTERM (as `scancel` does) and resumed ends with the same rates and bit-identical
//! weights as one that was never stopped; multistep drops at its milestone epochs after a
//! warm-up in epochs, on any rank
//! count and through a resume on another; cosine_restarts restarts where Keras'
//! CosineDecayRestarts does; one_cycle rises and falls as PyTorch's OneCycleLR; and the
//! schedule keys' errors name the key.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const D: usize = 6;
const LAYERS: [usize; 3] = [D, 16, 3];

fn setup(name: &str, extra: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(480, D, 3, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", None, extra);
    dir
}

fn lrs(dir: &Path) -> Vec<f64> {
    metrics(dir).iter().map(|m| m["lr"].as_f64().unwrap()).collect()
}

#[test]
fn cosine_lr_column_matches_the_formula() {
    let _g = mpi_lock();
    // 480 rows, batch 4 per rank, 2 ranks: 60 steps an epoch, 5 epochs = 300 steps; warm-up 20.
    let extra = "[optimizer]\nlr = 0.1\nwarmup_steps = 20\nschedule = \"cosine\"\nmin_lr = 0.001\n";
    let dir = setup("sched-cosine", extra);
    let run = mpirun(2, &["train", "job.toml", "--set", "training.epochs=5"], &dir, 120);
    assert!(run.ok(), "{}", run.all());
    let got = lrs(&dir);
    assert_eq!(got.len(), 5);
    for (e, lr) in got.iter().enumerate() {
        // metrics.jsonl's lr is the rate of the next update: after (e+1)·60 steps.
        let s = ((e + 1) * 60 - 20) as f64;
        let t = (s / 280.0).min(1.0);
        let want = 0.001 + (0.1 - 0.001) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
        assert!((lr - want).abs() < 1e-12, "epoch {}: lr {lr}, cosine formula {want}", e + 1);
    }
    assert!(got.windows(2).all(|w| w[1] < w[0]), "{got:?}");
}

/// PyTorch's MultiStepLR stepped once an epoch: lr × factor^(milestones ≤ epochs done).
fn multistep(epochs_done: usize) -> f64 {
    0.2 * 0.1f64.powi([2, 4].iter().filter(|&&m| epochs_done >= m).count() as i32)
}

#[test]
fn multistep_drops_at_its_epochs_and_a_resume_on_another_rank_count_keeps_them() {
    let _g = mpi_lock();
    // 480 rows, global batch 8 (4 per rank on 2 ranks): 60 steps an epoch, 5 epochs.
    // Warm-up over 1.5 epochs: 90 steps, the first epoch's end inside it.
    let extra = "[optimizer]\nlr = 0.2\nwarmup_epochs = 1.5\nschedule = \"multistep\"\nmilestones = [2, 4]\n\
                 [checkpoint]\nevery_minutes = 0.0\n";
    let args = ["train", "job.toml", "--set", "training.epochs=5"];
    let dir = setup("sched-multistep", extra);
    let run = mpirun(2, &args, &dir, 120);
    assert!(run.ok(), "{}", run.all());
    let got = lrs(&dir);
    let mut want: Vec<f64> = (1..=5).map(multistep).collect();
    want[0] = 0.2 * 61.0 / 90.0; // step 60 of the 90-step ramp
    assert_eq!(got.len(), 5);
    for (e, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() < 1e-15, "epoch {}: lr {g}, MultiStepLR {w}: {got:?}", e + 1);
    }
    assert!(
        run.all().contains("warm-up over 1.5 epochs, schedule multistep (× 0.1 after epochs 2, 4)"),
        "{}",
        run.all()
    );
    // Stopped in epoch 2 on 2 ranks, resumed on 1 (4 → 8 rows a rank, the same 60 steps an
    // epoch): the rates of epochs 2 to 5 are the uninterrupted run's, the warm-up's too.
    let resumed = setup("sched-multistep-resumed", extra);
    let stopped = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "0:90:term")], &args, &resumed, 120);
    assert_eq!(stopped.code, Some(75), "{}", stopped.all());
    let mut again = args.to_vec();
    again.extend(["--resume", "auto"]);
    let run = mpirun(1, &again, &resumed, 120);
    assert!(run.ok(), "{}", run.all());
    assert_eq!(lrs(&resumed), got, "{}", run.all());
}

#[test]
fn cosine_restarts_restarts_at_the_end_of_each_longer_period() {
    let _g = mpi_lock();
    // 60 steps an epoch; periods of 40, 80, 160 steps (t_mul 2), peaks 0.1, 0.05, 0.025.
    let extra = "[optimizer]\nlr = 0.1\nschedule = \"cosine_restarts\"\ndecay_steps = 40\nm_mul = 0.5\n\
                 min_lr = 0.001\n";
    let dir = setup("sched-restarts", extra);
    let run = mpirun(2, &["train", "job.toml", "--set", "training.epochs=5"], &dir, 120);
    assert!(run.ok(), "{}", run.all());
    let got = lrs(&dir);
    assert_eq!(got.len(), 5);
    for (e, lr) in got.iter().enumerate() {
        let s = ((e + 1) * 60) as f64;
        // Periods start at steps 0, 40, 120, 280: the one holding s, its length and peak.
        let (start, len, peak) = [(0.0, 40.0, 1.0), (40.0, 80.0, 0.5), (120.0, 160.0, 0.25), (280.0, 320.0, 0.125)]
            .into_iter()
            .rev()
            .find(|&(b, _, _)| s >= b)
            .unwrap();
        let t = (s - start) / len;
        let want = 0.001 + 0.099 * peak * 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
        assert!((lr - want).abs() < 1e-12, "epoch {}: lr {lr}, SGDR {want}: {got:?}", e + 1);
    }
}

#[test]
fn one_cycle_rises_then_falls_over_the_run() {
    let _g = mpi_lock();
    // 60 steps an epoch, 5 epochs: 300 steps; phase one ends at step 89 (pct_start 0.3).
    let extra = "[optimizer]\nlr = 0.2\nschedule = \"one_cycle\"\n";
    let dir = setup("sched-one-cycle", extra);
    let run = mpirun(2, &["train", "job.toml", "--set", "training.epochs=5"], &dir, 120);
    assert!(run.ok(), "{}", run.all());
    let got = lrs(&dir);
    let cos = |from: f64, to: f64, pct: f64| to + (from - to) / 2.0 * ((std::f64::consts::PI * pct).cos() + 1.0);
    let (start, floor) = (0.2 / 25.0, 0.2 / 25.0 / 1e4);
    for (e, lr) in got.iter().enumerate() {
        let s = ((e + 1) * 60) as f64;
        let want = if s <= 89.0 { cos(start, 0.2, s / 89.0) } else { cos(0.2, floor, ((s - 89.0) / 210.0).min(1.0)) };
        assert!((lr - want).abs() < 1e-12, "epoch {}: lr {lr}, OneCycleLR {want}: {got:?}", e + 1);
    }
    assert!(got[0] < got[1] && got[1] > got[2], "up, then down: {got:?}");
}

const PLATEAU: &str =
    "[optimizer]\nlr = 0.5\nschedule = \"plateau\"\npatience = 1\nfactor = 0.5\nmin_lr = 0.01\nmin_delta = 0.02\n\
                       [checkpoint]\nevery_minutes = 0.0\n";

#[test]
fn plateau_reduces_the_rate_and_survives_a_stop_and_resume() {
    let _g = mpi_lock();
    // The loss improves by about 0.01 an epoch here: less than min_delta, so the rate drops.
    let args = ["train", "job.toml", "--set", "training.epochs=6"];
    let clean = setup("sched-plateau-clean", PLATEAU);
    let run = mpirun(2, &args, &clean, 120);
    assert!(run.ok(), "{}", run.all());
    let want = lrs(&clean);
    assert!(want.iter().any(|&l| l < 0.5), "the rate never dropped: {want:?}\n{}", run.all());
    assert!(run.all().contains("(plateau)"), "{}", run.all());
    // The same run stopped by SIGTERM at a step of epoch 4 (after a drop or two), resumed.
    let dir = setup("sched-plateau-stopped", PLATEAU);
    let stopped = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "0:200:term")], &args, &dir, 120);
    assert_eq!(stopped.code, Some(75), "{}", stopped.all());
    let mut resume = args.to_vec();
    resume.extend(["--resume", "auto"]);
    let resumed = mpirun(2, &resume, &dir, 120);
    assert!(resumed.ok(), "{}", resumed.all());
    assert_eq!(lrs(&dir), want, "{}", resumed.all());
    for t in ["dense0/weight", "dense1/weight", "dense1/bias"] {
        assert_eq!(read_f32(&dir.join("out/weights.h5"), t), read_f32(&clean.join("out/weights.h5"), t), "{t}");
    }
}

#[test]
fn schedule_errors_name_the_key() {
    let dir = setup("sched-errors", "");
    for (set, key) in [
        ("optimizer.schedule=\"step\"", "optimizer.decay_steps"),
        ("optimizer.schedule=\"warp\"", "optimizer.schedule"),
        ("optimizer.decay_rate=0", "optimizer.decay_rate"),
        ("optimizer.factor=1.0", "optimizer.factor"),
        ("optimizer.min_lr=1.0", "optimizer.min_lr"),
        ("optimizer.schedule=\"multistep\"", "optimizer.milestones"),
        ("optimizer.schedule=\"cosine_restarts\"", "optimizer.decay_steps"),
    ] {
        let mut args = vec!["train", "job.toml", "--set", set];
        if set.contains("min_lr") {
            args.extend(["--set", "optimizer.schedule=\"cosine\""]);
        }
        let run = hvtrain(&args, &dir, 30);
        assert!(!run.ok() && run.all().contains(key), "{set}: {}", run.all());
    }
    let ps = ["--set", "distribution.strategy=\"parameter_server\"", "--set", "optimizer.schedule=\"plateau\""];
    let mut args = vec!["train", "job.toml"];
    args.extend(ps);
    let run = hvtrain(&args, &dir, 30);
    assert!(
        !run.ok() && run.all().contains("optimizer.schedule") && run.all().contains("parameter_server"),
        "{}",
        run.all()
    );
}
