//! A sweep's files in its folder (output.dir): `sweep.jsonl` (one line per trial, rewritten
//! whole and renamed into place after every change: the scheduler's state, which a resumed
//! sweep reads back), `sweep.json` (the search as it started: a resumed sweep must be the same
//! search), and at the end the table of trials, `best.json` and the best trial's weights as
//! `best-weights.h5`.
//!
//! Must not: decide what runs next (`scheduler.rs`).

use super::scheduler::{Status, Trial};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub const TRIALS_FILE: &str = "sweep.jsonl";
pub const SPEC_FILE: &str = "sweep.json";

/// Every trial's line, written to a temporary file and renamed over `sweep.jsonl`.
pub fn write(dir: &Path, trials: &[Trial]) -> Result<()> {
    let path = dir.join(TRIALS_FILE);
    let tmp = dir.join(format!("{TRIALS_FILE}.tmp"));
    let text: String = trials
        .iter()
        .filter(|t| t.status != Status::Pending)
        .map(|t| serde_json::to_string(t).expect("a trial serializes") + "\n")
        .collect();
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, "write the sweep's trials", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, "rename the sweep's trials into place", e))
}

/// The trials of an earlier run of the sweep (None when it has not started one).
pub fn read(dir: &Path) -> Result<Option<Vec<Trial>>> {
    let path = dir.join(TRIALS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, "read the sweep's trials", e)),
    };
    let trials = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| Error::data(&path, format!("line {}", i + 1), format!("not a trial record: {e}")))
        })
        .collect::<Result<Vec<Trial>>>()?;
    Ok(Some(trials))
}

/// The search as the sweep started it (`spec`: the [sweep] table, the epochs, every trial's
/// values; also the rank count, for the record: a resumed sweep may run on more or fewer
/// groups), kept so that a resumed sweep can tell it is the same search. Returns an error
/// naming what changed when `sweep.json` holds another.
pub fn check_or_keep_spec(dir: &Path, spec: &serde_json::Value) -> Result<()> {
    let path = dir.join(SPEC_FILE);
    match std::fs::read_to_string(&path) {
        Ok(old) => {
            let old: serde_json::Value = serde_json::from_str(&old)
                .map_err(|e| Error::data(&path, "(file)", format!("not the sweep's JSON: {e}")))?;
            for key in ["sweep", "epochs", "trials"] {
                if old[key] != spec[key] {
                    return Err(Error::config(
                        path.display().to_string(),
                        format!("sweep ({key})"),
                        format!(
                            "this folder holds a sweep whose {key} differ(s) from this job's: resume it with the same job \
                             and [sweep], or give this sweep another output.dir"
                        ),
                    ));
                }
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = serde_json::to_string_pretty(spec).expect("the spec serializes");
            std::fs::write(&path, text).map_err(|e| Error::io(&path, "write the sweep's spec", e))
        }
        Err(e) => Err(Error::io(&path, "read the sweep's spec", e)),
    }
}

/// The table printed at the end: every trial, best first, then those without a metric.
pub fn table(ranked: &[&Trial], all: &[Trial], metric: &str) -> String {
    let keys: Vec<&String> = all.first().map(|t| t.params.keys().collect()).unwrap_or_default();
    let mut rows = vec![{
        let mut h = vec!["rank".to_string(), "trial".into(), "status".into(), metric.to_string(), "epochs".into()];
        h.extend(keys.iter().map(|k| k.to_string()));
        h.push("seconds".into());
        h
    }];
    let mut row = |place: String, t: &Trial| {
        let mut r = vec![
            place,
            t.trial.to_string(),
            format!("{:?}", t.status).to_lowercase(),
            t.metric.map_or("-".into(), |m| format!("{m:.5}")),
            t.epochs.to_string(),
        ];
        r.extend(keys.iter().map(|k| short(&t.params[*k])));
        r.push(format!("{:.1}", t.seconds));
        rows.push(r);
    };
    for (i, t) in ranked.iter().enumerate() {
        row((i + 1).to_string(), t);
    }
    for t in all.iter().filter(|t| !ranked.iter().any(|r| r.trial == t.trial) && t.status != Status::Pending) {
        row("-".into(), t);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            r.iter().zip(&widths).map(|(s, w)| format!("{s:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A parameter's value for the table: floats to 4 significant digits.
fn short(v: &serde_json::Value) -> String {
    match v.as_f64() {
        Some(f) if !v.is_i64() && !v.is_u64() => format!("{f:.4e}"),
        _ => v.to_string(),
    }
}

/// The best trial's weights copied to `best-weights.h5`, and `best.json` (its record). The
/// path of the weights, or None when the trial has none.
pub fn keep_best(dir: &Path, best: &Trial) -> Result<Option<PathBuf>> {
    let json = dir.join("best.json");
    let text = serde_json::to_string_pretty(best).expect("a trial serializes");
    std::fs::write(&json, text).map_err(|e| Error::io(&json, "write the best trial", e))?;
    let from = Path::new(&best.dir).join("weights.h5");
    if !from.exists() {
        return Ok(None);
    }
    let to = dir.join("best-weights.h5");
    std::fs::copy(&from, &to).map_err(|e| Error::io(&to, "copy the best trial's weights", e))?;
    Ok(Some(to))
}

/// The metric after each epoch of a trial's `metrics.jsonl` (epoch, value; None where the
/// line has none, or it is not finite).
pub fn curve(dir: &Path, metric: &str) -> Vec<(usize, Option<f64>)> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["epoch"].as_u64()? as usize, v[metric].as_f64())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn trial(i: usize, status: Status, metric: Option<f64>) -> Trial {
        Trial {
            trial: i,
            status,
            params: BTreeMap::from([("optimizer.lr".to_string(), serde_json::json!(0.01 * (i + 1) as f64))]),
            bracket: 0,
            target: 3,
            epochs: 3,
            rungs: BTreeMap::from([(1, Some(0.5)), (3, None)]),
            metric,
            seconds: 2.0,
            ranks: 1,
            reason: (status == Status::Failed).then(|| "the loss became NaN".into()),
            dir: format!("t/{i}"),
        }
    }

    #[test]
    fn records_round_trip_and_the_table_lists_every_trial() {
        let dir = std::env::temp_dir().join(format!("hvtrain-sweep-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let all = vec![
            trial(0, Status::Completed, Some(0.3)),
            trial(1, Status::Failed, None),
            trial(2, Status::Stopped, Some(0.2)),
            trial(3, Status::Pending, None),
        ];
        write(&dir, &all).unwrap();
        let back = read(&dir).unwrap().unwrap();
        assert_eq!(back, all[..3].to_vec(), "pending trials are not written");
        let t = table(&[&all[2], &all[0]], &all, "val_loss");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[1].starts_with("1     2      stopped") && lines[1].contains("0.20000"), "{t}");
        assert!(lines[3].starts_with("-") && lines[3].contains("failed"), "{t}");
        let spec = serde_json::json!({"sweep": {"trials": 4}, "ranks": 2, "epochs": 3, "trials": [1, 2]});
        check_or_keep_spec(&dir, &spec).unwrap();
        check_or_keep_spec(&dir, &spec).unwrap();
        // Another rank count is the same search (more or fewer groups); other epochs are not.
        let more = serde_json::json!({"sweep": {"trials": 4}, "ranks": 4, "epochs": 3, "trials": [1, 2]});
        check_or_keep_spec(&dir, &more).unwrap();
        let other = serde_json::json!({"sweep": {"trials": 4}, "ranks": 2, "epochs": 5, "trials": [1, 2]});
        let e = check_or_keep_spec(&dir, &other).unwrap_err().to_string();
        assert!(e.contains("sweep (epochs)") && e.contains("another output.dir"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
