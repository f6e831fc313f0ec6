//! Python installations, where hvtrain looks for what pip put there: the `hdf5plugin` package's
//! HDF5 filter plugins, the `nvidia-nccl` package's NCCL (PyTorch installs it). Two ways:
//! `site_folders` (the active virtual or conda environment, `~/.local`, the system's Python:
//! a folder walk, no process) and `ask` (the `python3` on PATH runs one line: pyenv, conda and
//! `module load python` installs the walk misses), bounded in time.
//!
//! Must not: log, or know what the folders are for.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `python3` may take (a conda or module Python on a shared file system can be slow
/// to start).
pub const LIMIT: Duration = Duration::from_secs(20);

/// `rel` (e.g. `hdf5plugin/plugins`) inside the site-packages of the Pythons commonly found:
/// the active virtual or conda environment, the user's, the system's; those that exist.
pub fn site_folders(rel: &str) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(PathBuf::from(v).join("lib"));
        }
    }
    if let Some(h) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(h).join(".local/lib"));
    }
    roots.extend(["/usr/local/lib", "/usr/lib"].map(PathBuf::from));
    let mut out = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else { continue };
        let mut pys: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        pys.sort();
        for py in pys.iter().rev().filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python3")))
        {
            for site in ["site-packages", "dist-packages"] {
                let d = py.join(site).join(rel);
                if d.exists() {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// The `python3` on PATH run with `-c code`: its first line of output and the interpreter's
/// path, when it exits 0 within `LIMIT`; None otherwise (no python3, the import failed).
pub fn ask(code: &str) -> Option<(String, PathBuf)> {
    let python = which("python3")?;
    let out = run_limited(Command::new(&python).args(["-c", code]), LIMIT)?;
    let line = out.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some((line, python))
}

/// The first `name` on PATH that is an executable file.
pub fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `cmd`'s standard output when it exits 0 within `limit` (killed past it); None otherwise.
fn run_limited(cmd: &mut Command, limit: Duration) -> Option<String> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    // Read on a thread, so a chatty child cannot fill the pipe and stall before it exits.
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok().map(|_| s)
    });
    let t = Instant::now();
    loop {
        match child.try_wait().ok()? {
            Some(status) => return if status.success() { reader.join().ok()? } else { None },
            None if t.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_on_path_answers_and_a_hung_one_is_cut_off() {
        let dir = std::env::temp_dir().join(format!("hvtrain-python-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("fake");
        std::fs::write(&script, "#!/bin/sh\necho /some/where\necho more\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert_eq!(run_limited(&mut Command::new(&script), LIMIT).as_deref(), Some("/some/where\nmore\n"));
        std::fs::write(&script, "#!/bin/sh\nsleep 30\n").unwrap();
        let t = Instant::now();
        assert_eq!(run_limited(&mut Command::new(&script), Duration::from_millis(300)), None);
        assert!(t.elapsed() < Duration::from_secs(5), "not cut off: {:?}", t.elapsed());
        std::fs::write(&script, "#!/bin/sh\nexit 3\n").unwrap();
        assert_eq!(run_limited(&mut Command::new(&script), LIMIT), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
