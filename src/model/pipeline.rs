//! Pipeline parallelism for the MLP: which layers each stage holds, and the order in which a
//! stage runs its micro-batches (1F1B). Both are pure functions of the model and the layout,
//! so every rank computes the same answer without a message.
//!
//! Stages are contiguous runs of layers, balanced by FLOPs (a dense layer's forward and
//! backward cost is proportional to inputs × outputs): the split minimizes the most expensive
//! stage. Because the arena is laid out last layer first, a stage's parameters are one
//! contiguous range of the whole model's arena, and the whole arena is the stages' arenas
//! from the last stage to the first (`arena_range`).
//!
//! The schedule is the non-interleaved 1F1B of PipeDream-Flush / Megatron-LM: stage p of P
//! first runs min(P − 1 − p, M) forwards (warm-up), then alternates one forward and one
//! backward, then runs the remaining backwards (cool-down). At most P − p micro-batches are
//! in flight on stage p, and its last operation is always the last micro-batch's backward,
//! the one during which gradients are handed to the data-parallel engine.
//!
//! Must not: send anything (messages are `parallel/pipe.rs`'s).

use std::ops::Range;

pub use crate::config::parallel::stages;

/// Where stage `layers`' parameters sit in the whole model's arena (weights [in, out] and
/// biases of every layer, last layer first).
pub fn arena_range(sizes: &[usize], layers: &Range<usize>) -> Range<usize> {
    let n = sizes.len() - 1;
    let len = |l: usize| (sizes[l] * sizes[l + 1] + sizes[l + 1]).next_multiple_of(crate::model::ARENA_ALIGN);
    let start: usize = (layers.end..n).map(len).sum();
    start..start + layers.clone().map(len).sum::<usize>()
}

/// One operation of a stage's schedule, on micro-batch `m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Forward(usize),
    Backward(usize),
}

/// Stage `p` of `stages`: its operations for `micro` micro-batches, in order (1F1B).
pub fn one_f_one_b(p: usize, stages: usize, micro: usize) -> Vec<Op> {
    assert!(p < stages && micro > 0);
    let warm = (stages - 1 - p).min(micro);
    let mut ops: Vec<Op> = (0..warm).map(Op::Forward).collect();
    let (mut f, mut b) = (warm, 0);
    while f < micro {
        ops.push(Op::Forward(f));
        ops.push(Op::Backward(b));
        f += 1;
        b += 1;
    }
    ops.extend((b..micro).map(Op::Backward));
    ops
}

/// The idle fraction of an ideal 1F1B pipeline: (P − 1) / (M + P − 1).
pub fn ideal_bubble(stages: usize, micro: usize) -> f64 {
    (stages - 1) as f64 / (micro + stages - 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_cover_the_layers_in_order_and_balance_flops() {
        // 784-8192-8192-8192-10: the two middle layers dominate.
        let s = stages(&[784, 8192, 8192, 8192, 10], 2).unwrap();
        assert_eq!(s, [0..2, 2..4]);
        let s = stages(&[784, 8192, 8192, 8192, 10], 4).unwrap();
        assert_eq!(s, [0..1, 1..2, 2..3, 3..4]);
        // One huge layer gets a stage to itself.
        let s = stages(&[10, 10, 1000, 10, 10], 2).unwrap();
        assert_eq!(s, [0..2, 2..4]);
        for sizes in [vec![5, 7, 6, 4, 3], vec![3, 100, 2, 50, 50, 9, 4], vec![2, 3]] {
            let n = sizes.len() - 1;
            for p in 1..=n {
                let s = stages(&sizes, p).unwrap();
                assert_eq!(s.len(), p);
                assert_eq!(s[0].start, 0);
                assert_eq!(s[p - 1].end, n);
                assert!(s.windows(2).all(|w| w[0].end == w[1].start) && s.iter().all(|r| !r.is_empty()));
                // Brute force: no split has a smaller maximum.
                let cost = |r: &Range<usize>| r.clone().map(|l| sizes[l] * sizes[l + 1]).sum::<usize>();
                let worst = s.iter().map(cost).max().unwrap();
                let best = all_splits(n, p).iter().map(|sp| sp.iter().map(cost).max().unwrap()).min().unwrap();
                assert_eq!(worst, best, "{sizes:?} in {p}: {s:?}");
            }
        }
        let e = stages(&[5, 7, 3], 3).unwrap_err();
        assert!(e.contains("parallel.pipeline ≤ 2"), "{e}");
    }

    fn all_splits(n: usize, p: usize) -> Vec<Vec<Range<usize>>> {
        if p == 1 {
            return vec![vec![0..n]];
        }
        let mut v = Vec::new();
        for first in 1..=n - (p - 1) {
            for mut rest in all_splits(n - first, p - 1) {
                let shifted = rest.drain(..).map(|r| r.start + first..r.end + first);
                v.push(std::iter::once(0..first).chain(shifted).collect());
            }
        }
        v
    }

    #[test]
    fn stage_arenas_concatenate_to_the_whole_arena_last_stage_first() {
        let sizes = [5, 7, 6, 4, 3];
        let whole = crate::model::Mlp::new(&sizes, crate::config::Activation::Relu, crate::config::LossKind::Mse);
        let s = stages(&sizes, 3).unwrap();
        let ranges: Vec<_> = s.iter().rev().map(|r| arena_range(&sizes, r)).collect();
        assert_eq!(ranges[0].start, 0);
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(ranges.last().unwrap().end, whole.n_params);
        for (r, layers) in ranges.iter().zip(s.iter().rev()) {
            let l = layers.start;
            assert_eq!(r.end, whole.layers[l].end, "stage {layers:?} ends with its first layer's bias (and padding)");
        }
    }

    /// Runs every stage's schedule together, a message at a time, with sends that never
    /// block (as `Channel::isend`): the pipeline must always finish (no stage waits forever
    /// for a message), each stage runs F(m) before B(m), and no stage holds more than P − p
    /// micro-batches.
    #[test]
    fn one_f_one_b_never_deadlocks_and_bounds_what_is_in_flight() {
        for p_n in 1..=6 {
            for m in 1..=9 {
                let sched: Vec<Vec<Op>> = (0..p_n).map(|p| one_f_one_b(p, p_n, m)).collect();
                let mut pos = vec![0usize; p_n];
                // Messages delivered: activations into stage p, gradients into stage p.
                let mut acts = vec![Vec::<usize>::new(); p_n];
                let mut grads = vec![Vec::<usize>::new(); p_n];
                loop {
                    let mut moved = false;
                    for p in 0..p_n {
                        let Some(&op) = sched[p].get(pos[p]) else { continue };
                        let ready = match op {
                            Op::Forward(i) => p == 0 || acts[p].contains(&i),
                            Op::Backward(i) => p + 1 == p_n || grads[p].contains(&i),
                        };
                        if !ready {
                            continue;
                        }
                        match op {
                            Op::Forward(i) if p + 1 < p_n => acts[p + 1].push(i),
                            Op::Backward(i) if p > 0 => grads[p - 1].push(i),
                            _ => {}
                        }
                        pos[p] += 1;
                        moved = true;
                    }
                    if !moved {
                        break;
                    }
                }
                for p in 0..p_n {
                    assert_eq!(pos[p], 2 * m, "P={p_n} M={m}: stage {p} stuck at {:?}", sched[p].get(pos[p]));
                    let mut open = 0usize;
                    let mut most = 0;
                    for (k, op) in sched[p].iter().enumerate() {
                        match *op {
                            Op::Forward(_) => open += 1,
                            Op::Backward(i) => {
                                assert!(sched[p][..k].contains(&Op::Forward(i)));
                                open -= 1;
                            }
                        }
                        most = most.max(open);
                    }
                    assert!(most <= p_n - p, "P={p_n} M={m} stage {p}: {most} in flight");
                    assert_eq!(*sched[p].last().unwrap(), Op::Backward(m - 1));
                }
            }
        }
        assert!((ideal_bubble(4, 4) - 3.0 / 7.0).abs() < 1e-12);
    }

    /// NCCL send/recv (`device/cuda/nccl_pipe.rs`) match messages in the order they were
    /// issued, per communicator: one per direction between two stages. So every receive must
    /// find, at the head of its direction's queue, the micro-batch it waits for: each stage
    /// sends and receives each way in micro-batch order. (One queue for both directions would
    /// not: the earlier stage sends one activation more before its first gradient arrives.)
    #[test]
    fn one_f_one_b_messages_each_way_arrive_in_the_order_they_are_awaited() {
        use std::collections::VecDeque;
        for p_n in 2..=6 {
            for m in 1..=9 {
                let sched: Vec<Vec<Op>> = (0..p_n).map(|p| one_f_one_b(p, p_n, m)).collect();
                let mut pos = vec![0usize; p_n];
                // acts[p]: activations in flight from p - 1 to p; grads[p]: gradients from p + 1 to p.
                let mut acts = vec![VecDeque::<usize>::new(); p_n];
                let mut grads = vec![VecDeque::<usize>::new(); p_n];
                loop {
                    let mut moved = false;
                    for p in 0..p_n {
                        let Some(&op) = sched[p].get(pos[p]) else { continue };
                        let queue = match op {
                            Op::Forward(_) if p > 0 => Some(&mut acts[p]),
                            Op::Backward(_) if p + 1 < p_n => Some(&mut grads[p]),
                            _ => None,
                        };
                        if let Some(q) = queue {
                            let (Op::Forward(i) | Op::Backward(i)) = op;
                            match q.front() {
                                None => continue, // waits for the message
                                Some(&head) => assert_eq!(head, i, "P={p_n} M={m} stage {p}: {op:?} found {head}"),
                            }
                            q.pop_front();
                        }
                        match op {
                            Op::Forward(i) if p + 1 < p_n => acts[p + 1].push_back(i),
                            Op::Backward(i) if p > 0 => grads[p - 1].push_back(i),
                            _ => {}
                        }
                        pos[p] += 1;
                        moved = true;
                    }
                    if !moved {
                        break;
                    }
                }
                assert!((0..p_n).all(|p| pos[p] == 2 * m), "P={p_n} M={m}: stuck at {pos:?}");
                // One queue per pair for both ways would need both stages to issue the pair's
                // messages in one order: stage p's every op touches the pair (p, p + 1) (an
                // activation sent, a gradient received), and so does p + 1's, so the orders
                // are their schedules; the last pair's differ whenever M > 1.
                let same = (0..p_n - 1).all(|p| sched[p] == sched[p + 1]);
                assert_eq!(same, m == 1, "P={p_n} M={m}");
            }
        }
    }
}
