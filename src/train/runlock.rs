//! Rank 0's lock on output.dir, and `hvtrain wait`.
//!
//! Rank 0 holds an exclusive lock (`flock`) on `OUTPUT_DIR/.hvtrain-rank0.lock` from the
//! moment it prepares the directory until it has written its last output (the stop checkpoint,
//! or weights.h5), or its process ends (the kernel releases it however the process ends:
//! return, `_exit` from a signal handler, SIGKILL). The file says who holds it and how far the
//! run got: `running` (from its first step), `stopped at step N` (a stop checkpoint is on
//! disk) or `done`. A run refused at start-up writes nothing there (output.dir untouched).
//!
//! Why: a second SIGTERM or SIGINT makes Open MPI's `mpirun` exit at once, before its ranks;
//! rank 0 may still be writing the stop checkpoint. Under Slurm the job ends when the batch
//! script does, and what is still running is killed with it. `hvtrain wait` (the batch
//! scripts' last step) blocks, bounded, until rank 0 has let go of the lock, then answers
//! with the run's outcome (75 when a stop checkpoint was written).
//!
//! Must not: decide anything about training (it records what the loop did).

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The lock file's name inside output.dir.
pub const FILE: &str = ".hvtrain-rank0.lock";

/// How long a new run waits for the rank 0 of an earlier one (an orphan finishing its stop
/// checkpoint after `mpirun` left) before it refuses to start.
const TAKE_WAIT: Duration = Duration::from_secs(10);

/// The held lock (rank 0 only) and the line that starts every state it writes.
struct Held {
    file: File,
    who: String,
}

static HELD: OnceLock<Mutex<Held>> = OnceLock::new();

/// Set by `hvtrain sweep` once world rank 0 holds the sweep folder's lock: the trials' runs
/// neither take locks of their own nor record their states (the sweep records its own).
static SWEEP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on this process runs a sweep's trials (see `SWEEP`).
pub fn for_sweep() {
    SWEEP.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn in_sweep() -> bool {
    SWEEP.load(std::sync::atomic::Ordering::SeqCst)
}

/// The sweep's state in its lock file (world rank 0): `running`, `stopped (...)` (trials to
/// resume; `hvtrain wait` answers 75), `done`. `last`: let go of the lock.
pub fn sweep_mark(state: &str, last: bool) {
    mark(state, last);
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn path(out_dir: &Path) -> PathBuf {
    out_dir.join(FILE)
}

/// Rank 0, once output.dir exists: take the lock for the rest of the process and record
/// `running`. An earlier run's rank 0 that still holds it (finishing a stop checkpoint after
/// its launcher left) is waited for, up to 10 s; one that holds it longer is a second run in
/// the same output.dir, refused.
pub fn take(out_dir: &Path) -> Result<()> {
    if HELD.get().is_some() || in_sweep() {
        return Ok(());
    }
    let p = path(out_dir);
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&p)
        .map_err(|e| Error::io(&p, "open the run's lock file", e))?;
    let holder = || std::fs::read_to_string(&p).unwrap_or_default().trim().to_string();
    let got = poll(&file, &p, false, TAKE_WAIT, Duration::from_millis(50), || {
        log::info!(
            "waiting (up to {} s) for the rank 0 of an earlier run to let go of {} ({})",
            TAKE_WAIT.as_secs(),
            p.display(),
            holder()
        )
    })?;
    if !got {
        return Err(Error::config(
            p.display().to_string(),
            "output.dir",
            format!(
                "another hvtrain run is using this directory (its rank 0 holds {FILE}; last recorded there: {}); \
                 wait for it to end, or give this run another output.dir",
                holder()
            ),
        ));
    }
    let host = crate::sys::hostname();
    let who = format!("pid {} on {host}, started {}", std::process::id(), unix_now());
    let _ = HELD.set(Mutex::new(Held { file, who }));
    Ok(())
}

/// Rank 0's first step is done: the start-up checks passed. (Not at `take`: a run refused at
/// start-up leaves output.dir as it found it, the lock file's text included.)
pub fn running() {
    if !in_sweep() {
        mark("running", false);
    }
}

/// Record how far the run got (rank 0, with the lock held; nothing elsewhere). `last`: rank 0
/// writes nothing more, so the lock is let go (the process may linger in MPI_Finalize).
fn mark(state: &str, last: bool) {
    let Some(h) = HELD.get() else { return };
    let mut h = h.lock().unwrap_or_else(|e| e.into_inner());
    let line = format!("{}; {state}\n", h.who);
    let f = &mut h.file;
    // Best effort: the state only refines what `hvtrain wait` reports.
    let _ = f.set_len(0).and_then(|()| f.seek(SeekFrom::Start(0))).and_then(|_| f.write_all(line.as_bytes()));
    if last {
        let _ = f.unlock();
    }
}

/// Rank 0's stop checkpoint of `step` is on disk.
pub fn stopped(step: u64) {
    if !in_sweep() {
        mark(&format!("stopped at step {step}"), true);
    }
}

/// Rank 0 wrote weights.h5: the run is complete.
pub fn done() {
    if !in_sweep() {
        mark("done", true);
    }
}

/// What `hvtrain wait` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    /// No run has used this output.dir (or none since `since`).
    NoRun,
    /// Rank 0 is gone; its last state.
    Gone(String),
    /// Rank 0 still held the lock when the time ran out.
    TimedOut(String),
}

impl Waited {
    /// The exit code of `hvtrain wait`: 75 after a stop checkpoint (requeue and resume), 0
    /// when rank 0 is gone otherwise or there was no run, 1 when it was still running.
    pub fn code(&self) -> i32 {
        match self {
            Waited::Gone(s) if s.contains("; stopped") => crate::signals::EXIT_PREEMPTED,
            Waited::NoRun | Waited::Gone(_) => 0,
            Waited::TimedOut(_) => 1,
        }
    }
}

/// The start time (Unix seconds) a state line records.
fn started(state: &str) -> Option<u64> {
    state.split(", started ").nth(1)?.split(';').next()?.trim().parse().ok()
}

/// Try to lock `file` (`p`, for errors), exclusively or shared, every `every` until `limit`:
/// whether it was got. `waiting` runs once, at the first refusal.
fn poll(file: &File, p: &Path, shared: bool, limit: Duration, every: Duration, waiting: impl FnOnce()) -> Result<bool> {
    let t = Instant::now();
    let mut waiting = Some(waiting);
    loop {
        match if shared { file.try_lock_shared() } else { file.try_lock() } {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if t.elapsed() >= limit => return Ok(false),
            Err(std::fs::TryLockError::WouldBlock) => {
                if let Some(f) = waiting.take() {
                    f();
                }
                std::thread::sleep(every);
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(p, "lock the run's lock file", e)),
        }
    }
}

/// `hvtrain wait`: until rank 0 of the run in `out_dir` has let go of its lock, at most
/// `seconds`. A state from a run started before `since` (Unix seconds) is not this launch's.
pub fn wait(out_dir: &Path, seconds: f64, since: Option<u64>) -> Result<Waited> {
    let p = path(out_dir);
    let file = match File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Waited::NoRun),
        Err(e) => return Err(Error::io(&p, "open the run's lock file", e)),
    };
    let read = || std::fs::read_to_string(&p).unwrap_or_default().trim().to_string();
    let limit = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
    let got = poll(&file, &p, true, limit, Duration::from_millis(20), || {
        crate::sys::say(format!(
            "hvtrain wait: rank 0 ({}) is still running; waiting up to {seconds:.0} s for it to end",
            read()
        ))
    })?;
    if !got {
        return Ok(Waited::TimedOut(read()));
    }
    let state = read();
    if state.is_empty() || since.is_some_and(|s| started(&state).is_none_or(|t| t < s)) {
        return Ok(Waited::NoRun);
    }
    Ok(Waited::Gone(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_recorded_state() {
        let who = "pid 7 on n1, started 100";
        assert_eq!(Waited::Gone(format!("{who}; stopped at step 12")).code(), 75);
        assert_eq!(Waited::Gone(format!("{who}; done")).code(), 0);
        assert_eq!(Waited::Gone(format!("{who}; running")).code(), 0);
        assert_eq!(Waited::TimedOut(format!("{who}; running")).code(), 1);
        assert_eq!(Waited::NoRun.code(), 0);
        assert_eq!(started(&format!("{who}; running")), Some(100));
    }

    #[test]
    fn a_free_lock_is_read_and_an_old_run_is_not_this_launch() {
        let dir = std::env::temp_dir().join(format!("hvtrain-runlock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(wait(&dir, 0.1, None).unwrap(), Waited::NoRun);
        std::fs::write(path(&dir), "pid 7 on n1, started 100; stopped at step 12\n").unwrap();
        assert_eq!(wait(&dir, 0.1, None).unwrap().code(), 75);
        assert_eq!(wait(&dir, 0.1, Some(101)).unwrap(), Waited::NoRun);
        // Held by another open file description: the wait runs out.
        let f = File::options().write(true).open(path(&dir)).unwrap();
        f.lock().unwrap();
        let w = wait(&dir, 0.2, None).unwrap();
        assert!(matches!(w, Waited::TimedOut(_)), "{w:?}");
        drop(f);
        assert_eq!(wait(&dir, 0.1, None).unwrap().code(), 75);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
