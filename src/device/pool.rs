//! A few persistent worker threads for one process's CPU work (`training.threads`: bf16
//! products, the optimizer's update): `run(parts, f)` calls f(0) on the calling thread and
//! f(1), ..., f(parts − 1) on workers, and returns when every call has returned (a panic in any is raised again here). Workers
//! are started on first use and kept, so their thread-local packing buffers are too; between
//! parts they spin a while before sleeping (`spin_limit`). One `run` at a time holds the
//! workers: a call from another thread meanwhile runs its parts itself, one after another.
//!
//! Must not: return before every part has finished (the parts borrow the caller's data).

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};
use std::time::Instant;

/// Threads of this process's CPU work (`training.threads`; 1: the calling thread only).
static THREADS: AtomicUsize = AtomicUsize::new(1);

pub fn set_threads(n: usize) {
    THREADS.store(n.max(1), Ordering::Relaxed);
}

pub fn threads() -> usize {
    THREADS.load(Ordering::Relaxed)
}

/// Into how many parts to cut element-wise work over `n` elements: one per thread, none
/// under 32 Ki elements (a hand-off costs about as much as updating that many).
pub fn parts(n: usize) -> usize {
    threads().min(n / (1 << 15)).max(1)
}

/// `f` on each of `items` (one part each), the parts on the pool's threads; every item
/// is handed to exactly one call.
pub fn each<T: Send>(items: Vec<T>, f: &(dyn Fn(T) + Sync)) {
    if items.is_empty() {
        return;
    }
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    run(slots.len(), &|i| {
        let item = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take().expect("each part runs once");
        f(item)
    });
}

/// How long an idle worker spins for its next part before it sleeps. A training step hands
/// parts out every few hundred microseconds; woken from sleep instead, a worker on a virtual
/// machine starts 50-100 µs late (the idle vCPU is descheduled), and the caller then waits
/// for it at the end of every product (measured: 2 threads ran the step's products at
/// 60-75 % of twice the one-thread rate with sleeping workers). OpenMP runtimes spin for the
/// same reason (GOMP_SPINCOUNT, KMP_BLOCKTIME). `HVTRAIN_POOL_SPIN_US` sets it (0: sleep at once).
fn spin_limit() -> std::time::Duration {
    static US: OnceLock<u64> = OnceLock::new();
    let us =
        *US.get_or_init(|| std::env::var("HVTRAIN_POOL_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(2000));
    std::time::Duration::from_micros(us)
}

type Job = Option<(&'static (dyn Fn(usize) + Sync), usize)>;

/// One worker's mailbox: the caller writes `job`, then bumps `seq`; the worker runs it and
/// counts `PENDING` down.
struct Slot {
    seq: AtomicU64,
    job: UnsafeCell<Job>,
    sleeping: AtomicBool,
}

// SAFETY: `job` is written only by the caller holding `WORKERS` while the worker is idle
// (every earlier part has counted PENDING down), and read by the worker after it has seen
// the `seq` bump that follows the write (release/acquire).
unsafe impl Sync for Slot {}

/// The workers (mailbox and handle, to wake it); the lock is held for a whole `run`.
static WORKERS: Mutex<Vec<(&'static Slot, std::thread::Thread)>> = Mutex::new(Vec::new());
/// Parts handed to workers in the current `run` and not yet returned.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// The first panic of a worker's part in the current `run`.
static FAILED: Mutex<Option<Box<dyn std::any::Any + Send>>> = Mutex::new(None);

fn worker(slot: &'static Slot) {
    let mut seen = 0;
    loop {
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        while slot.seq.load(Ordering::Acquire) == seen {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && idle_since.elapsed() >= spin_limit() {
                slot.sleeping.store(true, Ordering::SeqCst);
                if slot.seq.load(Ordering::SeqCst) == seen {
                    std::thread::park(); // may return early: the loop looks again
                }
                slot.sleeping.store(false, Ordering::SeqCst);
                idle_since = Instant::now();
            }
        }
        seen = slot.seq.load(Ordering::Acquire);
        // SAFETY: see `Slot`: the caller wrote the job before the bump just seen.
        let (f, i) = unsafe { (*slot.job.get()).take() }.expect("a part comes with its bump");
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(i))) {
            FAILED.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
        }
        PENDING.fetch_sub(1, Ordering::Release);
    }
}

/// f(0) here, f(1..parts) on the workers; returns when all have returned. A call made while
/// another thread's `run` holds the workers runs its parts one after another here.
pub fn run(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    if parts <= 1 {
        return f(0);
    }
    let mut w = match WORKERS.try_lock() {
        Ok(w) => w,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return (0..parts).for_each(f),
    };
    // SAFETY: every worker's call of f has returned (or unwound) before this function returns:
    // PENDING reaches 0 below only after each part's call. So f outlives every use.
    let fs: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    while w.len() < parts - 1 {
        let slot: &'static Slot = Box::leak(Box::new(Slot {
            seq: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            sleeping: AtomicBool::new(false),
        }));
        let h = std::thread::Builder::new()
            .name("hvtrain-pool".into())
            .spawn(move || worker(slot))
            .expect("start a CPU worker thread");
        w.push((slot, h.thread().clone()));
    }
    PENDING.store(parts - 1, Ordering::SeqCst);
    for (i, (slot, thread)) in w.iter().take(parts - 1).enumerate() {
        // SAFETY: see `Slot`: this worker is idle (PENDING was 0 when the last run returned).
        unsafe { *slot.job.get() = Some((fs, i + 1)) };
        slot.seq.fetch_add(1, Ordering::SeqCst);
        if slot.sleeping.load(Ordering::SeqCst) {
            thread.unpark();
        }
    }
    let mut failed = catch_unwind(AssertUnwindSafe(|| f(0))).err();
    let mut spins = 0u32;
    while PENDING.load(Ordering::Acquire) != 0 {
        spins = spins.wrapping_add(1);
        if spins < 1 << 20 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    if let Some(e) = FAILED.lock().unwrap_or_else(|e| e.into_inner()).take() {
        failed.get_or_insert(e);
    }
    drop(w);
    if let Some(e) = failed {
        resume_unwind(e);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_part_runs_once_and_borrows_work() {
        let hits: Vec<AtomicUsize> = (0..5).map(|_| AtomicUsize::new(0)).collect();
        for parts in [1, 3, 5, 2] {
            super::run(parts, &|i| {
                hits[i].fetch_add(1, Ordering::SeqCst);
            });
        }
        let got: Vec<usize> = hits.iter().map(|h| h.load(Ordering::SeqCst)).collect();
        assert_eq!(got, [4, 3, 2, 1, 1]);
    }

    #[test]
    fn each_hands_every_item_to_one_call() {
        let seen = std::sync::Mutex::new(Vec::new());
        super::each((0..4).collect(), &|i: i32| seen.lock().unwrap().push(i));
        super::each(Vec::<i32>::new(), &|_| panic!("no items, no calls"));
        let mut got = seen.into_inner().unwrap();
        got.sort();
        assert_eq!(got, [0, 1, 2, 3]);
    }

    #[test]
    fn a_panic_in_a_worker_reaches_the_caller() {
        let r = std::panic::catch_unwind(|| super::run(3, &|i| assert!(i != 2, "part 2 failed")));
        assert!(r.is_err());
        super::run(3, &|_| {}); // the workers are still there
    }
}
