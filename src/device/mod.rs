//! Devices: the backend seam (`backend::Backend`, every operation a step needs), the CPU
//! reference backend (`cpu`, always built), and `cuda`, the only module that touches cudarc;
//! today it only probes for a usable GPU (the CUDA backend is a later piece of work), so
//! `auto` falls back to the CPU with one log line and `cuda` is a clear error.
//! `select` is the one place that decides which backend a rank runs.

pub mod backend;
#[cfg(test)]
mod conformance;
pub mod cpu;
pub mod cuda;

pub use backend::{AdamHyper, Backend, SgdHyper, Trans};
pub use cpu::Cpu;

use crate::config::DeviceChoice;
use crate::error::{Error, Result};

/// The backends this build can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cpu,
}

/// The GPU a rank takes: its node-local rank modulo the visible devices, so several ranks
/// may share one GPU (that is how a single GPU tests multi-rank runs).
pub fn gpu_for(local_rank: usize, visible: usize) -> usize {
    local_rank % visible.max(1)
}

/// Decide the backend for this rank. `local_rank` picks the GPU when there is one.
pub fn select(choice: DeviceChoice, local_rank: usize) -> Result<(Kind, String)> {
    match choice {
        DeviceChoice::Cpu => Ok((Kind::Cpu, "cpu (as configured)".into())),
        DeviceChoice::Auto => Ok((Kind::Cpu, match cuda::probe() {
            Ok(n) => format!(
                "cpu: {n} GPU(s) visible (local rank {local_rank} would take GPU {}), but this build's CUDA backend is not implemented yet",
                gpu_for(local_rank, n)
            ),
            Err(why) => format!("cpu ({why})"),
        })),
        DeviceChoice::Cuda => match cuda::probe() {
            Ok(n) => Err(Error::Device(format!(
                "training.device = \"cuda\": {n} GPU(s) found, but the CUDA backend is not implemented in this build yet; use device = \"cpu\" or \"auto\""))),
            Err(why) => Err(Error::Cuda(format!("training.device = \"cuda\" but {why}; use device = \"cpu\" or \"auto\""))),
        },
    }
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
}
