//! The start-up limit: an alarm (SIGALRM) set at the first lines of `main`, before `MPI_Init`,
//! and cancelled when the heartbeats run (`liveness`). A rank stopped, crashed or hung before or
//! inside `MPI_Init` holds every other rank in `MPI_Init` with no end (Open MPI and Slurm set no
//! limit by default); when the alarm rings, this rank writes one line naming the phase it is
//! stuck in and exits 1, so that `mpirun` or `srun` ends the rest of the job.
//! `distribution.startup_seconds` (HVTRAIN_STARTUP_SECONDS) sets it; the job file is read for
//! it before `MPI_Init`. The rank before `MPI_Init` is the launcher's (`launcher_rank`).
//!
//! An alarm, not a thread: a thread started before `MPI_Init` changed the process's address
//! space enough (its stack, a malloc arena) that `tests/it/memory.rs`'s tight `ulimit -v` margin
//! failed inside MPI instead of with hvtrain's out-of-memory line. The signal handler only
//! calls `write` and `_exit` (async-signal-safe) on a line formatted beforehand.
//!
//! The same alarm bounds the end (`arm_line`, used by `finish.rs`): MPI_Finalize waits for
//! every rank, and a rank stopped after the final handshake would hold the others there.
//!
//! Must not: call MPI, allocate, or take locks in the handler.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

const LEN: usize = 1024;
/// Two line buffers: the handler reads the one `CURRENT` names; `publish` writes the other,
/// then switches, so the handler never sees a half-written line.
static mut LINES: [[u8; LEN]; 2] = [[0; LEN]; 2];
static LENS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static CURRENT: AtomicUsize = AtomicUsize::new(0);
/// The exit code the handler exits with: 1 at start-up, `arm_line`'s at the end.
static CODE: AtomicI32 = AtomicI32::new(1);
/// (seconds, phase) of the armed limit; the writers' lock (never taken by the handler).
static STATE: Mutex<(f64, &'static str)> = Mutex::new((0.0, "the process start"));

extern "C" {
    fn alarm(seconds: u32) -> u32;
    fn signal(sig: i32, handler: extern "C" fn(i32)) -> usize;
    fn write(fd: i32, buf: *const u8, n: usize) -> isize;
    fn _exit(code: i32) -> !;
}
const SIGALRM: i32 = 14;

extern "C" fn on_alarm(_: i32) {
    let i = CURRENT.load(Ordering::Acquire);
    let n = LENS[i].load(Ordering::Acquire);
    // SAFETY: LINES[i] is not written while CURRENT names it (see `publish`); write and _exit
    // are async-signal-safe.
    unsafe {
        let p = std::ptr::addr_of!(LINES[i]) as *const u8;
        write(2, p, n);
        _exit(CODE.load(Ordering::Acquire));
    }
}

/// This process's rank as the launcher set it (Open MPI, PMIx, MPICH/Hydra, Slurm), before
/// `MPI_Init` can tell.
pub fn launcher_rank() -> Option<usize> {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.parse().ok()))
}

/// Format the line for (secs, phase) into the buffer the handler does not read, then switch.
fn publish(secs: f64, phase: &str) {
    let rank = crate::sys::rank().or_else(launcher_rank).map_or_else(|| "?".into(), |r| r.to_string());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    publish_line(&format!(
        "hvtrain: error on rank {rank} ({}): start-up did not finish within {secs} s (distribution.startup_seconds; \
         HVTRAIN_STARTUP_SECONDS overrides): stuck in {phase}. A rank that never arrived (stopped, crashed, or still \
         loading on a slow file system) holds the others there; this rank exits 1 so that the launcher ends the job\n",
        host.trim()
    ));
}

/// Put `line` into the buffer the handler does not read, then switch.
fn publish_line(line: &str) {
    let bytes = &line.as_bytes()[..line.len().min(LEN)];
    let next = 1 - CURRENT.load(Ordering::Acquire);
    // SAFETY: only `publish` writes LINES, under STATE's lock (callers hold it), and into the
    // buffer the handler does not read.
    unsafe {
        let dst = std::ptr::addr_of_mut!(LINES[next]) as *mut u8;
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
    }
    LENS[next].store(bytes.len(), Ordering::Release);
    CURRENT.store(next, Ordering::Release);
}

/// Where start-up is now, for the line the alarm writes.
pub fn phase(p: &'static str) {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    s.1 = p;
    if s.0 > 0.0 {
        publish(s.0, p);
    }
}

/// Set the alarm for `secs` seconds from now (whole seconds, rounded up).
pub fn arm(secs: f64) {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    s.0 = secs;
    publish(secs, s.1);
    // SAFETY: installs an async-signal-safe handler for SIGALRM, which nothing else uses.
    unsafe {
        signal(SIGALRM, on_alarm);
        alarm(secs.ceil().clamp(1.0, u32::MAX as f64) as u32);
    }
}

/// The same alarm for another wait (the end: `finish`): in `secs` seconds write `line` and
/// exit with `code`, unless `disarm` comes first.
pub fn arm_line(secs: f64, line: &str, code: i32) {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    s.0 = 0.0; // `phase` no longer rewrites the line
    CODE.store(code, Ordering::Release);
    publish_line(&format!("{}\n", line.trim_end()));
    // SAFETY: as in `arm`.
    unsafe {
        signal(SIGALRM, on_alarm);
        alarm(secs.ceil().clamp(1.0, u32::MAX as f64) as u32);
    }
}

/// The heartbeats run: from here `liveness` tells a stopped or gone rank.
pub fn disarm() {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    s.0 = 0.0;
    // SAFETY: alarm(0) cancels a pending alarm; no preconditions.
    unsafe {
        alarm(0);
    }
}
