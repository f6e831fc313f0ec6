//! The CUDA backend: `Backend` on one GPU. Buffers live in device memory; the dense layers'
//! products go through cuBLAS (SGEMM, TF32 tensor cores with `precision = "tf32"`, or, with
//! `precision = "bf16"`, `cublasGemmEx` on operands rounded to bf16 by `hv_pack_bf16` with
//! float32 output and compute, so master weights and gradients stay float32), the
//! element-wise work through our kernels (`kernels.cu`, compiled by NVRTC at start-up for
//! this GPU's architecture, `module.rs`). Everything runs on one compute stream; a second
//! stream carries gradient buckets to and from pinned host memory for the communication thread
//! (`DevBuf`'s `HostBuf` hooks, `buf.rs`), and cudarc's per-buffer events order the two streams
//! (a copy waits for the kernels that wrote its source, the optimizer for its gradients' copy).
//!
//! Must not: be used before `probe.rs` has found the libraries, or hold anything of MPI.

use super::buf::{drv, DView, DViewMut, DevBuf};
use super::gemm_map::{cublas_args, Op};
use super::launch::config_1d;
use super::module::Kernels;
use super::Bf16Keep;
use crate::config::{Activation, Precision};
use crate::device::backend::{AdamHyper, Backend, Captured, Gemm, Mask, Pointwise, Replayed, Segment, SgdHyper, Trans};
use crate::error::{Error, Result};
use cudarc::cublas::{sys as blas_sys, CudaBlas, Gemm as _, GemmConfig};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaViewMut, PushKernelArg};
use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

/// One GPU, its streams, cuBLAS handle and kernels.
pub struct Cuda {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) copy: Arc<CudaStream>,
    /// Batch uploads' stream: never behind the gradient buckets' copies.
    pub(super) inputs: Arc<CudaStream>,
    pub(super) blas: CudaBlas,
    pub(super) k: Arc<Kernels>,
    pub(super) name: String,
    /// Ones for column sums as a GEMM (ones[1, rows] · m[rows, cols]), grown on demand.
    ones: RefCell<Option<CudaSlice<f32>>>,
    /// Per-row loss and correct-prediction scratch for the loss kernels, grown on demand.
    pub(super) rows: RefCell<Option<(CudaSlice<f32>, CudaSlice<i32>)>>,
    /// bf16 products: scratch for the two operands rounded to bf16, a bf16 layer output and
    /// its bias in bf16 (`bf16_dense.rs`), grown on demand (None: float32 products).
    pub(super) bf16: Option<RefCell<[Option<CudaSlice<u16>>; 4]>>,
    /// Rows of the loss whose sums `*_later` left in the row scratch (`pending_loss_sums`).
    pub(super) pending: std::cell::Cell<Option<usize>>,
    /// Bumped whenever scratch memory above is replaced (a captured graph names the old).
    pub(super) scratch_gen: std::cell::Cell<u64>,
    /// The dense layers' forward through cublasLt with epilogues (`dense.rs`); None: cuBLAS
    /// and hv_bias_act (bf16 products without bf16 outputs, whose calls `bf16_dense.rs` makes; or
    /// cublasLt off or failing its start-up check).
    pub(super) lt: Option<super::lt::Lt>,
    /// Keep bf16 copies of what the bf16 products read (`precision = "bf16"` and
    /// `low_copies_asked`): written by the kernels that write the values, read by `gemm_bf16`.
    pub(super) low_copies: bool,
    /// Store every layer's output rounded to bf16 (`precision = "bf16"` and
    /// HVTRAIN_BF16_OUTPUTS=1): through cublasLt's bf16 epilogues where `bf16_dense.rs` can.
    pub(super) outputs: bool,
    /// Operands of bf16 products read from a copy, and rounded by `hv_pack_bf16` (logged at the end).
    pub(super) operands: std::cell::Cell<[u64; 2]>,
}

impl Cuda {
    /// Open GPU `ordinal`: context, streams, cuBLAS, and the kernels (compiled here).
    pub fn new(ordinal: usize, precision: Precision) -> Result<Cuda> {
        Cuda::with_bf16(ordinal, precision, Bf16Keep::asked())
    }

    /// `new`, keeping bf16 copies and outputs (with `precision = "bf16"`) as `keep` says rather
    /// than as the environment does (the selftest opens several kinds side by side).
    pub fn with_bf16(ordinal: usize, precision: Precision, keep: Bf16Keep) -> Result<Cuda> {
        super::probe::check_libraries()?;
        let ctx = CudaContext::new(ordinal).map_err(drv(&format!("opening GPU {ordinal}")))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let (major, minor) = ctx.compute_capability().map_err(drv("reading the GPU's compute capability"))?;
        let stream = ctx.new_stream().map_err(drv("creating a stream"))?;
        let copy = ctx.new_stream().map_err(drv("creating a copy stream"))?;
        let inputs = ctx.new_stream().map_err(drv("creating the batch upload stream"))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| Error::Cuda(format!("starting cuBLAS: {e}")))?;
        let mode = match precision {
            Precision::Fp32 => blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            Precision::Tf32 => blas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            // GemmEx's compute type says how; the math mode stays the default.
            Precision::Bf16 => blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
        };
        // SAFETY: a valid handle from CudaBlas::new; the mode is a documented value.
        unsafe { blas_sys::cublasSetMathMode(*blas.handle(), mode) }
            .result()
            .map_err(|e| Error::Cuda(format!("setting cuBLAS's math mode: {e}")))?;
        let k = Arc::new(Kernels::load(&ctx, (major, minor))?);
        let (free, total) = ctx.mem_get_info().unwrap_or((0, 0));
        let name = format!(
            "cuda:{ordinal} ({name}, sm_{major}{minor}, {:.1} of {:.1} GiB free, {})",
            free as f64 / (1u64 << 30) as f64,
            total as f64 / (1u64 << 30) as f64,
            match precision {
                Precision::Fp32 => "fp32 SGEMM",
                Precision::Tf32 => "TF32 tensor cores",
                Precision::Bf16 => "bf16 tensor cores (cublasGemmEx, float32 sums)",
            }
        );
        let bf16 = (precision == Precision::Bf16).then(|| RefCell::new([None, None, None, None]));
        let mut cuda = Cuda {
            ctx,
            stream,
            copy,
            inputs,
            blas,
            k,
            name,
            ones: RefCell::new(None),
            rows: RefCell::new(None),
            bf16,
            pending: Default::default(),
            scratch_gen: Default::default(),
            lt: None,
            low_copies: precision == Precision::Bf16 && keep.copies,
            outputs: precision == Precision::Bf16 && keep.outputs,
            operands: Default::default(),
        };
        let dense = match precision {
            Precision::Bf16 => cuda.start_bf16_dense(major),
            _ => cuda.start_lt(major, precision == Precision::Tf32),
        };
        cuda.name = format!("{}; dense layers: {dense}", cuda.name);
        Ok(cuda)
    }

    fn ones(&self, n: usize) -> Result<()> {
        let mut o = self.ones.borrow_mut();
        if o.as_ref().is_none_or(|s| s.len() < n) {
            let mut s = self.alloc(n)?;
            self.launch_fill(&mut s.slice_mut(0..n), n, 1.0)?;
            *o = Some(s);
            self.scratch_grew();
        }
        Ok(())
    }

    fn launch_fill(&self, v: &mut CudaViewMut<'_, f32>, n: usize, value: f32) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let n64 = n as i64;
        let mut l = self.stream.launch_builder(&self.k.fill);
        l.arg(v).arg(&n64).arg(&value);
        // SAFETY: hv_fill(float*, long long, float) with a buffer of n floats.
        unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_fill"))?;
        Ok(())
    }

    /// Download `n` values of a scratch buffer and wait for them.
    pub(super) fn read_f32(&self, s: &CudaSlice<f32>, n: usize) -> Result<Vec<f32>> {
        let mut v = vec![0.0f32; n];
        if n > 0 {
            self.stream.memcpy_dtoh(&s.slice(0..n), &mut v[..]).map_err(drv("reading a result back"))?;
        }
        self.stream.synchronize().map_err(drv("waiting for the GPU"))?;
        Ok(v)
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        if self.low_copies {
            let [copies, rounded] = self.operands.get();
            log::info!("bf16 products: {copies} operands read from kept bf16 copies, {rounded} rounded first");
        }
        if self.outputs {
            log::info!("bf16 outputs: {} layers through cublasLt's bf16 epilogue", self.bf16_epilogue_calls());
        }
    }
}

/// NULL for a kernel's optional pointer argument.
pub(super) const NULL: u64 = 0;

impl Backend for Cuda {
    type Buf = DevBuf;
    type Labels = CudaSlice<i32>;
    type View<'a> = DView<'a>;
    type ViewMut<'a> = DViewMut<'a>;

    fn name(&self) -> String {
        self.name.clone()
    }
    fn on_device(&self) -> bool {
        true
    }
    fn free_bytes(&self) -> Option<u64> {
        self.ctx.mem_get_info().ok().map(|(free, _)| free as u64)
    }
    fn device_ordinal(&self) -> Option<usize> {
        Some(self.ctx.ordinal())
    }
    fn nccl_reducer(
        &self,
        chan: crate::parallel::Channel,
        levels: bool,
        wire: crate::config::Compression,
    ) -> crate::device::backend::DeviceReducer {
        super::nccl::NcclReducer::new(chan, self.ctx.clone(), levels, (wire, self.k.clone())).map(|r| Box::new(r) as _)
    }
    fn nccl_pipe(
        &self,
        chan: &crate::parallel::Channel,
    ) -> std::result::Result<Box<dyn crate::parallel::pipe::DeviceLink>, String> {
        super::nccl_pipe::NcclPipe::new(chan, self.ctx.clone(), crate::sys::rank().unwrap_or(0))
            .map(|l| Box::new(l) as _)
    }

    fn zeros(&self, n: usize) -> Result<DevBuf> {
        Ok(DevBuf::new(self.alloc(n)?, n, None))
    }
    fn staged(&self, n: usize) -> Result<DevBuf> {
        self.staged_buf(n)
    }
    fn input(&self, n: usize) -> Result<DevBuf> {
        self.staged_on(n, &self.inputs)
    }
    fn upload(&self, host: &[f32]) -> Result<DevBuf> {
        let mut b = self.zeros(host.len())?;
        self.upload_into(host, &mut b)?;
        Ok(b)
    }
    fn upload_into(&self, host: &[f32], buf: &mut DevBuf) -> Result<()> {
        assert!(host.len() <= buf.len, "upload of {} floats into a buffer of {}", host.len(), buf.len);
        if host.is_empty() {
            return Ok(());
        }
        let (stage, dev) = buf.stage_and_dev_mut();
        if let Some(s) = stage {
            // Through pinned memory on the copy stream, asynchronously: the kernels that read
            // the buffer wait for the copy (cudarc's write event on the device buffer), and
            // the next write into the pinned buffer waits for this copy out of it (`pending`).
            if let Some(ev) = s.pending.take() {
                ev.synchronize().map_err(drv("waiting for the previous batch copy"))?;
            }
            let n = host.len();
            let pinned = s.host.as_mut_slice().map_err(drv("reaching pinned memory"))?;
            pinned[..n].copy_from_slice(host);
            s.copy.memcpy_htod(&pinned[..n], &mut dev.slice_mut(0..n)).map_err(drv("copying a batch to the GPU"))?;
            s.pending = Some(s.copy.record_event(None).map_err(drv("recording a copy event"))?);
            return Ok(());
        }
        {
            let dst = &mut dev.slice_mut(0..host.len());
            self.stream.memcpy_htod(host, dst).map_err(drv("copying to the GPU"))?;
        }
        Ok(())
    }
    fn upload_labels(&self, host: &[i32], buf: &mut CudaSlice<i32>) -> Result<()> {
        if !host.is_empty() {
            self.stream
                .memcpy_htod(host, &mut buf.slice_mut(0..host.len()))
                .map_err(drv("copying labels to the GPU"))?;
        }
        Ok(())
    }
    fn labels(&self, n: usize) -> Result<CudaSlice<i32>> {
        self.stream.alloc_zeros::<i32>(n.max(1)).map_err(|e| self.oom(e, n * 4))
    }
    fn download(&self, buf: &DevBuf, range: Range<usize>, host: &mut [f32]) -> Result<()> {
        assert!(range.end <= buf.len && host.len() == range.len(), "download out of range");
        if !host.is_empty() {
            self.stream.memcpy_dtoh(&buf.dev().slice(range), host).map_err(drv("copying from the GPU"))?;
        }
        self.stream.synchronize().map_err(drv("waiting for the GPU"))
    }
    fn len(&self, buf: &DevBuf) -> usize {
        buf.len
    }
    fn sum_squares(&self, buf: &DevBuf, r: Range<usize>) -> Result<f64> {
        self.launch_sum_squares(buf, r)
    }
    fn clamp(&self, buf: &mut DevBuf, parts: &[(Range<usize>, f32)]) -> Result<usize> {
        self.launch_clamp(buf, parts)
    }
    fn fill_zero(&self, v: DViewMut<'_>) -> Result<()> {
        let n = v.len;
        self.launch_fill(&mut v.cu(), n, 0.0)
    }
    fn gather_rows(
        &self,
        src: DView<'_>,
        cols: usize,
        idx: &CudaSlice<i32>,
        rows: usize,
        dst: DViewMut<'_>,
    ) -> Result<()> {
        assert!(rows * cols <= dst.len && rows <= idx.len(), "gather of {rows} rows out of range");
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        let (rows64, cols32) = (rows as i64, i32::try_from(cols).map_err(|_| Error::Cuda(format!("{cols} columns")))?);
        let s = src.cu();
        let mut d = dst.cu();
        let mut l = self.stream.launch_builder(&self.k.gather_rows);
        l.arg(&mut d).arg(&s).arg(idx).arg(&rows64).arg(&cols32);
        // SAFETY: hv_gather_rows(float*, const float*, const int*, long long, int) over rows·cols
        // of dst; the indices are within src's rows (the caller's contract, as for the CPU).
        unsafe { l.launch(config_1d(rows * cols)) }.map_err(drv("launching hv_gather_rows"))?;
        Ok(())
    }
    fn view<'a>(&self, buf: &'a DevBuf, r: Range<usize>) -> DView<'a> {
        buf.view(r)
    }
    fn view_mut<'a>(&self, buf: &'a mut DevBuf, r: Range<usize>) -> DViewMut<'a> {
        buf.view_mut(r)
    }

    fn gemm(&self, gm: Gemm, a: DView<'_>, b: DView<'_>, c: DViewMut<'_>) -> Result<()> {
        gm.check(a.len, b.len, c.len);
        let Gemm { m, k, n, ta, tb, alpha, beta } = gm;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let g = cublas_args(m, k, n, ta, tb);
        let op = |o: Op| match o {
            Op::N => blas_sys::cublasOperation_t::CUBLAS_OP_N,
            Op::T => blas_sys::cublasOperation_t::CUBLAS_OP_T,
        };
        let int =
            |v: usize| i32::try_from(v).map_err(|_| Error::Cuda(format!("gemm dimension {v} exceeds cuBLAS's int")));
        let cfg = GemmConfig {
            transa: op(g.transa),
            transb: op(g.transb),
            m: int(g.m)?,
            n: int(g.n)?,
            k: int(g.k)?,
            alpha,
            lda: int(g.lda)?,
            ldb: int(g.ldb)?,
            beta,
            ldc: int(g.ldc)?,
        };
        if let Some(scratch) = &self.bf16 {
            return self.gemm_bf16(&cfg, a, b, c, &mut scratch.borrow_mut()[..2]);
        }
        // cuBLAS's A is our b, its B our a (see gemm_map).
        let (ca, cb) = (b.cu(), a.cu());
        // SAFETY: the asserts above and gemm_map's tested arguments keep every access inside
        // the views.
        let mut cc = c.cu();
        unsafe { self.blas.gemm(cfg, &ca, &cb, &mut cc) }.map_err(|e| Error::Cuda(format!("cuBLAS gemm: {e}")))
    }

    fn dense(
        &self,
        g: Gemm,
        x: DView<'_>,
        w: DView<'_>,
        out: &mut DevBuf,
        n: usize,
        bias: DView<'_>,
        act: Activation,
        keep_z: Option<DViewMut<'_>>,
    ) -> Result<()> {
        self.dense_fused(g, x, w, out, n, bias, act, keep_z)
    }

    fn input_grad(
        &self,
        g: Gemm,
        dz: DView<'_>,
        w: DView<'_>,
        dprev: &mut DevBuf,
        a_prev: DView<'_>,
        z_prev: Option<DView<'_>>,
        act: Activation,
        beta: f32,
        mut bias_grad: DViewMut<'_>,
    ) -> Result<()> {
        if self.input_grad_fused(g, dz, w, dprev, a_prev, z_prev, act, beta, &mut bias_grad)? {
            return Ok(());
        }
        crate::device::backend::input_grad_separate(self, g, dz, w, dprev, a_prev, z_prev, act, beta, bias_grad)
    }
    fn bias_act(
        &self,
        out: DViewMut<'_>,
        bias: DView<'_>,
        act: Activation,
        keep_z: Option<DViewMut<'_>>,
    ) -> Result<()> {
        self.launch_bias_act(out, bias, act, keep_z)
    }

    fn act_backward(&self, d: DViewMut<'_>, a: DView<'_>, z: Option<DView<'_>>, act: Activation) -> Result<()> {
        self.launch_act_backward(d, a, z, act)
    }

    fn column_sums(&self, m: DView<'_>, cols: usize, beta: f32, out: DViewMut<'_>) -> Result<()> {
        let rows = m.len / cols;
        if rows == 0 {
            return if beta == 0.0 { self.fill_zero(out) } else { Ok(()) };
        }
        self.ones(rows)?;
        let ones = self.ones.borrow();
        let ones = ones.as_ref().expect("grown above");
        let ov = DView { buf: ones, start: 0, len: rows, low: None };
        // out[1, cols] = ones[1, rows] · m[rows, cols]
        self.gemm(Gemm::new(1, rows, cols, Trans::N, Trans::N).beta(beta), ov, m, out)
    }

    fn softmax_xent(
        &self,
        logits: DView<'_>,
        labels: &CudaSlice<i32>,
        weights: Option<DView<'_>>,
        rw: Option<DView<'_>>,
        k: usize,
        smoothing: f32,
        grad_scale: f32,
        d: Option<DViewMut<'_>>,
    ) -> Result<(f64, usize)> {
        let rows = self.launch_softmax_xent(logits, labels, weights, rw, k, smoothing, grad_scale, d)?;
        self.read_rows_sums(rows)
    }

    fn softmax_xent_later(
        &self,
        logits: DView<'_>,
        labels: &CudaSlice<i32>,
        weights: Option<DView<'_>>,
        rw: Option<DView<'_>>,
        k: usize,
        smoothing: f32,
        grad_scale: f32,
        d: Option<DViewMut<'_>>,
    ) -> Result<Option<(f64, usize)>> {
        let rows = self.launch_softmax_xent(logits, labels, weights, rw, k, smoothing, grad_scale, d)?;
        self.pending.set(Some(rows));
        Ok(None)
    }

    fn pointwise_loss(
        &self,
        f: Pointwise,
        pred: DView<'_>,
        target: DView<'_>,
        rw: Option<DView<'_>>,
        k: usize,
        grad_scale: f32,
        d: Option<DViewMut<'_>>,
    ) -> Result<(f64, usize)> {
        let rows = self.launch_pointwise_loss(f, pred, target, rw, k, grad_scale, d)?;
        self.read_rows_sums(rows)
    }

    fn pointwise_loss_later(
        &self,
        f: Pointwise,
        pred: DView<'_>,
        target: DView<'_>,
        rw: Option<DView<'_>>,
        k: usize,
        grad_scale: f32,
        d: Option<DViewMut<'_>>,
    ) -> Result<Option<(f64, usize)>> {
        let rows = self.launch_pointwise_loss(f, pred, target, rw, k, grad_scale, d)?;
        self.pending.set(Some(rows));
        Ok(None)
    }

    fn pending_loss_sums(&self) -> Result<(f64, usize)> {
        let rows = self.pending.take().expect("pending_loss_sums without a loss left for later");
        self.read_rows_sums(rows)
    }

    fn order_after_writes(&self, bufs: &[&DevBuf]) -> Result<()> {
        self.wait_for_writes(bufs)
    }
    fn idle_address(&self, buf: &DevBuf, n: usize) -> Result<Option<u64>> {
        use cudarc::driver::DevicePtr;
        assert!(n <= buf.len, "an address of {n} floats of a buffer of {}", buf.len);
        // The transport wants idle memory: the kernels that wrote it are done.
        self.stream.synchronize().map_err(drv("waiting for the GPU before handing memory to NCCL"))?;
        let (p, _read) = buf.dev().device_ptr(&self.stream);
        Ok(Some(p))
    }
    fn idle_address_mut(&self, buf: &mut DevBuf, n: usize) -> Result<Option<u64>> {
        use cudarc::driver::DevicePtrMut;
        assert!(n <= buf.len, "an address of {n} floats of a buffer of {}", buf.len);
        // Idle: nothing queued still reads or writes it (the stream is synchronized).
        self.stream.synchronize().map_err(drv("waiting for the GPU before handing memory to NCCL"))?;
        let (p, _write) = buf.dev_mut().device_ptr_mut(&self.stream);
        Ok(Some(p))
    }
    fn bf16_copy_reads(&self) -> Option<[u64; 2]> {
        self.low_copies.then(|| self.operands.get())
    }
    fn captures(&self) -> bool {
        // A graph replays its products' choice of operand (copy or rounding) made at capture,
        // while where a copy is current is host state: with copies, no graphs.
        !self.low_copies
    }
    fn scratch_generation(&self) -> u64 {
        self.scratch_gen.get()
    }
    fn capture_begin(&self) -> Result<()> {
        self.graph_begin()
    }
    fn capture_end(&self) -> Result<Captured> {
        self.graph_end()
    }
    fn replay(&self, g: &Captured) -> Result<Replayed> {
        self.graph_replay(g)
    }

    fn dropout(&self, v: DViewMut<'_>, cols: usize, keys: &CudaSlice<i32>, m: Mask) -> Result<()> {
        let n = v.len;
        if n == 0 {
            return Ok(());
        }
        let (rows64, cols32) = ((n / cols) as i64, cols as i32);
        let mut vv = v.cu();
        let mut l = self.stream.launch_builder(&self.k.dropout);
        l.arg(&mut vv).arg(&rows64).arg(&cols32).arg(keys).arg(&m.salt).arg(&m.col0).arg(&m.threshold).arg(&m.scale);
        // SAFETY: hv_dropout(float*, long long, int, const int*, unsigned long long, unsigned int,
        // unsigned int, float) over rows·cols elements; keys holds at least `rows`.
        unsafe { l.launch(config_1d(n)) }.map_err(drv("launching hv_dropout"))?;
        Ok(())
    }

    fn softmax(&self, v: DViewMut<'_>, k: usize) -> Result<()> {
        let rows = v.len / k;
        if rows == 0 {
            return Ok(());
        }
        let (rows64, k32) = (rows as i64, k as i32);
        let mut vv = v.cu();
        let mut l = self.stream.launch_builder(&self.k.softmax_rows);
        l.arg(&mut vv).arg(&rows64).arg(&k32);
        // SAFETY: hv_softmax_rows(float*, long long, int).
        unsafe { l.launch(config_1d(rows)) }.map_err(drv("launching hv_softmax_rows"))?;
        Ok(())
    }

    fn round_half(&self, v: DViewMut<'_>, kind: crate::config::Compression) -> Result<()> {
        use crate::config::Compression;
        let n = v.len;
        let (pack, unpack) = match kind {
            Compression::None => return Ok(()),
            Compression::Fp16 => (&self.k.pack_f16, &self.k.unpack_f16),
            Compression::Bf16 => (&self.k.pack_bf16, &self.k.unpack_bf16),
        };
        if n == 0 {
            return Ok(());
        }
        let mut bits = self.stream.alloc_zeros::<u16>(n).map_err(|e| self.oom(e, n * 2))?;
        let n64 = n as i64;
        let mut vv = v.cu();
        let mut l = self.stream.launch_builder(pack);
        l.arg(&mut vv).arg(&mut bits).arg(&n64);
        // SAFETY: hv_pack_*(const float*, unsigned short*, long long) over n elements.
        unsafe { l.launch(config_1d(n)) }.map_err(drv("launching the half-precision pack"))?;
        let mut l = self.stream.launch_builder(unpack);
        l.arg(&bits).arg(&mut vv).arg(&n64);
        // SAFETY: hv_unpack_*(const unsigned short*, float*, long long) over n elements.
        unsafe { l.launch(config_1d(n)) }.map_err(drv("launching the half-precision unpack"))?;
        Ok(())
    }

    fn sgd(&self, p: DViewMut<'_>, g: DView<'_>, m: Option<DViewMut<'_>>, h: &SgdHyper) -> Result<()> {
        self.launch_sgd(p, g, m, h)
    }

    fn adam(&self, p: DViewMut<'_>, g: DView<'_>, m: DViewMut<'_>, v: DViewMut<'_>, h: &AdamHyper) -> Result<()> {
        self.launch_adam(p, g, m, v, h)
    }

    fn sgd_segments(
        &self,
        params: &mut DevBuf,
        grads: &DevBuf,
        goff: usize,
        mut m: Option<&mut DevBuf>,
        segs: &[Segment],
        h: &SgdHyper,
    ) -> Result<()> {
        if let Some(r) = self.sgd_fused(params, grads, goff, m.as_deref_mut(), segs, h) {
            return r;
        }
        crate::device::backend::sgd_each(self, params, grads, goff, m, segs, h)
    }

    fn adam_segments(
        &self,
        params: &mut DevBuf,
        grads: &DevBuf,
        goff: usize,
        m: &mut DevBuf,
        v: &mut DevBuf,
        segs: &[Segment],
        h: &AdamHyper,
    ) -> Result<()> {
        if let Some(r) = self.adam_fused(params, grads, goff, m, v, segs, h) {
            return r;
        }
        crate::device::backend::adam_each(self, params, grads, goff, m, v, segs, h)
    }
}
