//! Bucket order and overlap never change the result: for every combination of
//! {backward, forward} bucket order × {overlap on, off} × {one bucket, one bucket per tensor,
//! a small first bucket} × {2, 3 ranks}, the weights after training are bit-identical to the
//! backward-order, overlap-off run of the same ranks and buckets. (Forward order with overlap
//! on returns buckets last-index-first; an optimizer that assumed index order read buckets
//! still in flight, and trained wrongly.)
//!
//! One exception, and it is MPI's, not ours: with a small first bucket, forward order forms
//! *other* buckets than backward order (the small one sits at the other end of the arena),
//! so `MPI_Allreduce` gets other message sizes. Open MPI picks its algorithm, and with it
//! the order in which three ranks' values are added, by message size, so on 3 ranks those
//! runs agree with the backward run to float rounding (asserted to 1e-6), and bit for bit
//! with the forward-order, overlap-off run. On 2 ranks a sum of two values has one order,
//! so every run is bit-identical.

use crate::common;
use common::*;
use std::path::Path;

const D: usize = 12;
const K: usize = 5;
const LAYERS: [usize; 5] = [D, 40, 30, 20, K];

fn weights(dir: &Path) -> Vec<f32> {
    let w = dir.join("out/weights.h5");
    (0..LAYERS.len() - 1)
        .flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")])
        .flat_map(|t| read_f32(&w, &t))
        .collect()
}

fn bits(w: &[f32]) -> Vec<u32> {
    w.iter().map(|v| v.to_bits()).collect()
}

fn train(name: &str, ranks: usize, order: &str, overlap: bool, buckets: &str) -> (Vec<f32>, String) {
    let dir = scratch(name);
    let (x, y) = synthetic(400, D, K, 3);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let extra = format!(
        "[optimizer]\nkind = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n[distribution]\nbucket_order = \"{order}\"\noverlap = {overlap}\n{buckets}\n"
    );
    job(&dir, &LAYERS, "d.h5", None, &extra);
    let run = mpirun(
        ranks,
        &["train", "job.toml", "--set", "training.epochs=3", "--set", "training.batch_size=8"],
        &dir,
        120,
    );
    assert!(run.ok(), "{name}: training failed\n{}", run.all());
    (weights(&dir), run.stderr)
}

#[test]
fn every_bucket_order_and_overlap_gives_identical_weights() {
    let _g = mpi_lock();
    let configs = [
        ("one", "fusion_threshold_mb = 64.0", 1),
        ("each", "fusion_threshold_mb = 0.0", 8),
        ("small-first", "fusion_threshold_mb = 0.005\nfirst_bucket_mb = 0.0001", 0),
    ];
    for ranks in [2, 3] {
        for (tag, buckets, want) in configs {
            let (reference, log) = train(&format!("bo-{ranks}-{tag}-ref"), ranks, "backward", false, buckets);
            let n: usize = log
                .lines()
                .find_map(|l| l.split(" fusion bucket(s)").next().filter(|_| l.contains("fusion bucket(s)")))
                .and_then(|s| s.rsplit(' ').next())
                .and_then(|s| s.parse().ok())
                .expect("the start-up log names the bucket count");
            if want > 0 {
                assert_eq!(n, want, "{tag}: bucket count");
            } else {
                assert!(n > 2, "{tag}: expected several buckets, got {n}");
            }
            let mut forward_off = None;
            for (order, overlap) in [("backward", true), ("forward", false), ("forward", true)] {
                let (w, _) = train(&format!("bo-{ranks}-{tag}-{order}-{overlap}"), ranks, order, overlap, buckets);
                let what = format!("{ranks} ranks, {tag} buckets, order {order}, overlap {overlap}");
                let other_partition = ranks > 2 && order == "forward" && tag == "small-first";
                if !other_partition {
                    assert!(bits(&w) == bits(&reference), "{what}: weights differ from backward/overlap-off");
                    continue;
                }
                let worst = w.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(worst < 1e-6, "{what}: weights differ from backward/overlap-off by {worst}");
                match &forward_off {
                    None => forward_off = Some(w),
                    Some(f) => assert!(bits(&w) == bits(f), "{what}: weights differ from forward/overlap-off"),
                }
            }
        }
    }
}
