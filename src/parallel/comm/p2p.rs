//! Tagged point-to-point messages on a private duplicate of the world communicator, for the
//! parameter servers (`parallel/ps`): blocking sends, receives from one peer, and a receive
//! from whoever sends next. Messages are `u32` words (a header, then float32 bits), so one
//! message carries both the bookkeeping and the data without a second round trip.
//!
//! `Link` is a copy of the communicator's handle: the worker's communication thread (pushes
//! and pulls during a step) and its main thread (pulls, snapshots, statistics between steps,
//! when the communication thread is idle) share one, and tags keep their messages apart.
//!
//! Must not: match messages of another communicator (it owns a private duplicate).

use super::Comm;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::traits::*;
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
pub struct Link {
    raw: ffi::MPI_Comm,
    pub rank: usize,
}

// SAFETY: a communicator handle may be used from any thread when MPI granted at least
// SERIALIZED and the threads never call MPI at the same time on it (see the module comment:
// the worker's threads take turns; a server has one thread).
unsafe impl Send for Link {}
unsafe impl Sync for Link {}

/// A message from `receive_any`: who sent it, its tag, its words.
pub struct Message {
    pub from: usize,
    pub tag: i32,
    pub words: Vec<u32>,
}

impl Comm {
    /// A private duplicate of the world communicator for the parameter servers' messages.
    /// Collective. Never freed: it lives until MPI_Finalize.
    pub fn link(&self) -> Link {
        let c = self.world.comm.duplicate();
        let l = Link { raw: c.as_raw(), rank: self.rank };
        std::mem::forget(c);
        l
    }
}

fn ty() -> ffi::MPI_Datatype {
    u32::equivalent_datatype().as_raw()
}

impl Link {
    /// Send `words` to `to` with `tag` (MPI_Send: returns once the buffer may be reused).
    pub fn send(&self, to: usize, tag: i32, words: &[u32]) {
        let n = i32::try_from(words.len()).expect("a message under 2^31 words");
        // SAFETY: the buffer holds n words; the communicator lives until MPI_Finalize.
        let rc = unsafe { ffi::MPI_Send(words.as_ptr().cast(), n, ty(), to as i32, tag, self.raw) };
        assert_eq!(rc, 0, "MPI_Send failed with code {rc}");
    }

    /// Receive the next message from `from` with `tag` into a vector of its length.
    pub fn receive(&self, from: usize, tag: i32) -> Vec<u32> {
        self.receive_matching(from as i32, tag).words
    }

    /// Receive the next message from `from` with `tag` into `out`, which must be its length.
    /// Polls like `receive_any`: a worker waiting for a held-back reply leaves the core to
    /// the server and the other workers (ranks often outnumber cores).
    pub fn receive_into(&self, from: usize, tag: i32, out: &mut [u32]) {
        self.wait_for(from as i32, tag);
        let n = i32::try_from(out.len()).expect("a message under 2^31 words");
        let mut st = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: `out` holds n words; a longer message is an MPI error (abort).
        let rc =
            unsafe { ffi::MPI_Recv(out.as_mut_ptr().cast(), n, ty(), from as i32, tag, self.raw, st.as_mut_ptr()) };
        assert_eq!(rc, 0, "MPI_Recv failed with code {rc}");
    }

    /// The next message from `from` with `tag` if one has arrived (MPI_Iprobe), else `None`
    /// at once.
    pub fn try_receive(&self, from: usize, tag: i32) -> Option<Vec<u32>> {
        self.probe(from as i32, tag).map(|_| self.receive_matching(from as i32, tag).words)
    }

    /// Poll (MPI_Iprobe) until a message from `from` with `tag` is there; its (source, tag).
    /// Spins (yielding) for 200 µs, then sleeps 50 µs between polls.
    fn wait_for(&self, from: i32, tag: i32) -> (i32, i32) {
        self.poll(from, tag, None, false).expect("no limit")
    }

    /// One probe (MPI_Iprobe): the (source, tag) of a message from `from` with `tag`, if one
    /// has arrived.
    fn probe(&self, from: i32, tag: i32) -> Option<(i32, i32)> {
        let mut flag = 0;
        let mut st = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: a probe on a valid communicator; `st` is written when flag is set.
        unsafe { ffi::MPI_Iprobe(from, tag, self.raw, &mut flag, st.as_mut_ptr()) };
        // SAFETY: set by the successful probe.
        (flag != 0).then(|| unsafe { st.assume_init() }).map(|st| (st.MPI_SOURCE, st.MPI_TAG))
    }

    /// Probe until a message is there or `limit` has passed. Brisk: yield for 200 µs, then
    /// sleep 50 µs between probes (a reply due any moment). Patient: sleep from 50 µs,
    /// doubling up to 2 ms (waits that may last minutes).
    fn poll(&self, from: i32, tag: i32, limit: Option<Duration>, patient: bool) -> Option<(i32, i32)> {
        let t = Instant::now();
        let mut nap = Duration::from_micros(50);
        loop {
            if let Some(found) = self.probe(from, tag) {
                return Some(found);
            }
            if limit.is_some_and(|l| t.elapsed() >= l) {
                return None;
            }
            if patient {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(2));
            } else if t.elapsed() > Duration::from_micros(200) {
                std::thread::sleep(nap);
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The next message with `tag` from anyone, or None after `wait` (polling patiently: up to
    /// 2 ms between probes, for waits that may last minutes, such as a sweep's scheduler
    /// between reports).
    pub fn receive_any_within(&self, tag: i32, wait: Duration) -> Option<Message> {
        // SAFETY: MPI_ANY_SOURCE is a plain integer constant.
        let any_src = unsafe { ffi::RSMPI_ANY_SOURCE };
        self.poll(any_src, tag, Some(wait), true).map(|(from, tag)| self.receive_matching(from, tag))
    }

    /// The next message from `from` with `tag`, however long it takes, probing as
    /// `receive_any_within` does: an idle rank waiting for work leaves its core to the
    /// ranks that train.
    pub fn receive_slowly(&self, from: usize, tag: i32) -> Vec<u32> {
        let (f, t) = self.poll(from as i32, tag, None, true).expect("no limit");
        self.receive_matching(f, t).words
    }

    /// The next message from anyone, with any tag, polling as `receive_into` does, so a
    /// waiting server does not spin on a core that workers need.
    pub fn receive_any(&self) -> Message {
        // SAFETY: MPI_ANY_SOURCE / MPI_ANY_TAG are plain integer constants.
        let (any_src, any_tag) = unsafe { (ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG) };
        let (from, tag) = self.wait_for(any_src, any_tag);
        self.receive_matching(from, tag)
    }

    fn receive_matching(&self, from: i32, tag: i32) -> Message {
        let mut st = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        let mut count = 0;
        // SAFETY: a blocking probe for a message we then receive whole.
        unsafe {
            ffi::MPI_Probe(from, tag, self.raw, st.as_mut_ptr());
            ffi::MPI_Get_count(st.as_ptr(), ty(), &mut count);
        }
        // SAFETY: set by MPI_Probe.
        let st = unsafe { st.assume_init() };
        let mut words = vec![0u32; count.max(0) as usize];
        let mut st2 = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: `words` holds the probed count; matching the probed source and tag (MPI keeps
        // the order of messages between one pair on one tag, and only one thread receives).
        let rc = unsafe {
            ffi::MPI_Recv(words.as_mut_ptr().cast(), count, ty(), st.MPI_SOURCE, st.MPI_TAG, self.raw, st2.as_mut_ptr())
        };
        assert_eq!(rc, 0, "MPI_Recv failed with code {rc}");
        Message { from: st.MPI_SOURCE as usize, tag: st.MPI_TAG, words }
    }
}
