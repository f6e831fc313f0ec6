//! The whole model a layer at a time on rank 0 (weights.h5, best-weights.h5, the TensorBoard
//! histograms) where no rank holds it whole: under `shard = "parameters"` each layer's slot
//! is gathered from the data ranks' pieces, under tensor parallelism the tensor ranks' slices
//! of it are put together on tensor rank 0 (`model::tensor::assemble_layer`), and under
//! pipeline parallelism the stage that holds it sends it to stage 0. No rank holds more than
//! one layer of the model for it.
//!
//! Must not: call MPI itself (the sharder, the tensor group's channel and the pipeline link
//! do) or hold more than one layer at a time.

use super::shard::gather_slot;
use super::Stepper;
use crate::device::Backend;
use crate::error::Result;
use crate::parallel::engine::HostBuf;

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// Collective over the trainers (every rank calls it, `data_rank` its data-parallel
    /// index): each layer of the whole model in turn, handed to `sink(l, slot)` on rank 0
    /// only (`slot`: the layer's slot of the whole model's arena, `Mlp::slot`). False, and
    /// nothing done, where every rank holds the whole model (no model parallelism and no
    /// sharded parameters: `whole_params` then costs no gather).
    pub fn params_by_layer(&self, data_rank: usize, sink: &mut dyn FnMut(usize, &[f32]) -> Result<()>) -> Result<bool> {
        let sharded = self.params_sharded();
        if !sharded && self.tp.is_whole() {
            return Ok(false);
        }
        if !sharded && data_rank != 0 {
            return Ok(true); // replica 0 has the same values
        }
        let tp = &self.tp;
        let (first, held) = (self.model.first, self.model.layers.len());
        let _a = crate::mem::allocating("one layer of the model, gathered (weights.h5)");
        let mut layer = Vec::new();
        for l in 0..tp.full.layers.len() {
            let mine = (first..first + held).contains(&l);
            if mine {
                // This rank's slot of the layer (its tensor shard's), whole on data rank 0.
                let slot = self.model.slot(l - first);
                layer.resize(slot.len(), 0.0);
                match &self.shard {
                    Some(sh) if sharded => gather_slot(&self.be, &self.params, &sh.sharder, &slot, &mut layer)?,
                    _ => self.be.download(&self.params, slot, &mut layer)?,
                }
            }
            if data_rank != 0 {
                continue;
            }
            // The stage's whole layer on its tensor rank 0.
            let stage_layer = match (mine, tp.channel()) {
                (false, _) => None,
                (true, None) => Some(std::mem::take(&mut layer)),
                (true, Some(chan)) => chan
                    .gather_f32s(&layer)
                    .map(|parts| crate::model::tensor::assemble_layer(&tp.stage, l - first, &parts)),
            };
            if tp.index != 0 {
                continue;
            }
            // On rank 0: from the stage that holds it.
            let at0 = match &tp.pipe {
                None => stage_layer,
                Some(pipe) => pipe
                    .gather_stages(stage_layer.as_deref().unwrap_or(&[]))
                    .and_then(|parts| parts.into_iter().find(|p| !p.is_empty())),
            };
            if let Some(slot) = at0 {
                sink(l, &slot)?;
            }
        }
        Ok(true)
    }
}
