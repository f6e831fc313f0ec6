//! The start-up limit: a timer armed at the first line of `main`, before `MPI_Init`, and
//! disarmed when the heartbeats run (`liveness`). A rank stopped, crashed or hung before or
//! inside `MPI_Init` holds every other rank in `MPI_Init` with no end (Open MPI and Slurm set
//! no limit by default); when the timer fires, this rank prints one line naming the phase it is
//! stuck in and exits 1, so that `mpirun` or `srun` ends the rest of the job.
//! `distribution.startup_seconds` (HVTRAIN_STARTUP_SECONDS) sets it; the job file is read for
//! it before `MPI_Init`. The rank before `MPI_Init` is the launcher's (`launcher_rank`).
//!
//! Must not: call MPI (it runs while MPI may be stuck) or block the thread that arms it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ARMED: AtomicBool = AtomicBool::new(false);
static PHASE: Mutex<&'static str> = Mutex::new("the process start");

/// This process's rank as the launcher set it (Open MPI, PMIx, MPICH/Hydra, Slurm), before
/// `MPI_Init` can tell.
pub fn launcher_rank() -> Option<usize> {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.parse().ok()))
}

/// Where start-up is now, for the line the timer prints.
pub fn phase(p: &'static str) {
    *PHASE.lock().unwrap_or_else(|e| e.into_inner()) = p;
}

/// Arm the timer for `secs` seconds from now.
pub fn arm(secs: f64) {
    ARMED.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let spawned = std::thread::Builder::new().name("hvtrain-startup".into()).spawn(move || {
        while Instant::now() < deadline {
            if !ARMED.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !ARMED.load(Ordering::Acquire) {
            return;
        }
        let rank = crate::sys::rank().or_else(launcher_rank).map_or_else(|| "?".into(), |r| r.to_string());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let phase = *PHASE.lock().unwrap_or_else(|e| e.into_inner());
        crate::sys::say(format!(
            "hvtrain: error on rank {rank} ({}): start-up did not finish within {secs} s (distribution.startup_seconds; \
             HVTRAIN_STARTUP_SECONDS overrides): stuck in {phase}. A rank that never arrived (stopped, crashed, or still \
             loading on a slow file system) holds the others there; this rank exits 1 so that the launcher ends the job",
            host.trim()
        ));
        crate::sys::hard_exit(1);
    });
    if spawned.is_err() {
        ARMED.store(false, Ordering::Release); // no thread: no limit, as before
    }
}

/// The heartbeats run: from here `liveness` tells a stopped or gone rank.
pub fn disarm() {
    ARMED.store(false, Ordering::Release);
}
