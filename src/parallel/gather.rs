//! The layer gathers of `shard = "parameters"` (ZeRO stage 3) on a thread of their own, so
//! that the next layer's pieces travel while this layer computes (FSDP's forward and
//! backward prefetch): the main thread puts this rank's pieces of a layer into a window and
//! hands the window over by ownership (`start`); the thread all-gathers the layer's segments
//! over the data group on a communicator of its own and hands the window back (`wait`),
//! in the order they were started.
//!
//! Every rank starts the same gathers in the same order (the step's fetch order, which does not
//! depend on the rank), so the thread's collectives line up without any negotiation.
//!
//! Must not: know which layer a window holds or when one is needed (`step::shard` does), or
//! share a window between threads (windows move by ownership, as the engine's buckets do).

use super::comm::Channel;
use super::engine::HostBuf;
use super::shard::{ring_all_gather, Path};
use super::timeline::{Timeline, GATHER_TID};
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One layer to gather: in `buf`, each segment (window positions) holds this rank's part, of
/// parts `counts` long in rank order; afterwards every rank's.
struct Job<T> {
    buf: T,
    segments: Vec<(Range<usize>, Vec<usize>)>,
    name: String,
    step: u64,
}

/// The gather thread and the windows in flight on it.
pub struct Gatherer<T: HostBuf> {
    to: Option<Sender<Job<T>>>,
    from: Receiver<T>,
    thread: Option<JoinHandle<()>>,
    in_flight: usize,
    /// Time the main thread waited in `wait` (the gathers it could not hide).
    pub waited: Duration,
}

impl<T: HostBuf> Gatherer<T> {
    /// The thread, with `chan` (a communicator of the data group that nobody else uses) and
    /// `path` (how the parts travel: `Sharder`'s).
    pub fn start(chan: Channel, path: Path, timeline: Option<Arc<Timeline>>) -> Gatherer<T> {
        let (to, jobs) = channel::<Job<T>>();
        let (done, from) = channel::<T>();
        let thread = std::thread::Builder::new()
            .name("hvtrain-gather".into())
            .spawn(move || {
                while let Ok(Job { mut buf, segments, name, step }) = jobs.recv() {
                    let t = Instant::now();
                    for (seg, counts) in &segments {
                        let part = &mut buf.host_mut()[seg.clone()];
                        match path {
                            Path::Mpi => chan.all_gather_parts_f32(part, counts),
                            Path::Ring => ring_all_gather(&chan, part, counts),
                        }
                    }
                    if let Some(tl) = &timeline {
                        tl.span(GATHER_TID, name, t, step);
                    }
                    if done.send(buf).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn the layer-gather thread");
        Gatherer { to: Some(to), from, thread: Some(thread), in_flight: 0, waited: Duration::ZERO }
    }

    /// Gather `segments` of `buf` (each: window positions holding this rank's part, the parts'
    /// lengths in rank order) on the thread; `name` for the timeline.
    pub fn start_gather(&mut self, buf: T, segments: Vec<(Range<usize>, Vec<usize>)>, name: String, step: u64) {
        let to = self.to.as_ref().expect("the gather thread runs");
        to.send(Job { buf, segments, name, step }).expect("the gather thread ended early");
        self.in_flight += 1;
    }

    /// The window gathered first of those in flight (one must be).
    pub fn wait(&mut self) -> T {
        assert!(self.in_flight > 0, "a wait without a gather in flight");
        let t = Instant::now();
        let buf = self.from.recv().expect("the gather thread ended early");
        self.waited += t.elapsed();
        self.in_flight -= 1;
        buf
    }
}

impl<T: HostBuf> Drop for Gatherer<T> {
    fn drop(&mut self) {
        // Closing the queue ends the thread once the gathers in flight are done (every rank
        // started them, so they complete).
        self.to.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
