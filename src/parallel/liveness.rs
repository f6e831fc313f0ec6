//! Liveness: telling a rank that is slow from one that is gone, at any point of any command.
//!
//! A deadline on a collective cannot tell them apart: a rank writing a large checkpoint or
//! reading from a slow file system looks exactly like a dead one to the ranks waiting for it.
//! So every rank runs a heartbeat thread, started in `main` right after MPI start-up, on a
//! communicator of its own (`Comm::beacon`). About once a second it sends a tiny message
//! (`BEAT_WORDS` words: what this rank is doing, its last completed step, a progress counter,
//! its host) and it only ever uses non-blocking MPI, polled every 100 ms, so it never waits
//! on another rank. Topology: a hub. Every rank sends to rank 0 and rank 0 sends to every
//! rank; rank k watches rank 0 only, rank 0 watches everyone.
//!
//! - A rank whose heartbeats stop for `distribution.watchdog_seconds` is dead, stopped
//!   (SIGSTOP stops every thread of a process) or unreachable: the rank that notices prints
//!   one line naming it, its host and what it was last doing, and ends the job (exit 3).
//! - A rank that is alive but slow keeps sending heartbeats from this thread, whatever its
//!   main thread is waiting for, so slowness never ends the job.
//! - Stall: rank 0 sees every rank's progress counter (bumped at each completed step and at
//!   each change of phase). When no rank has made progress for `distribution.stall_seconds`,
//!   it ends the job (exit 4) with one line per rank saying what that rank is doing.
//! - A clean end: `Liveness::finish` starts a non-blocking barrier and keeps heartbeating
//!   (and watching) until every rank has reached it, so a rank that finished early is never
//!   taken for dead, and a rank that dies while the others wait at the end is still noticed.
//!   Then a goodbye, the requests are completed or cancelled, and only then MPI_Finalize.
//!
//! The phase each thread is in is recorded here (`enter`, `phase`, `phase_at`; the
//! watchdog's guards record theirs too) and costs a mutex and two atomics per change.
//! Without MPI_THREAD_MULTIPLE there is no heartbeat thread (`start` returns None, and says
//! so); the watchdog then keeps its old per-collective deadline in the training loop.
//!
//! Must not: block on another rank (non-blocking calls only, on its own communicator).

use super::comm::{Beacon, Comm, Pending, BEAT_WORDS};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The phase slots: the main thread's and the communication thread's.
pub const MAIN: usize = 0;
pub const COMM: usize = 1;
/// A phase that belongs to no particular step.
pub const NO_STEP: u64 = u64::MAX;

/// Exit code when a rank is gone (no heartbeat); the watchdog's deadline uses it too.
pub const EXIT_GONE: i32 = 3;
/// Exit code when every rank is alive but none makes progress.
pub const EXIT_STALLED: i32 = 4;

const POLL: Duration = Duration::from_millis(100);
const DEFAULT_SILENCE_S: f64 = 8.0;
const DEFAULT_STALL_S: f64 = 600.0;

#[derive(Clone, Copy)]
struct Phase {
    what: &'static str,
    step: u64,
    since: Instant,
}

static SLOTS: [Mutex<Option<Phase>>; 2] = [Mutex::new(None), Mutex::new(None)];
static COMPLETED: AtomicU64 = AtomicU64::new(0);
static PROGRESS: AtomicU64 = AtomicU64::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// (silence limit, stall limit) in seconds.
static LIMITS: Mutex<(f64, f64)> = Mutex::new((DEFAULT_SILENCE_S, DEFAULT_STALL_S));

fn slot(i: usize) -> std::sync::MutexGuard<'static, Option<Phase>> {
    SLOTS[i].lock().unwrap_or_else(|e| e.into_inner())
}

/// Puts the slot's previous phase back when dropped.
#[must_use = "the phase ends when the guard is dropped"]
pub struct PhaseGuard {
    slot: usize,
    prev: Option<Phase>,
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        let prev = self.prev.take().map(|p| Phase { since: Instant::now(), ..p });
        *slot(self.slot) = prev;
        PROGRESS.fetch_add(1, Ordering::Relaxed);
    }
}

/// `slot`'s thread is now doing `what` (at training step `step`, or NO_STEP) until the guard drops.
pub fn enter(slot_index: usize, what: &'static str, step: u64) -> PhaseGuard {
    let prev = slot(slot_index).replace(Phase { what, step, since: Instant::now() });
    PROGRESS.fetch_add(1, Ordering::Relaxed);
    PhaseGuard { slot: slot_index, prev }
}

/// The main thread is now doing `what`, until the guard drops.
pub fn phase(what: &'static str) -> PhaseGuard {
    enter(MAIN, what, NO_STEP)
}

/// The main thread is now doing `what` for training step `step`, until the guard drops.
pub fn phase_at(what: &'static str, step: u64) -> PhaseGuard {
    enter(MAIN, what, step)
}

/// The main thread's phase from now on (no guard: for the outermost phases).
pub fn set(what: &'static str) {
    *slot(MAIN) = Some(Phase { what, step: NO_STEP, since: Instant::now() });
    PROGRESS.fetch_add(1, Ordering::Relaxed);
}

/// Training step `step` is complete on this rank.
pub fn step_done(step: u64) {
    COMPLETED.store(step, Ordering::Relaxed);
    PROGRESS.fetch_add(1, Ordering::Relaxed);
}

/// A unit of work inside a long phase is done (a chunk of an evaluation): progress, for the
/// stall detector.
pub fn progress() {
    PROGRESS.fetch_add(1, Ordering::Relaxed);
}

/// Whether the heartbeat thread runs (MPI granted MPI_THREAD_MULTIPLE).
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// The job's limits: a rank silent for `silence_s` is gone; no progress anywhere for
/// `stall_s` is a stall. Local (no MPI): call it as soon as the job file is read.
pub fn configure(silence_s: f64, stall_s: f64) {
    *LIMITS.lock().unwrap_or_else(|e| e.into_inner()) = (silence_s, stall_s);
    if active() && crate::sys::rank() == Some(0) {
        log::info!(
            "liveness: a heartbeat every {:.2} s on a private communicator; a rank silent for {silence_s} s is taken \
             for dead (distribution.watchdog_seconds), and {stall_s} s without progress on any rank is a stall \
             (distribution.stall_seconds)",
            interval(silence_s).as_secs_f64()
        );
    }
}

fn limits() -> (f64, f64) {
    *LIMITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often to send: once a second, or four times per silence limit when that is shorter.
fn interval(silence_s: f64) -> Duration {
    Duration::from_secs_f64((silence_s / 4.0).clamp(POLL.as_secs_f64(), 1.0))
}

/// The running heartbeat thread.
pub struct Liveness {
    finishing: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Beacon>>,
}

impl Liveness {
    /// Collective (duplicates the world communicator). None, after saying why, when MPI did
    /// not grant MPI_THREAD_MULTIPLE.
    pub fn start(comm: &Comm) -> Option<Liveness> {
        set("start-up");
        if comm.threading < mpi::Threading::Multiple {
            if comm.rank == 0 {
                log::warn!(
                    "MPI granted thread level {:?}, not MPI_THREAD_MULTIPLE: no heartbeat thread. A dead or stopped \
                     rank is then noticed only inside training steps, after distribution.watchdog_seconds (and a \
                     step slower than that ends the job); start-up, checkpoints and evaluation are not guarded",
                    comm.threading
                );
            }
            return None;
        }
        let beacon = comm.beacon();
        let host = comm.host.clone();
        let finishing = Arc::new(AtomicBool::new(false));
        let f = finishing.clone();
        let thread = std::thread::Builder::new()
            .name("hvtrain-liveness".into())
            .spawn(move || {
                run(&beacon, host, &f);
                beacon
            })
            .expect("spawn the liveness thread");
        ACTIVE.store(true, Ordering::Release);
        Some(Liveness { finishing, thread: Some(thread) })
    }

    /// This rank is done: wait (heartbeating) until every rank is, then stop the thread and
    /// settle its requests. Call before MPI_Finalize.
    /// Returns the thread's communicator, for the final handshake (`finish`).
    pub fn finish(mut self) -> Option<Beacon> {
        self.stop()
    }

    fn stop(&mut self) -> Option<Beacon> {
        let t = self.thread.take()?;
        set("finished; waiting for the other ranks to finish");
        self.finishing.store(true, Ordering::Release);
        let b = t.join().ok();
        ACTIVE.store(false, Ordering::Release);
        b
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        self.stop();
    }
}

const MAGIC: u64 = 0x4876_4254_0000; // "HvBT"
const BEAT: u64 = 1;
const BYE: u64 = 2;
const TEXT_WORDS: std::ops::Range<usize> = 5..16;
const HOST_WORDS: std::ops::Range<usize> = 16..20;

/// What one heartbeat says.
#[derive(Clone)]
struct Report {
    kind: u64,
    phase: String,
    step: u64,
    /// How long the sender had been in this phase when it sent this.
    in_phase: Duration,
    completed: u64,
    progress: u64,
    host: String,
}

impl Report {
    fn mine(kind: u64, host: &str) -> Report {
        let (main, comm) = (*slot(MAIN), *slot(COMM));
        // The communication thread's phase (a bucket's all-reduce) is the more telling one
        // while it runs; the main thread is then computing or waiting for it.
        let p = comm.or(main);
        Report {
            kind,
            phase: p.map_or("start-up", |p| p.what).to_string(),
            step: p.map_or(NO_STEP, |p| p.step),
            in_phase: p.map_or(Duration::ZERO, |p| p.since.elapsed()),
            completed: COMPLETED.load(Ordering::Relaxed),
            progress: PROGRESS.load(Ordering::Relaxed),
            host: host.to_string(),
        }
    }

    fn encode(&self) -> [u64; BEAT_WORDS] {
        let mut m = [0u64; BEAT_WORDS];
        m[0] = MAGIC | self.kind;
        m[1] = self.step;
        m[2] = self.completed;
        m[3] = self.progress;
        m[4] = self.in_phase.as_millis() as u64;
        pack(&self.phase, &mut m[TEXT_WORDS]);
        pack(&self.host, &mut m[HOST_WORDS]);
        m
    }

    fn decode(m: &[u64; BEAT_WORDS]) -> Option<Report> {
        if m[0] & !0xff != MAGIC {
            return None;
        }
        Some(Report {
            kind: m[0] & 0xff,
            step: m[1],
            completed: m[2],
            progress: m[3],
            in_phase: Duration::from_millis(m[4]),
            phase: unpack(&m[TEXT_WORDS]),
            host: unpack(&m[HOST_WORDS]),
        })
    }

    /// "all-reduce of a gradient bucket at step 51 for 5.2 s (as of `age` ago), 50 steps completed"
    fn describe(&self, age: Duration) -> String {
        let at = if self.step == NO_STEP { String::new() } else { format!(" at step {}", self.step) };
        format!(
            "{}{at} for {:.1} s, {} step(s) completed",
            self.phase,
            (self.in_phase + age).as_secs_f64(),
            self.completed
        )
    }
}

/// UTF-8 text into words, cut at a character boundary to fit.
fn pack(text: &str, words: &mut [u64]) {
    let cap = words.len() * 8;
    let mut end = text.len().min(cap);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut bytes = text.as_bytes()[..end].to_vec();
    bytes.resize(cap, 0);
    for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        *w = u64::from_le_bytes(chunk.try_into().unwrap());
    }
}

fn unpack(words: &[u64]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What this rank knows of one peer it watches.
struct Peer {
    rank: usize,
    recv: Pending,
    send: Option<Pending>,
    heard_at: Instant,
    last: Option<Report>,
    said_bye: bool,
}

fn run(b: &Beacon, host: String, finishing: &AtomicBool) {
    let t0 = Instant::now();
    let me = b.rank;
    let watched: Vec<usize> = if me == 0 { (1..b.size).collect() } else { vec![0] };
    let watched = if b.size == 1 { Vec::new() } else { watched };
    let mut peers: Vec<Peer> = watched
        .iter()
        .map(|&r| Peer { rank: r, recv: b.irecv(r), send: None, heard_at: t0, last: None, said_bye: false })
        .collect();
    let mut last_sent: Option<Instant> = None;
    let mut barrier: Option<Pending> = None;
    // Rank 0's stall detector: every rank's progress counter, and when any last moved.
    let mut progress_seen = vec![u64::MAX; b.size];
    let mut moved_at = t0;
    loop {
        let now = Instant::now();
        let (silence_s, stall_s) = limits();
        hear(b, &mut peers);
        if barrier.is_none() && finishing.load(Ordering::Acquire) {
            barrier = Some(b.ibarrier());
        }
        if barrier.as_mut().is_some_and(|x| x.test()) {
            break;
        }
        if last_sent.is_none_or(|t| now - t >= interval(silence_s)) {
            let msg = Report::mine(BEAT, &host).encode();
            for p in &mut peers {
                // A send still in flight (a stopped peer) is not piled onto.
                if p.send.as_mut().is_none_or(|s| s.test()) {
                    p.send = Some(b.isend(p.rank, &msg));
                }
            }
            last_sent = Some(now);
        }
        for p in &peers {
            let quiet = now.saturating_duration_since(p.heard_at);
            if !p.said_bye && quiet.as_secs_f64() > silence_s {
                gone(me, &host, p, quiet, silence_s);
            }
        }
        if me == 0 && moved(&peers, &mut progress_seen) {
            moved_at = now;
        } else if me == 0
            && all_heard(&peers, now, silence_s)
            && now.saturating_duration_since(moved_at).as_secs_f64() > stall_s
        {
            stalled(&host, &peers, now.saturating_duration_since(moved_at), stall_s);
        }
        std::thread::sleep(POLL);
    }
    // Every rank has reached the end: say goodbye (so that a peer whose barrier completes a
    // little later does not count our silence), give the sends a moment, and let the
    // outstanding receives be cancelled as `peers` drops.
    let bye = Report::mine(BYE, &host).encode();
    let mut sends: Vec<Pending> = peers.iter().map(|p| b.isend(p.rank, &bye)).collect();
    sends.extend(peers.iter_mut().filter_map(|p| p.send.take()));
    let t = Instant::now();
    while !sends.iter_mut().all(|s| s.test()) && t.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every report that has arrived from each peer, each receive posted again.
fn hear(b: &Beacon, peers: &mut [Peer]) {
    for p in peers {
        while p.recv.test() {
            if let Some(r) = Report::decode(p.recv.message()) {
                p.said_bye |= r.kind == BYE;
                p.last = Some(r);
            }
            p.heard_at = Instant::now();
            p.recv = b.irecv(p.rank);
        }
    }
}

/// Rank 0: whether any rank's progress counter (its own, and the peers' last reports) moved
/// since `seen`, which is brought up to date.
fn moved(peers: &[Peer], seen: &mut [u64]) -> bool {
    let mut moved = false;
    let own = PROGRESS.load(Ordering::Relaxed);
    moved |= std::mem::replace(&mut seen[0], own) != own;
    for p in peers {
        if let Some(r) = &p.last {
            moved |= std::mem::replace(&mut seen[p.rank], r.progress) != r.progress;
        }
    }
    moved
}

/// Whether every peer is heard from: a stall is declared only then; a silent one is the
/// silence limit's business (it may be stopped, not stalled).
fn all_heard(peers: &[Peer], now: Instant, silence_s: f64) -> bool {
    peers.iter().all(|p| p.said_bye || now.saturating_duration_since(p.heard_at) < 3 * interval(silence_s))
}

/// A watched rank has been silent too long: say so and end the job.
fn gone(me: usize, host: &str, p: &Peer, quiet: Duration, silence_s: f64) -> ! {
    let (their_host, last) = match &p.last {
        Some(r) => (r.host.clone(), format!("when last heard from it was in: {}", r.describe(Duration::ZERO))),
        None => ("host unknown".to_string(), "nothing was heard from it since start-up".to_string()),
    };
    crate::sys::say(format!(
        "hvtrain: error on rank {me} ({host}): rank {} ({their_host}) has sent no heartbeat for {:.1} s: it died, was \
         stopped (SIGSTOP) or its node became unreachable; {last}; ending the job (distribution.watchdog_seconds = \
         {silence_s})",
        p.rank,
        quiet.as_secs_f64()
    ));
    abort(EXIT_GONE)
}

/// Rank 0: every rank alive, none moving.
fn stalled(host: &str, peers: &[Peer], still: Duration, stall_s: f64) -> ! {
    let mut lines = vec![format!(
        "hvtrain: error on rank 0 ({host}): the job has stalled: every rank is alive (its heartbeats arrive) but none has \
         completed a step or moved on to another phase for {:.1} s (distribution.stall_seconds = {stall_s}); ending the \
         job. What each rank is doing:",
        still.as_secs_f64()
    )];
    lines.push(format!("  rank 0 ({host}): {}", Report::mine(BEAT, host).describe(Duration::ZERO)));
    for p in peers {
        let doing = match &p.last {
            Some(r) => format!("({}): {}", r.host, r.describe(p.heard_at.elapsed())),
            None => "(host unknown): nothing heard since start-up".to_string(),
        };
        lines.push(format!("  rank {} {doing}", p.rank));
    }
    crate::sys::say(lines.join("\n"));
    abort(EXIT_STALLED)
}

/// What must happen before the job ends from here: a communicator other ranks may be blocked
/// in that MPI_Abort does not reach (NCCL's: `ncclCommAbort`, so no GPU is left spinning in a
/// collective whose peer is gone). Registered by the code that owns it.
static ON_ABORT: std::sync::Mutex<Vec<Box<dyn Fn() + Send + Sync>>> = std::sync::Mutex::new(Vec::new());

/// Run `hook` before the watchdog ends the job (a rank gone, the job stalled).
pub fn on_abort(hook: Box<dyn Fn() + Send + Sync>) {
    ON_ABORT.lock().unwrap_or_else(|e| e.into_inner()).push(hook);
}

/// The hooks, on a thread of their own, waited for at most `limit` (one may block).
fn run_abort_hooks(limit: Duration) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for h in ON_ABORT.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            h();
        }
        let _ = tx.send(());
    });
    rx.recv_timeout(limit).is_ok()
}

/// End the job from this thread; leave regardless if MPI_Abort itself hangs (a lost node).
fn abort(code: i32) -> ! {
    run_abort_hooks(Duration::from_secs(2));
    super::comm::abort_world(code);
    std::thread::sleep(Duration::from_secs(2));
    crate::sys::hard_exit(code)
}

#[cfg(test)]
mod abort_tests {
    use super::*;

    /// The hooks run before the job ends, and one that blocks does not hold the end up.
    #[test]
    fn abort_hooks_run_and_a_blocked_one_is_left_behind() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static RAN: AtomicUsize = AtomicUsize::new(0);
        on_abort(Box::new(|| {
            RAN.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(run_abort_hooks(Duration::from_secs(5)));
        assert_eq!(RAN.load(Ordering::SeqCst), 1);
        on_abort(Box::new(|| std::thread::sleep(Duration::from_secs(30))));
        let t = Instant::now();
        assert!(!run_abort_hooks(Duration::from_millis(200)));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(RAN.load(Ordering::SeqCst), 2, "the first hook ran again before the blocked one");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_survives_the_wire() {
        let r = Report {
            kind: BEAT,
            phase: "all-reduce of a gradient bucket, and a long tail that does not fit in eighty-eight bytes é".into(),
            step: 51,
            in_phase: Duration::from_millis(1234),
            completed: 50,
            progress: 7,
            host: "node17.cluster.example.org".into(),
        };
        let d = Report::decode(&r.encode()).unwrap();
        assert_eq!((d.kind, d.step, d.completed, d.progress, d.in_phase), (BEAT, 51, 50, 7, r.in_phase));
        assert!(r.phase.starts_with(&d.phase) && d.phase.len() <= 88 && d.phase.len() > 80, "{}", d.phase);
        assert_eq!(d.host, r.host);
        assert!(Report::decode(&[0; BEAT_WORDS]).is_none());
    }

    #[test]
    fn guards_nest_and_restore() {
        set("outer");
        {
            let _g = phase_at("inner", 3);
            assert_eq!(slot(MAIN).unwrap().what, "inner");
            assert_eq!(slot(MAIN).unwrap().step, 3);
        }
        assert_eq!(slot(MAIN).unwrap().what, "outer");
    }

    #[test]
    fn the_interval_fits_the_silence_limit() {
        assert_eq!(interval(8.0), Duration::from_secs(1));
        assert_eq!(interval(2.0), Duration::from_millis(500));
        assert_eq!(interval(0.1), POLL);
    }
}
