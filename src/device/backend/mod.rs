//! The backend seam: every operation a training step, evaluation or prediction performs on
//! device buffers, the optimizer updates included. The model (`model/`), the losses and the
//! optimizer (`optim.rs`) are written against this trait only and never name a device;
//! `device::cpu::Cpu` is the reference implementation, and every other backend is tested
//! against it with the same generic tests (`conformance/`, `model/tests.rs`).
//!
//! Buffers are owned (`Buf`, `Labels`); operations take views of ranges of them (`View`,
//! `ViewMut`), so a gradient bucket, a layer's weight or a batch's rows are addressed without
//! copies, and Rust's borrow rules say which buffers an operation reads and which it writes.
//! Shapes are row-major: activations [batch, features], a weight [in, out].
//!
//! Every operation returns `Result`: a GPU can fail at any call (out of memory, a launch
//! error, a lost device), and that failure must end the job with a clear line, not a panic.
//!
//! Must not: know MPI, the model or the job (operations on buffers only).

use crate::config::Activation;
use crate::error::Result;
use crate::parallel::pipe::DeviceLink;
use std::ops::Range;

pub use super::mask::{mask_bits, Mask};

mod composed;
pub use composed::{adam_each, input_grad_separate, rmsprop_composed, rmsprop_scratch_count, sgd_each};

/// Which operand is transposed in `gemm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trans {
    N,
    T,
}

/// One matrix product, C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C, all row-major:
/// A is held as [m,k] (`ta` N) or [k,m] (T), B as [k,n] (`tb` N) or [n,k] (T). Every
/// backend's `gemm` takes one, so the shape and its checks are written once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub ta: Trans,
    pub tb: Trans,
    pub alpha: f32,
    pub beta: f32,
}

impl Gemm {
    /// C = op(A) · op(B): alpha 1, beta 0.
    pub fn new(m: usize, k: usize, n: usize, ta: Trans, tb: Trans) -> Gemm {
        Gemm { m, k, n, ta, tb, alpha: 1.0, beta: 0.0 }
    }

    /// The same product with C's old values scaled by `beta` and added.
    pub fn beta(self, beta: f32) -> Gemm {
        Gemm { beta, ..self }
    }

    /// The same product scaled by `alpha`.
    pub fn alpha(self, alpha: f32) -> Gemm {
        Gemm { alpha, ..self }
    }

    /// Panics unless operands of `a`, `b` and `c` elements hold the product's matrices.
    pub fn check(&self, a: usize, b: usize, c: usize) {
        let (m, k, n) = (self.m, self.k, self.n);
        assert!(a >= m * k && b >= k * n && c >= m * n, "gemm: operand too small");
    }

    /// `Backend::input_grad`'s operands beside the product's (this, [m, n] out): the layer
    /// before's bias gradient holds at least n floats (its arena slot is padded: a width that
    /// is not a multiple of the arena's alignment gets a longer slot, whose tail is left as it
    /// is) and its output at least m · n. Every backend checks this, so the CPU's tests meet
    /// the shapes a GPU's fused call gets (a fused call that wanted exactly n failed the GPU
    /// selftest on odd widths, 2026-11-27).
    pub fn check_input_grad(&self, bias_len: usize, a_prev_len: usize) {
        assert!(
            bias_len >= self.n && a_prev_len >= self.m * self.n,
            "input_grad: a bias gradient of {bias_len} or an activation of {a_prev_len} floats for a [{}, {}] input gradient",
            self.m,
            self.n
        );
    }
}

/// A loss computed element by element on [b, k] outputs and targets of the same shape: the
/// per-sample loss is the mean over the k elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pointwise {
    /// (p − t)², gradient 2(p − t).
    Mse,
    /// |p − t|, gradient sign(p − t) (0 at 0).
    Mae,
    /// ½e² for |e| ≤ δ, δ(|e| − ½δ) beyond; gradient e clamped to [−δ, δ].
    Huber(f32),
    /// log(cosh(e)), e = p − t, computed as |e| + log1p(e^−2|e|) − ln 2 (Keras' `LogCosh`);
    /// gradient tanh(e).
    LogCosh,
    /// 100·|e| / max(|t|, 1e-7) (Keras' `MeanAbsolutePercentageError`); gradient
    /// 100·sign(e) / max(|t|, 1e-7).
    Mape,
    /// (ln(max(p, 1e-7) + 1) − ln(max(t, 1e-7) + 1))² (Keras' `MeanSquaredLogarithmicError`);
    /// gradient 2·(that difference) / (p + 1) where p > 1e-7, else 0.
    Msle,
    /// The pinball loss of quantile τ: max(τ·(t − p), (τ − 1)·(t − p)) (TensorFlow Addons'
    /// `PinballLoss`); gradient −τ below the target, 1 − τ above it, 0 on it.
    Quantile(f32),
    /// Binary cross-entropy of the logit p against t ∈ {0, 1}: max(p, 0) − p·t + ln(1 + e^−|p|),
    /// gradient sigmoid(p) − t. With label smoothing ε > 0 (Keras' `BinaryCrossentropy(
    /// label_smoothing=ε)`) against t·(1 − ε) + ε/2 instead. An element counts as correct
    /// when (p > 0) == (t > ½), t the label as stored.
    BinaryXent(f32),
}

impl Pointwise {
    /// The kernels' mode number (kernels.cu's `hv_pointwise_loss`).
    pub fn mode(self) -> (i32, f32) {
        match self {
            Pointwise::Mse => (0, 0.0),
            Pointwise::Mae => (1, 0.0),
            Pointwise::Huber(d) => (2, d),
            // Smoothed, the CUDA backend runs `hv_binary_xent_smooth` instead (its ε apart).
            Pointwise::BinaryXent(_) => (3, 0.0),
            Pointwise::LogCosh => (4, 0.0),
            Pointwise::Mape => (5, 0.0),
            Pointwise::Msle => (6, 0.0),
            Pointwise::Quantile(tau) => (7, tau),
        }
    }
}

/// `Backend::clamp` on host memory: each range to [-bound, bound] (NaN stays NaN); how many
/// values changed.
pub fn clamp_host(h: &mut [f32], parts: &[(Range<usize>, f32)]) -> usize {
    let mut k = 0;
    for (r, b) in parts {
        for x in &mut h[r.clone()] {
            if x.abs() > *b {
                *x = b.copysign(*x);
                k += 1;
            }
        }
    }
    k
}

/// One SGD (momentum, Nesterov) update's hyperparameters.
#[derive(Clone, Copy, Debug)]
pub struct SgdHyper {
    pub lr: f32,
    /// Multiplies the incoming gradient (e.g. to turn a sum into a mean).
    pub grad_scale: f32,
    pub weight_decay: f32,
    pub momentum: f32,
    pub nesterov: bool,
}

/// One tensor of a fused optimizer update: its range of the parameter arena, and whether it
/// takes the weight decay (weights do, biases not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub range: Range<usize>,
    pub decayed: bool,
}

/// One Adam/AdamW update's hyperparameters, bias corrections included.
#[derive(Clone, Copy, Debug)]
pub struct AdamHyper {
    pub lr: f32,
    pub grad_scale: f32,
    pub b1: f32,
    pub b2: f32,
    pub eps: f32,
    /// 1 - beta1^t.
    pub bc1: f32,
    /// sqrt(1 - beta2^t).
    pub bc2_sqrt: f32,
    /// L2 penalty added to the gradient (Adam with weight decay).
    pub l2: f32,
    /// Decoupled decay lr × weight_decay (AdamW).
    pub decay: f32,
}

/// RMSprop's hyperparameters for one step (PyTorch's `RMSprop`, not centered): v = rho·v +
/// (1 − rho)·g², u = g / (√v + eps) with g = g·grad_scale + l2·w; w −= lr·u, or with
/// `momentum` μ > 0, buf = μ·buf + u, w −= lr·buf.
#[derive(Clone, Copy, Debug)]
pub struct RmspropHyper {
    pub lr: f32,
    pub grad_scale: f32,
    pub rho: f32,
    pub eps: f32,
    pub l2: f32,
    pub momentum: f32,
}

/// A captured sequence of a backend's launches (a CUDA graph), replayed as one; what it holds
/// is the backend's own (`Backend::capture_end`).
pub struct Captured(pub Box<dyn std::any::Any>);

/// What `Backend::replay` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replayed {
    /// The device ran the captured launches.
    OnDevice,
    /// This backend keeps no launches (the CPU's emulation): the caller runs the captured
    /// work again, with the values it had at capture.
    Rerun,
}

/// A device that runs the dense layers. See the module comment for the contract.
pub trait Backend: Send {
    /// An owned buffer of f32 in the device's memory (gradient buckets also stage through
    /// host memory for the communication thread: `HostBuf`).
    type Buf: crate::parallel::engine::HostBuf;
    /// An owned buffer of i32 class labels in the device's memory.
    type Labels: Send + 'static;
    /// A read-only view of part of a `Buf`.
    type View<'a>: Copy
    where
        Self: 'a;
    /// A writable view of part of a `Buf`.
    type ViewMut<'a>
    where
        Self: 'a;

    /// For log lines: "cpu", "cuda:0 (NVIDIA H100 ...)".
    fn name(&self) -> String;
    /// Whether buffers live in device memory (not host-addressable).
    fn on_device(&self) -> bool {
        false
    }
    /// Bytes of device memory free now (None: unknown, or host memory).
    fn free_bytes(&self) -> Option<u64> {
        None
    }
    /// The GPU this backend drives (None: host memory).
    fn device_ordinal(&self) -> Option<usize> {
        None
    }
    /// Gradient buckets all-reduced GPU to GPU by NCCL over `chan`'s ranks (collective over
    /// `chan`; `hierarchical`: NCCL in each node, MPI among the nodes; `wire`: fp16/bf16 on
    /// the wire, as `distribution.compression` asks); the channel back, and why not, where
    /// that cannot be.
    fn nccl_reducer(
        &self,
        chan: crate::parallel::Channel,
        _hierarchical: bool,
        _wire: crate::config::Compression,
    ) -> DeviceReducer {
        Err((chan, "the gradients are in host memory".into()))
    }
    /// Pipeline messages GPU to GPU by NCCL send/recv over `chan` (the pipeline communicator,
    /// ranked by stage; collective over it), or why not.
    fn nccl_pipe(&self, _chan: &crate::parallel::Channel) -> std::result::Result<Box<dyn DeviceLink>, String> {
        Err("the activations are in host memory".into())
    }

    // ---- memory ----
    fn zeros(&self, n: usize) -> Result<Self::Buf>;
    /// A zeroed buffer that the communication thread can also reach in host memory (a
    /// gradient bucket: pinned host memory beside the device's, on a GPU).
    fn staged(&self, n: usize) -> Result<Self::Buf> {
        self.zeros(n)
    }
    /// A zeroed buffer for a step's input rows, which are copied in while earlier kernels
    /// run (on a GPU: pinned host memory beside it, and a copy stream that gradient buckets
    /// do not use, so a batch never waits behind them).
    fn input(&self, n: usize) -> Result<Self::Buf> {
        self.staged(n)
    }
    fn upload(&self, host: &[f32]) -> Result<Self::Buf>;
    /// Copy `host` into the start of `buf` (a batch into its staging buffer).
    fn upload_into(&self, host: &[f32], buf: &mut Self::Buf) -> Result<()>;
    fn upload_labels(&self, host: &[i32], buf: &mut Self::Labels) -> Result<()>;
    fn labels(&self, n: usize) -> Result<Self::Labels>;
    /// Copy `buf[range]` to `host` (`host.len() == range.len()`).
    fn download(&self, buf: &Self::Buf, range: Range<usize>, host: &mut [f32]) -> Result<()>;
    fn len(&self, buf: &Self::Buf) -> usize;
    /// The sum of the squares of `buf[r]`, added in float64 (gradient clipping's norms; in
    /// index order here and on the CPU, in partial sums on a GPU: equal within float64
    /// rounding). By default through host memory; the CPU reads the buffer in place.
    fn sum_squares(&self, buf: &Self::Buf, r: Range<usize>) -> Result<f64> {
        let mut h = vec![0.0; r.len()];
        self.download(buf, r, &mut h)?;
        Ok(h.iter().map(|&x| f64::from(x) * f64::from(x)).sum())
    }
    /// Clamp each range of `buf` to [-bound, bound] (gradient clipping by value); returns how
    /// many values changed. By default through host memory; the CPU clamps in place.
    fn clamp(&self, buf: &mut Self::Buf, parts: &[(Range<usize>, f32)]) -> Result<usize> {
        let n = self.len(buf);
        let mut h = vec![0.0; n];
        self.download(buf, 0..n, &mut h)?;
        let k = clamp_host(&mut h, parts);
        if k > 0 {
            self.upload_into(&h, buf)?;
        }
        Ok(k)
    }
    fn fill_zero(&self, v: Self::ViewMut<'_>) -> Result<()>;
    /// dst[r, :] = src[idx[r], :] for the first `rows` rows of [·, cols] matrices: a batch
    /// gathered from a data set kept in the device's memory (`idx` within src's rows).
    fn gather_rows(
        &self,
        src: Self::View<'_>,
        cols: usize,
        idx: &Self::Labels,
        rows: usize,
        dst: Self::ViewMut<'_>,
    ) -> Result<()>;
    fn view<'a>(&self, buf: &'a Self::Buf, r: Range<usize>) -> Self::View<'a>;
    fn view_mut<'a>(&self, buf: &'a mut Self::Buf, r: Range<usize>) -> Self::ViewMut<'a>;

    // ---- dense layer ----
    /// The product `g` (see `Gemm`) of `a` and `b` into `c`.
    fn gemm(&self, g: Gemm, a: Self::View<'_>, b: Self::View<'_>, c: Self::ViewMut<'_>) -> Result<()>;
    /// out[r, :] = act(out[r, :] + bias); the pre-activation goes to `keep_z` when given.
    fn bias_act(
        &self,
        out: Self::ViewMut<'_>,
        bias: Self::View<'_>,
        act: Activation,
        keep_z: Option<Self::ViewMut<'_>>,
    ) -> Result<()>;
    /// A dense layer's forward, out[..n] = act(x · w + bias) (`g`: the product, overwriting),
    /// the pre-activation kept in `keep_z` when given: the product, then `bias_act`. The CUDA
    /// backend makes it one cublasLt call with an epilogue where it can (`cuda/lt_map.rs`).
    #[allow(clippy::too_many_arguments)]
    fn dense(
        &self,
        g: Gemm,
        x: Self::View<'_>,
        w: Self::View<'_>,
        out: &mut Self::Buf,
        n: usize,
        bias: Self::View<'_>,
        act: Activation,
        keep_z: Option<Self::ViewMut<'_>>,
    ) -> Result<()> {
        self.gemm(g, x, w, self.view_mut(out, 0..n))?;
        self.bias_act(self.view_mut(out, 0..n), bias, act, keep_z)
    }
    /// Backward into the layer before: `dprev` [rows, inp] = (g · Wᵀ) ⊙ act'(that layer), from
    /// its output `a_prev` (relu, tanh) or pre-activation `z_prev` (gelu), and that layer's
    /// bias gradient, `bias_grad` = `beta` · bias_grad + `dprev`'s column sums. `g` is the
    /// product's shape (m = rows, k = out, n = inp; N, T), `dz` [rows, out], `w` [inp, out].
    /// The three operations by default; one call where a backend fuses them (cublasLt's
    /// DRELU_BGRAD / DGELU_BGRAD epilogues).
    #[allow(clippy::too_many_arguments)]
    fn input_grad(
        &self,
        g: Gemm,
        dz: Self::View<'_>,
        w: Self::View<'_>,
        dprev: &mut Self::Buf,
        a_prev: Self::View<'_>,
        z_prev: Option<Self::View<'_>>,
        act: Activation,
        beta: f32,
        bias_grad: Self::ViewMut<'_>,
    ) -> Result<()> {
        input_grad_separate(self, g, dz, w, dprev, a_prev, z_prev, act, beta, bias_grad)
    }
    /// d *= act'(z), from the activation's output `a` (relu, tanh) or input `z` (gelu).
    fn act_backward(
        &self,
        d: Self::ViewMut<'_>,
        a: Self::View<'_>,
        z: Option<Self::View<'_>>,
        act: Activation,
    ) -> Result<()>;
    /// out[j] = Σ_r m[r, j] (the bias gradient).
    fn column_sums(&self, m: Self::View<'_>, cols: usize, beta: f32, out: Self::ViewMut<'_>) -> Result<()>;

    // ---- losses ----
    /// Softmax cross-entropy of `logits` [b, k] against `labels[..b]`: (Σ losses, correct
    /// argmax predictions); the gradient × `grad_scale` into `d` when given. With class
    /// `weights` [k], each row's loss and gradient are × the weight of its label (Keras'
    /// `class_weight`); with sample weights `rw` [b] (`data.sample_weight`, Keras'
    /// `sample_weight`), row r's finished loss and gradient are then × `rw[r]`. The correct
    /// count is never weighted.
    #[allow(clippy::too_many_arguments)]
    fn softmax_xent(
        &self,
        logits: Self::View<'_>,
        labels: &Self::Labels,
        weights: Option<Self::View<'_>>,
        rw: Option<Self::View<'_>>,
        k: usize,
        smoothing: f32,
        grad_scale: f32,
        d: Option<Self::ViewMut<'_>>,
    ) -> Result<(f64, usize)>;
    /// Σ over samples of the per-sample mean over k outputs of loss `f` (see `Pointwise`), and
    /// the elements predicted right (binary cross-entropy; 0 for the others); the gradient of
    /// (that sum × `grad_scale`) into `d` when given; with sample weights `rw` [b], row r's
    /// mean and gradient × `rw[r]`.
    #[allow(clippy::too_many_arguments)]
    fn pointwise_loss(
        &self,
        f: Pointwise,
        pred: Self::View<'_>,
        target: Self::View<'_>,
        rw: Option<Self::View<'_>>,
        k: usize,
        grad_scale: f32,
        d: Option<Self::ViewMut<'_>>,
    ) -> Result<(f64, usize)>;
    /// `softmax_xent`, whose sums may be left for `pending_loss_sums` to read later, when more
    /// work is queued behind the loss: a GPU then does not idle while the host waits for them
    /// (None). Where that saves nothing (the CPU, the default) they come now.
    #[allow(clippy::too_many_arguments)]
    fn softmax_xent_later(
        &self,
        logits: Self::View<'_>,
        labels: &Self::Labels,
        weights: Option<Self::View<'_>>,
        rw: Option<Self::View<'_>>,
        k: usize,
        smoothing: f32,
        grad_scale: f32,
        d: Option<Self::ViewMut<'_>>,
    ) -> Result<Option<(f64, usize)>> {
        self.softmax_xent(logits, labels, weights, rw, k, smoothing, grad_scale, d).map(Some)
    }
    /// `pointwise_loss`, as `softmax_xent_later`.
    #[allow(clippy::too_many_arguments)]
    fn pointwise_loss_later(
        &self,
        f: Pointwise,
        pred: Self::View<'_>,
        target: Self::View<'_>,
        rw: Option<Self::View<'_>>,
        k: usize,
        grad_scale: f32,
        d: Option<Self::ViewMut<'_>>,
    ) -> Result<Option<(f64, usize)>> {
        self.pointwise_loss(f, pred, target, rw, k, grad_scale, d).map(Some)
    }
    /// The sums of the last loss a `*_later` call left pending (it returned None); before any
    /// other loss. Waits for the work queued so far.
    fn pending_loss_sums(&self) -> Result<(f64, usize)> {
        unreachable!("this backend never leaves a loss pending")
    }
    // ---- captured steps (CUDA graphs; `step/graph.rs` decides when) ----
    /// Make the compute stream wait for the last writes into `bufs` from other streams (a
    /// batch's upload), which a captured sequence cannot wait for itself.
    fn order_after_writes(&self, _bufs: &[&Self::Buf]) -> Result<()> {
        Ok(())
    }
    /// Whether this backend can capture launches (`capture_begin`).
    fn captures(&self) -> bool {
        false
    }
    /// A number that changes whenever the backend replaces scratch memory of its own (grown
    /// for a larger batch): graphs captured before it changed name freed memory.
    fn scratch_generation(&self) -> u64 {
        0
    }
    /// Start capturing this backend's launches instead of running them (a CUDA graph).
    fn capture_begin(&self) -> Result<()> {
        unreachable!("capture_begin on a backend that does not capture")
    }
    /// End the capture `capture_begin` started: the launches since, to `replay`. On an error
    /// nothing was captured, and nothing of it ran.
    fn capture_end(&self) -> Result<Captured> {
        unreachable!("capture_end without a capture_begin that returned true")
    }
    /// Run `g`'s launches again, on the buffers they were captured with.
    fn replay(&self, _g: &Captured) -> Result<Replayed> {
        unreachable!("replay of a graph this backend never captured")
    }
    /// Dropout on [rows, cols] `v` in place (see `Mask`), row r's global id `keys[r]`.
    fn dropout(&self, v: Self::ViewMut<'_>, cols: usize, keys: &Self::Labels, m: Mask) -> Result<()>;
    /// Row-wise softmax of [rows, k] in place (probabilities for `predict`).
    fn softmax(&self, v: Self::ViewMut<'_>, k: usize) -> Result<()>;

    /// Sum `buf[..n]` over the ranks of `reducer` in place on the device, when the reducer
    /// takes device pointers (NCCL): true. False where it cannot (host memory; the caller goes
    /// through host copies). Collective over the reducer's ranks when true.
    fn reduce_in_place(
        &self,
        buf: &mut Self::Buf,
        n: usize,
        reducer: &mut dyn crate::parallel::reduce::Reducer,
    ) -> Result<bool> {
        if !reducer.takes_device_pointers() {
            return Ok(false);
        }
        let Some(p) = self.idle_address_mut(buf, n)? else { return Ok(false) };
        if n > 0 {
            // SAFETY: n floats of idle memory, summed in place (NCCL sums in place; the
            // emulation copies first); the reducer is done with them when it returns.
            unsafe { reducer.reduce_device(p, p, n) };
        }
        Ok(true)
    }

    /// The address of `buf[..n]` once every write queued to it has finished, for a transport
    /// that takes this backend's memory by address (NCCL: device memory; the emulation
    /// without a GPU: host memory), to read; None where this backend's memory is not handed out.
    fn idle_address(&self, _buf: &Self::Buf, _n: usize) -> Result<Option<u64>> {
        Ok(None)
    }
    /// `idle_address`, to write: whatever the backend keeps beside the values (bf16 copies)
    /// counts as stale from here on.
    fn idle_address_mut(&self, _buf: &mut Self::Buf, _n: usize) -> Result<Option<u64>> {
        Ok(None)
    }

    /// bf16 products' operands read from bf16 copies the backend kept, and rounded first
    /// (None: it keeps no copies; the CUDA backend with `HVTRAIN_BF16_COPIES=1`).
    fn bf16_copy_reads(&self) -> Option<[u64; 2]> {
        None
    }

    // ---- compression ----
    /// Round `v` in place to fp16 or bf16 and back (round to nearest, ties to even): the
    /// packing that compressed gradient exchange applies, bit-exact on every backend.
    fn round_half(&self, v: Self::ViewMut<'_>, kind: crate::config::Compression) -> Result<()>;

    // ---- optimizer ----
    /// p -= lr · update(g · grad_scale + wd · p), with momentum buffer `m` when given.
    fn sgd(&self, p: Self::ViewMut<'_>, g: Self::View<'_>, m: Option<Self::ViewMut<'_>>, h: &SgdHyper) -> Result<()>;
    fn adam(
        &self,
        p: Self::ViewMut<'_>,
        g: Self::View<'_>,
        m: Self::ViewMut<'_>,
        v: Self::ViewMut<'_>,
        h: &AdamHyper,
    ) -> Result<()>;
    /// RMSprop on the tensor (or piece) `params[pr]` with its gradient `g`, its v and, with
    /// momentum, its buffer `m` (`RmspropHyper`). By default composed of `adam` and `sgd`
    /// (`rmsprop_composed`, with `rmsprop_scratch_count` zeroed scratch buffers of at least
    /// `pr.len()`), the kernels a GPU has run; a backend that `fuses_rmsprop` runs one pass and
    /// takes no scratch.
    #[allow(clippy::too_many_arguments)]
    fn rmsprop(
        &self,
        params: &mut Self::Buf,
        pr: Range<usize>,
        g: Self::View<'_>,
        v: Self::ViewMut<'_>,
        m: Option<Self::ViewMut<'_>>,
        scratch: &mut [Self::Buf],
        h: &RmspropHyper,
    ) -> Result<()> {
        rmsprop_composed(self, params, pr, g, v, m, scratch, h)
    }
    /// Whether `rmsprop` is one pass of this backend's own, needing no scratch.
    fn fuses_rmsprop(&self) -> bool {
        false
    }
    /// `sgd` on several consecutive tensors (`segs`, arena ranges; the gradients at their range
    /// less `goff`), each with `h.weight_decay` only where `decayed`: the same bits as one `sgd`
    /// per tensor, which is what this default does; a GPU runs them as one launch.
    fn sgd_segments(
        &self,
        params: &mut Self::Buf,
        grads: &Self::Buf,
        goff: usize,
        m: Option<&mut Self::Buf>,
        segs: &[Segment],
        h: &SgdHyper,
    ) -> Result<()> {
        sgd_each(self, params, grads, goff, m, segs, h)
    }
    /// `adam` likewise (`h.l2` and `h.decay` only where `decayed`).
    #[allow(clippy::too_many_arguments)]
    fn adam_segments(
        &self,
        params: &mut Self::Buf,
        grads: &Self::Buf,
        goff: usize,
        m: &mut Self::Buf,
        v: &mut Self::Buf,
        segs: &[Segment],
        h: &AdamHyper,
    ) -> Result<()> {
        adam_each(self, params, grads, goff, m, v, segs, h)
    }
}

/// A reducer on device memory (`Backend::nccl_reducer`), or the channel back and why not.
pub type DeviceReducer =
    std::result::Result<Box<dyn crate::parallel::reduce::Reducer>, (crate::parallel::Channel, String)>;
