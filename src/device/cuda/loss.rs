//! The loss kernels' launches on the CUDA backend: per-row losses and correct counts into the
//! row scratch, summed on the host when read (at once, or later: `Backend::*_later`).
//!
//! Must not: be reached except through `Backend` (the `Cuda` impl in `backend.rs`).

use super::backend::{Cuda, NULL};
use super::buf::drv;
use super::buf::{DView, DViewMut};
use super::launch::config_1d;
use crate::device::backend::Pointwise;
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaViewMut, PushKernelArg};

impl Cuda {
    /// A loss kernel's per-row results summed on the host: (Σ row losses, Σ correct counts).
    pub(super) fn read_loss_sums(
        &self,
        loss: &CudaSlice<f32>,
        correct: &CudaSlice<i32>,
        rows: usize,
    ) -> Result<(f64, usize)> {
        let losses = self.read_f32(loss, rows)?;
        let mut c = vec![0i32; rows];
        self.stream.memcpy_dtoh(&correct.slice(0..rows), &mut c[..]).map_err(drv("reading a result back"))?;
        self.stream.synchronize().map_err(drv("waiting for the GPU"))?;
        Ok((losses.iter().map(|&v| v as f64).sum(), c.iter().map(|&v| v.max(0) as usize).sum()))
    }

    /// The loss kernels' launches: per-row results in the row scratch, `rows` returned.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_softmax_xent(
        &self,
        logits: DView<'_>,
        labels: &CudaSlice<i32>,
        weights: Option<DView<'_>>,
        rw: Option<DView<'_>>,
        k: usize,
        smoothing: f32,
        grad_scale: f32,
        d: Option<DViewMut<'_>>,
    ) -> Result<usize> {
        let rows = logits.len / k;
        if rows == 0 {
            return Ok(0);
        }
        self.row_scratch(rows)?;
        let mut scratch = self.rows.borrow_mut();
        let (loss, correct) = scratch.as_mut().expect("grown above");
        {
            let lv = logits.cu();
            let wv = weights.map(|w| {
                assert_eq!(w.len, k, "one class weight per output");
                w.cu()
            });
            let (rows64, k32) = (rows as i64, k as i32);
            let mut dv = d.map(DViewMut::cu);
            // Label smoothing runs its own kernel: without it the step launches what it did before.
            let smooth = smoothing > 0.0;
            let f = if smooth { &self.k.softmax_xent_smooth } else { &self.k.softmax_xent };
            let mut l = self.stream.launch_builder(f);
            l.arg(&lv).arg(labels);
            match wv.as_ref() {
                Some(wv) => l.arg(wv),
                None => l.arg(&NULL),
            };
            l.arg(&rows64).arg(&k32);
            if smooth {
                l.arg(&smoothing);
            }
            l.arg(&grad_scale);
            match dv.as_mut() {
                Some(dv) => l.arg(dv),
                None => l.arg(&NULL),
            };
            l.arg(&mut *loss).arg(&mut *correct);
            // SAFETY: hv_softmax_xent(const float*, const int*, const float*, long long, int, float,
            // float*, float*, int*) over `rows` rows, or hv_softmax_xent_smooth with the float eps
            // after k; labels and scratch hold at least `rows`, the class weights (or null) k.
            unsafe { l.launch(config_1d(rows)) }.map_err(drv("launching hv_softmax_xent"))?;
            if let Some(rw) = rw {
                self.launch_weigh_rows(rw, rows, k, loss, dv.as_mut())?;
            }
        }
        Ok(rows)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_pointwise_loss(
        &self,
        f: Pointwise,
        pred: DView<'_>,
        target: DView<'_>,
        rw: Option<DView<'_>>,
        k: usize,
        grad_scale: f32,
        d: Option<DViewMut<'_>>,
    ) -> Result<usize> {
        let rows = pred.len / k;
        if rows == 0 {
            return Ok(0);
        }
        self.row_scratch(rows)?;
        let mut scratch = self.rows.borrow_mut();
        let (loss, correct) = scratch.as_mut().expect("grown above");
        {
            let (pv, tv) = (pred.cu(), target.cu());
            let (rows64, k32) = (rows as i64, k as i32);
            let (mode, delta) = f.mode();
            let mut dv = d.map(DViewMut::cu);
            // Binary label smoothing runs its own kernel: without it the step launches what it
            // did before.
            let smooth = match f {
                Pointwise::BinaryXent(eps) if eps > 0.0 => Some(eps),
                _ => None,
            };
            // So do the regression losses added since (log-cosh, MAPE, MSLE, pinball: modes 4 to 7).
            let mut l = match smooth {
                Some(_) => self.stream.launch_builder(&self.k.binary_xent_smooth),
                None if mode >= 4 => self.stream.launch_builder(&self.k.regression_loss),
                None => self.stream.launch_builder(&self.k.pointwise_loss),
            };
            l.arg(&pv).arg(&tv).arg(&rows64).arg(&k32);
            match smooth.as_ref() {
                Some(eps) => l.arg(eps),
                None => l.arg(&mode).arg(&delta),
            };
            l.arg(&grad_scale);
            match dv.as_mut() {
                Some(dv) => l.arg(dv),
                None => l.arg(&NULL),
            };
            l.arg(&mut *loss).arg(&mut *correct);
            // SAFETY: hv_pointwise_loss(const float*, const float*, long long, int, int, float, float,
            // float*, float*, int*) over `rows` rows (hv_regression_loss has the same arguments), or
            // hv_binary_xent_smooth with the float eps in place of mode and delta; the scratch holds
            // at least `rows`.
            unsafe { l.launch(config_1d(rows)) }.map_err(drv("launching hv_pointwise_loss"))?;
            if let Some(rw) = rw {
                self.launch_weigh_rows(rw, rows, k, loss, dv.as_mut())?;
            }
        }
        Ok(rows)
    }

    /// Sample weights after a loss kernel: `hv_weigh_rows` multiplies row r's loss in the row
    /// scratch and its gradient row in `d` (when given) by `rw[r]`. Launched only when the job
    /// has `data.sample_weight`: the unweighted step runs the same kernels as before it.
    fn launch_weigh_rows(
        &self,
        rw: DView<'_>,
        rows: usize,
        k: usize,
        loss: &mut CudaSlice<f32>,
        d: Option<&mut CudaViewMut<'_, f32>>,
    ) -> Result<()> {
        assert!(rw.len >= rows, "one sample weight per row");
        let rv = rw.cu();
        let (rows64, k32) = (rows as i64, k as i32);
        let mut l = self.stream.launch_builder(&self.k.weigh_rows);
        l.arg(&mut *loss);
        match d {
            Some(dv) => l.arg(dv),
            None => l.arg(&NULL),
        };
        l.arg(&rv).arg(&rows64).arg(&k32);
        // SAFETY: hv_weigh_rows(float*, float*, const float*, long long, int) over `rows` rows:
        // the row scratch and the weights hold at least `rows`, d (or null) rows·k.
        unsafe { l.launch(config_1d(rows)) }.map_err(drv("launching hv_weigh_rows"))?;
        Ok(())
    }

    /// The sums of the row scratch's first `rows` results (0 rows: none).
    pub(super) fn read_rows_sums(&self, rows: usize) -> Result<(f64, usize)> {
        if rows == 0 {
            return Ok((0.0, 0));
        }
        let scratch = self.rows.borrow();
        let (loss, correct) = scratch.as_ref().expect("a loss kernel grew it");
        self.read_loss_sums(loss, correct, rows)
    }
}
