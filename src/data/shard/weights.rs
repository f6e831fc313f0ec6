//! Sample weights beside x and y (`data.sample_weight`, Keras' `sample_weight` in `fit`): a
//! dataset of one number per row, [samples] or [samples, 1], of any integer, float or bool
//! type, read as float32 for the rows a shard takes, each finite and >= 0 (an error names the
//! file, the dataset and the row). A weight of 0 leaves its row out of the loss and the
//! gradient (it still counts in the batch's row count, as in Keras).
//!
//! Must not: know the model or the loss (the step multiplies each row's loss by its weight).

use crate::data::h5::{self, with_elem, Num};
use crate::error::{Error, Result};
use std::ops::Range;
use std::path::Path;

/// Whether every file of data path `template` (`key`) holds dataset `name`: true when all
/// do, false when none does; some with it and some without is an error naming one without.
pub(super) fn in_every_file(template: &str, key: &str, name: &str) -> Result<bool> {
    let files = super::files(template, key)?;
    let mut with = Vec::new();
    for (_, p) in &files {
        with.push(h5::open(p, key)?.link_exists(name));
    }
    match with.iter().position(|&h| !h) {
        None => Ok(true),
        Some(_) if !with.contains(&true) => Ok(false),
        Some(i) => Err(Error::data(
            &files[i].1,
            name,
            format!(
                "dataset not found, though {} other file(s) of {key} hold it: data.sample_weight weighs the loss \
                 of validation and test data whose files hold it; write it into every file of {key}, or into none",
                with.iter().filter(|&&h| h).count()
            ),
        )),
    }
}

/// Rows `rows` of dataset `name` of `file` (`path`, whose x has `n` rows) as sample weights.
pub(super) fn read(file: &hdf5::File, path: &Path, name: &str, n: usize, rows: Range<usize>) -> Result<Vec<f32>> {
    if !file.link_exists(name) {
        let members = file.member_names().unwrap_or_default().join(", ");
        return Err(Error::data(
            path,
            name,
            format!(
                "dataset not found (the file has: [{members}]); data.sample_weight names the dataset of one \
                 weight per row of x: write it into every training file, or remove the key"
            ),
        ));
    }
    let ds = h5::dataset(file, path, name)?;
    let shape = ds.shape();
    let need = "sample weights must be numbers: integers, floats or bool, one per row of x";
    let rows_ok = matches!(shape.as_slice(), [m] | [m, 1] if *m == n);
    if !rows_ok {
        return Err(Error::data(
            path,
            name,
            format!(
                "sample weights must be an array [samples] or [samples, 1] with one weight per row of x ({n} rows), \
                 found shape {shape:?}"
            ),
        ));
    }
    let read = |e| Error::hdf5(path, format!("read {name}"), e);
    let v: Vec<f32> = if h5::kind(&ds, path, name).ok() == Some("bool") {
        h5::read_rows::<bool>(&ds, rows.clone()).map_err(read)?.into_iter().map(f32::from).collect()
    } else {
        with_elem!(h5::elem(&ds, path, name, need)?, T => {
            h5::read_rows::<T>(&ds, rows.clone()).map_err(read)?.into_iter().map(Num::to_f32).collect()
        })
    };
    if let Some(i) = v.iter().position(|w| !w.is_finite() || *w < 0.0) {
        return Err(Error::data(
            path,
            name,
            format!(
                "sample weight {} at row {} is {}: weights must be finite numbers >= 0 (0 leaves the row out of the loss)",
                v[i],
                rows.start + i,
                if v[i].is_finite() { "negative" } else { "not finite (or too large for float32)" }
            ),
        ));
    }
    Ok(v)
}
