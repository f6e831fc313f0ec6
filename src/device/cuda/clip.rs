//! Gradient clipping's kernels on the CUDA backend: the sum of squares of a range (float64
//! partial sums per interleaved set, read back and added on the host: 256 KiB at most, not the
//! tensor) and the clamp by value in place (per-set counts of changed values read back), so a
//! clipped step no longer copies every gradient to the host and back.
//!
//! Must not: be reached except through `Backend` (the `Cuda` impl in `backend.rs`).

use super::backend::Cuda;
use super::buf::drv;
use super::buf::DevBuf;
use super::launch::{config_1d, reduce_parts};
use crate::error::Result;
use cudarc::driver::PushKernelArg;
use std::ops::Range;

impl Cuda {
    pub(super) fn launch_sum_squares(&self, buf: &DevBuf, r: Range<usize>) -> Result<f64> {
        assert!(r.start <= r.end && r.end <= buf.len, "sum_squares {r:?} of a buffer of {}", buf.len);
        let n = r.len();
        if n == 0 {
            return Ok(0.0);
        }
        let parts = reduce_parts(n);
        let mut partial = self.stream.alloc_zeros::<f64>(parts).map_err(|e| self.oom(e, parts * 8))?;
        {
            let v = buf.dev().slice(r);
            let (n64, parts32) = (n as i64, parts as i32);
            let mut l = self.stream.launch_builder(&self.k.sum_squares);
            l.arg(&v).arg(&n64).arg(&mut partial).arg(&parts32);
            // SAFETY: hv_sum_squares(const float*, long long, double*, int) over `parts` sets of
            // a view of n floats; `partial` holds `parts` doubles.
            unsafe { l.launch(config_1d(parts)) }.map_err(drv("launching hv_sum_squares"))?;
        }
        let mut host = vec![0.0f64; parts];
        self.stream.memcpy_dtoh(&partial, &mut host[..]).map_err(drv("reading the sums of squares"))?;
        self.stream.synchronize().map_err(drv("waiting for the GPU"))?;
        Ok(host.iter().sum())
    }

    pub(super) fn launch_clamp(&self, buf: &mut DevBuf, parts: &[(Range<usize>, f32)]) -> Result<usize> {
        let mut changed = 0usize;
        for (r, bound) in parts {
            assert!(r.start <= r.end && r.end <= buf.len, "clamp {r:?} of a buffer of {}", buf.len);
            let n = r.len();
            if n == 0 {
                continue;
            }
            let sets = reduce_parts(n);
            let mut counts = self.stream.alloc_zeros::<i32>(sets).map_err(|e| self.oom(e, sets * 4))?;
            {
                let mut v = buf.dev_mut().slice_mut(r.clone());
                let (n64, sets32) = (n as i64, sets as i32);
                let mut l = self.stream.launch_builder(&self.k.clamp);
                l.arg(&mut v).arg(&n64).arg(bound).arg(&mut counts).arg(&sets32);
                // SAFETY: hv_clamp(float*, long long, float, int*, int) over `sets` sets of a
                // view of n floats; `counts` holds `sets` ints.
                unsafe { l.launch(config_1d(sets)) }.map_err(drv("launching hv_clamp"))?;
            }
            let mut host = vec![0i32; sets];
            self.stream.memcpy_dtoh(&counts, &mut host[..]).map_err(drv("reading the clamp counts"))?;
            self.stream.synchronize().map_err(drv("waiting for the GPU"))?;
            changed += host.iter().map(|&k| k as usize).sum::<usize>();
        }
        Ok(changed)
    }
}
