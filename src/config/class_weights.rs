//! `model.class_weights`: each class's factor on its rows' loss in training (Keras'
//! `class_weight`), as a list in class order, a table by class index or name (the others 1),
//! or `"balanced"` (scikit-learn's rows / (classes × the class's rows), from the training
//! labels). Read from TOML with errors that say which form is wrong, checked against the model
//! here, and resolved (`resolve`, pure) once the training labels' counts and class names are
//! known.
//!
//! Must not: read data (the caller counts the labels).

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The largest weight a class may have (a guard against a typo such as 1e30, which would turn
/// every step's gradient into an overflow).
pub const MAX_CLASS_WEIGHT: f64 = 1e6;

/// `model.class_weights`.
#[derive(Clone, Debug, PartialEq)]
pub enum ClassWeights {
    /// `"balanced"`: rows / (classes × the class's rows) over the training rows.
    Balanced,
    /// One weight per class, class 0 first.
    List(Vec<f64>),
    /// Weights by class index (`"3"`) or name (the data's `y_classes`); classes not named weigh 1.
    Table(BTreeMap<String, f64>),
}

impl ClassWeights {
    /// The checks that need only the job file: the loss takes class labels (`classes_ok`), the
    /// list is one weight per output, every weight a finite number in [0, MAX_CLASS_WEIGHT], and
    /// not all of them 0; a table's integer keys are classes of the model. Names are checked
    /// by `resolve`, against the data's.
    pub fn check(&self, classes: usize, classes_ok: bool) -> Result<(), String> {
        if !classes_ok {
            return Err("weighs the rows of each class, and only model.loss = \"softmax_cross_entropy\" has classes; \
                 remove model.class_weights, or use that loss"
                .into());
        }
        let weights: Vec<(String, f64)> = match self {
            ClassWeights::Balanced => return Ok(()),
            ClassWeights::List(v) => {
                if v.len() != classes {
                    return Err(format!(
                        "lists {} weights, and the model has {classes} classes (the last of model.layers); \
                         give one weight per class, a table such as {{ 1 = 5.0 }} (the classes not named weigh 1), \
                         or \"balanced\"",
                        v.len()
                    ));
                }
                v.iter().enumerate().map(|(i, &w)| (format!("class {i}"), w)).collect()
            }
            ClassWeights::Table(t) => {
                if t.is_empty() {
                    return Err(
                        "is an empty table; name at least one class (\"0\" = 2.0, or a class name), or remove the key"
                            .into(),
                    );
                }
                for key in t.keys() {
                    if let Ok(i) = key.trim().parse::<i64>() {
                        if i < 0 || i as u64 >= classes as u64 {
                            return Err(format!(
                                "names class {i}, and the model's classes are 0 to {} (the last of model.layers is {classes})",
                                classes - 1
                            ));
                        }
                    }
                }
                t.iter().map(|(k, &w)| (format!("class \"{k}\""), w)).collect()
            }
        };
        if let Some((who, w)) = weights.iter().find(|(_, w)| !(w.is_finite() && (0.0..=MAX_CLASS_WEIGHT).contains(w))) {
            return Err(format!(
                "gives {who} the weight {w}; a class weight is a factor on its rows' loss, from 0 (left out) to {MAX_CLASS_WEIGHT}"
            ));
        }
        if let ClassWeights::List(v) = self {
            if v.iter().all(|&w| w == 0.0) {
                return Err("gives every class the weight 0, which leaves nothing to learn from".into());
            }
        }
        Ok(())
    }

    /// The weight of each of `counts.len()` classes: `counts[c]` training rows have class c,
    /// `names` the data's class names (empty when it has none). A table key that is neither a
    /// class number nor one of `names` is an error naming the names there are. A class with no
    /// training row weighs 1 under "balanced" (it never counts).
    pub fn resolve(&self, counts: &[u64], names: &[String]) -> Result<Vec<f64>, String> {
        let classes = counts.len();
        match self {
            ClassWeights::List(v) => Ok(v.clone()),
            ClassWeights::Balanced => {
                let rows: u64 = counts.iter().sum();
                Ok(counts
                    .iter()
                    .map(|&c| if c == 0 { 1.0 } else { rows as f64 / (classes as f64 * c as f64) })
                    .collect())
            }
            ClassWeights::Table(t) => {
                let mut w = vec![1.0; classes];
                let mut named: Vec<Option<&str>> = vec![None; classes];
                for (key, &v) in t {
                    let i = match key.trim().parse::<usize>() {
                        Ok(i) if i < classes => i,
                        _ => match names.iter().position(|n| n == key) {
                            Some(i) => i,
                            None if names.is_empty() => {
                                return Err(format!(
                                    "names class \"{key}\", and the training data has no class names (no y_classes \
                                     dataset); name classes by number: {{ \"0\" = 2.0 }}"
                                ))
                            }
                            None => {
                                return Err(format!(
                                    "names class \"{key}\", which the training data's classes ({}) do not include",
                                    names.join(", ")
                                ))
                            }
                        },
                    };
                    if let Some(first) = named[i] {
                        return Err(format!("names class {i} twice (\"{first}\" and \"{key}\"); keep one"));
                    }
                    named[i] = Some(key);
                    w[i] = v;
                }
                if w.iter().all(|&v| v == 0.0) {
                    return Err("gives every class the weight 0, which leaves nothing to learn from".into());
                }
                Ok(w)
            }
        }
    }
}

impl Serialize for ClassWeights {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ClassWeights::Balanced => s.serialize_str("balanced"),
            ClassWeights::List(v) => v.serialize(s),
            ClassWeights::Table(t) => {
                let mut m = s.serialize_map(Some(t.len()))?;
                for (k, v) in t {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ClassWeights {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ClassWeights, D::Error> {
        d.deserialize_any(Form)
    }
}

/// The three forms, each with its own error.
struct Form;

const EXPECTED: &str =
    "\"balanced\", a list of one weight per class ([1.0, 5.0]), or a table by class number or name ({ 1 = 5.0 })";

impl<'de> Visitor<'de> for Form {
    type Value = ClassWeights;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(EXPECTED)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<ClassWeights, E> {
        if v == "balanced" {
            Ok(ClassWeights::Balanced)
        } else {
            Err(E::custom(format!("unknown value \"{v}\", expected {EXPECTED}")))
        }
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ClassWeights, A::Error> {
        let mut v = Vec::new();
        while let Some(w) = seq.next_element::<Number>()? {
            v.push(w.0);
        }
        Ok(ClassWeights::List(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ClassWeights, A::Error> {
        let mut t = BTreeMap::new();
        while let Some((k, w)) = map.next_entry::<String, Number>()? {
            t.insert(k, w.0);
        }
        Ok(ClassWeights::Table(t))
    }
}

/// A weight: an integer or a float in the job file.
struct Number(f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Number, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number (a class's weight)")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ClassWeights, String> {
        #[derive(Deserialize)]
        struct T {
            w: ClassWeights,
        }
        toml::from_str::<T>(&format!("w = {s}")).map(|t| t.w).map_err(|e| e.to_string())
    }

    #[test]
    fn the_three_forms_read_and_resolve() {
        assert_eq!(parse("\"balanced\"").unwrap(), ClassWeights::Balanced);
        assert_eq!(parse("[1, 2.5, 0]").unwrap(), ClassWeights::List(vec![1.0, 2.5, 0.0]));
        let t = parse("{ 2 = 4, cat = 0.5 }").unwrap();
        let names: Vec<String> = ["dog", "cat", "eel"].iter().map(|s| s.to_string()).collect();
        assert_eq!(t.resolve(&[10, 10, 10], &names).unwrap(), vec![1.0, 0.5, 4.0]);
        let e = parse("{ 1 = 4, cat = 0.5 }").unwrap().resolve(&[10, 10, 10], &names).unwrap_err();
        assert!(e.contains("names class 1 twice (\"1\" and \"cat\")"), "{e}");
        let t = parse("{ 2 = 4 }").unwrap();
        assert_eq!(t.resolve(&[10, 10, 10], &[]).unwrap(), vec![1.0, 1.0, 4.0]);
        // scikit-learn's compute_class_weight("balanced"): 40 / (4 × count); a class with no row weighs 1.
        let b = ClassWeights::Balanced.resolve(&[20, 10, 10, 0], &[]).unwrap();
        assert_eq!(b, vec![0.5, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn each_wrong_form_says_what_is_expected() {
        let e = parse("\"balance\"").unwrap_err();
        assert!(e.contains("unknown value \"balance\"") && e.contains("a list of one weight per class"), "{e}");
        let e = parse("[1, \"x\"]").unwrap_err();
        assert!(e.contains("a number (a class's weight)"), "{e}");
        let e = parse("3").unwrap_err();
        assert!(e.contains("\"balanced\", a list"), "{e}");
    }

    #[test]
    fn the_checks_name_the_class_and_the_rule() {
        let e = ClassWeights::List(vec![1.0, 2.0]).check(3, true).unwrap_err();
        assert!(e.contains("lists 2 weights, and the model has 3 classes"), "{e}");
        let e = ClassWeights::List(vec![1.0, -2.0, 1.0]).check(3, true).unwrap_err();
        assert!(e.contains("gives class 1 the weight -2"), "{e}");
        let e = ClassWeights::List(vec![1.0, f64::NAN, 1.0]).check(3, true).unwrap_err();
        assert!(e.contains("class 1 the weight NaN"), "{e}");
        let e = ClassWeights::List(vec![0.0, 0.0]).check(2, true).unwrap_err();
        assert!(e.contains("every class the weight 0"), "{e}");
        let e = ClassWeights::Balanced.check(3, false).unwrap_err();
        assert!(e.contains("softmax_cross_entropy"), "{e}");
        let t = parse("{ 3 = 2.0 }").unwrap();
        let e = t.check(3, true).unwrap_err();
        assert!(e.contains("names class 3, and the model's classes are 0 to 2"), "{e}");
        assert!(ClassWeights::List(vec![1.0, 0.0, 3.0]).check(3, true).is_ok());
        let t = parse("{ fish = 2.0 }").unwrap();
        assert!(t.check(3, true).is_ok(), "names are checked against the data");
        let names: Vec<String> = ["dog", "cat"].iter().map(|s| s.to_string()).collect();
        let e = t.resolve(&[1, 1], &names).unwrap_err();
        assert!(e.contains("names class \"fish\", which the training data's classes (dog, cat) do not include"), "{e}");
        let e = t.resolve(&[1, 1], &[]).unwrap_err();
        assert!(e.contains("has no class names"), "{e}");
    }
}
