//! `Vote`: a started non-blocking OR over a channel's ranks (`Channel::ivote`), waited for
//! with or without a time limit.
//!
//! Must not: start collectives (`Channel` does).

use mpi::ffi;
use std::time::{Duration, Instant};

/// A started `Channel::ivote`.
pub struct Vote {
    pub(super) req: ffi::MPI_Request,
    /// [this rank's flag, the OR of all].
    pub(super) buf: Box<[u64; 2]>,
    pub(super) done: bool,
}

impl Vote {
    /// Wait (polling, yielding the core) until every rank has started this vote; whether any
    /// voted yes.
    pub fn wait(&mut self) -> bool {
        self.wait_for(Duration::MAX).expect("no time limit")
    }

    /// `wait`, for at most `limit`: None when some rank has not started the vote by then.
    pub fn wait_for(&mut self, limit: Duration) -> Option<bool> {
        let t = Instant::now();
        while !self.done {
            let mut flag: std::ffi::c_int = 0;
            // SAFETY: `req` is our active request (or null once complete, which MPI_Test accepts).
            unsafe { ffi::MPI_Test(&mut self.req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            self.done = flag != 0;
            if !self.done {
                if t.elapsed() >= limit {
                    return None;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Some(self.buf[1] != 0)
    }
}

impl Drop for Vote {
    /// A vote not waited for (the job is ending) is left to MPI: a collective's request cannot
    /// be freed or cancelled, so its buffer is leaked (16 bytes).
    fn drop(&mut self) {
        if !self.done {
            std::mem::forget(std::mem::replace(&mut self.buf, Box::new([0; 2])));
        }
    }
}

// SAFETY: the request and its buffer move together; only the main thread of a worker uses them.
unsafe impl Send for Vote {}
