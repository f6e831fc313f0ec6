//! The CUDA backend's allocations: device memory that names the sizes asked for and free
//! when the GPU is out of memory, and gradient buckets' pinned host copies.
//!
//! Must not: launch kernels.

use super::backend::Cuda;
use super::buf::{DevBuf, Stage};
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, DriverError};

impl Cuda {
    /// Allocate, naming the sizes asked for and free when the GPU is out of memory.
    pub(super) fn alloc(&self, n: usize) -> Result<CudaSlice<f32>> {
        self.stream.alloc_zeros::<f32>(n.max(1)).map_err(|e| self.oom(e, n * 4))
    }

    /// The loss kernels' per-row scratch, for at least `rows` rows.
    pub(super) fn row_scratch(&self, rows: usize) -> Result<()> {
        let mut r = self.rows.borrow_mut();
        if r.as_ref().is_none_or(|(l, _)| l.len() < rows) {
            let l = self.alloc(rows)?;
            let c = self.stream.alloc_zeros::<i32>(rows.max(1)).map_err(|e| self.oom(e, rows * 4))?;
            *r = Some((l, c));
            self.scratch_grew();
        }
        Ok(())
    }

    /// Scratch memory was replaced: graphs captured before name freed memory.
    pub(super) fn scratch_grew(&self) {
        self.scratch_gen.set(self.scratch_gen.get() + 1);
    }

    pub(super) fn oom(&self, e: DriverError, bytes: usize) -> Error {
        let (free, total) = self.ctx.mem_get_info().unwrap_or((0, 0));
        let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
        Error::Cuda(format!(
            "allocating {:.1} MiB on {}: {e} ({:.1} MiB free of {:.1} MiB); {}; lower training.batch_size or the model \
             size, split the model over ranks with parallel.tensor / parallel.pipeline, or share the GPU among fewer ranks",
            mib(bytes),
            self.name,
            mib(free),
            mib(total),
            crate::mem::state_text()
        ))
    }

    /// A gradient bucket: device memory plus a pinned host copy for the communication thread.
    pub(super) fn staged_buf(&self, n: usize) -> Result<DevBuf> {
        self.staged_on(n, &self.copy)
    }

    /// A buffer with a pinned host copy moved by `stream`.
    pub(super) fn staged_on(&self, n: usize, stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> Result<DevBuf> {
        let dev = self.alloc(n)?;
        // SAFETY: page-locked host memory, zero-initialized by the driver's allocation flags
        // being plain (not write-combined, which the CPU reads slowly).
        let host = unsafe { self.ctx.alloc_pinned_with_flags::<f32>(n.max(1), 0) }.map_err(|e| self.oom(e, n * 4))?;
        let stage = Stage { host, copy: stream.clone(), k: self.k.clone(), wire: None, pending: None };
        Ok(DevBuf::new(dev, n, Some(stage)))
    }
}
