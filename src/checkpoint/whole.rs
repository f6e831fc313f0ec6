//! A whole checkpoint (one file, not in parts) used without holding its arrays: rank 0 checks
//! it by streaming the checksum of its parameters and optimizer state a layer (or a block of
//! the optimizer state) at a time (`checksums`), and each rank of a sharded or model-parallel
//! resume reads only its own pieces of it (`read`), as it would from parts.
//!
//! The stored order is `parts.rs`'s (the layers last to first, each layer's weight [in, out]
//! then its bias); in the file the parameters are `dense{l}/weight` and `dense{l}/bias`
//! (`weights.rs`'s layout), the optimizer state `optimizer/m` and `optimizer/v` and the
//! moving average `optimizer/ema`, flat.
//!
//! Must not: hold more than one layer or block of an array in memory, or call MPI.

use super::parts::StoredMap;
use crate::data::h5;
use crate::error::{Error, Result};
use crate::model::Mlp;
use crate::parallel::Checksum;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A whole checkpoint whose arrays were checked and left in its file: where it is, and the
/// lengths of its optimizer state (0: absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unread {
    pub path: PathBuf,
    pub m: usize,
    pub v: usize,
    pub ema: usize,
}

impl Unread {
    /// Whether its optimizer state is what an optimizer with (`m`, `v`) needs: present with
    /// the model's stored length, or absent.
    pub fn fits(&self, model: &Mlp, m: bool, v: bool) -> bool {
        let want = |there: bool| if there { model.n_logical() } else { 0 };
        self.m == want(m) && self.v == want(v)
    }
}

/// Floats of the optimizer state read at a time for its checksum (16 MiB).
const BLOCK: usize = 1 << 22;

/// The stretches of array `name`'s stored order in the file (`len` long): (stored start,
/// length, dataset).
fn segments(model: &Mlp, name: &str, len: usize) -> Vec<(usize, usize, String)> {
    if name != "params" {
        return vec![(0, len, name.to_string())];
    }
    let mut out = Vec::with_capacity(2 * model.layers.len());
    let mut at = 0;
    for (l, s) in model.layers.iter().enumerate().rev() {
        for (part, r) in [("weight", &s.w), ("bias", &s.b)] {
            out.push((at, r.len(), format!("dense{l}/{part}")));
            at += r.len();
        }
    }
    out
}

/// Values `r` of dataset `ds` in its flat order (a 2-D dataset's rows end to end), reading the
/// rows that hold them.
fn read_flat(ds: &hdf5::Dataset, path: &Path, name: &str, r: Range<usize>) -> Result<Vec<f32>> {
    let err = |e| Error::hdf5(path, format!("read {name}"), e);
    let shape = ds.shape();
    if shape.len() != 2 {
        return Ok(ds.read_slice_1d::<f32, _>(r).map_err(err)?.to_vec());
    }
    let w = shape[1].max(1);
    let first = r.start / w;
    let rows = ds.read_slice_2d::<f32, _>((first..r.end.div_ceil(w), ..)).map_err(err)?;
    Ok(rows.iter().skip(r.start - first * w).take(r.len()).copied().collect())
}

/// The checksums (`parallel::Checksum`) of the file's parameters, optimizer/m and optimizer/v
/// in the stored order, and of optimizer/ema where there is one, as `Checkpoint::checksum`
/// computes them over arrays in memory, read a layer or a block at a time; and the lengths of
/// m, v and the moving average (0: absent). The parameters' shapes are checked against `model`.
#[allow(clippy::type_complexity)]
pub(super) fn checksums(f: &hdf5::File, path: &Path, model: &Mlp) -> Result<(([u64; 3], Option<u64>), [usize; 3])> {
    let mut c = Checksum::new();
    for l in (0..model.layers.len()).rev() {
        for part in ["weight", "bias"] {
            let v: Vec<f32> = crate::weights::layer_dataset(f, path, model, l, part)?
                .read_raw()
                .map_err(|e| Error::hdf5(path, format!("read dense{l}/{part}"), e))?;
            c.add(&v);
        }
    }
    let mut sums = [c.finish(), 0, 0, 0];
    let mut lens = [0; 3];
    for (i, name) in ["optimizer/m", "optimizer/v", "optimizer/ema"].into_iter().enumerate() {
        let mut c = Checksum::new();
        if let Ok(ds) = f.dataset(name) {
            lens[i] = ds.size();
            for a in (0..lens[i]).step_by(BLOCK) {
                c.add(&read_flat(&ds, path, name, a..(a + BLOCK).min(lens[i]))?);
            }
        }
        sums[i + 1] = c.finish();
    }
    let ema = (lens[2] > 0).then_some(sums[3]);
    Ok((([sums[0], sums[1], sums[2]], ema), lens))
}

/// The values of `name` ("params", "optimizer/m", "optimizer/v", "optimizer/ema") at arena ranges `want` of
/// the arena `map` describes (of `model`, the whole model), end to end (the padding zeros),
/// read from the whole checkpoint `u`: what `parts::read` does for one in parts.
pub fn read(u: &Unread, model: &Mlp, map: &StoredMap, name: &str, want: &[Range<usize>]) -> Result<Vec<f32>> {
    let f = h5::open(&u.path, "--resume")?;
    let (runs, at) = map.runs_of(want);
    let mut out = crate::mem::zeros(at)?;
    let len = match name {
        "optimizer/m" => u.m,
        "optimizer/v" => u.v,
        "optimizer/ema" => u.ema,
        _ => model.n_logical(),
    };
    for (s, n, ds_name) in segments(model, name, len) {
        let ds = h5::dataset(&f, &u.path, &ds_name)?;
        for &(to, tn, ts) in &runs {
            let ov = crate::parallel::shard::intersect(&(s..s + n), &(ts..ts + tn));
            if ov.is_empty() {
                continue;
            }
            let v = read_flat(&ds, &u.path, &ds_name, ov.start - s..ov.end - s)?;
            let dst = to + ov.start - ts;
            out[dst..dst + ov.len()].copy_from_slice(&v);
        }
    }
    Ok(out)
}
