//! Parameter servers (`distribution.strategy = "parameter_server"`): the last S ranks hold
//! the parameters and the optimizer state, sharded by fusion bucket; the other W ranks are
//! workers that compute gradients with the ordinary `Stepper`.
//!
//! - `reducer.rs`: the workers' side of the reduction seam. For each fusion bucket that
//!   backward completes, `PushPull` sends the gradients to the bucket's server and receives
//!   that bucket's fresh parameters back, on the engine's communication thread (so pushes
//!   overlap the rest of backward); the worker's "optimizer" copies them in.
//! - `train/ps/server.rs`: the serve loop (above the optimizer, so in the training layer): applies the optimizer to a bucket when every worker's
//!   gradient of a step is in (staleness 0, summed in worker order) or as each arrives
//!   (asynchronous), holds a reply back while the worker is more than K steps ahead of the
//!   slowest, and records the staleness of every applied gradient (`stats.rs`).
//! - this file: who owns which bucket, the message tags and their layout.
//!
//! Messages (all `u32` words on `comm::Link`, float32 travel as their bits):
//!
//! | from → to | tag | words | reply |
//! |---|---|---|---|
//! | worker → owner | `PUSH` | bucket, step (2 words), 0, gradients | `REPLY + bucket`: the bucket's parameters |
//! | worker → owner | `PULL` | bucket | `REPLY + bucket`: the bucket's parameters |
//! | worker 0 → every server | `SNAPSHOT` | – | `CONTROL`: per owned bucket, params, m, v |
//! | worker 0 → every server | `STATS` | – | `CONTROL`: the staleness statistics since the last ask |
//! | every worker → every server | `DONE` | 1 if the workers stopped on a signal, else 0 | none; a server ends when all W are done |
//! | server → every worker not yet done | `STOP_NOTE` | – | none: this server was signalled (SIGTERM, SIGUSR1); a worker that reads it votes to stop |
//! | worker → every owning server | `END` | step (2 words), then per tensor its gradient's sum of squares (f64, 2 words) | `REPLY + bucket` for each bucket, after the update |
//! | owning server → every other owning server | `NORM` | step (2 words), then per owned tensor: index, sum of squares (f64, 2 words) | none |
//!
//! `END` and `NORM` only with `optimizer.global_clipnorm` (`Roles::whole_step`): the norm
//! spans every server's buckets, so a worker pushes all of a step's buckets first (no reply
//! in between), then says `END`; a bucket's update waits for the norm. Synchronously the
//! servers sum each bucket over the workers, exchange their tensors' sums of squares
//! (`NORM`), and clip the step's mean by the global norm, as the all-reduce path does;
//! asynchronously each worker's gradient is clipped by its own step's global norm, from its
//! `END`, as a TensorFlow ParameterServerStrategy worker clips what it applies.
//!
//! Must not: apply an optimizer (the server's loop, `train/ps/server.rs`, does).

pub mod reducer;
pub mod stats;

use super::FusionPlan;

pub const PUSH: i32 = 1;
pub const PULL: i32 = 2;
pub const SNAPSHOT: i32 = 3;
pub const STATS: i32 = 4;
pub const DONE: i32 = 5;
pub const CONTROL: i32 = 6;
pub const STOP_NOTE: i32 = 7;
pub const END: i32 = 8;
pub const NORM: i32 = 9;
/// Replies carrying bucket b's parameters have tag REPLY + b.
pub const REPLY: i32 = 1000;
/// Words before a push's gradients.
pub const PUSH_HEADER: usize = 4;

/// The job's roles: ranks 0..workers train, ranks workers..workers+servers serve.
#[derive(Clone, Debug)]
pub struct Roles {
    pub workers: usize,
    pub servers: usize,
    /// For each bucket, the world rank of the server that owns it.
    pub owner: Vec<usize>,
    /// -1 asynchronous, 0 synchronous, K bounded.
    pub staleness: i64,
    /// Buckets are updated only after the worker's whole step is pushed (`END`, see the
    /// module comment): with `optimizer.global_clipnorm`.
    pub whole_step: bool,
}

impl Roles {
    pub fn new(plan: &FusionPlan, workers: usize, servers: usize, staleness: i64) -> Roles {
        let owner = owners(plan, servers).into_iter().map(|s| workers + s).collect();
        Roles { workers, servers, owner, staleness, whole_step: false }
    }
    /// The servers that own at least one bucket, in rank order (the others take no part in
    /// a step's `END` and `NORM`).
    pub fn owning_servers(&self) -> Vec<usize> {
        let mut s = self.owner.clone();
        s.sort_unstable();
        s.dedup();
        s
    }
    /// The buckets server rank `rank` owns, in bucket order.
    pub fn owned_by(&self, rank: usize) -> Vec<usize> {
        (0..self.owner.len()).filter(|&b| self.owner[b] == rank).collect()
    }
    #[cfg(test)]
    pub fn is_server(&self, rank: usize) -> bool {
        rank >= self.workers
    }
}

/// Which server (0..servers) owns each bucket: the largest bucket first to the least loaded
/// server (ties: the lower index), so the bytes each server receives and applies are even.
pub fn owners(plan: &FusionPlan, servers: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..plan.buckets.len()).collect();
    order.sort_by_key(|&b| (std::cmp::Reverse(plan.buckets[b].len()), b));
    let mut load = vec![0usize; servers];
    let mut owner = vec![0; plan.buckets.len()];
    for b in order {
        let s = (0..servers).min_by_key(|&s| (load[s], s)).expect("at least one server");
        load[s] += plan.buckets[b].len();
        owner[b] = s;
    }
    owner
}

/// A u64 (a step, an f64's bits) as the two words it travels in (low first), and back.
pub fn put_u64(out: &mut Vec<u32>, v: u64) {
    out.extend_from_slice(&[v as u32, (v >> 32) as u32]);
}
pub fn get_u64(w: &[u32]) -> u64 {
    w[0] as u64 | (w[1] as u64) << 32
}

/// float32 as the words they travel in, and back (bit for bit).
pub fn as_words(v: &[f32]) -> &[u32] {
    // SAFETY: f32 and u32 have the same size and alignment; every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len()) }
}
pub fn as_words_mut(v: &mut [f32]) -> &mut [u32] {
    // SAFETY: as above.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len()) }
}
pub fn floats(w: &[u32]) -> &[f32] {
    // SAFETY: as above.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast(), w.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_balance_bytes_and_are_deterministic() {
        let plan = FusionPlan::new(&[100, 10, 60, 50, 5], 0); // one bucket per tensor
        assert_eq!(owners(&plan, 1), vec![0; 5]);
        let o = owners(&plan, 2);
        assert_eq!(o, vec![0, 0, 1, 1, 0]); // 100+10+5 vs 60+50
        assert_eq!(o, owners(&plan, 2));
        let r = Roles::new(&plan, 3, 2, 0);
        assert_eq!(r.owner, vec![3, 3, 4, 4, 3]);
        assert_eq!(r.owned_by(4), vec![2, 3]);
        assert!(r.is_server(3) && !r.is_server(2));
        assert_eq!(r.owning_servers(), vec![3, 4]);
        // More servers than buckets: the last owns none.
        let r = Roles::new(&FusionPlan::new(&[100, 10], 0), 1, 3, 0);
        assert_eq!(r.owning_servers(), vec![1, 2]);
    }

    #[test]
    fn words_round_trip_bits() {
        let v = [1.5f32, -0.0, f32::NAN, f32::INFINITY, 1e-45];
        let w = as_words(&v).to_vec();
        assert_eq!(floats(&w).iter().map(|x| x.to_bits()).collect::<Vec<_>>(), w);
    }
}
