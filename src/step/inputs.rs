//! A step's input rows: copied from the batch in host memory into one of the two input
//! buffers (on a GPU through pinned memory, on a stream of their own), the next step's while
//! this step runs (`prefetch`, so the copy is off the step's critical path), or gathered on
//! the device from the training rows kept there (`set_resident`).
//!
//! Must not: run a step (mod.rs does).

use super::Stepper;
use crate::data::loader::Batch;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::parallel::engine::HostBuf;

/// Training rows in device memory: row r of `x` is the row of global id `first_id + r`.
pub(super) struct Resident<B: Backend> {
    x: B::Buf,
    rows: usize,
    first_id: u32,
    /// This step's row indices into `x`, on the device and in host memory.
    idx: B::Labels,
    host_idx: Vec<i32>,
}

impl<B: Backend> Stepper<B>
where
    B::Buf: HostBuf,
{
    /// Keep `x` ([rows, inputs], row-major, the rows of global ids `first_id`, `first_id` + 1,
    /// …) in device memory: from now on each unpipelined step gathers its batch there by the
    /// batch's ids (the same rows in the same order as the host copy it replaces, so the same
    /// weights), and only the ids (4 bytes a row) cross the bus. The pipelined step and
    /// micro-batches still read `Batch::x`.
    pub fn set_resident(&mut self, x: &[f32], first_id: u32) -> Result<()> {
        let cols = self.model.n_inputs();
        assert_eq!(x.len() % cols, 0, "resident rows of another width");
        let _a = crate::mem::allocating("the training rows kept in device memory (data.on_device)");
        self.resident = Some(Resident {
            x: self.be.upload(x)?,
            rows: x.len() / cols,
            first_id,
            idx: self.be.labels(self.batch)?,
            host_idx: Vec::with_capacity(self.batch),
        });
        Ok(())
    }

    /// Whether a step runs as micro-batches (pipeline stages, gradient accumulation), which
    /// read `Batch::x` in host memory.
    pub fn pipelined(&self) -> bool {
        self.tp.pipe.is_some() || self.micro > 1
    }

    /// The batch's rows into input buffer `xi`: gathered on the device from the resident
    /// rows, or copied from `batch.x`.
    pub(super) fn load_inputs(&mut self, batch: &Batch, xi: usize) -> Result<()> {
        let be = &self.be;
        let Some(r) = self.resident.as_mut() else {
            return be.upload_into(&batch.x, &mut self.xs[xi]);
        };
        let cols = self.model.n_inputs();
        r.host_idx.clear();
        for &id in &batch.ids[..batch.rows] {
            let i = id.checked_sub(r.first_id).map(|i| i as usize).filter(|&i| i < r.rows);
            let i = i.ok_or_else(|| {
                Error::Training(format!(
                    "row id {id} is not among the {} rows kept on the device (ids {}..): a bug in the caller",
                    r.rows, r.first_id
                ))
            })?;
            r.host_idx.push(i as i32);
        }
        be.upload_labels(&r.host_idx, &mut r.idx)?;
        let (src, n) = (be.view(&r.x, 0..r.rows * cols), batch.rows);
        be.gather_rows(src, cols, &r.idx, n, be.view_mut(&mut self.xs[xi], 0..n * cols))
    }

    /// Whether `prefetch` copies batches ahead: their rows come from host memory (not kept
    /// on the device) into the whole-batch input buffers (not micro-batches).
    pub fn prefetches(&self) -> bool {
        self.resident.is_none() && !self.pipelined()
    }

    /// Copy the next step's `batch` into its input buffer now, while this step's kernels
    /// run (on a GPU the copy goes on the input stream and the next step's kernels wait for
    /// it); `run` then finds it there. Only where `prefetches`.
    pub fn prefetch(&mut self, batch: &Batch) -> Result<()> {
        if !self.prefetches() || batch.rows == 0 {
            return Ok(());
        }
        let next = self.step + 1;
        let xi = (next % 2) as usize;
        self.be.upload_into(&batch.x, &mut self.xs[xi])?;
        self.prefetched = Some((next, batch.rows, batch.ids.first().copied().unwrap_or(0)));
        Ok(())
    }

    /// Whether step `self.step`'s `batch` was prefetched (it must be the one `prefetch` had).
    pub(super) fn was_prefetched(&mut self, batch: &Batch) -> bool {
        match self.prefetched.take() {
            Some((step, rows, first)) if step == self.step => {
                assert!(
                    rows == batch.rows && first == batch.ids.first().copied().unwrap_or(0),
                    "step {step} runs another batch than the one prefetched for it"
                );
                true
            }
            _ => false,
        }
    }
}
