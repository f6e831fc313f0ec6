//! Part of the MPI module (a child of `comm.rs`): `Beacon`, the liveness thread's own duplicate
//! of the world communicator, on which it only ever makes non-blocking calls (`MPI_Isend`,
//! `MPI_Irecv`, `MPI_Ibarrier`), each a `Pending` polled with `MPI_Test`, so that it never
//! waits on another rank.
//!
//! Must not: block (no call here waits on a peer, `Drop` included).

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;

/// Words in one heartbeat (see `liveness.rs` for their meaning).
pub const BEAT_WORDS: usize = 20;
const BEAT_TAG: i32 = 0x4842; // "HB"
const END_TAG: i32 = 0x4845; // "HE"

/// Non-blocking point-to-point and barrier on a private communicator, for the liveness
/// thread. Every call returns at once; a `Pending` is polled with `test`.
pub struct Beacon {
    comm: SimpleCommunicator,
    pub rank: usize,
    pub size: usize,
}

// SAFETY: MPI_THREAD_MULTIPLE was granted (the caller checks `Comm::threading`), and only the
// liveness thread uses this communicator after it is created.
unsafe impl Send for Beacon {}

/// One outstanding non-blocking operation and the buffer it reads or fills (boxed, so it
/// does not move while MPI holds its address).
pub struct Pending {
    req: ffi::MPI_Request,
    buf: Box<[u64; BEAT_WORDS]>,
    kind: PendingKind,
    done: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PendingKind {
    Send,
    Recv,
    Barrier,
}

// SAFETY: a request handle may be completed from any thread under MPI_THREAD_MULTIPLE; the
// buffer moves with it.
unsafe impl Send for Pending {}

impl Beacon {
    /// The liveness thread's beacon on `comm` (a duplicate of the world communicator).
    pub(super) fn new(comm: SimpleCommunicator) -> Beacon {
        Beacon { rank: comm.rank() as usize, size: comm.size() as usize, comm }
    }

    fn request(&self, kind: PendingKind, buf: Box<[u64; BEAT_WORDS]>, peer: usize, tag: i32) -> Pending {
        // SAFETY: RSMPI_REQUEST_NULL is a valid initial value; every call below writes `req`.
        let mut p = Pending { req: unsafe { ffi::RSMPI_REQUEST_NULL }, buf, kind, done: false };
        let ty = u64::equivalent_datatype().as_raw();
        let comm = self.comm.as_raw();
        let n = BEAT_WORDS as i32;
        // SAFETY: the buffer is heap-allocated and owned by `p`, which is not dropped while the
        // request is active (see `Drop`); the communicator is valid until `self` is dropped.
        unsafe {
            match kind {
                PendingKind::Send => {
                    ffi::MPI_Isend(p.buf.as_ptr().cast(), n, ty, peer as i32, tag, comm, &mut p.req);
                }
                PendingKind::Recv => {
                    ffi::MPI_Irecv(p.buf.as_mut_ptr().cast(), n, ty, peer as i32, tag, comm, &mut p.req);
                }
                PendingKind::Barrier => {
                    ffi::MPI_Ibarrier(comm, &mut p.req);
                }
            }
        }
        p
    }

    /// Start sending heartbeat `msg` to `to`.
    pub fn isend(&self, to: usize, msg: &[u64; BEAT_WORDS]) -> Pending {
        self.request(PendingKind::Send, Box::new(*msg), to, BEAT_TAG)
    }

    /// Start receiving one heartbeat from `from`.
    pub fn irecv(&self, from: usize) -> Pending {
        self.request(PendingKind::Recv, Box::new([0; BEAT_WORDS]), from, BEAT_TAG)
    }

    /// Start sending a message of the final handshake (`finish.rs`) to `to`. Its own tag: a
    /// heartbeat receive still posted when the heartbeats end must never take one.
    pub fn isend_end(&self, to: usize, msg: &[u64; BEAT_WORDS]) -> Pending {
        self.request(PendingKind::Send, Box::new(*msg), to, END_TAG)
    }

    /// Start receiving one message of the final handshake from `from`.
    pub fn irecv_end(&self, from: usize) -> Pending {
        self.request(PendingKind::Recv, Box::new([0; BEAT_WORDS]), from, END_TAG)
    }

    /// Start a barrier over every rank (it completes once all have started it).
    pub fn ibarrier(&self) -> Pending {
        self.request(PendingKind::Barrier, Box::new([0; BEAT_WORDS]), 0, BEAT_TAG)
    }
}

impl Pending {
    /// Whether the operation has completed (MPI_Test; never waits). Stays true once true.
    pub fn test(&mut self) -> bool {
        if !self.done {
            let mut flag: std::ffi::c_int = 0;
            // SAFETY: `req` is an active request of ours (or already null, which MPI_Test accepts).
            unsafe { ffi::MPI_Test(&mut self.req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            self.done = flag != 0;
        }
        self.done
    }

    /// The received words (meaningful once a receive has completed).
    pub fn message(&self) -> &[u64; BEAT_WORDS] {
        &self.buf
    }
}

impl Drop for Pending {
    /// An operation still active is let go without waiting on the peer: a receive is cancelled
    /// (and completes at once locally); a send or barrier request is left to MPI and its
    /// buffer leaked (a few hundred bytes, only at the end or when abandoning a stopped peer).
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // SAFETY: `req` is an active request of ours.
        unsafe {
            match self.kind {
                PendingKind::Recv => {
                    ffi::MPI_Cancel(&mut self.req);
                    ffi::MPI_Wait(&mut self.req, ffi::RSMPI_STATUS_IGNORE);
                }
                PendingKind::Send => {
                    ffi::MPI_Request_free(&mut self.req);
                    std::mem::forget(std::mem::replace(&mut self.buf, Box::new([0; BEAT_WORDS])));
                }
                // Freeing a non-blocking collective's request is not allowed: leave it.
                PendingKind::Barrier => {}
            }
        }
    }
}
