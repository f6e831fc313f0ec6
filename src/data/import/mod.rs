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
//! - `sink`: the chunked (optionally compressed) HDF5 output over one or N files;
//! - `onehot`: categorical columns as one-hot features;
//! - `keep`: columns read as text, as they stand (`predict --keep`).
//!
//! Must not: be used by training; it writes files a job then reads.

pub mod keep;
mod npy;
mod onehot;
mod pq;
pub mod sink;
mod text;

use crate::error::{Error, Result};
use log::info;
use sink::{Chunk, Compress, Sink, YKind};
use std::path::{Path, PathBuf};
use std::time::Instant;
pub use text::ClassOrder;

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

pub fn import(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    if o.shard == 0 {
        return Err(Error::config("command line", "--shard", "must be at least 1"));
    }
    let name = input.to_string_lossy().to_lowercase();
    let base = name.trim_end_matches(".gz");
    let t = Instant::now();
    let numpy = (base.ends_with(".npy") || base.ends_with(".npz")) && !name.ends_with(".gz");
    if numpy && !o.one_hot.is_empty() {
        return Err(Error::config(
            "command line",
            "--one-hot",
            "is for CSV/TSV and Parquet columns; a NumPy array holds numbers already (encode it with NumPy)",
        ));
    }
    let s = if base.ends_with(".npy") && !name.ends_with(".gz") {
        from_npy(input, out, o)?
    } else if base.ends_with(".npz") && !name.ends_with(".gz") {
        from_npz(input, out, o)?
    } else if (base.ends_with(".parquet") || base.ends_with(".pq")) && !name.ends_with(".gz") {
        from_parquet(input, out, o)?
    } else {
        from_text(input, out, o)?
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

/// The columns of a table's `names`: the targets `--y` names (header names or 0-based
/// indices), the sample weights' `--sample-weight` names, and the features (every other one
/// but `--drop`'s; with `select`, those it names, in its order, and no other). The columns
/// `--one-hot` names are features of `value` None in `x` until their values are known
/// (`onehot::expand`); `select`'s `COLUMN=VALUE` names are one-hot features already.
struct Columns {
    y: Vec<usize>,
    w: Option<usize>,
    x: Vec<onehot::Feature>,
    /// The `--one-hot` columns, whose values a first pass finds.
    one_hot: Vec<usize>,
}

impl Columns {
    /// The distinct columns the features read (each once, in order of first use), and for
    /// each feature the index of its column among them.
    fn sources(&self) -> (Vec<usize>, Vec<usize>) {
        let mut src: Vec<usize> = Vec::new();
        for f in &self.x {
            if !src.contains(&f.col) {
                src.push(f.col);
            }
        }
        let at = self.x.iter().map(|f| src.iter().position(|&c| c == f.col).expect("listed above")).collect();
        (src, at)
    }
}

/// Column `c` (a name, else a 0-based index) of `names`, for option `flag`.
fn column(names: &[String], c: &str, flag: &str, input: &Path) -> Result<usize> {
    let i = names.iter().position(|n| n == c).or_else(|| c.parse::<usize>().ok().filter(|&i| i < names.len()));
    i.ok_or_else(|| {
        Error::config(
            "command line",
            flag,
            format!("no column {c:?} in {}; the columns are {names:?}", input.display()),
        )
    })
}

fn columns(names: &[String], o: &Opts, input: &Path) -> Result<Columns> {
    if o.y.is_empty() && !o.features_only {
        return Err(Error::config(
            "command line",
            "--y",
            format!(
                "name the target column(s) with --y COLUMN (a name or a 0-based index), or import rows to predict \
                 on with --features-only; the columns are {names:?}"
            ),
        ));
    }
    let y = o.y.iter().map(|c| column(names, c, "--y", input)).collect::<Result<Vec<usize>>>()?;
    let w = o.sample_weight.as_deref().map(|c| column(names, c, "--sample-weight", input)).transpose()?;
    if let Some(i) = w.filter(|i| y.contains(i)) {
        return Err(Error::config(
            "command line",
            "--sample-weight",
            format!("names column {:?}, which --y names as a target; the weights need a column of their own", names[i]),
        ));
    }
    if let Some(select) = &o.select {
        let find = |c: &String| match names.iter().position(|n| n == c) {
            Some(i) => Some(onehot::Feature::number(i)),
            None => onehot::parse(c, names),
        };
        let missing: Vec<&String> = select.iter().filter(|c| find(c).is_none()).collect();
        if !missing.is_empty() {
            return Err(Error::data(
                input,
                "(columns)",
                format!(
                    "has no column {} of the {} features wanted ({select:?}, in that order{}); the file's columns \
                     are {names:?}",
                    missing.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", "),
                    select.len(),
                    o.select_from.as_deref().map(|f| format!(", from {f}")).unwrap_or_default()
                ),
            ));
        }
        let x: Vec<onehot::Feature> = select.iter().map(|c| find(c).expect("checked above")).collect();
        if let Some(i) = x.iter().map(|f| f.col).find(|i| y.contains(i) || w == Some(*i)) {
            return Err(Error::config(
                "command line",
                "--y",
                format!("names column {:?}, which is one of the features wanted ({select:?})", names[i]),
            ));
        }
        return Ok(Columns { y, w, x, one_hot: Vec::new() });
    }
    let drop = o.drop.iter().map(|c| column(names, c, "--drop", input)).collect::<Result<Vec<usize>>>()?;
    if let Some(&i) = drop.iter().find(|&&i| y.contains(&i) || w == Some(i)) {
        return Err(Error::config(
            "command line",
            "--drop",
            format!("names column {:?}, which --y or --sample-weight uses; drop it from one of them", names[i]),
        ));
    }
    let x: Vec<usize> = (0..names.len()).filter(|i| !y.contains(i) && w != Some(*i) && !drop.contains(i)).collect();
    if x.is_empty() {
        let flag = if drop.is_empty() { "--y" } else { "--drop" };
        return Err(Error::config("command line", flag, "leaves no feature column"));
    }
    let one_hot = o.one_hot.iter().map(|c| column(names, c, "--one-hot", input)).collect::<Result<Vec<usize>>>()?;
    if let Some(&i) = one_hot.iter().find(|i| !x.contains(i)) {
        return Err(Error::config(
            "command line",
            "--one-hot",
            format!(
                "names column {:?}, which --y, --sample-weight or --drop takes; a one-hot column is a feature",
                names[i]
            ),
        ));
    }
    Ok(Columns { y, w, x: x.into_iter().map(onehot::Feature::number).collect(), one_hot })
}

/// The targets' column names (`y_columns`) for numeric targets of named columns.
fn y_names(targets: &text::Targets, names: &[String], y: &[usize], named: bool) -> Vec<String> {
    match targets {
        text::Targets::Values(_) if named => y.iter().map(|&i| names[i].clone()).collect(),
        _ => Vec::new(),
    }
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

/// `--classes`/`--classes-from` number class names: refused when the targets are not names.
fn given_needs_names(t: &text::Targets, o: &Opts, input: &Path) -> Result<()> {
    match (&o.classes, t) {
        (ClassOrder::Given { source, .. }, text::Targets::Ints | text::Targets::Values(_)) => Err(Error::config(
            "command line",
            source.as_str(),
            format!(
                "numbers class names, but the target column(s) of {} hold numbers, not names; leave it out",
                input.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// The classes `--classes-from FILE` gives: FILE's `y_classes` (an imported file), or its
/// `class_names` attribute (a weights file); an error when it has neither.
pub fn classes_from(path: &Path) -> Result<ClassOrder> {
    let f = crate::data::h5::open(path, "--classes-from")?;
    let names = match crate::data::classes::read(&f, path, "y")? {
        Some(n) => n,
        None => crate::data::classes::read_attr(&f, path, "class_names")?.ok_or_else(|| {
            Error::data(
                path,
                "y_classes",
                "has no class names (y_classes, or a weights file's class_names): its labels are plain \
                 integers; give the names with --classes a,b,c instead",
            )
        })?,
    };
    Ok(ClassOrder::Given { names, source: format!("--classes-from {}", path.display()) })
}

/// The features `--columns-from FILE` gives: FILE's `x_columns` (an imported file), or its
/// `x_columns` attribute (a weights file); an error when it has neither.
pub fn columns_from(path: &Path) -> Result<Vec<String>> {
    let f = crate::data::h5::open(path, "--columns-from")?;
    let mut names = crate::data::columns::read(&f, path, "x")?;
    if names.is_empty() {
        names = crate::data::classes::read_attr(&f, path, "x_columns")?.unwrap_or_default();
    }
    if names.is_empty() {
        return Err(Error::data(
            path,
            "x_columns",
            "has no column names (x_columns, or a weights file's x_columns): its features are known by position \
             only; import without --columns-from, with the columns in the same order",
        ));
    }
    Ok(names)
}

/// The classes `--classes a,b,c` gives (blanks around names dropped; each name once).
pub fn classes_list(list: &str) -> Result<ClassOrder> {
    let names: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(Error::config("command line", "--classes", format!("{list:?} has an empty name")));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(d) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(Error::config("command line", "--classes", format!("names {d:?} twice")));
    }
    Ok(ClassOrder::Given { names, source: "--classes".into() })
}

/// Stream `x`, `y` (none with `--features-only`) and sample weights `w` arrays of the same
/// row count into the sink.
fn stream<A: std::io::Read, B: std::io::Read, C: std::io::Read>(
    mut x: npy::Npy<A>,
    mut y: Option<npy::Npy<B>>,
    mut w: Option<npy::Npy<C>>,
    out: &Path,
    o: &Opts,
) -> Result<Summary> {
    let (n, d) = (x.rows(), x.width());
    if let Some(y) = y.as_ref().filter(|y| y.rows() != n) {
        return Err(Error::data(Path::new(&y.name), "(shape)", format!("{} rows, {} has {n}", y.rows(), x.name)));
    }
    if let Some(w) = &w {
        if w.rows() != n || w.width() != 1 {
            return Err(Error::data(
                Path::new(&w.name),
                "(shape)",
                format!(
                    "sample weights must be an array [N] or [N, 1] with one weight per row of {} ({n} rows), found \
                     shape {:?}",
                    x.name, w.shape
                ),
            ));
        }
    }
    if n == 0 {
        return Err(Error::data(Path::new(&x.name), "(shape)", "has no rows"));
    }
    let classes = y.as_ref().is_some_and(|y| y.dtype.is_int() && y.shape.len() == 1 && !o.regression);
    if let (ClassOrder::Given { source, .. }, Some(y)) = (&o.classes, &y) {
        return Err(Error::config(
            "command line",
            source.as_str(),
            format!(
                "numbers class names, but {} holds numbers; it is for CSV/TSV or Parquet labels that are strings",
                y.name
            ),
        ));
    }
    let kind = match &y {
        None => YKind::None,
        Some(_) if classes => YKind::Classes,
        Some(y) => YKind::Values(y.width()),
    };
    let mut sink = Sink::new(out, d, kind, o.compress, o.shard, Some(n), Vec::new())?;
    if w.is_some() {
        sink = sink.with_weights();
    }
    let (mut chunk, mut at, mut progress) = (Chunk::default(), 0, Progress::new());
    while at < n {
        let m = CHUNK_ROWS.min(n - at);
        chunk.clear();
        x.read_f32(m, at, &mut chunk.x)?;
        match &mut y {
            Some(y) if classes => y.read_classes(m, at, &mut chunk.classes)?,
            Some(y) => y.read_f32(m, at, &mut chunk.values)?,
            None => {}
        }
        if let Some(w) = &mut w {
            w.read_f32(m, at, &mut chunk.w)?;
            if let Some(i) = chunk.w.iter().position(|&v| v < 0.0) {
                return Err(Error::data(
                    Path::new(&w.name),
                    "(data)",
                    format!(
                        "row {}: sample weight {} is negative: weights must be finite numbers >= 0",
                        at + i,
                        chunk.w[i]
                    ),
                ));
            }
        }
        sink.write(&chunk)?;
        at += m;
        progress.rows(at, Some(n));
    }
    let files = sink.finish(&[], None)?;
    Ok(summary(n, d, kind, Vec::new(), files, out, o))
}

fn from_npy(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    let yf = match (&o.y_file, o.features_only) {
        (Some(f), false) => Some(f),
        (None, true) => None,
        (Some(_), true) => {
            return Err(Error::config("command line", "--y-file", "gives targets, which --features-only leaves out"))
        }
        (None, false) => {
            return Err(Error::config(
                "command line",
                "--y-file",
                "a .npy of features needs its targets: --y-file Y.npy (or import a .npz with x and y; rows to \
                 predict on: --features-only)",
            ))
        }
    };
    let open = |p: &Path| -> Result<npy::Npy<std::io::BufReader<std::fs::File>>> {
        let f = std::fs::File::open(p).map_err(|e| Error::io(p, "open", e))?;
        npy::Npy::open(std::io::BufReader::with_capacity(1 << 20, f), &p.display().to_string())
    };
    let w = o.sample_weight.as_deref().map(|p| open(Path::new(p))).transpose()?;
    let y = yf.map(|f| open(f)).transpose()?;
    stream(open(input)?, y, w, out, o)
}

fn from_npz(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    let archive = || -> Result<zip::ZipArchive<std::fs::File>> {
        let f = std::fs::File::open(input).map_err(|e| Error::io(input, "open", e))?;
        zip::ZipArchive::new(f)
            .map_err(|e| Error::data(input, "(zip)", format!("not a readable .npz (zip) archive: {e}")))
    };
    let (mut ax, mut ay, mut aw) = (archive()?, archive()?, archive()?);
    let member = |a: &mut zip::ZipArchive<std::fs::File>, name: &str| -> Result<()> {
        a.index_for_name(&format!("{name}.npy")).map(|_| ()).ok_or_else(|| {
            let have: Vec<String> =
                a.file_names().filter_map(|s| s.ok()).map(|s| s.trim_end_matches(".npy").to_string()).collect();
            Error::data(
                input,
                name,
                format!(
                    "the archive has no array {name:?} (it has {have:?}); save it as np.savez(path, x=..., y=...{})",
                    if name == "x" || name == "y" { String::new() } else { format!(", {name}=...") }
                ),
            )
        })
    };
    member(&mut ax, "x")?;
    if !o.features_only {
        member(&mut ay, "y")?;
    }
    if let Some(name) = &o.sample_weight {
        member(&mut aw, name)?;
    }
    let xr = ax.by_name("x.npy").map_err(|e| Error::data(input, "x", e.to_string()))?;
    let yr = if o.features_only {
        None
    } else {
        Some(ay.by_name("y.npy").map_err(|e| Error::data(input, "y", e.to_string()))?)
    };
    let (xn, yn) = (format!("{}:x", input.display()), format!("{}:y", input.display()));
    let w = match &o.sample_weight {
        Some(name) => {
            let r = aw.by_name(&format!("{name}.npy")).map_err(|e| Error::data(input, name, e.to_string()))?;
            Some(npy::Npy::open(r, &format!("{}:{name}", input.display()))?)
        }
        None => None,
    };
    let y = yr.map(|r| npy::Npy::open(r, &yn)).transpose()?;
    // Bound first: the readers borrow the archives, which a tail expression's temporaries
    // would outlive.
    #[allow(clippy::let_and_return)]
    let s = stream(npy::Npy::open(xr, &xn)?, y, w, out, o);
    s
}
