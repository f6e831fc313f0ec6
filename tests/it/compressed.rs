//! Compressed HDF5 as scientists write it (h5py), read through HDF5's filters:
//!
//! - Debian's h5py (`python3-h5py`, the same libhdf5 and plugin folder as hvtrain) writes the
//!   training set with gzip, LZF (built into hvtrain), Blosc (zstd and lz4 inside), LZ4, BZip2
//!   and ZFP (reversible); `hvtrain data check` lists each filter as available and training on
//!   each gives the uncompressed file's weights bit for bit;
//! - the `hdf5plugin` package (PyPI, in the test venv) writes Zstd, Bitshuffle, Blosc2 and SZ3:
//!   read through HDF5_PLUGIN_PATH, and found without it in the active virtual environment;
//!   lossless ones train to the same bits, SZ3 (lossy, absolute error 1e-6) within 1e-3;
//! - a filter HDF5 cannot load (HDF5_PLUGIN_PATH pointing elsewhere) is an error on every rank
//!   before the first step, naming the file, the dataset, the filter's id and name and where to
//!   get it; the job ends non-zero and writes no weights; `data check` exits 1 and says so.

use crate::common;
use common::*;
use std::path::Path;
use std::process::Command;

const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// The data every file holds: 240 rows of 6 features, 3 classes.
const MAKE: &str = "
import numpy as np
rng = np.random.default_rng(3)
x = rng.random((240, 6), dtype=np.float32)
y = rng.integers(0, 3, 240).astype(np.int32)
";

fn python(py: &str, dir: &Path, code: &str) {
    let out = Command::new(py).arg("-c").arg(format!("{MAKE}{code}")).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("cannot run {py} (Debian's python3 with python3-h5py, `make test-deps` installs it): {e}")
    });
    assert!(out.status.success(), "{py}: {}", String::from_utf8_lossy(&out.stderr));
}

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    job(&dir, &[6, 8, 3], "none.h5", None, "");
    dir
}

/// One epoch on 1 rank on `file`; the weights.
fn train_on(dir: &Path, file: &str, env: &[(&str, &str)]) -> Vec<Vec<f32>> {
    let (w, _) = train_weights(dir, &format!("out-{file}"), 1, 2, env, &[], &[&format!("data.train=\"{file}\"")]);
    w
}

fn check(dir: &Path, file: &str, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new("timeout");
    cmd.args(["60", env!("CARGO_BIN_EXE_hvtrain"), "data", "check", file]).current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: std::time::Duration::ZERO,
    }
}

#[test]
fn debian_filters_train_like_the_uncompressed_file() {
    let _g = mpi_lock();
    let dir = setup("compressed-debian");
    let files = [
        ("none", "{}"),
        ("gzip", "dict(compression='gzip', compression_opts=6, shuffle=True)"),
        ("lzf", "dict(compression='lzf')"),
        ("blosc_zstd", "dict(compression=32001, compression_opts=(2, 2, 4, 0, 5, 1, 5))"),
        ("blosc_lz4", "dict(compression=32001, compression_opts=(2, 2, 4, 0, 5, 1, 1))"),
        ("lz4", "dict(compression=32004)"),
        ("bzip2", "dict(compression=307)"),
        ("zfp", "dict(compression=32013, compression_opts=(5, 0, 0, 0, 0, 0))"),
    ];
    for (name, opts) in files {
        python(
            SYSTEM_PYTHON,
            &dir,
            &format!(
                "import h5py\nwith h5py.File('{name}.h5', 'w') as f:\n    f.create_dataset('x', data=x, chunks=(60, 6), **{opts})\n    \
                 f.create_dataset('y', data=y, chunks=(60,))\n"
            ),
        );
    }
    let plain = train_on(&dir, "none.h5", &[]);
    for (name, _) in &files[1..] {
        let file = format!("{name}.h5");
        let c = check(&dir, &file, &[]);
        assert!(c.ok() && c.stdout.contains("(available)"), "{file}: {}", c.all());
        assert_eq!(train_on(&dir, &file, &[]), plain, "{file}: weights differ from the uncompressed file's");
    }
}

#[test]
fn hdf5plugin_filters_by_plugin_path_and_by_virtual_env() {
    let _g = mpi_lock();
    let Ok(py) = std::env::var("HVTRAIN_ONNX_PYTHON") else {
        assert!(
            std::env::var_os("HVTRAIN_REQUIRE_ONNX").is_none(),
            "HVTRAIN_ONNX_PYTHON (the test venv with h5py and hdf5plugin) is not set"
        );
        eprintln!("skipped: HVTRAIN_ONNX_PYTHON is not set (make test sets it up)");
        return;
    };
    let dir = setup("compressed-hdf5plugin");
    let files = [
        ("none", "{}"),
        ("zstd", "hdf5plugin.Zstd()"),
        ("bitshuffle", "hdf5plugin.Bitshuffle()"),
        ("blosc2", "hdf5plugin.Blosc2()"),
        ("sz3", "hdf5plugin.SZ3(absolute=1e-6)"),
    ];
    for (name, opts) in files {
        python(
            &py,
            &dir,
            &format!(
                "import h5py, hdf5plugin\nwith h5py.File('{name}.h5', 'w') as f:\n    f.create_dataset('x', data=x, chunks=(60, 6), **{opts})\n    \
                 f.create_dataset('y', data=y, chunks=(60,))\n"
            ),
        );
    }
    let venv = Path::new(&py).parent().unwrap().parent().unwrap().to_str().unwrap().to_string();
    let out = Command::new(&py).args(["-c", "import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)"]).output().unwrap();
    let plugins = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let plain = train_on(&dir, "none.h5", &[]);
    // A python3 on PATH that has hdf5plugin where the folder search does not look (a pyenv,
    // conda or module Python): the venv's python3, linked from a folder put first on PATH, with
    // VIRTUAL_ENV unset and HOME an empty folder.
    let bin = dir.join("pybin");
    std::fs::create_dir_all(&bin).unwrap();
    // A shell script, as pyenv's shims are (a symlink would leave the venv behind).
    std::fs::write(bin.join("python3"), format!("#!/bin/sh\nexec {py} \"$@\"\n")).unwrap();
    std::fs::set_permissions(bin.join("python3"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.to_str().unwrap().to_string();
    for (name, _) in &files[1..] {
        let file = format!("{name}.h5");
        let on_path = [("PATH", path.as_str()), ("HOME", home.as_str())];
        let (w, log) =
            train_weights(&dir, &format!("out-path-{file}"), 1, 2, &on_path, &[], &[&format!("data.train=\"{file}\"")]);
        assert!(
            log.contains("loads from hdf5plugin.PLUGIN_PATH of the python3 on PATH") && log.contains(&plugins),
            "{file}: where the plugin came from is not logged\n{log}"
        );
        assert!(max_diff(&w, &plain) < 1e-3, "{file} through the python3 on PATH");
        let c = check(&dir, &file, &on_path);
        assert!(
            c.ok() && c.stdout.contains("(available)") && c.stdout.contains("hdf5plugin.PLUGIN_PATH of"),
            "{}",
            c.all()
        );
        for env in [[("HDF5_PLUGIN_PATH", plugins.as_str())], [("VIRTUAL_ENV", venv.as_str())]] {
            let c = check(&dir, &file, &env);
            assert!(c.ok() && c.stdout.contains("(available)"), "{file} {env:?}: {}", c.all());
            let w = train_on(&dir, &file, &env);
            if *name == "sz3" {
                let d = max_diff(&w, &plain);
                assert!(d < 1e-3, "{file}: lossy, but {d} from the uncompressed file's weights");
            } else {
                assert_eq!(w, plain, "{file} {env:?}: weights differ from the uncompressed file's");
            }
        }
    }
}

#[test]
fn a_filter_hdf5_cannot_load_ends_every_rank_at_start_up() {
    let _g = mpi_lock();
    let dir = setup("compressed-missing");
    python(
        SYSTEM_PYTHON,
        &dir,
        "import h5py\nwith h5py.File('blosc.h5', 'w') as f:\n    f.create_dataset('x', data=x, chunks=(60, 6), \
         compression=32001, compression_opts=(2, 2, 4, 0, 5, 1, 5))\n    f.create_dataset('y', data=y)\n",
    );
    let env = [("HDF5_PLUGIN_PATH", "/nonexistent-plugins")];
    let c = check(&dir, "blosc.h5", &env);
    assert_eq!(c.code, Some(1), "{}", c.all());
    assert!(c.stdout.contains("32001 blosc (NOT AVAILABLE)") && c.stdout.contains("hdf5-filter-plugin-blosc-serial"));
    let run = mpirun_env(2, &env, &["train", "job.toml", "--set", "data.train=\"blosc.h5\""], &dir, 60);
    assert!(!run.ok(), "{}", run.all());
    for r in 0..2 {
        let line = run.stderr.lines().find(|l| l.contains(&format!("error on rank {r}"))).unwrap_or_else(|| {
            panic!("no error line from rank {r}\n{}", run.all());
        });
        for want in
            ["blosc.h5", "x:", "HDF5 filter 32001 (blosc)", "hdf5-filter-plugin-blosc-serial", "/nonexistent-plugins"]
        {
            assert!(line.contains(want), "rank {r}: {want:?} not in {line}");
        }
    }
    assert!(!run.stderr.contains("epoch 1/"), "it trained before failing\n{}", run.all());
    assert!(!dir.join("out/weights.h5").exists());
}
