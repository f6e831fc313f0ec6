//! Parquet (as pandas, pyarrow, Polars and Spark write it) read column by column with the
//! `parquet` crate's column readers (no Arrow): each row group in chunks of rows, nulls from the
//! definition levels, the codecs those writers use (snappy, gzip, zstd, lz4, brotli). Flat
//! schemas only; the columns pandas stores its index in (named in the file's `pandas` metadata)
//! are not features, as `pandas.read_parquet` does not make them columns.
//!
//! Features: floats (float16/32/64), integers of any width and sign, booleans (0/1); null or
//! NaN is missing (`--fill`, else an error naming the row); strings, dates, decimals are
//! refused up front naming the column. One target column of integers is class labels, of
//! floats a regression target, of strings class names mapped in order of first appearance.
//!
//! Must not: hold more than one chunk of rows of every column (files larger than memory stream).

use super::text::{self, At, Place, Targets};
use crate::error::{Error, Result};
use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::column::reader::ColumnReader;
use parquet::data_type::ByteArray;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::ColumnDescPtr;
use std::path::Path;

/// What a column holds, as this reader sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Bool,
    /// Integers; `unsigned` reads the stored bits as u32/u64 (UINT_32, UINT_64).
    Int {
        unsigned: bool,
    },
    Float,
    /// IEEE half floats in 2-byte fixed-length arrays.
    Half,
    Text,
}

/// One column: its leaf index in the file, name, kind and max definition level (0: required).
pub struct Column {
    pub index: usize,
    pub name: String,
    pub kind: Kind,
    max_def: i16,
}

/// The open file and its columns (the pandas index ones left out).
pub struct File {
    reader: SerializedFileReader<std::fs::File>,
    pub columns: Vec<Column>,
    pub rows: usize,
}

fn pq_err(path: &Path, what: &str, e: parquet::errors::ParquetError) -> Error {
    Error::data(path, what, format!("cannot read it as Parquet: {e}"))
}

/// Open `path` and describe its columns; a nested or unreadable column is an error naming it.
pub fn open(path: &Path) -> Result<File> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let reader = SerializedFileReader::new(f).map_err(|e| pq_err(path, "(footer)", e))?;
    let meta = reader.metadata().file_metadata();
    let index = pandas_index(meta.key_value_metadata());
    let mut columns = Vec::new();
    for (i, c) in meta.schema_descr().columns().iter().enumerate() {
        let name = c.path().string();
        if index.contains(&name) {
            continue;
        }
        if c.path().parts().len() != 1 || c.max_rep_level() > 0 {
            return Err(Error::data(
                path,
                format!("column {:?}", c.path().parts()[0]),
                "is a nested or list column; flatten it to one number per row (each element its own column)",
            ));
        }
        columns.push(Column { index: i, name, kind: kind_of(c), max_def: c.max_def_level() });
    }
    let rows = usize::try_from(meta.num_rows()).unwrap_or(0);
    Ok(File { reader, columns, rows })
}

/// The columns pandas wrote its index into (`index_columns` of the `pandas` metadata; a
/// RangeIndex is stored there as a description, not a column).
fn pandas_index(kv: Option<&Vec<parquet::file::metadata::KeyValue>>) -> Vec<String> {
    let Some(v) = kv.and_then(|kv| kv.iter().find(|k| k.key == "pandas")).and_then(|k| k.value.as_ref()) else {
        return Vec::new();
    };
    let Ok(j) = serde_json::from_str::<serde_json::Value>(v) else { return Vec::new() };
    j["index_columns"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

fn kind_of(c: &ColumnDescPtr) -> Kind {
    let logical = c.logical_type_ref();
    let refused = matches!(
        logical,
        Some(
            LogicalType::Decimal { .. } | LogicalType::Date | LogicalType::Time { .. } | LogicalType::Timestamp { .. }
        )
    ) || matches!(
        c.converted_type(),
        ConvertedType::DECIMAL
            | ConvertedType::DATE
            | ConvertedType::TIME_MILLIS
            | ConvertedType::TIME_MICROS
            | ConvertedType::TIMESTAMP_MILLIS
            | ConvertedType::TIMESTAMP_MICROS
            | ConvertedType::INTERVAL
    );
    match c.physical_type() {
        _ if refused => Kind::Text,
        Physical::BOOLEAN => Kind::Bool,
        Physical::INT32 | Physical::INT64 => {
            let unsigned = matches!(logical, Some(LogicalType::Integer(t)) if !t.is_signed)
                || matches!(c.converted_type(), ConvertedType::UINT_32 | ConvertedType::UINT_64);
            Kind::Int { unsigned }
        }
        Physical::FLOAT | Physical::DOUBLE => Kind::Float,
        Physical::FIXED_LEN_BYTE_ARRAY if matches!(logical, Some(LogicalType::Float16)) => Kind::Half,
        _ => Kind::Text,
    }
}

/// A feature column must be numbers: an error naming it and its type otherwise.
pub fn check_feature(path: &Path, c: &Column, file: &File) -> Result<()> {
    if c.kind != Kind::Text {
        return Ok(());
    }
    let d = &file.reader.metadata().file_metadata().schema_descr().columns()[c.index];
    let ty = match d.logical_type_ref() {
        Some(LogicalType::String | LogicalType::Enum | LogicalType::Json) => "strings".to_string(),
        Some(LogicalType::Date) => "dates".to_string(),
        Some(LogicalType::Time { .. }) => "times of day".to_string(),
        Some(LogicalType::Timestamp { .. }) => "timestamps".to_string(),
        Some(LogicalType::Decimal { .. }) => "decimals (cast them to float64)".to_string(),
        Some(l) => format!("{l:?}"),
        None if d.converted_type() != ConvertedType::NONE => format!("{}", d.converted_type()),
        None => format!("{} (bytes)", d.physical_type()),
    };
    Err(Error::data(
        path,
        format!("column {:?}", c.name),
        format!(
            "holds {ty}, not numbers: a feature must be numeric (name a label column with --y, encode a \
             categorical one with --one-hot {:?}, or leave it out with --drop)",
            c.name
        ),
    ))
}

/// How the target column(s) turn into `y`, from their types.
pub fn decide(y: &[&Column], regression: bool, order: &text::ClassOrder) -> Targets {
    match y {
        [] => Targets::None,
        [c] if !regression && matches!(c.kind, Kind::Int { .. } | Kind::Bool) => Targets::Ints,
        [c] if !regression && c.kind == Kind::Text => Targets::Names(text::NameMap::new(order)),
        _ => Targets::Values(y.len()),
    }
}

/// One chunk of one column: the non-null values, and each row's definition level.
enum Cells {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bytes(Vec<ByteArray>),
    Fixed(Vec<parquet::data_type::FixedLenByteArray>),
}

/// A chunk of one column and the readers of the current row group.
pub struct Chunked<'a> {
    file: &'a File,
    /// The columns read, in the order the caller gave.
    wanted: Vec<usize>,
    group: usize,
    left_in_group: usize,
    readers: Vec<ColumnReader>,
    cells: Vec<Cells>,
    defs: Vec<Vec<i16>>,
    /// The first row of the chunk last read, in the whole file.
    pub first_row: u64,
    pub rows: usize,
}

/// One field of a chunk.
#[derive(Clone, Copy)]
pub enum Field<'a> {
    Null,
    Int(i64),
    Num(f64),
    Text(&'a [u8]),
}

impl<'a> Chunked<'a> {
    /// Read `wanted` (indices into `file.columns`).
    pub fn new(file: &'a File, wanted: Vec<usize>) -> Chunked<'a> {
        let n = wanted.len();
        Chunked {
            file,
            wanted,
            group: 0,
            left_in_group: 0,
            readers: Vec::new(),
            cells: (0..n).map(|_| Cells::Bool(Vec::new())).collect(),
            defs: vec![Vec::new(); n],
            first_row: 0,
            rows: 0,
        }
    }

    /// Read up to `max` rows (within one row group); false at the end of the file.
    pub fn next(&mut self, path: &Path, max: usize) -> Result<bool> {
        self.first_row += self.rows as u64;
        self.rows = 0;
        let meta = self.file.reader.metadata();
        while self.left_in_group == 0 {
            if self.group == meta.num_row_groups() {
                return Ok(false);
            }
            let g = self.file.reader.get_row_group(self.group).map_err(|e| pq_err(path, "(row group)", e))?;
            self.left_in_group = usize::try_from(g.metadata().num_rows()).unwrap_or(0);
            self.readers.clear();
            for &w in &self.wanted {
                let c = &self.file.columns[w];
                let r = g.get_column_reader(c.index).map_err(|e| pq_err(path, &format!("column {:?}", c.name), e))?;
                self.readers.push(r);
            }
            self.group += 1;
        }
        let m = max.min(self.left_in_group);
        for (k, r) in self.readers.iter_mut().enumerate() {
            let c = &self.file.columns[self.wanted[k]];
            let def = &mut self.defs[k];
            def.clear();
            let got = read(r, m, def, &mut self.cells[k])
                .map_err(|e| pq_err(path, &format!("column {:?}, rows from {}", c.name, self.first_row), e))?;
            if got != m {
                return Err(Error::data(
                    path,
                    format!("column {:?}", c.name),
                    format!(
                        "holds {got} rows from row {} where its row group says {m}: the file is corrupt",
                        self.first_row
                    ),
                ));
            }
        }
        self.left_in_group -= m;
        self.rows = m;
        Ok(true)
    }

    /// Column `k`'s fields in this chunk, in row order.
    pub fn fields(&self, k: usize) -> Fields<'_> {
        let c = &self.file.columns[self.wanted[k]];
        Fields {
            def: &self.defs[k],
            cells: &self.cells[k],
            max_def: c.max_def,
            unsigned: matches!(c.kind, Kind::Int { unsigned: true }),
            row: 0,
            rows: self.rows,
            next: 0,
        }
    }
}

/// One column's fields of a chunk (`Chunked::fields`): a named iterator with an inlined
/// `next`, so the import's row loop stays one function wherever it is called from (as a
/// closure it was outlined once a second caller appeared: Parquet import 1.5× slower).
pub struct Fields<'a> {
    def: &'a [i16],
    cells: &'a Cells,
    max_def: i16,
    unsigned: bool,
    row: usize,
    rows: usize,
    /// The next non-null value.
    next: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Field<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<Field<'a>> {
        if self.row == self.rows {
            return None;
        }
        let r = self.row;
        self.row += 1;
        if self.max_def > 0 && self.def[r] < self.max_def {
            return Some(Field::Null);
        }
        let i = self.next;
        self.next += 1;
        Some(match self.cells {
            Cells::Bool(v) => Field::Int(v[i] as i64),
            Cells::I32(v) if self.unsigned => Field::Int(v[i] as u32 as i64),
            Cells::I32(v) => Field::Int(v[i] as i64),
            // u64 above 2^63 is no class label, and a feature only as a float.
            Cells::I64(v) if self.unsigned && v[i] < 0 => Field::Num(v[i] as u64 as f64),
            Cells::I64(v) => Field::Int(v[i]),
            Cells::F32(v) => Field::Num(v[i] as f64),
            Cells::F64(v) => Field::Num(v[i]),
            Cells::Bytes(v) => Field::Text(v[i].data()),
            Cells::Fixed(v) => {
                let b = v[i].data();
                Field::Num(half::f16::from_le_bytes([b[0], b.get(1).copied().unwrap_or(0)]).to_f64())
            }
        })
    }
}

/// Read `m` records of a column into `out` (its kind's buffer) and `def`.
fn read(r: &mut ColumnReader, m: usize, def: &mut Vec<i16>, out: &mut Cells) -> parquet::errors::Result<usize> {
    macro_rules! go {
        ($r:expr, $variant:ident) => {{
            if !matches!(out, Cells::$variant(_)) {
                *out = Cells::$variant(Vec::new());
            }
            let Cells::$variant(v) = out else { unreachable!() };
            v.clear();
            $r.read_records(m, Some(def), None, v).map(|(records, _, _)| records)
        }};
    }
    match r {
        ColumnReader::BoolColumnReader(r) => go!(r, Bool),
        ColumnReader::Int32ColumnReader(r) => go!(r, I32),
        ColumnReader::Int64ColumnReader(r) => go!(r, I64),
        ColumnReader::FloatColumnReader(r) => go!(r, F32),
        ColumnReader::DoubleColumnReader(r) => go!(r, F64),
        ColumnReader::ByteArrayColumnReader(r) => go!(r, Bytes),
        ColumnReader::FixedLenByteArrayColumnReader(r) => go!(r, Fixed),
        ColumnReader::Int96ColumnReader(_) => {
            Err(parquet::errors::ParquetError::General("INT96 (a legacy timestamp) is not a number".into()))
        }
    }
}

/// A feature field as float32: null or NaN is missing (`fill`, else an error).
pub fn feature(f: Field, fill: Option<f32>, at: &At) -> Result<f32> {
    match f {
        Field::Null => text::missing("(null)", fill, at),
        Field::Num(x) if x.is_nan() => text::missing("NaN", fill, at),
        Field::Num(x) => text::finite(x as f32, at),
        Field::Int(i) => text::finite(i as f32, at),
        Field::Text(_) => unreachable!("string features are refused when the file is opened"),
    }
}

/// A field as the text a one-hot feature compares (`onehot`): integers and floats as Rust
/// prints them (1, 2.5), strings as stored; None for null or NaN.
pub fn text_of(f: Field) -> Option<String> {
    match f {
        Field::Null => None,
        Field::Num(x) if x.is_nan() => None,
        Field::Num(x) => Some(x.to_string()),
        Field::Int(i) => Some(i.to_string()),
        Field::Text(b) => Some(String::from_utf8_lossy(b).into_owned()),
    }
}

/// The distinct values (`text_of`) of each column of `cols` (indices into `file.columns`) over
/// the whole file, in pandas' order (`onehot::order`); more than `onehot::MAX_VALUES` is an error.
pub fn values(file: &File, path: &Path, cols: &[usize]) -> Result<Vec<Vec<String>>> {
    let mut sets = vec![std::collections::BTreeSet::new(); cols.len()];
    let mut r = Chunked::new(file, cols.to_vec());
    while r.next(path, 65536)? {
        for (k, set) in sets.iter_mut().enumerate() {
            set.extend(r.fields(k).filter_map(text_of));
            super::onehot::check_count(set.len(), path, &file.columns[cols[k]].name)?;
        }
    }
    Ok(sets.into_iter().map(super::onehot::order).collect())
}

/// A sample-weight field (`--sample-weight`) as float32: null or NaN is an error.
pub fn weight(f: Field, at: &At) -> Result<f32> {
    match f {
        Field::Null => Err(text::missing_weight("(null)", at)),
        Field::Num(x) if x.is_nan() => Err(text::missing_weight("NaN", at)),
        Field::Num(x) => text::weight(x as f32, at),
        Field::Int(i) => text::weight(i as f32, at),
        Field::Text(_) => unreachable!("string weights are refused when the file is opened"),
    }
}

/// A target field appended to `classes` or `values`.
pub fn target(t: &mut Targets, f: Field, at: &At, classes: &mut Vec<i32>, values: &mut Vec<f32>) -> Result<()> {
    match (t, f) {
        (_, Field::Null) => return Err(text::missing_target("(null)", at)),
        (_, Field::Num(x)) if x.is_nan() => return Err(text::missing_target("NaN", at)),
        (Targets::Ints, Field::Int(c)) => classes.push(text::class_label(c, at)?),
        (Targets::Names(m), Field::Text(b)) => classes.push(m.number(&String::from_utf8_lossy(b), at)?),
        (Targets::Values(_), f) => values.push(feature(f, None, at)?),
        (Targets::None, _) => unreachable!("no target column is read without targets"),
        (_, f) => {
            let v = match f {
                Field::Int(i) => i.to_string(),
                Field::Num(x) => x.to_string(),
                Field::Text(b) => format!("{:?}", String::from_utf8_lossy(b)),
                Field::Null => unreachable!(),
            };
            return Err(Error::data(
                at.path,
                format!("column {:?}", at.column),
                format!("{v} does not fit the column's type"),
            ));
        }
    }
    Ok(())
}

/// Where row `r` of the chunk is, for errors.
pub fn at<'a>(path: &'a Path, row: u64, column: &'a str) -> At<'a> {
    At { path, place: Place::Row(row), column }
}
