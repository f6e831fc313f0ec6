//! CSV and TSV (optionally gzipped) as a stream of records (the `csv` crate: quoting, CRLF),
//! each field parsed as pandas' `read_csv` would read a number: surrounding blanks ignored,
//! `NA`, `N/A`, `NaN`, `null` and empty fields missing. The target column(s) named by `--y`;
//! one target column of integers is class labels, of other numbers a regression target, of
//! strings class names (`NameMap`): numbered in sorted order once every row is read (as
//! scikit-learn's `LabelEncoder` and a pandas `Categorical` number them; `--class-order
//! appearance`: `pandas.factorize`'s order), or by a list given up front (`--classes`,
//! `--classes-from`), the names kept in the output as `y_classes`.
//!
//! Must not: hold more than one chunk of rows (files larger than memory stream).

use super::sink::YKind;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// Field texts pandas reads as missing (its default `na_values`, the common ones).
const MISSING: &[&str] = &["", "NA", "N/A", "NaN", "nan", "NAN", "null", "NULL", "None", "#N/A", "-nan"];

pub fn open_reader(path: &Path) -> Result<Box<dyn Read>> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let f = std::io::BufReader::with_capacity(1 << 20, f);
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    })
}

/// `--delimiter C` as the byte the CSV reader takes (None: by the file name).
pub fn delimiter_arg(c: Option<char>) -> Result<Option<u8>> {
    match c {
        Some(c) if c.is_ascii() => Ok(Some(c as u8)),
        Some(c) => Err(Error::config("command line", "--delimiter", format!("{c:?} is not one ASCII character"))),
        None => Ok(None),
    }
}

/// The field separator from the file name: tab for `.tsv`/`.tab`, else comma.
pub fn delimiter_of(path: &Path) -> u8 {
    let name = path.to_string_lossy().to_lowercase();
    let name = name.trim_end_matches(".gz");
    if name.ends_with(".tsv") || name.ends_with(".tab") {
        b'\t'
    } else {
        b','
    }
}

/// How the target column(s) turn into `y`.
pub enum Targets {
    /// Integer class labels.
    Ints,
    /// Class names.
    Names(NameMap),
    /// k numbers a row.
    Values(usize),
    /// No target (`--features-only`: rows to predict on).
    None,
}

impl Targets {
    pub fn kind(&self) -> YKind {
        match self {
            Targets::Ints | Targets::Names(..) => YKind::Classes,
            Targets::Values(k) => YKind::Values(*k),
            Targets::None => YKind::None,
        }
    }
    /// The class names in their final numbering, and the table that turns the numbers
    /// already written into it (None: they are final). Empty for numeric targets.
    pub fn classes(self) -> (Vec<String>, Option<Vec<i32>>) {
        match self {
            Targets::Names(m) => m.finish(),
            _ => (Vec::new(), None),
        }
    }
}

/// How class names are numbered (`--class-order`, `--classes`, `--classes-from`).
#[derive(Clone, Debug, PartialEq)]
pub enum ClassOrder {
    /// Sorted (by code point, as Python's `sorted` and `numpy.unique`): files holding the same
    /// names agree whatever their rows' order.
    Sorted,
    /// In order of first appearance (`pandas.factorize`).
    Appearance,
    /// This list, from `source` (the command line, or a file's `y_classes`); a name not in it
    /// is an error.
    Given { names: Vec<String>, source: String },
}

/// Class names seen so far and their numbers.
pub struct NameMap {
    index: HashMap<String, i32>,
    names: Vec<String>,
    order: ClassOrder,
}

impl NameMap {
    pub fn new(order: &ClassOrder) -> NameMap {
        let mut m = NameMap { index: HashMap::new(), names: Vec::new(), order: order.clone() };
        if let ClassOrder::Given { names, .. } = order {
            for n in names {
                m.index.insert(n.clone(), m.names.len() as i32);
                m.names.push(n.clone());
            }
        }
        m
    }

    /// The number of class `s` (a new name gets the next number, unless the list is given).
    pub fn number(&mut self, s: &str, at: &At) -> Result<i32> {
        if let Some(&c) = self.index.get(s) {
            return Ok(c);
        }
        if let ClassOrder::Given { names, source } = &self.order {
            let shown: Vec<String> = names.iter().take(12).map(|n| format!("{n:?}")).collect();
            let more = if names.len() > 12 { format!(", … {} in all", names.len()) } else { String::new() };
            return Err(at.err(format!(
                "class {s:?} is not one of the classes {source} gives ([{}{more}]); add it there, or import \
                 without --classes/--classes-from to number this file's own names",
                shown.join(", ")
            )));
        }
        let c = self.names.len() as i32;
        self.index.insert(s.to_string(), c);
        self.names.push(s.to_string());
        Ok(c)
    }

    /// The names in their final order, and (sorted order) the table from the numbers given as
    /// rows were read to the final ones; None when they are final already.
    pub fn finish(self) -> (Vec<String>, Option<Vec<i32>>) {
        if self.order != ClassOrder::Sorted {
            return (self.names, None);
        }
        let mut sorted = self.names.clone();
        sorted.sort();
        let new: HashMap<&str, i32> = sorted.iter().enumerate().map(|(i, s)| (s.as_str(), i as i32)).collect();
        let table: Vec<i32> = self.names.iter().map(|s| new[s.as_str()]).collect();
        let identity = table.iter().enumerate().all(|(i, &t)| i as i32 == t);
        (sorted, (!identity).then_some(table))
    }
}

/// Decide from the first records (`sample`, their fields at `y`) what the targets are.
pub fn decide(sample: &[csv::StringRecord], y: &[usize], regression: bool, order: &ClassOrder) -> Targets {
    if y.is_empty() {
        return Targets::None;
    }
    if y.len() > 1 || regression {
        return Targets::Values(y.len());
    }
    let vals = || sample.iter().map(|r| r.get(y[0]).unwrap_or("").trim());
    if vals().all(|v| v.parse::<i64>().is_ok()) {
        Targets::Ints
    } else if vals().all(|v| MISSING.contains(&v) || v.parse::<f64>().is_ok()) {
        Targets::Values(1)
    } else {
        Targets::Names(NameMap::new(order))
    }
}

/// Where in its input a field is: a CSV line, or a Parquet row (0-based, pandas' index).
#[derive(Clone, Copy)]
pub enum Place {
    Line(u64),
    Row(u64),
}

/// Where a field came from, for errors: the file, its line or row, the column's name.
pub struct At<'a> {
    pub path: &'a Path,
    pub place: Place,
    pub column: &'a str,
}

impl At<'_> {
    pub fn err(&self, why: impl std::fmt::Display) -> Error {
        let place = match self.place {
            Place::Line(l) => format!("line {l}"),
            Place::Row(r) => format!("row {r}"),
        };
        Error::data(self.path, format!("{place}, column {:?}", self.column), why.to_string())
    }
}

/// A missing feature: `fill` when given, else an error that says how to fill.
pub fn missing(v: &str, fill: Option<f32>, at: &At) -> Result<f32> {
    fill.ok_or_else(|| at.err(format!("missing value {v}; fill such fields with --fill VALUE, or drop the rows")))
}

/// A feature read as a number, checked finite as float32.
pub fn finite(x: f32, at: &At) -> Result<f32> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(at.err(format!("{x} is not a finite number as float32 (training needs finite numbers)")))
    }
}

/// An integer class label, checked in 0..2^31.
pub fn class_label(c: i64, at: &At) -> Result<i32> {
    i32::try_from(c)
        .ok()
        .filter(|&c| c >= 0)
        .ok_or_else(|| at.err(format!("class label {c} is not in 0..2^31 (labels are 0, 1, …, classes − 1)")))
}

/// A missing target, always an error.
pub fn missing_target(v: &str, at: &At) -> Error {
    at.err(format!("missing target {v}; every row needs its target (drop the rows without one)"))
}

/// A sample weight (`--sample-weight`) checked as training checks it: finite and >= 0.
pub fn weight(w: f32, at: &At) -> Result<f32> {
    if w.is_finite() && w >= 0.0 {
        return Ok(w);
    }
    Err(at.err(format!(
        "sample weight {w} is {}: weights must be finite numbers >= 0 (0 leaves the row out of the loss)",
        if w.is_finite() { "negative" } else { "not finite (or too large for float32)" }
    )))
}

/// A missing sample weight, always an error.
pub fn missing_weight(v: &str, at: &At) -> Error {
    at.err(format!("missing sample weight {v}; every row needs its weight (1 for an ordinary row, 0 to leave it out)"))
}

/// A sample-weight field (`--sample-weight`) as float32.
pub fn weight_field(v: &str, at: &At) -> Result<f32> {
    let t = v.trim();
    if MISSING.contains(&t) {
        return Err(missing_weight(&format!("{v:?}"), at));
    }
    let w =
        t.parse::<f32>().map_err(|_| at.err(format!("{v:?} is not a number (a sample weight is a number >= 0)")))?;
    weight(w, at)
}

/// A field's text as a one-hot feature compares it: blanks around it dropped; None when
/// missing (empty, NA, NaN, null, …).
pub fn field_text(v: &str) -> Option<&str> {
    let t = v.trim();
    (!MISSING.contains(&t)).then_some(t)
}

/// A feature field as float32; missing is `fill` when given.
pub fn number(v: &str, fill: Option<f32>, at: &At) -> Result<f32> {
    let t = v.trim();
    if MISSING.contains(&t) {
        return missing(&format!("{v:?}"), fill, at);
    }
    match t.parse::<f32>() {
        Ok(x) => finite(x, at),
        Err(_) => Err(at.err(format!(
            "{v:?} is not a number (a feature must be numeric: name a label column with --y, encode a \
             categorical one with --one-hot {:?}, or leave it out with --drop)",
            at.column
        ))),
    }
}

/// A target field appended to `classes` or `values`.
pub fn target(t: &mut Targets, v: &str, at: &At, classes: &mut Vec<i32>, values: &mut Vec<f32>) -> Result<()> {
    let s = v.trim();
    if MISSING.contains(&s) {
        return Err(missing_target(&format!("{v:?}"), at));
    }
    match t {
        Targets::Ints => {
            let c = s.parse::<i64>().map_err(|_| {
                at.err(format!("{v:?} is not an integer class label like the rows before it (use --regression for numeric targets)"))
            })?;
            classes.push(class_label(c, at)?);
        }
        Targets::Names(m) => classes.push(m.number(s, at)?),
        Targets::Values(_) => values.push(number(v, None, at)?),
        Targets::None => unreachable!("no target column is read without targets"),
    }
    Ok(())
}
