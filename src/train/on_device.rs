//! `data.on_device`: whether this rank keeps its training rows in the device's memory, each
//! step's batch then gathered there by index (`Stepper::set_resident`) and the loader handing
//! over ids and labels only; else each batch is copied from host memory. One log line on rank
//! 0 says which, and why.
//!
//! Must not: change which rows a step uses or their order (the weights are the same either way).

use crate::config::{Job, OnDevice};
use crate::data::shard::Shard;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::parallel::engine::HostBuf;
use crate::step::Stepper;
use log::info;
use std::time::Instant;

/// Share of the device's free memory the rows may take under `auto`.
const AUTO_SHARE: f64 = 0.5;

/// Decide for this rank and, when the rows go to the device, read them all (normalized, as
/// the loader would) and hand them to `st`. Returns whether they did (the loader then sends
/// ids only). Every rank decides alike unless their GPUs' free memory differs, which is
/// harmless: the choice changes no result.
pub(super) fn place<B: Backend>(job: &Job, st: &mut Stepper<B>, train: &Shard, rank: usize) -> Result<bool>
where
    B::Buf: HostBuf,
{
    let floats = train.len() * train.features;
    let mib = floats as f64 * 4.0 / 1048576.0;
    let be = st.backend();
    let why_not = match job.data.on_device {
        OnDevice::Off => Some("data.on_device = \"off\"".to_string()),
        _ if st.pipelined() => {
            Some("the step is pipelined or split into micro-batches, which read their rows from host memory".into())
        }
        OnDevice::On => None,
        OnDevice::Auto if !be.on_device() => Some("the CPU backend reads host memory in place".into()),
        OnDevice::Auto => match be.free_bytes() {
            Some(free) if floats as f64 * 4.0 <= free as f64 * AUTO_SHARE => None,
            Some(free) => Some(format!(
                "the rows' {mib:.0} MiB are more than {:.0} % of the GPU's {:.0} MiB free (data.on_device = \"on\" \
                 insists)",
                AUTO_SHARE * 100.0,
                free as f64 / 1048576.0
            )),
            None => Some("the GPU's free memory is unknown".into()),
        },
    };
    if let Some(why) = why_not {
        if job.data.on_device == OnDevice::On {
            return Err(Error::config(
                &job.source,
                "data.on_device",
                format!("is \"on\", but {why}; set it to \"auto\" or \"off\""),
            ));
        }
        if rank == 0 {
            info!("data: each batch copied from host memory ({why})");
        }
        return Ok(false);
    }
    let t = Instant::now();
    let x = {
        let _a = crate::mem::allocating("the training rows, read once for data.on_device");
        let mut x = crate::mem::zeros(floats)?;
        train.read_rows(0, train.len(), &mut x)?;
        x
    };
    st.set_resident(&x, 0)?;
    if rank == 0 {
        info!(
            "data: the {} training rows ({mib:.1} MiB) kept in {}'s memory, each batch gathered there by index \
             (data.on_device = \"{}\"; read and copied in {:.2} s)",
            train.len(),
            if st.backend().on_device() { "the GPU" } else { "the process" },
            if job.data.on_device == OnDevice::On { "on" } else { "auto" },
            t.elapsed().as_secs_f64()
        );
    }
    Ok(true)
}
