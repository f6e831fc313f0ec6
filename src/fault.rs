//! Fault injection for the fault-tolerance tests (and for users who want to see what their
//! launcher does when a rank fails): `HVTRAIN_INJECT_FAULT=RANK:WHEN:KIND` makes rank RANK
//! fail at WHEN, which is a global training step, `init` (before `MPI_Init`, rank RANK as the
//! launcher numbers it; stop, kill, hang, slow and term only), `start` (start-up of `train` and `eval`,
//! before the ranks first agree on the job) or `eval` (before the local evaluation of
//! `hvtrain eval` and of every end-of-epoch evaluation), with KIND =
//!
//! - `error` (returns an error), `panic`, `kill` (SIGKILL to itself);
//! - `term` (SIGTERM to itself: a stop request, as from `scancel` or a requeue, at an exact
//!   step; the job writes its stop checkpoint after that step and exits 75);
//! - `hang` (stops making progress but stays alive, as a deadlock would: a stall);
//! - `stop` (SIGSTOP to itself, 1.5 s later: every thread stops, as on a frozen node);
//! - `slow=SECONDS` (sleeps that long, then goes on: a slow rank, which must not be killed);
//! - `delay=SECONDS` (sleeps that long before *every* step from WHEN on: a slower worker);
//! - `diverge` (nudges one parameter, as a bit flip would: the consistency check must catch it);
//! - `kill_in_checkpoint`, `stop_in_checkpoint`, `hang_in_checkpoint`, `term_in_checkpoint`,
//!   `slow_checkpoint=SECONDS`: the same, while rank RANK writes the first checkpoint at or
//!   after step WHEN, just before its rename (rank 0 writes a whole checkpoint or the index;
//!   under sharded state every rank writes its part: `checkpoint::parts`);
//! - `oom` (an allocation of 64 TiB that cannot return an error: the allocator's out-of-memory
//!   line, `tests/it/memory.rs`).
//!
//! Must not: fire unless `HVTRAIN_INJECT_FAULT` names this rank; know how the job recovers (that
//! is the callers' and the launcher's).

use crate::error::{Error, Result};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Error,
    Panic,
    Kill,
    Term,
    Hang,
    Stop,
    /// Milliseconds.
    Slow(u64),
    /// Milliseconds, before every step from the fault's step on.
    Delay(u64),
    Diverge,
    KillInCheckpoint,
    StopInCheckpoint,
    HangInCheckpoint,
    TermInCheckpoint,
    /// Milliseconds.
    SlowCheckpoint(u64),
    /// An allocation of 64 TiB that cannot return an error: the global allocator's
    /// out-of-memory line and MPI_Abort (`mem::Guarded`).
    Oom,
}

impl Kind {
    fn in_checkpoint(self) -> bool {
        matches!(
            self,
            Kind::KillInCheckpoint
                | Kind::StopInCheckpoint
                | Kind::HangInCheckpoint
                | Kind::TermInCheckpoint
                | Kind::SlowCheckpoint(_)
        )
    }
}

/// Where a fault fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    Step(u64),
    /// Before `MPI_Init` (the rank is the launcher's): stop, kill, hang, slow or term only.
    Init,
    Start,
    Eval,
    /// After the heartbeats end, before the final handshake and MPI_Finalize: stop, kill,
    /// hang, slow or term only.
    Finish,
}

#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub rank: usize,
    pub at: At,
    pub kind: Kind,
}

const USAGE: &str =
    "expected RANK:STEP|init|start|eval|finish:error|panic|kill|term|hang|stop|slow=SECONDS|delay=SECONDS|diverge|kill_in_checkpoint|\
                     stop_in_checkpoint|hang_in_checkpoint|term_in_checkpoint|slow_checkpoint=SECONDS|oom";

pub fn from_env() -> Result<Option<Fault>> {
    let Ok(spec) = std::env::var("HVTRAIN_INJECT_FAULT") else { return Ok(None) };
    parse(&spec).map(Some)
}

fn parse(spec: &str) -> Result<Fault> {
    let bad = || Error::config("environment", "HVTRAIN_INJECT_FAULT", format!("{spec:?}: {USAGE}"));
    let parts: Vec<&str> = spec.split(':').collect();
    let [rank, at, kind] = parts[..] else { return Err(bad()) };
    let secs = |v: &str| -> Result<u64> {
        let s: f64 = v.parse().map_err(|_| bad())?;
        if !(s >= 0.0 && s.is_finite()) {
            return Err(bad());
        }
        Ok((s * 1000.0) as u64)
    };
    let kind = match kind.split_once('=') {
        Some(("slow", v)) => Kind::Slow(secs(v)?),
        Some(("delay", v)) => Kind::Delay(secs(v)?),
        Some(("slow_checkpoint", v)) => Kind::SlowCheckpoint(secs(v)?),
        Some(_) => return Err(bad()),
        None => match kind {
            "error" => Kind::Error,
            "panic" => Kind::Panic,
            "kill" => Kind::Kill,
            "term" => Kind::Term,
            "hang" => Kind::Hang,
            "stop" => Kind::Stop,
            "diverge" => Kind::Diverge,
            "oom" => Kind::Oom,
            "kill_in_checkpoint" => Kind::KillInCheckpoint,
            "stop_in_checkpoint" => Kind::StopInCheckpoint,
            "hang_in_checkpoint" => Kind::HangInCheckpoint,
            "term_in_checkpoint" => Kind::TermInCheckpoint,
            _ => return Err(bad()),
        },
    };
    let at = match at {
        "init" => At::Init,
        "start" => At::Start,
        "eval" => At::Eval,
        "finish" => At::Finish,
        n => At::Step(n.parse().map_err(|_| bad())?),
    };
    if (kind.in_checkpoint() || matches!(kind, Kind::Delay(_))) && !matches!(at, At::Step(_)) {
        return Err(bad());
    }
    if matches!(at, At::Init | At::Finish)
        && !matches!(kind, Kind::Stop | Kind::Kill | Kind::Hang | Kind::Slow(_) | Kind::Term)
    {
        return Err(bad());
    }
    Ok(Fault { rank: rank.parse().map_err(|_| bad())?, at, kind })
}

extern "C" {
    fn getpid() -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Fire the fault if it is this rank's and the coming step's (`step`); `diverge` nudges one
/// parameter (the caller owns them).
pub fn maybe_fire(f: &Option<Fault>, rank: usize, step: u64, diverge: impl FnOnce() -> Result<()>) -> Result<()> {
    let Some(f) = f else { return Ok(()) };
    if let (Kind::Delay(ms), At::Step(from)) = (f.kind, f.at) {
        if f.rank == rank && step >= from {
            if step == from {
                log::info!("injected fault (HVTRAIN_INJECT_FAULT): {} ms before every step from step {step} on", ms);
            }
            std::thread::sleep(Duration::from_millis(ms));
        }
        return Ok(());
    }
    if f.rank != rank || f.at != At::Step(step) || f.kind.in_checkpoint() {
        return Ok(());
    }
    if f.kind == Kind::Diverge {
        return diverge();
    }
    fire(f.kind, &format!("at step {step}"))
}

/// Fire the fault if it is this rank's and step `step`'s, on a rank with no `Stepper` (a
/// parameter server, when the first gradient of that step reaches it).
pub fn at_step(f: &Option<Fault>, rank: usize, step: u64) -> Result<()> {
    let Some(f) = f else { return Ok(()) };
    if f.rank != rank || f.at != At::Step(step) || f.kind.in_checkpoint() || f.kind == Kind::Diverge {
        return Ok(());
    }
    fire(f.kind, &format!("at step {step} (parameter server)"))
}

/// Before `MPI_Init`: fire an `init` fault if it names this process's launcher rank.
pub fn at_init() -> Result<()> {
    let Some(f) = from_env()? else { return Ok(()) };
    if f.at != At::Init || Some(f.rank) != crate::parallel::startup::launcher_rank() {
        return Ok(());
    }
    fire(f.kind, "before MPI_Init")
}

/// Fire the fault if it is this rank's and names this point (`At::Start`, `At::Eval`,
/// `At::Finish`).
pub fn point(at: At) -> Result<()> {
    let Some(f) = from_env()? else { return Ok(()) };
    if f.at != at || Some(f.rank) != crate::sys::rank() || f.kind == Kind::Diverge {
        return Ok(());
    }
    fire(f.kind, &format!("at {at:?}").to_lowercase())
}

fn fire(kind: Kind, when: &str) -> Result<()> {
    match kind {
        Kind::Error => Err(Error::Training(format!("injected fault (HVTRAIN_INJECT_FAULT) {when}"))),
        Kind::Panic => panic!("injected panic (HVTRAIN_INJECT_FAULT) {when}"),
        Kind::Kill => {
            signal_self(9);
            unreachable!("SIGKILL returned")
        }
        Kind::Term => {
            log::info!("injected fault (HVTRAIN_INJECT_FAULT): SIGTERM to this process {when}");
            signal_self(15);
            Ok(())
        }
        Kind::Hang => {
            log::info!("injected fault (HVTRAIN_INJECT_FAULT): hanging (alive, making no progress) {when}");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Kind::Stop => {
            // First let a heartbeat (one a second) carry this phase, so the message that names
            // this rank can say where it stopped.
            std::thread::sleep(Duration::from_millis(1500));
            log::info!("injected fault (HVTRAIN_INJECT_FAULT): stopping this process (SIGSTOP) {when}");
            signal_self(19); // returns once someone sends SIGCONT
            Ok(())
        }
        Kind::Slow(ms) => {
            log::info!("injected fault (HVTRAIN_INJECT_FAULT): sleeping {:.1} s {when}", ms as f64 / 1e3);
            std::thread::sleep(Duration::from_millis(ms));
            Ok(())
        }
        Kind::Oom => {
            let _a = crate::mem::allocating("an injected allocation (HVTRAIN_INJECT_FAULT)");
            let v = std::hint::black_box(vec![0u8; 1 << 46]);
            unreachable!("allocated {} bytes", v.len())
        }
        Kind::Delay(ms) => {
            std::thread::sleep(Duration::from_millis(ms));
            Ok(())
        }
        Kind::Diverge
        | Kind::KillInCheckpoint
        | Kind::StopInCheckpoint
        | Kind::HangInCheckpoint
        | Kind::TermInCheckpoint
        | Kind::SlowCheckpoint(_) => Ok(()),
    }
}

fn signal_self(sig: i32) {
    // SAFETY: plain libc calls; a signal to ourselves.
    unsafe { kill(getpid(), sig) };
}

/// Called while a checkpoint's temporary file is complete but not yet renamed.
pub fn in_checkpoint(f: &Option<Fault>, rank: usize, step: u64) {
    let Some(f) = f else { return };
    let At::Step(from) = f.at else { return };
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if f.rank != rank || step < from || !f.kind.in_checkpoint() || FIRED.swap(true, Ordering::Relaxed) {
        return;
    }
    let when = format!("while writing the checkpoint of step {step}");
    let _ = match f.kind {
        Kind::KillInCheckpoint => fire(Kind::Kill, &when),
        Kind::StopInCheckpoint => fire(Kind::Stop, &when),
        Kind::HangInCheckpoint => fire(Kind::Hang, &when),
        Kind::TermInCheckpoint => fire(Kind::Term, &when),
        Kind::SlowCheckpoint(ms) => fire(Kind::Slow(ms), &when),
        _ => Ok(()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let f = parse("1:50:slow=20").unwrap();
        assert_eq!((f.rank, f.at, f.kind), (1, At::Step(50), Kind::Slow(20_000)));
        assert_eq!(parse("0:start:stop").unwrap().at, At::Start);
        assert_eq!(parse("1:7:term").unwrap().kind, Kind::Term);
        assert_eq!(parse("2:eval:hang").unwrap().at, At::Eval);
        assert_eq!(parse("0:20:slow_checkpoint=1.5").unwrap().kind, Kind::SlowCheckpoint(1500));
        assert_eq!(parse("0:20:stop_in_checkpoint").unwrap().kind, Kind::StopInCheckpoint);
        assert_eq!(parse("0:20:hang_in_checkpoint").unwrap().kind, Kind::HangInCheckpoint);
        assert_eq!(parse("0:20:term_in_checkpoint").unwrap().kind, Kind::TermInCheckpoint);
        assert_eq!(parse("1:init:term").unwrap().at, At::Init);
        assert_eq!(parse("1:finish:term").unwrap().kind, Kind::Term);
        assert_eq!(parse("1:start:oom").unwrap().kind, Kind::Oom);
        assert_eq!(parse("1:1:delay=0.02").unwrap().kind, Kind::Delay(20));
        assert!(parse("1:start:delay=1").is_err());
        for bad in [
            "1:50",
            "1:50:slow",
            "1:50:slow=-1",
            "1:x:kill",
            "1:start:kill_in_checkpoint",
            "1:5:fast=2",
            "1:init:error",
            "0:finish:panic",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
