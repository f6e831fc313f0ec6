//! The engine against an NCCL-like device collective, on the CPU (tests only): ranks as
//! threads, each with its own engine; buffers whose "device" memory is a plain vector and
//! whose host copy is poisoned (NaN), so a bucket that took the host path shows; a reducer that
//! takes device pointers and sums every rank's bucket in rank order once all have arrived, as
//! `ncclAllReduce` does, recording the size of each call. Checked: every bucket of every step
//! reduced exactly, through device pointers only, the same buckets in the same order on every
//! rank (a collective called in another order mixes buckets or hangs), with overlap on and
//! off, backward and forward bucket order, a small first bucket.
//!
//! Must not: be compiled outside tests.

use super::{Engine, HostBuf};
use crate::config::{BucketOrder, Compression};
use crate::parallel::fusion::FusionPlan;
use crate::parallel::reduce::Reducer;
use std::sync::{Arc, Barrier, Mutex};

/// A bucket buffer in emulated device memory.
struct Dev {
    dev: Vec<f32>,
    /// What the host path would read and write: NaN, so using it poisons the result.
    host: Vec<f32>,
}

impl HostBuf for Dev {
    fn host(&self) -> &[f32] {
        &self.host
    }
    fn host_mut(&mut self) -> &mut [f32] {
        &mut self.host
    }
    fn id(&self) -> usize {
        self.dev.as_ptr() as usize
    }
    fn len(&self) -> usize {
        self.dev.len()
    }
    fn to_host(&mut self, _: Compression) -> Result<(), String> {
        Err("the host path was taken".into())
    }
    fn reduce_on_device(&mut self, out: &mut Self, reducer: &mut dyn Reducer) -> Option<Result<(), String>> {
        let n = self.dev.len();
        // SAFETY: both hold n floats, and nothing else touches them during the call.
        unsafe { reducer.reduce_device(self.dev.as_ptr() as u64, out.dev.as_mut_ptr() as u64, n) };
        Some(Ok(()))
    }
}

/// What the emulated ranks share: each call's contributions, and each rank's call sizes.
struct Shared {
    ranks: usize,
    barrier: Barrier,
    slots: Mutex<Vec<Vec<f32>>>,
    calls: Mutex<Vec<Vec<usize>>>,
}

/// An NCCL-like all-reduce over the emulated ranks.
struct Collective {
    rank: usize,
    shared: Arc<Shared>,
}

impl Reducer for Collective {
    fn reduce(&mut self, _: &[f32], out: &mut [f32]) {
        out.fill(f32::NAN); // never on the host path
    }
    fn takes_device_pointers(&self) -> bool {
        true
    }
    unsafe fn reduce_device(&mut self, send: u64, recv: u64, n: usize) {
        let s = &self.shared;
        // SAFETY: as the caller promises.
        let mine = unsafe { std::slice::from_raw_parts(send as *const f32, n) }.to_vec();
        s.slots.lock().unwrap()[self.rank] = mine;
        s.calls.lock().unwrap()[self.rank].push(n);
        s.barrier.wait();
        {
            let slots = s.slots.lock().unwrap();
            // SAFETY: as the caller promises.
            let out = unsafe { std::slice::from_raw_parts_mut(recv as *mut f32, n) };
            for (i, o) in out.iter_mut().enumerate() {
                // Every rank's slot must be this call's: the same size, or the orders differ.
                *o = (0..s.ranks).map(|r| slots[r].get(i).copied().unwrap_or(f32::NAN)).sum();
                if slots.iter().any(|v| v.len() != n) {
                    *o = f32::NAN;
                }
            }
        }
        s.barrier.wait();
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "emulated device all-reduce"
    }
    fn into_channel(self: Box<Self>) -> Option<crate::parallel::Channel> {
        None
    }
}

/// Rank r's gradient of tensor t, element i, step s: distinct everywhere, exact in float32 sums.
fn grad(r: usize, t: usize, i: usize, s: u64) -> f32 {
    ((r * 7 + t * 3 + i % 5) as f32) * 0.25 + s as f32
}

fn run(ranks: usize, overlap: bool, order: BucketOrder, first: usize) {
    let lens = [300, 30, 2000, 20, 500, 5];
    let plan = FusionPlan::with_options(&lens, 4 * 1024, first, order);
    let shared = Arc::new(Shared {
        ranks,
        barrier: Barrier::new(ranks),
        slots: Mutex::new(vec![Vec::new(); ranks]),
        calls: Mutex::new(vec![Vec::new(); ranks]),
    });
    let threads: Vec<_> = (0..ranks)
        .map(|rank| {
            let (plan, shared) = (plan.clone(), shared.clone());
            std::thread::spawn(move || {
                let reducer = Box::new(Collective { rank, shared });
                let mut e = Engine::new(reducer, plan.clone(), overlap, None, None, |n| Dev {
                    dev: vec![0.0; n],
                    host: vec![f32::NAN; n],
                });
                for step in 0..3u64 {
                    e.begin_step(step);
                    for t in (0..lens.len()).rev() {
                        let (buf, range) = e.slot(t);
                        for (i, v) in buf.dev[range].iter_mut().enumerate() {
                            *v = grad(rank, t, i, step);
                        }
                        e.tensor_ready(t);
                    }
                    e.flush();
                    while let Some(b) = e.wait_next() {
                        assert!(b.failed.is_none(), "{:?}", b.failed);
                        let start = plan.buckets[b.index].start;
                        for &t in &plan.members[b.index] {
                            let s = &plan.slots[t];
                            for (i, j) in (s.start - start..s.end - start).enumerate() {
                                let want: f32 = (0..ranks).map(|r| grad(r, t, i, step)).sum();
                                assert_eq!(b.reduced.dev[j], want, "rank {rank} step {step} tensor {t} element {i}");
                            }
                        }
                        e.give_back(b);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("an emulated rank failed");
    }
    let calls = shared.calls.lock().unwrap();
    assert_eq!(calls[0].len(), 3 * plan.buckets.len(), "one call per bucket and step");
    assert!(calls.iter().all(|c| *c == calls[0]), "ranks called the collective in other orders: {calls:?}");
    let sizes: Vec<usize> = plan.buckets.iter().map(|b| b.len()).collect();
    let sent: Vec<usize> = calls[0][..sizes.len()].to_vec();
    let mut by_size = sent.clone();
    by_size.sort_unstable();
    let mut want = sizes.clone();
    want.sort_unstable();
    assert_eq!(by_size, want, "every bucket once per step");
}

#[test]
fn buckets_go_through_the_device_collective_exactly_and_in_one_order() {
    for ranks in [1, 2, 3] {
        for overlap in [true, false] {
            for order in [BucketOrder::Backward, BucketOrder::Forward] {
                run(ranks, overlap, order, 0);
                run(ranks, overlap, order, 512);
            }
        }
    }
}
