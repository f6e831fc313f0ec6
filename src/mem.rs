//! Host memory for the model state: allocations that fail with one clear error instead of
//! aborting the process, and what one rank's model state costs.
//!
//! Large host buffers (the CPU backend's buffers, the starting state received from rank 0)
//! are allocated through `zeros` / `to_vec` (`Vec::try_reserve_exact`): a failure is an
//! `Error::OutOfMemory` that names what was being allocated, its size, this rank's model state
//! (parameters, gradients, optimizer state, logged at start-up) and the way out, and that ends
//! the job like any other error (one line naming the rank, `MPI_Abort`). Any other large
//! allocation that fails (a `Vec` somewhere that cannot return an error) is caught by the
//! global allocator `Guarded`, which prints the same message and ends the job instead of Rust's
//! bare "memory allocation of N bytes failed" abort.
//!
//! Must not: allocate through any path but `try_reserve` for model state.

use crate::error::{Error, Result};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

const MIB: f64 = 1048576.0;

/// The bytes of one rank's model state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    pub params: usize,
    /// Two buffers per fusion bucket: this rank's gradients and the reduced ones.
    pub grads: usize,
    /// Momentum, or Adam's two moments.
    pub optimizer: usize,
}

impl StateBytes {
    /// A rank holding `n_params` parameters and `opt_floats` floats of optimizer state.
    pub fn of(n_params: usize, opt_floats: usize) -> StateBytes {
        StateBytes { params: 4 * n_params, grads: 2 * 4 * n_params, optimizer: 4 * opt_floats }
    }
    pub fn total(&self) -> usize {
        self.params + self.grads + self.optimizer
    }
    /// "params 80.0 MiB, grads 160.0 MiB, optimizer 80.0 MiB (320.0 MiB in all)".
    pub fn describe(&self) -> String {
        format!(
            "params {:.1} MiB, grads {:.1} MiB, optimizer {:.1} MiB ({:.1} MiB in all)",
            self.params as f64 / MIB,
            self.grads as f64 / MIB,
            self.optimizer as f64 / MIB,
            self.total() as f64 / MIB
        )
    }
}

/// This rank's model state and how many ranks split one copy of the model (T·P).
static STATE: Mutex<Option<(StateBytes, usize)>> = Mutex::new(None);

/// Record this rank's model state (named by every out-of-memory error from now on).
pub fn set_state(s: StateBytes, split: usize) {
    *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some((s, split));
}

thread_local! {
    /// What this thread is allocating, for the error ("" when nobody said).
    static WHAT: Cell<&'static str> = const { Cell::new("") };
    /// Inside `try_reserve_exact`: a failure comes back as an error, the allocator stays quiet.
    static FALLIBLE: Cell<bool> = const { Cell::new(false) };
}

/// Until dropped, allocations on this thread are for `what` (named by an out-of-memory error).
pub struct For(&'static str);

pub fn allocating(what: &'static str) -> For {
    For(WHAT.with(|w| w.replace(what)))
}

impl Drop for For {
    fn drop(&mut self) {
        WHAT.with(|w| w.set(self.0));
    }
}

/// `n` zeroed (default) values, or `Error::OutOfMemory`.
pub fn zeros<T: Clone + Default>(n: usize) -> Result<Vec<T>> {
    let mut v = reserve::<T>(n)?;
    v.resize(n, T::default());
    Ok(v)
}

/// A copy of `s`, or `Error::OutOfMemory`.
pub fn to_vec<T: Copy>(s: &[T]) -> Result<Vec<T>> {
    let mut v = reserve::<T>(s.len())?;
    v.extend_from_slice(s);
    Ok(v)
}

fn reserve<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    FALLIBLE.with(|f| f.set(true));
    let r = v.try_reserve_exact(n);
    FALLIBLE.with(|f| f.set(false));
    r.map_err(|_| Error::OutOfMemory(message(n.saturating_mul(std::mem::size_of::<T>()))))?;
    Ok(v)
}

/// The text of the error: what failed, the limit, this rank's model state, the way out.
pub fn message(bytes: usize) -> String {
    let what = WHAT.with(|w| w.get());
    let what = if what.is_empty() { "a host buffer" } else { what };
    let state = state_text();
    format!(
        "allocating {:.1} MiB for {what} failed ({}); {state}; split the model over ranks with parallel.tensor / \
         parallel.pipeline, use a smaller model or training.batch_size, or ask for more memory per rank",
        bytes as f64 / MIB,
        limit_text()
    )
}

/// "this rank's model state is params ..., grads ..., optimizer ... (... in all) with the model
/// split over N rank(s) ...".
pub fn state_text() -> String {
    match *STATE.lock().unwrap_or_else(|e| e.into_inner()) {
        Some((s, split)) => format!(
            "this rank's model state is {} with the model split over {split} rank(s) (parallel.tensor × parallel.pipeline)",
            s.describe()
        ),
        None => "this rank's model state is not known yet".into(),
    }
}

/// The process's virtual memory limit and use, from /proc.
fn limit_text() -> String {
    let vm = crate::sys::vm_size_mib().map(|v| format!("{v:.0} MiB mapped")).unwrap_or_default();
    match crate::sys::address_space_limit() {
        Some(l) => format!("{vm} of the per-process virtual memory limit of {:.0} MiB (ulimit -v)", l as f64 / MIB),
        None => format!("{vm}, no ulimit -v: the system has no more memory to give"),
    }
}

/// The global allocator: the system's, except that a large allocation that fails and cannot
/// return an error ends the job with the message above.
pub struct Guarded;

// SAFETY: every call goes to `System` with the caller's arguments; `failed` only reports.
unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if p.is_null() {
            failed(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if p.is_null() {
            failed(l.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, l, new_size);
        if p.is_null() {
            failed(new_size);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, l: Layout) {
        System.dealloc(ptr, l)
    }
}

static REPORTING: AtomicBool = AtomicBool::new(false);

/// An allocation failed. Fallible callers get their error; a small one (under 1 MiB: there
/// may be no memory left even to say so) is left to Rust's abort; a large infallible one is
/// reported here, once, and ends the MPI job.
fn failed(bytes: usize) {
    if FALLIBLE.try_with(|f| f.get()).unwrap_or(true) || bytes < (1 << 20) || REPORTING.swap(true, Ordering::SeqCst) {
        return;
    }
    crate::sys::say(format!("hvtrain: error on rank {}: out of memory: {}", crate::sys::rank_tag(), message(bytes)));
    crate::parallel::comm::abort_world(1);
    crate::sys::hard_exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_allocation_is_an_error_naming_what_and_the_way_out() {
        set_state(StateBytes::of(1 << 20, 1 << 20), 1);
        let _f = allocating("the test's buffer");
        let e = zeros::<f32>(usize::MAX / 8).unwrap_err().to_string();
        assert!(e.starts_with("out of memory: allocating "), "{e}");
        assert!(e.contains("for the test's buffer failed"), "{e}");
        assert!(e.contains("params 4.0 MiB, grads 8.0 MiB, optimizer 4.0 MiB (16.0 MiB in all)"), "{e}");
        assert!(e.contains("split the model over ranks with parallel.tensor / parallel.pipeline"), "{e}");
        assert_eq!(zeros::<f32>(3).unwrap(), [0.0; 3]);
        assert_eq!(to_vec(&[1, 2]).unwrap(), [1, 2]);
    }
}
