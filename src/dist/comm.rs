//! The only module that calls MPI: start-up, placement (rank, node-local rank, host),
//! collectives, and abort. Everything else talks to MPI through `Comm`.
//!
//! Collectives return `()` in rsmpi and errors go to MPI's handler (abort by default), so a
//! failing collective ends the job rather than returning.

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Threading;

pub struct Comm {
    // Field order matters: communicators must be freed before the universe finalizes MPI.
    world: SimpleCommunicator,
    _node: SimpleCommunicator,
    _universe: Universe,
    pub rank: usize,
    pub size: usize,
    pub local_rank: usize,
    pub local_size: usize,
    pub host: String,
}

impl Comm {
    /// Initialize MPI. Only the main thread calls MPI (MPI_THREAD_FUNNELED). Works as a
    /// singleton too (`hvtrain train job.toml` without mpirun is a 1-rank job).
    pub fn init() -> Result<Comm, String> {
        let (universe, granted) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| "MPI was already initialized".to_string())?;
        if granted < Threading::Funneled {
            return Err(format!("MPI granted thread level {granted:?}; hvtrain needs at least Funneled"));
        }
        let world = universe.world();
        // Node-local rank from a shared-memory split: right under any launcher.
        let node = world.split_shared(world.rank());
        let host = mpi::environment::processor_name().unwrap_or_else(|_| "unknown-host".into());
        Ok(Comm {
            rank: world.rank() as usize,
            size: world.size() as usize,
            local_rank: node.rank() as usize,
            local_size: node.size() as usize,
            host,
            world,
            _node: node,
            _universe: universe,
        })
    }

    /// End every rank of the job with `code`. Never returns.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    /// recv = elementwise sum over ranks of send.
    pub fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        self.world.all_reduce_into(send, recv, SystemOperation::sum());
    }

    /// In-place sum of small f64 vectors (metrics).
    pub fn all_reduce_sum_f64(&self, v: &mut [f64]) {
        let send = v.to_vec();
        self.world.all_reduce_into(&send[..], v, SystemOperation::sum());
    }

    pub fn all_reduce_min_u64(&self, x: u64) -> u64 {
        let mut out = 0u64;
        self.world.all_reduce_into(&x, &mut out, SystemOperation::min());
        out
    }

    /// Every rank's value, indexed by rank.
    pub fn all_gather_u64(&self, x: u64) -> Vec<u64> {
        let mut out = vec![0u64; self.size];
        self.world.all_gather_into(&x, &mut out[..]);
        out
    }

    /// Overwrite `buf` on every rank with rank 0's.
    pub fn broadcast_f32(&self, buf: &mut [f32]) {
        self.world.process_at_rank(0).broadcast_into(buf);
    }
}

/// Abort the whole MPI job from a context that holds no `Comm` (the panic hook). Does
/// nothing when MPI is not running.
pub fn abort_world(code: i32) {
    if mpi::environment::is_initialized() && !mpi::environment::is_finalized() {
        // SAFETY: MPI is initialized and not finalized; MPI_Abort on COMM_WORLD is always valid then.
        unsafe {
            mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, code);
        }
    }
}
