//! Categorical columns as one-hot features (`--one-hot COLUMN`, pandas' `get_dummies`,
//! scikit-learn's `OneHotEncoder`): a column of k distinct values becomes k features named
//! `COLUMN=VALUE`, 1 where the row holds that value and 0 elsewhere, in place of the column.
//! The values are found in a first pass over the column, and ordered as pandas orders them
//! (numerically when every value is a number, else as text). The names carry the encoding:
//! a file imported with `--columns-from` (or `predict`'s input, given the weights' names)
//! encodes a name `COLUMN=VALUE` it does not hold as a column from its column COLUMN, so
//! training, test and new rows agree; a value the names lack (one training never saw) or a
//! missing field gives all zeros, counted and logged (`handle_unknown="ignore"`).
//!
//! Must not: read files (the readers give it the fields' text).

use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// At most this many values a one-hot column.
pub const MAX_VALUES: usize = 1000;

/// A one-hot column of `n` values so far: an error past `MAX_VALUES`.
pub fn check_count(n: usize, path: &Path, column: &str) -> Result<()> {
    if n <= MAX_VALUES {
        return Ok(());
    }
    Err(Error::data(
        path,
        format!("column {column:?}"),
        format!(
            "holds more than {MAX_VALUES} distinct values: too many for --one-hot (a feature each); map them to \
             fewer groups, or to numbers, before importing"
        ),
    ))
}

/// One feature: column `col` as a number (`value` None), or 1 where column `col` holds
/// `value` (a one-hot feature).
#[derive(Clone, Debug, PartialEq)]
pub struct Feature {
    pub col: usize,
    pub value: Option<String>,
}

impl Feature {
    pub fn number(col: usize) -> Feature {
        Feature { col, value: None }
    }
    /// The feature's name (`x_columns`): the column's, or `COLUMN=VALUE`.
    pub fn name(&self, names: &[String]) -> String {
        match &self.value {
            None => names[self.col].clone(),
            Some(v) => format!("{}={v}", names[self.col]),
        }
    }
}

/// A wanted feature name that is no column of `names`: `COLUMN=VALUE` of the longest column
/// name that fits, as a one-hot feature; None when no column does.
pub fn parse(wanted: &str, names: &[String]) -> Option<Feature> {
    wanted
        .match_indices('=')
        .filter_map(|(i, _)| names.iter().position(|n| n == &wanted[..i]).map(|c| (i, c)))
        .max_by_key(|&(i, _)| i)
        .map(|(i, col)| Feature { col, value: Some(wanted[i + 1..].to_string()) })
}

/// The values of a one-hot column in pandas' order: by number when all are numbers, else by text.
pub fn order(values: BTreeSet<String>) -> Vec<String> {
    let mut v: Vec<String> = values.into_iter().collect();
    let nums: Option<Vec<f64>> = v.iter().map(|s| s.parse::<f64>().ok()).collect();
    if let Some(nums) = nums {
        let mut pairs: Vec<(f64, String)> = nums.into_iter().zip(v).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        v = pairs.into_iter().map(|p| p.1).collect();
    }
    v
}

/// `features` with each feature of a column in `onehot` replaced by one per value of
/// `values[col]` (in that order), where it stood.
pub fn expand(features: Vec<Feature>, values: &BTreeMap<usize, Vec<String>>) -> Vec<Feature> {
    features
        .into_iter()
        .flat_map(|f| match values.get(&f.col).filter(|_| f.value.is_none()) {
            Some(vals) => vals.iter().map(|v| Feature { col: f.col, value: Some(v.clone()) }).collect(),
            None => vec![f],
        })
        .collect()
}

/// Rows whose one-hot column held a value none of its features names (or nothing): their
/// features of that column are all 0.
#[derive(Default)]
pub struct Unseen {
    /// Per column: the values the features name, the rows without one, a few of their values.
    by_col: BTreeMap<usize, (BTreeSet<String>, usize, Vec<String>)>,
}

impl Unseen {
    pub fn new(features: &[Feature]) -> Unseen {
        let mut by_col: BTreeMap<usize, (BTreeSet<String>, usize, Vec<String>)> = BTreeMap::new();
        for f in features {
            if let Some(v) = &f.value {
                by_col.entry(f.col).or_default().0.insert(v.clone());
            }
        }
        Unseen { by_col }
    }

    /// The one-hot columns (each once).
    pub fn columns(&self) -> Vec<usize> {
        self.by_col.keys().copied().collect()
    }

    /// Note column `col`'s field (`None`: missing) of one row.
    pub fn see(&mut self, col: usize, v: Option<&str>) {
        if let Some((known, n, examples)) = self.by_col.get_mut(&col) {
            if v.is_some_and(|v| known.contains(v)) {
                return;
            }
            *n += 1;
            let shown = v.map_or("(missing)".to_string(), |v| format!("{v:?}"));
            if examples.len() < 3 && !examples.contains(&shown) {
                examples.push(shown);
            }
        }
    }

    /// A line per column with such rows, for the log.
    pub fn report(&self, names: &[String]) -> Vec<String> {
        self.by_col
            .iter()
            .filter(|(_, (_, n, _))| *n > 0)
            .map(|(&c, (known, n, ex))| {
                format!(
                    "one-hot column {:?}: {n} row(s) hold a value none of its {} features names ({}, …): their \
                     features of it are all 0",
                    names[c],
                    known.len(),
                    ex.join(", ")
                )
            })
            .collect()
    }
}

/// The value of a one-hot feature for a field's text (`None`: missing).
pub fn hot(f: &Feature, v: Option<&str>) -> f32 {
    (f.value.as_deref() == v) as u8 as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn names_parse_back_to_their_column_and_value() {
        let names = s(&["a", "a=b", "color", "k"]);
        assert_eq!(parse("color=red", &names), Some(Feature { col: 2, value: Some("red".into()) }));
        assert_eq!(parse("color=x=y", &names), Some(Feature { col: 2, value: Some("x=y".into()) }));
        // The longest column name that fits: "a=b" wins over "a".
        assert_eq!(parse("a=b=c", &names), Some(Feature { col: 1, value: Some("c".into()) }));
        assert_eq!(parse("size=3", &names), None);
        assert_eq!(parse("k", &names), None);
        let f = Feature { col: 2, value: Some("red".into()) };
        assert_eq!(f.name(&names), "color=red");
        assert_eq!(Feature::number(3).name(&names), "k");
    }

    #[test]
    fn values_are_ordered_as_pandas_orders_them_and_expand_in_place() {
        assert_eq!(order(s(&["10", "2", "1.5"]).into_iter().collect()), s(&["1.5", "2", "10"]));
        assert_eq!(order(s(&["b", "10", "a"]).into_iter().collect()), s(&["10", "a", "b"]));
        let vals = BTreeMap::from([(1, s(&["x", "y"]))]);
        let got = expand(vec![Feature::number(0), Feature::number(1), Feature::number(2)], &vals);
        let want = vec![
            Feature::number(0),
            Feature { col: 1, value: Some("x".into()) },
            Feature { col: 1, value: Some("y".into()) },
            Feature::number(2),
        ];
        assert_eq!(got, want);
        assert_eq!(hot(&want[1], Some("x")), 1.0);
        assert_eq!(hot(&want[1], Some("y")), 0.0);
        assert_eq!(hot(&want[1], None), 0.0);
    }

    #[test]
    fn unseen_values_are_counted_per_column() {
        let names = s(&["c"]);
        let f = vec![Feature { col: 0, value: Some("x".into()) }, Feature { col: 0, value: Some("y".into()) }];
        let mut u = Unseen::new(&f);
        assert_eq!(u.columns(), vec![0]);
        u.see(0, Some("x"));
        assert!(u.report(&names).is_empty());
        u.see(0, Some("z"));
        u.see(0, None);
        let r = u.report(&names);
        assert_eq!(r.len(), 1);
        assert!(r[0].contains("2 row(s)") && r[0].contains("\"z\"") && r[0].contains("(missing)"), "{r:?}");
    }
}
