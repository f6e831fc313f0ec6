//! Part of the MPI module (a child of `comm.rs`): a channel's point-to-point floats, a buffer
//! sent without waiting (`Channel::isend_f32`: the buffer travels with its `Outgoing` until
//! `wait` hands it back) and received blocking (`Channel::recv_f32`), in pieces past `piece()`,
//! for the pipeline stages' messages, Adasum's folds and the starting state sent by rank 0.
//!
//! Must not: free or move a buffer MPI may still read (`Outgoing`'s `Drop` leaks it instead).

use super::{count, piece, windows, Channel};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::traits::*;

impl Channel {
    /// Start sending `buf` to rank `to` with `tag` (`MPI_Isend`); the buffer travels with the
    /// request until `Outgoing::wait` hands it back.
    /// Past one piece, several sends of the one buffer (`recv_f32` receives them in order).
    pub fn isend_f32(&self, to: usize, tag: i32, buf: Vec<f32>) -> Outgoing {
        let mut o = Outgoing { reqs: Vec::new(), buf: Some(buf) };
        let b = o.buf.as_ref().expect("just set");
        // Always at least one message, an empty one for an empty buffer (as one send was).
        let ws: Vec<std::ops::Range<usize>> =
            if b.is_empty() { vec![0..0] } else { windows(b.len(), piece()).collect() };
        for w in ws {
            let ptr = b[w.clone()].as_ptr();
            // SAFETY: the buffer is heap memory owned by `o`, which neither moves nor frees it
            // while the requests are active (`wait` completes them first; `Drop` leaks it
            // otherwise); the communicator outlives the requests (both belong to the main
            // thread's step).
            unsafe {
                let mut r = ffi::RSMPI_REQUEST_NULL;
                ffi::MPI_Isend(
                    ptr as *mut std::ffi::c_void,
                    count(w.len()),
                    f32::equivalent_datatype().as_raw(),
                    to as i32,
                    tag,
                    self.comm.as_raw(),
                    &mut r,
                );
                o.reqs.push(r);
            }
        }
        o
    }

    /// Receive exactly `buf.len()` floats from rank `from` with `tag` (blocking; messages
    /// from one rank with one tag arrive in the order they were sent; past one piece, as the
    /// pieces `send_f32` and `isend_f32` send).
    pub fn recv_f32(&self, from: usize, tag: i32, buf: &mut [f32]) {
        if buf.is_empty() {
            self.comm.process_at_rank(from as i32).receive_into_with_tag(buf, tag);
            return;
        }
        for b in buf.chunks_mut(piece()) {
            self.comm.process_at_rank(from as i32).receive_into_with_tag(b, tag);
        }
    }
}

/// A non-blocking send in flight (one request per piece) and the buffer it reads.
pub struct Outgoing {
    reqs: Vec<ffi::MPI_Request>,
    buf: Option<Vec<f32>>,
}

impl Outgoing {
    /// Wait for the send to complete (`MPI_Wait`) and take the buffer back.
    pub fn wait(mut self) -> Vec<f32> {
        for r in &mut self.reqs {
            // SAFETY: `r` is our active request (or null after completion, which MPI_Wait accepts).
            unsafe { ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE) };
        }
        self.buf.take().expect("waited once")
    }
}

impl Drop for Outgoing {
    /// A send never waited for (an error ends the step): let MPI finish it on its own and
    /// leak the buffer it may still read.
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            for r in &mut self.reqs {
                // SAFETY: `r` is our active request; freeing it lets the send complete unobserved.
                unsafe { ffi::MPI_Request_free(r) };
            }
            std::mem::forget(buf);
        }
    }
}
