//! No silent data loss, under a real `mpirun`: every training row is used exactly once per
//! epoch whatever the file sizes (a short last step, ranks with a short or empty batch in
//! it), the gradient average is weighted by the rows each rank really used (N ranks = 1 rank
//! on the same rows, shuffled or not), any number of `{rank}` files is read whole on any
//! number of ranks, and `data.drop_last = true` drops the last rows of the epoch's order
//! with a warning.
//!
//! Which rows were used comes from the loader's debug line (one per rank and epoch): a count
//! and an order-independent digest of (file number, row in file), compared with the digest
//! of every row of every file.

use crate::common;
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

/// 3 ranks, files of 70, 50 and 33 rows, batch 16 (global 48): 4 steps, the last of 9 rows
/// (rank 0 takes them; ranks 1 and 2 have an empty batch).
#[test]
fn every_row_used_once_per_epoch_with_uneven_files() {
    let _g = mpi_lock();
    check_every_row_once("rows-uneven", &[70, 50, 33], 3, 16, 4);
}

/// 4 files on 2 ranks, and 2 files on 3: every rank reads from every file, every row once.
#[test]
fn more_or_fewer_files_than_ranks_are_all_read() {
    let _g = mpi_lock();
    // 30 + 20 + 25 + 11 = 86 rows, global batch 16: 6 steps, the last of 6 rows.
    check_every_row_once("rows-4-on-2", &[30, 20, 25, 11], 2, 8, 6);
    // 30 + 20 = 50 rows, global batch 12: 5 steps, the last of 2 rows.
    check_every_row_once("rows-2-on-3", &[30, 20], 3, 4, 5);
}

/// `data.drop_last = true`: only full global batches (the epoch's last rows left out), and a
/// warning saying what is dropped.
#[test]
fn drop_last_keeps_the_old_step_count_and_warns() {
    let _g = mpi_lock();
    let dir = scratch("rows-drop-last");
    write_files(&dir, &[70, 50], 3);
    job(&dir, &LAYERS, "d-{rank}.h5", None, "");
    let run = train(&dir, 2, &["training.batch_size=16", "training.epochs=2", "data.drop_last=true"]);
    assert!(run.ok(), "{}", run.all());
    // 120 rows, global batch 32: 3 steps, 96 of 120 used, 24 dropped.
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

/// N ranks give the weights of 1 rank with N times the batch, on the same `{rank}` files,
/// to float tolerance: each step's rows are the same whatever the rank count, and the
/// average is weighted by the rows each rank really used (short and empty batches in the
/// last step).
fn n_ranks_equal_one_rank(tag: &str, sizes: &[usize], ranks: usize, b: usize, shuffle: bool) {
    let total: usize = sizes.iter().sum();
    let opt = "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n";
    let run_one = |name: &str, n: usize, batch: usize| {
        let dir = scratch(name);
        write_files(&dir, sizes, 21);
        job(&dir, &LAYERS, "d-{rank}.h5", None, opt);
        let bs = format!("training.batch_size={batch}");
        let sh = format!("data.shuffle={shuffle}");
        let sets = [&bs as &str, &sh, "training.epochs=2", "model.activation=tanh", "data.shuffle_block=4"];
        let run = train(&dir, n, &sets);
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
    let one = run_one(&format!("rows-eq-{tag}-1"), 1, ranks * b);
    let many = run_one(&format!("rows-eq-{tag}-{ranks}"), ranks, b);
    let diff = one.iter().zip(&many).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "{tag}: {ranks} ranks on files {sizes:?} differ from 1 rank by {diff}");
    assert!(one.iter().any(|v| v.abs() > 0.0));
}

#[test]
fn n_ranks_equal_one_rank_with_uneven_files() {
    let _g = mpi_lock();
    // Batch larger than the data: one step per epoch uses all 11 rows (8 + 3 + 0 on 3 ranks).
    n_ranks_equal_one_rank("one-step", &[7, 3, 1], 3, 8, false);
    // 31 rows, global batch 12: the last step has 7 rows (4 + 3 + 0).
    n_ranks_equal_one_rank("short", &[12, 10, 9], 3, 4, true);
    // 26 rows, global batch 12: the last step has 2 rows (2 + 0 + 0).
    n_ranks_equal_one_rank("empty", &[10, 8, 8], 3, 4, true);
}

/// Resuming mid-epoch with uneven files (short and empty batches on some ranks) on the same
/// ranks gives bit-identical weights: the loader replays the epoch's order from (seed, epoch).
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
    // 153 rows, global batch 48: 4 steps per epoch, the last of 9 rows (rank 0 only). Killed
    // at step 8, resumed from step 6 (epoch 2 after 2 steps); killed at 11, resumed from 9
    // (epoch 3 after 1 step).
    for (kill_at, ckpt) in [(8, 6), (11, 9)] {
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

/// Rows read from the files per epoch, added over the ranks' loader lines.
fn rows_read(stderr: &str, epochs: usize) -> Vec<usize> {
    let mut out = vec![0; epochs];
    for line in stderr.lines().filter(|l| l.contains("loader: epoch ")) {
        let rest = line.split("loader: epoch ").nth(1).unwrap();
        let epoch: usize = rest.split(':').next().unwrap().trim().parse().unwrap();
        let n: usize = rest.split("read ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        out[epoch - 1] += n;
    }
    out
}

/// `data.cache_mb`: rows that fit are read from the files once (the first epoch), later
/// epochs from memory, and training is bit for bit what it is reading every epoch
/// (`data.cache_mb = 0`), on 1 rank and on 2, shuffled, over uneven `{rank}` files.
#[test]
fn the_row_cache_reads_once_and_changes_nothing() {
    let _g = mpi_lock();
    let sizes = [70, 50, 33];
    let total: usize = sizes.iter().sum();
    for ranks in [1, 2] {
        let run_with = |cache: &str| {
            let dir = scratch(&format!("rows-cache-{ranks}-{cache}"));
            write_files(&dir, &sizes, 9);
            job(&dir, &LAYERS, "d-{rank}.h5", None, "");
            let c = format!("data.cache_mb={cache}");
            let sets = [
                &c as &str,
                "training.batch_size=8",
                "training.epochs=3",
                "data.shuffle_block=8",
                "data.shuffle_window=16",
            ];
            let run = train(&dir, ranks, &sets);
            assert!(run.ok(), "cache_mb {cache}, {ranks} ranks\n{}", run.all());
            let w = dir.join("out/weights.h5");
            let weights: Vec<f32> = (0..LAYERS.len() - 1)
                .flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")])
                .flat_map(|t| read_f32(&w, &t))
                .collect();
            (rows_read(&run.stderr, 3), weights, run)
        };
        let (read_off, w_off, run_off) = run_with("0");
        let (read_on, w_on, run_on) = run_with("64");
        // Without the cache every epoch reads at least each row once (spans of blocks).
        assert!(read_off.iter().all(|&r| r >= total), "cache off, {ranks} ranks: {read_off:?}\n{}", run_off.all());
        if ranks == 1 {
            // One rank needs every row in the first epoch: nothing is left to read after it.
            assert_eq!(read_on, [total, 0, 0], "cache on, 1 rank\n{}", run_on.all());
        } else {
            // Each rank reads each row at most once, whatever the epochs.
            let sum: usize = read_on.iter().sum();
            assert!(read_on[0] >= total && sum <= ranks * total, "cache on, 2 ranks: {read_on:?}\n{}", run_on.all());
        }
        assert_eq!(w_on, w_off, "{ranks} ranks: the cache changed the weights");
    }
}
