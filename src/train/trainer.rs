//! The trainer's own state between epochs, beyond the model and the optimizer's moments:
//! the learning rate's plateau state, and the monitored metric's best value, best epoch and
//! epochs without improvement (early stopping, keep_best). It travels in every checkpoint as `trainer_json`
//! (format 4), so a resumed run on any rank count continues the same schedule.
//!
//! Must not: decide anything (the run loop and `optim::schedule` do); only hold and convert.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainerState {
    /// `optim::Plateau` as [scale, best, wait]; None before the first epoch's end.
    pub plateau: Option<[f64; 3]>,
    /// The monitored metric's best value so far (lower is better: accuracy negated).
    pub best: Option<f64>,
    pub best_epoch: usize,
    /// Epochs since the best.
    pub wait: u64,
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
        let t = TrainerState { plateau: Some([0.25, 0.5, 1.0]), best: Some(0.3), best_epoch: 4, wait: 2 };
        assert_eq!(TrainerState::from_json(&t.to_json(), "c.h5".as_ref()).unwrap(), t);
        assert_eq!(TrainerState::from_json("{}", "c.h5".as_ref()).unwrap(), TrainerState::default());
        assert!(TrainerState::from_json("[", "c.h5".as_ref()).is_err());
    }
}
