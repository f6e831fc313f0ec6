//! CUDA graphs on the CUDA backend: a step's launches captured on the compute stream once
//! and replayed as one (`Backend::capture_begin`, `capture_end`, `replay`); `step/graph.rs`
//! decides when, and checks each capture against plain launches before using it.
//!
//! cudarc orders its streams with an event per buffer (each launch waits for the buffer's
//! last write and records its read). A captured stream may not wait for an event recorded
//! outside the capture, so that tracking is off while capturing, and the inputs written on
//! another stream (the batch upload) are waited for explicitly before a capture or a replay
//! (`order_after_writes`). The capture is thread-local: the communication thread's copies
//! go on as before.
//!
//! Must not: be reached except through `Backend` (the `Cuda` impl in `backend.rs`).

use super::backend::Cuda;
use super::buf::drv;
use super::buf::DevBuf;
use crate::device::backend::{Captured, Replayed};
use crate::error::{Error, Result};
use cudarc::driver::{sys, DevicePtr};

/// A captured sequence, and the loss rows it leaves for `pending_loss_sums` (host state its
/// loss launch set at capture, set again at each replay).
struct Graph {
    exec: cudarc::driver::CudaGraph,
    pending: Option<usize>,
}

impl Cuda {
    pub(super) fn wait_for_writes(&self, bufs: &[&DevBuf]) -> Result<()> {
        for b in bufs {
            // Waits for the buffer's last write (cudarc's event), whichever stream made it.
            let (_ptr, _read) = b.dev().device_ptr(&self.stream);
        }
        Ok(())
    }

    pub(super) fn graph_begin(&self) -> Result<()> {
        // SAFETY: only this thread launches on the compute stream, and it waits for the inputs
        // written elsewhere first (`wait_for_writes`); tracking is back on at `graph_end`.
        unsafe { self.ctx.disable_event_tracking() };
        if let Err(e) = self.stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) {
            // SAFETY: as above; nothing was launched untracked.
            unsafe { self.ctx.enable_event_tracking() };
            return Err(drv("starting a CUDA graph capture")(e));
        }
        Ok(())
    }

    pub(super) fn graph_end(&self) -> Result<Captured> {
        let g = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        // SAFETY: the capture is over; what it captured ran nothing yet.
        unsafe { self.ctx.enable_event_tracking() };
        let exec = g
            .map_err(drv("ending a CUDA graph capture"))?
            .ok_or_else(|| Error::Cuda("a CUDA graph capture captured nothing".into()))?;
        exec.upload().map_err(drv("uploading a CUDA graph"))?;
        Ok(Captured(Box::new(Graph { exec, pending: self.pending.get() })))
    }

    pub(super) fn graph_replay(&self, c: &Captured) -> Result<Replayed> {
        let g = c.0.downcast_ref::<Graph>().expect("a graph this backend captured");
        g.exec.launch().map_err(drv("replaying a CUDA graph"))?;
        if let Some(rows) = g.pending {
            self.pending.set(Some(rows));
        }
        Ok(Replayed::OnDevice)
    }
}
