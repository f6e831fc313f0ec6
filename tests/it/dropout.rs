//! Dropout under a real `mpirun`: the masks are drawn from (seed, step, global row, global
//! column), so training with dropout gives the same weights (to float tolerance) on 1, 2 and
//! 4 data-parallel ranks, with the hidden layers split over 2 tensor ranks and with the layers
//! split into 2 pipeline stages of 2 micro-batches; dropout changes the weights (it is not a
//! no-op), and `eval` does not drop (two evaluations agree, and they agree with the loss the
//! weights give without dropout). Bad rates name `model.dropout`.

use crate::common;
use common::*;

const G: usize = 8; // global batch: divisible by 1, 2 and 4
const D: usize = 6;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 16, 12, K];

fn train(name: &str, ranks: usize, data_ranks: usize, sets: &[&str]) -> Vec<Vec<f32>> {
    let dir = scratch(name);
    let (x, y) = synthetic(40, D, K, 11);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", Some("d.h5"), "[optimizer]\nlr = 0.1\nmomentum = 0.9\n");
    let bsz = format!("training.batch_size={}", G / data_ranks);
    let mut args =
        vec!["train", "job.toml", "--set", &bsz, "--set", "training.epochs=2", "--set", "model.activation=\"tanh\""];
    for s in sets {
        args.extend(["--set", s]);
    }
    let r = mpirun(ranks, &args, &dir, 120);
    assert!(r.ok(), "{name}: {}", r.all());
    layer_tensors(&dir.join("out/weights.h5"), LAYERS.len() - 1)
}

const DROP: &str = "model.dropout=[0.3, 0.2]";

#[test]
fn dropout_gives_the_same_weights_on_any_rank_count_and_split() {
    let _g = mpi_lock();
    let reference = train("drop-1", 1, 1, &[DROP]);
    for (name, ranks, data, sets) in [
        ("drop-2", 2, 2, vec![DROP]),
        ("drop-4", 4, 4, vec![DROP]),
        ("drop-tp2", 2, 1, vec![DROP, "parallel.tensor=2"]),
        ("drop-tp2-dp2", 4, 2, vec![DROP, "parallel.tensor=2"]),
        ("drop-pp2", 2, 1, vec![DROP, "parallel.pipeline=2", "parallel.micro_batches=2"]),
    ] {
        let w = train(name, ranks, data, &sets);
        let d = max_diff(&reference, &w);
        assert!(d < 1e-5, "{name}: weights differ from 1 rank by {d}");
    }
    let plain = train("drop-none", 1, 1, &[]);
    let d = max_diff(&reference, &plain);
    assert!(d > 1e-3, "dropout should change the weights: they differ from a run without it by {d}");
    // A single rate for every hidden layer is another mask than [0.3, 0.2].
    let one = train("drop-one-rate", 1, 1, &["model.dropout=0.3"]);
    assert!(max_diff(&reference, &one) > 1e-3);
}

#[test]
fn eval_does_not_drop() {
    let _g = mpi_lock();
    let dir = scratch("drop-eval");
    let (x, y) = synthetic(40, D, K, 11);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", Some("d.h5"), "");
    let text = std::fs::read_to_string(dir.join("job.toml")).unwrap().replace("[model]\n", "[model]\ndropout = 0.5\n");
    std::fs::write(dir.join("job.toml"), text).unwrap();
    let r = mpirun(2, &["train", "job.toml"], &dir, 120);
    assert!(r.ok(), "{}", r.all());
    let eval = |sets: &[&str]| {
        let mut args = vec!["eval", "job.toml", "--weights", "out/weights.h5"];
        for s in sets {
            args.extend(["--set", s]);
        }
        let e = hvtrain(&args, &dir, 60);
        assert!(e.ok(), "{}", e.all());
        let j: serde_json::Value = serde_json::from_str(e.stdout.lines().last().unwrap()).unwrap();
        j["test_loss"].as_f64().unwrap()
    };
    let (a, b, none) = (eval(&[]), eval(&[]), eval(&["model.dropout=0.0"]));
    assert_eq!(a, b, "two evaluations of the same weights");
    assert_eq!(a, none, "eval with dropout 0.5 in the job equals eval without it");
    // The epoch's test_loss (evaluated by training) is the same evaluation.
    let m = metrics(&dir);
    let logged = m.last().unwrap()["test_loss"].as_f64().unwrap();
    assert!((logged - a).abs() < 1e-6 * a, "training's test_loss {logged}, eval's {a}");
}

#[test]
fn bad_rates_name_model_dropout() {
    let dir = scratch("drop-bad");
    let (x, y) = synthetic(40, D, K, 11);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", None, "");
    for set in ["model.dropout=1.0", "model.dropout=-0.1", "model.dropout=[0.1]", "model.dropout=[0.1, 0.2, 0.3]"] {
        let r = hvtrain(&["train", "job.toml", "--set", set], &dir, 30);
        assert!(!r.ok() && r.all().contains("model.dropout"), "{set}: {}", r.all());
    }
}

/// Dropout's masks are a function of the global step and the rows: a run resumed mid-epoch from
/// a checkpoint (on another rank count too) ends bit-identical to one that never stopped.
#[test]
fn dropout_resumes_bit_exact_mid_epoch_on_any_rank_count() {
    let _g = mpi_lock();
    let straight = train("drop-resume-straight", 2, 2, &[DROP]);
    for (name, ranks_after) in [("drop-resume-2", 2usize), ("drop-resume-1", 1)] {
        let dir = scratch(name);
        let (x, y) = synthetic(40, D, K, 11);
        write_classes(&dir.join("d.h5"), &x, D, &y);
        job(&dir, &LAYERS, "d.h5", Some("d.h5"), "[optimizer]\nlr = 0.1\nmomentum = 0.9\n");
        let base = ["train", "job.toml", "--set", "model.activation=\"tanh\"", "--set", DROP];
        let bsz = format!("training.batch_size={}", G / 2);
        // 5 steps per epoch: stop after epoch 1 with a checkpoint at step 3 (mid-epoch 1).
        let first =
            [&base[..], &["--set", &bsz, "--set", "training.epochs=1", "--set", "checkpoint.every_steps=3"]].concat();
        let r = mpirun(2, &first, &dir, 120);
        assert!(r.ok(), "{}", r.all());
        // The same training.batch_size: the global batch (8) stays, over `ranks_after` ranks.
        let second =
            [&base[..], &["--set", &bsz, "--set", "training.epochs=2", "--resume", "out/ckpt-step000000003.h5"]]
                .concat();
        let r = mpirun(ranks_after, &second, &dir, 120);
        assert!(r.ok() && r.stderr.contains("resuming from"), "{}", r.all());
        let got = layer_tensors(&dir.join("out/weights.h5"), LAYERS.len() - 1);
        let d = max_diff(&straight, &got);
        let bound = if ranks_after == 2 { 0.0 } else { 1e-5 };
        assert!(d <= bound, "{name}: resumed weights differ from the uninterrupted run by {d}");
    }
}
