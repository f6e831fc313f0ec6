//! Where `hvtrain data import` writes: HDF5 files of the layout training reads (`x` float32
//! [N, D], `y` int32 [N] classes or float32 [N, K] values), written in chunks as rows stream in
//! (resizable, chunked datasets, optionally gzip or LZF compressed), over one file or `--shard
//! N` files of contiguous, balanced row ranges, with the names of x's columns (`x_columns`),
//! of numeric targets' columns (`y_columns`), the string labels' classes and
//! (`--sample-weight`) a weight a row, `w` float32 [N], beside them; no `y` at all with
//! `--features-only` (rows for `predict`).
//!
//! Must not: parse input (the readers do) or hold more than one chunk of rows.

use crate::data::h5;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Compression of the written datasets (`--compress`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Compress {
    None,
    Gzip,
    Lzf,
}

/// The dataset `--sample-weight` writes (what `data.sample_weight` then names).
pub const WEIGHTS: &str = "w";

/// Rows of one chunk: features row-major, the targets (class ids, or k values a row) and, with
/// `--sample-weight`, a weight a row.
#[derive(Default)]
pub struct Chunk {
    pub x: Vec<f32>,
    pub classes: Vec<i32>,
    pub values: Vec<f32>,
    pub w: Vec<f32>,
}

impl Chunk {
    pub fn rows(&self, d: usize) -> usize {
        self.x.len() / d.max(1)
    }
    pub fn clear(&mut self) {
        self.x.clear();
        self.classes.clear();
        self.values.clear();
        self.w.clear();
    }
}

/// What the targets are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YKind {
    /// One integer class a row (`y` int32 [N]).
    Classes,
    /// `k` numbers a row (`y` float32 [N, k]).
    Values(usize),
    /// No `y` (`--features-only`: rows for `predict`).
    None,
}

/// The output file of shard `i` of `n` (`{rank}` in `out` replaced, or `-i` before the
/// extension when `n` > 1 and `out` has no `{rank}`).
pub fn shard_path(out: &Path, i: usize, n: usize) -> PathBuf {
    numbered(out, n, &i.to_string())
}

/// The `data.train` template that reads the files `shard_path` writes.
pub fn template(out: &Path, n: usize) -> String {
    numbered(out, n, "{rank}").display().to_string()
}

/// `out` with `number` where `shard_path` puts a shard's number.
fn numbered(out: &Path, n: usize, number: &str) -> PathBuf {
    let s = out.to_string_lossy();
    if s.contains("{rank}") {
        return PathBuf::from(s.replace("{rank}", number));
    }
    if n == 1 {
        return out.to_path_buf();
    }
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = out.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    out.with_file_name(format!("{stem}-{number}{ext}"))
}

/// One open output file and how many rows it holds.
struct Open {
    path: PathBuf,
    x: hdf5::Dataset,
    y: Option<hdf5::Dataset>,
    w: Option<hdf5::Dataset>,
    rows: usize,
}

pub struct Sink {
    out: PathBuf,
    d: usize,
    y: YKind,
    compress: Compress,
    chunk_rows: usize,
    /// Every row's count, when known (a small file's chunks are no larger than it).
    total: Option<usize>,
    /// Rows in each shard file (their sum is every row).
    bounds: Vec<usize>,
    shard: usize,
    open: Option<Open>,
    pub written: Vec<PathBuf>,
    columns: Vec<String>,
    /// The target columns' names (`y_columns`), for numeric targets read from named columns.
    y_columns: Vec<String>,
    /// Write `WEIGHTS` from each chunk's `w`.
    weights: bool,
}

impl Sink {
    /// Files for `total` rows over `shards` files (1: one file; `total` may be unknown then).
    pub fn new(
        out: &Path,
        d: usize,
        y: YKind,
        compress: Compress,
        shards: usize,
        total: Option<usize>,
        columns: Vec<String>,
    ) -> Result<Sink> {
        let bounds = match (shards, total) {
            (1, _) => vec![usize::MAX],
            (n, Some(t)) if t >= n => (0..n).map(|i| (i + 1) * t / n - i * t / n).collect(),
            (n, Some(t)) => {
                return Err(Error::config(
                    "command line",
                    "--shard",
                    format!("{t} rows cannot fill {n} files; use --shard {t} or fewer"),
                ))
            }
            (_, None) => unreachable!("sharding needs the row count"),
        };
        Ok(Sink {
            out: out.to_path_buf(),
            d,
            y,
            compress,
            chunk_rows: (1 << 20) / (4 * d.max(1)).clamp(1, 1 << 20),
            total,
            bounds,
            shard: 0,
            open: None,
            written: Vec::new(),
            columns,
            y_columns: Vec::new(),
            weights: false,
        })
    }

    /// Write the target columns' names as `y_columns` (numeric targets: `predict` names its
    /// output columns by them).
    pub fn with_y_columns(mut self, names: Vec<String>) -> Sink {
        self.y_columns = names;
        self
    }

    /// Write each chunk's `w` as the dataset `WEIGHTS` (float32 [N]) beside x and y.
    pub fn with_weights(mut self) -> Sink {
        self.weights = true;
        self
    }

    fn create(&self, i: usize) -> Result<Open> {
        let path = shard_path(&self.out, i, self.bounds.len());
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create the output folder", e))?;
        }
        let f = h5::create(&path)?;
        // Chunks of about 1 MiB of x, but no more rows than the file gets: HDF5 stores whole
        // chunks, so a 600-row file in 87,381-row chunks took 1.4 MB.
        let rows = self.bounds[i].min(self.total.unwrap_or(usize::MAX));
        let (d, c) = (self.d, self.chunk_rows.min(rows).max(1));
        let make = |name: &str, cols: Option<usize>, int: bool| -> Result<hdf5::Dataset> {
            let b = if int { f.new_dataset::<i32>() } else { f.new_dataset::<f32>() };
            let b = match cols {
                Some(k) => b.chunk((c, k)).shape((0.., k)),
                None => b.chunk(c).shape(0..),
            };
            let b = match self.compress {
                Compress::None => b,
                Compress::Gzip => b.deflate(4),
                Compress::Lzf => b.lzf(),
            };
            b.create(name).map_err(|e| Error::hdf5(&path, format!("create dataset {name}"), e))
        };
        let x = make("x", Some(d), false)?;
        let y = match self.y {
            YKind::Classes => Some(make("y", None, true)?),
            YKind::Values(k) => Some(make("y", Some(k), false)?),
            YKind::None => None,
        };
        let w = if self.weights { Some(make(WEIGHTS, None, false)?) } else { None };
        if !self.columns.is_empty() {
            h5::write_strings(&f, &path, "x_columns", &self.columns)?;
        }
        if !self.y_columns.is_empty() {
            h5::write_strings(&f, &path, "y_columns", &self.y_columns)?;
        }
        Ok(Open { path, x, y, w, rows: 0 })
    }

    /// Append `chunk`'s rows, across shard files as their bounds say.
    pub fn write(&mut self, chunk: &Chunk) -> Result<()> {
        let d = self.d;
        let n = chunk.rows(d);
        let mut at = 0;
        while at < n {
            if self.open.is_none() {
                self.open = Some(self.create(self.shard)?);
            }
            let room = self.bounds[self.shard] - self.open.as_ref().expect("opened above").rows;
            let take = room.min(n - at);
            let o = self.open.as_mut().expect("opened above");
            let (a, b) = (o.rows, o.rows + take);
            let err = |what: &str, e| Error::hdf5(&o.path, format!("write {what}"), e);
            o.x.resize((b, d)).map_err(|e| err("x", e))?;
            let xs = ndarray::ArrayView2::from_shape((take, d), &chunk.x[at * d..(at + take) * d]).expect("shape");
            o.x.write_slice(xs, ndarray::s![a..b, ..]).map_err(|e| err("x", e))?;
            match (self.y, &o.y) {
                (YKind::Classes, Some(y)) => {
                    y.resize(b).map_err(|e| err("y", e))?;
                    y.write_slice(&chunk.classes[at..at + take], ndarray::s![a..b]).map_err(|e| err("y", e))?;
                }
                (YKind::Values(k), Some(y)) => {
                    y.resize((b, k)).map_err(|e| err("y", e))?;
                    let ys = ndarray::ArrayView2::from_shape((take, k), &chunk.values[at * k..(at + take) * k])
                        .expect("shape");
                    y.write_slice(ys, ndarray::s![a..b, ..]).map_err(|e| err("y", e))?;
                }
                _ => {}
            }
            if let Some(w) = &o.w {
                w.resize(b).map_err(|e| err(WEIGHTS, e))?;
                w.write_slice(&chunk.w[at..at + take], ndarray::s![a..b]).map_err(|e| err(WEIGHTS, e))?;
            }
            o.rows = b;
            at += take;
            if o.rows == self.bounds[self.shard] {
                self.close();
                self.shard += 1;
            }
        }
        Ok(())
    }

    fn close(&mut self) {
        if let Some(o) = self.open.take() {
            self.written.push(o.path);
        }
    }

    /// Close the last file; with string labels, renumber the written labels through `remap`
    /// (class c becomes `remap[c]`: the names were numbered as they appeared, and are sorted
    /// now), and write their classes (`y_classes`, class i the i-th string) into every file.
    /// Returns the files written.
    pub fn finish(mut self, classes: &[String], remap: Option<&[i32]>) -> Result<Vec<PathBuf>> {
        self.close();
        if !classes.is_empty() {
            for p in &self.written {
                let f = hdf5::File::open_rw(p).map_err(|e| Error::hdf5(p, "reopen", e))?;
                if let Some(t) = remap {
                    renumber(&f, p, t, self.chunk_rows.max(1))?;
                }
                h5::write_strings(&f, p, "y_classes", classes)?;
            }
        }
        Ok(self.written)
    }
}

/// Labels `y` of an open file through `table`, a chunk of rows at a time (4 bytes a row: the
/// pass costs little next to the features').
fn renumber(f: &hdf5::File, path: &Path, table: &[i32], rows: usize) -> Result<()> {
    let err = |e| Error::hdf5(path, "renumber y", e);
    let y = f.dataset("y").map_err(err)?;
    let n = y.shape()[0];
    let mut a = 0;
    while a < n {
        let b = (a + rows).min(n);
        let mut v: Vec<i32> = y.read_slice_1d::<i32, _>(a..b).map_err(err)?.to_vec();
        for c in &mut v {
            *c = table[*c as usize];
        }
        y.write_slice(&v, ndarray::s![a..b]).map_err(err)?;
        a = b;
    }
    Ok(())
}
