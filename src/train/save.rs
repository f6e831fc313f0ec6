//! The checkpoint writer every mode uses: one `Checkpoint` record from the whole model's
//! state and the position, written by `checkpoint::save` (atomic, durable, keep-K), with the
//! write's duration in the log and its rate remembered (the stop checkpoint's estimate).
//! Only the rank that holds the whole state calls it; gathering that state is the mode's.
//!
//! Must not: gather state (the mode does) or decide when to write.

use crate::checkpoint::{self, Checkpoint, Lineage};
use crate::config::Job;
use crate::error::Result;
use crate::fault::Fault;
use crate::model::Mlp;
use crate::parallel::liveness;
use crate::step::Sums;
use log::info;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::time::Instant;

/// The whole model's state after a step (`Stepper::whole_state`): parameters, optimizer
/// moments (m, v), the moving average (each empty where none is kept) and the global step.
pub(super) type State = crate::step::WholeState;

pub(super) struct Writer<'a> {
    pub job: &'a Job,
    pub out_dir: PathBuf,
    /// This run's lineage, written into every checkpoint.
    pub lineage: Lineage,
    /// Rows per step over all data ranks (what a checkpoint records for any rank count to resume).
    pub global_batch: usize,
    /// The writer's data-parallel degree (data ranks or workers), for the log.
    pub world_size: usize,
    pub fault: Option<Fault>,
    pub rank: usize,
    /// Bytes per second of the last write.
    rate: Cell<Option<f64>>,
    /// The trainer's state as of the last epoch's end (`trainer::TrainerState`, JSON).
    trainer: RefCell<String>,
    /// The data's normalization (fixed for the run).
    norm: RefCell<crate::data::norm::Norm>,
    names: RefCell<crate::weights::Names>,
}

impl<'a> Writer<'a> {
    pub fn new(job: &'a Job, lineage: Lineage, global_batch: usize, world_size: usize, rank: usize) -> Result<Self> {
        let out_dir = PathBuf::from(&job.output.dir);
        let fault = crate::fault::from_env()?;
        Ok(Writer {
            job,
            out_dir,
            lineage,
            global_batch,
            world_size,
            fault,
            rank,
            rate: Cell::new(None),
            trainer: RefCell::new("{}".into()),
            norm: RefCell::new(Default::default()),
            names: RefCell::new(Default::default()),
        })
    }

    /// The trainer's state that the next checkpoints carry.
    pub fn set_trainer(&self, json: String) {
        *self.trainer.borrow_mut() = json;
    }

    /// The normalization every checkpoint records.
    pub fn set_norm(&self, norm: crate::data::norm::Norm) {
        *self.norm.borrow_mut() = norm;
    }

    /// The training data's class and column names every checkpoint records.
    pub fn set_names(&self, names: crate::weights::Names) {
        *self.names.borrow_mut() = names;
    }

    /// Bytes per second of the last write, if any.
    pub fn rate(&self) -> Option<f64> {
        self.rate.get()
    }

    /// Write the checkpoint of `state` at step `step_in_epoch` of epoch `epoch_index + 1`,
    /// with every data rank's running sums in the epoch (loss and train metrics) (`exact`: all known, not
    /// estimated). Returns its path. With `parts` (the parts every data rank wrote), `state`'s
    /// arrays are empty and this writes the index (`checkpoint::parts`).
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &self,
        full: &Mlp,
        state: State,
        epoch_index: usize,
        step_in_epoch: usize,
        sums: Vec<Sums>,
        exact: bool,
        parts: Option<checkpoint::parts::Parts>,
    ) -> Result<PathBuf> {
        let crate::step::WholeState { params, m, v, ema, step } = state;
        let loss_sums = sums.iter().map(|s| s[0]).collect();
        let train_sums = sums.iter().flat_map(|s| s[1..].to_vec()).collect();
        let c = Checkpoint {
            step,
            epoch: epoch_index,
            step_in_epoch,
            world_size: self.world_size,
            global_batch: self.global_batch,
            loss_sums,
            train_sums,
            loss_sums_exact: exact,
            params,
            m,
            v,
            ema,
            job_json: serde_json::to_string(self.job).expect("job serializes"),
            trainer_json: self.trainer.borrow().clone(),
            norm: self.norm.borrow().clone(),
            names: self.names.borrow().clone(),
            lineage: self.lineage,
            written_at: checkpoint::now_ms(),
            parts,
            unread: None,
        };
        let t = Instant::now();
        let _p = liveness::phase_at("writing a checkpoint", step);
        let path = checkpoint::save(&self.out_dir, full, &c, self.job.checkpoint.keep, || {
            crate::fault::in_checkpoint(&self.fault, self.rank, step)
        })?;
        let secs = t.elapsed().as_secs_f64();
        if let Some(p) = &c.parts {
            info!(
                "checkpoint {} written: its index, naming {} parts ({:.0} ms)",
                path.display(),
                p.checksums.len(),
                secs * 1e3
            );
        } else {
            let bytes = 4.0 * (c.params.len() + c.m.len() + c.v.len() + c.ema.len()) as f64;
            self.rate.set(Some(bytes / secs.max(1e-3)));
            info!("checkpoint {} written ({:.0} ms)", path.display(), secs * 1e3);
        }
        Ok(path)
    }
}
