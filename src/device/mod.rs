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

pub use backend::{
    AdamHyper, Backend, Captured, Gemm, Mask, Pointwise, Replayed, RmspropHyper, Segment, SgdHyper, Trans,
};
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

/// The threads `set_cpu_threads` set (what every CPU product of this process uses).
pub fn cpu_thread_count() -> usize {
    pool::threads()
}

/// The threads `training.threads` gives this rank, and the reason, for the start-up line.
/// Called before MPI_Init (the launcher's environment says how many ranks share the node).
pub fn cpu_threads(t: crate::config::Threads) -> (usize, String) {
    match t {
        crate::config::Threads::Fixed(n) => (n, format!("training.threads = {n}")),
        crate::config::Threads::Auto => {
            auto_threads(&|k| std::env::var(k).ok(), usable_cpus(), crate::sys::online_cpus())
        }
    }
}

/// `training.threads = "auto"`: OMP_NUM_THREADS where it is set (the usual word for a rank's
/// threads on HPC systems, also what PyTorch reads); else the CPUs this rank's affinity mask
/// allows (`cpus`: what `srun --cpus-per-task` or `mpirun --map-by slot:PE=N` gave it), at
/// most the node's `online` CPUs over the ranks the launcher started on this node (Open MPI's
/// OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS, PMIx's PMIX_LOCAL_SIZE), so that
/// ranks left unbound (`mpirun --bind-to none`) do not each take every core; at most 64.
pub fn auto_threads(env: &dyn Fn(&str) -> Option<String>, cpus: usize, online: usize) -> (usize, String) {
    const MOST: usize = 64;
    let number = |k: &str| env(k).and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n >= 1);
    if let Some(n) = number("OMP_NUM_THREADS") {
        return (n.min(MOST), format!("training.threads = \"auto\": OMP_NUM_THREADS = {n}"));
    }
    let local = ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"].iter().find_map(|k| number(k));
    let share = online / local.unwrap_or(1).max(1);
    let n = cpus.min(share).clamp(1, MOST);
    let why = match local {
        Some(l) if share < cpus => format!(
            "training.threads = \"auto\": {online} CPUs on this node over its {l} ranks (this rank may run on {cpus})"
        ),
        _ => format!("training.threads = \"auto\": the {cpus} CPU(s) this rank may run on"),
    };
    (n, why)
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

/// Why `set_job_threads` chose its count (for `log_cpu_threads`).
static THREADS_WHY: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// `set_cpu_threads` with the count `training.threads` gives this rank (`cpu_threads`),
/// keeping the reason for the start-up line.
pub fn set_job_threads(t: crate::config::Threads) {
    let (n, why) = cpu_threads(t);
    set_cpu_threads(n);
    *THREADS_WHY.lock().unwrap_or_else(|e| e.into_inner()) = why;
}

/// Rank 0's start-up line on the CPU: the threads each rank runs, and why (`set_job_threads`).
pub fn log_cpu_threads(kind: Kind, rank: usize) {
    if kind == Kind::Cpu && rank == 0 {
        let why = THREADS_WHY.lock().unwrap_or_else(|e| e.into_inner()).clone();
        log::info!("CPU threads: {} on rank 0 ({why})", pool::threads());
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

    /// "auto": OMP_NUM_THREADS first; else the affinity mask's CPUs, at most the node's CPUs
    /// over the launcher's ranks on it (unbound ranks share the node), never 0, at most 64.
    #[test]
    fn auto_threads_take_the_ranks_share_of_the_node() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let auto = |pairs: &'static [(&'static str, &'static str)], cpus, online| {
            super::auto_threads(&env(pairs), cpus, online)
        };
        // One process, no launcher: every CPU it may run on.
        assert_eq!(auto(&[], 2, 2).0, 2);
        // Bound by the launcher (srun --cpus-per-task=4, mpirun's default one core).
        assert_eq!(auto(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "16")], 4, 64).0, 4);
        assert_eq!(auto(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "2")], 1, 2).0, 1);
        // Unbound (mpirun --bind-to none): the node shared over its ranks, and why.
        let (n, why) = auto(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "8")], 64, 64);
        assert_eq!(n, 8);
        assert!(why.contains("64 CPUs on this node over its 8 ranks"), "{why}");
        assert_eq!(auto(&[("MPI_LOCALNRANKS", "4")], 8, 8).0, 2, "MPICH's word");
        assert_eq!(auto(&[("PMIX_LOCAL_SIZE", "3")], 2, 2).0, 1, "more ranks than CPUs: 1, not 0");
        // OMP_NUM_THREADS is the user's word, over the rest; nonsense in it is not.
        let (n, why) = auto(&[("OMP_NUM_THREADS", "3"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "2")], 2, 2);
        assert_eq!(n, 3);
        assert!(why.contains("OMP_NUM_THREADS = 3"), "{why}");
        assert_eq!(auto(&[("OMP_NUM_THREADS", "0")], 2, 2).0, 2);
        assert_eq!(auto(&[("OMP_NUM_THREADS", "x"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "x")], 6, 6).0, 6);
        assert_eq!(auto(&[], 256, 256).0, 64, "at most 64");
        // A number is the number.
        assert_eq!(super::cpu_threads(crate::config::Threads::Fixed(3)).0, 3);
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
