//! The workers' side of the reduction seam: each gradient bucket goes to the server that owns
//! it (`PUSH`), and what comes back is the bucket's parameters after the server applied it
//! (at once asynchronously; once every worker's gradient is in, synchronously; held back while
//! this worker is more than K steps ahead). The worker's optimizer (`Optimizer::assign`)
//! copies them in, so after the last bucket of step t the worker holds the parameters it
//! computes step t + 1 on. Runs on the engine's communication thread: while one bucket
//! travels, backward computes the next.
//!
//! With `optimizer.global_clipnorm` (`Roles::whole_step`) a push gets no reply of its own:
//! after the step's last bucket the worker sends `END` with its tensors' sums of squares,
//! and the main thread reads every bucket's reply once the step is done (`receive_step`).
//!
//! Also the main thread's exchanges with the servers between steps: pulling every bucket
//! (`pull_all`), the state for a checkpoint (`snapshot`), the staleness statistics, and the
//! end (`done`).
//!
//! Must not: block the main thread (it runs on the engine's communication thread).

use super::stats::Stats;
use super::{
    as_words_mut, floats, put_u64, Roles, CONTROL, DONE, END, PULL, PUSH, PUSH_HEADER, REPLY, SNAPSHOT, STATS,
    STOP_NOTE,
};
use crate::parallel::comm::{Channel, Link};
use crate::parallel::reduce::Reducer;
use crate::parallel::FusionPlan;
use std::sync::atomic::{AtomicBool, Ordering};

/// A server's `STOP_NOTE` has reached this worker: its next stop vote says "signalled", as if
/// the signal had come here (a node going down signals only its own ranks).
static SERVER_SIGNALLED: AtomicBool = AtomicBool::new(false);

pub fn server_signalled() -> bool {
    SERVER_SIGNALLED.load(Ordering::SeqCst)
}

/// Read a `STOP_NOTE` from server `from` if one has come.
fn read_stop_note(link: &Link, from: usize) {
    if link.try_receive(from, STOP_NOTE).is_some() && !SERVER_SIGNALLED.swap(true, Ordering::SeqCst) {
        log::info!("parameter server (rank {from}) was signalled: stopping at the workers' next stop vote");
    }
}

pub struct PushPull {
    link: Link,
    owner: Vec<usize>,
    /// Per bucket: the global step of its last push.
    step: Vec<u64>,
    buf: Vec<u32>,
    /// With `Roles::whole_step`: the servers told at the step's end, each bucket's tensors
    /// (index, range in the bucket), their sums of squares this step, and the buckets pushed.
    whole_step: Option<WholeStep>,
}

struct WholeStep {
    servers: Vec<usize>,
    tensors: Vec<Vec<(usize, std::ops::Range<usize>)>>,
    sq: Vec<f64>,
    pushed: usize,
}

impl PushPull {
    /// `step`: global steps already taken (a resumed run's).
    pub fn new(link: Link, roles: &Roles, plan: &FusionPlan, step: u64) -> PushPull {
        let whole_step = roles.whole_step.then(|| WholeStep {
            servers: roles.owning_servers(),
            tensors: plan
                .members
                .iter()
                .zip(&plan.buckets)
                .map(|(m, b)| {
                    m.iter().map(|&t| (t, plan.slots[t].start - b.start..plan.slots[t].end - b.start)).collect()
                })
                .collect(),
            sq: vec![0.0; plan.slots.len()],
            pushed: 0,
        });
        PushPull { link, owner: roles.owner.clone(), step: vec![step; roles.owner.len()], buf: Vec::new(), whole_step }
    }
}

impl Reducer for PushPull {
    fn reduce(&mut self, _grads: &[f32], _out: &mut [f32]) {
        unreachable!("a parameter-server exchange needs the bucket's index (reduce_bucket)")
    }
    fn reduce_bucket(&mut self, index: usize, grads: &[f32], out: &mut [f32]) {
        self.step[index] += 1;
        let s = self.step[index];
        self.buf.clear();
        self.buf.extend_from_slice(&[index as u32, s as u32, (s >> 32) as u32, 0]);
        debug_assert_eq!(self.buf.len(), PUSH_HEADER);
        self.buf.extend_from_slice(super::as_words(grads));
        let to = self.owner[index];
        self.link.send(to, PUSH, &self.buf);
        let Some(w) = &mut self.whole_step else {
            self.link.receive_into(to, REPLY + index as i32, as_words_mut(out));
            read_stop_note(&self.link, to);
            return;
        };
        // The sums of squares as the backends take them (float64, in element order).
        for (t, r) in &w.tensors[index] {
            w.sq[*t] = grads[r.clone()].iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        }
        w.pushed += 1;
        if w.pushed == self.owner.len() {
            w.pushed = 0;
            self.buf.clear();
            put_u64(&mut self.buf, s);
            for &q in &w.sq {
                put_u64(&mut self.buf, q.to_bits());
            }
            for &to in &w.servers {
                self.link.send(to, END, &self.buf);
            }
        }
    }
    fn grad_scale(&self) -> f32 {
        1.0
    }
    fn what(&self) -> &'static str {
        "push gradients, pull parameters (parameter server)"
    }
    fn into_channel(self: Box<Self>) -> Option<Channel> {
        None
    }
}

/// Main thread, between steps: every bucket's current parameters into `params` (the whole
/// arena). All pulls go out first, then the replies are read.
pub fn pull_all(link: &Link, roles: &Roles, plan: &FusionPlan, params: &mut [f32]) {
    for (b, &to) in roles.owner.iter().enumerate() {
        link.send(to, PULL, &[b as u32]);
    }
    receive_step(link, roles, plan, params);
}

/// Main thread, after a step with `Roles::whole_step` (the communication thread is idle: every
/// bucket was pushed and the step's `END` sent): every bucket's updated parameters into
/// `params` (the whole arena).
pub fn receive_step(link: &Link, roles: &Roles, plan: &FusionPlan, params: &mut [f32]) {
    for (b, &from) in roles.owner.iter().enumerate() {
        link.receive_into(from, REPLY + b as i32, as_words_mut(&mut params[plan.buckets[b].clone()]));
        read_stop_note(link, from);
    }
}

/// Worker 0, while every worker waits at a barrier: the whole parameters and optimizer state
/// (m, v of `m_len`/`v_len`: the whole arena's, or empty) assembled from the servers.
pub fn snapshot(
    link: &Link,
    roles: &Roles,
    plan: &FusionPlan,
    m_len: usize,
    v_len: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n = plan.total_len();
    let (mut p, mut m, mut v) = (vec![0.0; n], vec![0.0; m_len], vec![0.0; v_len]);
    for s in roles.workers..roles.workers + roles.servers {
        link.send(s, SNAPSHOT, &[]);
        let words = link.receive(s, CONTROL);
        let mut at = 0;
        for b in roles.owned_by(s) {
            let r = plan.buckets[b].clone();
            for (dst, has) in [(&mut p, true), (&mut m, m_len > 0), (&mut v, v_len > 0)] {
                if has {
                    dst[r.clone()].copy_from_slice(floats(&words[at..at + r.len()]));
                    at += r.len();
                }
            }
        }
        assert_eq!(at, words.len(), "server {s}'s snapshot has another layout");
    }
    (p, m, v)
}

/// Worker 0: every server's staleness statistics since the last ask, merged.
pub fn stats(link: &Link, roles: &Roles) -> Stats {
    let mut all = Stats::default();
    for s in roles.workers..roles.workers + roles.servers {
        link.send(s, STATS, &[]);
        all.merge(&Stats::from_words(&link.receive(s, CONTROL)));
    }
    all
}

/// Every worker, at the end: tell each server this worker is done, and whether the workers
/// stopped on a signal (`stopped`: the servers then exit 75 with them) or completed.
pub fn done(link: &Link, roles: &Roles, stopped: bool) {
    for s in roles.workers..roles.workers + roles.servers {
        link.send(s, DONE, &[u32::from(stopped)]);
    }
}
