//! Rows of `x` read as float32: any stored integer or float type converted, `data.x_scale`
//! and `data.x_offset` applied in float64 and rounded once, non-finite results refused with
//! the file row and the stored value. Training's shards and `predict` read through `read_x`.
//! Must not check shapes (`check.rs` did, at open).

use super::Part;
use crate::config::{num, DataCfg};
use crate::data::h5::{Elem, Num};
use crate::error::{Error, Result};
use std::path::Path;

/// What `read_rows` does to each stored feature value: None keeps it (converted to float32),
/// Some((scale, offset)) gives value * scale + offset.
pub type Affine = Option<(f64, f64)>;

/// The scale and offset of `data` (None when they leave values as stored).
pub fn affine_of(cfg: &DataCfg) -> Affine {
    (cfg.x_scale != 1.0 || cfg.x_offset != 0.0).then_some((cfg.x_scale, cfg.x_offset))
}

/// Read file rows a..a+n of one part into `out` as float32 (see `read_x`).
pub(super) fn read_part<T: Num>(
    p: &Part,
    x_name: &str,
    a: usize,
    n: usize,
    d: usize,
    affine: Affine,
    out: &mut [f32],
) -> Result<()> {
    read_x::<T>(&p.x, &p.path, p.elem, x_name, a, n, d, affine, out)
}

/// Read rows a..a+n of dataset `x` (file `path`, stored as `T`, element type `elem`) into
/// `out` as float32, scale and offset applied, rejecting non-finite results with the row.
/// Training's shards and `predict` read inputs through this one function.
#[allow(clippy::too_many_arguments)]
pub fn read_x<T: Num>(
    x: &hdf5::Dataset,
    path: &Path,
    elem: Elem,
    x_name: &str,
    a: usize,
    n: usize,
    d: usize,
    affine: Affine,
    out: &mut [f32],
) -> Result<()> {
    let arr = x
        .read_slice_2d::<T, _>((a..a + n, ..))
        .map_err(|e| Error::hdf5(path, format!("read {} rows {}..{}", x_name, a, a + n), e))?;
    let src = arr.as_slice().expect("hdf5 returns standard-layout arrays");
    let out = &mut out[..src.len()];
    match affine {
        None => out.iter_mut().zip(src).for_each(|(o, &v)| *o = v.to_f32()),
        Some((scale, offset)) => out.iter_mut().zip(src).for_each(|(o, &v)| *o = (v.to_f64() * scale + offset) as f32),
    }
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        let mut msg = format!("non-finite value {} at row {}, column {}", out[i], a + i / d, i % d);
        let stored = match elem {
            Elem::F32 | Elem::F64 | Elem::F16 => num(src[i].to_f64()),
            _ => src[i].to_string(),
        };
        if let Some((scale, offset)) = affine {
            msg += &format!(
                " after scaling (stored {} value {stored}, data.x_scale {}, data.x_offset {})",
                elem.name(),
                num(scale),
                num(offset)
            );
        } else if elem != Elem::F32 {
            msg += &format!(" after conversion to float32 (stored {} value {stored})", elem.name());
        }
        return Err(Error::data(path, x_name, msg));
    }
    Ok(())
}
