//! NCCL, loaded at run time as cuBLAS is (no build needs it): the few entry points the
//! gradient all-reduce and the pipeline's messages use, bound by `libloading` from `libnccl.so.2`, found in this order:
//!
//! 1. `HVTRAIN_NCCL_LIBRARY` (a file), the user's word;
//! 2. the loader's own search (`LD_LIBRARY_PATH`, ld.so.cache: a `module load nccl`, a system
//!    package);
//! 3. `$NCCL_HOME/lib`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64` (CUDA toolkits that carry it);
//! 4. the `nvidia-nccl` pip package's `nvidia/nccl/lib/` (PyTorch depends on it) in the
//!    site-packages `python::site_folders` walks, else where the `python3` on PATH says it is.
//!
//! cudarc's own NCCL module is not used: its loader asks for `libnccl.so` and versioned names
//! that are CUDA's, never NCCL's soname `libnccl.so.2`, the only name the pip package ships.
//!
//! Must not: make a collective (`nccl.rs` does), or run without the user knowing where the
//! library came from (`Nccl::path`, `Nccl::version` go to the log).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;

/// `ncclComm_t`.
pub type RawComm = *mut c_void;
/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}
/// `ncclFloat32`, `ncclFloat16`, `ncclBfloat16` (nccl.h's `ncclDataType_t`; bf16 since NCCL
/// 2.10): the float32 sum, and the compressed wire's.
pub const FLOAT32: c_int = 7;
pub const FLOAT16: c_int = 6;
pub const BFLOAT16: c_int = 9;
/// `ncclSum`.
pub const SUM: c_int = 0;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> c_int;
type CommInitRank = unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> c_int;
type AllReduce = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, *mut c_void) -> c_int;
type Broadcast = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, *mut c_void) -> c_int;
type Send = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, *mut c_void) -> c_int;
type Recv = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, *mut c_void) -> c_int;
type CommOp = unsafe extern "C" fn(RawComm) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type CommGetAsyncError = unsafe extern "C" fn(RawComm, *mut c_int) -> c_int;

/// An opened NCCL: where it came from, its version, its entry points.
pub struct Nccl {
    _lib: libloading::Library,
    /// The file, or the soname the loader resolved.
    pub path: String,
    /// `major.minor.patch`.
    pub version: String,
    pub get_unique_id: GetUniqueId,
    pub comm_init_rank: CommInitRank,
    pub all_reduce: AllReduce,
    pub broadcast: Broadcast,
    /// `ncclSend`, `ncclRecv` (NCCL 2.7 and later).
    pub send: Send,
    pub recv: Recv,
    pub comm_abort: CommOp,
    get_error_string: GetErrorString,
    pub comm_get_async_error: CommGetAsyncError,
}

impl Nccl {
    /// Open `name` (a path, or a soname for the loader) and bind the entry points.
    pub fn open(name: &str) -> Result<Nccl, String> {
        // SAFETY: loading a shared library runs its initializers; NCCL's are benign.
        let lib = unsafe { libloading::Library::new(name) }.map_err(|e| format!("{name}: {e}"))?;
        // SAFETY: the types are nccl.h's declarations of these symbols.
        unsafe {
            let sym = |s: &str| format!("{name} has no {s} (not NCCL 2?)");
            let get_version: GetVersion = *lib.get(b"ncclGetVersion\0").map_err(|_| sym("ncclGetVersion"))?;
            let mut code = 0;
            if get_version(&mut code) != 0 {
                return Err(format!("{name}: ncclGetVersion failed"));
            }
            Ok(Nccl {
                path: name.to_string(),
                version: version_of(code),
                get_unique_id: *lib.get(b"ncclGetUniqueId\0").map_err(|_| sym("ncclGetUniqueId"))?,
                comm_init_rank: *lib.get(b"ncclCommInitRank\0").map_err(|_| sym("ncclCommInitRank"))?,
                all_reduce: *lib.get(b"ncclAllReduce\0").map_err(|_| sym("ncclAllReduce"))?,
                broadcast: *lib.get(b"ncclBroadcast\0").map_err(|_| sym("ncclBroadcast"))?,
                send: *lib.get(b"ncclSend\0").map_err(|_| sym("ncclSend (NCCL 2.7 or later)"))?,
                recv: *lib.get(b"ncclRecv\0").map_err(|_| sym("ncclRecv (NCCL 2.7 or later)"))?,
                comm_abort: *lib.get(b"ncclCommAbort\0").map_err(|_| sym("ncclCommAbort"))?,
                get_error_string: *lib.get(b"ncclGetErrorString\0").map_err(|_| sym("ncclGetErrorString"))?,
                comm_get_async_error: *lib.get(b"ncclCommGetAsyncError\0").map_err(|_| sym("ncclCommGetAsyncError"))?,
                _lib: lib,
            })
        }
    }

    /// NCCL's words for result `code`.
    pub fn error(&self, code: c_int) -> String {
        // SAFETY: NCCL returns a static string for any code.
        let s = unsafe { (self.get_error_string)(code) };
        if s.is_null() {
            return format!("NCCL error {code}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        format!("{} (NCCL error {code})", unsafe { CStr::from_ptr(s) }.to_string_lossy())
    }
}

/// NCCL_VERSION_CODE as `major.minor.patch` (major·10000 + minor·100 + patch since 2.9; before
/// it major·1000 + minor·100 + patch).
pub fn version_of(code: c_int) -> String {
    let (major, rest) = if code >= 10000 { (code / 10000, code % 10000) } else { (code / 1000, code % 1000) };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

/// Where to look, in order (see the module doc): files, or the bare soname for the loader.
pub fn candidates() -> Vec<String> {
    candidates_in(&crate::python::site_folders("nvidia/nccl/lib"))
}

/// `candidates` with the pip package's folders `sites` (`nvidia/nccl/lib` in site-packages).
fn candidates_in(sites: &[PathBuf]) -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(p) = std::env::var("HVTRAIN_NCCL_LIBRARY") {
        v.push(p);
    }
    v.push("libnccl.so.2".to_string());
    for (var, sub) in [("NCCL_HOME", "lib"), ("CUDA_HOME", "lib64"), ("CUDA_PATH", "lib64")] {
        if let Some(d) = std::env::var_os(var) {
            v.push(PathBuf::from(d).join(sub).join("libnccl.so.2").display().to_string());
        }
    }
    v.push("/usr/local/cuda/lib64/libnccl.so.2".into());
    for d in sites {
        v.push(d.join("libnccl.so.2").display().to_string());
    }
    v
}

/// This process's NCCL, loaded once: the first candidate that opens, else (the module doc's
/// last step) the folder the `python3` on PATH gives for the pip package. The error lists
/// where it looked.
pub fn load() -> Result<&'static Nccl, String> {
    static LIB: std::sync::OnceLock<Result<Nccl, String>> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let mut tried = Vec::new();
        for c in candidates() {
            if c.contains('/') && !std::path::Path::new(&c).exists() {
                tried.push(c);
                continue;
            }
            match Nccl::open(&c) {
                Ok(n) => return Ok(n),
                Err(e) => tried.push(e),
            }
        }
        let code = "import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], 'lib'))";
        if let Some((dir, python)) = crate::python::ask(code) {
            let p = PathBuf::from(dir).join("libnccl.so.2");
            match Nccl::open(&p.display().to_string()) {
                Ok(n) => return Ok(n),
                Err(e) => tried.push(format!("{e} (from {})", python.display())),
            }
        } else {
            tried.push("the python3 on PATH has no nvidia.nccl package".into());
        }
        Err(format!(
            "NCCL (libnccl.so.2) not found; looked at: {}. Install it (pip install nvidia-nccl-cu12, \
             which PyTorch brings; or module load nccl), or set HVTRAIN_NCCL_LIBRARY to the file",
            tried.join("; ")
        ))
    })
    .as_ref()
    .map_err(|e| e.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_of_both_eras() {
        assert_eq!(version_of(22703), "2.27.3");
        assert_eq!(version_of(21803), "2.18.3");
        assert_eq!(version_of(2804), "2.8.4");
    }

    /// A stand-in `libnccl.so.2` (the C compiler builds it, with NCCL's soname and entry
    /// points) laid out as the pip package lays it out: a candidate after the loader's own
    /// search, opened, its version read; a library without the entry points refused.
    #[test]
    fn the_pip_package_layout_is_found_and_opened() {
        let dir = std::env::temp_dir().join(format!("hvtrain-nccl-{}", std::process::id()));
        let lib = dir.join("venv/lib/python3.11/site-packages/nvidia/nccl/lib");
        std::fs::create_dir_all(&lib).unwrap();
        let src = dir.join("fake.c");
        let mut c = String::from("int ncclGetVersion(int *v) { *v = 22703; return 0; }\n");
        for f in [
            "ncclGetUniqueId",
            "ncclCommInitRank",
            "ncclAllReduce",
            "ncclBroadcast",
            "ncclSend",
            "ncclRecv",
            "ncclCommAbort",
        ] {
            c.push_str(&format!("int {f}(void) {{ return 0; }}\n"));
        }
        c.push_str("const char *ncclGetErrorString(int c) { return c ? \"unhandled cuda error\" : \"no error\"; }\n");
        c.push_str("int ncclCommGetAsyncError(void *c, int *e) { *e = 0; return 0; }\n");
        std::fs::write(&src, c).unwrap();
        let so = lib.join("libnccl.so.2");
        let ok = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o"])
            .arg(&so)
            .arg(&src)
            .status()
            .unwrap();
        assert!(ok.success());
        let found = candidates_in(std::slice::from_ref(&lib));
        let want = so.display().to_string();
        assert!(found.contains(&want), "{found:?}");
        assert!(found.iter().position(|c| c == "libnccl.so.2") < found.iter().position(|c| *c == want));
        let n = Nccl::open(&want).unwrap();
        assert_eq!(n.version, "2.27.3");
        assert_eq!(n.error(1), "unhandled cuda error (NCCL error 1)");
        // Not NCCL: refused with the missing entry point named.
        std::fs::write(&src, "int ncclGetVersion(int *v) { *v = 22703; return 0; }\n").unwrap();
        let bad = dir.join("libbad.so");
        std::process::Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&bad).arg(&src).status().unwrap();
        let e = Nccl::open(&bad.display().to_string()).err().unwrap();
        assert!(e.contains("has no ncclGetUniqueId"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
