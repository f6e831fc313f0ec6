//! Where a parameter-server run starts (collective over the world): rank 0, a worker,
//! prepares output.dir and finds the checkpoint to continue from, as in all-reduce training
//! (`restore::prepare_output`; a checkpoint's world_size is the number of workers); every
//! rank, server or worker, receives the whole state. Servers cut their buckets out of it.
//!
//! Must not: cut the state per bucket (the servers do).

use super::super::read_state::whole_state;
use super::super::restore::{position, read_checkpoint, Start};
use super::super::Resume;
use crate::config::Job;
use crate::error::Result;
use crate::model::Mlp;
use crate::parallel::Comm;
use std::path::PathBuf;

pub(super) fn start(comm: &Comm, job: &Job, model: &Mlp, workers: usize, resume: Option<&Resume>) -> Result<Start> {
    let out_dir = PathBuf::from(&job.output.dir);
    let ckpt = read_checkpoint(comm, job, &out_dir, model, resume, workers, false)?;
    let _p = crate::parallel::liveness::phase("receiving the starting state from rank 0");
    let (m_len, v_len) = crate::optim::state_lens(&job.optimizer, model.n_params);
    let (mut params, mut m, mut v) = whole_state(comm, job, model, ckpt.as_ref(), false)?;
    if comm.rank != 0 {
        (params, m, v) = (vec![0.0; model.n_params], vec![0.0; m_len], vec![0.0; v_len]);
    }
    for x in [&mut params, &mut m, &mut v] {
        comm.broadcast_f32(x);
    }
    Ok(position(comm, job, ckpt.as_ref(), workers, &out_dir, (params, m, v)))
}
