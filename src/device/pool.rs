//! A few persistent worker threads for one process's CPU work (`training.threads`: bf16
//! products, the optimizer's update): `run(parts, f)` calls f(0) on the calling thread and
//! f(1), ..., f(parts − 1) on workers, and returns when every call has returned (a panic in any is raised again here). Workers
//! are started on first use and kept, so their thread-local packing buffers are too.
//!
//! Must not: return before every part has finished (the parts borrow the caller's data).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

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

type Part = (&'static (dyn Fn(usize) + Sync), usize, Sender<std::thread::Result<()>>);

/// One sender per worker thread.
static WORKERS: Mutex<Vec<Sender<Part>>> = Mutex::new(Vec::new());

/// f(0) here, f(1..parts) on the workers; returns when all have returned.
pub fn run(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    if parts <= 1 {
        return f(0);
    }
    // SAFETY: every worker's call of f has returned (or unwound) before this function returns:
    // one message per part arrives below, sent after the call. So f outlives every use.
    let fs: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    let (done_tx, done_rx) = channel();
    {
        let mut w = WORKERS.lock().unwrap_or_else(|e| e.into_inner());
        while w.len() < parts - 1 {
            let (tx, rx) = channel::<Part>();
            std::thread::Builder::new()
                .name("hvtrain-gemm".into())
                .spawn(move || {
                    for (f, i, done) in rx {
                        let _ = done.send(catch_unwind(AssertUnwindSafe(|| f(i))));
                    }
                })
                .expect("start a GEMM worker thread");
            w.push(tx);
        }
        for (i, tx) in w.iter().take(parts - 1).enumerate() {
            tx.send((fs, i + 1, done_tx.clone())).expect("a GEMM worker thread is gone");
        }
    }
    let mut failed = catch_unwind(AssertUnwindSafe(|| f(0))).err();
    for _ in 1..parts {
        if let Err(e) = done_rx.recv().expect("a GEMM worker thread is gone") {
            failed.get_or_insert(e);
        }
    }
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
