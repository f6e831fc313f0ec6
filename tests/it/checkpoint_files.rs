//! What hvtrain leaves in output.dir: unfinished temporary files of an interrupted write are
//! removed when the next run starts, and `weights.h5` and checkpoints are fsynced, renamed
//! into place and their directory fsynced before they are announced (checked under strace).

use crate::common;
use common::*;
use std::path::Path;
use std::process::Command;

const D: usize = 5;

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(40, D, 3, 3);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    job(&dir, &[D, 8, 3], "d.h5", None, "[checkpoint]\nevery_steps = 4\n");
    dir
}

#[test]
fn stale_temporary_files_are_removed_at_start() {
    let _g = mpi_lock();
    let dir = setup("files-stale-tmp");
    let run = hvtrain(&["train", "job.toml"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let out = dir.join("out");
    for name in ["ckpt-step000000009.h5.tmp", "weights.h5.tmp"] {
        std::fs::write(out.join(name), b"half a file").unwrap();
    }
    let run = hvtrain(&["train", "job.toml", "--set", "training.epochs=2", "--resume", "auto"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stderr.contains("removed 2 unfinished file(s)"), "{}", run.all());
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// The syscalls on `out/`: each file is opened and fsynced under its temporary name, renamed,
/// and then the directory is opened and fsynced.
#[test]
fn weights_and_checkpoints_are_fsynced_with_their_directory() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("skipped: no strace");
        return;
    }
    let _g = mpi_lock();
    let dir = setup("files-fsync");
    let st = Command::new("timeout")
        .args([
            "60",
            "strace",
            "-f",
            "-qq",
            "-o",
            "trace.txt",
            "-e",
            "trace=openat,fsync,fdatasync,rename,renameat,renameat2",
        ])
        .arg(BIN)
        .args(["train", "job.toml"])
        .current_dir(&dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    for file in ["out/ckpt-step000000004.h5", "out/weights.h5"] {
        check_durable(&trace, file);
    }
    assert!(Path::new(&dir.join("out/weights.h5")).exists());
}

/// In `trace`: an fsync of an fd opened on `FILE.tmp`, then the rename to `FILE`, then an
/// fsync of an fd opened on its directory.
fn check_durable(trace: &str, file: &str) {
    let lines: Vec<&str> = trace.lines().collect();
    let tmp = format!("\"{file}.tmp\"");
    let rename = lines
        .iter()
        .position(|l| l.contains("rename") && l.contains(&tmp) && l.contains(&format!("\"{file}\"")))
        .unwrap_or_else(|| panic!("no rename of {file}.tmp to {file}:\n{trace}"));
    let fd_of = |l: &str| l.rsplit("= ").next().and_then(|r| r.trim().parse::<i32>().ok());
    let synced = |fd: i32, from: usize, to: usize| {
        lines[from..to].iter().any(|l| l.contains(&format!("fsync({fd})")) || l.contains(&format!("fdatasync({fd})")))
    };
    let before = (0..rename).rev().find_map(|i| {
        let l = lines[i];
        (l.contains("openat(") && l.contains(&tmp)).then(|| fd_of(l)).flatten().filter(|&fd| synced(fd, i, rename))
    });
    assert!(before.is_some(), "{file}.tmp is not fsynced before the rename:\n{trace}");
    let dir = format!("\"{}\"", Path::new(file).parent().unwrap().display());
    let after = (rename..lines.len()).find_map(|i| {
        let l = lines[i];
        (l.contains("openat(") && l.contains(&dir)).then(|| fd_of(l)).flatten().filter(|&fd| synced(fd, i, lines.len()))
    });
    assert!(after.is_some(), "the directory of {file} is not fsynced after the rename:\n{trace}");
}

/// Damage is told from another model's checkpoint by the error's kind, not by searching its
/// text: a damaged newest checkpoint is skipped even when its path contains "layers".
#[test]
fn damaged_checkpoint_is_skipped_whatever_its_path() {
    let _g = mpi_lock();
    let dir = setup("files-damaged");
    let run = hvtrain(&["train", "job.toml", "--set", "output.dir=\"layers-out\""], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let out = dir.join("layers-out");
    assert_eq!(checkpoints(&out), ["ckpt-step000000004.h5", "ckpt-step000000008.h5"]);
    let newest = out.join("ckpt-step000000008.h5");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    let run = hvtrain(
        &["train", "job.toml", "--set", "output.dir=\"layers-out\"", "--set", "training.epochs=2", "--resume", "auto"],
        &dir,
        60,
    );
    assert!(run.ok(), "{}", run.all());
    assert!(
        run.stderr.contains("skipping checkpoint")
            && run.stderr.contains("resuming from layers-out/ckpt-step000000004.h5"),
        "{}",
        run.all()
    );
}

/// `--resume FILE` from an older checkpoint starts a new branch: keep-K then counts that
/// branch (and the checkpoint it came from), not the abandoned run's newer files, and
/// `--resume auto` continues the branch rather than the abandoned run.
#[test]
fn resume_auto_follows_the_live_branch() {
    let _g = mpi_lock();
    let dir = setup("files-lineage");
    // Run A: 3 epochs of 10 steps (40 rows, batch 4), a checkpoint every 4 steps, keep 3.
    let a = hvtrain(&["train", "job.toml", "--set", "training.epochs=3"], &dir, 60);
    assert!(a.ok(), "{}", a.all());
    let out = dir.join("out");
    assert_eq!(checkpoints(&out), ["ckpt-step000000020.h5", "ckpt-step000000024.h5", "ckpt-step000000028.h5"]);
    // Run B: from step 20, a checkpoint every step, fails at step 23.
    let mut cmd = Command::new("timeout");
    cmd.args(["60", BIN, "train", "job.toml", "--set", "training.epochs=3", "--set", "checkpoint.every_steps=1"])
        .args(["--resume", "out/ckpt-step000000020.h5"])
        .env("HVTRAIN_INJECT_FAULT", "0:23:error")
        .current_dir(&dir);
    let b = cmd.output().unwrap();
    let b_err = String::from_utf8_lossy(&b.stderr);
    assert!(!b.status.success() && b_err.contains("injected fault"), "{b_err}");
    assert!(b_err.contains("abandoned"), "B's start-up names A's newer checkpoints\n{b_err}");
    assert_eq!(
        checkpoints(&out),
        [
            "ckpt-step000000020.h5",
            "ckpt-step000000021.h5",
            "ckpt-step000000022.h5",
            "ckpt-step000000024.h5",
            "ckpt-step000000028.h5"
        ],
        "keep 3 of B's lineage (22, 21 and A's 20); A's abandoned 24 and 28 untouched"
    );
    let c = hvtrain(
        &["train", "job.toml", "--set", "training.epochs=3", "--set", "checkpoint.every_steps=1", "--resume", "auto"],
        &dir,
        60,
    );
    assert!(c.ok(), "{}", c.all());
    assert!(
        c.stderr.contains("resuming from out/ckpt-step000000022.h5"),
        "auto continues B, not A's step 28\n{}",
        c.all()
    );
}

/// `hvtrain checkpoint check`: on an output directory every checkpoint is checked and
/// described, and the one `--resume auto` takes named (the newest); with the newest truncated
/// it is named not usable, the exit code is 1 and the one before is the choice; a checkpoint
/// in parts (2 ranks, sharded) is checked part by part, and a changed value in one part makes
/// it not usable, naming that part.
#[test]
fn checkpoint_check_describes_and_verifies_checkpoints() {
    let _g = mpi_lock();
    let dir = setup("files-check");
    let run = hvtrain(&["train", "job.toml", "--set", "optimizer.kind='adam'"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let check = |what: &str| hvtrain(&["checkpoint", "check", what], &dir, 60);
    let r = check("out");
    assert!(r.ok(), "{}", r.all());
    let ok_lines = r.stdout.lines().filter(|l| l.contains(": ok: step ")).count();
    assert_eq!(ok_lines, checkpoints(&dir.join("out")).len(), "{}", r.all());
    assert!(r.stdout.contains("whole, optimizer state m and v"), "{}", r.all());
    assert!(r.stdout.contains("--resume auto would continue from out/ckpt-step000000008.h5 (step 8)"), "{}", r.all());
    truncate_half(&dir.join("out/ckpt-step000000008.h5"));
    let r = check("out");
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.stdout.contains("out/ckpt-step000000008.h5: NOT USABLE"), "{}", r.all());
    assert!(r.stdout.contains("--resume auto would continue from out/ckpt-step000000004.h5 (step 4)"), "{}", r.all());
    // In parts.
    let args = [
        "train",
        "job.toml",
        "--set",
        "output.dir='parts'",
        "--set",
        "training.batch_size=2",
        "--set",
        "distribution.shard='gradients'",
        "--set",
        "optimizer.kind='adam'",
    ];
    let run = mpirun_env(2, &[], &args, &dir, 120);
    assert!(run.ok(), "{}", run.all());
    let r = check("parts/ckpt-step000000008.h5");
    assert!(r.ok() && r.stdout.contains("in 2 parts, each checked"), "{}", r.all());
    let part = checkpoint_parts(&dir.join("parts"))
        .into_iter()
        .find(|p| p.starts_with("ckpt-step000000008.") && p.contains("part1of2"));
    let part = dir.join("parts").join(part.expect("part 1 of step 8"));
    {
        let f = hdf5::File::open_rw(&part).unwrap();
        let ds = f.dataset("optimizer/m").unwrap();
        let mut v: Vec<f32> = ds.read_raw().unwrap();
        v[0] += 1.0;
        ds.write_raw(&v).unwrap();
    }
    let r = check("parts/ckpt-step000000008.h5");
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(
        r.stdout.contains("NOT USABLE") && r.stdout.contains(part.file_name().unwrap().to_str().unwrap()),
        "{}",
        r.all()
    );
}

fn truncate_half(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(path, bytes).unwrap();
}
