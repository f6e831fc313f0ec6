//! Gradient buckets all-reduced by NCCL, GPU to GPU (`distribution.gpu_allreduce = "nccl"`), as
//! Horovod's `HOROVOD_GPU_OPERATIONS=NCCL` and PyTorch DDP do: one communicator for the data
//! group, bootstrapped from an `ncclUniqueId` that rank 0 makes and MPI broadcasts; each bucket
//! summed in float32 on a stream of its own (`ncclAllReduce`, then that stream synchronized,
//! so the bucket is complete when `reduce_device` returns, as the CUDA-aware MPI path promises
//! the engine). MPI keeps the control: agreement, stop votes, checkpoints, host buffers
//! (`reduce` on host slices goes through the MPI channel kept here).
//!
//! With `distribution.compression = "fp16"` or `"bf16"` a bucket travels in that precision,
//! as Horovod's `Compression.fp16` does over NCCL: packed on the GPU (`hv_pack_*`, the
//! rounding the host ring uses), summed by NCCL in that type (`ncclFloat16`/`ncclBfloat16`:
//! each hop adds in float and rounds back, as the host ring does), unpacked into the float32
//! bucket.
//!
//! With `distribution.hierarchical` (Horovod's `HOROVOD_HIERARCHICAL_ALLREDUCE` with NCCL):
//! the NCCL communicator spans a node only; a bucket is summed in the node by NCCL, the node
//! leaders (node rank 0) copy it to host memory and all-reduce it among themselves with MPI,
//! copy it back, and NCCL broadcasts it from the leader in the node.
//!
//! A rank that dies while the others wait inside NCCL: the liveness watchdog runs the abort
//! hook registered here (`ncclCommAbort`) before it ends the job, so no GPU is left spinning in
//! a collective (`parallel::liveness::on_abort`).
//!
//! Must not: pick the path (train/gpu_path.rs does), or run on a rank whose GPU another rank
//! of the communicator shares (NCCL refuses it; the choice never makes one).

use super::launch::config_1d;
use super::module::Kernels;
use super::nccl_lib::{self, Nccl, RawComm, UniqueId};
use crate::config::Compression;
use crate::parallel::comm::Channel;
use crate::parallel::reduce::Reducer;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, PushKernelArg};
use std::sync::Arc;

pub struct NcclReducer {
    /// MPI: host slices, and the bootstrap.
    chan: Channel,
    lib: &'static Nccl,
    /// Over `chan`'s ranks, or (hierarchical) over this rank's node.
    comm: RawComm,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Hierarchical: this node's ranks, and among the node leaders (on them only) with the
    /// host copies of a bucket.
    levels: Option<Levels>,
    /// The wire's precision, the pack/unpack kernels, and the packed bucket (grown on demand).
    wire: Compression,
    kernels: Arc<Kernels>,
    packed: Option<CudaSlice<u16>>,
}

struct Levels {
    _node: Channel,
    leaders: Option<(Channel, Vec<f32>, Vec<f32>)>,
}

// SAFETY: the communicator is used by one thread at a time (the engine's communication
// thread, or the main thread when overlap is off), as the MPI channel beside it.
unsafe impl Send for NcclReducer {}

/// A communicator address the abort hook may use from the watchdog's thread.
struct Aborter(RawComm, &'static Nccl);
// SAFETY: ncclCommAbort may be called from any thread, also while another is inside a
// collective on that communicator: that is what it is for.
unsafe impl Send for Aborter {}
unsafe impl Sync for Aborter {}

impl Aborter {
    fn abort(&self) {
        // SAFETY: the communicator lives until the process ends (the reducer never destroys
        // it: `into_channel` leaves it to the exit).
        unsafe { (self.1.comm_abort)(self.0) };
    }
}

/// An NCCL communicator over `group`'s ranks (collective over them; `rank`, this rank in the
/// world, for the error line), bootstrapped from an `ncclUniqueId` that the group's rank 0
/// makes and MPI broadcasts, its `ncclCommAbort` registered with the liveness watchdog. The
/// current thread has the GPU bound.
pub(super) fn communicator(lib: &'static Nccl, group: &Channel, rank: usize) -> Result<RawComm, String> {
    let mut id = UniqueId { internal: [0; 128] };
    if group.rank == 0 {
        // SAFETY: writes the 128-byte id.
        let rc = unsafe { (lib.get_unique_id)(&mut id) };
        if rc != 0 {
            // The other ranks wait in the broadcast below: an error here ends the job.
            fail(rank, "ncclGetUniqueId", lib.error(rc));
        }
    }
    let mut words = [0u64; 16];
    for (w, c) in words.iter_mut().zip(id.internal.chunks(8)) {
        *w = u64::from_le_bytes(std::array::from_fn(|i| c[i] as u8));
    }
    group.broadcast_u64(&mut words);
    for (c, w) in id.internal.chunks_mut(8).zip(words) {
        for (b, v) in c.iter_mut().zip(w.to_le_bytes()) {
            *b = v as std::ffi::c_char;
        }
    }
    let mut comm: RawComm = std::ptr::null_mut();
    // SAFETY: every rank of the group calls this with the same id and its own rank.
    let rc = unsafe { (lib.comm_init_rank)(&mut comm, group.size as i32, id, group.rank as i32) };
    if rc != 0 {
        return Err(format!("ncclCommInitRank: {}", lib.error(rc)));
    }
    let aborter = Aborter(comm, lib);
    crate::parallel::liveness::on_abort(Box::new(move || aborter.abort()));
    Ok(comm)
}

/// NCCL's words for a failure on `rank`, and the job ends: a collective or a message cannot
/// be half done.
pub(super) fn fail(rank: usize, what: &str, why: String) -> ! {
    crate::sys::say(format!("hvtrain: error on rank {rank}: {what}: {why}"));
    crate::parallel::comm::abort_world(1);
    crate::sys::hard_exit(1)
}

impl NcclReducer {
    /// A communicator over `chan`'s ranks (or, `hierarchical`, over each node's) on the GPU of
    /// `ctx` (collective over `chan`; every rank has loaded NCCL, the choice checked it).
    /// Errors name NCCL's reason.
    pub fn new(
        chan: Channel,
        ctx: Arc<CudaContext>,
        hierarchical: bool,
        (wire, kernels): (Compression, Arc<Kernels>),
    ) -> Result<NcclReducer, (Channel, String)> {
        let lib = match nccl_lib::load() {
            Ok(l) => l,
            Err(e) => return Err((chan, e)),
        };
        let levels = hierarchical.then(|| {
            let node = chan.split_node();
            let leader = node.rank == 0;
            let leaders = chan.split(usize::from(!leader), chan.rank);
            Levels { _node: node, leaders: leader.then_some((leaders, Vec::new(), Vec::new())) }
        });
        let group = levels.as_ref().map_or(&chan, |l| &l._node);
        if let Err(e) = ctx.bind_to_thread() {
            return Err((chan, format!("binding the GPU to this thread: {e}")));
        }
        let stream = match ctx.new_stream() {
            Ok(s) => s,
            Err(e) => return Err((chan, format!("a stream for NCCL: {e}"))),
        };
        let comm = match communicator(lib, group, chan.rank) {
            Ok(c) => c,
            Err(e) => return Err((chan, e)),
        };
        Ok(NcclReducer { chan, lib, comm, ctx, stream, levels, wire, kernels, packed: None })
    }

    /// `ncclAllReduce` of `n` values from `send` into `recv` (device addresses) in NCCL type
    /// `ty`, on this reducer's stream; a failure ends the job.
    fn all_reduce(&self, send: u64, recv: u64, n: usize, ty: std::ffi::c_int) {
        // SAFETY: as `reduce_device`'s caller promises for the float32 buckets, or the packed
        // scratch of n u16 (`reduce_packed`); the stream is ours.
        let rc = unsafe {
            (self.lib.all_reduce)(
                send as *const std::ffi::c_void,
                recv as *mut std::ffi::c_void,
                n,
                ty,
                nccl_lib::SUM,
                self.comm,
                self.stream.cu_stream() as *mut std::ffi::c_void,
            )
        };
        if rc != 0 {
            self.fail("ncclAllReduce", self.lib.error(rc));
        }
    }

    /// The compressed wire: `send` packed to fp16/bf16 into the scratch, summed there by NCCL
    /// in that type, unpacked into `recv` (n floats each), all on this reducer's stream.
    fn reduce_packed(&mut self, send: u64, recv: u64, n: usize) {
        use cudarc::driver::DevicePtrMut;
        let k = &self.kernels;
        let (pack, unpack, ty) = match self.wire {
            Compression::Fp16 => (&k.pack_f16, &k.unpack_f16, nccl_lib::FLOAT16),
            _ => (&k.pack_bf16, &k.unpack_bf16, nccl_lib::BFLOAT16),
        };
        if self.packed.as_ref().is_none_or(|p| p.len() < n) {
            self.packed = None;
            match self.stream.alloc_zeros::<u16>(n.max(1)) {
                Ok(p) => self.packed = Some(p),
                Err(e) => self.fail("allocating the packed bucket for NCCL", e.to_string()),
            }
        }
        let packed = self.packed.as_mut().expect("allocated above").device_ptr_mut(&self.stream).0;
        self.convert(pack, send, packed, n, "packing a bucket for NCCL");
        self.all_reduce(packed, packed, n, ty);
        self.convert(unpack, packed, recv, n, "unpacking a bucket from NCCL");
    }

    /// `hv_pack_*` or `hv_unpack_*` (`f`) from `src` into `dst` (device addresses of n values
    /// each) on this reducer's stream; a failure ends the job.
    fn convert(&self, f: &cudarc::driver::CudaFunction, src: u64, dst: u64, n: usize, what: &str) {
        let n64 = n as i64;
        let mut l = self.stream.launch_builder(f);
        l.arg(&src).arg(&dst).arg(&n64);
        // SAFETY: hv_pack_*(const float*, unsigned short*, long long) or hv_unpack_*(const
        // unsigned short*, float*, long long): the caller's float32 buffers hold n floats (its
        // promise), the packed scratch at least n halves.
        if let Err(e) = unsafe { l.launch(config_1d(n.max(1))) } {
            self.fail(what, e.to_string());
        }
    }

    /// Wait for this reducer's stream; a failure ends the job with NCCL's asynchronous error.
    fn wait(&self, what: &str) {
        if let Err(e) = self.stream.synchronize() {
            let mut async_rc = 0;
            // SAFETY: a live communicator.
            unsafe { (self.lib.comm_get_async_error)(self.comm, &mut async_rc) };
            self.fail(what, format!("{e}; {}", self.lib.error(async_rc)));
        }
    }

    /// Hierarchical, after the node's sum is in `recv`: the leaders' MPI all-reduce through
    /// host memory, then NCCL's broadcast from the leader in the node.
    fn between_nodes(&mut self, recv: u64, n: usize) {
        let rank = self.chan.rank;
        let Some(levels) = self.levels.as_mut() else { return };
        if let Some((leaders, sent, got)) = levels.leaders.as_mut().filter(|l| l.0.size > 1) {
            sent.resize(n, 0.0);
            got.resize(n, 0.0);
            // SAFETY: recv holds n floats, idle (the stream was synchronized).
            if let Err(e) = unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut sent[..], recv) } {
                fail(rank, "copying a bucket to the host", e.to_string());
            }
            leaders.all_reduce_sum_f32(sent, got);
            // SAFETY: as above.
            if let Err(e) = unsafe { cudarc::driver::result::memcpy_htod_sync(recv, &got[..]) } {
                fail(rank, "copying a bucket back to the GPU", e.to_string());
            }
        }
        // SAFETY: n floats at recv; the stream is ours.
        let rc = unsafe {
            (self.lib.broadcast)(
                recv as *const std::ffi::c_void,
                recv as *mut std::ffi::c_void,
                n,
                nccl_lib::FLOAT32,
                0,
                self.comm,
                self.stream.cu_stream() as *mut std::ffi::c_void,
            )
        };
        if rc != 0 {
            self.fail("ncclBroadcast", self.lib.error(rc));
        }
        self.wait("ncclBroadcast (waiting for it)");
    }

    /// NCCL's words for a failure, and the job ends: a collective cannot be half done.
    fn fail(&self, what: &str, why: String) -> ! {
        fail(self.chan.rank, what, why)
    }
}

impl Reducer for NcclReducer {
    fn reduce(&mut self, grads: &[f32], out: &mut [f32]) {
        self.chan.all_reduce_sum_f32(grads, out);
    }
    fn takes_device_pointers(&self) -> bool {
        true
    }
    unsafe fn reduce_device(&mut self, send: u64, recv: u64, n: usize) {
        if let Err(e) = self.ctx.bind_to_thread() {
            self.fail("binding the GPU to the communication thread", e.to_string());
        }
        if self.wire == Compression::None {
            self.all_reduce(send, recv, n, nccl_lib::FLOAT32);
        } else {
            self.reduce_packed(send, recv, n);
        }
        self.wait("ncclAllReduce (waiting for it)");
        self.between_nodes(recv, n);
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn wire(&self) -> Compression {
        self.wire
    }
    fn what(&self) -> &'static str {
        match (self.levels.is_some(), self.wire) {
            (true, Compression::None) => "all-reduce (NCCL in the node, MPI among nodes)",
            (true, Compression::Fp16) => "all-reduce fp16 (NCCL in the node, MPI among nodes)",
            (true, Compression::Bf16) => "all-reduce bf16 (NCCL in the node, MPI among nodes)",
            (false, Compression::None) => "all-reduce (NCCL)",
            (false, Compression::Fp16) => "all-reduce fp16 (NCCL)",
            (false, Compression::Bf16) => "all-reduce bf16 (NCCL)",
        }
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        // The NCCL communicator is left to the process's end (the abort hook may still name
        // it); the channel goes back.
        Some(self.chan)
    }
}
