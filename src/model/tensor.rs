//! Tensor parallelism for the MLP (Megatron-style): which slice of each dense layer a tensor
//! rank holds, and how a shard's arena maps to the whole model's.
//!
//! Consecutive dense layers pair up: layer 2i is column-parallel (rank t holds columns
//! `part(out, t, T)` of W and of b; its activation is applied locally), layer 2i+1
//! row-parallel (rank t holds the matching rows `part(inp, t, T)` of W and the whole bias;
//! its partial products are summed over the tensor group, then the bias is added once). An
//! unpaired last layer (odd layer count) is whole on every rank: its input is the row-parallel
//! layer's summed output, the same on every rank, so its output (the logits) is too.
//!
//! Widths that do not divide by T are split unevenly: the first `width % T` ranks get one unit
//! more. Every split width needs at least T units (the job file's validation refuses less).
//!
//! The shard's arena has the whole model's order (last layer first, weight then bias), with
//! the local shapes, so the fusion plan and the engine see this rank's tensors only.
//! `scatter` cuts a shard out of a whole arena (parameters or optimizer state, which share
//! the layout), `assemble` puts the shards back together; both are pure.
//!
//! Must not: communicate (sums are the caller's `TensorSum`).

use super::Mlp;
use crate::device::Backend;
use crate::error::Result;
use std::ops::Range;

/// What a rank holds of one dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The whole layer (no tensor parallelism, or an unpaired last layer).
    Whole,
    /// A slice of the output columns of W and of b.
    Column,
    /// A slice of the input rows of W; the whole b.
    Row,
}

/// The split of layer `l` of `n` when `ts` ranks share each layer.
pub fn split_of(l: usize, n: usize, ts: usize) -> Split {
    if ts == 1 {
        Split::Whole
    } else if l % 2 == 1 {
        Split::Row
    } else if l + 1 < n {
        Split::Column
    } else {
        Split::Whole
    }
}

/// Rank `t`'s units of a width `n` split over `ts` ranks: contiguous, the first `n % ts`
/// ranks one unit more.
pub fn part(n: usize, t: usize, ts: usize) -> Range<usize> {
    let (q, r) = (n / ts, n % ts);
    let start = t * q + t.min(r);
    start..start + q + usize::from(t < r)
}

/// The sum over the tensor group that forward and backward need: in place, on the first `n`
/// floats of `buf`. Every rank of the group calls it at the same points.
pub trait TensorSum<B: Backend> {
    fn sum(&mut self, be: &B, buf: &mut B::Buf, n: usize) -> Result<()>;
}

/// No tensor group (a whole model): the sum over one rank is the value itself.
pub struct Whole;

impl<B: Backend> TensorSum<B> for Whole {
    fn sum(&mut self, _be: &B, _buf: &mut B::Buf, _n: usize) -> Result<()> {
        Ok(())
    }
}

/// One contiguous run of a shard's arena and where it sits in the whole arena; `shared` when
/// every rank of the group holds the same values (whole layers, row-parallel biases).
struct Piece {
    local: Range<usize>,
    whole: Range<usize>,
    shared: bool,
}

/// The pieces of shard `local` (of the whole model `whole`).
fn pieces(local: &Mlp, whole: &Mlp) -> Vec<Piece> {
    let (t, ts) = local.tensor;
    let mut v = Vec::new();
    for (ls, ws) in local.layers.iter().zip(&whole.layers) {
        match ls.split {
            Split::Whole => {
                v.push(Piece { local: ls.w.clone(), whole: ws.w.clone(), shared: true });
                v.push(Piece { local: ls.b.clone(), whole: ws.b.clone(), shared: true });
            }
            Split::Column => {
                let cols = part(ws.out, t, ts);
                for i in 0..ws.inp {
                    let (l0, w0) = (ls.w.start + i * ls.out, ws.w.start + i * ws.out + cols.start);
                    v.push(Piece { local: l0..l0 + ls.out, whole: w0..w0 + ls.out, shared: false });
                }
                let w0 = ws.b.start + cols.start;
                v.push(Piece { local: ls.b.clone(), whole: w0..w0 + ls.out, shared: false });
            }
            Split::Row => {
                let rows = part(ws.inp, t, ts);
                let w0 = ws.w.start + rows.start * ws.out;
                v.push(Piece { local: ls.w.clone(), whole: w0..w0 + ls.w.len(), shared: false });
                v.push(Piece { local: ls.b.clone(), whole: ws.b.clone(), shared: true });
            }
        }
    }
    v
}

/// Where shard `local`'s arena sits in `whole`'s (the whole stage it is a shard of): runs
/// (local range, whole range, held by every tensor rank alike), in local order; the arena's
/// padding in neither. A checkpoint written in parts maps a rank's pieces through them.
pub fn runs_in_whole(local: &Mlp, whole: &Mlp) -> Vec<(Range<usize>, Range<usize>, bool)> {
    pieces(local, whole).into_iter().map(|p| (p.local, p.whole, p.shared)).collect()
}

/// Shard `local`'s part of a whole arena `all` (parameters, momentum or Adam moments): the
/// reference the checkpoint maps and `placement::init_local` are tested against.
#[cfg(test)]
pub fn scatter(local: &Mlp, whole: &Mlp, all: &[f32]) -> Vec<f32> {
    assert_eq!(all.len(), whole.n_params, "a whole arena of another model");
    let mut out = vec![0.0; local.n_params];
    for p in pieces(local, whole) {
        out[p.local].copy_from_slice(&all[p.whole]);
    }
    out
}

/// The whole arena from every tensor rank's shard arena (`parts[t]` of rank t). Values every
/// rank holds (whole layers, row-parallel biases) are taken from rank 0.
pub fn assemble(whole: &Mlp, parts: &[Vec<f32>]) -> Vec<f32> {
    let ts = parts.len();
    let mut all = vec![0.0; whole.n_params];
    for (t, part) in parts.iter().enumerate() {
        let local = Mlp::with_tensor(&whole.sizes, whole.acts.clone(), whole.loss, t, ts);
        assert_eq!(part.len(), local.n_params, "tensor rank {t}'s shard has another length");
        for p in pieces(&local, whole) {
            if t == 0 || !p.shared {
                all[p.whole].copy_from_slice(&part[p.local]);
            }
        }
    }
    all
}

/// Layer `l`'s slot of the whole stage `whole` (`Mlp::slot`: weight, bias, padding zeros)
/// from every tensor rank's slot of that layer (`parts[t]`, its shard's `slot(l)`): what
/// `assemble` gives for one layer, so that the whole model can be put together a layer at a
/// time. Values every rank holds are taken from rank 0.
pub fn assemble_layer(whole: &Mlp, l: usize, parts: &[Vec<f32>]) -> Vec<f32> {
    let ts = parts.len();
    let ws = whole.slot(l);
    let mut out = vec![0.0; ws.len()];
    for (t, part) in parts.iter().enumerate() {
        let local = whole.shard(t, ts);
        let ls = local.slot(l);
        assert_eq!(part.len(), ls.len(), "tensor rank {t}'s slot of layer {l} has another length");
        for p in pieces(&local, whole) {
            let inside = !p.local.is_empty() && p.local.start >= ls.start && p.local.end <= ls.end;
            if inside && (t == 0 || !p.shared) {
                out[p.whole.start - ws.start..p.whole.end - ws.start]
                    .copy_from_slice(&part[p.local.start - ls.start..p.local.end - ls.start]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Activation, LossKind};

    #[test]
    fn parts_cover_the_width_unevenly() {
        for n in 1..20 {
            for ts in 1..=n {
                let ranges: Vec<_> = (0..ts).map(|t| part(n, t, ts)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[ts - 1].end, n);
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
                assert!(ranges.iter().all(|r| r.len() == n / ts || r.len() == n / ts + 1));
            }
        }
        assert_eq!(part(10, 0, 4), 0..3);
        assert_eq!(part(10, 3, 4), 8..10);
    }

    #[test]
    fn scatter_then_assemble_is_the_identity_and_shards_partition_the_model() {
        for sizes in [vec![5, 7, 6, 3], vec![5, 10, 8, 3, 4], vec![3, 4, 2]] {
            let whole = Mlp::new(&sizes, Activation::Tanh, LossKind::SoftmaxCrossEntropy);
            // Values 1, 2, …; the arena's padding 0 (never split, never assembled).
            let all = whole.pad(&(1..=whole.n_logical()).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
            for ts in 1..=4.min(sizes[1]) {
                let parts: Vec<Vec<f32>> = (0..ts)
                    .map(|t| {
                        let local = Mlp::with_tensor(&sizes, whole.acts.clone(), whole.loss, t, ts);
                        let p = scatter(&local, &whole, &all);
                        assert_eq!(p.len(), local.n_params);
                        p
                    })
                    .collect();
                assert_eq!(assemble(&whole, &parts), all, "{sizes:?} over {ts}");
                // A layer at a time: the same slots.
                for l in 0..whole.layers.len() {
                    let slots: Vec<Vec<f32>> = (0..ts)
                        .map(|t| {
                            parts[t][Mlp::with_tensor(&sizes, whole.acts.clone(), whole.loss, t, ts).slot(l)].to_vec()
                        })
                        .collect();
                    assert_eq!(assemble_layer(&whole, l, &slots), all[whole.slot(l)], "{sizes:?} over {ts}, layer {l}");
                }
                // Split tensors partition the whole: every value sits in exactly one shard,
                // or in every shard when shared.
                let mut seen = vec![0usize; whole.n_logical() + 1];
                for p in &parts {
                    for &v in p {
                        seen[v as usize] += 1;
                    }
                }
                assert!(seen[1..].iter().all(|&c| c == 1 || c == ts), "{sizes:?} over {ts}: {seen:?}");
            }
        }
    }

    /// T threads, each a tensor rank with its shard, summing through shared memory: every
    /// rank's loss and gradients must be the whole model's (its slice of them), so every sum
    /// forward and backward is where it must be. (The MPI version: tests/it/model_parallel.rs.)
    #[test]
    fn sharded_forward_and_backward_give_the_whole_models_loss_and_gradients() {
        use crate::device::Cpu;
        use crate::model::{GradSink, Targets, Workspace};
        use std::sync::{Arc, Barrier, Mutex};

        struct Arena<'a>(&'a mut Vec<f32>, Vec<Range<usize>>);
        impl GradSink<Cpu> for Arena<'_> {
            fn slot(&mut self, t: usize) -> &mut [f32] {
                &mut self.0[self.1[t].clone()]
            }
            fn ready(&mut self, _t: usize) {}
        }
        struct ThreadSum(Arc<(Barrier, Mutex<Vec<f32>>)>);
        impl TensorSum<Cpu> for ThreadSum {
            fn sum(&mut self, _be: &Cpu, buf: &mut Vec<f32>, n: usize) -> Result<()> {
                let (barrier, acc) = &*self.0;
                if barrier.wait().is_leader() {
                    *acc.lock().unwrap() = vec![0.0; n];
                }
                barrier.wait();
                acc.lock().unwrap().iter_mut().zip(&buf[..n]).for_each(|(a, v)| *a += v);
                barrier.wait();
                buf[..n].copy_from_slice(&acc.lock().unwrap());
                barrier.wait();
                Ok(())
            }
        }
        // One step's (loss, gradient arena) of `m` with parameters `p`.
        fn step(m: &Mlp, p: &[f32], tp: &mut impl TensorSum<Cpu>) -> (f64, Vec<f32>) {
            let b = 4;
            let x: Vec<f32> = (0..b * m.n_inputs()).map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0).collect();
            let labels: Vec<i32> = (0..b as i32).map(|i| i % m.n_outputs() as i32).collect();
            let mut ws = Workspace::new(&Cpu, m, b).unwrap();
            let p = p.to_vec();
            m.forward_tp(&Cpu, &mut crate::model::Held(&p), &x, b, &mut ws, tp).unwrap();
            let (loss, _) =
                m.loss(&Cpu, Targets::Classes(&labels, None, None), b, 1.0 / b as f32, &mut ws, true).unwrap();
            let mut g = vec![0.0; m.n_params];
            let ranges = m.tensors().into_iter().map(|t| t.range).collect();
            m.backward_tp(&Cpu, &mut crate::model::Held(&p), &x, b, &mut ws, &mut Arena(&mut g, ranges), tp).unwrap();
            (loss, g)
        }
        for sizes in [vec![5, 7, 6, 4, 3], vec![5, 7, 6, 3]] {
            for act in [Activation::Tanh, Activation::Gelu, Activation::Relu, Activation::Silu, Activation::LeakyRelu] {
                let whole = Mlp::new(&sizes, act, LossKind::SoftmaxCrossEntropy);
                let p = whole.init_params(3);
                let (loss, g) = step(&whole, &p, &mut Whole);
                for ts in [2, 3] {
                    let shared = Arc::new((Barrier::new(ts), Mutex::new(Vec::new())));
                    let threads: Vec<_> = (0..ts)
                        .map(|t| {
                            let (whole, p, shared) = (whole.clone(), p.clone(), shared.clone());
                            std::thread::spawn(move || {
                                let local = Mlp::with_tensor(&whole.sizes, whole.acts.clone(), whole.loss, t, ts);
                                let (l, g) = step(&local, &scatter(&local, &whole, &p), &mut ThreadSum(shared));
                                (local, l, g)
                            })
                        })
                        .collect();
                    for (local, l, gl) in threads.into_iter().map(|h| h.join().unwrap()) {
                        let want = scatter(&local, &whole, &g);
                        let worst = gl.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                        assert!(((l - loss) / loss).abs() < 1e-6, "{sizes:?} {act:?} T={ts}: loss {l} vs {loss}");
                        assert!(
                            worst < 1e-6,
                            "{sizes:?} {act:?} T={ts} rank {}: gradients differ by {worst}",
                            local.tensor.0
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pairs_are_column_then_row_and_an_odd_last_layer_is_whole() {
        let m = Mlp::with_tensor(&[4, 6, 5, 3], Activation::Relu, LossKind::Mse, 1, 2);
        let splits: Vec<Split> = m.layers.iter().map(|s| s.split).collect();
        assert_eq!(splits, [Split::Column, Split::Row, Split::Whole]);
        assert_eq!((m.layers[0].inp, m.layers[0].out), (4, 3));
        assert_eq!((m.layers[1].inp, m.layers[1].out), (3, 5));
        assert_eq!((m.layers[2].inp, m.layers[2].out), (5, 3));
        let m = Mlp::with_tensor(&[4, 6, 5, 3, 2], Activation::Relu, LossKind::Mse, 0, 4);
        let splits: Vec<Split> = m.layers.iter().map(|s| s.split).collect();
        assert_eq!(splits, [Split::Column, Split::Row, Split::Column, Split::Row]);
        assert_eq!((m.layers[2].inp, m.layers[2].out), (5, 1));
        assert_eq!((m.layers[3].inp, m.layers[3].out), (1, 2));
    }
}
