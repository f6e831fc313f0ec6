//! Where a parameter-server run starts (collective over the world): rank 0, a worker,
//! prepares output.dir and finds the checkpoint to continue from, as in all-reduce training
//! (`restore::prepare_output`; a checkpoint's world_size is the number of workers); every
//! rank, server or worker, receives the whole state. Servers cut their buckets out of it.

use super::super::restore::{prepare_output, Start};
use super::super::Resume;
use crate::checkpoint::Lineage;
use crate::config::Job;
use crate::error::{Error, Result};
use crate::model::Mlp;
use crate::parallel::Comm;
use log::info;
use std::path::PathBuf;

pub(super) fn start(comm: &Comm, job: &Job, model: &Mlp, workers: usize, resume: Option<&Resume>) -> Result<Start> {
    let out_dir = PathBuf::from(&job.output.dir);
    let p = crate::parallel::liveness::phase("preparing output.dir and reading the checkpoint to resume from");
    let ckpt = if comm.rank == 0 { prepare_output(job, &out_dir, model, resume, workers)? } else { None };
    drop(p);
    let _p = crate::parallel::liveness::phase("receiving the starting state from rank 0");
    let (m_len, v_len) = crate::optim::state_lens(&job.optimizer, model.n_params);
    let mut params = match &ckpt {
        Some(c) => c.params.clone(),
        None if comm.rank == 0 => model.init_params(job.training.seed),
        None => vec![0.0; model.n_params],
    };
    comm.broadcast_f32(&mut params);
    let mut m = ckpt.as_ref().map_or(vec![0.0; m_len], |c| c.m.clone());
    let mut v = ckpt.as_ref().map_or(vec![0.0; v_len], |c| c.v.clone());
    let mut ok = [u64::from(m.len() == m_len && v.len() == v_len)];
    comm.broadcast_u64(&mut ok);
    if ok[0] == 0 {
        return Err(Error::config(
            &job.source,
            "optimizer",
            "the checkpoint's optimizer state does not fit this optimizer (another optimizer.kind or momentum?)",
        ));
    }
    comm.broadcast_f32(&mut m);
    comm.broadcast_f32(&mut v);
    let mut pos = [0u64; 3];
    if let Some(c) = &ckpt {
        pos = [c.step, c.epoch as u64, c.step_in_epoch as u64];
    }
    comm.broadcast_u64(&mut pos);
    let mut loss_sums = ckpt.as_ref().map_or(vec![0.0; workers], |c| c.loss_sums.clone());
    comm.broadcast_f64(&mut loss_sums);
    let l = Lineage::new_run(ckpt.as_ref());
    if comm.rank == 0 {
        info!("run id {:016x}", l.run_id);
    }
    let mut ids = [l.run_id, l.parent_run, l.parent_step as u64];
    comm.broadcast_u64(&mut ids);
    let lineage = Lineage { run_id: ids[0], parent_run: ids[1], parent_step: ids[2] as i64 };
    let (step, epoch, step_in_epoch) = (pos[0], pos[1] as usize, pos[2] as usize);
    let global_batch = job.training.batch_size * workers;
    Ok(Start { params, m, v, step, epoch, step_in_epoch, loss_sums, global_batch, lineage })
}
