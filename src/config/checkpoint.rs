//! `[checkpoint]`: how often checkpoints are written and how many are kept, and their checks.
//! The files themselves are `checkpoint.rs`'s.
//!
//! Must not: touch files.

use super::limits;
use super::{count, real};
use crate::error::Result;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CheckpointCfg {
    /// Write a checkpoint every this many steps (0: off).
    #[serde(default)]
    pub every_steps: u64,
    /// Write a checkpoint when this many minutes have passed since the last one (0: off).
    #[serde(default)]
    pub every_minutes: f64,
    /// Checkpoints kept in output.dir (the newest ones); 0 is taken as 1.
    #[serde(default = "default_keep")]
    pub keep: usize,
}

fn default_keep() -> usize {
    3
}

impl CheckpointCfg {
    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        count(origin, "checkpoint.every_steps", self.every_steps, limits::EVERY_STEPS)?;
        count(origin, "checkpoint.keep", self.keep as u64, limits::KEEP)?;
        real(origin, "checkpoint.every_minutes", self.every_minutes, limits::EVERY_MINUTES)
    }
}
