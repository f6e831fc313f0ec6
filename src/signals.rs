//! Preemption signals. SIGTERM, SIGINT and SIGUSR1 (what Slurm sends on `scancel`, at the
//! wall-time limit, and with `--signal=USR1@N`) set a flag; the training loop acts on it at
//! the next step boundary: rank 0 writes the stop checkpoint and every rank exits with
//! `EXIT_PREEMPTED`.
//!
//! One preemption often arrives as several signals: `timeout` or `scancel` signal `mpirun`,
//! which signals the ranks again, while the ranks may be signalled directly too. So:
//!
//! - signals arriving within the grace period of the first (1 s plus two steps' time, at most
//!   3 s) count as the same request. If the stop is not under way when the grace period ends,
//!   the rank exits with `EXIT_SECOND_SIGNAL` then;
//! - a later signal exits at once with `EXIT_SECOND_SIGNAL`;
//! - except on rank 0 while it writes the stop checkpoint: it finishes the write (and the
//!   rename) first, then exits at once with `EXIT_PREEMPTED`.
//!
//! When the launcher that started this rank dies (`mpirun` killed by a double signal exits at
//! once, leaving its ranks to be torn down a few seconds later), the rank treats that as a
//! signal: the parent process is checked every 20 ms, under a launcher only.
//!
//! Must not: write checkpoints or call MPI (the training loop acts on the flag).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::SeqCst};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Exit code after a signal-driven checkpoint: requeue the job and `--resume auto`.
pub const EXIT_PREEMPTED: i32 = 75; // EX_TEMPFAIL
/// Exit code when a second signal arrives before the checkpoint is done.
pub const EXIT_SECOND_SIGNAL: i32 = 130;

const RUNNING: u8 = 0;
const WRITING: u8 = 1;
const WRITTEN: u8 = 2;

static STOP: AtomicBool = AtomicBool::new(false);
/// A signal after the first one, not yet acted on.
static LATER: AtomicBool = AtomicBool::new(false);
/// Rank 0's stop checkpoint: RUNNING (not begun), WRITING, WRITTEN.
static PHASE: AtomicU8 = AtomicU8::new(RUNNING);
/// Milliseconds since BASE of the first signal.
static FIRST_MS: AtomicU64 = AtomicU64::new(0);
static GRACE_MS: AtomicU64 = AtomicU64::new(1000);
static BASE: OnceLock<Instant> = OnceLock::new();

/// Milliseconds since `install` (Instant::now is clock_gettime: async-signal-safe).
fn now_ms() -> u64 {
    BASE.get().map_or(0, |b| b.elapsed().as_millis() as u64)
}

fn exit_now(code: i32) -> ! {
    signal_hook::low_level::exit(code)
}

/// A stop request, from a signal handler or the parent watcher. Async-signal-safe: atomics,
/// the clock and _exit only.
fn request() {
    let now = now_ms();
    if !STOP.swap(true, SeqCst) {
        FIRST_MS.store(now, SeqCst);
        return;
    }
    match PHASE.load(SeqCst) {
        WRITING => LATER.store(true, SeqCst),
        WRITTEN => exit_now(EXIT_PREEMPTED),
        _ if now.saturating_sub(FIRST_MS.load(SeqCst)) >= GRACE_MS.load(SeqCst) => exit_now(EXIT_SECOND_SIGNAL),
        _ => LATER.store(true, SeqCst),
    }
}

/// The handlers alone, no thread: `main` calls this for `train` before `MPI_Init`, so that a
/// stop request that arrives during start-up (`scancel` while thousands of ranks wire up) is
/// kept and acted on at the first step boundary, like any other, instead of killing the rank
/// by the default action. (A thread here would move the address space before MPI_Init; see
/// `parallel::startup`.) Idempotent.
pub fn handlers() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    static DONE: AtomicBool = AtomicBool::new(false);
    BASE.get_or_init(Instant::now);
    if DONE.swap(true, SeqCst) {
        return Ok(());
    }
    for sig in [SIGTERM, SIGINT, SIGUSR1] {
        // SAFETY: `request` only touches atomics, reads the clock and may call _exit.
        unsafe { signal_hook::low_level::register(sig, request)? };
    }
    Ok(())
}

/// The handlers (if `handlers` has not run) and the thread that enforces the grace period and
/// watches the launcher.
pub fn install() -> std::io::Result<()> {
    handlers()?;
    let launched = ["OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK"].iter().any(|v| std::env::var_os(v).is_some());
    std::thread::Builder::new().name("hvtrain-signals".into()).spawn(move || watch(launched))?;
    Ok(())
}

fn parent() -> i32 {
    extern "C" {
        fn getppid() -> i32;
    }
    // SAFETY: getppid has no preconditions.
    unsafe { getppid() }
}

/// Enforce the grace period, and turn the launcher's death into a stop request.
fn watch(launched: bool) {
    let ppid = parent();
    let mut orphaned = false;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        if launched && !orphaned && parent() != ppid {
            orphaned = true;
            log::warn!("the launcher (process {ppid}) is gone: stopping as if signalled");
            request();
        }
        if LATER.load(SeqCst) {
            match PHASE.load(SeqCst) {
                WRITTEN => exit_now(EXIT_PREEMPTED),
                RUNNING if now_ms().saturating_sub(FIRST_MS.load(SeqCst)) >= GRACE_MS.load(SeqCst) => {
                    crate::sys::say("hvtrain: a second signal, and no checkpoint under way: exiting at once".into());
                    exit_now(EXIT_SECOND_SIGNAL)
                }
                _ => {}
            }
        }
    }
}

pub fn stop_requested() -> bool {
    STOP.load(SeqCst)
}

/// The training loop's step time: signals within 1 s plus two steps of the first count as
/// one request (at most 3 s).
pub fn set_step_time(step: Duration) {
    let ms = 1000 + 2 * step.as_millis() as u64;
    GRACE_MS.store(ms.min(3000), SeqCst);
}

/// Rank 0 begins writing the stop checkpoint: later signals wait for it.
pub fn writing_stop_checkpoint() {
    PHASE.store(WRITING, SeqCst);
}

/// Rank 0's stop checkpoint is in place: a signal that came during the write, or any later
/// one, exits at once with `EXIT_PREEMPTED`.
pub fn stop_checkpoint_written() {
    PHASE.store(WRITTEN, SeqCst);
    if LATER.load(SeqCst) {
        log::info!("a further signal came while the stop checkpoint was written; exiting now");
        exit_now(EXIT_PREEMPTED);
    }
}
