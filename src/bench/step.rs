//! `hvtrain bench step`: training steps per second of one MLP on one device (no MPI, one
//! rank: the step without communication), and the GEMM rate on the step's own matrix
//! products measured in the same run on the same device, so the step's FLOP rate reads as a
//! fraction of what the matrix library gives. Synthetic data, kept in device memory with each
//! batch gathered there by index (`--data device`, as the PyTorch peer keeps its data on the
//! GPU), or copied from host memory each step (`--data host`). The PyTorch peer on the same shapes is `bench/torch_peer.py`.
//!
//! Must not: call MPI (one rank, no communication) or keep a step of its own: it runs the real
//! `Stepper`.

use crate::config::{Activation, LossKind, OptimizerCfg, Precision};
use crate::data::loader::Batch;
use crate::device::{Backend, Gemm, Trans, WithBackend};
use crate::error::Result;
use crate::model::Mlp;
use crate::optim::Optimizer;
use crate::parallel::fusion::FusionPlan;
use crate::parallel::{reduce, Engine};
use crate::rng::Rng;
use crate::step::Stepper;
use std::time::Instant;

pub struct StepBench {
    pub layers: Vec<usize>,
    pub batch: usize,
    pub steps: usize,
    pub warmup: usize,
    pub precision: Precision,
    /// The hidden layers' activation.
    pub activation: Activation,
    /// The data set (8 batches) kept in device memory and each batch gathered there by index
    /// (`Stepper::set_resident`), else each batch copied from host memory.
    pub resident: bool,
}

/// Batches in the resident data set: each step takes the next batch's rows.
const RESIDENT_BATCHES: usize = 8;

/// The matrix products of one training step, (m, k, n, ta, tb), as `Mlp` issues them:
/// forward x·W, weight gradient xᵀ·d, and input gradient d·Wᵀ for every layer but the first
/// (nothing needs the gradient of the data).
fn step_gemms(layers: &[usize], batch: usize) -> Vec<(usize, usize, usize, Trans, Trans)> {
    let mut shapes = Vec::new();
    for (l, w) in layers.windows(2).enumerate() {
        shapes.push((batch, w[0], w[1], Trans::N, Trans::N));
        shapes.push((w[0], batch, w[1], Trans::T, Trans::N));
        if l > 0 {
            shapes.push((batch, w[1], w[0], Trans::N, Trans::T));
        }
    }
    shapes
}

/// FLOPs of one training step's matrix products (the element-wise work is not counted).
pub fn step_flops(layers: &[usize], batch: usize) -> f64 {
    step_gemms(layers, batch).iter().map(|&(m, k, n, _, _)| 2.0 * (m * k * n) as f64).sum()
}

impl WithBackend<serde_json::Value> for &StepBench {
    fn run<B: Backend>(self, be: B) -> Result<serde_json::Value> {
        let (layers, b) = (&self.layers, self.batch);
        let model = Mlp::new(layers, self.activation, LossKind::SoftmaxCrossEntropy);
        let params = model.init_params(1);
        let lens: Vec<usize> = model.tensors().iter().map(|t| t.range.len()).collect();
        let plan = FusionPlan::new(&lens, 64 << 20);
        let alloc = crate::step::bucket_buffers(&be, &plan)?;
        let engine = Engine::new(
            reduce::for_job(None, crate::config::Compression::None, Default::default(), false, &plan, false),
            plan,
            false,
            None,
            None,
            alloc,
        );
        let cfg = OptimizerCfg { lr: 0.01, ..Default::default() };
        let opt = Optimizer::new(&be, &cfg, model.tensors(), model.n_params, 1)?;
        let name = be.name();
        let mut st = Stepper::new(be, model, &params, opt, engine, b, None)?;
        let mut r = Rng::new(2, 5);
        let k = *layers.last().expect("layers");
        let mut batch = Batch {
            rows: b,
            x: (0..b * layers[0]).map(|_| r.uniform() as f32).collect(),
            classes: (0..b).map(|i| (i % k) as i32).collect(),
            values: Vec::new(),
            weights: Vec::new(),
            ids: (0..b as u32).collect(),
            digest: 0,
        };
        if self.resident {
            let all: Vec<f32> = (0..RESIDENT_BATCHES * b * layers[0]).map(|_| r.uniform() as f32).collect();
            st.set_resident(&all, 0)?;
        }
        let mut at = 0;
        let mut step = |st: &mut Stepper<B>, batch: &mut Batch| -> Result<()> {
            if self.resident {
                // The next batch's rows of the resident set (batch.x is not read).
                at = (at + 1) % RESIDENT_BATCHES;
                batch.ids.iter_mut().enumerate().for_each(|(i, id)| *id = (at * b + i) as u32);
            }
            st.run(batch, b, Instant::now())?;
            // The next step's batch (the same rows here), copied in while this step runs, as
            // the training loop does.
            st.prefetch(batch)
        };
        for _ in 0..self.warmup {
            step(&mut st, &mut batch)?;
        }
        st.wait()?;
        st.host_secs = [0.0; 4]; // the timed steps' only (the first step includes set-up)
        let t = Instant::now();
        for _ in 0..self.steps {
            step(&mut st, &mut batch)?;
        }
        st.wait()?; // not params_host: copying the whole model out is no part of a step
        let secs = t.elapsed().as_secs_f64();
        let flops = step_flops(layers, b);
        let gemm = gemm_rate(st.backend(), layers, b)?;
        let upload_ms = upload_time(st.backend(), &batch.x)? * 1e3;
        let step_tflops = flops * self.steps as f64 / secs / 1e12;
        Ok(serde_json::json!({
            "device": name, "layers": layers, "batch": b, "precision": format!("{:?}", self.precision).to_lowercase(),
            "activation": self.activation.name(),
            "steps": self.steps, "seconds": secs, "data": if self.resident { "device" } else { "host" },
            "samples_per_s": (b * self.steps) as f64 / secs,
            "step_ms": secs * 1e3 / self.steps as f64,
            "step_tflops": step_tflops,
            "gemm_tflops": gemm,
            "fraction_of_gemm": step_tflops / gemm,
            "upload_ms": upload_ms,
            "host_ms_per_step": {
                "upload": st.host_secs[0] * 1e3 / self.steps as f64,
                "forward_loss_backward": st.host_secs[1] * 1e3 / self.steps as f64,
                "optimizer": st.host_secs[2] * 1e3 / self.steps as f64,
                "loss_wait": st.host_secs[3] * 1e3 / self.steps as f64,
            },
            "launches": st.graph_summary(),
        }))
    }
}

/// TFLOP/s of the step's own matrix products (`step_gemms`) on
/// `be`, back to back, timed over repeats until at least 0.5 s has passed.
fn gemm_rate<B: Backend>(be: &B, layers: &[usize], batch: usize) -> Result<f64> {
    let shapes = step_gemms(layers, batch);
    // Random operands: tensor cores run measurably faster on constant data (13 % on an
    // H200 for bf16), which would flatter the rate the step is compared with.
    let mut r = Rng::new(7, 11);
    let mut random = |n: usize| -> Vec<f32> { (0..n).map(|_| r.uniform() as f32 - 0.5).collect() };
    let mut bufs = Vec::new();
    for &(m, k, n, _, _) in &shapes {
        bufs.push((be.upload(&random(m * k))?, be.upload(&random(k * n))?, be.zeros(m * n)?));
    }
    let flops: f64 = shapes.iter().map(|&(m, k, n, _, _)| 2.0 * (m * k * n) as f64).sum();
    let once = |bufs: &mut Vec<(B::Buf, B::Buf, B::Buf)>| -> Result<()> {
        for (&(m, k, n, ta, tb), (a, b, c)) in shapes.iter().zip(bufs.iter_mut()) {
            let (av, bv) = (be.view(a, 0..m * k), be.view(b, 0..k * n));
            be.gemm(Gemm::new(m, k, n, ta, tb), av, bv, be.view_mut(c, 0..m * n))?;
        }
        Ok(())
    };
    let mut sync = [0.0f32];
    once(&mut bufs)?;
    be.download(&bufs[0].2, 0..1, &mut sync)?;
    let (t, mut reps) = (Instant::now(), 0u64);
    while reps < 3 || t.elapsed().as_secs_f64() < 0.5 {
        once(&mut bufs)?;
        reps += 1;
        if reps % 4 == 0 {
            be.download(&bufs[0].2, 0..1, &mut sync)?;
        }
    }
    be.download(&bufs[0].2, 0..1, &mut sync)?;
    Ok(flops * reps as f64 / t.elapsed().as_secs_f64() / 1e12)
}

/// Seconds to move one batch's inputs to the device as a step does (into a staged buffer:
/// pinned memory, then the copy engine), waited for: the median of 21 repeats. On a GPU this
/// is the step's part that grows with the batch but not with the model.
fn upload_time<B: Backend>(be: &B, x: &[f32]) -> Result<f64> {
    let mut buf = be.input(x.len())?;
    let mut sync = [0.0f32];
    let mut times = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        be.upload_into(x, &mut buf)?;
        be.download(&buf, 0..1, &mut sync)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
