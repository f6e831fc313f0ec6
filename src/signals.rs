//! Preemption signals. SIGTERM, SIGINT and SIGUSR1 (what Slurm sends on `scancel`, at the
//! wall-time limit, and with `--signal=USR1@N`) set a flag; the training loop agrees on it
//! across ranks at the next step boundary, writes a checkpoint and exits with
//! `EXIT_PREEMPTED`. A second signal exits at once with `EXIT_SECOND_SIGNAL`.

use std::sync::atomic::{AtomicBool, Ordering};

/// Exit code after a signal-driven checkpoint: requeue the job and `--resume auto`.
pub const EXIT_PREEMPTED: i32 = 75; // EX_TEMPFAIL
/// Exit code when a second signal arrives before the checkpoint is done.
pub const EXIT_SECOND_SIGNAL: i32 = 130;

static STOP: AtomicBool = AtomicBool::new(false);

pub fn install() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    for sig in [SIGTERM, SIGINT, SIGUSR1] {
        // Order matters: the shutdown check runs before the flag is set by this signal.
        signal_hook::flag::register_conditional_shutdown(sig, EXIT_SECOND_SIGNAL, &STOP)?;
        signal_hook::flag::register(sig, &STOP)?;
    }
    Ok(())
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
