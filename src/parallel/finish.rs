//! The end limit. After the heartbeats end (every rank passed their final barrier, so every
//! output is written and synced), two waits remain that a rank stopped, hung or gone right
//! then would make endless: this final handshake and `MPI_Finalize`. The handshake is a hub
//! over the liveness communicator: every rank tells rank 0 it is done, rank 0 tells every rank
//! to go once all are; each waits at most `distribution.finish_seconds` (rank 0, which can name
//! the ranks that did not arrive, a little less than the others). `MPI_Finalize` then runs under
//! the alarm of `startup.rs`. A wait that runs out prints one line that says every output is
//! complete and which rank did not finish, and ends the job with `EXIT_HUNG_AT_EXIT`, so that a
//! script tells "done, a rank hung at exit" (5) from "failed" (1, 3, 4).
//!
//! Must not: run before the final outputs are written, or call MPI outside `comm.rs`.

use super::comm::{Beacon, Pending, BEAT_WORDS};
use std::time::{Duration, Instant};

/// Exit code when every output is complete and a rank did not finish (the handshake or
/// MPI_Finalize ran out of time).
pub const EXIT_HUNG_AT_EXIT: i32 = 5;

const FIN: u64 = 0x4876_4649_4E00; // "HvFIN"
const DONE: u64 = 1;
const GO: u64 = 2;
const POLL: Duration = Duration::from_millis(20);

fn message(kind: u64) -> [u64; BEAT_WORDS] {
    let mut m = [0; BEAT_WORDS];
    m[0] = FIN;
    m[1] = kind;
    m
}

/// How long rank 0 waits for the others, and the others for rank 0 (longer, so that rank 0,
/// which knows who is missing, speaks first).
pub fn waits(secs: f64) -> (Duration, Duration) {
    (Duration::from_secs_f64(secs), Duration::from_secs_f64(secs * 1.5 + 2.0))
}

/// Receive from `from` until a handshake message of `kind` arrives. The handshake has its own
/// tag: a heartbeat receive that the liveness thread posted just before it ended (and then
/// cancelled, too late) could otherwise take a rank's "done" and lose it.
struct Await {
    from: usize,
    recv: Pending,
    done: bool,
}

impl Await {
    fn new(b: &Beacon, from: usize) -> Await {
        Await { from, recv: b.irecv_end(from), done: false }
    }

    fn poll(&mut self, b: &Beacon, kind: u64) -> bool {
        while !self.done && self.recv.test() {
            let m = self.recv.message();
            if m[0] == FIN && m[1] == kind {
                self.done = true;
            } else {
                self.recv = b.irecv_end(self.from);
            }
        }
        self.done
    }
}

/// Collective over `b`'s ranks: Ok once every rank reached the end, or the line that says who
/// did not (the caller prints it and ends the job with `EXIT_HUNG_AT_EXIT`).
pub fn handshake(b: &Beacon, host: &str, secs: f64) -> Result<(), String> {
    if b.size == 1 {
        return Ok(());
    }
    let (hub_wait, spoke_wait) = waits(secs);
    let t0 = Instant::now();
    let complete = "every output is complete (written and synced before the end)";
    if b.rank == 0 {
        let mut waiting: Vec<Await> = (1..b.size).map(|r| Await::new(b, r)).collect();
        while t0.elapsed() < hub_wait {
            waiting.retain_mut(|w| !w.poll(b, DONE));
            if waiting.is_empty() {
                let mut sends: Vec<Pending> = (1..b.size).map(|r| b.isend_end(r, &message(GO))).collect();
                let t = Instant::now();
                while !sends.iter_mut().all(Pending::test) && t.elapsed() < hub_wait {
                    std::thread::sleep(POLL);
                }
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
        let missing: Vec<String> = waiting.iter().map(|w| w.from.to_string()).collect();
        return Err(format!(
            "hvtrain: done on rank 0 ({host}): {complete}; rank(s) {} did not finish within {secs} s of the end \
             (stopped, hung or gone after training; distribution.finish_seconds, HVTRAIN_FINISH_SECONDS): ending the \
             job with exit code {EXIT_HUNG_AT_EXIT} (done, a rank hung at exit)",
            missing.join(", ")
        ));
    }
    let mut send = b.isend_end(0, &message(DONE));
    let mut go = Await::new(b, 0);
    while t0.elapsed() < spoke_wait {
        if go.poll(b, GO) {
            let _ = send.test();
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
    Err(format!(
        "hvtrain: done on rank {} ({host}): {complete}; rank 0 did not confirm the end within {:.0} s (rank 0, or a \
         rank it waits for, did not finish: stopped, hung or gone after training; distribution.finish_seconds): ending \
         the job with exit code {EXIT_HUNG_AT_EXIT} (done, a rank hung at exit)",
        b.rank,
        spoke_wait.as_secs_f64()
    ))
}

/// The line the alarm prints when `MPI_Finalize` does not return within `secs`.
pub fn stopped_finalize_line(rank: usize, host: &str, secs: f64, code: i32) -> String {
    format!(
        "hvtrain: stopped on rank {rank} ({host}) with the stop checkpoint complete; MPI_Finalize did not return \
         within {secs} s (the launcher, signalled too, is ending the job): exiting with code {code}"
    )
}

/// The line of a rank whose MPI_Finalize did not return after a completed run.
pub fn finalize_line(rank: usize, host: &str, secs: f64) -> String {
    format!(
        "hvtrain: done on rank {rank} ({host}): every output is complete (written and synced before the end); \
         MPI_Finalize did not return within {secs} s (a rank stopped, hung or gone after the final handshake; \
         distribution.finish_seconds): exiting with code {EXIT_HUNG_AT_EXIT} (done, a rank hung at exit)"
    )
}
