//! Class names: what the integer labels of a file mean. `hvtrain data import` writes a file's
//! class names beside its labels (`y_classes` next to `y`: class i is the i-th string, sorted
//! by default, as scikit-learn's `LabelEncoder` and a pandas `Categorical` number them). Two
//! files imported apart may still number the same names differently (an older import, or a
//! file that lacks one of the classes), so training, evaluation and sweeps read every file's
//! names and compare them with the reference's (the first training file, or the weights'
//! `class_names`): the same names in the same order are used as they are, the same names in
//! another order (or a subset) are remapped to the reference's numbers, a name the reference
//! does not have is an error that names both files.
//!
//! Must not: know the model (the label range is `shard`'s) or call MPI.

use crate::error::{Error, Result};
use hdf5::types::{TypeDescriptor, VarLenAscii, VarLenUnicode};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The dataset that holds the names of `y_dataset`'s classes: `y` → `y_classes`,
/// `train/labels` → `train/labels_classes`.
pub fn names_dataset(y_dataset: &str) -> String {
    format!("{}_classes", y_dataset.trim_end_matches('/'))
}

/// The class names stored beside `y_dataset` in `file` (at `path`), or `None` when the file
/// has none (plain integer labels).
pub fn read(file: &hdf5::File, path: &Path, y_dataset: &str) -> Result<Option<Vec<String>>> {
    let name = names_dataset(y_dataset);
    if !file.link_exists(&name) {
        return Ok(None);
    }
    let ds = file.dataset(&name).map_err(|e| Error::hdf5(path, format!("open {name}"), e))?;
    read_strings(&ds, path, &name).map(Some)
}

/// The strings of root attribute `attr` (a weights file's `class_names`), or `None` when the
/// file has no such attribute.
pub fn read_attr(file: &hdf5::File, path: &Path, attr: &str) -> Result<Option<Vec<String>>> {
    let names = file.attr_names().map_err(|e| Error::hdf5(path, "list the attributes", e))?;
    if !names.iter().any(|n| n == attr) {
        return Ok(None);
    }
    let v: Vec<VarLenUnicode> = file
        .attr(attr)
        .and_then(|a| a.read_raw())
        .map_err(|e| Error::hdf5(path, format!("read attribute {attr}"), e))?;
    Ok(Some(v.iter().map(|s| s.as_str().to_owned()).collect()))
}

/// A 1-D dataset of strings (variable-length UTF-8 or ASCII, as `hvtrain data import` and
/// h5py's `string_dtype()` write them) as Rust strings.
pub fn read_strings(ds: &hdf5::Dataset, path: &Path, name: &str) -> Result<Vec<String>> {
    let err = |e| Error::hdf5(path, format!("read {name}"), e);
    let bad = |what: String| {
        Error::data(
            path,
            name,
            format!(
                "{what}; class names must be a 1-D dataset of variable-length strings \
                 (h5py: f.create_dataset({name:?}, data=names, dtype=h5py.string_dtype()))"
            ),
        )
    };
    if ds.ndim() != 1 {
        return Err(bad(format!("has shape {:?}", ds.shape())));
    }
    let v: Vec<String> = match ds.dtype().and_then(|t| t.to_descriptor()).map_err(err)? {
        TypeDescriptor::VarLenUnicode => {
            ds.read_raw::<VarLenUnicode>().map_err(err)?.iter().map(|s| s.as_str().to_owned()).collect()
        }
        TypeDescriptor::VarLenAscii => {
            ds.read_raw::<VarLenAscii>().map_err(err)?.iter().map(|s| s.as_str().to_owned()).collect()
        }
        t => return Err(bad(format!("holds {t}"))),
    };
    let mut seen = HashMap::new();
    for (i, s) in v.iter().enumerate() {
        if let Some(j) = seen.insert(s.as_str(), i) {
            return Err(bad(format!("names {s:?} twice (classes {j} and {i})")));
        }
    }
    Ok(v)
}

/// The class names of `path` (the first file of the training data), the numbering every
/// other file is compared with; `key` names the job field in errors.
pub fn of_file(path: &Path, key: &str, y_dataset: &str) -> Result<Reference> {
    let f = super::h5::open(path, key)?;
    Ok(match read(&f, path, y_dataset)? {
        Some(names) => Reference::Names(path.to_path_buf(), names),
        None => Reference::Numbers(path.to_path_buf()),
    })
}

/// What the class numbers mean, and where that was read.
#[derive(Clone, Debug, PartialEq)]
pub enum Reference {
    /// Nothing to compare with (a weights file without names and no training data at hand).
    Unknown,
    /// The file at this path has plain integer labels: its numbers are the classes.
    Numbers(PathBuf),
    /// Class i is `names[i]`, as the file at this path says.
    Names(PathBuf, Vec<String>),
}

impl Reference {
    /// The names, when the reference has them.
    pub fn names(&self) -> &[String] {
        match self {
            Reference::Names(_, n) => n,
            _ => &[],
        }
    }
}

/// How a file's labels become the reference's class numbers.
#[derive(Clone, Debug, PartialEq)]
pub enum Relation {
    /// Used as stored.
    AsStored,
    /// The file's class c is the reference's class `table[c]`; a label ≥ table.len() has no name.
    Remap(Vec<i32>),
}

/// How the labels of the file at `path` (its names `names`, if it has any) relate to the
/// reference `r`; `key` names the job field in errors. `note` hears a line worth logging (a
/// remap, or a file whose numbers cannot be checked against names).
pub fn relate(
    r: &Reference,
    path: &Path,
    key: &str,
    names: Option<&[String]>,
    note: &mut dyn FnMut(String),
) -> Result<Relation> {
    match (r, names) {
        (Reference::Unknown, _) | (Reference::Numbers(_), None) => Ok(Relation::AsStored),
        (Reference::Numbers(src), Some(n)) => {
            note(format!(
                "{key}: {} names its classes ({}) but {} has plain integer labels, so its labels are taken as the \
                 same class numbers unchecked; import both with names (hvtrain data import --classes-from) to have them checked",
                path.display(),
                preview(n),
                src.display()
            ));
            Ok(Relation::AsStored)
        }
        (Reference::Names(src, _), None) => {
            note(format!(
                "{key}: {} has plain integer labels but {} names its classes, so its labels are taken as the same \
                 class numbers unchecked",
                path.display(),
                src.display()
            ));
            Ok(Relation::AsStored)
        }
        (Reference::Names(src, want), Some(have)) => {
            if want.as_slice() == have {
                return Ok(Relation::AsStored);
            }
            let index: HashMap<&str, i32> = want.iter().enumerate().map(|(i, s)| (s.as_str(), i as i32)).collect();
            let unknown: Vec<&String> = have.iter().filter(|s| !index.contains_key(s.as_str())).collect();
            if !unknown.is_empty() {
                return Err(Error::data(
                    path,
                    key,
                    format!(
                        "has class name(s) {} that {} (the classes the model learns: {}) does not have; \
                         the same classes must be named the same in every file (re-import it with \
                         hvtrain data import ... --classes-from {})",
                        preview(&unknown.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
                        src.display(),
                        preview(want),
                        src.display()
                    ),
                ));
            }
            let table: Vec<i32> = have.iter().map(|s| index[s.as_str()]).collect();
            let moved: Vec<String> = have
                .iter()
                .zip(&table)
                .enumerate()
                .filter(|(c, (_, &t))| *c as i32 != t)
                .take(4)
                .map(|(c, (s, t))| format!("{s:?} {c}→{t}"))
                .collect();
            note(format!(
                "{key}: {} numbers its classes differently from {}; its labels are remapped to {}'s numbers ({}{})",
                path.display(),
                src.display(),
                src.display(),
                moved.join(", "),
                if table.iter().enumerate().filter(|(c, &t)| *c as i32 != t).count() > 4 { ", …" } else { "" }
            ));
            Ok(Relation::Remap(table))
        }
    }
}

/// At most 12 names, quoted, for a message.
fn preview(names: &[String]) -> String {
    let mut s: Vec<String> = names.iter().take(12).map(|n| format!("{n:?}")).collect();
    if names.len() > 12 {
        s.push(format!("… {} in all", names.len()));
    }
    format!("[{}]", s.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn reference(v: &[&str]) -> Reference {
        Reference::Names(PathBuf::from("train.h5"), names(v))
    }

    #[test]
    fn the_same_names_are_used_as_stored_and_another_order_is_remapped() {
        let r = reference(&["eight", "five", "four", "nine"]);
        let mut notes = Vec::new();
        let same = names(&["eight", "five", "four", "nine"]);
        assert_eq!(
            relate(&r, Path::new("t.h5"), "data.test", Some(&same), &mut |n| notes.push(n)).unwrap(),
            Relation::AsStored
        );
        assert!(notes.is_empty());
        // First appearance order (an older import): nine, four, eight, five.
        let other = names(&["nine", "four", "eight", "five"]);
        let rel = relate(&r, Path::new("t.h5"), "data.test", Some(&other), &mut |n| notes.push(n)).unwrap();
        assert_eq!(rel, Relation::Remap(vec![3, 2, 0, 1]));
        assert!(notes[0].contains("t.h5 numbers its classes differently from train.h5"), "{}", notes[0]);
        assert!(notes[0].contains("\"nine\" 0→3"), "{}", notes[0]);
        // A subset (the test file lacks a class), numbered in its own sorted order.
        let sub = names(&["five", "nine"]);
        let rel = relate(&r, Path::new("t.h5"), "data.test", Some(&sub), &mut |_| {}).unwrap();
        assert_eq!(rel, Relation::Remap(vec![1, 3]));
    }

    #[test]
    fn a_name_the_reference_lacks_is_an_error_naming_both_files() {
        let r = reference(&["cat", "dog"]);
        let e = relate(&r, Path::new("val.h5"), "data.validation", Some(&names(&["cat", "cow"])), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("val.h5") && e.contains("train.h5") && e.contains("\"cow\""), "{e}");
        assert!(e.contains("--classes-from train.h5"), "{e}");
    }

    #[test]
    fn plain_numbers_on_either_side_are_used_as_stored_with_a_note() {
        let mut notes = Vec::new();
        let r = Reference::Numbers(PathBuf::from("train.h5"));
        let rel =
            relate(&r, Path::new("t.h5"), "data.test", Some(&names(&["a", "b"])), &mut |n| notes.push(n)).unwrap();
        assert_eq!(rel, Relation::AsStored);
        let rel =
            relate(&reference(&["a", "b"]), Path::new("t.h5"), "data.test", None, &mut |n| notes.push(n)).unwrap();
        assert_eq!(rel, Relation::AsStored);
        assert_eq!(notes.len(), 2);
        assert!(relate(&Reference::Unknown, Path::new("t.h5"), "k", Some(&names(&["a"])), &mut |_| panic!()).is_ok());
    }
}
