//! The only module that calls MPI: start-up, placement (rank, node-local rank, host),
//! collectives, point-to-point exchange for the compressed ring, and abort. Everything else
//! talks to MPI through `Comm` (the main thread's, on MPI_COMM_WORLD) or `Channel` (a
//! duplicate of it that the communication thread owns, so its traffic never matches ours).
//!
//! Collectives return `()` in rsmpi and errors go to MPI's handler (abort by default), so a
//! failing collective ends the job rather than returning.

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Threading;

/// Collectives over one communicator. `Send` so the communication thread can own one.
pub struct Channel {
    comm: SimpleCommunicator,
    pub rank: usize,
    pub size: usize,
}

// SAFETY: MPI is initialized with at least MPI_THREAD_SERIALIZED (checked in `Comm::init`),
// and each Channel is used by one thread at a time: the main thread's by the main thread,
// the engine's by the communication thread, which the main thread never runs MPI beside
// (it waits for the engine to go idle first).
unsafe impl Send for Channel {}

impl Channel {
    fn new(comm: SimpleCommunicator) -> Channel {
        Channel { rank: comm.rank() as usize, size: comm.size() as usize, comm }
    }

    /// recv = elementwise sum over ranks of send.
    pub fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        self.comm.all_reduce_into(send, recv, SystemOperation::sum());
    }

    /// In-place sum of small f64 vectors (metrics).
    pub fn all_reduce_sum_f64(&self, v: &mut [f64]) {
        let send = v.to_vec();
        self.comm.all_reduce_into(&send[..], v, SystemOperation::sum());
    }

    pub fn all_reduce_max_f64(&self, x: f64) -> f64 {
        let mut out = 0.0f64;
        self.comm.all_reduce_into(&x, &mut out, SystemOperation::max());
        out
    }

    pub fn broadcast_u64(&self, buf: &mut [u64]) {
        self.comm.process_at_rank(0).broadcast_into(buf);
    }

    pub fn broadcast_f64(&self, buf: &mut [f64]) {
        self.comm.process_at_rank(0).broadcast_into(buf);
    }

    /// Every rank's value, indexed by rank.
    pub fn all_gather_u64(&self, x: u64) -> Vec<u64> {
        let mut out = vec![0u64; self.size];
        self.comm.all_gather_into(&x, &mut out[..]);
        out
    }

    /// Every rank's `mine` (the same length on every rank), concatenated in rank order.
    pub fn all_gather_u64s(&self, mine: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; mine.len() * self.size];
        self.comm.all_gather_into(mine, &mut out[..]);
        out
    }

    /// Every rank's bytes (of any length), indexed by rank.
    pub fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let counts: Vec<i32> = self.all_gather_u64(mine.len() as u64).iter().map(|&c| c as i32).collect();
        let displs: Vec<i32> = counts
            .iter()
            .scan(0, |acc, &c| {
                let d = *acc;
                *acc += c;
                Some(d)
            })
            .collect();
        let mut all = vec![0u8; counts.iter().map(|&c| c as usize).sum()];
        {
            let mut part = mpi::datatype::PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            self.comm.all_gather_varcount_into(mine, &mut part);
        }
        counts.iter().zip(&displs).map(|(&c, &d)| all[d as usize..(d + c) as usize].to_vec()).collect()
    }

    /// Overwrite `buf` on every rank with rank 0's.
    pub fn broadcast_f32(&self, buf: &mut [f32]) {
        self.comm.process_at_rank(0).broadcast_into(buf);
    }

    /// Send `out` to rank `to` while receiving `inp` from rank `from` (one ring step).
    pub fn exchange_u16(&self, out: &[u16], to: usize, inp: &mut [u16], from: usize) {
        mpi::point_to_point::send_receive_into(
            out,
            &self.comm.process_at_rank(to as i32),
            inp,
            &self.comm.process_at_rank(from as i32),
        );
    }
}

pub struct Comm {
    // Field order matters: communicators must be freed before the universe finalizes MPI.
    world: Channel,
    _node: SimpleCommunicator,
    _universe: Universe,
    pub rank: usize,
    pub size: usize,
    pub local_rank: usize,
    pub local_size: usize,
    pub host: String,
    pub threading: Threading,
}

impl Comm {
    /// Initialize MPI, asking for MPI_THREAD_MULTIPLE and requiring at least SERIALIZED: the
    /// communication thread makes MPI calls while the main thread computes. Works as a
    /// singleton too (`hvtrain train job.toml` without mpirun is a 1-rank job).
    pub fn init() -> crate::error::Result<Comm> {
        use crate::error::Error;
        let (universe, granted) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| Error::Mpi("MPI was already initialized".to_string()))?;
        if granted < Threading::Serialized {
            return Err(Error::Mpi(format!(
                "the MPI library granted thread level {granted:?}; hvtrain's communication thread needs at least \
                 MPI_THREAD_SERIALIZED (build Open MPI or MPICH with thread support)"
            )));
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
            threading: granted,
            world: Channel::new(world),
            _node: node,
            _universe: universe,
        })
    }

    /// Whether the MPI library takes CUDA device pointers, from `MPIX_Query_cuda_support`
    /// (Open MPI and MPICH both have it), looked up at run time so that any MPI builds. None
    /// when the library does not say.
    pub fn cuda_aware(&self) -> Option<bool> {
        extern "C" {
            fn dlsym(handle: *mut std::ffi::c_void, symbol: *const std::ffi::c_char) -> *mut std::ffi::c_void;
        }
        // SAFETY: dlsym with RTLD_DEFAULT (null) only searches the loaded objects.
        let sym = unsafe { dlsym(std::ptr::null_mut(), c"MPIX_Query_cuda_support".as_ptr()) };
        if sym.is_null() {
            return None;
        }
        // SAFETY: both libraries declare it `int MPIX_Query_cuda_support(void)`.
        let query: extern "C" fn() -> std::ffi::c_int = unsafe { std::mem::transmute(sym) };
        Some(query() != 0)
    }

    /// A private duplicate of the world communicator, for the communication thread.
    pub fn channel(&self) -> Channel {
        Channel::new(self.world.comm.duplicate())
    }

    /// End every rank of the job with `code`. Never returns.
    pub fn abort(&self, code: i32) -> ! {
        self.world.comm.abort(code)
    }

    pub fn barrier(&self) {
        self.world.comm.barrier();
    }
}

impl std::ops::Deref for Comm {
    type Target = Channel;
    fn deref(&self) -> &Channel {
        &self.world
    }
}

/// Abort the whole MPI job from a context that holds no `Comm` (the panic hook, the
/// watchdog). Does nothing when MPI is not running.
pub fn abort_world(code: i32) {
    if mpi::environment::is_initialized() && !mpi::environment::is_finalized() {
        // SAFETY: MPI is initialized and not finalized; MPI_Abort on COMM_WORLD is always valid then.
        unsafe {
            mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, code);
        }
    }
}
