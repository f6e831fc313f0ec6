//! The process itself, the lowest layer: its rank (set once MPI has started), whole-line
//! writes to stderr, the exit that runs no handlers, and facts from Linux's /proc for the log
//! and the benchmarks (time since the process started, so "time to first step" includes MPI
//! start-up and dynamic loading; peak RSS and virtual memory; the `ulimit -v` limit).
//! Uses nothing of ours. Must not: grow policy (what to log, when to exit is the callers').

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// This process's rank, for log lines, the panic hook, fault points and the allocator's
/// out-of-memory line (usize::MAX before MPI starts).
static RANK: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Record this process's rank (once MPI has started).
pub fn set_rank(rank: usize) {
    RANK.store(rank, Ordering::Relaxed);
}

/// This process's rank, None before MPI has started.
pub fn rank() -> Option<usize> {
    match RANK.load(Ordering::Relaxed) {
        usize::MAX => None,
        r => Some(r),
    }
}

/// The sweep trial this process trains (usize::MAX: none), for log lines.
static TRIAL: AtomicUsize = AtomicUsize::new(usize::MAX);

thread_local! {
    /// A thread that never trains (a sweep's scheduler): its lines carry no trial.
    static UNTAGGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// This thread's log lines name no trial (a sweep's scheduler thread, beside a trial).
pub fn untagged_thread() {
    UNTAGGED.with(|u| u.set(true));
}

/// Record the sweep trial this process trains now (None between trials).
pub fn set_trial(trial: Option<usize>) {
    TRIAL.store(trial.unwrap_or(usize::MAX), Ordering::Relaxed);
}

/// The rank for a log line: its number, or "-" before MPI has started; "3 trial 12" while a
/// sweep's trial trains.
pub fn rank_tag() -> String {
    let r = rank().map_or_else(|| "-".into(), |r| r.to_string());
    match TRIAL.load(Ordering::Relaxed) {
        _ if UNTAGGED.with(|u| u.get()) => r,
        usize::MAX => r,
        t => format!("{r} trial {t}"),
    }
}

/// Write one whole line to stderr in a single call: ranks share the terminal, and a line
/// written in pieces interleaves with other ranks' lines.
pub fn say(line: String) {
    let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
}

/// Leave at once, running no exit handlers (they may block in MPI when the network is gone).
pub fn hard_exit(code: i32) -> ! {
    extern "C" {
        fn _exit(code: i32) -> !;
    }
    // SAFETY: _exit has no preconditions.
    unsafe { _exit(code) }
}

/// Seconds since this process was started by the kernel, if /proc tells.
pub fn seconds_since_start() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 22 (starttime, in clock ticks since boot); the command name (field 2) may hold
    // spaces, so count from the closing parenthesis.
    let after = &stat[stat.rfind(')')? + 2..];
    let start_ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc_sysconf_clk_tck() } as f64;
    Some(uptime - start_ticks / hz)
}

extern "C" {
    fn sysconf(name: i32) -> i64;
}

unsafe fn libc_sysconf_clk_tck() -> i64 {
    const SC_CLK_TCK: i32 = 2; // Linux
    let v = sysconf(SC_CLK_TCK);
    if v > 0 {
        v
    } else {
        100
    }
}

/// The CPUs online on this node (`sysconf(_SC_NPROCESSORS_ONLN)`), whatever this process's
/// affinity mask allows; at least 1.
pub fn online_cpus() -> usize {
    const SC_NPROCESSORS_ONLN: i32 = 84; // Linux
                                         // SAFETY: sysconf has no preconditions.
    let n = unsafe { sysconf(SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Peak resident set size (VmHWM) in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    status_mib("VmHWM:")
}

/// Peak virtual memory (VmPeak) in MiB: what `ulimit -v` limits.
pub fn vm_peak_mib() -> Option<f64> {
    status_mib("VmPeak:")
}

/// The processor's name ("model name" in /proc/cpuinfo), or "unknown".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// This machine's host name (/proc/sys/kernel/hostname), or "unknown".
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "unknown".into(), |h| h.trim().to_string())
}

/// Virtual memory now (VmSize) in MiB.
pub fn vm_size_mib() -> Option<f64> {
    status_mib("VmSize:")
}

fn status_mib(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The soft limit on this process's virtual memory in bytes (`ulimit -v`), None when unlimited.
pub fn address_space_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    // "Max address space            unlimited            unlimited            bytes"
    limits.lines().find(|l| l.starts_with("Max address space"))?.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn proc_facts_are_sane() {
        let s = super::seconds_since_start().unwrap();
        assert!((0.0..3600.0).contains(&s), "{s}");
        let r = super::peak_rss_mib().unwrap();
        assert!(r > 1.0 && r < 100_000.0, "{r}");
        assert!(super::vm_peak_mib().unwrap() >= super::vm_size_mib().unwrap());
    }
}
