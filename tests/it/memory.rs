//! Memory under a per-rank limit, with a real `mpirun` and a real `ulimit -v`: a model whose
//! state does not fit one rank ends the whole job with one clear out-of-memory error (naming
//! the rank, what was being allocated, this rank's model state and the way out; non-zero exit;
//! no hang), and the same model under the same limit trains with `parallel.tensor = 4`.
//!
//! The limit is virtual memory, which counts more than the model: MPI's mappings, the threads'
//! stacks and malloc's arenas (about 580 MiB per rank on the machine this was written on). So
//! the test measures that baseline first (a tiny job's VmPeak, which hvtrain logs) and sets the
//! limit to baseline + 2.6 × the model's parameter bytes P. At T = 1 a rank's own allocations
//! need baseline + 4 P (the starting parameters received from rank 0, two gradient buffers and
//! the backend's copy of the parameters; plain SGD keeps no optimizer state), so one of them
//! fails, before MPI's all-reduce would need its own temporary buffer. At T = 4 a rank holds
//! about 0.75 P (a quarter of the parameters and of the two gradient buffers); rank 0 also
//! holds the whole parameters at start-up (before its part) and, at the end, the gathered
//! shards and the assembled model for weights.h5 (2 P); measured, rank 0 peaks at about
//! baseline + 0.7 P. The margins are wide because the mapped memory moves by glibc's malloc
//! arenas (64 MiB of address space each, one per thread that allocates) from run to run: with
//! the limit at baseline + 3.25 P a CI run once fitted all of T = 1's own allocations and ran
//! out inside MPI_Allreduce instead (MPI_ERR_INTERN, no hvtrain line). Now T = 1 is 1.4 P
//! (about 4 arenas) over the limit, and T = 4's peak about 1.9 P under it.

use crate::common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const IN: usize = 64;
/// 64-7168-7168-10: 51.9 M parameters, 198 MiB.
const LAYERS: [usize; 4] = [IN, 7168, 7168, 10];
const RANKS: usize = 4;

fn n_params(layers: &[usize]) -> usize {
    layers.windows(2).map(|w| w[0] * w[1] + w[1]).sum()
}

/// `mpirun -n 4 hvtrain train job.toml --set ...` with every process (mpirun, its daemon, the
/// ranks) under `ulimit -v limit_mib` (none when 0), killed after `limit_s` seconds.
fn train_limited(dir: &Path, limit_mib: u64, sets: &[&str], limit_s: u64) -> Run {
    let ulimit = if limit_mib > 0 { format!("ulimit -v {} && ", limit_mib * 1024) } else { String::new() };
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("{ulimit}exec \"$@\""), "sh"]);
    cmd.args(["timeout", "-k", "5", &limit_s.to_string(), "mpirun"]);
    cmd.args(["--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]);
    cmd.args(["-n", &RANKS.to_string(), BIN, "train", "job.toml"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    cmd.current_dir(dir)
        .env("RUST_LOG", "info")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("HDF5_USE_FILE_LOCKING", "FALSE");
    let t = Instant::now();
    let out = cmd.output().expect("run sh/timeout/mpirun");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: t.elapsed(),
    }
}

/// Every rank's VmPeak in MiB from rank 0's "peak memory per rank" line.
fn vm_peaks(log: &str) -> Vec<f64> {
    let line =
        log.lines().find(|l| l.contains("peak memory per rank")).unwrap_or_else(|| panic!("no peak line\n{log}"));
    let list = line.split("virtual (VmPeak) [").nth(1).and_then(|r| r.split(']').next()).expect("VmPeak list");
    list.split(", ").map(|v| v.parse().unwrap()).collect()
}

#[test]
fn a_model_too_big_for_one_rank_fails_clearly_and_trains_split_over_four() {
    let _l = mpi_lock();
    let dir = scratch("memory_limit");
    // 4 steps of 4 rows for one data rank (T = 4); one step per rank at D = 4.
    let (x, y) = synthetic(16, IN, 10, 3);
    write_classes(&dir.join("d.h5"), &x, IN, &y);
    job(&dir, &LAYERS, "d.h5", None, "[optimizer]\nkind = \"sgd\"\nlr = 0.01\nmomentum = 0.0\n");
    let p_mib = n_params(&LAYERS) as f64 * 4.0 / 1048576.0;

    // The baseline: the same job with a tiny model, no limit.
    let tiny = train_limited(&dir, 0, &["model.layers=[64, 8, 10]", "output.dir=\"tiny\""], 120);
    assert!(tiny.ok(), "{}", tiny.all());
    let base = vm_peaks(&tiny.stderr).into_iter().fold(0.0, f64::max);
    assert!(base > 10.0, "baseline VmPeak {base} MiB");
    let limit = (base + 2.6 * p_mib) as u64;
    eprintln!("baseline VmPeak {base:.0} MiB, model parameters {p_mib:.0} MiB: ulimit -v {limit} MiB per process");

    // T = 1: out of memory on some rank, one clear line, the whole job ends non-zero.
    let r = train_limited(&dir, limit, &["output.dir=\"t1\""], 120);
    assert_ne!(r.code, Some(0), "{}", r.all());
    assert_ne!(r.code, Some(124), "timed out: the job hung after running out of memory\n{}", r.all());
    assert!(r.elapsed.as_secs() < 90, "took {:?}\n{}", r.elapsed, r.all());
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("out of memory: allocating"))
        .unwrap_or_else(|| panic!("no out-of-memory line\n{}", r.all()));
    let rank: usize = line
        .split("hvtrain: error on rank ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the line names no rank: {line}"));
    assert!(rank < RANKS, "{line}");
    for want in [
        " MiB for ",
        &format!("of the per-process virtual memory limit of {limit} MiB (ulimit -v)"),
        &format!("this rank's model state is params {p_mib:.1} MiB, grads {:.1} MiB, optimizer 0.0 MiB", 2.0 * p_mib),
        "split over 1 rank(s)",
        "split the model over ranks with parallel.tensor / parallel.pipeline",
        "use a smaller model or training.batch_size, or ask for more memory per rank",
    ] {
        assert!(line.contains(want), "missing {want:?} in\n{line}");
    }
    assert!(!r.stderr.contains("memory allocation of"), "Rust's bare abort instead of the error\n{}", r.all());
    assert!(!Path::new(&dir.join("t1/weights.h5")).exists());

    // T = 4 under the same limit: trains to the end and writes the whole model.
    let r = train_limited(&dir, limit, &["parallel.tensor=4", "output.dir=\"t4\""], 240);
    assert!(r.ok(), "parallel.tensor = 4 under ulimit -v {limit} MiB\n{}", r.all());
    assert!(r.stderr.contains("done after 4 steps"), "{}", r.all());
    assert!(r.stderr.contains("split over 4 rank(s)"), "{}", r.all());
    let peaks = vm_peaks(&r.stderr);
    assert!(peaks.iter().all(|&p| p < limit as f64), "{peaks:?} over {limit}");
    eprintln!("parallel.tensor = 4: VmPeak per rank {peaks:?} MiB under the limit of {limit} MiB");
    assert_eq!(read_f32(&dir.join("t4/weights.h5"), "dense1/weight").len(), 7168 * 7168);
}

/// An allocation that cannot return an error (a `Vec` anywhere) and fails: the global
/// allocator prints the same kind of line, naming the rank, and ends the whole job; no
/// bare "memory allocation of N bytes failed" abort, no hang.
#[test]
fn a_failed_allocation_anywhere_ends_the_job_with_the_out_of_memory_line() {
    let _l = mpi_lock();
    let dir = scratch("memory_alloc_hook");
    let (x, y) = synthetic(16, 4, 3, 5);
    write_classes(&dir.join("d.h5"), &x, 4, &y);
    job(&dir, &[4, 8, 3], "d.h5", None, "");
    let r = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:start:oom")], &["train", "job.toml"], &dir, 60);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.elapsed.as_secs() < 30, "took {:?}\n{}", r.elapsed, r.all());
    let line = r
        .stderr
        .lines()
        .find(|l| l.starts_with("hvtrain: error on rank 1: out of memory: allocating 67108864.0 MiB"))
        .unwrap_or_else(|| panic!("no out-of-memory line from rank 1\n{}", r.all()));
    for want in ["for an injected allocation (HVTRAIN_INJECT_FAULT) failed", "split the model over ranks"] {
        assert!(line.contains(want), "missing {want:?} in\n{line}");
    }
    assert!(!r.stderr.contains("memory allocation of"), "{}", r.all());
}
