//! The parameters as forward and backward read them (`Params`): the whole arena in one
//! buffer (`Held`), or, with `distribution.shard = "parameters"` (ZeRO stage 3), each layer
//! gathered from the data-parallel ranks' shards just before it is used (the step's
//! `step::shard::Gathered`).
//!
//! Forward and backward call `fetch` for a layer before they read its weight or bias, in the
//! order `Mlp::fetch_order` lists: a rank that has no rows in a step (and so runs neither)
//! calls `fetch` in that order instead, so that every rank of the data group joins the same
//! gathers. An implementation that keeps the layer fetched last may skip a fetch of it.
//!
//! Must not: call MPI itself (a gathering implementation does, through what it holds) or
//! write parameters.

use super::Mlp;
use crate::device::Backend;
use crate::error::Result;
use std::ops::Range;

/// Read access to the parameter arena, a layer at a time.
pub trait Params<B: Backend> {
    /// Make layer `l`'s slot (its weight and bias) readable through `view`. Collective over
    /// the data group where the layers are gathered.
    fn fetch(&mut self, be: &B, model: &Mlp, l: usize) -> Result<()>;
    /// Arena range `r`, which lies in the slot of the layer fetched last.
    fn view(&self, be: &B, r: Range<usize>) -> B::View<'_>;
}

/// The whole arena, held in one buffer: `fetch` has nothing to do.
pub struct Held<'a, B: Backend>(pub &'a B::Buf);

impl<B: Backend> Params<B> for Held<'_, B> {
    fn fetch(&mut self, _be: &B, _model: &Mlp, _l: usize) -> Result<()> {
        Ok(())
    }
    fn view(&self, be: &B, r: Range<usize>) -> B::View<'_> {
        be.view(self.0, r)
    }
}

impl Mlp {
    /// Layer `l`'s slot in the arena: its weight, its bias and the padding after it.
    pub fn slot(&self, l: usize) -> Range<usize> {
        self.layers[l].w.start..self.layers[l].end
    }

    /// The longest layer slot (a window that holds any one layer).
    pub fn largest_slot(&self) -> usize {
        (0..self.layers.len()).map(|l| self.slot(l).len()).max().unwrap_or(0)
    }

    /// The layers one step's forward and backward fetch (`Params::fetch`), in order:
    /// `forward_fetches`, then `backward_fetches`. A rank without rows fetches these instead.
    #[cfg(test)]
    pub fn fetch_order(&self) -> Vec<usize> {
        let mut v = self.forward_fetches();
        v.extend(self.backward_fetches());
        v
    }

    /// The layers forward fetches: every layer, first to last.
    pub fn forward_fetches(&self) -> Vec<usize> {
        (0..self.layers.len()).collect()
    }

    /// The layers backward fetches: from the last layer down to the second (the first too on
    /// a pipeline stage after the first, which computes its input's gradient).
    pub fn backward_fetches(&self) -> Vec<usize> {
        (0..self.layers.len()).rev().filter(|&l| l > 0 || self.first > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Activation, LossKind};
    use crate::device::Cpu;
    use crate::model::{GradSink, Whole, Workspace};

    /// The whole arena, noting each fetch.
    struct Noted<'a> {
        p: &'a Vec<f32>,
        slots: Vec<Range<usize>>,
        fetched: Vec<usize>,
        at: Option<usize>,
    }
    impl Params<Cpu> for Noted<'_> {
        fn fetch(&mut self, _be: &Cpu, _m: &Mlp, l: usize) -> Result<()> {
            self.fetched.push(l);
            self.at = Some(l);
            Ok(())
        }
        fn view(&self, _be: &Cpu, r: Range<usize>) -> &[f32] {
            // Reads only the layer fetched last: the contract a gathering implementation needs.
            let s = &self.slots[self.at.expect("a read before any fetch")];
            assert!(s.start <= r.start && r.end <= s.end, "{r:?} read outside the slot fetched last, {s:?}");
            &self.p[r]
        }
    }

    struct Grads(Vec<f32>, Vec<Range<usize>>);
    impl GradSink<Cpu> for Grads {
        fn slot(&mut self, t: usize) -> &mut [f32] {
            let r = self.1[t].clone();
            &mut self.0[r]
        }
        fn ready(&mut self, _t: usize) {}
    }

    #[test]
    fn forward_and_backward_fetch_each_layer_before_reading_it_in_fetch_order() {
        for first in [0, 2] {
            let mut m = Mlp::new(&[5, 7, 6, 3], Activation::Relu, LossKind::SoftmaxCrossEntropy);
            m.first = first;
            let p = m.init_params(3);
            let x: Vec<f32> = (0..4 * 5).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut ws = Workspace::new(&Cpu, &m, 4).unwrap();
            let slots = (0..m.layers.len()).map(|l| m.slot(l)).collect();
            let mut noted = Noted { p: &p, slots, fetched: Vec::new(), at: None };
            m.forward_tp(&Cpu, &mut noted, &x, 4, &mut ws, &mut Whole).unwrap();
            m.loss(&Cpu, crate::model::Targets::Classes(&vec![0, 1, 2, 1], None, None), 4, 0.25, &mut ws, true)
                .unwrap();
            let ranges = m.tensors().into_iter().map(|t| t.range).collect();
            let mut g = Grads(vec![0.0; m.n_params], ranges);
            m.backward_tp(&Cpu, &mut noted, &x, 4, &mut ws, &mut g, &mut Whole).unwrap();
            assert_eq!(noted.fetched, m.fetch_order(), "first layer {first}");
        }
        let m = Mlp::new(&[5, 7, 6, 3], Activation::Relu, LossKind::SoftmaxCrossEntropy);
        assert_eq!(m.fetch_order(), vec![0, 1, 2, 2, 1]);
        assert_eq!(m.slot(1), m.layers[1].w.start..m.layers[1].end);
    }
}
