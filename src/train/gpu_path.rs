//! Which way GPU gradient buckets travel between ranks (`distribution.gpu_allreduce`): NCCL
//! (GPU to GPU, as Horovod's `HOROVOD_GPU_OPERATIONS=NCCL`), device pointers to a CUDA-aware
//! MPI, or pinned host memory and MPI (the host path). Every rank gathers every rank's facts
//! (host, GPU, whether NCCL loads, whether MPI is CUDA-aware) and decides the same way from
//! them (`choose`, a pure function); rank 0 logs the choice and why.
//!
//! `auto` takes NCCL (where allowed to: `Job::nccl_in_auto`; on for gradient buckets since the
//! H200 run of 2026-11-29 passed them, opt-in for tensor and pipeline exchanges until a run on
//! two or more GPUs has) when the gradients are on GPUs, there is more than one data-parallel
//! rank, no two ranks of a node share a GPU (NCCL refuses that) and NCCL loads on every rank;
//! else the host path, saying which condition failed. With `hierarchical = true` NCCL sums in
//! each node and MPI among the nodes. `nccl` and `mpi` asked where they cannot
//! work are errors that say why and what to set instead.
//!
//! Must not: move a gradient (the reducers do).

use crate::config::{Compression, GpuAllreduce, Reduction};
use crate::parallel::Channel;
use serde::{Deserialize, Serialize};

/// The way buckets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Nccl,
    /// Device pointers to a CUDA-aware MPI.
    Mpi,
    /// Pinned host memory, then MPI (also every CPU rank).
    Host,
}

/// One rank's facts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Facts {
    pub host: String,
    /// The GPU this rank trains on (None: the CPU).
    pub gpu: Option<usize>,
    /// NCCL's version and file, or why it does not load (asked only of GPU ranks).
    pub nccl: Result<String, String>,
    /// `MPIX_Query_cuda_support()` where the library has it.
    pub cuda_aware: Option<bool>,
}

/// What every rank's facts say, and the job's keys the choice depends on.
pub struct Job {
    pub asked: GpuAllreduce,
    /// Whether `auto` may take NCCL: for gradient buckets unless HVTRAIN_NCCL_AUTO=0 (the GPU
    /// check's phase b3 passed on an H200, 2026-11-29); for tensor and pipeline exchanges only
    /// with HVTRAIN_NCCL_AUTO=1 until phase m (two or more GPUs) has passed them.
    pub nccl_in_auto: bool,
    pub data_ranks: usize,
    pub compression: Compression,
    pub reduction: Reduction,
    pub hierarchical: bool,
}

/// The path, and the reason for the log; an error (the same on every rank) when the job asked
/// for one that cannot work here.
pub fn choose(job: &Job, all: &[Facts]) -> Result<(Path, String), String> {
    let first = &all[0];
    if all.iter().any(|f| f.gpu.is_none()) {
        return Ok((Path::Host, "the gradients are in host memory (CPU ranks)".into()));
    }
    if job.data_ranks == 1 && job.asked != GpuAllreduce::Nccl {
        // (`nccl` asked on one rank runs NCCL anyway: a one-rank communicator, the check's
        // proof that the library works, which must give the host path's weights.)
        return Ok((Path::Host, "one data-parallel rank: nothing to reduce between GPUs".into()));
    }
    let shared = shared_gpu(all);
    let nccl_fails = all.iter().enumerate().find_map(|(r, f)| f.nccl.as_ref().err().map(|e| format!("rank {r}: {e}")));
    // What NCCL's sums do not do (hierarchical they do: NCCL in the node, MPI among the
    // nodes; fp16/bf16 compression too: NCCL sums in that type); device pointers to MPI do
    // neither hierarchical nor compression (MPI_Allreduce sums float32).
    let special =
        (job.reduction == Reduction::Adasum).then_some("reduction = \"adasum\" combines tensor by tensor on the host");
    let levels = format!(
        "{}{}",
        match job.compression {
            Compression::None => "",
            Compression::Fp16 => ", fp16 on the wire (compression = \"fp16\")",
            Compression::Bf16 => ", bf16 on the wire (compression = \"bf16\")",
        },
        if job.hierarchical { ", NCCL in each node and MPI among the nodes (hierarchical = true)" } else { "" }
    );
    let set = "set distribution.gpu_allreduce = \"host\" (or \"auto\")";
    match job.asked {
        GpuAllreduce::Host => Ok((Path::Host, "distribution.gpu_allreduce = \"host\"".into())),
        GpuAllreduce::Nccl => {
            if let Some(s) = shared {
                return Err(format!("distribution.gpu_allreduce = \"nccl\", but {s}, and NCCL refuses two ranks on one GPU; give each rank its own GPU, or {set}"));
            }
            if let Some(e) = nccl_fails {
                return Err(format!("distribution.gpu_allreduce = \"nccl\", but NCCL does not load on {e}; or {set}"));
            }
            if let Some(s) = special {
                return Err(format!("distribution.gpu_allreduce = \"nccl\" sums whole buckets, but {s}; {set}"));
            }
            Ok((
                Path::Nccl,
                format!("distribution.gpu_allreduce = \"nccl\" ({}){levels}", first.nccl.as_ref().unwrap()),
            ))
        }
        GpuAllreduce::Mpi => {
            if let Some(r) = all.iter().position(|f| f.cuda_aware == Some(false)) {
                return Err(format!("distribution.gpu_allreduce = \"mpi\", but the MPI library on rank {r} says it is not CUDA-aware (MPIX_Query_cuda_support() = 0); {set}"));
            }
            let special = special
                .or(job.hierarchical.then_some("hierarchical = true sums in two MPI stages on the host"))
                .or((job.compression != Compression::None)
                    .then_some("compression packs to fp16/bf16 for the host ring"));
            if let Some(s) = special {
                return Err(format!("distribution.gpu_allreduce = \"mpi\" hands float32 device buffers to MPI_Allreduce, but {s}; {set}"));
            }
            let word = if all.iter().all(|f| f.cuda_aware == Some(true)) {
                "the library says it is CUDA-aware"
            } else {
                "taken on your word: the library cannot say whether it is CUDA-aware"
            };
            Ok((Path::Mpi, format!("distribution.gpu_allreduce = \"mpi\" ({word})")))
        }
        GpuAllreduce::Auto => {
            let why_not = if !job.nccl_in_auto {
                "auto leaves NCCL off here (HVTRAIN_NCCL_AUTO=0; for tensor and pipeline exchanges \
                 until a run on two or more GPUs has passed them); set distribution.gpu_allreduce = \
                 \"nccl\" (or HVTRAIN_NCCL_AUTO=1) to use it"
                    .to_string()
            } else if let Some(s) = shared {
                format!("{s} (NCCL refuses two ranks on one GPU)")
            } else if let Some(e) = nccl_fails {
                format!("NCCL does not load on {e}")
            } else if let Some(s) = special {
                s.to_string()
            } else {
                return Ok((
                    Path::Nccl,
                    format!(
                        "every rank has a GPU of its own and NCCL loads ({}){levels}",
                        first.nccl.as_ref().unwrap()
                    ),
                ));
            };
            // Then device pointers to an MPI that says (on every rank) it is CUDA-aware, where the
            // reduction is the plain float32 sum.
            let plain = special.is_none() && !job.hierarchical && job.compression == Compression::None;
            if plain && all.iter().all(|f| f.cuda_aware == Some(true)) {
                let why = format!("not NCCL: {why_not}; the MPI library is CUDA-aware, so device pointers go to it");
                return Ok((Path::Mpi, why));
            }
            Ok((Path::Host, format!("not NCCL: {why_not}")))
        }
    }
}

/// "ranks 0 and 1 on host a share GPU 0", for the first two ranks of a node on one GPU.
fn shared_gpu(all: &[Facts]) -> Option<String> {
    for (i, a) in all.iter().enumerate() {
        for (j, b) in all.iter().enumerate().skip(i + 1) {
            if let Some(gpu) = a.gpu.filter(|_| a.host == b.host && a.gpu == b.gpu) {
                return Some(format!("ranks {i} and {j} on {} share GPU {gpu}", a.host));
            }
        }
    }
    None
}

/// Every rank's facts over `chan` (collective), in rank order.
pub fn gather(chan: &Channel, mine: &Facts) -> Vec<Facts> {
    let bytes = serde_json::to_vec(mine).expect("facts serialize");
    chan.all_gather_bytes(&bytes).iter().map(|b| serde_json::from_slice(b).expect("facts from a peer")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(host: &str, g: usize) -> Facts {
        Facts { host: host.into(), gpu: Some(g), nccl: Ok("NCCL 2.27.3 (libnccl.so.2)".into()), cuda_aware: None }
    }

    fn job(asked: GpuAllreduce, ranks: usize) -> Job {
        Job {
            asked,
            nccl_in_auto: true,
            data_ranks: ranks,
            compression: Compression::None,
            reduction: Reduction::Average,
            hierarchical: false,
        }
    }

    /// Where NCCL is not allowed in `auto` (HVTRAIN_NCCL_AUTO=0, or model-parallel exchanges
    /// before a multi-GPU run), `auto` does not take it (it says how to).
    #[test]
    fn auto_leaves_nccl_off_where_not_allowed() {
        let eight: Vec<Facts> = (0..8).map(|g| gpu("n1", g)).collect();
        let j = Job { nccl_in_auto: false, ..job(GpuAllreduce::Auto, 8) };
        let (p, why) = choose(&j, &eight).unwrap();
        assert_eq!(p, Path::Host);
        assert!(why.contains("HVTRAIN_NCCL_AUTO=0") && why.contains("HVTRAIN_NCCL_AUTO=1"), "{why}");
        let j = Job { nccl_in_auto: false, ..job(GpuAllreduce::Nccl, 8) };
        assert_eq!(choose(&j, &eight).unwrap().0, Path::Nccl, "asked for, it is used");
        // Not NCCL, but every rank's MPI says it is CUDA-aware: device pointers to it.
        let aware: Vec<Facts> = eight.iter().map(|f| Facts { cuda_aware: Some(true), ..f.clone() }).collect();
        let j = Job { nccl_in_auto: false, ..job(GpuAllreduce::Auto, 8) };
        let (p, why) = choose(&j, &aware).unwrap();
        assert_eq!(p, Path::Mpi, "{why}");
        let mut one_unknown = aware.clone();
        one_unknown[3].cuda_aware = None;
        assert_eq!(choose(&j, &one_unknown).unwrap().0, Path::Host);
    }

    #[test]
    fn auto_takes_nccl_only_where_every_rank_has_its_own_gpu_and_nccl_loads() {
        let eight: Vec<Facts> = (0..8).map(|g| gpu("n1", g)).collect();
        let (p, why) = choose(&job(GpuAllreduce::Auto, 8), &eight).unwrap();
        assert_eq!(p, Path::Nccl, "{why}");
        assert!(why.contains("NCCL 2.27.3"), "{why}");
        // Two nodes, GPU 0 on each: not shared.
        let two = vec![gpu("n1", 0), gpu("n2", 0)];
        assert_eq!(choose(&job(GpuAllreduce::Auto, 2), &two).unwrap().0, Path::Nccl);
        // Two ranks on one GPU (the one-GPU machine): host, and why.
        let shared = vec![gpu("n1", 0), gpu("n1", 0)];
        let (p, why) = choose(&job(GpuAllreduce::Auto, 2), &shared).unwrap();
        assert_eq!(p, Path::Host);
        assert!(why.contains("ranks 0 and 1 on n1 share GPU 0") && why.contains("NCCL refuses"), "{why}");
        // NCCL missing on one rank: host for all, naming it.
        let mut missing = eight.clone();
        missing[5].nccl = Err("NCCL (libnccl.so.2) not found".into());
        let (p, why) = choose(&job(GpuAllreduce::Auto, 8), &missing).unwrap();
        assert_eq!((p, why.contains("rank 5")), (Path::Host, true), "{why}");
        // Adasum stays on the host path; compression travels in its precision over NCCL;
        // hierarchical takes NCCL in the node.
        let mut j = job(GpuAllreduce::Auto, 8);
        j.reduction = Reduction::Adasum;
        assert_eq!(choose(&j, &eight).unwrap().0, Path::Host);
        let mut j = job(GpuAllreduce::Auto, 8);
        j.compression = Compression::Bf16;
        let (p, why) = choose(&j, &eight).unwrap();
        assert_eq!(p, Path::Nccl);
        assert!(why.contains("bf16 on the wire"), "{why}");
        let mut j = job(GpuAllreduce::Auto, 8);
        j.hierarchical = true;
        assert_eq!(choose(&j, &eight).unwrap().0, Path::Nccl);
        // CPU ranks, or one rank: host.
        let cpu = vec![Facts { gpu: None, ..gpu("n1", 0) }, gpu("n1", 1)];
        assert_eq!(choose(&job(GpuAllreduce::Auto, 2), &cpu).unwrap().0, Path::Host);
        assert_eq!(choose(&job(GpuAllreduce::Auto, 1), &[gpu("n1", 0)]).unwrap().0, Path::Host);
        // Asked for on one rank: NCCL all the same (the GPU check's one-rank proof).
        assert_eq!(choose(&job(GpuAllreduce::Nccl, 1), &[gpu("n1", 0)]).unwrap().0, Path::Nccl);
    }

    #[test]
    fn asking_for_a_path_that_cannot_work_is_an_error_that_says_why() {
        let shared = vec![gpu("n1", 0), gpu("n1", 0)];
        let e = choose(&job(GpuAllreduce::Nccl, 2), &shared).unwrap_err();
        assert!(e.contains("share GPU 0") && e.contains("gpu_allreduce = \"host\""), "{e}");
        let mut two = vec![gpu("n1", 0), gpu("n1", 1)];
        two[1].cuda_aware = Some(false);
        let e = choose(&job(GpuAllreduce::Mpi, 2), &two).unwrap_err();
        assert!(e.contains("rank 1") && e.contains("not CUDA-aware"), "{e}");
        two[1].cuda_aware = None;
        let (p, why) = choose(&job(GpuAllreduce::Mpi, 2), &two).unwrap();
        assert_eq!(p, Path::Mpi);
        assert!(why.contains("your word"), "{why}");
        assert_eq!(choose(&job(GpuAllreduce::Host, 2), &two).unwrap().0, Path::Host);
        let mut j = job(GpuAllreduce::Nccl, 2);
        j.reduction = Reduction::Adasum;
        assert!(choose(&j, &two).unwrap_err().contains("adasum"));
        // Hierarchical: NCCL in the node and MPI among nodes; not with device pointers to MPI.
        let (mut j, mut m) = (job(GpuAllreduce::Nccl, 2), job(GpuAllreduce::Mpi, 2));
        (j.hierarchical, m.hierarchical) = (true, true);
        let (p, why) = choose(&j, &two).unwrap();
        assert_eq!(p, Path::Nccl);
        assert!(why.contains("MPI among the nodes"), "{why}");
        assert!(choose(&m, &two).unwrap_err().contains("hierarchical"));
        // Compression: NCCL sums in fp16; MPI_Allreduce on device pointers cannot (auto
        // then keeps the host ring, even where MPI is CUDA-aware).
        let mut aware = vec![gpu("n1", 0), gpu("n1", 0)];
        aware.iter_mut().for_each(|f| f.cuda_aware = Some(true));
        let mut a = job(GpuAllreduce::Auto, 2);
        assert_eq!(choose(&a, &aware).unwrap().0, Path::Mpi);
        a.compression = Compression::Fp16;
        assert_eq!(choose(&a, &aware).unwrap().0, Path::Host);
        let (mut j, mut m) = (job(GpuAllreduce::Nccl, 2), job(GpuAllreduce::Mpi, 2));
        (j.compression, m.compression) = (Compression::Fp16, Compression::Fp16);
        assert!(choose(&j, &two).unwrap().1.contains("fp16 on the wire"));
        assert!(choose(&m, &two).unwrap_err().contains("compression"));
    }
}
