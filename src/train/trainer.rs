//! The trainer's own state between epochs, beyond the model and the optimizer's moments:
//! the learning rate's plateau state, and the monitored metric's best value, best epoch and
//! epochs without improvement (early stopping, keep_best). It travels in every checkpoint as `trainer_json`
//! (format 4), so a resumed run on any rank count continues the same schedule.
//!
//! Must not: decide anything (the run loop and `optim::schedule` do); only hold and convert.

use crate::error::{Error, Result};
use crate::optim::{Best, Plateau};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainerState {
    /// The plateau schedule's state (None without it).
    pub plateau: Option<Plateau>,
    /// The monitored metric's best value so far (lower is better: accuracy negated) and the
    /// epochs since it, and the epoch it came from.
    pub best: Best,
    pub best_epoch: usize,
}

impl TrainerState {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("trainer state serializes")
    }

    /// From a checkpoint's `trainer_json` (`file` for the error).
    pub fn from_json(json: &str, file: &std::path::Path) -> Result<TrainerState> {
        serde_json::from_str(json).map_err(|e| Error::data(file, "trainer_json", format!("does not parse: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_older_checkpoints() {
        let best = Best { value: Some(0.3), wait: 2 };
        let t = TrainerState { plateau: Some(Plateau { scale: 0.25, best, cooldown: 1 }), best, best_epoch: 4 };
        assert_eq!(TrainerState::from_json(&t.to_json(), "c.h5".as_ref()).unwrap(), t);
        assert_eq!(TrainerState::from_json("{}", "c.h5".as_ref()).unwrap(), TrainerState::default());
        assert!(TrainerState::from_json("[", "c.h5".as_ref()).is_err());
    }
}
