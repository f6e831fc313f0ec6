//! The hierarchical all-reduce (`distribution.hierarchical = true`) under a real `mpirun`, on
//! this one machine with the nodes drawn by `HVTRAIN_NODE_SIZE` (runs of k consecutive ranks;
//! `tests/multihost.rs` runs it across network-namespace hosts, nodes by shared memory):
//!
//! - 4 ranks as 2 nodes × 2 and 3 ranks as 2 + 1 train to the flat all-reduce's weights
//!   within float32 rounding (the sum is taken in another order: (g0 + g1) + (g2 + g3));
//!   with every step's parameter check on, so the ranks agree bit for bit throughout;
//! - the log names the shape; `HVTRAIN_HIERARCHICAL_ALLREDUCE=1` turns it on as Horovod's
//!   variable does. (Broken on purpose, the leaders' all-reduce left out, each node trains on
//!   its own gradients: the every-step parameter check ends the job and this test fails.)

use crate::common;
use common::*;
use std::path::Path;

const D: usize = 6;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 16, 12, K];

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(480, D, K, 5);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let extra = "[optimizer]\nkind = \"sgd\"\nlr = 0.2\nmomentum = 0.9\n[distribution]\nfusion_threshold_mb = 0.001\n";
    job(&dir, &LAYERS, "d.h5", None, extra);
    dir
}

fn train(dir: &Path, out: &str, ranks: usize, env: &[(&str, &str)], sets: &[&str]) -> (Vec<Vec<f32>>, String) {
    let base = ["training.epochs=2", "training.batch_size=8", "distribution.check_every=1"];
    train_weights(dir, out, ranks, LAYERS.len() - 1, env, &base, sets)
}

#[test]
fn hierarchical_matches_flat() {
    let _g = mpi_lock();
    let dir = setup("hierarchical");
    let nodes = [("HVTRAIN_NODE_SIZE", "2")];
    for (ranks, shape) in [(4usize, "2 x 2 rank(s)"), (3, "[2, 1] rank(s)")] {
        let (flat, _) = train(&dir, &format!("flat{ranks}"), ranks, &nodes, &[]);
        let (hier, log) = train(&dir, &format!("hier{ranks}"), ranks, &nodes, &["distribution.hierarchical=true"]);
        assert!(log.contains(&format!("hierarchical all-reduce: {shape}")), "{ranks} ranks: {log}");
        let d = max_diff(&flat, &hier);
        let bits = flat.iter().flatten().zip(hier.iter().flatten()).all(|(a, b)| a.to_bits() == b.to_bits());
        eprintln!("{ranks} ranks: hierarchical vs flat weights {d:e} apart (bit-identical: {bits})");
        assert!(d < 2e-5, "{ranks} ranks: hierarchical weights {d} from the flat all-reduce's");
    }
    // Horovod's way to turn it on, as an environment variable.
    let env = [("HVTRAIN_NODE_SIZE", "2"), ("HVTRAIN_HIERARCHICAL_ALLREDUCE", "1")];
    let (_, log) = train(&dir, "env", 4, &env, &[]);
    assert!(log.contains("hierarchical all-reduce: 2 x 2"), "{log}");
}
