//! HVTRAIN_* environment variables, applied as `--set` overrides between the job file and
//! the command line (Horovod users set HOROVOD_* the same way).

use crate::error::{Error, Result};

/// The environment variables an HPC user sets instead of editing job files (Horovod-style),
/// as `--set` overrides: (variable, job key, unit conversion).
const ENV_KEYS: &[(&str, &str, Unit)] = &[
    ("HVTRAIN_FUSION_THRESHOLD", "distribution.fusion_threshold_mb", Unit::BytesToMib),
    ("HVTRAIN_FIRST_BUCKET", "distribution.first_bucket_mb", Unit::BytesToMib),
    ("HVTRAIN_BUCKET_ORDER", "distribution.bucket_order", Unit::Word),
    ("HVTRAIN_OVERLAP", "distribution.overlap", Unit::Bool),
    ("HVTRAIN_COMPRESSION", "distribution.compression", Unit::Word),
    ("HVTRAIN_WATCHDOG_SECONDS", "distribution.watchdog_seconds", Unit::Number),
    ("HVTRAIN_STALL_SECONDS", "distribution.stall_seconds", Unit::Number),
    ("HVTRAIN_CHECK_EVERY", "distribution.check_every", Unit::Number),
    ("HVTRAIN_TIMELINE", "output.timeline", Unit::Word),
];

#[derive(Clone, Copy)]
enum Unit {
    BytesToMib,
    Bool,
    Number,
    Word,
}

pub fn env_overrides(origin: &str, get: impl Fn(&str) -> Option<String>) -> Result<(Vec<String>, Vec<String>)> {
    let (mut sets, mut used) = (Vec::new(), Vec::new());
    for &(var, key, unit) in ENV_KEYS {
        let Some(raw) = get(var) else { continue };
        let v = raw.trim();
        let bad = |what: &str| Error::config(origin, key, format!("environment variable {var}={raw:?}: {what}"));
        let value = match unit {
            Unit::BytesToMib => {
                let b: f64 = v.parse().map_err(|_| bad("expected a number of bytes"))?;
                format!("{}", b / (1024.0 * 1024.0))
            }
            Unit::Bool => match v {
                "1" | "true" | "yes" | "on" => "true".into(),
                "0" | "false" | "no" | "off" => "false".into(),
                _ => return Err(bad("expected 0 or 1")),
            },
            Unit::Number => {
                v.parse::<f64>().map_err(|_| bad("expected a number"))?;
                v.to_string()
            }
            Unit::Word => format!("{:?}", v),
        };
        used.push(format!("{var}={v}"));
        sets.push(format!("{key}={value}"));
    }
    Ok((sets, used))
}
