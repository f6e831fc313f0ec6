//! The only module that calls MPI: start-up, placement (rank, node-local rank, host),
//! collectives, point-to-point exchange for the compressed ring, and abort. Everything else
//! talks to MPI through `Comm` (the main thread's, on MPI_COMM_WORLD) or `Channel` (a
//! duplicate of it that the communication thread owns, so its traffic never matches ours).
//!
//! Collectives return `()` in rsmpi and errors go to MPI's handler (abort by default), so a
//! failing collective ends the job rather than returning.
//!
//! No MPI call carries more than `piece()` elements (2^31 − 1: MPI's counts are 32-bit
//! `int`s): longer buffers travel in pieces, each an MPI call of its own, in the same order on
//! every rank (`HVTRAIN_MPI_PIECE` lowers the piece, so that tests cross it with small buffers).
//!
//! `Beacon` is the third kind of user: the liveness thread's own duplicate communicator, on
//! which it only ever makes non-blocking calls (`MPI_Isend`, `MPI_Irecv`, `MPI_Ibarrier`,
//! polled with `MPI_Test`), so it never waits on another rank.
//!
//! Must not: be bypassed: no other module calls MPI (its children `comm/p2p.rs`, `comm/vote.rs`,
//! `comm/sends.rs` and `comm/beacon.rs` are part of it).

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Threading;

// Point-to-point messages with tags, for the parameter servers (the same rule: only this
// module and its child call MPI).
mod beacon;
mod p2p;
mod sends;
mod vote;
pub use beacon::{Beacon, Pending, BEAT_WORDS};
pub use p2p::Link;
pub use sends::Outgoing;
pub use vote::Vote;

/// The most elements one MPI call carries: 2^31 − 1 (MPI's counts are `int`s), or fewer with
/// `HVTRAIN_MPI_PIECE=N` (tests: small buffers then travel in several pieces, as buffers of
/// over 2^31 elements do). Read once per process; every rank of a job must see the same value
/// (mpirun -x), since the pieces of one call are matched across ranks.
pub fn piece() -> usize {
    static PIECE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PIECE.get_or_init(|| {
        let most = i32::MAX as usize;
        std::env::var("HVTRAIN_MPI_PIECE")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&p| p >= 1)
            .map_or(most, |p| p.min(most))
    })
}

/// `n` (at most one piece) as MPI's count.
fn count(n: usize) -> i32 {
    i32::try_from(n).expect("a piece is at most 2^31 - 1 elements")
}

/// The windows of `0..n` that one call each carries: consecutive, `p` long (the last shorter).
fn windows(n: usize, p: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..n.div_ceil(p)).map(move |i| i * p..((i + 1) * p).min(n))
}

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
        assert_eq!(send.len(), recv.len(), "an all-reduce's buffers have one length");
        let p = piece();
        for (s, r) in send.chunks(p).zip(recv.chunks_mut(p)) {
            self.comm.all_reduce_into(s, r, SystemOperation::sum());
        }
    }

    /// `recv = Σ send` over ranks on buffers given by address, for a CUDA-aware MPI library
    /// handed device pointers (`Comm::cuda_aware`).
    ///
    /// # Safety
    /// `send` and `recv` must each address `n` floats that the MPI library can read and write
    /// (device memory only when it is CUDA-aware), not in use by anything else meanwhile.
    pub unsafe fn all_reduce_sum_f32_raw(&self, send: u64, recv: u64, n: usize) {
        for w in windows(n, piece()) {
            let at = (w.start * std::mem::size_of::<f32>()) as u64;
            // SAFETY: as the caller promises (the window lies within the n floats); the
            // communicator is valid while self lives.
            let rc = unsafe {
                ffi::MPI_Allreduce(
                    (send + at) as *const std::ffi::c_void,
                    (recv + at) as *mut std::ffi::c_void,
                    count(w.len()),
                    ffi::RSMPI_FLOAT,
                    ffi::RSMPI_SUM,
                    self.comm.as_raw(),
                )
            };
            assert_eq!(rc, 0, "MPI_Allreduce on device memory failed with code {rc}");
        }
    }

    /// `recv` = this rank's part of the element-wise sum of every rank's `send`
    /// (`MPI_Reduce_scatter`): the parts are `counts` (one per rank, in rank order, summing to
    /// `send`'s length), and `recv` holds at least this rank's.
    pub fn reduce_scatter_sum_f32(&self, send: &[f32], recv: &mut [f32], counts: &[usize]) {
        assert_eq!(counts.len(), self.size, "one count per rank");
        assert_eq!(counts.iter().sum::<usize>(), send.len(), "the counts cover the buffer");
        assert!(recv.len() >= counts[self.rank], "the receive buffer holds this rank's part");
        let parts = parts_of(counts);
        let mine = &parts[self.rank];
        for w in windows(send.len(), piece()) {
            // Each rank's part of this window, and where this rank's lands in `recv`.
            let c: Vec<i32> = parts.iter().map(|p| count(overlap(p, &w).len())).collect();
            let o = overlap(mine, &w);
            let at = if o.is_empty() { 0 } else { o.start - mine.start };
            // SAFETY: send[w] holds Σ c floats, recv[at..] at least c[rank]; both live through
            // the call; the communicator is valid while self lives.
            let rc = unsafe {
                ffi::MPI_Reduce_scatter(
                    send[w.clone()].as_ptr().cast(),
                    recv[at..].as_mut_ptr().cast(),
                    c.as_ptr(),
                    ffi::RSMPI_FLOAT,
                    ffi::RSMPI_SUM,
                    self.comm.as_raw(),
                )
            };
            assert_eq!(rc, 0, "MPI_Reduce_scatter failed with code {rc}");
        }
    }

    /// Every rank's part of `buf` (parts `counts[r]` long, one after another in rank order,
    /// covering `buf`) from the rank that holds it (`MPI_Allgatherv`); this rank's part is
    /// what it sends.
    pub fn all_gather_parts_f32(&self, buf: &mut [f32], counts: &[usize]) {
        assert_eq!(counts.len(), self.size, "one count per rank");
        assert_eq!(counts.iter().sum::<usize>(), buf.len(), "the parts cover the buffer");
        let parts = parts_of(counts);
        for w in windows(buf.len(), piece()) {
            let pieces: Vec<std::ops::Range<usize>> = parts.iter().map(|p| overlap(p, &w)).collect();
            let c: Vec<i32> = pieces.iter().map(|p| count(p.len())).collect();
            let displs = offsets(&c);
            let mine = buf[pieces[self.rank].clone()].to_vec();
            let mut part = mpi::datatype::PartitionMut::new(&mut buf[w], &c[..], &displs[..]);
            self.comm.all_gather_varcount_into(&mine[..], &mut part);
        }
    }

    /// `recv` on rank 0 of this communicator = the element-wise sum of every rank's `send`
    /// (`MPI_Reduce`); `recv` is left as it was on the others.
    pub fn reduce_sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        let root = self.comm.process_at_rank(0);
        let p = piece();
        if self.rank == 0 {
            for (s, r) in send.chunks(p).zip(recv.chunks_mut(p)) {
                root.reduce_into_root(s, r, SystemOperation::sum());
            }
        } else {
            for s in send.chunks(p) {
                root.reduce_into(s, SystemOperation::sum());
            }
        }
    }

    /// The ranks of this communicator that share a node with this one, in this
    /// communicator's order (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`); with
    /// `HVTRAIN_NODE_SIZE=k` (tests on one machine), runs of k consecutive ranks instead.
    /// Collective.
    pub fn split_node(&self) -> Channel {
        match std::env::var("HVTRAIN_NODE_SIZE").ok().and_then(|v| v.parse::<usize>().ok()).filter(|&k| k > 0) {
            Some(k) => self.split(self.rank / k, self.rank),
            None => Channel::new(self.comm.split_shared(self.rank as i32)),
        }
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
        let displs = offsets(&counts);
        let mut all = vec![0u8; counts.iter().map(|&c| c as usize).sum()];
        {
            let mut part = mpi::datatype::PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            self.comm.all_gather_varcount_into(mine, &mut part);
        }
        counts.iter().zip(&displs).map(|(&c, &d)| all[d as usize..(d + c) as usize].to_vec()).collect()
    }

    /// Rank 0 of this communicator gets every rank's floats (of any length), indexed by rank;
    /// the others get None.
    pub fn gather_f32s(&self, mine: &[f32]) -> Option<Vec<Vec<f32>>> {
        let lens: Vec<usize> = self.all_gather_u64(mine.len() as u64).iter().map(|&c| c as usize).collect();
        // Rounds of at most one piece in all: each rank's next `q` elements per round.
        let q = (piece() / self.size).max(1);
        let rounds = lens.iter().map(|&n| n.div_ceil(q)).max().unwrap_or(0);
        let root = self.comm.process_at_rank(0);
        let mut all: Vec<Vec<f32>> =
            if self.rank == 0 { lens.iter().map(|&n| Vec::with_capacity(n)).collect() } else { Vec::new() };
        let mut got = Vec::new();
        for k in 0..rounds {
            let part = |n: usize| (k * q).min(n)..((k + 1) * q).min(n);
            let send = &mine[part(mine.len())];
            if self.rank != 0 {
                root.gather_varcount_into(send);
                continue;
            }
            let c: Vec<i32> = lens.iter().map(|&n| count(part(n).len())).collect();
            let displs = offsets(&c);
            got.clear();
            got.resize(c.iter().map(|&x| x as usize).sum(), 0f32);
            {
                let mut into = mpi::datatype::PartitionMut::new(&mut got[..], &c[..], &displs[..]);
                root.gather_varcount_into_root(send, &mut into);
            }
            for ((v, &c), &d) in all.iter_mut().zip(&c).zip(&displs) {
                v.extend_from_slice(&got[d as usize..(d + c) as usize]);
            }
        }
        (self.rank == 0).then_some(all)
    }

    /// The ranks with the same `color` in a communicator of their own, ordered by `key`
    /// (`MPI_Comm_split`). Collective.
    pub fn split(&self, color: usize, key: usize) -> Channel {
        use mpi::topology::Color;
        let c = self
            .comm
            .split_by_color_with_key(Color::with_value(color as i32), key as i32)
            .expect("every rank gives a color, so every rank gets a communicator");
        Channel::new(c)
    }

    /// A duplicate of this communicator, for another thread (its traffic never matches
    /// ours). Collective.
    pub fn duplicate(&self) -> Channel {
        Channel::new(self.comm.duplicate())
    }

    /// Overwrite `buf` on every rank with rank 0's.
    pub fn broadcast_f32(&self, buf: &mut [f32]) {
        for b in buf.chunks_mut(piece()) {
            self.comm.process_at_rank(0).broadcast_into(b);
        }
    }

    /// Start an OR of `flag` over this communicator's ranks (`MPI_Iallreduce`), to be
    /// completed later with `Vote::wait`: the parameter-server workers' stop vote, which must
    /// not make their steps synchronous. Collective (every rank starts the same votes in order).
    pub fn ivote(&self, flag: bool) -> Vote {
        // SAFETY: RSMPI_REQUEST_NULL is a valid initial value; MPI_Iallreduce writes `req`.
        let mut v = Vote { req: unsafe { ffi::RSMPI_REQUEST_NULL }, buf: Box::new([u64::from(flag), 0]), done: false };
        let ty = u64::equivalent_datatype().as_raw();
        // SAFETY: the buffer is heap-allocated and owned by `v`, which keeps it until the request
        // completes (`wait`; a vote dropped unfinished leaks it, see `Drop`); the communicator
        // outlives the request (votes are waited for before the channel is dropped).
        unsafe {
            let p = v.buf.as_mut_ptr();
            ffi::MPI_Iallreduce(p.cast(), p.add(1).cast(), 1, ty, ffi::RSMPI_BOR, self.comm.as_raw(), &mut v.req);
        }
        v
    }

    /// Blocking send of `out` to rank `to` with `tag` (Adasum's fold of the ranks above a
    /// power of two; `recv_f32` receives it).
    pub fn send_f32(&self, to: usize, tag: i32, out: &[f32]) {
        if out.is_empty() {
            self.comm.process_at_rank(to as i32).send_with_tag(out, tag);
        }
        for o in out.chunks(piece()) {
            self.comm.process_at_rank(to as i32).send_with_tag(o, tag);
        }
    }

    /// Send `out` to rank `to` while receiving `inp` from rank `from`: one step of the
    /// compressed ring (u16) or of Adasum's levels (f32).
    /// `out` goes as messages of at most one piece and `inp` comes as such (each side's count
    /// of pieces follows from its message's length, which both ends know; an empty one is no
    /// message at all).
    pub fn exchange<T: Equivalence>(&self, out: &[T], to: usize, inp: &mut [T], from: usize) {
        let p = piece();
        let ty = T::equivalent_datatype().as_raw();
        let tag = 0x4558; // "EX"
        let mut reqs = Vec::new();
        // SAFETY: every request's buffer is a piece of `inp` or `out`, borrowed for this whole
        // function, and every request completes (MPI_Waitall) before it returns; the
        // communicator is valid while self lives.
        unsafe {
            for w in windows(inp.len(), p) {
                let mut r = ffi::RSMPI_REQUEST_NULL;
                let ptr = inp[w.clone()].as_mut_ptr().cast();
                ffi::MPI_Irecv(ptr, count(w.len()), ty, from as i32, tag, self.comm.as_raw(), &mut r);
                reqs.push(r);
            }
            for w in windows(out.len(), p) {
                let mut r = ffi::RSMPI_REQUEST_NULL;
                let ptr = out[w.clone()].as_ptr() as *mut std::ffi::c_void;
                ffi::MPI_Isend(ptr, count(w.len()), ty, to as i32, tag, self.comm.as_raw(), &mut r);
                reqs.push(r);
            }
            let rc = ffi::MPI_Waitall(reqs.len() as i32, reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE);
            assert_eq!(rc, 0, "MPI_Waitall of an exchange's pieces failed with code {rc}");
        }
    }
}

pub struct Comm {
    // Field order matters: communicators must be freed before the universe finalizes MPI.
    world: Channel,
    _node: Option<SimpleCommunicator>,
    /// The process's MPI (None in a `group`'s `Comm`: the world's owns it).
    _universe: Option<Universe>,
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
    ///
    /// `HVTRAIN_MPI_THREADS=serialized` asks for SERIALIZED only, to test the fallback of an MPI
    /// library without MPI_THREAD_MULTIPLE (no heartbeat thread; see `liveness.rs`).
    pub fn init() -> crate::error::Result<Comm> {
        use crate::error::Error;
        let ask = match std::env::var("HVTRAIN_MPI_THREADS").as_deref() {
            Ok("serialized") => Threading::Serialized,
            _ => Threading::Multiple,
        };
        let (universe, granted) =
            mpi::initialize_with_threading(ask).ok_or_else(|| Error::Mpi("MPI was already initialized".to_string()))?;
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
        if world.rank() == 0 && piece() < i32::MAX as usize {
            log::info!(
                "MPI calls carry at most {} elements each (HVTRAIN_MPI_PIECE): longer buffers go in pieces",
                piece()
            );
        }
        Ok(Comm {
            rank: world.rank() as usize,
            size: world.size() as usize,
            local_rank: node.rank() as usize,
            local_size: node.size() as usize,
            host,
            threading: granted,
            world: Channel::new(world),
            _node: Some(node),
            _universe: Some(universe),
        })
    }

    /// The ranks with the same `color` as a `Comm` of their own, ordered by `key`
    /// (`MPI_Comm_split`): a sweep's group, which trains one trial as a whole job would. Its
    /// `rank` and `size` are the group's; `local_rank` stays this process's place on its node
    /// (it picks the GPU, and groups on one node must not pick the same one); `local_size` is
    /// the group's ranks on this node (whether the group spans nodes). Collective over `self`.
    /// Its `abort` ends the whole job.
    pub fn group(&self, color: usize, key: usize) -> Comm {
        let g = self.world.split(color, key);
        let node = g.comm.split_shared(g.comm.rank());
        Comm {
            rank: g.rank,
            size: g.size,
            local_rank: self.local_rank,
            local_size: node.size() as usize,
            host: self.host.clone(),
            threading: self.threading,
            world: g,
            _node: Some(node),
            _universe: None,
        }
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

    /// The liveness thread's communicator: another duplicate of the world communicator, so
    /// heartbeats never match any other message. Collective (call it on every rank). Only
    /// worth having when MPI granted MPI_THREAD_MULTIPLE: the liveness thread calls MPI while
    /// the other threads are inside MPI too.
    pub fn beacon(&self) -> Beacon {
        Beacon::new(self.world.comm.duplicate())
    }

    /// End every rank of the job with `code` (of the whole job, also from a `group`'s
    /// `Comm`). Never returns.
    pub fn abort(&self, code: i32) -> ! {
        abort_world(code);
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

impl Channel {
    /// Overwrite `buf` on every rank with rank `root`'s.
    pub fn broadcast_f64_from(&self, root: usize, buf: &mut [f64]) {
        self.comm.process_at_rank(root as i32).broadcast_into(buf);
    }
}

/// The ranges of consecutive parts `counts` long.
pub fn parts_of(counts: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            at += c;
            at - c..at
        })
        .collect()
}

/// The overlap of two ranges (empty, at `b.start`, where none).
fn overlap(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> std::ops::Range<usize> {
    let (s, e) = (a.start.max(b.start), a.end.min(b.end));
    if s < e {
        s..e
    } else {
        b.start..b.start
    }
}

/// Where each rank's part starts in a gathered buffer of parts of `counts` elements.
fn offsets(counts: &[i32]) -> Vec<i32> {
    counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect()
}

/// Abort the whole MPI job from a context that holds no `Comm` (the panic hook, the
/// watchdog, the liveness thread). Does nothing when MPI is not running.
pub fn abort_world(code: i32) {
    if mpi::environment::is_initialized() && !mpi::environment::is_finalized() {
        // SAFETY: MPI is initialized and not finalized; MPI_Abort on COMM_WORLD is always valid then.
        unsafe {
            mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, code);
        }
    }
}
