//! HVTRAIN_* environment variables, applied as `--set` overrides between the job file and
//! the command line (Horovod users set HOROVOD_* the same way). Numbers are checked here
//! against the same bounds as the job file's keys, so that an error names the variable.
//!
//! Must not: read variables other than HVTRAIN_* ones that mirror job keys (fault injection is
//! `fault.rs`'s).

use super::{limits, num, Span};
use crate::error::{Error, Result};

/// The environment variables an HPC user sets instead of editing job files (Horovod-style),
/// as `--set` overrides: (variable, job key, unit conversion).
const ENV_KEYS: &[(&str, &str, Unit)] = &[
    ("HVTRAIN_FUSION_THRESHOLD", "distribution.fusion_threshold_mb", Unit::BytesToMib(limits::FUSION_MB)),
    ("HVTRAIN_FIRST_BUCKET", "distribution.first_bucket_mb", Unit::BytesToMib(limits::FUSION_MB)),
    ("HVTRAIN_BUCKET_ORDER", "distribution.bucket_order", Unit::Word),
    ("HVTRAIN_OVERLAP", "distribution.overlap", Unit::Bool),
    ("HVTRAIN_PREFETCH", "distribution.prefetch", Unit::Bool),
    ("HVTRAIN_COMPRESSION", "distribution.compression", Unit::Word),
    ("HVTRAIN_HIERARCHICAL_ALLREDUCE", "distribution.hierarchical", Unit::Bool),
    ("HVTRAIN_GPU_ALLREDUCE", "distribution.gpu_allreduce", Unit::Word),
    ("HVTRAIN_AUTOTUNE", "distribution.autotune", Unit::Bool),
    ("HVTRAIN_WATCHDOG_SECONDS", "distribution.watchdog_seconds", Unit::Number(limits::WATCHDOG_SECONDS)),
    ("HVTRAIN_STALL_SECONDS", "distribution.stall_seconds", Unit::Number(limits::STALL_SECONDS)),
    ("HVTRAIN_STARTUP_SECONDS", "distribution.startup_seconds", Unit::Number(limits::STARTUP_SECONDS)),
    ("HVTRAIN_FINISH_SECONDS", "distribution.finish_seconds", Unit::Number(limits::FINISH_SECONDS)),
    ("HVTRAIN_CHECK_EVERY", "distribution.check_every", Unit::Count(limits::CHECK_EVERY)),
    ("HVTRAIN_TIMELINE", "output.timeline", Unit::Word),
];

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Clone, Copy)]
enum Unit {
    /// Bytes in the variable, MiB in the key; the bounds are the key's (MiB).
    BytesToMib(Span),
    Bool,
    Number(Span),
    /// A whole number.
    Count(Span),
    Word,
}

pub fn env_overrides(origin: &str, get: impl Fn(&str) -> Option<String>) -> Result<(Vec<String>, Vec<String>)> {
    let (mut sets, mut used) = (Vec::new(), Vec::new());
    for &(var, key, unit) in ENV_KEYS {
        let Some(raw) = get(var) else { continue };
        let v = raw.trim();
        let bad = |what: &str| Error::config(origin, key, format!("environment variable {var}={raw:?}: {what}"));
        let value = match unit {
            Unit::BytesToMib(span) => {
                let b: f64 = v.parse().map_err(|_| bad("expected a number of bytes"))?;
                let bytes = Span { lo: span.lo * MIB, hi: span.hi * MIB, unit: "bytes", ..span };
                if !bytes.allows(b) {
                    return Err(bad(&bytes.error(&num(b))));
                }
                format!("{}", b / MIB)
            }
            Unit::Bool => match v {
                "1" | "true" | "yes" | "on" => "true".into(),
                "0" | "false" | "no" | "off" => "false".into(),
                _ => return Err(bad("expected 0 or 1")),
            },
            Unit::Number(span) => {
                let x: f64 = v.parse().map_err(|_| bad("expected a number"))?;
                if !span.allows(x) {
                    return Err(bad(&span.error(&num(x))));
                }
                // Written back in TOML's syntax (Rust's `1e20` is not a TOML float).
                format!("{x:?}")
            }
            Unit::Count(span) => {
                let n: u64 = v.parse().map_err(|_| bad(&format!("expected a whole number, {}", span.describe())))?;
                if !span.allows(n as f64) {
                    return Err(bad(&span.error(&n.to_string())));
                }
                n.to_string()
            }
            Unit::Word => format!("{:?}", v),
        };
        used.push(format!("{var}={v}"));
        sets.push(format!("{key}={value}"));
    }
    Ok((sets, used))
}
