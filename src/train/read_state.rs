//! A run's starting state read from rank 0's checkpoint (collective where it says so): each
//! rank's own pieces read from the checkpoint's parts or its whole file (`own_parts`, from the
//! checkpoint's place on every rank, `source_everywhere`), or rank 0's whole state with the
//! fresh start's parameters from the seed (`whole_state`), and the moving average broadcast
//! (`whole_ema`). `restore` decides which.
//!
//! Must not: choose the checkpoint, or write to output.dir (`restore` and `prepare_output` do).

use super::setup::Setup;
use crate::checkpoint::{self, Checkpoint};
use crate::config::Job;
use crate::error::{Error, Result};
use crate::model::Mlp;
use crate::parallel::Comm;
use log::info;

/// Collective: rank 0's checkpoint's moving average of the parameters, on every rank (empty
/// without `optimizer.ema`, and where the checkpoint keeps none: the average then starts from
/// the resumed parameters, as rank 0 says).
pub(super) fn whole_ema(comm: &Comm, job: &Job, ckpt: Option<&Checkpoint>) -> Result<Vec<f32>> {
    if job.optimizer.ema.is_none() {
        return Ok(Vec::new());
    }
    let mut len = [ckpt.map_or(0, |c| c.ema.len() as u64)];
    comm.broadcast_u64(&mut len);
    if ckpt.is_some() && len[0] == 0 {
        info!("{NO_EMA}");
    }
    if len[0] == 0 {
        return Ok(Vec::new());
    }
    let _a = crate::mem::allocating("the starting moving average (received from rank 0)");
    let mut ema = match ckpt {
        Some(c) => c.ema.clone(),
        None => crate::mem::zeros(len[0] as usize)?,
    };
    comm.broadcast_f32(&mut ema);
    Ok(ema)
}

/// What the log says when a run with `optimizer.ema` resumes from a checkpoint without one.
pub(super) const NO_EMA: &str =
    "optimizer.ema: the checkpoint keeps no moving average of the parameters (its run had no \
                      optimizer.ema): the average starts from the resumed parameters";

/// Whether the state is sharded over the data ranks (`distribution.shard` on several).
pub(super) fn sharded(job: &Job, setup: &Setup) -> bool {
    job.distribution.shard.optimizer() && setup.grid.data > 1
}

/// Collective: where rank 0's checkpoint keeps its arrays (its step, and its parts or its
/// own file: `Checkpoint::source`), on every rank; None when it holds them (or there is none).
/// Only for a run that reads parts (`reads_parts`: the same on every rank).
pub(super) fn source_everywhere(comm: &Comm, ckpt: Option<&Checkpoint>) -> Option<(u64, checkpoint::Source)> {
    use checkpoint::Source;
    let src = ckpt.and_then(|c| {
        let s = match (&c.parts, &c.unread) {
            (Some(p), _) => Source::Parts(p.clone()),
            (None, Some(u)) => Source::Whole(u.clone()),
            (None, None) => return None,
        };
        Some((c.step, s))
    });
    // Rank 0 checked each part against its checksum; the readers need only the count.
    super::verify::broadcast_source(comm, src.as_ref().map(|(step, s)| (*step, s)), false)
}

/// This rank's starting state read from a checkpoint's parts or its whole file (`src`, at
/// `step`): the parameters (its pieces under `shard = "parameters"`, its whole arena
/// otherwise: the whole model, or with model parallelism its shard of its stage) and its
/// pieces of the optimizer state (without sharded state its whole arena's), each read from
/// wherever they are stored.
#[allow(clippy::type_complexity)]
pub(super) fn own_parts(
    job: &Job,
    setup: &Setup,
    src: &checkpoint::Source,
    step: u64,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>)> {
    let _p = crate::parallel::liveness::phase("reading this rank's pieces of the checkpoint");
    let model = &setup.whole;
    let (m_len, v_len) = crate::optim::state_lens(&job.optimizer, model.n_params);
    let (has_m, has_v) = (m_len > 0, v_len > 0);
    let fits = match src {
        checkpoint::Source::Parts(p) => p.m == has_m && p.v == has_v,
        checkpoint::Source::Whole(u) => u.fits(model, has_m, has_v),
    };
    if !fits {
        return Err(Error::config(
            &job.source,
            "optimizer",
            "the checkpoint's optimizer state does not fit this optimizer (another optimizer.kind or momentum?)",
        ));
    }
    let layout = crate::parallel::shard::Layout::new(&setup.plan, setup.grid.data);
    let own: Vec<std::ops::Range<usize>> = if sharded(job, setup) {
        layout.own(setup.grid.d).into_iter().map(|(r, _)| r).collect()
    } else {
        vec![0..setup.model.n_params]
    };
    let tg = &setup.tensor;
    let map = if tg.is_whole() {
        checkpoint::parts::StoredMap::whole(model)
    } else {
        checkpoint::parts::StoredMap::shard(model, &tg.stage, tg.arena.start, &setup.model, true)
    };
    let whole = [0..setup.model.n_params];
    let pieces = sharded(job, setup) && job.distribution.shard == crate::config::Shard::Parameters;
    let _a = crate::mem::allocating("this rank's part of the starting state");
    let read = |name: &str, there: bool, want: &[std::ops::Range<usize>]| -> Result<Vec<f32>> {
        if there {
            checkpoint::read_stored(src, step, model, &map, name, want)
        } else {
            Ok(Vec::new())
        }
    };
    let params = read("params", true, if pieces { &own } else { &whole })?;
    // The moving average, laid out as the parameters are, where both the job and the
    // checkpoint keep one.
    let ema =
        read("optimizer/ema", job.optimizer.ema.is_some() && src.keeps_ema(), if pieces { &own } else { &whole })?;
    Ok((params, read("optimizer/m", has_m, &own)?, read("optimizer/v", has_v, &own)?, ema))
}

/// Collective: rank 0's whole starting state (parameters, optimizer moments m and v): the
/// checkpoint's, or fresh parameters from the seed and zero moments; empty vectors on the
/// other ranks. Every rank returns rank 0's answer to whether the checkpoint's optimizer
/// state fits this optimizer. `lazy_zeros` (every rank knows there is no checkpoint): m and v
/// are returned empty on every rank (the optimizer's own buffers start at zero;
/// `Optimizer::restore` takes empty state as that), so that no rank builds the whole model's
/// zeros.
pub(super) fn whole_state(
    comm: &Comm,
    job: &Job,
    model: &Mlp,
    ckpt: Option<&Checkpoint>,
    lazy_zeros: bool,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (m_len, v_len) = crate::optim::state_lens(&job.optimizer, model.n_params);
    let rank0 = comm.rank == 0;
    let a = crate::mem::allocating("the whole model's starting parameters (rank 0)");
    let params = match ckpt {
        Some(c) => c.params.clone(),
        None if rank0 => model.init_params(job.training.seed),
        None => Vec::new(),
    };
    drop(a);
    let _a = crate::mem::allocating("the starting optimizer state");
    let whole = |c: Option<&Vec<f32>>, len: usize| -> Result<Vec<f32>> {
        Ok(match c {
            Some(c) => c.clone(),
            None if rank0 => crate::mem::zeros(len)?,
            None => Vec::new(),
        })
    };
    if lazy_zeros {
        assert!(ckpt.is_none(), "lazy zeros only for a fresh start");
        return Ok((params, Vec::new(), Vec::new()));
    }
    let m = whole(ckpt.map(|c| &c.m), m_len)?;
    let v = whole(ckpt.map(|c| &c.v), v_len)?;
    let mut ok = [u64::from(!rank0 || (m.len() == m_len && v.len() == v_len))];
    comm.broadcast_u64(&mut ok);
    if ok[0] == 0 {
        return Err(Error::config(
            &job.source,
            "optimizer",
            "the checkpoint's optimizer state does not fit this optimizer (another optimizer.kind or momentum?)",
        ));
    }
    Ok((params, m, v))
}
