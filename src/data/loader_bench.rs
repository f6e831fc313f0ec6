//! The loader's throughput by stored type of `x`: how much the conversion to float32 (and
//! `data.x_scale`) costs, measured through the real path (`Shard::open`, `Loader` thread,
//! block-shuffled windows, batches handed to a consumer that only gives them back).
//! Not a test: run by `bench/loader.sh`, which records the result in bench/results/.
//!
//!   cargo test --release --bin hvtrain loader_throughput -- --ignored --nocapture
//!
//! HVTRAIN_LOADER_BENCH_ROWS (60000), _FEATURES (784), _ROUNDS (3), _EPOCHS (3 per round, the
//! first of each discarded as warm-up) size it; _DIR (the system temp dir) holds the files;
//! _RANKS (1) measures rank 0 of that many (its 128 rows of each global batch of 128 × RANKS).
//!
//! Must not: run in the ordinary test suite (it is an ignored test run by `bench/loader.sh`).

use super::loader::{Loader, LoaderCfg, Schedule};
use super::shard::{Expect, Shard};
use crate::config::{DataCfg, LossKind};
use std::path::Path;
use std::time::Instant;

fn env(name: &str, default: usize) -> usize {
    std::env::var(format!("HVTRAIN_LOADER_BENCH_{name}")).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn write<T: hdf5::H5Type>(path: &Path, x: Vec<T>, y: &[i32], n: usize, d: usize) {
    let f = hdf5::File::create(path).unwrap();
    f.new_dataset_builder().with_data(&ndarray::Array2::from_shape_vec((n, d), x).unwrap()).create("x").unwrap();
    f.new_dataset_builder().with_data(ndarray::ArrayView1::from(y)).create("y").unwrap();
}

/// Seconds per epoch of the loader over `path`, for `epochs` epochs.
fn epochs_s(path: &Path, extra: &str, n: usize, d: usize, epochs: usize, ranks: usize) -> Vec<f64> {
    let cfg: DataCfg = toml::from_str(&format!("train = {:?}\n{extra}", path.display().to_string())).unwrap();
    let want = Expect { inputs: d, outputs: 10, loss: LossKind::SoftmaxCrossEntropy };
    let shard =
        Shard::open(&cfg, "data.train", &cfg.train, 0, 1, want, &crate::data::classes::Reference::Unknown).unwrap();
    let batch = 128;
    let sched = Schedule::new(n, batch * ranks, ranks, false);
    let steps = sched.steps;
    let lc = LoaderCfg {
        batch,
        ranks,
        steps,
        epochs,
        shuffle: true,
        block: cfg.shuffle_block,
        window: cfg.shuffle_window,
        seed: 1,
        rank: 0,
        depth: 4,
        cache_bytes: 0, // HDF5 and the conversion every epoch: what this measures
        start_epoch: 0,
        start_batch: 0,
        ids_only: false,
    };
    let loader = Loader::spawn(shard, lc);
    let mut times = Vec::new();
    for _ in 0..epochs {
        let t = Instant::now();
        let mut rows = 0;
        for _ in 0..steps {
            let b = loader.next().unwrap();
            rows += b.rows;
            std::hint::black_box(&b.x);
            loader.give_back(b);
        }
        assert_eq!(rows, sched.epoch_rows(0));
        times.push(t.elapsed().as_secs_f64());
    }
    times
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[test]
#[ignore = "a benchmark: bench/loader.sh"]
fn loader_throughput() {
    let (n, d) = (env("ROWS", 60_000), env("FEATURES", 784));
    let (rounds, epochs, ranks) = (env("ROUNDS", 3), env("EPOCHS", 3).max(2), env("RANKS", 1).max(1));
    let dir = std::env::var("HVTRAIN_LOADER_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir())
        .join(format!("hvtrain-loader-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pixels: Vec<u8> = (0..n * d).map(|i| ((i as u64).wrapping_mul(2654435761) >> 7) as u8).collect();
    let y: Vec<i32> = (0..n as i32).map(|i| i % 10).collect();
    write(&dir.join("u8.h5"), pixels.clone(), &y, n, d);
    write(&dir.join("f32.h5"), pixels.iter().map(|&v| v as f32 / 255.0).collect(), &y, n, d);
    write(&dir.join("f64.h5"), pixels.iter().map(|&v| v as f64 / 255.0).collect(), &y, n, d);
    drop(pixels);
    let scale = "x_scale = 0.00392156862745098";
    let cases: [(&str, &str, &str, usize); 5] = [
        ("float32", "f32.h5", "", 4),
        ("uint8", "u8.h5", "", 1),
        ("uint8, x_scale = 1/255", "u8.h5", scale, 1),
        ("float32, x_scale = 1/255", "f32.h5", scale, 4),
        ("float64", "f64.h5", "", 8),
    ];
    let mut per_case: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    // Rounds interleave the cases, so that drift in the machine's speed hits all alike.
    for _ in 0..rounds {
        for (i, (_, file, extra, _)) in cases.iter().enumerate() {
            let t = epochs_s(&dir.join(file), extra, n, d, epochs, ranks);
            per_case[i].extend_from_slice(&t[1..]);
        }
    }
    println!("rows {n}, features {d}, rank 0 of {ranks}, batch 128 per rank, shuffle_block 256, shuffle_window 4096, {rounds} rounds x {} timed epochs per case (after 1 warm-up epoch each), files in the page cache", epochs - 1);
    println!("| x stored as | bytes read per row | epoch s: median (min..max) | rows/s delivered to rank 0 (≈ rows / ranks per epoch time, median) | MB/s of float32 delivered |");
    println!("|---|---|---|---|---|");
    for (i, (name, _, _, bytes)) in cases.iter().enumerate() {
        let t = &per_case[i];
        let (lo, hi) = t.iter().fold((f64::MAX, 0.0f64), |(a, b), &v| (a.min(v), b.max(v)));
        let m = median(t.clone());
        println!(
            "| {name} | {} | {m:.3} ({lo:.3}..{hi:.3}) | {:.0} | {:.0} |",
            bytes * d,
            n.div_ceil(ranks) as f64 / m,
            (n.div_ceil(ranks) * d * 4) as f64 / m / 1e6
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
