//! Builds the host shim (src/device/cuda/shim.cpp): kernels.cu compiled by the system C++
//! compiler, so that the tests run every GPU kernel's logic on the CPU. Only the tests call
//! it; the linker leaves the unreferenced archive out of the binary.
//!
//! And gives the binary a run path (RUNPATH) to the MPI and HDF5 it was built against when they
//! live outside the system's library folders (a `module load`, a private prefix): the folders
//! of `$MPICC -show`'s `-L` flags (`mpicc` on PATH when MPICC is unset, as rsmpi's probe) and
//! `$HDF5_DIR/lib`, so `hvtrain` runs without LD_LIBRARY_PATH after `module purge`, on compute
//! nodes, under `srun`. LD_LIBRARY_PATH still wins (RUNPATH, not RPATH). HVTRAIN_RPATH=0 leaves
//! it out; HVTRAIN_RPATH=DIR:DIR adds folders of your own.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/device/cuda/shim.cpp");
    println!("cargo:rerun-if-changed=src/device/cuda/kernels.cu");
    cc::Build::new()
        .cpp(true)
        .file("src/device/cuda/shim.cpp")
        .std("c++17")
        // Round as Rust does: no fused multiply-add (GCC's default would fuse where the
        // target has FMA); no fast-math.
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        .warnings(true)
        .extra_warnings(true)
        .compile("hvshim");
    run_path();
}

/// The system's own library folders: the loader searches them anyway.
fn system(dir: &Path) -> bool {
    ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/lib32", "/lib32"].iter().any(|s| dir.starts_with(s))
}

fn run_path() {
    for v in ["MPICC", "HDF5_DIR", "HVTRAIN_RPATH"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let own = std::env::var("HVTRAIN_RPATH").unwrap_or_default();
    if own == "0" {
        return;
    }
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&own).filter(|d| !d.as_os_str().is_empty()).collect();
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    if let Ok(out) = Command::new(&mpicc).arg("-show").output() {
        let text = String::from_utf8_lossy(&out.stdout);
        dirs.extend(lib_dirs(&text));
    }
    if let Some(h) = std::env::var_os("HDF5_DIR") {
        dirs.push(PathBuf::from(h).join("lib"));
    }
    // Where the libraries themselves are, when the folder holds only links to them (Debian's
    // hdf5/serial/libhdf5.so -> ../../libhdf5_serial.so): the loader looks up the soname there.
    let real: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|d| ["libmpi.so", "libhdf5.so"].map(|l| d.join(l)))
        .filter_map(|l| l.canonicalize().ok()?.parent().map(Path::to_path_buf))
        .collect();
    dirs.extend(real);
    let mut seen = Vec::new();
    for d in dirs {
        let d = d.canonicalize().unwrap_or(d);
        if system(&d) || seen.contains(&d) {
            continue;
        }
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{}", d.display());
        seen.push(d);
    }
    if !seen.is_empty() {
        println!("cargo:rustc-link-arg-bins=-Wl,--enable-new-dtags");
    }
}

/// The `-L` folders of a compiler wrapper's `-show` line (`-L/x`, `-L /x`, `-Wl,-rpath,/x`,
/// `-Wl,-rpath -Wl,/x`).
fn lib_dirs(show: &str) -> Vec<PathBuf> {
    let words: Vec<&str> = show.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if w == "-L" && i + 1 < words.len() {
            out.push(PathBuf::from(words[i + 1]));
            i += 1;
        } else if let Some(d) = w.strip_prefix("-L") {
            out.push(PathBuf::from(d));
        } else if let Some(d) = w.strip_prefix("-Wl,-rpath,") {
            out.extend(d.split(',').map(PathBuf::from));
        } else if w == "-Wl,-rpath" && i + 1 < words.len() {
            if let Some(d) = words[i + 1].strip_prefix("-Wl,") {
                out.push(PathBuf::from(d));
                i += 1;
            }
        }
        i += 1;
    }
    out
}
