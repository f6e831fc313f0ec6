//! Sharded state (`distribution.shard`, ZeRO stages 1 to 3) under a real `mpirun`: the same
//! training as unsharded, bit for bit where the sums are the same ("optimizer" keeps the whole
//! all-reduce; a reduce-scatter over 2 ranks adds the same two numbers; "parameters" reads
//! each layer gathered from the ranks' pieces, the same values), to float tolerance where the
//! order of the sums may differ (a reduce-scatter over 3); on parts of uneven length (307
//! parameters), several buckets (a layer's slot spans several, and a bucket several layers),
//! with clipping, with ranks that have no rows in a step; a checkpoint of a sharded run,
//! written in parts at a signal's stop, holds the whole state (equal to the unsharded run's),
//! and resumes on another rank count and another mode; evaluation, keep_best and histograms
//! under "parameters" read the gathered model; LARS and LAMB, whose ratios need whole tensors'
//! norms, train as unsharded in every mode; the main thread's wait in layer gathers counts as
//! exposed communication.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const D: usize = 8;
/// 8·13+13 + 13·11+11 + 11·3+3 = 307 parameters: a prime, so the parts are uneven.
const LAYERS: [usize; 4] = [D, 13, 11, 3];
const ROWS: usize = 360;
/// Divides over 1, 2 and 3 ranks: 30 steps an epoch.
const GLOBAL: usize = 12;
/// A resumed run on other ranks, or a reduce-scatter over 3, sums in another order: about 1e-7
/// relative per step over 60 steps.
const TOL: f32 = 2e-5;

fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(ROWS, D, 3, 41);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    // 512-byte buckets: 128 floats, so the 307 parameters travel in several (3 to 5) buckets.
    let extra = "[distribution]\nfusion_threshold_mb = 0.00048828125\n";
    job(&dir, &LAYERS, "d.h5", None, extra);
    dir
}

/// `train` on `ranks` ranks with `sets`; the final weights and the log.
fn train(dir: &Path, out: &str, ranks: usize, env: &[(&str, &str)], sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    let b = format!("training.batch_size={}", GLOBAL / ranks);
    let base = [b.as_str(), "training.epochs=2", "data.shuffle=false", "model.activation=tanh"];
    train_weights(dir, out, ranks, LAYERS.len() - 1, env, &base, sets)
}

#[test]
fn each_mode_trains_as_unsharded_on_two_and_three_ranks() {
    let _g = mpi_lock();
    let optimizers: [(&str, &[&str]); 2] = [
        (
            "adamw-clipvalue",
            &["optimizer.kind='adamw'", "optimizer.lr=0.01", "optimizer.weight_decay=0.05", "optimizer.clipvalue=0.02"],
        ),
        (
            "sgd-global-clipnorm",
            &["optimizer.kind='sgd'", "optimizer.lr=0.2", "optimizer.momentum=0.9", "optimizer.global_clipnorm=0.3"],
        ),
    ];
    for ranks in [2, 3] {
        for (tag, opt) in optimizers {
            let dir = setup(&format!("shard-{tag}-{ranks}"));
            let with = |mode: &str| -> Vec<String> {
                opt.iter().map(|s| s.to_string()).chain([format!("distribution.shard='{mode}'")]).collect()
            };
            let run = |mode: &str| {
                let sets = with(mode);
                let sets: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
                train(&dir, mode, ranks, &[], &sets)
            };
            let (reference, _) = run("none");
            let (opt_w, log) = run("optimizer");
            assert!(log.contains("the optimizer state and update divided over"), "{log}");
            assert!(log.contains("all-reduced whole"), "{log}");
            let (grad_w, log) = run("gradients");
            assert!(log.contains("reduce-scattered (a ring"), "{log}");
            assert!(log.contains("and the reduced gradients divided over"), "{log}");
            let (param_w, log) = run("parameters");
            assert!(log.contains("each layer gathered from the ranks' pieces"), "{log}");
            assert!(log.contains("each layer gathered as evaluation reads it"), "{log}");
            assert!(log.contains("the reduced gradients and the parameters divided over"), "{log}");
            // A fresh start: each rank drew its pieces (the same weights as rank 0's whole draw,
            // which "none" used: the equalities below).
            assert!(log.contains("each data rank drew its own pieces from the seed"), "{log}");
            // weights.h5 (compared below) gathered and written one layer at a time.
            assert!(log.contains("weights.h5: gathered and written one layer at a time"), "{log}");
            // The step's next layer gathered ahead on the gather thread (all but each step's and
            // each evaluation's first; backward's second layer still held from forward); the
            // same fetches and the same bits without it, every layer then gathered when fetched.
            assert!(log.contains("gathered on a thread of its own while this one computes"), "{log}");
            let [fetched, ahead, held, wasted] = gathers(&log);
            assert!(ahead > 0 && held > 0, "{tag} on {ranks} ranks: nothing gathered ahead: {log}");
            assert!(2 * (ahead + held) >= fetched && wasted == 0, "{tag} on {ranks} ranks: {log}");
            let sets = with("parameters");
            let sets: Vec<&str> = sets.iter().map(|s| s.as_str()).chain(["distribution.prefetch=false"]).collect();
            let (plain_w, log) = train(&dir, "parameters-plain", ranks, &[], &sets);
            assert!(log.contains("one layer held at a time (distribution.prefetch = false)"), "{log}");
            assert_eq!(
                gathers(&log),
                [fetched, 0, 0, 0],
                "{tag} on {ranks} ranks: the same fetches, all gathered then"
            );
            assert_eq!(max_diff(&plain_w, &param_w), 0.0, "{tag} on {ranks} ranks: prefetch changed the training");
            if ranks == 2 {
                // An MPI without MPI_THREAD_MULTIPLE: no gather thread, and no communication
                // thread either (the main thread's gathers would run beside its calls).
                let sets = with("parameters");
                let sets: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
                let env = [("HVTRAIN_MPI_THREADS", "serialized")];
                let (serial_w, log) = train(&dir, "parameters-serialized", ranks, &env, &sets);
                assert!(log.contains("no prefetch: MPI granted no MPI_THREAD_MULTIPLE"), "{log}");
                assert!(log.contains("overlap off") && log.contains("shard = \"parameters\""), "{log}");
                assert_eq!(max_diff(&serial_w, &param_w), 0.0, "{tag}: serialized MPI changed the training");
            }

            // MPI's own reduce-scatter and all-gather (HVTRAIN_SHARD_COLLECTIVES=mpi) instead of the ring.
            let sets = with("gradients");
            let sets: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
            let (mpi_w, log) = train(&dir, "gradients-mpi", ranks, &[("HVTRAIN_SHARD_COLLECTIVES", "mpi")], &sets);
            assert!(log.contains("reduce-scattered (MPI_Reduce_scatter"), "{log}");
            let d_mpi = max_diff(&reference, &mpi_w);
            assert!(d_mpi <= TOL, "{tag} on {ranks} ranks: MPI's reduce-scatter differs by {d_mpi}");
            let sets = with("parameters");
            let sets: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
            let (mpi_p, log) = train(&dir, "parameters-mpi", ranks, &[("HVTRAIN_SHARD_COLLECTIVES", "mpi")], &sets);
            assert!(log.contains("layer gathered") && log.contains("MPI_Allgatherv"), "{log}");
            let d_mpi = max_diff(&reference, &mpi_p);
            assert!(d_mpi <= TOL, "{tag} on {ranks} ranks: parameters over MPI's collectives differ by {d_mpi}");
            // Same sums, element-wise updates: the same bits.
            let d_opt = max_diff(&reference, &opt_w);
            let d_grad = max_diff(&reference, &grad_w);
            let d_param = max_diff(&reference, &param_w);
            eprintln!(
                "{tag} on {ranks} ranks: optimizer differs by {d_opt:e}, gradients by {d_grad:e}, parameters by {d_param:e}"
            );
            assert_eq!(d_opt, 0.0, "{tag} on {ranks} ranks: shard = optimizer changed the training");
            // The same reduce-scatter, then the same values read through the gathered layers.
            assert_eq!(max_diff(&grad_w, &param_w), 0.0, "{tag} on {ranks} ranks: parameters differs from gradients");
            if ranks == 2 {
                assert_eq!(d_grad, 0.0, "{tag}: a reduce-scatter over 2 ranks adds the same two numbers");
            } else {
                assert!(d_grad <= TOL, "{tag} on {ranks} ranks: shard = gradients differs by {d_grad}");
            }
        }
    }
}

/// The log's layer gathers (shard = "parameters"), every rank's: layers fetched, gathered
/// ahead, still held in the second window, gathered ahead and not used.
fn gathers_all(log: &str) -> Vec<[u64; 4]> {
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("layer gathers (shard")).collect();
    assert!(!lines.is_empty(), "no gathers line: {log}");
    let count = |line: &str, what: &str| -> u64 {
        let head = line.split(what).next().unwrap_or_else(|| panic!("no {what:?} in {line}"));
        head.rsplit(|c: char| !c.is_ascii_digit()).find(|w| !w.is_empty()).and_then(|w| w.parse().ok()).expect(what)
    };
    let what = [" layers fetched", " gathered ahead while", " still held", " gathered ahead and not used"];
    lines.into_iter().map(|l| what.map(|w| count(l, w))).collect()
}

/// `gathers_all` of a run whose ranks all fetch alike (one pipeline stage): the one count.
fn gathers(log: &str) -> [u64; 4] {
    let all = gathers_all(log);
    assert!(all.iter().all(|c| *c == all[0]), "ranks fetched differently: {all:?}");
    all[0]
}

/// LARS (momentum, decay) and LAMB (decay) at learning rates large enough that a ratio from
/// one rank's part of a tensor would move the weights elsewhere.
const LARS: &[&str] = &[
    "optimizer.kind='lars'",
    "optimizer.lr=0.5",
    "optimizer.trust_coefficient=0.02",
    "optimizer.momentum=0.9",
    "optimizer.weight_decay=0.001",
];
const LAMB: &[&str] = &["optimizer.kind='lamb'", "optimizer.lr=0.02", "optimizer.weight_decay=0.01"];

/// LARS and LAMB scale each weight tensor by its whole norms, which no rank of a sharded run
/// holds: the ranks' sums over their pieces are added over the data group. Each mode on 2, 3
/// and 4 ranks (pieces that cut the weight tensors unevenly) ends where shard = "none" does, to
/// the tolerance of another summation order; LARS also with a global norm clip. Learning rates
/// large enough that a ratio from one rank's part of a tensor would move the weights elsewhere.
#[test]
fn lars_and_lamb_train_as_unsharded() {
    let _g = mpi_lock();
    let lars_clipped: Vec<&str> = LARS.iter().copied().chain(["optimizer.global_clipnorm=0.5"]).collect();
    let optimizers: [(&str, &[&str]); 2] = [("lars", &lars_clipped), ("lamb", LAMB)];
    for ranks in [2, 3, 4] {
        for (tag, opt) in optimizers {
            let dir = setup(&format!("shard-{tag}-{ranks}"));
            let run = |mode: &str| {
                let sets: Vec<String> =
                    opt.iter().map(|s| s.to_string()).chain([format!("distribution.shard='{mode}'")]).collect();
                let sets: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
                train(&dir, mode, ranks, &[], &sets).0
            };
            let reference = run("none");
            // The starting weights: a step of 1e-20 leaves them as drawn.
            let start = train(&dir, "start", 1, &[], &["optimizer.kind='sgd'", "optimizer.lr=1e-20"]).0;
            let moved = max_diff(&reference, &start);
            assert!(moved > 0.05, "{tag}: the weights hardly moved ({moved})");
            let modes: &[&str] = if ranks == 4 { &["parameters"] } else { &["optimizer", "gradients", "parameters"] };
            for mode in modes {
                let d = max_diff(&reference, &run(mode));
                eprintln!("{tag} on {ranks} ranks, shard = {mode}: differs by {d:e} (moved {moved})");
                assert!(d <= TOL, "{tag} on {ranks} ranks: shard = {mode} differs from none by {d}");
            }
        }
    }
}

/// LARS and LAMB with tensor parallelism: a tensor rank holds a slice of each weight, so each
/// ratio's norms are summed over the tensor group (a row-parallel bias and the unpaired last
/// layer, which every tensor rank holds, once). On 2 ranks (tensor = 2) and on 4 (2 data ranks
/// × 2, unsharded and shard = "gradients") the run ends where the same job without tensor
/// parallelism does, to the tolerance of the tensor sums' order.
#[test]
fn lars_and_lamb_with_tensor_parallelism_train_as_whole_tensors() {
    let _g = mpi_lock();
    for (tag, opt) in [("lars", LARS), ("lamb", LAMB)] {
        let dir = setup(&format!("tensor-{tag}"));
        // The same global batch on every layout: GLOBAL over the data ranks.
        let run = |out: &str, ranks: usize, data: usize, sets: &[&str]| {
            let b = format!("training.batch_size={}", GLOBAL / data);
            let base = [b.as_str(), "training.epochs=2", "data.shuffle=false", "model.activation=tanh"];
            let sets: Vec<&str> = opt.iter().copied().chain(sets.iter().copied()).collect();
            train_weights(&dir, out, ranks, LAYERS.len() - 1, &[], &base, &sets).0
        };
        let reference = run("whole", 2, 2, &[]);
        for (out, ranks, data, sets) in [
            ("t2", 2, 1, &["parallel.tensor=2"][..]),
            ("t2d2", 4, 2, &["parallel.tensor=2"][..]),
            ("t2d2-gradients", 4, 2, &["parallel.tensor=2", "distribution.shard='gradients'"][..]),
        ] {
            let d = max_diff(&reference, &run(out, ranks, data, sets));
            eprintln!("{tag} {out}: differs by {d:e} from tensor = 1");
            assert!(d <= TOL, "{tag} {out}: {d} away from the run without tensor parallelism");
        }
    }
}

/// A stop (SIGTERM at step 40 on rank 0) of a 2-rank "parameters" run writes a checkpoint in
/// parts (one per rank, and the index) whose parameters and optimizer state, put together from
/// the parts' documented layout, equal an unsharded run's at the same step bit for bit; it
/// resumes on 3 ranks with shard = "parameters" (each rank reading its own pieces), on 3 with
/// "optimizer", and on 1 rank unsharded (put together on rank 0), and the unsharded run's whole
/// checkpoint resumes sharded and tensor-parallel (each rank reading its pieces of the file),
/// each ending where the unsharded run did.
#[test]
fn a_sharded_stop_checkpoint_holds_the_whole_state_and_resumes_elsewhere() {
    let _g = mpi_lock();
    let opt = ["optimizer.kind='adam'", "optimizer.lr=0.01", "checkpoint.every_steps=40", "checkpoint.keep=5"];
    let dir = setup("shard-stop");
    let (whole, _) = train(&dir, "none", 2, &[], &[&opt[..], &["distribution.shard='none'"]].concat());
    let fault = [("HVTRAIN_INJECT_FAULT", "0:40:term")];
    let b = format!("training.batch_size={}", GLOBAL / 2);
    let mut args = vec!["train", "job.toml", "--set", "output.dir='sharded'", "--set", &b];
    let common =
        ["training.epochs=2", "data.shuffle=false", "model.activation=tanh", "distribution.shard='parameters'"];
    for s in opt.iter().chain(&common) {
        args.extend(["--set", s]);
    }
    let stopped = mpirun_env(2, &fault, &args, &dir, 120);
    assert_eq!(stopped.code, Some(75), "SIGTERM at step 40 exits 75\n{}", stopped.all());
    let ckpt = |out: &str| {
        let names = checkpoints(&dir.join(out));
        let n = names.iter().find(|n| n.as_str() == "ckpt-step000000040.h5");
        dir.join(out).join(n.unwrap_or_else(|| panic!("no step-40 checkpoint in {out}: {names:?}")))
    };
    let (a, b) = (ckpt("none"), ckpt("sharded"));
    // The unsharded run's checkpoint holds its arrays; the sharded one names a part per rank.
    assert!(checkpoint_parts(&dir.join("none")).is_empty());
    let parts = checkpoint_parts(&dir.join("sharded"));
    assert_eq!(parts.len(), 2, "one part per rank: {parts:?}");
    assert!(parts.iter().all(|p| p.starts_with("ckpt-step000000040.")), "{parts:?}");
    for t in ["params", "optimizer/m", "optimizer/v"] {
        let (x, y) = (ckpt_stored(&a, t, LAYERS.len() - 1), ckpt_stored(&b, t, LAYERS.len() - 1));
        assert_eq!(x.len(), 307, "{t}");
        assert!(x.iter().any(|&v| v != 0.0), "{t} is all zeros");
        assert_eq!(x, y, "{t} of the sharded stop checkpoint differs from the unsharded one's");
    }
    // The parts resume on another count each rank reading its own pieces ("parameters" on
    // 3, and with tensor parallelism on 2 data ranks × 2), and put together on rank 0 without
    // shards (1 rank), from the file named; the unsharded run's checkpoint (whole) resumes sharded,
    // and with tensor parallelism, each rank reading its own pieces of the whole file (rank 0
    // checks it without holding it).
    for (from, ranks, mode, out, tensor) in [
        ("sharded", 3, "parameters", "p3", 1),
        ("sharded", 1, "none", "n1", 1),
        ("sharded", 4, "parameters", "t4", 2),
        ("none", 3, "parameters", "w3", 1),
        ("none", 4, "optimizer", "wt4", 2),
    ] {
        let t = format!("parallel.tensor={tensor}");
        let (b, o, m) = (
            format!("training.batch_size={}", GLOBAL / 2), // the first start's; the global batch stays
            format!("output.dir='{out}'"),
            format!("distribution.shard='{mode}'"),
        );
        let named = dir.join(from).join("ckpt-step000000040.h5");
        let mut a = vec![
            "train",
            "job.toml",
            "--set",
            &b,
            "--set",
            &o,
            "--set",
            &m,
            "--set",
            &t,
            "--resume",
            named.to_str().unwrap(),
        ];
        for s in opt.iter().chain(&common[..3]) {
            a.extend(["--set", s]);
        }
        let r = mpirun_env(ranks, &[], &a, &dir, 120);
        assert!(r.ok(), "the resume on {ranks} rank(s) ({mode}) failed\n{}", r.all());
        let put_together = r.stderr.contains("parts put together on rank 0");
        assert_eq!(put_together, from == "sharded" && ranks == 1, "{}", r.all());
        let read_own = r.stderr.contains("each rank read its own pieces of the checkpoint's 2 parts");
        assert_eq!(read_own, from == "sharded" && ranks > 1, "{}", r.all());
        let whole_read = r.stderr.contains("each rank read its own pieces of the whole checkpoint");
        assert_eq!(whole_read, from == "none", "{}", r.all());
        let after = layer_tensors(&dir.join(out).join("weights.h5"), LAYERS.len() - 1);
        let d = max_diff(&whole, &after);
        eprintln!("stopped at 40 on 2 ranks ({from}), resumed on {ranks} ({mode}): weights differ by {d:e}");
        assert!(d <= TOL, "the resumed run on {ranks} ({mode}) ends {d} away from the unsharded one");
    }
    // Resume on 3 ranks, the state divided otherwise.
    let mut resume: Vec<&str> = args
        .iter()
        .map(|s| if *s == "distribution.shard='parameters'" { "distribution.shard='optimizer'" } else { s })
        .collect();
    resume.push("--resume");
    resume.push("auto");
    let r = mpirun_env(3, &[], &resume, &dir, 120);
    assert!(r.ok(), "the resume on 3 ranks failed\n{}", r.all());
    assert!(r.stderr.contains("shard = \"optimizer\""), "{}", r.all());
    let after = layer_tensors(&dir.join("sharded/weights.h5"), LAYERS.len() - 1);
    let d = max_diff(&whole, &after);
    eprintln!("stopped at 40 on 2 ranks (parameters), resumed on 3 (optimizer): weights differ by {d:e}");
    assert!(d <= TOL, "the resumed sharded run ends {d} away from the unsharded one");
}

/// A rank killed while it writes its part of the step-20 checkpoint (2 ranks, "gradients",
/// a checkpoint every 10 steps): the job ends non-zero, no step-20 index exists, the step-10
/// checkpoint and its parts are whole; `--resume auto` takes step 10, removes the part
/// rank 0 had put in place for step 20 (no index names it) and ends with the weights of the
/// run that was never interrupted, bit for bit.
#[test]
fn a_rank_killed_while_writing_its_part_leaves_the_last_checkpoint_whole() {
    let _g = mpi_lock();
    let dir = setup("shard-killed-part");
    let b = format!("training.batch_size={}", GLOBAL / 2);
    let sets = [
        b.as_str(),
        "training.epochs=1",
        "data.shuffle=false",
        "optimizer.kind='adam'",
        "optimizer.lr=0.01",
        "distribution.shard='gradients'",
        "checkpoint.every_steps=10",
        "checkpoint.keep=5",
    ];
    let (whole, _) = train_weights(&dir, "straight", 2, LAYERS.len() - 1, &[], &sets, &[]);
    let mut args = vec!["train", "job.toml", "--set", "output.dir='killed'"];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let killed = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:20:kill_in_checkpoint")], &args, &dir, 120);
    assert!(!killed.ok(), "a rank was killed: the job must fail\n{}", killed.all());
    let out = dir.join("killed");
    assert_eq!(checkpoints(&out), ["ckpt-step000000010.h5"], "{}", killed.all());
    let parts = checkpoint_parts(&out);
    let of10 = parts.iter().filter(|p| p.starts_with("ckpt-step000000010.")).count();
    assert_eq!(of10, 2, "{parts:?}");
    let stray: Vec<&String> = parts.iter().filter(|p| p.starts_with("ckpt-step000000020.")).collect();
    assert!(stray.len() <= 1, "rank 1 died before its rename: {parts:?}");
    args.extend(["--resume", "auto"]);
    let r = mpirun_env(2, &[], &args, &dir, 120);
    assert!(r.ok(), "the resume failed\n{}", r.all());
    assert!(r.stderr.contains("resuming from") && r.stderr.contains("ckpt-step000000010.h5"), "{}", r.all());
    if let Some(s) = stray.first() {
        assert!(r.stderr.contains("that no checkpoint names") && r.stderr.contains(s.as_str()), "{}", r.all());
    }
    let after = checkpoint_parts(&out);
    assert!(stray.iter().all(|s| !after.contains(s)), "{after:?}");
    assert_eq!(after.len(), 2 * checkpoints(&out).len(), "two parts per index: {after:?}");
    let resumed = layer_tensors(&out.join("weights.h5"), LAYERS.len() - 1);
    assert_eq!(max_diff(&whole, &resumed), 0.0, "the resumed run differs from the straight one");
}

/// The shards live within each data-parallel group: with tensor or pipeline parallelism (2
/// data ranks × 2), gradient accumulation, and bf16 products (on the emulated tile unit where
/// the CPU has no bf16), shard = "gradients" and "parameters" train to the same bits as "none"
/// (each data group has 2 ranks: the ring adds the same two numbers). A last step in which
/// some ranks have no rows (360 rows in steps of 2 × 11, with accumulation; 3 × 7, to float
/// tolerance) still joins every layer's gather.
#[test]
fn shards_compose_with_model_parallelism_accumulation_and_bf16() {
    let _g = mpi_lock();
    let cases: [(&str, usize, &[(&str, &str)], &[&str]); 6] = [
        ("tensor", 4, &[], &["parallel.tensor=2"]),
        ("pipeline", 4, &[], &["parallel.pipeline=2", "parallel.micro_batches=2"]),
        ("accumulate", 2, &[], &["training.accumulate=2"]),
        (
            "bf16",
            2,
            &[("HVTRAIN_CPU_BF16", "emulated"), ("HVTRAIN_BF16_RATE_CHECK", "0")],
            &["training.precision='bf16'"],
        ),
        // 360 = 8 × 44 + 8: the last step's 8 rows all on rank 0, rank 1 has none.
        ("no-rows-accumulate", 2, &[], &["training.accumulate=2", "data.drop_last=false"]),
        // 360 = 17 × 21 + 3: ranks 1 and 2 have none in the last step.
        ("no-rows", 3, &[], &["data.drop_last=false"]),
    ];
    for (tag, ranks, env, sets) in cases {
        let dir = setup(&format!("shard-with-{tag}"));
        let data = if tag == "tensor" || tag == "pipeline" { ranks / 2 } else { ranks };
        let per = match tag {
            "no-rows-accumulate" => 11,
            "no-rows" => 7,
            _ => GLOBAL / data,
        };
        let b = format!("training.batch_size={per}");
        let run = |mode: &str| {
            let shard = format!("distribution.shard='{mode}'");
            let base =
                [b.as_str(), "training.epochs=1", "data.shuffle=false", "optimizer.kind='adam'", "optimizer.lr=0.01"];
            let sets: Vec<&str> = sets.iter().copied().chain([shard.as_str()]).collect();
            train_weights(&dir, mode, ranks, LAYERS.len() - 1, env, &base, &sets)
        };
        let (none, _) = run("none");
        for mode in ["gradients", "parameters"] {
            let (sharded, log) = run(mode);
            assert!(log.contains(&format!("divided over {data} data-parallel ranks")), "{tag}: {log}");
            let d = max_diff(&none, &sharded);
            eprintln!("{tag}: shard = {mode} differs by {d:e}");
            if mode == "parameters" {
                // The plan foresaw every fetch (micro-batches, pipeline schedule, ranks without
                // rows): layers gathered ahead, none of them for nothing.
                let all = gathers_all(&log);
                eprintln!("{tag}: each rank's layers fetched, gathered ahead, held, not used: {all:?}");
                assert!(all.iter().any(|c| c[1] > 0) && all.iter().all(|c| c[3] == 0), "{tag}: {log}");
            }
            if data == 2 {
                assert_eq!(d, 0.0, "{tag}: shard = {mode} changed the training");
            } else {
                assert!(d <= TOL, "{tag}: shard = {mode} differs by {d}");
            }
        }
    }
}

/// With tensor or pipeline parallelism (2 data ranks × 2) a fresh start of "parameters" draws
/// each rank's pieces of its shard from the seed, and the shards' checkpoints are written
/// in parts by every rank (4 parts: each rank's pieces of its tensor shard or stage, mapped
/// into the whole model's stored order; a row-parallel bias and the unpaired last layer, which
/// both tensor ranks hold, written once), equal bit for bit to the checkpoint the same layout
/// writes unsharded (2 parts, by replica 0's ranks); they resume on another layout (tensor parts on pipeline stages,
/// stage parts on tensor shards, each rank reading its own pieces) and on 1 rank (put
/// together), ending where the uninterrupted run did.
#[test]
fn model_parallel_shards_write_parts_on_every_rank_and_resume_on_other_layouts() {
    let _g = mpi_lock();
    let dir = setup("shard-mp-parts");
    let b = format!("training.batch_size={}", GLOBAL / 2);
    let base = [
        b.as_str(),
        "training.epochs=2",
        "data.shuffle=false",
        "optimizer.kind='adam'",
        "optimizer.lr=0.01",
        "checkpoint.every_steps=30",
        "checkpoint.keep=5",
        // The TensorBoard histograms each epoch: the model a layer at a time, as weights.h5.
        "output.histogram_freq=1",
    ];
    let tensor: &[&str] = &["parallel.tensor=2"];
    let pipeline: &[&str] = &["parallel.pipeline=2", "parallel.micro_batches=2"];
    let mut finals = Vec::new();
    for (tag, layout, mode) in [("tensor", tensor, "parameters"), ("pipeline", pipeline, "gradients")] {
        let run = |out: &str, mode: &str| {
            let shard = format!("distribution.shard='{mode}'");
            let sets: Vec<&str> = layout.iter().copied().chain([shard.as_str()]).collect();
            train_weights(&dir, out, 4, LAYERS.len() - 1, &[], &base, &sets)
        };
        let whole_out = format!("{tag}-none");
        let (whole, _) = run(&whole_out, "none");
        let (sharded, log) = run(tag, mode);
        assert_eq!(max_diff(&whole, &sharded), 0.0, "{tag}: shard = {mode} changed the training");
        assert!(log.contains("checkpoint parts written by 4 ranks at once"), "{tag}: {log}");
        // weights.h5 a layer at a time in every mode: no rank holds the whole model.
        assert!(log.contains("weights.h5: gathered and written one layer at a time"), "{tag}: {log}");
        // A fresh start: each rank drew its pieces of its shard ("parameters") or its whole
        // shard (the same weights, as the equal training above says), nobody cut them from a
        // whole model.
        let pieces = log.contains("each data rank drew its own pieces from the seed");
        let shard = log.contains("each rank drew its shard of its stage from the seed");
        assert_eq!((pieces, shard), (mode == "parameters", mode != "parameters"), "{tag}: {log}");
        // Unsharded, replica 0's two ranks write the parts, each its whole shard.
        let none_parts = checkpoint_parts(&dir.join(&whole_out));
        let none30 = none_parts.iter().filter(|p| p.starts_with("ckpt-step000000030.")).count();
        assert!(none30 == 2 && none_parts.iter().all(|p| p.ends_with("of2.h5")), "{tag}: {none_parts:?}");
        let parts = checkpoint_parts(&dir.join(tag));
        let of30: Vec<&String> = parts.iter().filter(|p| p.starts_with("ckpt-step000000030.")).collect();
        assert_eq!(of30.len(), 4, "{tag}: one part per rank: {parts:?}");
        let at30 = |out: &str| dir.join(out).join("ckpt-step000000030.h5");
        for t in ["params", "optimizer/m", "optimizer/v"] {
            let (x, y) = (ckpt_stored(&at30(&whole_out), t, LAYERS.len() - 1), ckpt_stored(&at30(tag), t, 3));
            assert_eq!(x.len(), 307, "{tag} {t}");
            assert!(x.iter().all(|v| v.is_finite()) && x.iter().any(|&v| v != 0.0), "{tag} {t}");
            assert_eq!(x, y, "{tag}: {t} of the sharded checkpoint differs from the unsharded one");
        }
        finals.push(whole);
    }
    // Each checkpoint in parts resumed on the other layout, and on 1 rank unsharded.
    for (from, ranks, layout, mode, out) in [
        ("tensor", 4, pipeline, "optimizer", "t-on-p"),
        ("pipeline", 4, tensor, "parameters", "p-on-t"),
        ("tensor", 1, &[][..], "none", "t-on-1"),
        // Unsharded tensor parallelism's 2 parts on unsharded pipeline stages (2 data ranks).
        ("tensor-none", 4, pipeline, "none", "tn-on-p"),
    ] {
        let named = dir.join(from).join("ckpt-step000000030.h5");
        let (o, m) = (format!("output.dir='{out}'"), format!("distribution.shard='{mode}'"));
        let mut a = vec!["train", "job.toml", "--set", &o, "--set", &m, "--resume", named.to_str().unwrap()];
        for s in base.iter().chain(layout) {
            a.extend(["--set", s]);
        }
        let r = mpirun_env(ranks, &[], &a, &dir, 120);
        assert!(r.ok(), "{from} resumed as {out} failed\n{}", r.all());
        let k = if from.ends_with("-none") { 2 } else { 4 };
        let read_own = r.stderr.contains(&format!("each rank read its own pieces of the checkpoint's {k} parts"));
        assert_eq!(read_own, ranks > 1, "{}", r.all());
        assert_eq!(r.stderr.contains("parts put together on rank 0"), ranks == 1, "{}", r.all());
        let after = layer_tensors(&dir.join(out).join("weights.h5"), LAYERS.len() - 1);
        let want = &finals[usize::from(from.starts_with("pipeline"))];
        let d = max_diff(want, &after);
        eprintln!("{from} parts at step 30 resumed as {out}: weights differ by {d:e}");
        assert!(d <= TOL, "{from} resumed as {out} ends {d} away from the uninterrupted run");
    }
}

/// The fields of each metrics.jsonl line that evaluation and training decide (not the clock's).
fn evaluated(out: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let keep = ["epoch", "train_loss", "test_loss", "test_accuracy", "test_top5_accuracy", "val_loss", "val_accuracy"];
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            keep.iter().map(|k| format!("{k}={}", v[*k])).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

/// Evaluation under shard = "parameters" (each layer gathered as the forward reads it: a test
/// set of 512·ranks + 1 rows, so one rank evaluates a chunk of 512 more than the others, which
/// join its gathers without rows, and a validation split) gives the metrics of "gradients" bit
/// for bit (the same weights), and on 2 ranks those of "none";
/// keep_best's weights (gathered on rank 0 when an epoch improves) and the TensorBoard
/// histograms (gathered each epoch) are written from the gathered model.
#[test]
fn evaluation_and_best_weights_under_sharded_parameters() {
    let _g = mpi_lock();
    for ranks in [2, 3] {
        let dir = setup(&format!("shard-eval-{ranks}"));
        let (x, y) = synthetic(512 * ranks + 1, D, 3, 43);
        write_classes(&dir.join("t.h5"), &x, D, &y);
        let b = format!("training.batch_size={}", GLOBAL / ranks);
        let run = |mode: &str| {
            let shard = format!("distribution.shard='{mode}'");
            let base =
                [b.as_str(), "training.epochs=3", "data.shuffle=false", "optimizer.kind='adam'", "optimizer.lr=0.01"];
            let sets = [
                "data.test='t.h5'",
                "data.validation_split=0.1",
                "output.keep_best=true",
                "output.histogram_freq=1",
                shard.as_str(),
            ];
            let (w, log) = train_weights(&dir, mode, ranks, LAYERS.len() - 1, &[], &base, &sets);
            let best = layer_tensors(&dir.join(mode).join("best-weights.h5"), LAYERS.len() - 1);
            (w, best, evaluated(&dir.join(mode)), log)
        };
        let (gw, gbest, gm, _) = run("gradients");
        let (pw, pbest, pm, log) = run("parameters");
        assert!(log.contains("each layer gathered from the ranks' pieces"), "{log}");
        assert!(log.contains("each layer gathered as evaluation reads it"), "{log}");
        // The best weights, gathered and written a layer at a time (equal to gradients' file,
        // written from the whole model: below); weights.h5 is their copy here.
        assert!(log.contains("best-weights.h5: gathered and written one layer at a time"), "{log}");
        assert!(pm.iter().all(|l| l.contains("test_loss=0.") || l.contains("test_loss=1.")), "{pm:?}");
        assert!(pm.iter().all(|l| !l.contains("val_loss=null")), "{pm:?}");
        assert_eq!(pm, gm, "{ranks} ranks: evaluation under parameters differs from gradients");
        assert_eq!(max_diff(&pw, &gw), 0.0, "{ranks} ranks: weights differ");
        assert_eq!(max_diff(&pbest, &gbest), 0.0, "{ranks} ranks: best weights differ");
        if ranks == 2 {
            let (nw, _, nm, _) = run("none");
            assert_eq!(pm, nm, "2 ranks: evaluation under parameters differs from none");
            assert_eq!(max_diff(&pw, &nw), 0.0);
        }
    }
}

/// The timeline shows the prefetch at work: on every rank of a 2-rank "parameters" run, a
/// "layer gathers" thread whose spans gather layers ahead ("all-gather layer L (ahead)"), some
/// of them running while the main thread's forward computes (the spans overlap in time).
#[test]
fn the_timeline_shows_layers_gathered_ahead_beside_the_forward() {
    let _g = mpi_lock();
    let dir = setup("shard-timeline");
    let sets = ["distribution.shard='parameters'", "output.timeline='trace.json'"];
    train(&dir, "out", 2, &[], &sets);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("trace.json")).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    for rank in 0..2 {
        let named = events.iter().any(|e| e["pid"] == rank && e["ph"] == "M" && e["args"]["name"] == "layer gathers");
        assert!(named, "rank {rank}: no layer-gathers thread");
        let span =
            |e: &serde_json::Value| (e["ts"].as_f64().unwrap(), e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap());
        let of = |tid: u64, name: &str| -> Vec<(f64, f64)> {
            let at = |e: &&serde_json::Value| e["pid"] == rank && e["ph"] == "X" && e["tid"] == tid;
            events.iter().filter(at).filter(|e| e["name"].as_str().unwrap().contains(name)).map(span).collect()
        };
        let ahead = of(3, "(ahead)");
        let forward = of(1, "forward + loss");
        assert!(
            !ahead.is_empty() && !forward.is_empty(),
            "rank {rank}: {} ahead, {} forward",
            ahead.len(),
            forward.len()
        );
        let beside = ahead.iter().filter(|a| forward.iter().any(|f| a.0 < f.1 && f.0 < a.1)).count();
        assert!(beside > 0, "rank {rank}: no layer gathered ahead while the forward ran ({} ahead)", ahead.len());
    }
}

/// The main thread's time in layer gathers is exposed communication: with rank 1 slowed before
/// every step, rank 0 waits for it in its first gather of each step (the gather thread cannot
/// finish without rank 1's pieces), and that wait is what the epoch's exposed communication
/// per step (metrics.jsonl) shows; with prefetch off too (gathered on the main thread).
#[test]
fn a_slow_rank_shows_as_exposed_layer_gathers() {
    let _g = mpi_lock();
    let dir = setup("shard-exposed");
    let env = [("HVTRAIN_INJECT_FAULT", "1:1:delay=0.05")];
    for prefetch in ["true", "false"] {
        let out = format!("out-{prefetch}");
        let p = format!("distribution.prefetch={prefetch}");
        train(&dir, &out, 2, &env, &["distribution.shard='parameters'", &p]);
        let text = std::fs::read_to_string(dir.join(&out).join("metrics.jsonl")).unwrap();
        let exposed: Vec<f64> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter_map(|v| v["exposed_comm_ms_per_step"].as_f64())
            .collect();
        assert_eq!(exposed.len(), 2, "prefetch {prefetch}: one figure per epoch\n{text}");
        // 50 ms of rank 1's delay a step, less the little rank 0 computes meanwhile.
        assert!(exposed.iter().all(|&e| e > 30.0), "prefetch {prefetch}: exposed ms/step {exposed:?}");
    }
}

/// The parts of each candidate checkpoint are checked on every rank at once: with one value of
/// part 1 of the newest checkpoint changed (a part rank 1 checks), `--resume auto` on 3 ranks
/// skips that checkpoint naming the damaged part and resumes from the one before, after the
/// parts were checked on 2 ranks at once (3 ranks, 2 parts: rank 2 has none to check).
#[test]
fn parts_are_checked_on_every_rank_and_a_damaged_one_falls_back() {
    let _g = mpi_lock();
    let dir = setup("shard-verify");
    let sets = [
        "training.batch_size=6",
        "training.epochs=1",
        "data.shuffle=false",
        "distribution.shard='gradients'",
        "checkpoint.every_steps=10",
        "checkpoint.keep=5",
    ];
    train_weights(&dir, "out", 2, LAYERS.len() - 1, &[], &sets, &[]);
    let out = dir.join("out");
    let part =
        checkpoint_parts(&out).into_iter().find(|p| p.starts_with("ckpt-step000000030.") && p.contains("part1of2"));
    let part = out.join(part.expect("part 1 of the step-30 checkpoint"));
    {
        let f = hdf5::File::open_rw(&part).unwrap();
        let ds = f.dataset("params").unwrap();
        let mut v: Vec<f32> = ds.read_raw().unwrap();
        v[0] += 1.0;
        ds.write_raw(&v).unwrap();
    }
    let mut args = vec!["train", "job.toml", "--set", "output.dir='out'", "--set", "training.epochs=2"];
    for s in &sets[..1].iter().chain(&sets[2..]).copied().collect::<Vec<_>>() {
        args.extend(["--set", s]);
    }
    args.extend(["--resume", "auto"]);
    let r = mpirun_env(3, &[], &args, &dir, 120);
    assert!(r.ok(), "the resume failed\n{}", r.all());
    let name = part.file_name().unwrap().to_str().unwrap();
    let skipped =
        r.stderr.lines().any(|l| l.contains("skipping checkpoint") && l.contains(name) && l.contains("damaged"));
    assert!(skipped, "no warning naming {name}\n{}", r.all());
    assert!(r.stderr.contains("resuming from") && r.stderr.contains("ckpt-step000000020.h5"), "{}", r.all());
    assert!(r.stderr.contains("checked the checkpoint's 2 parts on 2 ranks at once"), "{}", r.all());
}
