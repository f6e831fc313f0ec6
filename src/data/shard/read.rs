//! Rows of `x` read as float32: any stored integer or float type converted, `data.x_scale`
//! and `data.x_offset` and the normalization (`data::norm`) applied in float64 as one scale
//! and offset per feature and rounded once, non-finite results refused with the file row and
//! the stored value. Training's shards and `predict` read through `read_x`.
//! Must not check shapes (`check.rs` did, at open).

use super::Part;
use crate::config::{num, DataCfg};
use crate::data::h5::{Elem, Num};
use crate::data::norm::Norm;
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// What `read_rows` does to each stored feature value v of feature j: v · a[j] + c[j] in
/// float64, rounded once to float32; `per` None keeps values as stored (converted).
#[derive(Clone, Debug, Default)]
pub struct Affine {
    per: Option<Arc<Vec<(f64, f64)>>>,
    /// `data.x_scale`, `data.x_offset` and whether a normalization is folded in (messages).
    scale: f64,
    offset: f64,
    normalized: bool,
}

impl Affine {
    /// The per-feature (scale, offset), or None when values are kept as stored.
    pub fn per_feature(&self) -> Option<&[(f64, f64)]> {
        self.per.as_deref().map(|v| v.as_slice())
    }
}

/// `data.x_scale` and `data.x_offset`, then `norm`'s x part, for `d` features, folded into
/// one scale and offset per feature: ((v·s + o) − shift) / div = v·(s/div) + (o − shift)/div.
pub fn affine_of(cfg: &DataCfg, norm: &Norm, d: usize) -> Affine {
    let (scale, offset) = (cfg.x_scale, cfg.x_offset);
    let normalized = !norm.x_shift.is_empty();
    let per = if normalized {
        assert_eq!(norm.x_shift.len(), d, "normalization of another feature count");
        Some(norm.x_shift.iter().zip(&norm.x_div).map(|(m, s)| (scale / s, (offset - m) / s)).collect())
    } else if scale != 1.0 || offset != 0.0 {
        Some(vec![(scale, offset); d])
    } else {
        None
    };
    Affine { per: per.map(Arc::new), scale, offset, normalized }
}

/// Read file rows a..a+n of one part into `out` as float32 (see `read_x`).
pub(super) fn read_part<T: Num>(
    p: &Part,
    x_name: &str,
    a: usize,
    n: usize,
    d: usize,
    affine: &Affine,
    out: &mut [f32],
) -> Result<()> {
    read_x::<T>(&p.x, &p.path, p.elem, x_name, a, n, d, affine, out, None)
}

/// Read rows a..a+n of dataset `x` (file `path`, stored as `T`, element type `elem`) into
/// `out` as float32, scale and offset applied, rejecting non-finite results with the row.
/// `pick`: the stored column of each of the `d` features (`predict`'s inputs matched to the
/// model's columns by name); None: the stored columns are the features. Training's shards
/// and `predict` read inputs through this one function.
#[allow(clippy::too_many_arguments)]
pub fn read_x<T: Num>(
    x: &hdf5::Dataset,
    path: &Path,
    elem: Elem,
    x_name: &str,
    a: usize,
    n: usize,
    d: usize,
    affine: &Affine,
    out: &mut [f32],
    pick: Option<&[usize]>,
) -> Result<()> {
    // [samples, features], or [samples, d1, d2, ...] whose rows are read flattened.
    let mut src = crate::data::h5::read_rows::<T>(x, a..a + n)
        .map_err(|e| Error::hdf5(path, format!("read {} rows {}..{}", x_name, a, a + n), e))?;
    if let Some(p) = pick {
        let width = src.len() / n.max(1);
        src = src.chunks_exact(width.max(1)).flat_map(|row| p.iter().map(|&c| row[c])).collect();
    }
    let column = |j: usize| pick.map_or(j, |p| p[j]);
    let (src, out) = (&src[..], &mut out[..src.len()]);
    match affine.per_feature() {
        None => out.iter_mut().zip(src).for_each(|(o, &v)| *o = v.to_f32()),
        Some(per) => {
            for (orow, srow) in out.chunks_exact_mut(d).zip(src.chunks_exact(d)) {
                for ((o, &v), &(a, c)) in orow.iter_mut().zip(srow).zip(per) {
                    *o = (v.to_f64() * a + c) as f32;
                }
            }
        }
    }
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        let mut msg = format!("non-finite value {} at row {}, column {}", out[i], a + i / d, column(i % d));
        let stored = match elem {
            Elem::F32 | Elem::F64 | Elem::F16 => num(src[i].to_f64()),
            _ => src[i].to_string(),
        };
        if affine.per.is_some() {
            msg += &format!(
                " after scaling (stored {} value {stored}, data.x_scale {}, data.x_offset {}{})",
                elem.name(),
                num(affine.scale),
                num(affine.offset),
                if affine.normalized { ", then data.normalize" } else { "" }
            );
        } else if elem != Elem::F32 {
            msg += &format!(" after conversion to float32 (stored {} value {stored})", elem.name());
        }
        return Err(Error::data(path, x_name, msg));
    }
    Ok(())
}
