//! `hvtrain data import INPUT OUTPUT.h5`: CSV/TSV (gzipped or not), NumPy `.npy` (features;
//! targets from `--y-file`), `.npz` (arrays `x` and `y`) and Parquet into the HDF5 layout training
//! reads, streaming in chunks (files larger than memory work), one output file or `--shard N`
//! files of contiguous rows for a `{rank}` path, progress in the log. `--sample-weight` takes a
//! weight a row (a column; an array of a `.npz`; a `.npy` file beside a `.npy`) into `w`, which
//! `data.sample_weight = "w"` then reads.
//!
//! - `text`: the CSV/TSV fields as numbers, targets and class names;
//! - `npy`: the `.npy` header and its rows as float32 or int32;
//! - `pq`: Parquet's columns, chunk by chunk, as features and targets;
//! - `select`: which column is what (targets, weights, features), and the lists the command
//!   line gives;
//! - `numpy`: `.npy`/`.npz` inputs streamed into the sink;
//! - `sink`: the chunked (optionally compressed) HDF5 output over one or N files;
//! - `onehot`: categorical columns as one-hot features;
//! - `keep`: columns read as text, as they stand (`predict --keep`).
//!
//! Must not: be used by training; it writes files a job then reads.

pub mod keep;
mod npy;
mod numpy;
mod onehot;
mod pq;
mod select;
pub mod sink;
mod text;

use crate::error::{Error, Result};
use log::info;
pub use select::{classes_from, classes_list, columns_from};
use select::{columns, given_needs_names, y_names};
use sink::{Chunk, Compress, Sink, YKind};
use std::path::{Path, PathBuf};
use std::time::Instant;
pub use text::{delimiter_arg, ClassOrder};

/// Rows read, converted and written at a time.
const CHUNK_ROWS: usize = 65536;

/// `hvtrain data import`'s options.
#[derive(Clone, Debug)]
pub struct Opts {
    /// CSV/TSV: the target column(s), by header name or 0-based index.
    pub y: Vec<String>,
    /// `.npy`: the targets' file.
    pub y_file: Option<PathBuf>,
    /// Numeric targets even when they are integers (a regression, not classes).
    pub regression: bool,
    /// The value of a missing feature (else a missing field is an error).
    pub fill: Option<f32>,
    /// CSV/TSV: the first line is data, not column names.
    pub no_header: bool,
    /// CSV/TSV: the separator (default: tab for .tsv, else comma).
    pub delimiter: Option<u8>,
    pub shard: usize,
    pub compress: Compress,
    /// How class names are numbered (sorted by default).
    pub classes: ClassOrder,
    /// Sample weights: CSV/TSV/Parquet a column (name or 0-based index), `.npz` an array's
    /// name, `.npy` a `.npy` file; written as `sink::WEIGHTS`.
    pub sample_weight: Option<String>,
    /// No target: every column (but `drop`'s) is a feature; no `y` is written (rows for
    /// `predict`).
    pub features_only: bool,
    /// CSV/TSV/Parquet: columns that are neither features nor targets (an id, a date).
    pub drop: Vec<String>,
    /// CSV/TSV/Parquet: exactly these columns, by name, in this order, as the features
    /// (`--columns-from`, and `predict`: the columns the model was trained on); the columns
    /// neither these nor the targets or weights are not read.
    pub select: Option<Vec<String>>,
    /// Where `select` came from, for errors.
    pub select_from: Option<String>,
    /// CSV/TSV/Parquet: categorical columns, each made a feature `COLUMN=VALUE` per value.
    pub one_hot: Vec<String>,
}

impl Opts {
    /// Options for rows to predict on: no target, the features `select` names (all columns
    /// when None), a missing field `fill` when given.
    pub fn features(select: Option<Vec<String>>, fill: Option<f32>) -> Opts {
        Opts {
            y: Vec::new(),
            y_file: None,
            regression: false,
            fill,
            no_header: false,
            delimiter: None,
            shard: 1,
            compress: Compress::None,
            classes: ClassOrder::Sorted,
            sample_weight: None,
            features_only: true,
            drop: Vec::new(),
            select,
            select_from: None,
            one_hot: Vec::new(),
        }
    }
}

/// What an import wrote.
pub struct Summary {
    pub rows: usize,
    pub features: usize,
    pub y: YKind,
    pub classes: Vec<String>,
    /// Whether the files hold sample weights (`sink::WEIGHTS`).
    pub weights: bool,
    pub files: Vec<PathBuf>,
    /// The `data.train` value that reads them.
    pub template: String,
}

/// The progress line, every 2 s.
struct Progress {
    t0: Instant,
    last: Instant,
}

impl Progress {
    fn new() -> Progress {
        Progress { t0: Instant::now(), last: Instant::now() }
    }
    fn rows(&mut self, n: usize, of: Option<usize>) {
        if self.last.elapsed().as_secs_f64() >= 2.0 {
            self.last = Instant::now();
            let secs = self.t0.elapsed().as_secs_f64();
            let pct = of.map(|t| format!(" of {t} ({:.0} %)", 100.0 * n as f64 / t.max(1) as f64)).unwrap_or_default();
            info!("import: {n} rows{pct}, {:.0} rows/s", n as f64 / secs);
        }
    }
}

/// What a file is read as, by its name (any case).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// CSV/TSV (.csv, .tsv, .tab, .txt), gzipped (.gz) or not.
    Text,
    /// .parquet, .pq.
    Parquet,
    /// .npy.
    Npy,
    /// .npz.
    Npz,
}

/// The kind of table or NumPy file `path` names; None for any other name (`import` reads
/// those as CSV; `predict` as HDF5). Only text may be gzipped.
pub fn kind_of(path: &Path) -> Option<Kind> {
    let name = path.to_string_lossy().to_lowercase();
    let gz = name.ends_with(".gz");
    let base = name.trim_end_matches(".gz");
    let is = |exts: &[&str]| exts.iter().any(|e| base.ends_with(e));
    if is(&[".csv", ".tsv", ".tab", ".txt"]) {
        Some(Kind::Text)
    } else if gz {
        None
    } else if is(&[".parquet", ".pq"]) {
        Some(Kind::Parquet)
    } else if is(&[".npy"]) {
        Some(Kind::Npy)
    } else if is(&[".npz"]) {
        Some(Kind::Npz)
    } else {
        None
    }
}

pub fn import(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    if o.shard == 0 {
        return Err(Error::config("command line", "--shard", "must be at least 1"));
    }
    let t = Instant::now();
    let kind = kind_of(input).unwrap_or(Kind::Text);
    let numpy = matches!(kind, Kind::Npy | Kind::Npz);
    if numpy && !o.one_hot.is_empty() {
        return Err(Error::config(
            "command line",
            "--one-hot",
            "is for CSV/TSV and Parquet columns; a NumPy array holds numbers already (encode it with NumPy)",
        ));
    }
    let s = match kind {
        Kind::Npy => numpy::from_npy(input, out, o)?,
        Kind::Npz => numpy::from_npz(input, out, o)?,
        Kind::Parquet => from_parquet(input, out, o)?,
        Kind::Text => from_text(input, out, o)?,
    };
    info!(
        "import: {} rows × {} features in {:.1} s → {}",
        s.rows,
        s.features,
        t.elapsed().as_secs_f64(),
        s.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    Ok(s)
}

/// What an import of `rows` rows × `features` wrote into `files` (for `out` and `o`).
fn summary(
    rows: usize,
    features: usize,
    y: YKind,
    classes: Vec<String>,
    files: Vec<PathBuf>,
    out: &Path,
    o: &Opts,
) -> Summary {
    let (weights, template) = (o.sample_weight.is_some(), sink::template(out, o.shard));
    Summary { rows, features, y, classes, weights, files, template }
}

/// The sink for `o`: with a weights dataset when `--sample-weight` is given.
fn weighed(sink: Sink, o: &Opts) -> Sink {
    if o.sample_weight.is_some() {
        sink.with_weights()
    } else {
        sink
    }
}

fn from_parquet(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    let file = pq::open(input)?;
    let names: Vec<String> = file.columns.iter().map(|c| c.name.clone()).collect();
    let mut cols = columns(&names, o, input)?;
    if !cols.one_hot.is_empty() {
        let values = pq::values(&file, input, &cols.one_hot)?;
        cols.x = onehot::expand(std::mem::take(&mut cols.x), &cols.one_hot.iter().copied().zip(values).collect());
    }
    for f in cols.x.iter().filter(|f| f.value.is_none()) {
        pq::check_feature(input, &file.columns[f.col], &file)?;
    }
    let (y, w) = (cols.y.clone(), cols.w);
    if let Some(c) = w.map(|i| &file.columns[i]).filter(|c| c.kind == pq::Kind::Text) {
        return Err(Error::data(
            input,
            format!("column {:?}", c.name),
            "holds no numbers: --sample-weight needs a numeric column (a weight >= 0 a row)",
        ));
    }
    let ycols: Vec<&pq::Column> = y.iter().map(|&i| &file.columns[i]).collect();
    let mut targets = pq::decide(&ycols, o.regression, &o.classes);
    given_needs_names(&targets, o, input)?;
    if let text::Targets::Values(_) = targets {
        for c in &ycols {
            pq::check_feature(input, c, &file)?;
        }
    }
    if file.rows == 0 {
        return Err(Error::data(input, "(data)", "has no rows"));
    }
    let d = cols.x.len();
    let xnames: Vec<String> = cols.x.iter().map(|f| f.name(&names)).collect();
    let sink = Sink::new(out, d, targets.kind(), o.compress, o.shard, Some(file.rows), xnames)?;
    let mut sink = weighed(sink.with_y_columns(y_names(&targets, &names, &y, true)), o);
    // Each column is read once, however many features it gives: the features' columns, then
    // the targets', then the weights'.
    let (src, at) = cols.sources();
    let ns = src.len();
    let plain = cols.x.iter().all(|f| f.value.is_none()) && at.iter().enumerate().all(|(j, &k)| j == k);
    let mut reader = pq::Chunked::new(&file, src.iter().chain(&y).chain(&w).copied().collect());
    let mut unseen = onehot::Unseen::new(&cols.x);
    let hot_cols: Vec<(usize, usize)> =
        unseen.columns().into_iter().map(|c| (c, src.iter().position(|&s| s == c).expect("a feature's"))).collect();
    let (mut chunk, mut progress) = (Chunk::default(), Progress::new());
    while reader.next(input, CHUNK_ROWS)? {
        let (m, first) = (reader.rows, reader.first_row);
        chunk.clear();
        if !plain {
            let (fill, hot) = (o.fill, (&cols.x[..], &at[..], &hot_cols[..]));
            mixed_rows(&reader, input, &names, fill, hot, (&y, w, ns), &mut targets, &mut chunk, &mut unseen)?;
        } else {
            // Row by row, so the first bad field reported is the first in the file.
            let mut its: Vec<_> = (0..ns + y.len() + w.iter().len()).map(|k| reader.fields(k)).collect();
            for r in 0..m {
                let row = first + r as u64;
                for (k, it) in its.iter_mut().enumerate() {
                    let f = it.next().expect("a field a row");
                    if k < ns {
                        chunk.x.push(pq::feature(f, o.fill, &pq::at(input, row, &names[src[k]]))?);
                    } else if k < ns + y.len() {
                        let at = pq::at(input, row, &names[y[k - ns]]);
                        pq::target(&mut targets, f, &at, &mut chunk.classes, &mut chunk.values)?;
                    } else {
                        chunk.w.push(pq::weight(f, &pq::at(input, row, &names[w.expect("a weight column")]))?);
                    }
                }
            }
        }
        sink.write(&chunk)?;
        progress.rows((first as usize) + m, Some(file.rows));
    }
    for line in unseen.report(&names) {
        log::warn!("{}: {line}", input.display());
    }
    let kind = targets.kind();
    let (classes, remap) = targets.classes();
    let files = sink.finish(&classes, remap.as_deref())?;
    Ok(summary(file.rows, d, kind, classes, files, out, o))
}

/// A Parquet chunk's rows when some features are one-hot or share a column (`from_parquet`'s
/// loop for the other case stays lean: the readers' fields straight into the chunk). `hot`:
/// the features, each one's index among the reader's columns, the one-hot columns with theirs;
/// `tail`: the targets' columns, the weights' column and the features' column count.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn mixed_rows(
    reader: &pq::Chunked,
    input: &Path,
    names: &[String],
    fill: Option<f32>,
    hot: (&[onehot::Feature], &[usize], &[(usize, usize)]),
    tail: (&[usize], Option<usize>, usize),
    targets: &mut text::Targets,
    chunk: &mut Chunk,
    unseen: &mut onehot::Unseen,
) -> Result<()> {
    let ((x, at, hot_cols), (y, w, ns)) = (hot, tail);
    let mut its: Vec<_> = (0..ns + y.len() + w.iter().len()).map(|k| reader.fields(k)).collect();
    let mut fields = Vec::with_capacity(its.len());
    for r in 0..reader.rows {
        let row = reader.first_row + r as u64;
        fields.clear();
        fields.extend(its.iter_mut().map(|it| it.next().expect("a field a row")));
        for (f, &k) in x.iter().zip(at) {
            chunk.x.push(match &f.value {
                None => pq::feature(fields[k], fill, &pq::at(input, row, &names[f.col]))?,
                Some(_) => onehot::hot(f, pq::text_of(fields[k]).as_deref()),
            });
        }
        for &(c, k) in hot_cols {
            unseen.see(c, pq::text_of(fields[k]).as_deref());
        }
        for (t, &i) in y.iter().enumerate() {
            let at = pq::at(input, row, &names[i]);
            pq::target(targets, fields[ns + t], &at, &mut chunk.classes, &mut chunk.values)?;
        }
        if let Some(i) = w {
            chunk.w.push(pq::weight(fields[ns + y.len()], &pq::at(input, row, &names[i]))?);
        }
    }
    Ok(())
}

fn from_text(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    let delim = o.delimiter.unwrap_or_else(|| text::delimiter_of(input));
    let reader = |path: &Path| -> Result<csv::Reader<Box<dyn std::io::Read>>> {
        Ok(csv::ReaderBuilder::new().delimiter(delim).has_headers(!o.no_header).from_reader(text::open_reader(path)?))
    };
    let mut r = reader(input)?;
    let csv_err = |e: csv::Error| {
        let line = e.position().map(|p| p.line()).unwrap_or(0);
        Error::data(input, format!("line {line}"), format!("{e}"))
    };
    let mut first = csv::StringRecord::new();
    let mut sample = Vec::new();
    // Column names: the header, or 0, 1, … (known from the first record).
    let names: Vec<String> = if o.no_header {
        if r.read_record(&mut first).map_err(csv_err)? {
            sample.push(first.clone());
        }
        (0..first.len()).map(|i| i.to_string()).collect()
    } else {
        r.headers().map_err(csv_err)?.iter().map(|h| h.trim().to_string()).collect()
    };
    let mut cols = columns(&names, o, input)?;
    // Sharding needs the row count first, and --one-hot each column's values: one pass that
    // only counts records and collects those values.
    let total = if o.shard > 1 || !cols.one_hot.is_empty() {
        let (mut n, mut sets) = (0usize, vec![std::collections::BTreeSet::new(); cols.one_hot.len()]);
        let mut rr = reader(input)?;
        let mut rec = csv::StringRecord::new();
        while rr.read_record(&mut rec).map_err(csv_err)? {
            n += 1;
            for (set, &c) in sets.iter_mut().zip(&cols.one_hot) {
                if let Some(v) = rec.get(c).and_then(text::field_text) {
                    if !set.contains(v) {
                        set.insert(v.to_string());
                        onehot::check_count(set.len(), input, &names[c])?;
                    }
                }
            }
        }
        let values = sets.into_iter().map(onehot::order);
        cols.x = onehot::expand(std::mem::take(&mut cols.x), &cols.one_hot.iter().copied().zip(values).collect());
        Some(n)
    } else {
        None
    };
    let (y, w) = (cols.y.clone(), cols.w);
    let mut rec = csv::StringRecord::new();
    while sample.len() < 1024 && r.read_record(&mut rec).map_err(csv_err)? {
        sample.push(rec.clone());
    }
    if sample.is_empty() {
        return Err(Error::data(input, "(data)", "has no rows"));
    }
    let mut targets = text::decide(&sample, &y, o.regression, &o.classes);
    given_needs_names(&targets, o, input)?;
    // A file shorter than the sample is read whole already: its row count is known.
    let total = total.or((sample.len() < 1024).then_some(sample.len()));
    let d = cols.x.len();
    let xnames: Vec<String> = if o.no_header { Vec::new() } else { cols.x.iter().map(|f| f.name(&names)).collect() };
    let sink = Sink::new(out, d, targets.kind(), o.compress, o.shard, total, xnames)?;
    let mut sink = weighed(sink.with_y_columns(y_names(&targets, &names, &y, !o.no_header)), o);
    let (mut chunk, mut rows, mut progress) = (Chunk::default(), 0usize, Progress::new());
    let mut unseen = onehot::Unseen::new(&cols.x);
    let hot_cols = unseen.columns();
    let mut add = |rec: &csv::StringRecord, chunk: &mut Chunk, targets: &mut text::Targets| -> Result<()> {
        let line = rec.position().map_or(0, |p| p.line());
        if rec.len() != names.len() {
            return Err(Error::data(
                input,
                format!("line {line}"),
                format!("has {} fields, the header {}", rec.len(), names.len()),
            ));
        }
        for f in &cols.x {
            chunk.x.push(match &f.value {
                None => text::number(
                    &rec[f.col],
                    o.fill,
                    &text::At { path: input, place: text::Place::Line(line), column: &names[f.col] },
                )?,
                Some(_) => onehot::hot(f, text::field_text(&rec[f.col])),
            });
        }
        for &c in &hot_cols {
            unseen.see(c, text::field_text(&rec[c]));
        }
        for &i in &y {
            let at = text::At { path: input, place: text::Place::Line(line), column: &names[i] };
            text::target(targets, &rec[i], &at, &mut chunk.classes, &mut chunk.values)?;
        }
        if let Some(i) = w {
            let at = text::At { path: input, place: text::Place::Line(line), column: &names[i] };
            chunk.w.push(text::weight_field(&rec[i], &at)?);
        }
        Ok(())
    };
    for s in &sample {
        add(s, &mut chunk, &mut targets)?;
    }
    rows += sample.len();
    drop(sample);
    loop {
        let more = r.read_record(&mut rec).map_err(csv_err)?;
        if more {
            add(&rec, &mut chunk, &mut targets)?;
            rows += 1;
        }
        if chunk.rows(d) >= CHUNK_ROWS || (!more && chunk.rows(d) > 0) {
            sink.write(&chunk)?;
            chunk.clear();
            progress.rows(rows, total);
        }
        if !more {
            break;
        }
    }
    for line in unseen.report(&names) {
        log::warn!("{}: {line}", input.display());
    }
    let kind = targets.kind();
    let (classes, remap) = targets.classes();
    let files = sink.finish(&classes, remap.as_deref())?;
    Ok(summary(rows, d, kind, classes, files, out, o))
}

#[cfg(test)]
mod tests {
    use super::{kind_of, Kind};
    use std::path::Path;

    #[test]
    fn files_are_told_apart_by_their_names() {
        let k = |p: &str| kind_of(Path::new(p));
        for t in ["a.csv", "b.TSV", "c.tab", "d.txt", "e.csv.gz", "dir.npy/f.CSV.GZ"] {
            assert_eq!(k(t), Some(Kind::Text), "{t}");
        }
        assert_eq!(k("t.parquet"), Some(Kind::Parquet));
        assert_eq!(k("t.PQ"), Some(Kind::Parquet));
        assert_eq!(k("x.npy"), Some(Kind::Npy));
        assert_eq!(k("x.npz"), Some(Kind::Npz));
        // Only text is read gzipped; anything else is not a table.
        for n in ["t.parquet.gz", "x.npy.gz", "data.h5", "noext", "csv"] {
            assert_eq!(k(n), None, "{n}");
        }
    }
}
