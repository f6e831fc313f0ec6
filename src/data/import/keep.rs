//! Columns of a table read as text, as they stand (`hvtrain predict --keep id`: an id or a
//! label copied beside each row's prediction): CSV/TSV fields as written, Parquet values as
//! `pq::text_of` prints them (null: empty).
//!
//! Must not: convert or check values (nothing is trained on them).

use super::{pq, text};
use crate::error::{Error, Result};
use std::path::Path;

/// Whether `path` is a table `columns` can read (CSV/TSV, gzipped or not, or Parquet).
pub fn readable(path: &Path) -> bool {
    matches!(super::kind_of(path), Some(super::Kind::Text | super::Kind::Parquet))
}

/// The columns `wanted` (header names; with `no_header`, a CSV/TSV's 0-based indices) of the
/// table at `path`, each as one string a row; `delimiter` as `data import`'s.
pub fn columns(path: &Path, wanted: &[String], delimiter: Option<u8>, no_header: bool) -> Result<Vec<Vec<String>>> {
    let missing = |names: &[String]| -> Result<Vec<usize>> {
        wanted
            .iter()
            .map(|w| {
                names.iter().position(|n| n == w).ok_or_else(|| {
                    Error::config(
                        "command line",
                        "--keep",
                        format!("no column {w:?} in {}; the columns are {names:?}", path.display()),
                    )
                })
            })
            .collect()
    };
    let name = path.to_string_lossy().to_lowercase();
    if name.ends_with(".parquet") || name.ends_with(".pq") {
        let file = pq::open(path)?;
        let names: Vec<String> = file.columns.iter().map(|c| c.name.clone()).collect();
        let cols = missing(&names)?;
        let mut out = vec![Vec::with_capacity(file.rows); cols.len()];
        let mut r = pq::Chunked::new(&file, cols);
        while r.next(path, 65536)? {
            for (k, v) in out.iter_mut().enumerate() {
                v.extend(r.fields(k).map(|f| pq::text_of(f).unwrap_or_default()));
            }
        }
        return Ok(out);
    }
    let delimiter = delimiter.unwrap_or_else(|| text::delimiter_of(path));
    let mut r =
        csv::ReaderBuilder::new().delimiter(delimiter).has_headers(!no_header).from_reader(text::open_reader(path)?);
    let csv_err = |e: csv::Error| {
        let line = e.position().map(|p| p.line()).unwrap_or(0);
        Error::data(path, format!("line {line}"), format!("{e}"))
    };
    let mut rec = csv::StringRecord::new();
    // Without a header the first record is data: read it now for the column count.
    let first = no_header && r.read_record(&mut rec).map_err(csv_err)?;
    let names: Vec<String> = if no_header {
        (0..rec.len()).map(|i| i.to_string()).collect()
    } else {
        r.headers().map_err(csv_err)?.iter().map(|h| h.trim().to_string()).collect()
    };
    let cols = missing(&names)?;
    let mut out = vec![Vec::new(); cols.len()];
    if first {
        for (v, &c) in out.iter_mut().zip(&cols) {
            v.push(rec.get(c).unwrap_or("").to_string());
        }
    }
    while r.read_record(&mut rec).map_err(csv_err)? {
        for (v, &c) in out.iter_mut().zip(&cols) {
            v.push(rec.get(c).unwrap_or("").to_string());
        }
    }
    Ok(out)
}
