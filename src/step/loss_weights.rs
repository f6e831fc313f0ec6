//! What weighs the training loss: `model.class_weights` (one weight per class, uploaded once)
//! and `data.sample_weight` (one per row, each batch's uploaded before its loss).
//!
//! Must not: weigh evaluation's loss (eval/ never calls these), or compute a loss (model/ does).

use super::Stepper;
use crate::data::loader::Batch;
use crate::device::Backend;
use crate::error::Result;
use crate::parallel::engine::HostBuf;

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// Weigh each class's rows' loss (`model.class_weights`, one weight per output; Keras'
    /// `class_weight`): the training loss and its gradient, not evaluation's.
    pub fn set_class_weights(&mut self, weights: &[f32]) -> Result<()> {
        assert_eq!(weights.len(), self.model.n_outputs(), "one weight per class");
        self.class_weights = Some(self.be.upload(weights)?);
        Ok(())
    }
    /// Weigh each training row's loss by the batch's sample weights (`data.sample_weight`;
    /// Keras' `sample_weight` in `fit`): every batch then carries one weight per row.
    pub fn set_sample_weights(&mut self) -> Result<()> {
        self.sample_weights = Some(self.be.zeros(self.batch)?);
        Ok(())
    }
    /// Rows `r` of the batch's sample weights into the step's buffer (nothing when unweighted).
    pub(super) fn upload_sample_weights(&mut self, batch: &Batch, r: std::ops::Range<usize>) -> Result<()> {
        if let Some(buf) = self.sample_weights.as_mut() {
            assert_eq!(batch.weights.len(), batch.rows, "a batch without its sample weights");
            self.be.upload_into(&batch.weights[r], buf)?;
        }
        Ok(())
    }
}
