//! Buffers longer than one MPI call may carry (2^31 − 1 elements: MPI's counts are `int`s)
//! travel in pieces. With `HVTRAIN_MPI_PIECE=5` every buffer of this small model crosses the
//! piece many times over, so each path that sends floats is run in pieces under a real
//! `mpirun` and must train to the weights of the same run in one piece per call: the
//! all-reduce, the reduce-scatter and all-gather of sharded state, the fp16 ring's exchanges,
//! Adasum's fold and pair exchanges, the hierarchical reduce and broadcast, the tensor group's
//! sums and gathers (weights.h5 a layer at a time; the checkpoint in parts), the pipeline's
//! messages. Our own rings and folds add in the same order
//! whatever the pieces (the same bits); MPI's collectives may pick another algorithm for a
//! smaller message, which on 3 ranks may add in another order (float tolerance).

use crate::common;
use common::*;
use std::path::Path;

const D: usize = 8;
const LAYERS: [usize; 4] = [D, 13, 11, 3];
const ROWS: usize = 240;
const GLOBAL: usize = 12;
const TOL: f32 = 2e-5;
const PIECE: (&str, &str) = ("HVTRAIN_MPI_PIECE", "5");

fn train(dir: &Path, out: &str, ranks: usize, env: &[(&str, &str)], sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    let b = format!("training.batch_size={}", GLOBAL / ranks);
    let base = [
        b.as_str(),
        "training.epochs=2",
        "data.shuffle=false",
        "model.activation=tanh",
        "optimizer.kind='adam'",
        "optimizer.lr=0.01",
    ];
    train_weights(dir, out, ranks, LAYERS.len() - 1, env, &base, sets)
}

/// The run in pieces of 5 against the same run without; returns the largest difference.
fn compare(tag: &str, ranks: usize, env: &[(&str, &str)], sets: &[&str]) -> f32 {
    let dir = scratch(&format!("pieces-{tag}"));
    let (x, y) = synthetic(ROWS, D, 3, 51);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", None, "");
    let (whole, _) = train(&dir, "whole", ranks, env, sets);
    let env: Vec<(&str, &str)> = env.iter().copied().chain([PIECE]).collect();
    let (pieces, log) = train(&dir, "pieces", ranks, &env, sets);
    assert!(log.contains("MPI calls carry at most 5 elements each"), "{tag}: the pieces were not asked for\n{log}");
    let d = max_diff(&whole, &pieces);
    eprintln!("{tag} on {ranks} ranks in pieces of 5: weights differ by {d:e}");
    d
}

#[test]
fn every_path_trains_the_same_in_pieces() {
    let _g = mpi_lock();
    // Our own arithmetic over MPI's point-to-point messages: the same bits.
    let exact: [(&str, usize, &[(&str, &str)], &[&str]); 4] = [
        ("fp16-ring", 3, &[], &["distribution.compression='fp16'", "distribution.shard='optimizer'"]),
        ("adasum", 3, &[], &["distribution.reduction='adasum'"]),
        ("pipeline", 2, &[], &["parallel.pipeline=2", "parallel.micro_batches=2"]),
        ("tensor", 2, &[], &["parallel.tensor=2"]),
    ];
    for (tag, ranks, env, sets) in exact {
        assert_eq!(compare(tag, ranks, env, sets), 0.0, "{tag}: pieces changed the training");
    }
    // MPI's own sums, which may add 3 ranks' numbers in another order for smaller messages.
    let close: [(&str, usize, &[(&str, &str)], &[&str]); 4] = [
        ("allreduce", 3, &[], &["distribution.fusion_threshold_mb=0.0005"]),
        ("shard-gradients-checkpoint", 3, &[], &["distribution.shard='gradients'", "checkpoint.every_steps=7"]),
        ("hierarchical", 3, &[("HVTRAIN_NODE_SIZE", "2")], &["distribution.hierarchical=true"]),
        ("shard-mpi-collectives", 3, &[("HVTRAIN_SHARD_COLLECTIVES", "mpi")], &["distribution.shard='gradients'"]),
    ];
    for (tag, ranks, env, sets) in close {
        let d = compare(tag, ranks, env, sets);
        assert!(d <= TOL, "{tag}: pieces changed the training by {d}");
    }
}

/// Tensor parallelism (2 × 2 data ranks) with its sums and gathers in pieces trains as in one
/// piece: the checkpoint (written in parts by replica 0's two ranks, each its shard: no rank
/// gathers the whole model for it) holds the same optimizer state, and weights.h5, each
/// layer's slices gathered to rank 0 in pieces, the same weights.
#[test]
fn a_tensor_parallel_run_in_pieces_checkpoints_and_gathers_the_same() {
    let _g = mpi_lock();
    let dir = scratch("pieces-checkpoint");
    let (x, y) = synthetic(ROWS, D, 3, 52);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &LAYERS, "d.h5", None, "");
    let sets = ["distribution.shard='none'", "parallel.tensor=2", "checkpoint.every_steps=20", "checkpoint.keep=5"];
    train(&dir, "whole", 4, &[], &sets);
    let (_, log) = train(&dir, "pieces", 4, &[PIECE], &sets);
    let parts = checkpoint_parts(&dir.join("pieces"));
    assert!(
        parts.iter().any(|p| p.starts_with("ckpt-step000000020.") && p.ends_with("part1of2.h5")),
        "{parts:?}\n{log}"
    );
    assert!(log.contains("checkpoint parts written by 2 ranks at once"), "{log}");
    let ck = |out: &str| dir.join(out).join("ckpt-step000000020.h5");
    for t in ["params", "optimizer/m", "optimizer/v"] {
        let (a, b) = (ckpt_stored(&ck("whole"), t, LAYERS.len() - 1), ckpt_stored(&ck("pieces"), t, LAYERS.len() - 1));
        assert!(a.iter().any(|&v| v != 0.0), "{t} is all zeros");
        assert_eq!(a, b, "{t} differs in pieces");
    }
    let w = |out: &str| layer_tensors(&dir.join(out).join("weights.h5"), LAYERS.len() - 1);
    assert_eq!(max_diff(&w("whole"), &w("pieces")), 0.0, "weights.h5 gathered in pieces differs");
}
