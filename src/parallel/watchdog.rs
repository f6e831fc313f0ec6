//! The watchdog: what each thread that waits on other ranks is waiting for.
//!
//! Each such thread owns a slot and arms it with `guard` around the wait. The guard always
//! records the phase for the heartbeats (`liveness.rs`), which is what tells a slow rank from
//! a gone one, at any point of a command.
//!
//! Only when there is no heartbeat thread (MPI did not grant MPI_THREAD_MULTIPLE) does the
//! watchdog keep its old job: a thread that ends the whole job when an armed wait has not
//! completed within `distribution.watchdog_seconds`. That deadline cannot tell a slow rank
//! from a dead one, so it is the fallback, never used next to the heartbeats.
//!
//! Must not: end a job that is only slow while heartbeats run (it is the fallback deadline).

use super::liveness::{self, PhaseGuard};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use super::liveness::{COMM, MAIN};

struct Slot {
    /// Milliseconds since `t0` at which the wait began, plus 1; 0 when idle.
    since: AtomicU64,
    step: AtomicU64,
    what: Mutex<&'static str>,
}

struct State {
    t0: Instant,
    slots: [Slot; 2],
    stop: AtomicBool,
    /// Whether the deadline thread runs (no heartbeats).
    deadline: bool,
}

pub struct Watchdog {
    shared: SharedWatchdog,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Disarms its slot and ends its phase when dropped.
pub struct Guard<'a> {
    slot: Option<&'a Slot>,
    _phase: PhaseGuard,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            s.since.store(0, Ordering::Release);
        }
    }
}

impl Watchdog {
    /// With heartbeats running, only records phases; otherwise also starts the deadline thread.
    pub fn start(deadline: Duration, rank: usize, host: String) -> Watchdog {
        let slot = || Slot { since: AtomicU64::new(0), step: AtomicU64::new(0), what: Mutex::new("") };
        let with_deadline = !liveness::active();
        let state = Arc::new(State {
            t0: Instant::now(),
            slots: [slot(), slot()],
            stop: AtomicBool::new(false),
            deadline: with_deadline,
        });
        let s = state.clone();
        let thread = with_deadline.then(|| {
            std::thread::Builder::new()
                .name("hvtrain-watchdog".into())
                .spawn(move || watch(&s, deadline, rank, &host))
                .expect("spawn watchdog thread")
        });
        Watchdog { shared: SharedWatchdog { state }, thread }
    }

    /// Arm `slot` for a wait on other ranks: `what` at training step `step`.
    pub fn guard(&self, slot: usize, what: &'static str, step: u64) -> Guard<'_> {
        self.shared.guard(slot, what, step)
    }

    /// A handle the communication thread can keep.
    pub fn share(&self) -> SharedWatchdog {
        self.shared.clone()
    }
}

/// The watchdog as seen from another thread.
#[derive(Clone)]
pub struct SharedWatchdog {
    state: Arc<State>,
}

impl SharedWatchdog {
    pub fn guard(&self, slot: usize, what: &'static str, step: u64) -> Guard<'_> {
        let phase = liveness::enter(slot, what, step);
        if !self.state.deadline {
            return Guard { slot: None, _phase: phase };
        }
        let s = &self.state.slots[slot];
        *s.what.lock().unwrap() = what;
        s.step.store(step, Ordering::Relaxed);
        s.since.store(self.state.t0.elapsed().as_millis() as u64 + 1, Ordering::Release);
        Guard { slot: Some(s), _phase: phase }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.state.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(s: &State, deadline: Duration, rank: usize, host: &str) {
    let limit = deadline.as_millis() as u64;
    while !s.stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        let now = s.t0.elapsed().as_millis() as u64 + 1;
        for slot in &s.slots {
            let since = slot.since.load(Ordering::Acquire);
            if since != 0 && now.saturating_sub(since) > limit {
                let what = *slot.what.lock().unwrap();
                let step = slot.step.load(Ordering::Relaxed);
                crate::sys::say(format!(
                    "hvtrain: error on rank {rank} ({host}): {what} at step {step} has not completed after {:.1} s: another rank \
                     has died, hangs, or lost its network; ending the job (distribution.watchdog_seconds; MPI gave no \
                     MPI_THREAD_MULTIPLE, so there are no heartbeats to tell a slow rank from a dead one)",
                    deadline.as_secs_f64()
                ));
                super::comm::abort_world(liveness::EXIT_GONE);
                // MPI_Abort may itself hang when the network is gone: leave regardless.
                std::thread::sleep(Duration::from_secs(2));
                crate::sys::hard_exit(liveness::EXIT_GONE);
            }
        }
    }
}
