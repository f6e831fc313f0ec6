//! The communication engine: reduces gradient buckets on its own thread while backward goes
//! on (Horovod's background loop, without the per-cycle negotiation: the plan is fixed and
//! every rank produces tensors in the same order).
//!
//! Per step the training loop calls `begin_step`, then `tensor_ready` as backward finishes
//! each tensor (a bucket is sent as soon as its last tensor is ready, when overlap is on),
//! then `flush` (sends whatever is left: everything, when overlap is off), then `wait_next`
//! once per bucket, in order, applying the optimizer to each bucket as it arrives. The same
//! buckets are reduced by the same calls either way, so overlap does not change the result.
//!
//! Buffers: the engine reads `grads[bucket]` and writes `reduced[bucket]` through raw
//! pointers set by `begin_step`. The contract (kept by `train.rs`, and the reason those
//! entry points are `unsafe`): between `begin_step` and the `wait_next` that returns a
//! bucket, the caller neither writes that bucket's gradients after declaring them ready nor
//! touches its part of `reduced`, and both buffers outlive the step.

use super::comm::Channel;
use super::compress::{self, Scratch};
use super::fusion::FusionPlan;
use super::timeline::{Timeline, COMM_TID, MAIN_TID};
use super::watchdog::{SharedWatchdog, COMM, MAIN};
use crate::config::Compression;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Work {
    bucket: usize,
    src: *const f32,
    dst: *mut f32,
    len: usize,
    step: u64,
}

// SAFETY: the pointers address disjoint bucket ranges that the main thread leaves alone
// until the bucket comes back (see the module contract).
unsafe impl Send for Work {}

struct Inline {
    chan: Channel,
    scratch: Scratch,
    timeline: Option<Arc<Timeline>>,
    watchdog: Option<SharedWatchdog>,
}

pub struct Engine {
    plan: FusionPlan,
    overlap: bool,
    compression: Compression,
    remaining: Vec<usize>,
    sent: Vec<bool>,
    next: usize,
    step: u64,
    active: bool,
    grads: *const f32,
    reduced: *mut f32,
    work: Option<Sender<Work>>,
    done: Option<Receiver<usize>>,
    thread: Option<std::thread::JoinHandle<Channel>>,
    /// With overlap off, buckets are reduced right here on the calling thread: no hand-off.
    inline: Option<Inline>,
    /// Time the main thread spent waiting for buckets (exposed communication), since reset.
    pub exposed: Duration,
}

impl Engine {
    /// `chan` is None on a single rank: buckets are then copied, nothing travels.
    pub fn new(
        chan: Option<Channel>,
        plan: FusionPlan,
        overlap: bool,
        compression: Compression,
        timeline: Option<Arc<Timeline>>,
        watchdog: Option<SharedWatchdog>,
    ) -> Engine {
        let (mut work, mut done, mut thread, mut inline) = (None, None, None, None);
        match chan {
            Some(chan) if overlap => {
                let (wtx, wrx) = channel::<Work>();
                let (dtx, drx) = channel::<usize>();
                let t = std::thread::Builder::new()
                    .name("hvtrain-comm".into())
                    .spawn(move || comm_loop(chan, wrx, dtx, compression, timeline, watchdog))
                    .expect("spawn communication thread");
                (work, done, thread) = (Some(wtx), Some(drx), Some(t));
            }
            Some(chan) => inline = Some(Inline { chan, scratch: Scratch::default(), timeline, watchdog }),
            None => {}
        }
        let n = plan.buckets.len();
        Engine {
            remaining: vec![0; n],
            sent: vec![false; n],
            plan,
            overlap,
            compression,
            next: 0,
            step: 0,
            active: false,
            grads: std::ptr::null(),
            reduced: std::ptr::null_mut(),
            work,
            done,
            thread,
            inline,
            exposed: Duration::ZERO,
        }
    }

    pub fn plan(&self) -> &FusionPlan {
        &self.plan
    }

    /// What the optimizer multiplies reduced gradients by: 1, since each rank already divided
    /// its gradients by the step's global row count, so the sum (exact or compressed) is the
    /// mean.
    pub fn grad_scale(&self) -> f32 {
        1.0
    }

    /// Start a step whose gradients land in `grads` and whose reduced gradients go to `reduced`.
    ///
    /// # Safety
    /// See the module contract: both buffers stay alive and are left alone as described
    /// until every bucket of this step has come back from `wait_next`.
    pub unsafe fn begin_step(&mut self, step: u64, grads: &[f32], reduced: &mut [f32]) {
        assert!(grads.len() >= self.plan.total_len() && reduced.len() >= self.plan.total_len());
        assert!(!self.active, "begin_step before the previous step's buckets all came back");
        self.active = true;
        for (b, m) in self.plan.members.iter().enumerate() {
            self.remaining[b] = m.len();
            self.sent[b] = false;
        }
        self.next = 0;
        self.step = step;
        self.grads = grads.as_ptr();
        self.reduced = reduced.as_mut_ptr();
    }

    /// Backward has finished tensor `t`; with overlap on, its bucket goes out once complete.
    pub fn tensor_ready(&mut self, t: usize) {
        let b = self.plan.bucket_of[t];
        self.remaining[b] -= 1;
        if self.overlap && self.remaining[b] == 0 {
            self.send(b);
        }
    }

    /// Send every bucket not sent yet (all of them when overlap is off).
    pub fn flush(&mut self) {
        for b in 0..self.plan.buckets.len() {
            if !self.sent[b] {
                self.send(b);
            }
        }
    }

    fn send(&mut self, b: usize) {
        self.sent[b] = true;
        let r = self.plan.buckets[b].clone();
        // SAFETY: in bounds (checked in begin_step); disjoint from what the main thread
        // touches until this bucket comes back.
        let (src, dst) = unsafe { (self.grads.add(r.start), self.reduced.add(r.start)) };
        if let Some(tx) = &self.work {
            tx.send(Work { bucket: b, src, dst, len: r.len(), step: self.step }).expect("communication thread alive");
        } else if let Some(inl) = &mut self.inline {
            let t = Instant::now();
            // SAFETY: as above; this thread is the only one touching the bucket now.
            let (src, dst) =
                unsafe { (std::slice::from_raw_parts(src, r.len()), std::slice::from_raw_parts_mut(dst, r.len())) };
            let w = Bucket { index: b, step: self.step, tid: MAIN_TID, slot: MAIN };
            reduce_bucket(&inl.chan, src, dst, self.compression, &mut inl.scratch, &inl.timeline, &inl.watchdog, &w);
            self.exposed += t.elapsed();
        } else {
            // SAFETY: as above; single rank, so the "sum" is a copy.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, r.len()) };
        }
    }

    /// Wait for the next bucket in reduction order; returns its index, or None when the step
    /// is complete. Every bucket must have been sent (`flush`).
    pub fn wait_next(&mut self) -> Option<usize> {
        if self.next == self.plan.buckets.len() {
            self.active = false;
            return None;
        }
        let b = self.next;
        assert!(self.sent[b], "bucket {b} waited for before it was sent (flush first)");
        if let Some(rx) = &self.done {
            let t = Instant::now();
            let got = rx.recv().expect("communication thread ended early");
            self.exposed += t.elapsed();
            debug_assert_eq!(got, b, "buckets come back in the order they were sent");
        }
        self.next += 1;
        Some(b)
    }

    /// Reduce one buffer outright (benchmarks): send every bucket and wait for all.
    pub fn reduce_all(&mut self, grads: &[f32], reduced: &mut [f32]) {
        // SAFETY: both borrows outlive this call, which waits for every bucket.
        unsafe { self.begin_step(self.step + 1, grads, reduced) };
        self.flush();
        while self.wait_next().is_some() {}
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.work = None; // closes the queue: the thread ends
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Engine {
    /// Stop the communication thread and take its channel back (benchmarks reuse it, since
    /// duplicating a communicator is a collective of its own).
    pub fn into_channel(mut self) -> Channel {
        if let Some(inline) = self.inline.take() {
            return inline.chan;
        }
        self.work = None;
        self.thread.take().expect("an engine with a channel").join().expect("communication thread ended cleanly")
    }
}

fn comm_loop(
    chan: Channel,
    work: Receiver<Work>,
    done: Sender<usize>,
    compression: Compression,
    timeline: Option<Arc<Timeline>>,
    watchdog: Option<SharedWatchdog>,
) -> Channel {
    let mut scratch = Scratch::default();
    while let Ok(w) = work.recv() {
        // SAFETY: the module contract: this range is ours until we report it done.
        let (src, dst) =
            unsafe { (std::slice::from_raw_parts(w.src, w.len), std::slice::from_raw_parts_mut(w.dst, w.len)) };
        let b = Bucket { index: w.bucket, step: w.step, tid: COMM_TID, slot: COMM };
        reduce_bucket(&chan, src, dst, compression, &mut scratch, &timeline, &watchdog, &b);
        if done.send(w.bucket).is_err() {
            break;
        }
    }
    chan
}

/// Which bucket is being reduced, by which thread (for the timeline and the watchdog).
struct Bucket {
    index: usize,
    step: u64,
    tid: u32,
    slot: usize,
}

/// Reduce one bucket: exact float32 sum through MPI_Allreduce, or the compressed ring.
#[allow(clippy::too_many_arguments)]
fn reduce_bucket(
    chan: &Channel,
    src: &[f32],
    dst: &mut [f32],
    compression: Compression,
    scratch: &mut Scratch,
    timeline: &Option<Arc<Timeline>>,
    watchdog: &Option<SharedWatchdog>,
    b: &Bucket,
) {
    let _guard = watchdog.as_ref().map(|wd| wd.guard(b.slot, "all-reduce of a gradient bucket", b.step));
    let t = Instant::now();
    match compression {
        Compression::None => chan.all_reduce_sum_f32(src, dst),
        kind => compress::ring_allreduce_sum(chan, src, dst, kind, scratch),
    }
    if let Some(tl) = timeline {
        let what = match compression {
            Compression::None => "all-reduce",
            Compression::Fp16 => "all-reduce fp16 (pack, ring, unpack)",
            Compression::Bf16 => "all-reduce bf16 (pack, ring, unpack)",
        };
        tl.span(b.tid, format!("{what} bucket {} ({} KiB)", b.index, src.len() * 4 / 1024), t, b.step);
    }
}
