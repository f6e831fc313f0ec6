//! `distribution.gpu_allreduce` where there is no GPU (the choice itself is unit-tested in
//! src/train/gpu_path.rs on every combination of facts): CPU ranks train the same weights
//! whatever it says (the key is about GPU buckets; a job file serves CPU and GPU nodes alike)
//! and log no GPU path; a value it does not know is an error naming the key and the values;
//! HVTRAIN_GPU_ALLREDUCE sets it as the other HVTRAIN_* variables do.

use crate::common;
use common::*;

#[test]
fn cpu_ranks_ignore_it_and_a_bad_value_is_refused() {
    let _g = mpi_lock();
    let dir = scratch("gpu-allreduce");
    let (x, y) = synthetic(400, 6, 3, 7);
    write_classes(&dir.join("d.h5"), &x, 6, &y);
    job(&dir, &[6, 16, 3], "d.h5", None, "");
    let (host, log) = train_weights(&dir, "host", 2, 2, &[], &[], &["distribution.gpu_allreduce=\"host\""]);
    assert!(!log.contains("gradient buckets:"), "a CPU run logged a GPU path\n{log}");
    for v in ["nccl", "mpi", "auto"] {
        let (w, log) = train_weights(&dir, v, 2, 2, &[], &[], &[&format!("distribution.gpu_allreduce=\"{v}\"")]);
        assert_eq!(w, host, "{v}: CPU ranks trained other weights\n{log}");
    }
    let (w, _) = train_weights(&dir, "env", 2, 2, &[("HVTRAIN_GPU_ALLREDUCE", "nccl")], &[], &[]);
    assert_eq!(w, host);
    let run = mpirun(2, &["train", "job.toml", "--set", "distribution.gpu_allreduce=\"nvlink\""], &dir, 60);
    let all = run.all();
    assert!(!run.ok() && all.contains("distribution.gpu_allreduce") && all.contains("nvlink"), "{all}");
    assert!(all.contains("auto") && all.contains("nccl") && all.contains("host"), "{all}");
}
