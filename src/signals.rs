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
//! - except while the stop is under way: rank 0 finishes writing the stop checkpoint (and the
//!   rename) first, the other ranks wait for it at the stop barrier (leaving early would end
//!   the job through the heartbeats and kill rank 0 mid-write), then each exits at once with
//!   `EXIT_PREEMPTED`.
//!
//! When the launcher that started this rank dies (`mpirun` killed by a double signal exits at
//! once, leaving its ranks to be torn down a few seconds later), the rank treats that as a
//! signal: the parent process is checked every 20 ms, under a launcher only.
//! But under Open MPI 4.1 the rank does not outlive `mpirun` for long: one of the run-time's
//! threads, on losing `mpirun`, ends the process with `_exit` (status 195; seen with strace)
//! within some 10-50 ms, which no handler can delay. A stop checkpoint that takes
//! longer is lost, which is why `mpirun` must get one signal only (see docs/checkpoints.md, "Preemption").
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

/// The process's parent and that parent's command name, from /proc.
fn parent_of(pid: i32) -> Option<(i32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, comm))
}

/// A warning when this rank's launcher is Open MPI's `mpirun` run under `timeout`: a
/// `scancel` then signals `mpirun` twice (directly, and through `timeout`), and a second signal
/// makes `mpirun` exit at once and its ranks with it, before the stop checkpoint is written.
pub fn launcher_under_timeout() -> Option<String> {
    let me = std::process::id() as i32;
    let (launcher, _) = parent_of(me)?;
    let (above, name) = parent_of(launcher)?;
    if !["mpirun", "mpiexec", "orterun", "prterun"].contains(&name.as_str()) {
        return None;
    }
    let (_, wrapper) = parent_of(above)?;
    (wrapper == "timeout").then(|| {
        format!(
            "{name} runs under `timeout`: a scancel (or any signal to the whole job) reaches {name} twice, and on a \
             second signal it exits at once, taking the ranks down before the stop checkpoint is written. Put the \
             time limit inside the launch instead: `{name} ... timeout --preserve-status 23h hvtrain train ...` \
             (with --mca odls_base_sigkill_timeout N when the stop checkpoint takes over 1 s), or use Slurm's --time with --signal (jobs/*.sbatch)"
        )
    })
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

/// This rank has agreed to stop and now waits for rank 0's stop checkpoint (or helps assemble
/// it): later signals wait for it too, as on rank 0. A rank that left now would end the job
/// (its peers' heartbeats see it gone) and take rank 0's write down with it. The stop is
/// bounded: the heartbeats tell a slow write from a dead rank. No effect once written.
pub fn stop_under_way() {
    let _ = PHASE.compare_exchange(RUNNING, WRITING, SeqCst, SeqCst);
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
