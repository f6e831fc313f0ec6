//! No silent data loss, under a real `mpirun`: every training row is used exactly once per
//! epoch whatever the shard sizes (short last batches, ranks with fewer batches), the
//! gradient average is weighted by the rows each rank really used (N ranks = 1 rank on the
//! same rows), more `{rank}` files than ranks are all read, fewer are a clear error, and
//! `data.drop_last = true` keeps the old behaviour with a warning.
//!
//! Which rows were used comes from the loader's debug line (one per rank and epoch): a count
//! and an order-independent digest of (file number, row in file), compared with the digest
//! of every row of every file.

mod common;
use common::*;
use std::path::Path;

const D: usize = 5;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 10, 8, K];
const DEBUG_LOADER: (&str, &str) = ("RUST_LOG", "info,hvtrain::data::loader=debug");

/// The loader's row digest: splitmix64 of (file number << 32 | row in the file), added up.
fn mix(file: u64, row: u64) -> u64 {
    let mut z = (file << 32 | row).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn digest_of_all(sizes: &[usize]) -> u64 {
    let mut d = 0u64;
    for (f, &n) in sizes.iter().enumerate() {
        for r in 0..n {
            d = d.wrapping_add(mix(f as u64, r as u64));
        }
    }
    d
}

/// `d-0.h5`, `d-1.h5`, ... with the given row counts.
fn write_files(dir: &Path, sizes: &[usize], seed: u64) {
    for (f, &n) in sizes.iter().enumerate() {
        let (x, y) = synthetic(n, D, K, seed + f as u64);
        write_classes(&dir.join(format!("d-{f}.h5")), &x, D, &y);
    }
}

/// Per epoch (1-based index - 1): (rows, digest) added over every rank's loader line.
fn rows_used(stderr: &str, epochs: usize) -> Vec<(usize, u64, usize)> {
    let mut out = vec![(0usize, 0u64, 0usize); epochs];
    for line in stderr.lines().filter(|l| l.contains("loader: epoch ")) {
        let rest = line.split("loader: epoch ").nth(1).unwrap();
        let epoch: usize = rest.split(':').next().unwrap().trim().parse().unwrap();
        let rows: usize = rest.split("used ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        let hex = rest.split("row digest ").nth(1).unwrap().trim();
        let digest = u64::from_str_radix(hex, 16).unwrap();
        let e = &mut out[epoch - 1];
        e.0 += rows;
        e.1 = e.1.wrapping_add(digest);
        e.2 += 1; // lines: one per rank
    }
    out
}

fn metrics(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("out/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn train(dir: &Path, ranks: usize, sets: &[&str]) -> Run {
    let mut args = vec!["train", "job.toml"];
    for s in sets {
        args.extend(["--set", s]);
    }
    mpirun_env(ranks, &[DEBUG_LOADER], &args, dir, 120)
}

/// Every row once per epoch: `sizes.len()` files, `ranks` ranks, batch `b`.
fn check_every_row_once(name: &str, sizes: &[usize], ranks: usize, b: usize, want_steps: usize) {
    let total: usize = sizes.iter().sum();
    let want_digest = digest_of_all(sizes);
    for shuffle in [false, true] {
        let dir = scratch(&format!("{name}-{shuffle}"));
        write_files(&dir, sizes, 3);
        job(&dir, &LAYERS, "d-{rank}.h5", None, "");
        let bs = format!("training.batch_size={b}");
        let sh = format!("data.shuffle={shuffle}");
        let run =
            train(&dir, ranks, &[&bs, &sh, "training.epochs=2", "data.shuffle_block=8", "data.shuffle_window=16"]);
        assert!(run.ok(), "{name}, shuffle {shuffle}: training failed\n{}", run.all());
        let used = rows_used(&run.stderr, 2);
        for (e, &(rows, digest, lines)) in used.iter().enumerate() {
            assert_eq!(
                lines,
                ranks,
                "{name}, shuffle {shuffle}, epoch {}: one loader line per rank\n{}",
                e + 1,
                run.all()
            );
            assert_eq!(rows, total, "{name}, shuffle {shuffle}, epoch {}: rows used\n{}", e + 1, run.all());
            assert_eq!(digest, want_digest, "{name}, shuffle {shuffle}, epoch {}: not every row exactly once", e + 1);
        }
        let m = metrics(&dir);
        assert_eq!(m.len(), 2);
        for line in &m {
            assert_eq!(line["samples"], total, "{name}: metrics.jsonl samples: {line}");
            assert_eq!(line["steps"], want_steps, "{name}: steps per epoch: {line}");
        }
    }
}

/// 3 ranks, files of 70, 50 and 33 rows, batch 16: ranks have 5, 4 and 3 batches, each
/// ending short; every rank runs 5 steps (the last ones empty on ranks 1 and 2).
#[test]
fn every_row_used_once_per_epoch_with_uneven_files() {
    let _g = mpi_lock();
    check_every_row_once("rows-uneven", &[70, 50, 33], 3, 16, 5);
}

/// 4 files on 2 ranks: rank 0 reads files 0 and 2, rank 1 files 1 and 3. Fewer files than
/// ranks is an error naming the template, the files found and the ranks.
#[test]
fn more_files_than_ranks_are_all_read_fewer_is_an_error() {
    let _g = mpi_lock();
    // Rank 0: 30 + 25 = 55 rows (7 batches of 8, the last short), rank 1: 20 + 11 = 31 (4).
    check_every_row_once("rows-4-on-2", &[30, 20, 25, 11], 2, 8, 7);

    let dir = scratch("rows-2-on-3");
    write_files(&dir, &[30, 20], 3);
    job(&dir, &LAYERS, "d-{rank}.h5", None, "");
    let run = mpirun(3, &["train", "job.toml"], &dir, 60);
    assert_eq!(run.code, Some(1), "{}", run.all());
    assert!(
        run.stderr.lines().any(|l| l.contains("error on rank 2")
            && l.contains("d-{rank}.h5")
            && l.contains("2 files")
            && l.contains("3 ranks")),
        "fewer files than ranks: no clear error\n{}",
        run.all()
    );
}

/// `data.drop_last = true`: today's steps (the smallest share's full batches), and a warning
/// saying what is dropped.
#[test]
fn drop_last_keeps_the_old_step_count_and_warns() {
    let _g = mpi_lock();
    let dir = scratch("rows-drop-last");
    write_files(&dir, &[70, 50], 3);
    job(&dir, &LAYERS, "d-{rank}.h5", None, "");
    let run = train(&dir, 2, &["training.batch_size=16", "training.epochs=2", "data.drop_last=true"]);
    assert!(run.ok(), "{}", run.all());
    // min(70, 50) / 16 = 3 steps: 48 rows per rank, 96 of 120 used; 22 + 2 dropped.
    for (rows, _, lines) in rows_used(&run.stderr, 2) {
        assert_eq!((rows, lines), (96, 2), "{}", run.all());
    }
    for line in metrics(&dir) {
        assert_eq!(line["steps"], 3, "{line}");
        assert_eq!(line["samples"], 96, "{line}");
    }
    assert!(
        run.stderr.lines().any(|l| l.contains("WARN") && l.contains("drop_last") && l.contains("24")),
        "no warning naming the 24 dropped rows\n{}",
        run.all()
    );
}

/// N ranks with uneven `{rank}` files give the weights of 1 rank on the same rows, to float
/// tolerance: the rows of each global step are the same, and the average is weighted by the
/// rows each rank really used. `shares` are laid out so that every step but the last is full
/// on every rank (so 1 rank with batch = ranks × b sees the same global steps).
fn n_ranks_equal_one_rank(tag: &str, shares: &[usize], b: usize) {
    let n = shares.len();
    let total: usize = shares.iter().sum();
    let (x, y) = synthetic(total, D, K, 21);
    // Global order of the 1-rank run: step i = rank 0's rows of step i, then rank 1's, ...
    let steps = shares.iter().map(|s| s.div_ceil(b)).max().unwrap();
    let mut per_rank: Vec<(Vec<f32>, Vec<i32>)> = vec![(Vec::new(), Vec::new()); n];
    let mut next = 0;
    for i in 0..steps {
        for (r, &s) in shares.iter().enumerate() {
            let rows = s.saturating_sub(i * b).min(b);
            per_rank[r].0.extend_from_slice(&x[next * D..(next + rows) * D]);
            per_rank[r].1.extend_from_slice(&y[next..next + rows]);
            next += rows;
        }
    }
    assert_eq!(next, total);
    let opt = "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n";
    let run_one = |name: &str, ranks: usize, path: &str, batch: usize| {
        let dir = scratch(name);
        for (r, (xr, yr)) in per_rank.iter().enumerate() {
            write_classes(&dir.join(format!("d-{r}.h5")), xr, D, yr);
        }
        write_classes(&dir.join("all.h5"), &x, D, &y);
        job(&dir, &LAYERS, path, None, opt);
        let bs = format!("training.batch_size={batch}");
        let sets = [&bs as &str, "training.epochs=2", "data.shuffle=false", "model.activation=tanh"];
        let run = train(&dir, ranks, &sets);
        assert!(run.ok(), "{name}: training failed\n{}", run.all());
        for (rows, _, _) in rows_used(&run.stderr, 2) {
            assert_eq!(rows, total, "{name}\n{}", run.all());
        }
        let w = dir.join("out/weights.h5");
        (0..LAYERS.len() - 1)
            .flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")])
            .flat_map(|t| read_f32(&w, &t))
            .collect::<Vec<f32>>()
    };
    let one = run_one(&format!("rows-eq-{tag}-1"), 1, "all.h5", n * b);
    let many = run_one(&format!("rows-eq-{tag}-{n}"), n, "d-{rank}.h5", b);
    let diff = one.iter().zip(&many).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "{tag}: {n} ranks with shares {shares:?} differ from 1 rank by {diff}");
    assert!(one.iter().any(|v| v.abs() > 0.0));
}

#[test]
fn n_ranks_equal_one_rank_with_uneven_files() {
    let _g = mpi_lock();
    // Batch larger than every share: one step per epoch uses all 11 rows (7 + 3 + 1).
    n_ranks_equal_one_rank("one-step", &[7, 3, 1], 8);
    // 12 + 12 + 7 rows per epoch: the last step short on every rank (4, 2 and 1 rows).
    n_ranks_equal_one_rank("short", &[12, 10, 9], 4);
    // 12 + 12 + 2: in the last step rank 0 has 2 rows, ranks 1 and 2 none.
    n_ranks_equal_one_rank("empty", &[10, 8, 8], 4);
}

/// Resuming mid-epoch with uneven files (short and empty batches on some ranks) still gives
/// bit-identical weights: the loader replays each rank's order from (seed, epoch, rank).
#[test]
fn resume_mid_epoch_with_uneven_files_is_exact() {
    let _g = mpi_lock();
    let sets = ["training.batch_size=16", "training.epochs=3", "checkpoint.every_steps=3", "data.shuffle_block=8"];
    let weights = |dir: &Path| -> Vec<f32> {
        (0..LAYERS.len() - 1)
            .flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")])
            .flat_map(|t| read_f32(&dir.join("out/weights.h5"), &t))
            .collect()
    };
    let setup = |name: &str| {
        let dir = scratch(name);
        write_files(&dir, &[70, 50, 33], 3);
        job(&dir, &LAYERS, "d-{rank}.h5", None, "[optimizer]\nkind = \"adam\"\nlr = 0.01\n");
        dir
    };
    let mut args = vec!["train", "job.toml"];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let clean = setup("rows-resume-clean");
    let run = mpirun(3, &args, &clean, 120);
    assert!(run.ok(), "{}", run.all());
    // 5 steps per epoch. Killed at step 11, resumed from step 9 (epoch 2, after 4 steps: ranks
    // 1 and 2 have only empty batches left); killed at 14, resumed from 12 (epoch 3 after 2
    // steps: rank 2's short batch of 1 row is next).
    for (kill_at, ckpt) in [(11, 9), (14, 12)] {
        let dir = setup(&format!("rows-resume-{kill_at}"));
        let spec = format!("1:{kill_at}:kill");
        let killed = mpirun_env(3, &[("HVTRAIN_INJECT_FAULT", &spec)], &args, &dir, 60);
        assert!(!killed.ok(), "{}", killed.all());
        let mut resume = args.clone();
        resume.extend(["--resume", "auto"]);
        let resumed = mpirun(3, &resume, &dir, 120);
        assert!(resumed.ok(), "{}", resumed.all());
        assert!(resumed.stderr.contains(&format!("at step {ckpt} ")), "resumed from step {ckpt}?\n{}", resumed.all());
        assert_eq!(weights(&clean), weights(&dir), "killed at step {kill_at}, resumed: weights differ");
        assert_eq!(metrics(&clean).last().unwrap()["samples"], 153);
    }
}
