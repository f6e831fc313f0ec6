//! Which column of a table is what: the targets (`--y`), the sample weights
//! (`--sample-weight`), the features (every other column but `--drop`'s, `--one-hot` ones
//! marked for expansion; or exactly the `--columns-from` / `predict` names, `COLUMN=VALUE`
//! ones one-hot), the targets' names (`y_columns`), and the lists the command line gives
//! (`--classes`, `--classes-from`, `--columns-from`).
//!
//! Must not: read rows (the readers do).

use super::{onehot, text, ClassOrder, Opts};
use crate::error::{Error, Result};
use std::path::Path;

/// The columns of a table's `names`: the targets `--y` names (header names or 0-based
/// indices), the sample weights' `--sample-weight` names, and the features (every other one
/// but `--drop`'s; with `select`, those it names, in its order, and no other). The columns
/// `--one-hot` names are features of `value` None in `x` until their values are known
/// (`onehot::expand`); `select`'s `COLUMN=VALUE` names are one-hot features already.
pub(super) struct Columns {
    pub y: Vec<usize>,
    pub w: Option<usize>,
    pub x: Vec<onehot::Feature>,
    /// The `--one-hot` columns, whose values a first pass finds.
    pub one_hot: Vec<usize>,
}

impl Columns {
    /// The distinct columns the features read (each once, in order of first use), and for
    /// each feature the index of its column among them.
    pub(super) fn sources(&self) -> (Vec<usize>, Vec<usize>) {
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

pub(super) fn columns(names: &[String], o: &Opts, input: &Path) -> Result<Columns> {
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
pub(super) fn y_names(targets: &text::Targets, names: &[String], y: &[usize], named: bool) -> Vec<String> {
    match targets {
        text::Targets::Values(_) if named => y.iter().map(|&i| names[i].clone()).collect(),
        _ => Vec::new(),
    }
}

/// `--classes`/`--classes-from` number class names: refused when the targets are not names.
pub(super) fn given_needs_names(t: &text::Targets, o: &Opts, input: &Path) -> Result<()> {
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
