//! Column names: which quantity each feature (and each numeric target) is. `hvtrain data
//! import` writes them beside the data (`x_columns` next to `x`, `y_columns` next to a
//! numeric `y`, from the CSV header or the Parquet schema). The model takes its inputs by
//! position, so a file whose columns are the same in number but in another order trains or
//! predicts on the wrong quantities without a word; with names that is caught: training
//! refuses training, validation and test files whose names differ (naming both files and the
//! first column that differs), keeps the training data's names in weights.h5, and `predict`
//! matches its input's columns to them by name (reordered, extra columns left out, a missing
//! one an error). Files without names are taken by position, as before.
//!
//! Must not: know the model or call MPI.

use crate::error::{Error, Result};
use hdf5::types::{TypeDescriptor, VarLenAscii, VarLenUnicode};
use std::path::{Path, PathBuf};

/// The dataset that names `dataset`'s columns: `x` → `x_columns`.
pub fn names_dataset(dataset: &str) -> String {
    format!("{}_columns", dataset.trim_end_matches('/'))
}

/// The names of `dataset`'s columns in `file` (at `path`); empty when the file has none.
pub fn read(file: &hdf5::File, path: &Path, dataset: &str) -> Result<Vec<String>> {
    let name = names_dataset(dataset);
    if !file.link_exists(&name) {
        return Ok(Vec::new());
    }
    let err = |e| Error::hdf5(path, format!("read {name}"), e);
    let ds = file.dataset(&name).map_err(err)?;
    let bad = |what: String| {
        Error::data(
            path,
            &name,
            format!(
                "{what}; column names must be a 1-D dataset of variable-length strings, one a column \
                 (h5py: f.create_dataset({name:?}, data=names, dtype=h5py.string_dtype()))"
            ),
        )
    };
    if ds.ndim() != 1 {
        return Err(bad(format!("has shape {:?}", ds.shape())));
    }
    match ds.dtype().and_then(|t| t.to_descriptor()).map_err(err)? {
        TypeDescriptor::VarLenUnicode => {
            Ok(ds.read_raw::<VarLenUnicode>().map_err(err)?.iter().map(|s| s.as_str().to_owned()).collect())
        }
        TypeDescriptor::VarLenAscii => {
            Ok(ds.read_raw::<VarLenAscii>().map_err(err)?.iter().map(|s| s.as_str().to_owned()).collect())
        }
        t => Err(bad(format!("holds {t}"))),
    }
}

/// The column names of a dataset's files, and the file they were first read from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    /// The features' names (`x_columns`); empty when no file has them.
    pub x: Vec<String>,
    /// The numeric targets' names (`y_columns`); empty when no file has them.
    pub y: Vec<String>,
    /// Where `x` (else `y`) was read.
    pub from: Option<PathBuf>,
}

impl Columns {
    /// The names of `file`'s `x_dataset` and `y_dataset` columns.
    pub fn of(file: &hdf5::File, path: &Path, x_dataset: &str, y_dataset: &str) -> Result<Columns> {
        let (x, y) = (read(file, path, x_dataset)?, read(file, path, y_dataset)?);
        let from = (!x.is_empty() || !y.is_empty()).then(|| path.to_path_buf());
        Ok(Columns { x, y, from })
    }

    /// Take in `other`'s names (`other.from`, read for job field `key`): where both have a
    /// list they must be the same, else an error naming both files and the first column that
    /// differs; a list only `other` has is kept.
    pub fn agree(&mut self, other: &Columns, key: &str) -> Result<()> {
        let (Some(here), Some(there)) = (&other.from, &self.from) else {
            if self.from.is_none() {
                *self = other.clone();
            }
            return Ok(());
        };
        for (mine, theirs, what) in [(&self.x, &other.x, "x_columns"), (&self.y, &other.y, "y_columns")] {
            if mine.is_empty() || theirs.is_empty() || mine == theirs {
                continue;
            }
            let first = (0..mine.len().max(theirs.len())).find(|&i| mine.get(i) != theirs.get(i)).unwrap_or(0);
            let at = |v: &[String]| v.get(first).map_or("no column".to_string(), |s| format!("{s:?}"));
            let (role, fix) = if what == "x_columns" {
                (
                    "The model takes its inputs by position",
                    format!(
                        "import this one with `hvtrain data import … --columns-from {}` (that file's columns, by name, \
                         in its order)",
                        there.display()
                    ),
                )
            } else {
                ("The model's outputs are the targets by position", "import this one with --y in the same order".into())
            };
            return Err(Error::data(
                here,
                what,
                format!(
                    "({key}) names its columns differently from {}: column {first} is {} here and {} there \
                     ({theirs:?} against {mine:?}). {role}, so every file (training, validation, test) must hold the \
                     same columns in the same order: {fix}",
                    there.display(),
                    at(theirs),
                    at(mine),
                ),
            ));
        }
        if self.x.is_empty() {
            self.x = other.x.clone();
        }
        if self.y.is_empty() {
            self.y = other.y.clone();
        }
        Ok(())
    }
}

/// How an input's columns (`input`, its names) give the model's features (`model`, the
/// training data's names).
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// By position: the same names in the same order, or a side without names.
    AsStored,
    /// Feature j is the input's column `pick[j]` (matched by name).
    Pick(Vec<usize>),
}

/// Match `input`'s column names to the model's (`model`): by position where either has none
/// or they are the same, else by name; Err with the model's columns `input` lacks.
pub fn layout(model: &[String], input: &[String]) -> std::result::Result<Layout, Vec<String>> {
    if model.is_empty() || input.is_empty() || model == input {
        return Ok(Layout::AsStored);
    }
    let missing: Vec<String> = model.iter().filter(|m| !input.contains(m)).cloned().collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    Ok(Layout::Pick(model.iter().map(|m| input.iter().position(|i| i == m).expect("checked above")).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn cols(x: &[&str], path: &str) -> Columns {
        Columns { x: names(x), y: Vec::new(), from: (!x.is_empty()).then(|| PathBuf::from(path)) }
    }

    #[test]
    fn layout_matches_by_name_and_names_what_is_missing() {
        let m = names(&["a", "b", "c"]);
        assert_eq!(layout(&m, &m), Ok(Layout::AsStored));
        assert_eq!(layout(&m, &[]), Ok(Layout::AsStored));
        assert_eq!(layout(&[], &m), Ok(Layout::AsStored));
        assert_eq!(layout(&m, &names(&["c", "id", "a", "b"])), Ok(Layout::Pick(vec![2, 3, 0])));
        assert_eq!(layout(&m, &names(&["c", "a"])), Err(names(&["b"])));
    }

    #[test]
    fn files_must_name_their_columns_alike() {
        let mut r = cols(&[], "");
        r.agree(&cols(&["a", "b"], "train-0.h5"), "data.train").unwrap();
        assert_eq!(r.x, names(&["a", "b"]));
        r.agree(&cols(&["a", "b"], "train-1.h5"), "data.train").unwrap();
        r.agree(&cols(&[], "unnamed.h5"), "data.train").unwrap();
        let e = r.agree(&cols(&["b", "a"], "test.h5"), "data.test").unwrap_err().to_string();
        assert!(e.contains("test.h5") && e.contains("train-0.h5") && e.contains("column 0 is \"b\" here"), "{e}");
        assert!(e.contains("data.test"), "{e}");
    }
}
