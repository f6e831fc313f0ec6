//! `optimizer.kind = "rmsprop"` (PyTorch's `RMSprop`, Keras' without momentum), read from the
//! checkpoints as a user would (h5py's view of the documented datasets): each step moves every
//! parameter by lr·|g| / (√v + eps), where the gradient's square comes from two checkpoints'
//! `optimizer/v` (v = ρ·v + (1 − ρ)·g², no bias correction); the checkpoints keep v alone; the
//! same weights on 1 and 2 ranks, sharded or not, with momentum and weight decay, and a resume
//! from parts continues bit for bit (v and the momentum buffer restored).

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const LAYERS: [usize; 3] = [6, 16, 3];
const LR: f64 = 0.005;
const RHO: f64 = 0.8;
const EPS: f64 = 1e-7;

fn setup(name: &str, extra: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(96, 6, 3, 7);
    write_classes(&dir.join("d.h5"), &x, 6, &y);
    let opt = format!("[optimizer]\nkind = \"rmsprop\"\nlr = {LR}\nrho = {RHO}\neps = {EPS}\n");
    job(&dir, &LAYERS, "d.h5", Some("d.h5"), &format!("[checkpoint]\nevery_steps = 1\nkeep = 100\n{opt}{extra}"));
    dir
}

fn stored(dir: &Path, step: u64, name: &str) -> Vec<f32> {
    ckpt_stored(&dir.join(format!("out/ckpt-step{step:09}.h5")), name, LAYERS.len() - 1)
}

/// weights.h5 in the stored order (the layers last to first, each weight then bias), as a
/// whole checkpoint's parameters are read.
fn weights_stored(dir: &Path) -> Vec<f32> {
    ckpt_stored(&dir.join("out/weights.h5"), "params", LAYERS.len() - 1)
}

/// Steps 2..=last: |Δp| = lr·|g| / (√v + eps) with g² = (v − ρ·v_before) / (1 − ρ), every
/// parameter. Returns the largest step seen.
fn check_steps(dir: &Path, last: u64) -> f64 {
    let mut largest = 0.0f64;
    for s in 2..=last {
        let (p0, p1) = (stored(dir, s - 1, "params"), stored(dir, s, "params"));
        let (v0, v1) = (stored(dir, s - 1, "optimizer/v"), stored(dir, s, "optimizer/v"));
        assert_eq!((p1.len(), v1.len()), (p0.len(), p0.len()), "step {s}: v is not one value a parameter");
        for i in 0..p1.len() {
            let (v0, v1) = (v0[i] as f64, v1[i] as f64);
            let g2 = ((v1 - RHO * v0) / (1.0 - RHO)).max(0.0);
            let want = LR * g2.sqrt() / (v1.sqrt() + EPS);
            let moved = (p1[i] as f64 - p0[i] as f64).abs();
            largest = largest.max(moved);
            // v is float32: g² from a difference of two of them is good to ~1e-6 of v.
            assert!(
                (moved - want).abs() <= 2e-3 * LR + 1e-3 * want,
                "step {s}, [{i}]: moved {moved:e}, RMSprop's step {want:e} (v {v0:e} -> {v1:e})"
            );
        }
    }
    largest
}

#[test]
fn each_step_is_rmsprops_and_checkpoints_keep_v_alone() {
    let _g = mpi_lock();
    let dir = setup("rmsprop", "");
    let r = mpirun(1, &["train", "job.toml"], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    assert!(r.stderr.contains(&format!("optimizer rmsprop: lr {LR}, rho {RHO}, eps 1e-7")), "{}", r.all());
    // 96 rows, batch 4: 24 steps, a checkpoint after each.
    let largest = check_steps(&dir, 24);
    // Without bias correction a parameter moves by up to lr / √(1 − ρ) a step (2.2·lr here).
    assert!(largest > LR && largest < 2.3 * LR, "largest step {largest:e}");
    let f = hdf5::File::open(dir.join("out/ckpt-step000000024.h5")).unwrap();
    let m_len = f.dataset("optimizer/m").map(|d| d.size()).unwrap_or(0);
    assert_eq!(m_len, 0, "RMSprop keeps no first moment");
}

#[test]
fn the_same_weights_on_one_and_two_ranks_sharded_or_not_and_resumed_from_parts() {
    let _g = mpi_lock();
    let two = |dir: &Path, extra: &[&str]| {
        let mut args = vec!["train", "job.toml", "--set", "training.epochs=2"];
        for e in extra {
            args.extend(["--set", e]);
        }
        let r = mpirun(2, &args, dir, 120);
        assert!(r.ok(), "{extra:?}: {}", r.all());
        r
    };
    // With momentum and weight decay: PyTorch's momentum buffer beside v (`optimizer/m`).
    const MOMENTUM: &str = "momentum = 0.9\nweight_decay = 0.01\n";
    let one = setup("rmsprop-one", MOMENTUM);
    let r =
        mpirun(1, &["train", "job.toml", "--set", "training.epochs=2", "--set", "training.batch_size=8"], &one, 120);
    assert!(r.ok(), "{}", r.all());
    let whole = setup("rmsprop-two", MOMENTUM);
    two(&whole, &[]);
    let sharded = setup("rmsprop-sharded", &format!("{MOMENTUM}[distribution]\nshard = \"parameters\"\n"));
    two(&sharded, &[]);
    assert!(!checkpoint_parts(&sharded.join("out")).is_empty(), "parts expected");
    let reference = weights_stored(&one);
    for (d, tag) in [(&whole, "2 ranks"), (&sharded, "2 ranks, shard = parameters")] {
        let w = weights_stored(d);
        let most = w.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(most <= 1e-5, "{tag}: the weights differ from 1 rank's by {most}");
    }
    assert_eq!(stored(&sharded, 24, "optimizer/m").len(), weights_stored(&one).len(), "the momentum buffer");
    // One epoch sharded, then the second resumed from its parts: the same bits.
    let resumed = setup("rmsprop-resumed", &format!("{MOMENTUM}[distribution]\nshard = \"parameters\"\n"));
    let r = mpirun(2, &["train", "job.toml"], &resumed, 120);
    assert!(r.ok(), "{}", r.all());
    let args = ["train", "job.toml", "--set", "training.epochs=2", "--resume", "auto"];
    let r = mpirun(2, &args, &resumed, 120);
    assert!(r.ok() && r.stderr.contains("resuming from out/ckpt-step000000012.h5"), "{}", r.all());
    assert_eq!(weights_stored(&resumed), weights_stored(&sharded), "the resumed run differs");
    for state in ["optimizer/v", "optimizer/m"] {
        assert_eq!(stored(&resumed, 24, state), stored(&sharded, 24, state), "the resumed {state} differs");
    }
}
