//! Model parallelism (tensor and pipeline) composed with data parallelism, under a real
//! `mpirun`: layouts (data D, tensor T, pipeline P) with M micro-batches per step, among them
//! (1,2,1), (1,1,2), (1,2,2), (2,2,1), (2,1,2) with M = 1 and 4, (1,4,1), (1,3,1) (uneven
//! split) and (1,1,4) with M = 3, must give the (1,1,1) run's losses for the first 20 steps and its
//! weights after 20 steps, on the same global batch; checkpoints resume across layouts
//! (tensor 2 → 1, 1 → 2, tensor 2 → pipeline 2) to the uninterrupted run's weights; bad
//! layouts end with one clear error and a non-zero exit, without hanging; a stopped or
//! killed rank of a tensor group or a pipeline ends the job.
//!
//! Tolerance: 1e-5 relative (max-norm, over the whole model; per step for losses). The
//! split layers sum their partial products in another order than one GEMM (two or more
//! partial sums, added by MPI), and micro-batches add their gradients one after another, so
//! results differ from one rank by float rounding only: measured about 1e-7 relative (see the
//! test output). Pipeline stages without micro-batches compute exactly what one rank does.

use crate::common;
use common::*;
use std::path::Path;
use std::time::Duration;

const B: usize = 12; // global batch: divisible by every data degree used
const STEPS: usize = 20;
const IN: usize = 6;
const K: usize = 3;
/// Two column/row pairs (the last layer row-parallel); split widths 10 and 7.
const DEEP: [usize; 5] = [IN, 10, 8, 7, K];
/// One pair and an unpaired last layer, whole on every tensor rank.
const ODD: [usize; 4] = [IN, 10, 8, K];

/// The one-rank run's data in `d` files (contiguous parts, `d-{rank}.h5`): the global rows are
/// the files' rows in file order on any number of ranks, so with shuffle off step i takes rows
/// [i·B, (i+1)·B), B/d of them on each data rank.
fn write_files(dir: &Path, d: usize, x: &[f32], y: &[i32]) {
    let n = y.len();
    for r in 0..d {
        let part = r * n / d..(r + 1) * n / d;
        write_classes(&dir.join(format!("d-{r}.h5")), &x[part.start * IN..part.end * IN], IN, &y[part]);
    }
}

struct Trained {
    weights: Vec<Vec<f32>>,
    losses: Vec<f64>,
    /// The last epoch's test loss and accuracy (metrics.jsonl).
    test: (f64, f64),
    log: String,
}

fn weights_of(path: &Path, layers: &[usize]) -> Vec<Vec<f32>> {
    layer_tensors(path, layers.len() - 1)
}

/// The per-step losses rank 0 logs at debug level ("step N: loss X").
fn losses_of(log: &str) -> Vec<f64> {
    log.lines()
        .filter_map(|l| l.split("] step ").nth(1))
        .filter_map(|r| r.split(": loss ").nth(1)?.trim().parse::<f64>().ok())
        .collect()
}

/// Prepare `name` with D data files and the job file (epochs of `STEPS / epochs_split` steps).
fn prepare(name: &str, d: usize, layers: &[usize], extra: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(B * STEPS, IN, K, 7);
    write_files(&dir, d, &x, &y);
    // Test data (one file, split over the data ranks): the end-of-epoch evaluation runs the
    // tensor-parallel forward too.
    let (tx, ty) = synthetic(50, IN, K, 8);
    write_classes(&dir.join("t.h5"), &tx, IN, &ty);
    job(&dir, layers, "d-{rank}.h5", Some("t.h5"), extra);
    dir
}

/// A layout: data, tensor, pipeline degrees and micro-batches per step.
#[derive(Clone, Copy, Debug)]
struct L(usize, usize, usize, usize);

impl L {
    fn ranks(self) -> usize {
        self.0 * self.1 * self.2
    }
}

fn train(dir: &Path, l: L, layers: &[usize], sets: &[&str]) -> Result<Trained, Run> {
    train_env(dir, l, layers, sets, &[])
}

/// `train` with more environment variables for every rank.
fn train_env(dir: &Path, l: L, layers: &[usize], sets: &[&str], env: &[(&str, &str)]) -> Result<Trained, Run> {
    let L(d, t, p, m) = l;
    let bsz = format!("training.batch_size={}", B / d);
    let tensor = format!("parallel.tensor={t}");
    let pipe = format!("parallel.pipeline={p}");
    let micro = format!("parallel.micro_batches={m}");
    let mut args = vec!["train", "job.toml", "--set", &bsz, "--set", &tensor, "--set", &pipe, "--set", &micro];
    for set in ["data.shuffle=false", "model.activation=tanh"].iter().chain(sets) {
        match set.strip_prefix("--resume=") {
            Some(r) => args.extend(["--resume", r]),
            None => args.extend(["--set", set]),
        }
    }
    let env: Vec<(&str, &str)> = [("RUST_LOG", "info,hvtrain=debug")].into_iter().chain(env.iter().copied()).collect();
    let run = mpirun_env(l.ranks(), &env, &args, dir, 120);
    if !run.ok() {
        return Err(run);
    }
    Ok(Trained {
        weights: weights_of(&dir.join("out/weights.h5"), layers),
        losses: losses_of(&run.stderr),
        test: {
            let m = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
            let last: serde_json::Value = serde_json::from_str(m.lines().last().unwrap()).unwrap();
            (last["test_loss"].as_f64().unwrap(), last["test_accuracy"].as_f64().unwrap())
        },
        log: run.stderr,
    })
}

const SGD: &str =
    "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n[distribution]\nfusion_threshold_mb = 0.0002\n";

fn run_layout(tag: &str, l: L, layers: &[usize], extra: &str, sets: &[&str]) -> Trained {
    let L(d, t, p, m) = l;
    let dir = prepare(&format!("mp-{tag}-{d}x{t}x{p}m{m}"), d, layers, extra);
    train(&dir, l, layers, sets).unwrap_or_else(|r| panic!("{tag}: {l:?} failed\n{}", r.all()))
}

/// max |a - b| / max |a| over every element of every tensor.
fn rel_weights(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let scale = a.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs() as f64));
    let diff =
        a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs() as f64)).fold(0.0, f64::max);
    diff / scale
}

fn rel_losses(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "step counts differ: {a:?} vs {b:?}");
    a.iter().zip(b).map(|(p, q)| (p - q).abs() / p.abs()).fold(0.0, f64::max)
}

const TOL: f64 = 1e-5;

fn check_layouts(tag: &str, layers: &[usize], extra: &str, layouts: &[L]) {
    check_layouts_with(tag, layers, extra, layouts, &[]);
}

/// `check_layouts` with `--set` overrides for every run (after the default tanh).
fn check_layouts_with(tag: &str, layers: &[usize], extra: &str, layouts: &[L], sets: &[&str]) {
    let reference = run_layout(tag, L(1, 1, 1, 1), layers, extra, sets);
    assert_eq!(reference.losses.len(), STEPS, "one loss line per step\n{}", reference.log);
    for &l in layouts {
        let L(d, t, p, m) = l;
        let got = run_layout(tag, l, layers, extra, sets);
        let grid = format!("data {d} × pipeline {p} × tensor {t}");
        assert!(l.ranks() == 1 || got.log.contains(&grid), "no grid line\n{}", got.log);
        let (lw, ll) = (rel_weights(&reference.weights, &got.weights), rel_losses(&reference.losses, &got.losses));
        let lt = rel_losses(&[reference.test.0], &[got.test.0]);
        eprintln!(
            "{tag} {layers:?}: D={d} T={t} P={p} M={m}: max relative difference: weights {lw:.2e}, losses {ll:.2e}, \
             test loss {lt:.2e}"
        );
        assert!(lw < TOL && ll < TOL, "{tag}: {l:?}: weights {lw:e}, losses {ll:e} (tolerance {TOL})");
        assert!(
            lt < TOL && reference.test.1 == got.test.1,
            "{tag}: {l:?}: test {:?} vs {:?}",
            reference.test,
            got.test
        );
    }
}

#[test]
fn tensor_and_data_layouts_match_one_rank() {
    let _g = mpi_lock();
    check_layouts(
        "deep",
        &DEEP,
        SGD,
        &[L(1, 2, 1, 1), L(1, 2, 1, 4), L(2, 2, 1, 1), L(2, 2, 1, 4), L(1, 4, 1, 1), L(1, 3, 1, 1)],
    );
}

/// Layout `l` trained twice, through host memory and MPI and with HVTRAIN_EMULATE_DEVICE_SUMS=1
/// (the device path's dispatch on host memory): the same weights and losses to the bit, and no
/// emulation in the first run's log. Returns the emulated run's log.
fn emulated_device_path_matches_the_host_path(l: L, name: &str) -> String {
    let L(d, t, p, m) = l;
    let dir = prepare(&format!("mp-{name}-{d}x{t}x{p}m{m}"), d, &DEEP, SGD);
    let host = train(&dir, l, &DEEP, &[]).unwrap_or_else(|r| panic!("{l:?} failed\n{}", r.all()));
    let _ = std::fs::remove_dir_all(dir.join("out"));
    let dev = train_env(&dir, l, &DEEP, &[], &[("HVTRAIN_EMULATE_DEVICE_SUMS", "1")]);
    let dev = dev.unwrap_or_else(|r| panic!("{l:?} with the emulated device path failed\n{}", r.all()));
    assert!(!host.log.contains("emulated device"), "{}", host.log);
    assert_eq!(host.weights, dev.weights, "{l:?}: weights differ from the host path's");
    assert_eq!(host.losses, dev.losses, "{l:?}");
    dev.log
}

/// The tensor group's sums through device pointers (the path NCCL takes on GPUs:
/// `Backend::reduce_in_place`, in place), emulated on host memory: the same float32 sums as
/// the host path, so the same weights to the bit, and the log says the sums went that way.
#[test]
fn tensor_sums_through_device_pointers_match_the_host_path() {
    let _g = mpi_lock();
    for l in [L(1, 2, 1, 1), L(2, 2, 1, 4)] {
        let log = emulated_device_path_matches_the_host_path(l, "devsum");
        assert!(log.contains("tensor-parallel sums: through emulated device pointers"), "{log}");
        assert!(
            log.contains("tensor-parallel sums: the first") && log.contains("emulated device pointers)"),
            "the first sum did not go through the device path\n{log}"
        );
    }
}

/// Pipeline messages (activations forward, gradients backward) through the device path's
/// dispatch, emulated on host memory: the workspaces' buffers handed over by address, as to
/// NCCL send/recv. The same weights and losses as the host path's messages, to the bit, on two
/// stages, four (middle stages send and receive both ways), and beside tensor-parallel sums
/// on the device path.
#[test]
fn pipeline_messages_through_device_pointers_match_the_host_path() {
    let _g = mpi_lock();
    for l in [L(1, 1, 2, 4), L(1, 1, 4, 3), L(1, 2, 2, 2)] {
        let log = emulated_device_path_matches_the_host_path(l, "devpipe");
        assert!(log.contains("pipeline messages: through emulated device pointers"), "{log}");
        for dir in ["Forward", "Backward"] {
            let first = format!("floats, {dir}) through emulated device pointers");
            assert!(log.contains(&first), "no {dir} message went through the device path\n{log}");
        }
    }
}

#[test]
fn pipeline_layouts_match_one_rank() {
    let _g = mpi_lock();
    check_layouts(
        "pipe",
        &DEEP,
        SGD,
        &[
            L(1, 1, 2, 1),
            L(1, 1, 2, 4),
            L(1, 2, 2, 1),
            L(1, 2, 2, 4),
            L(2, 1, 2, 1),
            L(2, 1, 2, 4),
            L(1, 1, 4, 3),
            L(1, 1, 1, 4),
        ],
    );
}

/// The activations whose backward reads the kept pre-activation (SiLU here, as GELU, softplus,
/// ELU, ...) across a pipeline stage boundary (the stage's last layer's backward before the
/// head's gradient arrives) and tensor splits (column shards keep their part of z), with
/// dropout between the layers.
#[test]
fn activations_of_the_pre_activation_match_one_rank() {
    let _g = mpi_lock();
    let sets = ["model.activation=\"silu\"", "model.dropout=0.1"];
    check_layouts_with("silu", &DEEP, SGD, &[L(1, 2, 2, 1), L(2, 1, 2, 4), L(1, 2, 1, 1)], &sets);
}

/// One activation per hidden layer: a pipeline stage after the first takes its layers' own
/// (the list is the whole model's, offset by the stage's first layer), and tensor shards keep
/// theirs; broken, a stage boundary applies the wrong one and the weights part.
#[test]
fn an_activation_per_hidden_layer_matches_one_rank() {
    let _g = mpi_lock();
    let sets = ["model.activation=[\"silu\", \"relu\", \"tanh\"]"];
    check_layouts_with("per-layer", &DEEP, SGD, &[L(1, 1, 2, 1), L(1, 2, 2, 4), L(1, 1, 4, 1)], &sets);
}

#[test]
fn unpaired_last_layer_and_adam_match_one_rank() {
    let _g = mpi_lock();
    let adam = "[optimizer]\nkind = \"adamw\"\nlr = 0.01\nweight_decay = 0.01\n";
    check_layouts("odd", &ODD, adam, &[L(1, 2, 1, 1), L(2, 2, 1, 1), L(1, 1, 3, 2), L(1, 2, 2, 4)]);
}

/// A checkpoint written under one tensor degree resumes under another and ends where the
/// uninterrupted run does: the files hold the whole model and optimizer state.
#[test]
fn checkpoint_resumes_across_tensor_degrees() {
    let _g = mpi_lock();
    // Two epochs of 10 steps; a checkpoint at the end of the first.
    let extra = format!("{SGD}[checkpoint]\nevery_steps = 10\n");
    let halves = ["training.epochs=2"];
    let whole_dir = prepare("mp-ckpt-uninterrupted", 1, &DEEP, &extra);
    halve(&whole_dir);
    let reference = train(&whole_dir, L(1, 1, 1, 1), &DEEP, &halves).unwrap_or_else(|r| panic!("{}", r.all()));
    for (first, then) in
        [(L(1, 2, 1, 1), L(1, 1, 1, 1)), (L(1, 1, 1, 1), L(1, 2, 1, 1)), (L(1, 2, 1, 1), L(1, 1, 2, 2))]
    {
        let dir =
            prepare(&format!("mp-ckpt-{}-then-{}", first.1 * 10 + first.2, then.1 * 10 + then.2), 1, &DEEP, &extra);
        halve(&dir);
        let a = train(&dir, first, &DEEP, &["training.epochs=1"]).unwrap_or_else(|r| panic!("{}", r.all()));
        assert_eq!(checkpoints(&dir.join("out")), ["ckpt-step000000010.h5"], "{}", a.log);
        let b = train(&dir, then, &DEEP, &["training.epochs=2", "--resume=auto"]);
        let b = b.unwrap_or_else(|r| panic!("{}", r.all()));
        assert!(b.log.contains("resuming from"), "{}", b.log);
        let lw = rel_weights(&reference.weights, &b.weights);
        eprintln!(
            "checkpoint: {first:?} for 10 steps, then {then:?} for 10: weights {lw:.2e} from one rank throughout"
        );
        assert!(lw < TOL, "{first:?} then {then:?}: weights differ by {lw:e} relative");
    }
}

/// Ten steps per epoch: the first half of each file's rows (the loader reads `STEPS / 2`
/// batches per epoch from a file of half the rows, so two epochs replay the same 10 batches).
fn halve(dir: &Path) {
    let f = dir.join("d-0.h5");
    let x = read_f32(&f, "x");
    let y: Vec<i32> = hdf5::File::open(&f).unwrap().dataset("y").unwrap().read_raw().unwrap();
    let n = y.len() / 2;
    std::fs::remove_file(&f).unwrap();
    write_classes(&f, &x[..n * IN], IN, &y[..n]);
}

fn fails_clearly(name: &str, ranks: usize, sets: &[&str], want: &str) {
    let dir = prepare(name, 1, &DEEP, SGD);
    let mut args = vec!["train", "job.toml"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let run = mpirun(ranks, &args, &dir, 60);
    assert!(!run.ok() && run.code.is_some(), "{name}: expected a clean failure\n{}", run.all());
    assert!(run.elapsed < Duration::from_secs(30), "{name}: took {:?}\n{}", run.elapsed, run.all());
    assert!(run.stderr.contains(want), "{name}: expected {want:?}\n{}", run.all());
    eprintln!("{name}: exit {:?} after {:.1} s: {want}", run.code, run.elapsed.as_secs_f64());
}

#[test]
fn bad_layouts_fail_with_a_clear_error() {
    let _g = mpi_lock();
    fails_clearly(
        "tp-bad-divide",
        3,
        &["parallel.tensor=2"],
        "parallel.tensor = 2 × parallel.pipeline = 1 = 2 does not divide the job's 3 rank(s)",
    );
    fails_clearly("tp-bad-wide", 2, &["parallel.tensor=8"], "parallel.tensor = 8 is larger than model.layers[3] = 7");
    fails_clearly(
        "mp-bad-deep",
        2,
        &["parallel.pipeline=5"],
        "parallel.pipeline = 5: 5 pipeline stage(s) for a model of 4 dense layer(s)",
    );
    fails_clearly(
        "mp-bad-divide-pipe",
        3,
        &["parallel.pipeline=2"],
        "parallel.tensor = 1 × parallel.pipeline = 2 = 2 does not divide the job's 3 rank(s)",
    );
    fails_clearly(
        "mp-bad-micro",
        2,
        &["parallel.pipeline=2", "parallel.micro_batches=5"],
        "parallel.micro_batches = 5 is larger than training.batch_size = 4",
    );
}

/// A pipeline stage that stops, dies or hangs leaves its neighbours waiting for a message:
/// the heartbeats end the job (exit 3, naming the rank) within the limit; without
/// MPI_THREAD_MULTIPLE the wait is guarded by the watchdog's deadline.
#[test]
fn a_stopped_killed_or_hung_pipeline_stage_ends_the_job() {
    let _g = mpi_lock();
    let dir = prepare("mp-pipe-faults", 1, &DEEP, SGD);
    let long = ["train", "job.toml", "--set", "parallel.pipeline=2", "--set", "training.epochs=500"];
    let run = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:5:stop")], &long, &dir, 60);
    assert_eq!(run.code, Some(3), "a stopped stage: exit 3\n{}", run.all());
    assert!(run.stderr.contains("): rank 1 (") && run.stderr.contains("has sent no heartbeat"), "{}", run.all());
    assert!(run.elapsed < Duration::from_secs(30), "{}", run.all());
    eprintln!("P=2, rank 1 stopped at step 5: exit 3 after {:.1} s", run.elapsed.as_secs_f64());

    let dir4 = prepare("mp-pipe-faults-4", 2, &DEEP, SGD);
    let mut long4 = long.to_vec();
    long4.extend(["--set", "training.batch_size=6", "--set", "parallel.micro_batches=3"]);
    for victim in [1, 2] {
        let _ = std::fs::remove_dir_all(dir4.join("out"));
        let fault = format!("{victim}:5:kill");
        let run = mpirun_env(4, &[("HVTRAIN_INJECT_FAULT", &fault)], &long4, &dir4, 60);
        assert!(!run.ok() && run.elapsed < Duration::from_secs(15), "{}", run.all());
        eprintln!(
            "D=2 P=2 M=3, rank {victim} killed at step 5: exit {:?} after {:.1} s",
            run.code,
            run.elapsed.as_secs_f64()
        );
    }

    let _ = std::fs::remove_dir_all(dir.join("out"));
    let env = [("HVTRAIN_INJECT_FAULT", "1:5:hang"), ("HVTRAIN_MPI_THREADS", "serialized")];
    let mut args = long.to_vec();
    args.extend(["--set", "distribution.watchdog_seconds=3"]);
    let run = mpirun_env(2, &env, &args, &dir, 60);
    assert!(
        !run.ok()
            && run
                .stderr
                .contains("waiting for the next pipeline stage's gradients at step 5 has not completed after 3.0 s"),
        "without heartbeats, stage 0's wait for stage 1's gradients has a deadline\n{}",
        run.all()
    );
    assert!(run.elapsed < Duration::from_secs(15), "{}", run.all());
    eprintln!(
        "P=2 without MPI_THREAD_MULTIPLE, rank 1 hung at step 5: exit {:?} after {:.1} s",
        run.code,
        run.elapsed.as_secs_f64()
    );
}

/// A tensor rank that stops (SIGSTOP) or dies mid-step leaves its peer inside a tensor
/// all-reduce: the heartbeats end the job as for any collective. Without
/// MPI_THREAD_MULTIPLE (no heartbeats) the all-reduce is a guarded wait with a deadline.
#[test]
fn a_stopped_or_killed_tensor_rank_ends_the_job() {
    let _g = mpi_lock();
    let dir = prepare("tp-faults", 1, &DEEP, SGD);
    let long = ["train", "job.toml", "--set", "parallel.tensor=2", "--set", "training.epochs=500"];
    let run = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:5:stop")], &long, &dir, 60);
    assert_eq!(run.code, Some(3), "a stopped tensor rank: exit 3\n{}", run.all());
    assert!(
        run.stderr.contains("): rank 1 (") && run.stderr.contains("has sent no heartbeat"),
        "the stopped rank is named\n{}",
        run.all()
    );
    assert!(run.elapsed < Duration::from_secs(30), "{}", run.all());
    eprintln!("T=2, rank 1 stopped at step 5: exit 3 after {:.1} s", run.elapsed.as_secs_f64());

    let _ = std::fs::remove_dir_all(dir.join("out"));
    let dir4 = prepare("tp-faults-4", 2, &DEEP, SGD);
    let long4 = [
        "train",
        "job.toml",
        "--set",
        "parallel.tensor=2",
        "--set",
        "training.epochs=500",
        "--set",
        "training.batch_size=6",
    ];
    let run = mpirun_env(4, &[("HVTRAIN_INJECT_FAULT", "2:5:kill")], &long4, &dir4, 60);
    assert!(!run.ok() && run.elapsed < Duration::from_secs(15), "{}", run.all());
    eprintln!("D=2 T=2, rank 2 killed at step 5: exit {:?} after {:.1} s", run.code, run.elapsed.as_secs_f64());

    let _ = std::fs::remove_dir_all(dir.join("out"));
    let env = [("HVTRAIN_INJECT_FAULT", "1:5:hang"), ("HVTRAIN_MPI_THREADS", "serialized")];
    let mut args = long.to_vec();
    args.extend(["--set", "distribution.watchdog_seconds=3"]);
    let run = mpirun_env(2, &env, &args, &dir, 60);
    assert!(
        !run.ok() && run.stderr.contains("a tensor-parallel all-reduce at step 5 has not completed after 3.0 s"),
        "without heartbeats, the tensor all-reduce's deadline ends the job\n{}",
        run.all()
    );
    assert!(run.elapsed < Duration::from_secs(15), "{}", run.all());
    eprintln!(
        "T=2 without MPI_THREAD_MULTIPLE, rank 1 hung at step 5: exit {:?} after {:.1} s",
        run.code,
        run.elapsed.as_secs_f64()
    );
}
