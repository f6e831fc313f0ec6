//! `DevBuf`, the CUDA backend's buffer: device memory, and for gradient buckets and batch
//! inputs a pinned host copy (`Stage`) with the copy stream that moves it. Its `HostBuf`
//! hooks are what the communication thread calls: device → host (packed to fp16/bf16 on
//! the GPU when the wire is compressed), host → device, or a CUDA-aware MPI on device
//! memory directly. `DView`/`DViewMut` are ranges of a `DevBuf`.
//!
//! With `precision = "bf16"` a buffer may also hold a bf16 copy of its values (`Low`), which
//! the kernels that write both keep (bias+activation, activation backward, the optimizer) and
//! the bf16 products read instead of rounding the same values again (`bf16_gemm.rs`). The
//! float32 memory is private to this file: every way to write it (`dev_mut`, `view_mut`, the
//! `HostBuf` hooks) marks the copy stale there first (`device::fresh`), and a read view
//! carries the copy only where it is current on the whole view, so a product never reads a
//! copy older than the values.
//!
//! Must not: call MPI itself (the reducer it is handed does).

use super::launch::config_1d;
use super::module::Kernels;
use crate::config::Compression;
use crate::device::fresh::Fresh;
use crate::parallel::engine::HostBuf;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, PinnedHostSlice, PushKernelArg};
use std::sync::Arc;

/// A driver error as one line, with what was being done.
pub(super) fn drv(what: &str) -> impl Fn(cudarc::driver::DriverError) -> crate::error::Error + '_ {
    move |e| crate::error::Error::Cuda(format!("{what}: {e}"))
}

/// A device buffer; gradient buckets also carry a pinned host copy (`staged`).
pub struct DevBuf {
    /// Private: written only through `dev_mut`, `view_mut` and the hooks, which keep `low` honest.
    dev: CudaSlice<f32>,
    /// The logical length (the allocation holds at least one element).
    pub(super) len: usize,
    pub(super) stage: Option<Stage>,
    /// A serial number (`HostBuf::id`): which buffer a captured step wrote into.
    id: usize,
    /// The bf16 copy, made by the first kernel that writes one into this buffer.
    low: Option<Low>,
}

/// A buffer's bf16 copy (same length and indexing) and where it is current.
pub(super) struct Low {
    pub(super) bits: CudaSlice<u16>,
    pub(super) fresh: Fresh,
}

impl DevBuf {
    pub(super) fn new(dev: CudaSlice<f32>, len: usize, stage: Option<Stage>) -> DevBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        DevBuf { dev, len, stage, id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed), low: None }
    }

    /// The float32 memory, to read.
    pub(super) fn dev(&self) -> &CudaSlice<f32> {
        &self.dev
    }

    /// The float32 memory, to write: its bf16 copy is stale everywhere from here on.
    pub(super) fn dev_mut(&mut self) -> &mut CudaSlice<f32> {
        if let Some(l) = self.low.as_mut() {
            l.fresh.clear_all();
        }
        &mut self.dev
    }

    /// The pinned stage and the float32 memory, to write through the stage: the copy is stale.
    pub(super) fn stage_and_dev_mut(&mut self) -> (Option<&mut Stage>, &mut CudaSlice<f32>) {
        if let Some(l) = self.low.as_mut() {
            l.fresh.clear_all();
        }
        (self.stage.as_mut(), &mut self.dev)
    }

    /// Elements `r`, with the bf16 copy of them when it is current on all of `r`.
    pub(super) fn view(&self, r: std::ops::Range<usize>) -> DView<'_> {
        assert!(r.start <= r.end && r.end <= self.len, "view {r:?} of a buffer of {}", self.len);
        let low = self.low.as_ref().filter(|l| l.fresh.covers(&r)).map(|l| &l.bits);
        DView { buf: &self.dev, start: r.start, len: r.len(), low }
    }

    /// Elements `r`, to write: the copy is stale there until a kernel that writes both marks
    /// it again (`DViewMut::low`).
    pub(super) fn view_mut(&mut self, r: std::ops::Range<usize>) -> DViewMut<'_> {
        assert!(r.start <= r.end && r.end <= self.len, "view {r:?} of a buffer of {}", self.len);
        if let Some(l) = self.low.as_mut() {
            l.fresh.clear(r.clone());
        }
        DViewMut { buf: &mut self.dev, start: r.start, len: r.len(), low: Some(&mut self.low), whole: self.len }
    }
}

pub(super) struct Stage {
    pub(super) host: PinnedHostSlice<f32>,
    pub(super) copy: Arc<CudaStream>,
    pub(super) k: Arc<Kernels>,
    /// fp16/bf16 copies (device, pinned host) for compressed exchange, made on first use.
    pub(super) wire: Option<(CudaSlice<u16>, PinnedHostSlice<u16>)>,
    /// The last asynchronous copy out of `host` that cudarc does not track (a batch upload
    /// from part of it).
    pub(super) pending: Option<cudarc::driver::CudaEvent>,
}

/// A read-only range of a `DevBuf`.
#[derive(Clone, Copy)]
pub struct DView<'a> {
    pub(super) buf: &'a CudaSlice<f32>,
    pub(super) start: usize,
    pub(super) len: usize,
    /// The buffer's bf16 copy (whole; index as `buf`) when current on all of this range.
    pub(super) low: Option<&'a CudaSlice<u16>>,
}

/// A writable range of a `DevBuf`.
pub struct DViewMut<'a> {
    pub(super) buf: &'a mut CudaSlice<f32>,
    pub(super) start: usize,
    pub(super) len: usize,
    /// The buffer's copy slot (None: a view of scratch memory, which keeps no copy), for a
    /// kernel that writes both; `whole` is the buffer's length, the size of a new copy.
    pub(super) low: Option<&'a mut Option<Low>>,
    pub(super) whole: usize,
}

impl<'a> DView<'a> {
    pub(super) fn cu(&self) -> CudaView<'a, f32> {
        self.buf.slice(self.start..self.start + self.len)
    }
}

impl<'a> DViewMut<'a> {
    pub(super) fn cu(self) -> CudaViewMut<'a, f32> {
        let (start, len) = (self.start, self.len);
        self.buf.slice_mut(start..start + len)
    }

    /// For a kernel that writes a bf16 copy beside its float32 output: the float32 range and,
    /// when `keep` (the backend keeps copies) and this is a view of a buffer, the copy's same
    /// range (the copy made by `alloc(whole)` on first use).
    pub(super) fn with_low(
        self,
        keep: bool,
        alloc: impl FnOnce(usize) -> crate::error::Result<CudaSlice<u16>>,
    ) -> crate::error::Result<(CudaViewMut<'a, f32>, Option<LowOut<'a>>)> {
        let DViewMut { buf, start, len, low, whole } = self;
        let values = buf.slice_mut(start..start + len);
        let Some(slot) = low.filter(|_| keep && len > 0) else { return Ok((values, None)) };
        if slot.is_none() {
            *slot = Some(Low { bits: alloc(whole)?, fresh: Fresh::default() });
        }
        let Low { bits, fresh } = slot.as_mut().expect("made above");
        let range = start..start + len;
        Ok((values, Some(LowOut { bits: bits.slice_mut(range.clone()), fresh, range })))
    }
}

/// The bf16 copy's range a kernel writes beside its float32 output (`DViewMut::with_low`).
pub(super) struct LowOut<'a> {
    pub(super) bits: CudaViewMut<'a, u16>,
    fresh: &'a mut Fresh,
    range: std::ops::Range<usize>,
}

impl LowOut<'_> {
    /// The kernel that writes both is queued: the copy is current on its range (the stream
    /// orders every later read after it).
    pub(super) fn written(self) {
        self.fresh.mark(self.range);
    }
}

/// A stage's fp16/bf16 buffers for `n` values (device, pinned host), made on first use.
fn wire_bufs<'a>(
    wire: &'a mut Option<(CudaSlice<u16>, PinnedHostSlice<u16>)>,
    copy: &Arc<CudaStream>,
    n: usize,
) -> std::result::Result<&'a mut (CudaSlice<u16>, PinnedHostSlice<u16>), String> {
    if wire.is_none() {
        let d = copy.alloc_zeros::<u16>(n.max(1)).map_err(|e| e.to_string())?;
        // SAFETY: plain page-locked memory (not write-combined: the CPU reads it).
        let h = unsafe { copy.context().alloc_pinned_with_flags::<u16>(n.max(1), 0) }.map_err(|e| e.to_string())?;
        *wire = Some((d, h));
    }
    Ok(wire.as_mut().expect("made above"))
}

/// The pack and unpack kernels for a wire precision.
fn pack_fns(k: &Kernels, wire: Compression) -> (&cudarc::driver::CudaFunction, &cudarc::driver::CudaFunction) {
    match wire {
        Compression::Fp16 => (&k.pack_f16, &k.unpack_f16),
        _ => (&k.pack_bf16, &k.unpack_bf16),
    }
}

impl HostBuf for DevBuf {
    fn id(&self) -> usize {
        self.id
    }
    fn host(&self) -> &[f32] {
        let s = self.stage.as_ref().expect("a gradient bucket is staged");
        &s.host.as_slice().expect("pinned host memory")[..self.len]
    }
    fn len(&self) -> usize {
        self.len
    }
    fn host_mut(&mut self) -> &mut [f32] {
        let len = self.len;
        let s = self.stage.as_mut().expect("a gradient bucket is staged");
        &mut s.host.as_mut_slice().expect("pinned host memory")[..len]
    }
    /// With a compressed wire the GPU packs the bucket first (half the bytes to copy), and
    /// the host widens it into `host` for the ring, which rounds to the same precision.
    fn to_host(&mut self, wire: Compression) -> std::result::Result<(), String> {
        let n = self.len;
        let Some(s) = self.stage.as_mut() else { return Ok(()) };
        if n == 0 {
            return Ok(());
        }
        if wire == Compression::None {
            s.copy.memcpy_dtoh(&self.dev.slice(0..n), &mut s.host).map_err(|e| e.to_string())?;
            return s.copy.synchronize().map_err(|e| e.to_string());
        }
        let Stage { host, copy, k, wire: bufs, .. } = s;
        let (pack, _) = pack_fns(k, wire);
        let (bits_d, bits_h) = wire_bufs(bufs, copy, n)?;
        let n64 = n as i64;
        let src = self.dev.slice(0..n);
        let mut l = copy.launch_builder(pack);
        l.arg(&src).arg(&mut *bits_d).arg(&n64);
        // SAFETY: hv_pack_*(const float*, unsigned short*, long long) over n elements.
        unsafe { l.launch(config_1d(n)) }.map_err(|e| e.to_string())?;
        copy.memcpy_dtoh(&*bits_d, &mut *bits_h).map_err(|e| e.to_string())?;
        copy.synchronize().map_err(|e| e.to_string())?;
        let bits = &bits_h.as_slice().map_err(|e| e.to_string())?[..n];
        let out = &mut host.as_mut_slice().map_err(|e| e.to_string())?[..n];
        crate::parallel::compress::widen(bits, out, wire);
        Ok(())
    }
    /// Asynchronous: the optimizer's kernels wait for it through the buffer's write event.
    /// With a compressed wire the result (already representable in it) travels packed and
    /// the GPU widens it.
    fn to_device(&mut self, wire: Compression) -> std::result::Result<(), String> {
        let n = self.len;
        let Some(s) = self.stage.as_mut() else { return Ok(()) };
        if n == 0 {
            return Ok(());
        }
        if wire == Compression::None {
            if let Some(l) = self.low.as_mut() {
                l.fresh.clear_all();
            }
            return s.copy.memcpy_htod(&s.host, &mut self.dev.slice_mut(0..n)).map_err(|e| e.to_string());
        }
        let Stage { host, copy, k, wire: bufs, .. } = s;
        let (_, unpack) = pack_fns(k, wire);
        let (bits_d, bits_h) = wire_bufs(bufs, copy, n)?;
        let reduced = &host.as_slice().map_err(|e| e.to_string())?[..n];
        crate::parallel::compress::narrow(reduced, &mut bits_h.as_mut_slice().map_err(|e| e.to_string())?[..n], wire);
        copy.memcpy_htod(&*bits_h, &mut *bits_d).map_err(|e| e.to_string())?;
        let n64 = n as i64;
        if let Some(l) = self.low.as_mut() {
            l.fresh.clear_all();
        }
        let mut dst = self.dev.slice_mut(0..n);
        let mut l = copy.launch_builder(unpack);
        l.arg(&*bits_d).arg(&mut dst).arg(&n64);
        // SAFETY: hv_unpack_*(const unsigned short*, float*, long long) over n elements.
        unsafe { l.launch(config_1d(n)) }.map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A CUDA-aware MPI reads and writes the device buffers directly: the copy stream first
    /// waits for backward's writes to `self` and everything on it finishes; MPI's write to
    /// `out` is complete when it returns, and the write event recorded then orders the
    /// optimizer after it.
    fn reduce_on_device(
        &mut self,
        out: &mut Self,
        reducer: &mut dyn crate::parallel::reduce::Reducer,
    ) -> Option<std::result::Result<(), String>> {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let s = self.stage.as_ref()?;
        let n = self.len;
        if n == 0 {
            return Some(Ok(()));
        }
        let copy = s.copy.clone();
        let src = self.dev.slice(0..n);
        let mut dst = out.dev_mut().slice_mut(0..n);
        let (sp, _rs) = src.device_ptr(&copy);
        let (dp, _rd) = dst.device_ptr_mut(&copy);
        if let Err(e) = copy.synchronize() {
            return Some(Err(e.to_string()));
        }
        // SAFETY: both are n floats of device memory, idle (the stream was synchronized), and
        // the reducer takes device pointers (a CUDA-aware MPI).
        unsafe { reducer.reduce_device(sp, dp, n) };
        Some(Ok(()))
    }
}
