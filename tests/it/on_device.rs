//! `data.on_device` under a real `mpirun` with real HDF5 files: the training rows kept in the
//! backend's memory and each batch gathered there by index train to the same weights, bit for
//! bit, as batches copied from host memory (the CPU backend's memory stands in for a GPU's:
//! the same `Stepper` path, the same `gather_rows` contract the GPU selftest checks), with a
//! shuffled order, a short last batch and normalization. `auto` keeps host
//! copies on the CPU and says so; `on` with micro-batches is refused with the key named.
//! Broken on purpose (the gathered index off by one row) the weights differ.

use crate::common;
use common::*;

const D: usize = 7;
const K: usize = 3;
const LAYERS: [usize; 3] = [D, 11, K];

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(203, D, K, 4); // 203 rows: a short last batch on 2 ranks
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", None, "[optimizer]\nkind = \"adam\"\nlr = 0.01\n");
    dir
}

fn train(dir: &std::path::Path, out: &str, sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    let base = ["training.epochs=3", "training.batch_size=16", "data.normalize=\"standard\"", "data.shuffle_block=8"];
    train_weights(dir, out, 2, LAYERS.len() - 1, &[], &base, sets)
}

#[test]
fn rows_on_the_device_train_as_host_copies() {
    let _g = mpi_lock();
    let dir = setup("on-device");
    let (host, log) = train(&dir, "off", &["data.on_device=\"off\""]);
    assert!(log.contains("data: each batch copied from host memory (data.on_device = \"off\")"), "{log}");
    let (dev, log) = train(&dir, "on", &["data.on_device=\"on\""]);
    assert!(log.contains("data: the 203 training rows") && log.contains("gathered there by index"), "{log}");
    assert_eq!(dev, host, "resident rows trained to other weights");
    // auto on the CPU: host copies, and the reason.
    let (auto, log) = train(&dir, "auto", &[]);
    assert!(
        log.contains("data: each batch copied from host memory (the CPU backend reads host memory in place)"),
        "{log}"
    );
    assert_eq!(auto, host);
}

#[test]
fn on_with_micro_batches_is_refused_with_the_key() {
    let _g = mpi_lock();
    let dir = setup("on-device-micro");
    let run = mpirun(
        2,
        &["train", "job.toml", "--set", "data.on_device=\"on\"", "--set", "parallel.micro_batches=2"],
        &dir,
        60,
    );
    assert!(!run.ok(), "{}", run.all());
    let all = run.all();
    assert!(all.contains("data.on_device") && all.contains("micro-batches"), "{all}");
}
