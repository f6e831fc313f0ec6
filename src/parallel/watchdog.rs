//! The watchdog: a thread that ends the whole job when a collective has not completed
//! within the deadline. Collectives only wait forever when another rank has died, hangs or
//! lost its network; MPI's own failure detection does not always notice (a cut link can hang
//! for minutes), and Horovod only warns. Here the job ends, naming the operation and step.
//!
//! Each thread that waits on other ranks owns a slot and arms it with `guard` around the
//! wait; the watchdog only reads the slots.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const MAIN: usize = 0;
pub const COMM: usize = 1;

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
}

pub struct Watchdog {
    shared: SharedWatchdog,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Disarms its slot when dropped.
pub struct Guard<'a> {
    slot: &'a Slot,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.slot.since.store(0, Ordering::Release);
    }
}

impl Watchdog {
    pub fn start(deadline: Duration, rank: usize, host: String) -> Watchdog {
        let slot = || Slot { since: AtomicU64::new(0), step: AtomicU64::new(0), what: Mutex::new("") };
        let state = Arc::new(State { t0: Instant::now(), slots: [slot(), slot()], stop: AtomicBool::new(false) });
        let s = state.clone();
        let thread = std::thread::Builder::new()
            .name("hvtrain-watchdog".into())
            .spawn(move || watch(&s, deadline, rank, &host))
            .expect("spawn watchdog thread");
        Watchdog { shared: SharedWatchdog { state }, thread: Some(thread) }
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
        let s = &self.state.slots[slot];
        *s.what.lock().unwrap() = what;
        s.step.store(step, Ordering::Relaxed);
        s.since.store(self.state.t0.elapsed().as_millis() as u64 + 1, Ordering::Release);
        Guard { slot: s }
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
                crate::say(format!(
                    "hvtrain: error on rank {rank} ({host}): {what} at step {step} has not completed after {:.1} s: another rank \
                     has died, hangs, or lost its network; ending the job (distribution.watchdog_seconds)",
                    deadline.as_secs_f64()
                ));
                super::comm::abort_world(3);
                // MPI_Abort may itself hang when the network is gone: leave regardless.
                std::thread::sleep(Duration::from_secs(2));
                crate::hard_exit(3);
            }
        }
    }
}
