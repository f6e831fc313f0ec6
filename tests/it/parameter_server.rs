//! Parameter servers (`distribution.strategy = "parameter_server"`), synchronous side, under a
//! real `mpirun`: bad configurations are refused with the field named; staleness 0 with W
//! workers and S = 1, 2 servers gives the weights of all-reduce on W ranks with the same
//! global batch after 20 steps (SGD with momentum, Adam with L2, AdamW); and a staleness-0 run
//! resumed from a checkpoint (at an epoch end and mid-epoch) ends bit-identical to one that
//! never stopped. The asynchronous side is `tests/it/ps_async.rs`.

use crate::common;
use common::*;
use std::path::Path;

const D: usize = 6;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 16, 12, K];
/// Rows per worker per step; 10 steps per epoch, 2 epochs: 20 steps.
const B: usize = 4;
const STEPS_PER_EPOCH: usize = 10;

/// One file per worker (`d-{rank}.h5`), each with STEPS_PER_EPOCH full batches.
fn data(dir: &Path, workers: usize) {
    let (x, y) = synthetic(workers * B * STEPS_PER_EPOCH, D, K, 11);
    let per = B * STEPS_PER_EPOCH;
    for r in 0..workers {
        write_classes(
            &dir.join(format!("d-{r}.h5")),
            &x[r * per * D..(r + 1) * per * D],
            D,
            &y[r * per..(r + 1) * per],
        );
    }
}

fn weights(dir: &Path) -> Vec<Vec<f32>> {
    layer_tensors(&dir.join("out/weights.h5"), LAYERS.len() - 1)
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0.0, f32::max)
}

/// Train 2 epochs in a fresh directory; `ranks` processes, the job's TOML `extra` and `sets`.
fn train(name: &str, workers: usize, ranks: usize, extra: &str, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    let dir = scratch(name);
    data(&dir, workers);
    job(&dir, &LAYERS, "d-{rank}.h5", None, extra);
    let mut args = vec!["train", "job.toml", "--set", "training.epochs=2", "--set", "data.shuffle=false"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let run = mpirun(ranks, &args, &dir, 120);
    assert!(run.ok(), "{name}: training failed\n{}", run.all());
    (weights(&dir), run.stderr)
}

const PS: &str = "distribution.strategy=parameter_server";

#[test]
fn staleness_0_gives_the_weights_of_allreduce() {
    let _g = mpi_lock();
    let optimizers = [
        ("sgd", "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n"),
        ("adam", "[optimizer]\nkind = \"adam\"\nlr = 0.01\neps = 0.01\nweight_decay = 0.05\n"),
        ("adamw", "[optimizer]\nkind = \"adamw\"\nlr = 0.01\nweight_decay = 0.01\n"),
        ("rmsprop", "[optimizer]\nkind = \"rmsprop\"\nlr = 0.005\nweight_decay = 0.01\n"),
    ];
    for (tag, opt) in optimizers {
        for w in [2, 3] {
            // Several buckets, so that two servers each own some.
            let extra = format!("{opt}\n[distribution]\nfusion_threshold_mb = 0.0002\n");
            let (reference, _) = train(&format!("ps-eq-{tag}-ar{w}"), w, w, &extra, &[]);
            for s in [1, 2] {
                let servers = format!("distribution.servers={s}");
                let (got, log) = train(&format!("ps-eq-{tag}-w{w}-s{s}"), w, w + s, &extra, &[PS, &servers]);
                assert!(log.contains("synchronous (staleness 0)"), "{log}");
                if s == 2 {
                    // Both servers own buckets.
                    let owners = log.split("owners ").nth(1).expect("the owners line").lines().next().unwrap();
                    assert!(owners.contains(&format!("{}", w)) && owners.contains(&format!("{}", w + 1)), "{owners}");
                }
                let d = max_diff(&reference, &got);
                eprintln!("{tag}: {w} workers, {s} server(s): max weight difference from all-reduce {d:e}");
                // Stated tolerance: the server sums in worker order, MPI_Allreduce in its own
                // (equal for 2 workers; rounding apart for 3), then the same optimizer.
                assert!(d <= 1e-6, "{tag}: {w} workers, {s} servers: weights differ from all-reduce by {d}");
                assert!(log.contains("max 0;"), "staleness 0 must show no stale gradient\n{log}");
            }
        }
    }
    // The comparison can fail: other data gives other weights.
    let extra = "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n";
    let (a, _) = train("ps-eq-neg-a", 2, 3, extra, &[PS]);
    let (b, _) = train("ps-eq-neg-b", 2, 3, extra, &[PS, "training.seed=2"]);
    assert!(max_diff(&a, &b) > 1e-3);
}

#[test]
fn staleness_0_resume_is_bit_exact() {
    let _g = mpi_lock();
    let extra = "[optimizer]\nkind = \"adam\"\nlr = 0.01\n[distribution]\nfusion_threshold_mb = 0.0002\nservers = 2\n";
    let (straight, _) = train("ps-resume-straight", 2, 4, extra, &[PS]);
    for (name, every, from) in
        [("epoch-end", "10", "ckpt-step000000010.h5"), ("mid-epoch", "7", "ckpt-step000000007.h5")]
    {
        let dir = scratch(&format!("ps-resume-{name}"));
        data(&dir, 2);
        job(&dir, &LAYERS, "d-{rank}.h5", None, extra);
        let ck = format!("checkpoint.every_steps={every}");
        let first = [
            "train",
            "job.toml",
            "--set",
            PS,
            "--set",
            "data.shuffle=false",
            "--set",
            "training.epochs=1",
            "--set",
            &ck,
        ];
        let run = mpirun(4, &first, &dir, 120);
        assert!(run.ok(), "{}", run.all());
        assert!(dir.join("out").join(from).exists(), "{name}: no {from}\n{}", run.all());
        let path = format!("out/{from}");
        let args = [
            "train",
            "job.toml",
            "--set",
            PS,
            "--set",
            "data.shuffle=false",
            "--set",
            "training.epochs=2",
            "--resume",
            &path,
        ];
        let run = mpirun(4, &args, &dir, 120);
        assert!(run.ok() && run.stderr.contains("resuming from"), "{}", run.all());
        let resumed = weights(&dir);
        assert_eq!(
            straight, resumed,
            "{name}: a resumed staleness-0 run must end bit-identical to an uninterrupted one"
        );
    }
}

/// `clipnorm` and `clipvalue` with servers: each server clips the tensors of its buckets. At
/// staleness 0 that is the step's summed gradient, so 2 workers with 2 servers train to the
/// weights of a clipped all-reduce on 2 ranks; asynchronously one worker's gradient is its own
/// step's, so 1 worker (staleness 1) trains to a clipped 1-rank run. The limits clip (the
/// unclipped run is far off): a server that did not clip, or clipped a worker's share against
/// the whole limit, would fail. (The W × share weighting is `a_share_is_clipped_as_its_whole_step`.)
#[test]
fn clipnorm_and_clipvalue_on_the_servers() {
    let _g = mpi_lock();
    let opt = "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n[distribution]\nfusion_threshold_mb = 0.0002\n";
    let clips: [&[&str]; 3] = [
        &["optimizer.clipnorm=0.05"],
        &["optimizer.clipvalue=0.01"],
        &["optimizer.clipnorm=0.05", "optimizer.clipvalue=0.01"],
    ];
    for (i, c) in clips.iter().enumerate() {
        let (plain, _) = train(&format!("ps-clip-plain-{i}"), 2, 2, opt, &[]);
        let (reference, _) = train(&format!("ps-clip-ar-{i}"), 2, 2, opt, c);
        assert!(max_diff(&plain, &reference) > 1e-3, "{c:?} must change the weights");
        let mut sets = vec![PS, "distribution.servers=2"];
        sets.extend_from_slice(c);
        let (got, _) = train(&format!("ps-clip-sync-{i}"), 2, 4, opt, &sets);
        let d = max_diff(&reference, &got);
        eprintln!("{c:?}: 2 workers, 2 servers, staleness 0: max weight difference from all-reduce {d:e}");
        assert!(d <= 1e-6, "{c:?}: staleness 0 differs from the clipped all-reduce by {d}");
    }
    let c = ["optimizer.clipnorm=0.05", "optimizer.clipvalue=0.01"];
    let (reference, _) = train("ps-clip-ar1", 1, 1, opt, &c);
    let (got, log) = train("ps-clip-async", 1, 2, opt, &[PS, "distribution.staleness=1", c[0], c[1]]);
    assert!(log.contains("at most 1 step(s) ahead"), "{log}");
    let d = max_diff(&reference, &got);
    assert!(d <= 1e-6, "1 worker, staleness 1: differs from the clipped 1-rank run by {d}");
}

/// `global_clipnorm` with servers: a worker pushes its whole step before any bucket is
/// updated, and the servers exchange their tensors' sums of squares. At staleness 0 that is
/// the norm of the step's summed gradient over every server's buckets, so 2 workers with 2
/// servers (each owning some tensors) train to the weights of a clipped all-reduce on 2 ranks,
/// also with clipvalue; a norm taken over one server's buckets alone would clip less and
/// fail. Asynchronously one worker's gradient is clipped by its own step's norm: 1 worker at
/// staleness 1 trains to a clipped 1-rank run. The epoch line reports the norms.
#[test]
fn global_clipnorm_on_the_servers() {
    let _g = mpi_lock();
    let opt = "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n[distribution]\nfusion_threshold_mb = 0.0002\n";
    let (plain, _) = train("ps-gclip-plain", 2, 2, opt, &[]);
    let clips: [&[&str]; 2] =
        [&["optimizer.global_clipnorm=0.1"], &["optimizer.global_clipnorm=0.1", "optimizer.clipvalue=0.01"]];
    for (i, c) in clips.iter().enumerate() {
        let (reference, _) = train(&format!("ps-gclip-ar-{i}"), 2, 2, opt, c);
        assert!(max_diff(&plain, &reference) > 1e-3, "{c:?} must change the weights");
        let mut sets = vec![PS, "distribution.servers=2"];
        sets.extend_from_slice(c);
        let (got, log) = train(&format!("ps-gclip-sync-{i}"), 2, 4, opt, &sets);
        let d = max_diff(&reference, &got);
        eprintln!("{c:?}: 2 workers, 2 servers, staleness 0: max weight difference from all-reduce {d:e}");
        assert!(d <= 1e-6, "{c:?}: staleness 0 differs from the clipped all-reduce by {d}");
        let owners = log.split("owners ").nth(1).expect("the owners line").lines().next().unwrap();
        assert!(owners.contains('2') && owners.contains('3'), "both servers own buckets: {owners}");
        // 10 steps per epoch, every one clipped (the limit is far below these norms).
        assert!(log.contains("global gradient norm mean") && log.contains("over 10 update(s), 10 clipped"), "{log}");
    }
    let c = ["optimizer.global_clipnorm=0.1", "optimizer.clipvalue=0.01"];
    let (reference, _) = train("ps-gclip-ar1", 1, 1, opt, &c);
    let (got, log) = train("ps-gclip-async", 1, 2, opt, &[PS, "distribution.staleness=1", c[0], c[1]]);
    assert!(log.contains("at most 1 step(s) ahead"), "{log}");
    let d = max_diff(&reference, &got);
    assert!(d <= 1e-6, "1 worker, staleness 1: differs from the clipped 1-rank run by {d}");
    // Two asynchronous workers train, each clipped, and report every worker-step's norm.
    let (_, log) =
        train("ps-gclip-async2", 2, 4, opt, &[PS, "distribution.servers=2", "distribution.staleness=2", c[0]]);
    assert!(log.contains("over 20 update(s), 20 clipped"), "{log}");
}

#[test]
fn bad_configurations_are_refused() {
    let _g = mpi_lock();
    let dir = scratch("ps-bad");
    data(&dir, 1);
    job(&dir, &LAYERS, "d-{rank}.h5", None, "");
    let cases: [(&[&str], &str, &str); 5] = [
        (&[PS], "distribution.servers", "leaves no worker"),
        (&[PS, "distribution.servers=0"], "distribution.servers", "at least 1"),
        (&[PS, "distribution.staleness=-2"], "distribution.staleness", "-1 (fully asynchronous)"),
        (&[PS, "distribution.compression=fp16"], "distribution.compression", "compression = \"none\""),
        (&[PS, "parallel.tensor=2"], "parallel.tensor", "not available with strategy"),
    ];
    for (sets, field, says) in cases {
        let mut args = vec!["train", "job.toml"];
        for s in sets {
            args.extend(["--set", s]);
        }
        // One rank alone: with servers = 1 there is no worker left.
        let run = mpirun(1, &args, &dir, 60);
        assert!(!run.ok(), "{sets:?} must be refused\n{}", run.all());
        assert!(
            run.stderr.contains(field) && run.stderr.contains(says),
            "{sets:?}: want {field}: {says}\n{}",
            run.all()
        );
    }
    // servers >= ranks on more than one rank: every rank says so, and the job ends.
    let run = mpirun(2, &["train", "job.toml", "--set", PS, "--set", "distribution.servers=2"], &dir, 60);
    assert!(!run.ok() && run.stderr.contains("2 server(s) with 2 rank(s) leaves no worker"), "{}", run.all());
}
