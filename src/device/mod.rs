//! Devices: the backend seam (`backend::Backend`, every operation a step needs), the CPU
//! reference backend (`cpu`, always built), and `cuda`, the CUDA backend and the only module
//! that touches cudarc. `select` is the one place that decides which backend a rank runs:
//! `auto` takes the GPU when a driver, a GPU and the CUDA libraries are there and falls back
//! to the CPU with one log line saying why not; `cuda` without them is a clear error.
//!
//! Must not: know the model or MPI (the rank's node-local index is handed in).

pub mod amx;
pub mod backend;
pub mod bf16;
pub mod cpu;
pub mod cuda;
pub mod fresh;
pub mod mask;
pub mod pool;
pub mod sgemm;
pub mod tile;

pub use backend::{AdamHyper, Backend, Captured, Gemm, Mask, Pointwise, Replayed, Segment, SgdHyper, Trans};
pub use cpu::Cpu;

use crate::config::DeviceChoice;
use crate::error::{Error, Result};

/// The backends this build can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cpu,
    /// The GPU of this ordinal (node-local rank modulo the visible GPUs).
    Cuda(usize),
}

/// The GPU a rank takes: its node-local rank modulo the visible devices, so several ranks
/// may share one GPU (that is how a single GPU tests multi-rank runs).
pub fn gpu_for(local_rank: usize, visible: usize) -> usize {
    local_rank % visible.max(1)
}

/// Decide the backend for this rank. `local_rank` picks the GPU when there is one.
pub fn select(choice: DeviceChoice, local_rank: usize) -> Result<(Kind, String)> {
    let gpu = || -> std::result::Result<(usize, usize), String> {
        let n = cuda::probe()?;
        cuda::check_libraries().map_err(|e| e.to_string())?;
        Ok((gpu_for(local_rank, n), n))
    };
    match choice {
        DeviceChoice::Cpu => Ok((Kind::Cpu, "cpu (as configured)".into())),
        DeviceChoice::Auto => Ok(match gpu() {
            Ok((g, n)) => (Kind::Cuda(g), format!("cuda:{g} of {n} GPU(s) (training.device = \"auto\")")),
            Err(why) => (Kind::Cpu, format!("cpu ({why})")),
        }),
        DeviceChoice::Cuda => match gpu() {
            Ok((g, n)) => Ok((Kind::Cuda(g), format!("cuda:{g} of {n} GPU(s)"))),
            Err(why) => {
                Err(Error::Cuda(format!("training.device = \"cuda\" but {why}; use device = \"cpu\" or \"auto\"")))
            }
        },
    }
}

/// Threads for this process's CPU work (`training.threads`): every matrix product (float32,
/// matrixmultiply's too, and bf16) and the optimizer's update run on `pool.rs`'s threads.
/// matrixmultiply's own pool is held to one thread (MATMUL_NUM_THREADS = 1, read at its first
/// product; unset it would take every physical core, too many for N ranks on a node): the pool
/// splits its products instead (`cpu::fp32::mm_gemm`). Call before any other thread starts: the
/// environment is process-wide.
pub fn set_cpu_threads(n: usize) {
    std::env::set_var("MATMUL_NUM_THREADS", "1");
    pool::set_threads(n);
}

/// The CPUs this process may run on: its affinity mask (`sched_getaffinity`, which `mpirun`
/// and `srun` set per rank) and cgroup quota, as `available_parallelism` reads them.
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What to tell a rank whose `training.threads` exceed the CPUs it may run on (`cpus`,
/// `usable_cpus`): its threads would take turns on those CPUs, each product waiting for the
/// turn of the others (measured: 5,300 instead of 50,000 samples/s on the Fashion-MNIST job,
/// 1 rank × 2 threads bound to one core by `mpirun -n 1`). None when they fit.
pub fn threads_warning(threads: usize, cpus: usize) -> Option<String> {
    (threads > cpus).then(|| {
        format!(
            "training.threads = {threads} but this rank may run on {cpus} CPU(s) only (its affinity mask: \
             mpirun binds each rank to one core by default); its threads will take turns there, several \
             times slower than one thread. Launch with `mpirun --bind-to none` (or `--map-by slot:PE={threads}`; \
             Slurm: `srun --cpus-per-task={threads}`), or set training.threads = {cpus}"
        )
    })
}

/// Logs `threads_warning` for this rank when it runs on the CPU.
pub fn check_cpu_threads(kind: Kind, threads: usize) {
    if kind == Kind::Cpu {
        if let Some(w) = threads_warning(threads, usable_cpus()) {
            log::warn!("{w}");
        }
    }
}

/// Run `f` with the backend `kind` names (opened here: on a GPU, context, cuBLAS, kernels).
pub fn with_backend<T>(kind: Kind, precision: crate::config::Precision, f: impl WithBackend<T>) -> Result<T> {
    match kind {
        Kind::Cpu => f.run(Cpu::new(precision)?),
        Kind::Cuda(g) => f.run(cuda::Cuda::new(g, precision)?),
    }
}

/// A computation generic over the backend (a closure cannot be generic in Rust).
pub trait WithBackend<T> {
    fn run<B: Backend>(self, be: B) -> Result<T>;
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranks_share_gpus_round_robin() {
        let got: Vec<usize> = (0..5).map(|r| super::gpu_for(r, 2)).collect();
        assert_eq!(got, vec![0, 1, 0, 1, 0]);
        assert_eq!(super::gpu_for(3, 8), 3);
        assert_eq!(super::gpu_for(3, 0), 0);
    }

    #[test]
    fn threads_past_the_affinity_mask_are_warned_about() {
        let w = super::threads_warning(2, 1).expect("2 threads on 1 CPU");
        assert!(
            w.contains("--bind-to none") && w.contains("cpus-per-task=2") && w.contains("training.threads = 1"),
            "{w}"
        );
        assert_eq!(super::threads_warning(2, 2), None);
        assert_eq!(super::threads_warning(1, 1), None);
        assert!(super::usable_cpus() >= 1);
    }
}
