//! Shared helpers for the integration tests: run the real `hvtrain` binary (alone or under
//! a real `mpirun`, always bounded by `timeout`), and write small HDF5 inputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_hvtrain");

/// MPI jobs from different tests must not run at once on a 2-core machine.
static MPI_LOCK: Mutex<()> = Mutex::new(());

pub fn mpi_lock() -> MutexGuard<'static, ()> {
    MPI_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
    /// Everything the job printed, for assertion messages.
    pub fn all(&self) -> String {
        format!("exit {:?}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

fn finish(out: Output, t: Instant) -> Run {
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: t.elapsed(),
    }
}

/// `mpirun -n ranks hvtrain ARGS...`, killed after `limit_s` seconds.
pub fn mpirun(ranks: usize, args: &[&str], dir: &Path, limit_s: u64) -> Run {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &limit_s.to_string(), "mpirun"]);
    cmd.args(mpirun_flags());
    cmd.args(["-n", &ranks.to_string(), BIN]);
    cmd.args(args);
    run_cmd(cmd, dir)
}

/// As `mpirun`, with environment variables exported to every rank (`-x NAME`).
pub fn mpirun_env(ranks: usize, env: &[(&str, &str)], args: &[&str], dir: &Path, limit_s: u64) -> Run {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &limit_s.to_string(), "mpirun"]);
    cmd.args(mpirun_flags());
    for (k, v) in env {
        cmd.env(k, v);
        cmd.args(["-x", k]);
    }
    cmd.args(["-n", &ranks.to_string(), BIN]);
    cmd.args(args);
    run_cmd(cmd, dir)
}

/// `mpirun -n 1 hvtrain A... : -n 1 hvtrain B...`: ranks started with different arguments.
pub fn mpirun_mpmd(per_rank: &[Vec<&str>], dir: &Path, limit_s: u64) -> Run {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &limit_s.to_string(), "mpirun"]);
    cmd.args(mpirun_flags());
    for (i, a) in per_rank.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", "1", BIN]);
        cmd.args(a);
    }
    run_cmd(cmd, dir)
}

/// The binary alone (no mpirun): data commands, or a 1-rank singleton job.
pub fn hvtrain(args: &[&str], dir: &Path, limit_s: u64) -> Run {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &limit_s.to_string(), BIN]);
    cmd.args(args);
    run_cmd(cmd, dir)
}

fn mpirun_flags() -> Vec<&'static str> {
    // Root is allowed via the environment below; more ranks than cores need oversubscribe,
    // and yield_when_idle keeps busy-polling ranks from starving each other.
    vec!["--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]
}

fn run_cmd(mut cmd: Command, dir: &Path) -> Run {
    // A RUST_LOG given by the test (`mpirun_env`) wins over the test runner's own.
    if !cmd.get_envs().any(|(k, _)| k == "RUST_LOG") {
        cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()));
    }
    cmd.current_dir(dir).env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    // Tests run in parallel threads of one process, and HDF5 opens files without O_CLOEXEC:
    // a child spawned by one test while another test has its input file open for writing
    // inherits that descriptor and its HDF5 file lock, and then hvtrain in a third child cannot
    // open the file ("unable to lock file, errno = 11"). Seen once in CI. The children need no
    // HDF5 locks here: every file a test writes is complete before the test starts hvtrain.
    cmd.env("HDF5_USE_FILE_LOCKING", "FALSE");
    let t = Instant::now();
    let out = cmd.output().expect("run timeout/mpirun (are coreutils and Open MPI installed?)");
    finish(out, t)
}

/// Run `code` with Debian's python3 (python3-numpy, -pandas, -h5py: `make test-deps`) in
/// `dir`; its stdout, or a panic with its stderr.
pub fn python(dir: &Path, code: &str) -> String {
    const PY: &str = "/usr/bin/python3";
    let out = Command::new(PY).arg("-c").arg(code).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("cannot run {PY} (Debian's python3 with python3-pandas and python3-h5py; `make test-deps`): {e}")
    });
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The python with scikit-learn and h5py (the test venv, `make onnx-venv`), if any.
pub fn sklearn_python() -> Option<PathBuf> {
    let p = std::env::var_os("HVTRAIN_ONNX_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/onnx-venv/bin/python"));
    let ok = Command::new(&p).args(["-c", "import sklearn, h5py"]).output().is_ok_and(|o| o.status.success());
    if !ok && std::env::var("HVTRAIN_REQUIRE_ONNX").is_ok_and(|v| v == "1") {
        panic!("no python with scikit-learn and h5py at {} (make onnx-venv)", p.display());
    }
    ok.then_some(p)
}

/// A fresh, empty directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Write `x` float32 [n, d] and `y` int32 [n] (classes) to `path`.
pub fn write_classes(path: &Path, x: &[f32], d: usize, y: &[i32]) {
    let f = hdf5::File::create(path).unwrap();
    let n = y.len();
    assert_eq!(x.len(), n * d);
    f.new_dataset_builder().with_data(ndarray::ArrayView2::from_shape((n, d), x).unwrap()).create("x").unwrap();
    f.new_dataset_builder().with_data(ndarray::ArrayView1::from(y)).create("y").unwrap();
}

/// Deterministic pseudo-random data: n samples of d features in [-1, 1], labels in 0..k
/// that depend on the features (so there is something to learn).
pub fn synthetic(n: usize, d: usize, k: usize, seed: u64) -> (Vec<f32>, Vec<i32>) {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 33) as f64 / (1u64 << 31) as f64 * 2.0 - 1.0) as f32
    };
    let x: Vec<f32> = (0..n * d).map(|_| next()).collect();
    let y = (0..n)
        .map(|i| {
            let row = &x[i * d..(i + 1) * d];
            let v: f32 = row.iter().enumerate().map(|(j, v)| v * (j as f32 + 1.0)).sum();
            ((v.abs() * 3.0) as usize % k) as i32
        })
        .collect();
    (x, y)
}

/// `dir/out/metrics.jsonl`, one JSON object per epoch.
pub fn metrics(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Read a float dataset back (for comparing weights).
pub fn read_f32(path: &Path, name: &str) -> Vec<f32> {
    hdf5::File::open(path).unwrap().dataset(name).unwrap().read_raw().unwrap()
}

/// The largest element-wise difference between two sets of tensors (weights compared).
pub fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0.0, f32::max)
}

/// Every layer's weight and bias (`dense{l}/weight`, `dense{l}/bias`, l < `layers`) of a
/// weights file or checkpoint, in layer order (for comparing weights).
pub fn layer_tensors(path: &Path, layers: usize) -> Vec<Vec<f32>> {
    (0..layers)
        .flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")])
        .map(|t| read_f32(path, &t))
        .collect()
}

/// `mpirun -n ranks hvtrain train job.toml` in `dir` with `env` exported, output.dir `out` and
/// `--set` each of `base` then `sets`; asserts it succeeded; the final weights of its `layers`
/// layers (`layer_tensors`) and the log.
pub fn train_weights(
    dir: &Path,
    out: &str,
    ranks: usize,
    layers: usize,
    env: &[(&str, &str)],
    base: &[&str],
    sets: &[&str],
) -> (Vec<Vec<f32>>, String) {
    let o = format!("output.dir=\"{out}\"");
    let mut args = vec!["train", "job.toml", "--set", &o];
    for s in base.iter().chain(sets) {
        args.extend(["--set", s]);
    }
    let run = mpirun_env(ranks, env, &args, dir, 120);
    assert!(run.ok(), "{env:?} {sets:?} on {ranks} rank(s): training failed\n{}", run.all());
    (layer_tensors(&dir.join(out).join("weights.h5"), layers), run.stderr)
}

/// A small job file: model `layers`, data paths, output dir, extra TOML appended.
pub fn job(dir: &Path, layers: &[usize], train: &str, test: Option<&str>, extra: &str) -> PathBuf {
    let test = test.map(|t| format!("test = \"{t}\"\n")).unwrap_or_default();
    let text = format!(
        "[data]\ntrain = \"{train}\"\n{test}\n[model]\nlayers = {layers:?}\n\n[training]\nepochs = 1\nbatch_size = 4\nseed = 1\n\n[output]\ndir = \"out\"\n{extra}\n"
    );
    let p = dir.join("job.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Write one dataset `name` of any HDF5 element type and shape (1-D, 2-D, ...) into `f`.
pub fn write_dataset<T: hdf5::H5Type>(f: &hdf5::File, name: &str, data: &[T], shape: &[usize]) {
    let arr = ndarray::ArrayViewD::from_shape(ndarray::IxDyn(shape), data).unwrap();
    f.new_dataset_builder().with_data(arr).create(name).unwrap();
}

/// Every regular file directly in `dir` with its bytes, by name (to prove nothing changed).
pub fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

/// The parts of checkpoints written in parts in `dir` (`ckpt-step*.TOKEN.partRofK.h5`), sorted.
pub fn checkpoint_parts(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("ckpt-step") && n.ends_with(".h5") && n.contains(".part"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A checkpoint's `params` (the stored order: the layers last to first, each weight [in, out]
/// then bias), `optimizer/m` or `optimizer/v`, whether the file holds them or names parts; the
/// parts read as a user would with h5py, from the documented layout (`parts/token`, each
/// part's `ranges` (start, length) and values), not through hvtrain's reader.
pub fn ckpt_stored(path: &Path, name: &str, layers: usize) -> Vec<f32> {
    let f = hdf5::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let Ok(g) = f.group("parts") else {
        if name != "params" {
            return read_f32(path, name);
        }
        return (0..layers)
            .rev()
            .flat_map(|l| [read_f32(path, &format!("dense{l}/weight")), read_f32(path, &format!("dense{l}/bias"))])
            .flatten()
            .collect();
    };
    let token = g.dataset("token").unwrap().read_raw::<u64>().unwrap()[0];
    let k = g.dataset("checksums").unwrap().read_raw::<u64>().unwrap().len();
    let step = f.dataset("step").unwrap().read_raw::<i64>().unwrap()[0];
    let mut out: Vec<Option<f32>> = Vec::new();
    for r in 0..k {
        let part = path.with_file_name(format!("ckpt-step{step:09}.{token:016x}.part{r}of{k}.h5"));
        let p = hdf5::File::open(&part).unwrap_or_else(|e| panic!("{}: {e}", part.display()));
        let ranges = p.dataset("ranges").unwrap().read_raw::<i64>().unwrap();
        let values = p.dataset(name).unwrap().read_raw::<f32>().unwrap();
        let mut at = 0;
        for c in ranges.chunks(2) {
            let (s, n) = (c[0] as usize, c[1] as usize);
            if out.len() < s + n {
                out.resize(s + n, None);
            }
            for i in 0..n {
                assert!(out[s + i].is_none(), "position {} in two parts", s + i);
                out[s + i] = Some(values[at + i]);
            }
            at += n;
        }
        assert_eq!(at, values.len(), "{}: {name} has values beyond its ranges", part.display());
    }
    out.into_iter().enumerate().map(|(i, v)| v.unwrap_or_else(|| panic!("position {i} is in no part"))).collect()
}

/// Names of the checkpoint files (`ckpt-step*.h5`, indexes of parts included) in `dir`, sorted.
pub fn checkpoints(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("ckpt-step") && n.ends_with(".h5") && !n.contains(".part"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Convert one Fashion-MNIST split (`train` or `t10k`) from Debian's `dataset-fashion-mnist`
/// into `out` with the real `hvtrain data import-idx`.
pub fn import_fashion_mnist(split: &str, out: &Path, dir: &Path) {
    const FMNIST: &str = "/usr/share/datasets/fashion-mnist";
    assert!(
        Path::new(FMNIST).join(format!("{split}-images-idx3-ubyte.gz")).exists(),
        "Fashion-MNIST is missing: install the Debian package dataset-fashion-mnist (`make deps`)"
    );
    let r = hvtrain(
        &[
            "data",
            "import-idx",
            &format!("{FMNIST}/{split}-images-idx3-ubyte.gz"),
            &format!("{FMNIST}/{split}-labels-idx1-ubyte.gz"),
            out.to_str().unwrap(),
        ],
        dir,
        120,
    );
    assert!(r.ok(), "{}", r.all());
}

/// The global step at which a signal stopped the job, from rank 0's line "stopped by a signal
/// at step N" (or "after epoch E": the step E × `steps_per_epoch`) in `log`.
pub fn stop_step(log: &str, steps_per_epoch: u64) -> u64 {
    let rest = log
        .split("stopped by a signal ")
        .nth(1)
        .unwrap_or_else(|| panic!("no \"stopped by a signal\" line in the log\n{log}"));
    let number = |s: &str| s.split(|c: char| !c.is_ascii_digit()).next().and_then(|n| n.parse::<u64>().ok());
    if let Some(n) = rest.strip_prefix("at step ").and_then(number) {
        n
    } else if let Some(e) = rest.strip_prefix("after epoch ").and_then(number) {
        e * steps_per_epoch
    } else {
        panic!("cannot read the step from the stop line {:?}", rest.lines().next());
    }
}

/// The `step` stored in a checkpoint file.
pub fn checkpoint_step(path: &Path) -> u64 {
    let f = hdf5::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let v: Vec<i64> = f.dataset("step").unwrap().read_raw().unwrap();
    v[0] as u64
}

/// A signal must make the job write a checkpoint at the step where it stops (an earlier
/// periodic checkpoint does not count): `out`/ckpt-step{N:09}.h5 exists and stores step N,
/// N read from the stop line in `log`. Returns N.
pub fn assert_stop_checkpoint(out: &Path, log: &str, steps_per_epoch: u64) -> u64 {
    let n = stop_step(log, steps_per_epoch);
    let path = out.join(format!("ckpt-step{n:09}.h5"));
    assert!(
        path.exists(),
        "the job stopped at step {n} but wrote no checkpoint there: {} is missing (checkpoints: {:?})\n{log}",
        path.display(),
        checkpoints(out)
    );
    assert_eq!(checkpoint_step(&path), n, "{} stores another step", path.display());
    n
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// kill(2): signal `sig` to a process the test started (or one of its descendants).
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2); no memory is involved.
    unsafe { kill(pid as i32, sig) };
}

/// The processes whose parent is `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let out = Command::new("pgrep").args(["-P", &pid.to_string()]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// Whether `pid` is running (exists and is not a zombie).
pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// `timeout LIMIT mpirun -n RANKS hvtrain ARGS...` started in the background, its stderr
/// collected line by line as it comes (to act when a line shows up: signal it mid-run).
pub struct Background {
    pub child: std::process::Child,
    pub log: std::sync::Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn mpirun(ranks: usize, args: &[&str], dir: &Path, limit_s: u64) -> Background {
        use std::io::BufRead;
        let mut child = Command::new("timeout")
            .args([&limit_s.to_string(), "mpirun"])
            .args(mpirun_flags())
            .args(["-n", &ranks.to_string(), BIN])
            .args(args)
            .current_dir(dir)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("HDF5_USE_FILE_LOCKING", "FALSE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let log = std::sync::Arc::new(Mutex::new(String::new()));
        let (l, err) = (log.clone(), child.stderr.take().unwrap());
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(|l| l.ok()) {
                l.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        Background { child, log, reader: Some(reader) }
    }

    /// Wait until the log holds `text`, at most `limit_s` seconds (then the test fails).
    pub fn wait_for(&self, text: &str, limit_s: u64) {
        let t = Instant::now();
        while !self.log.lock().unwrap().contains(text) {
            assert!(t.elapsed() < Duration::from_secs(limit_s), "never saw {text:?}\n{}", self.log.lock().unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The rank processes (mpirun's children, under timeout).
    pub fn ranks(&self) -> Vec<u32> {
        let mpirun = children(self.child.id());
        assert_eq!(mpirun.len(), 1, "one mpirun under timeout");
        children(mpirun[0])
    }

    /// Wait for the end: the exit code and the whole log.
    pub fn finish(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let log = self.log.lock().unwrap().clone();
        (status.code(), log)
    }
}

/// The test venv's python (onnx, scikit-learn, pandas, pyarrow: `make onnx-venv`), from
/// HVTRAIN_ONNX_PYTHON; None (the test skips) when unset, a failure when `make test` requires it.
pub fn venv_python() -> Option<String> {
    let Ok(py) = std::env::var("HVTRAIN_ONNX_PYTHON") else {
        assert!(
            std::env::var_os("HVTRAIN_REQUIRE_ONNX").is_none(),
            "HVTRAIN_ONNX_PYTHON (the test venv: make onnx-venv) is not set"
        );
        eprintln!("skipped: HVTRAIN_ONNX_PYTHON is not set (make test sets it up)");
        return None;
    };
    Some(py)
}

pub fn venv(py: &str, dir: &Path, code: &str) -> String {
    let out = Command::new(py).arg("-c").arg(code).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
