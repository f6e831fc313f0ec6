//! Fault injection for the fault-tolerance tests (and for users who want to see what their
//! launcher does when a rank fails): `HVTRAIN_INJECT_FAULT=RANK:STEP:KIND` makes rank RANK
//! fail at global step STEP with KIND = `error` (returns an error), `panic`, `kill`
//! (SIGKILL to itself), `hang` (stops making progress, as a rank on a lost node would) or
//! `diverge` (nudges one parameter, as a bit flip would: the consistency check must catch it)
//! or `kill_in_checkpoint` (SIGKILL while writing the first checkpoint at or after STEP).

use crate::device::Backend;
use crate::error::{Error, Result};
use crate::parallel::engine::HostBuf;
use crate::step::Stepper;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Error,
    Panic,
    Kill,
    Hang,
    Diverge,
    KillInCheckpoint,
}

#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub rank: usize,
    pub step: u64,
    pub kind: Kind,
}

pub fn from_env() -> Result<Option<Fault>> {
    let Ok(spec) = std::env::var("HVTRAIN_INJECT_FAULT") else { return Ok(None) };
    let bad = || {
        Error::config(
            "environment",
            "HVTRAIN_INJECT_FAULT",
            format!("{spec:?}: expected RANK:STEP:error|panic|kill|hang|diverge|kill_in_checkpoint"),
        )
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let [rank, step, kind] = parts[..] else { return Err(bad()) };
    let kind = match kind {
        "error" => Kind::Error,
        "panic" => Kind::Panic,
        "kill" => Kind::Kill,
        "hang" => Kind::Hang,
        "diverge" => Kind::Diverge,
        "kill_in_checkpoint" => Kind::KillInCheckpoint,
        _ => return Err(bad()),
    };
    Ok(Some(Fault { rank: rank.parse().map_err(|_| bad())?, step: step.parse().map_err(|_| bad())?, kind }))
}

extern "C" {
    fn getpid() -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Fire the fault if it is this rank's and the coming step's.
pub fn maybe_fire<B: Backend>(f: &Option<Fault>, rank: usize, st: &mut Stepper<B>) -> Result<()>
where
    B::Buf: HostBuf,
{
    let Some(f) = f else { return Ok(()) };
    let step = st.step() + 1;
    if f.rank != rank || f.step != step || f.kind == Kind::KillInCheckpoint {
        return Ok(());
    }
    match f.kind {
        Kind::Error => Err(Error::Training(format!("injected fault (HVTRAIN_INJECT_FAULT) at step {step}"))),
        Kind::Panic => panic!("injected panic (HVTRAIN_INJECT_FAULT) at step {step}"),
        Kind::Kill => die(),
        Kind::KillInCheckpoint => Ok(()),
        Kind::Diverge => {
            let mut p = st.params_host()?;
            p[0] += 1.0;
            st.set_params_host(&p)
        }
        Kind::Hang => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
    }
}

fn die() -> ! {
    // SAFETY: plain libc calls; SIGKILL (9) to ourselves.
    unsafe { kill(getpid(), 9) };
    unreachable!("SIGKILL returned")
}

/// Called while a checkpoint's temporary file is complete but not yet renamed.
pub fn in_checkpoint(f: &Option<Fault>, rank: usize, step: u64) {
    if let Some(f) = f {
        if f.kind == Kind::KillInCheckpoint && f.rank == rank && step >= f.step {
            die();
        }
    }
}
