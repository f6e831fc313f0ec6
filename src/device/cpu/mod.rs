//! The CPU reference backend: the matrix product and the element-wise kernels of a dense
//! layer, on row-major `f32` slices. Every other backend is tested against these.
//!
//! Shapes are always row-major: activations are [batch, features], a weight is [in, out].
//!
//! Must not: be fast at the cost of being the plain reference (speed work keeps its results within
//! the conformance tolerances).

use super::backend::{AdamHyper, Backend, Captured, Mask, Pointwise, Replayed, RmspropHyper, SgdHyper};
pub use super::backend::{Gemm, Trans};
use crate::config::Activation;
use crate::error::Result;
use std::ops::Range;

pub mod bf16_kernel;
mod fp32;
mod kernels;
mod loss;
pub mod vmath;
pub use bf16_kernel::Bf16Kernel;
#[cfg(test)]
use fp32::mm_gemm;
pub use fp32::{fp32_kernel, gemm};
#[cfg(test)]
pub use kernels::act_forward_inplace;
pub use kernels::{
    act_backward_inplace, bias_act_forward, column_sums, dropout, gather_rows, gelu, gelu_grad, softmax_rows,
};
#[cfg(test)]
pub use kernels::{act_grad_z, softplus};
pub(crate) use kernels::{adam, rmsprop, sgd};
pub use loss::{pointwise_loss, sigmoid, softmax_xent};

/// The CPU backend: buffers are `Vec<f32>` in host memory, views are slices. Its matrix
/// products are float32 (`Cpu`, the reference: `sgemm.rs` on AVX-512, else matrixmultiply) or
/// bf16 mixed precision (`Cpu::new(Bf16)`: AMX tiles, `amx/`, or AVX512-BF16, `bf16.rs`, as
/// `bf16_kernel` chooses); everything else is float32 either way.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    bf16: bool,
    /// Which kernel runs the bf16 products (when `bf16`).
    kernel: Bf16Kernel,
    /// bf16 mode: every layer's output (and GELU's kept pre-activation) stored rounded to
    /// bf16, as autocast and cublasLt's bf16 epilogues keep activations
    /// (`HVTRAIN_BF16_OUTPUTS=1`): the reference of the GPU's bf16 outputs.
    outputs: bool,
    graphs: GraphEmulation,
}

/// How the CPU answers `Backend::capture_begin` (tests of `step/graph.rs`, which decides when a
/// GPU captures and replays a step, on a machine without one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub enum GraphEmulation {
    /// No capture: every step runs plain (the CPU backend's behaviour).
    #[default]
    Off,
    /// Captures; a replay asks the caller to run the captured work again with the values it
    /// had at capture (`Replayed::Rerun`), as a graph replays the launches it holds.
    Faithful,
    /// Captures, and a replay runs nothing while saying it ran on the device: a graph that
    /// lost its launches, which the check on each capture must catch.
    Broken,
}

/// The float32 CPU backend, spelled as a value (`&Cpu`) as the unit struct it once was.
#[allow(non_upper_case_globals)]
pub const Cpu: Cpu = Cpu { bf16: false, kernel: Bf16Kernel::Avx512, outputs: false, graphs: GraphEmulation::Off };

impl Cpu {
    /// A bf16 backend that stores every layer output rounded to bf16 (`on`), or not, whatever
    /// HVTRAIN_BF16_OUTPUTS says (the GPU's conformance checks open both); float32 stays so.
    pub fn with_outputs(self, on: bool) -> Cpu {
        Cpu { outputs: on && self.bf16, ..self }
    }

    /// The backend for `training.precision`: bf16 needs AMX tiles or AVX512-BF16 (checked
    /// here, at run time, `bf16_kernel::choose`); tf32 is a GPU setting, so the CPU computes
    /// float32 for it.
    pub fn new(precision: crate::config::Precision) -> Result<Cpu> {
        if precision != crate::config::Precision::Bf16 {
            return Ok(Cpu);
        }
        let kernel = bf16_kernel::choose().map_err(|why| {
            crate::error::Error::Device(format!(
                "training.precision = \"bf16\" on the CPU needs AMX-BF16 or AVX512-BF16, and {why}; \
                 use training.precision = \"fp32\", or run on such a CPU or a GPU"
            ))
        })?;
        Ok(Cpu { bf16: true, kernel, outputs: std::env::var("HVTRAIN_BF16_OUTPUTS").is_ok_and(|v| v == "1"), ..Cpu })
    }

    /// This backend, answering captures as `e` says.
    #[cfg(test)]
    pub fn emulating_graphs(self, e: GraphEmulation) -> Cpu {
        Cpu { graphs: e, ..self }
    }

    /// The bias as this backend adds it: rounded to bf16 with bf16 outputs, else as given.
    fn bias_as_added<'a>(&self, bias: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        match self.outputs {
            true => std::borrow::Cow::Owned(bf16_bias(bias)),
            false => std::borrow::Cow::Borrowed(bias),
        }
    }

    /// `bias_act` with `bias` as given (already rounded where bf16 outputs round it).
    /// Element-wise, so with training.threads > 1 the pool's threads take whole rows each
    /// (the same bits): on the main thread alone they left the other thread idle (on 2
    /// threads, bias_act and act_backward were 4 % of a bf16 step of the small model).
    fn bias_act_as_given(&self, out: &mut [f32], bias: &[f32], act: Activation, keep_z: Option<&mut [f32]>) {
        let rows = out.len() / bias.len().max(1);
        let c = rows.div_ceil(super::pool::parts(out.len())).max(1) * bias.len().max(1);
        let zs = beside(keep_z.map(|z| z.chunks_mut(c)), out.len().div_ceil(c));
        let parts: Vec<_> = out.chunks_mut(c).zip(zs).collect();
        super::pool::each(parts, &|(out, mut z)| {
            bias_act_forward(out, bias, act, z.as_deref_mut());
            if self.outputs {
                // Computed in float32, stored in bf16 (as an epilogue writing bf16 does).
                for v in out.iter_mut().chain(z.into_iter().flatten()) {
                    *v = super::bf16::round(*v);
                }
            }
        });
    }
}

/// The bias as bf16 layer outputs add it: rounded to bf16 (cuBLAS's bf16 epilogue reads the
/// bias in D's type, and autocast rounds it too), so every backend's bf16 outputs agree.
fn bf16_bias(bias: &[f32]) -> Vec<f32> {
    bias.iter().map(|&b| super::bf16::round(b)).collect()
}

impl Backend for Cpu {
    type Buf = Vec<f32>;
    type Labels = Vec<i32>;
    type View<'a> = &'a [f32];
    type ViewMut<'a> = &'a mut [f32];

    fn input_grad(
        &self,
        g: Gemm,
        dz: &[f32],
        w: &[f32],
        dprev: &mut Vec<f32>,
        a_prev: &[f32],
        z_prev: Option<&[f32]>,
        act: Activation,
        beta: f32,
        bias_grad: &mut [f32],
    ) -> Result<()> {
        // The operands a GPU's fused call gets, checked here too (the CPU runs every model
        // shape the tests have).
        g.check_input_grad(bias_grad.len(), a_prev.len());
        super::backend::input_grad_separate(self, g, dz, w, dprev, a_prev, z_prev, act, beta, bias_grad)
    }
    /// Transports that take device pointers here take host memory (`reduce::HostPointers`,
    /// `pipe::HostPointers`: the emulation of NCCL's sums and messages).
    fn idle_address(&self, buf: &Vec<f32>, n: usize) -> Result<Option<u64>> {
        Ok(Some(buf[..n].as_ptr() as u64))
    }
    fn idle_address_mut(&self, buf: &mut Vec<f32>, n: usize) -> Result<Option<u64>> {
        Ok(Some(buf[..n].as_mut_ptr() as u64))
    }
    fn name(&self) -> String {
        if self.bf16 && self.outputs {
            format!("cpu (bf16 products and layer outputs, {})", self.kernel.name())
        } else if self.bf16 {
            format!("cpu (bf16 products, {})", self.kernel.name())
        } else {
            format!("cpu (float32 products: {})", fp32_kernel())
        }
    }
    // Allocations fail with `Error::OutOfMemory` (naming what and this rank's model state),
    // never with an abort.
    fn zeros(&self, n: usize) -> Result<Vec<f32>> {
        crate::mem::zeros(n)
    }
    fn upload(&self, host: &[f32]) -> Result<Vec<f32>> {
        crate::mem::to_vec(host)
    }
    fn upload_into(&self, host: &[f32], buf: &mut Vec<f32>) -> Result<()> {
        buf[..host.len()].copy_from_slice(host);
        Ok(())
    }
    fn upload_labels(&self, host: &[i32], buf: &mut Vec<i32>) -> Result<()> {
        buf[..host.len()].copy_from_slice(host);
        Ok(())
    }
    fn labels(&self, n: usize) -> Result<Vec<i32>> {
        crate::mem::zeros(n)
    }
    fn download(&self, buf: &Vec<f32>, range: Range<usize>, host: &mut [f32]) -> Result<()> {
        host.copy_from_slice(&buf[range]);
        Ok(())
    }
    fn len(&self, buf: &Vec<f32>) -> usize {
        buf.len()
    }
    fn sum_squares(&self, buf: &Vec<f32>, r: Range<usize>) -> Result<f64> {
        Ok(buf[r].iter().map(|&x| f64::from(x) * f64::from(x)).sum())
    }
    fn clamp(&self, buf: &mut Vec<f32>, parts: &[(Range<usize>, f32)]) -> Result<usize> {
        Ok(super::backend::clamp_host(buf, parts))
    }
    fn fill_zero(&self, v: &mut [f32]) -> Result<()> {
        v.fill(0.0);
        Ok(())
    }
    fn view<'a>(&self, buf: &'a Vec<f32>, r: Range<usize>) -> &'a [f32] {
        &buf[r]
    }
    fn view_mut<'a>(&self, buf: &'a mut Vec<f32>, r: Range<usize>) -> &'a mut [f32] {
        &mut buf[r]
    }
    fn gemm(&self, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<()> {
        if self.bf16 {
            self.kernel.gemm(g, a, b, c);
        } else {
            gemm(g, a, b, c);
        }
        Ok(())
    }
    /// On tiles (or their emulation) the bias, activation and bf16 rounding are applied where
    /// each block of the product is stored, instead of in a second pass over the output.
    fn dense(
        &self,
        g: Gemm,
        x: &[f32],
        w: &[f32],
        out: &mut Vec<f32>,
        n: usize,
        bias: &[f32],
        act: Activation,
        keep_z: Option<&mut [f32]>,
    ) -> Result<()> {
        let bias = &*self.bias_as_added(bias);
        match self.kernel.unit().filter(|_| self.bf16 && g.alpha == 1.0 && g.beta == 0.0 && bias.len() == g.n) {
            Some(unit) => {
                // Each block's rows as `bias_act` would treat them (element-wise, so a part of
                // a row is treated as the whole row would be).
                let row = |o: &mut [f32], b: &[f32], z: Option<&mut [f32]>| {
                    self.bias_act_as_given(o, b, act, z);
                };
                let post = super::amx::Post { bias, keep_z, row: &row };
                super::amx::gemm_post(unit, g, x, w, &mut out[..n], post);
            }
            None => {
                self.gemm(g, x, w, &mut out[..n])?;
                self.bias_act_as_given(&mut out[..n], bias, act, keep_z);
            }
        }
        Ok(())
    }
    /// With bf16 outputs the bias is rounded to bf16 before it is added (`bf16_bias`).
    fn bias_act(&self, out: &mut [f32], bias: &[f32], act: Activation, keep_z: Option<&mut [f32]>) -> Result<()> {
        self.bias_act_as_given(out, &self.bias_as_added(bias), act, keep_z);
        Ok(())
    }
    fn act_backward(&self, d: &mut [f32], a: &[f32], z: Option<&[f32]>, act: Activation) -> Result<()> {
        let c = d.len().div_ceil(super::pool::parts(d.len())).max(1);
        let zs = beside(z.map(|z| z.chunks(c)), d.len().div_ceil(c));
        let parts: Vec<_> = d.chunks_mut(c).zip(a.chunks(c)).zip(zs).collect();
        super::pool::each(parts, &|((d, a), z)| act_backward_inplace(d, a, z, act));
        Ok(())
    }
    fn column_sums(&self, m: &[f32], cols: usize, beta: f32, out: &mut [f32]) -> Result<()> {
        column_sums(m, cols, beta, out);
        Ok(())
    }
    fn softmax_xent(
        &self,
        logits: &[f32],
        labels: &Vec<i32>,
        weights: Option<&[f32]>,
        rw: Option<&[f32]>,
        k: usize,
        smoothing: f32,
        grad_scale: f32,
        d: Option<&mut [f32]>,
    ) -> Result<(f64, usize)> {
        let b = logits.len() / k;
        Ok(softmax_xent(logits, &labels[..b], weights, rw.map(|w| &w[..b]), k, smoothing, grad_scale, d))
    }
    fn pointwise_loss(
        &self,
        f: Pointwise,
        pred: &[f32],
        target: &[f32],
        rw: Option<&[f32]>,
        k: usize,
        grad_scale: f32,
        d: Option<&mut [f32]>,
    ) -> Result<(f64, usize)> {
        Ok(pointwise_loss(f, pred, target, rw, k, grad_scale, d))
    }
    fn gather_rows(&self, src: &[f32], cols: usize, idx: &Vec<i32>, rows: usize, dst: &mut [f32]) -> Result<()> {
        gather_rows(src, cols, &idx[..rows], dst);
        Ok(())
    }
    fn captures(&self) -> bool {
        self.graphs != GraphEmulation::Off
    }
    fn capture_begin(&self) -> Result<()> {
        Ok(())
    }
    fn capture_end(&self) -> Result<Captured> {
        Ok(Captured(Box::new(())))
    }
    fn replay(&self, _g: &Captured) -> Result<Replayed> {
        Ok(if self.graphs == GraphEmulation::Broken { Replayed::OnDevice } else { Replayed::Rerun })
    }
    fn dropout(&self, v: &mut [f32], cols: usize, keys: &Vec<i32>, m: Mask) -> Result<()> {
        dropout(v, cols, keys, m);
        Ok(())
    }
    fn softmax(&self, v: &mut [f32], k: usize) -> Result<()> {
        softmax_rows(v, k);
        Ok(())
    }
    fn round_half(&self, v: &mut [f32], kind: crate::config::Compression) -> Result<()> {
        if kind != crate::config::Compression::None {
            crate::parallel::compress::round_trip(v, kind);
        }
        Ok(())
    }
    // The updates are element by element: with training.threads > 1 the pool's threads take
    // contiguous parts (the same bits; the update reads and writes 3-5 floats per parameter
    // and is bound by memory, which two cores fetch faster than one).
    fn sgd(&self, p: &mut [f32], g: &[f32], m: Option<&mut [f32]>, h: &SgdHyper) -> Result<()> {
        let c = p.len().div_ceil(super::pool::parts(p.len())).max(1);
        let ms = beside(m.map(|m| m.chunks_mut(c)), p.len().div_ceil(c));
        let parts: Vec<_> = p.chunks_mut(c).zip(g.chunks(c)).zip(ms).collect();
        super::pool::each(parts, &|((p, g), m)| sgd(p, g, m, h));
        Ok(())
    }
    fn adam(&self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], h: &AdamHyper) -> Result<()> {
        let c = p.len().div_ceil(super::pool::parts(p.len())).max(1);
        let parts: Vec<_> = p.chunks_mut(c).zip(g.chunks(c)).zip(m.chunks_mut(c)).zip(v.chunks_mut(c)).collect();
        super::pool::each(parts, &|(((p, g), m), v)| adam(p, g, m, v, h));
        Ok(())
    }
    fn rmsprop(
        &self,
        params: &mut Vec<f32>,
        pr: Range<usize>,
        g: &[f32],
        v: &mut [f32],
        m: Option<&mut [f32]>,
        _scratch: &mut [Vec<f32>],
        h: &RmspropHyper,
    ) -> Result<()> {
        let p = &mut params[pr];
        let c = p.len().div_ceil(super::pool::parts(p.len())).max(1);
        let ms = beside(m.map(|m| m.chunks_mut(c)), p.len().div_ceil(c));
        let parts: Vec<_> = p.chunks_mut(c).zip(g.chunks(c)).zip(v.chunks_mut(c)).zip(ms).collect();
        super::pool::each(parts, &|(((p, g), v), m)| rmsprop(p, g, v, m, h));
        Ok(())
    }
    fn fuses_rmsprop(&self) -> bool {
        true
    }
}

/// The parts of an optional slice beside a slice cut into `parts` parts: each part of it
/// where it is given, else `parts` Nones (a kept pre-activation, a momentum buffer).
fn beside<S>(chunks: Option<impl Iterator<Item = S>>, parts: usize) -> Vec<Option<S>> {
    match chunks {
        Some(it) => it.map(Some).collect(),
        None => (0..parts).map(|_| None).collect(),
    }
}

#[cfg(test)]
mod tests;
