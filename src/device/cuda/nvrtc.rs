//! NVRTC, CUDA's run-time compiler: compiles `kernels.cu` (`launch::SOURCE`) to PTX for a
//! virtual architecture ("compute_70") or to SASS in a cubin for a real one ("sm_90").
//! NVRTC needs no GPU and no driver, so `make test` runs it on every machine (the library
//! comes from PyPI's `nvidia-cuda-nvrtc-cu12` wheel: `make nvrtc`).
//!
//! cudarc loads libnvrtc at first use and panics when it cannot, so everything here first
//! asks `available()`, which only tries to load it. Compile errors come back as `Err` with
//! NVRTC's log (the compiler's messages with line numbers), never as a panic.
//!
//! Options: IEEE-conformant arithmetic (no `--use_fast_math`: denormals kept, exact division
//! and square root, as the CPU backend computes), `-lineinfo` (profilers and
//! compute-sanitizer name source lines), C++17.
//!
//! Must not: need a GPU or a driver (it compiles only).

// `compile_cubin`, `available` and `version` serve the NVRTC check in tests; the backend
// (`module.rs`) calls `compile_ptx`.
#![cfg_attr(not(test), allow(dead_code))]

use super::launch;
use cudarc::nvrtc::sys;
use std::ffi::{c_char, CString};
use std::sync::OnceLock;

/// The options every compile uses, before the architecture.
const OPTIONS: &[&str] = &["--std=c++17", "-lineinfo", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"];

/// Whether libnvrtc can be loaded (it is looked up once per process).
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen libnvrtc under cudarc's candidate names; calls nothing in it.
    *PRESENT.get_or_init(|| std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false))
}

/// NVRTC's (major, minor) version, when the library loads.
pub fn version() -> Option<(i32, i32)> {
    if !available() {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; both pointers are valid for the call.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    (r == sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// The kernels as PTX text for a virtual architecture, e.g. "compute_70".
pub fn compile_ptx(arch: &str) -> Result<String, String> {
    let mut ptx = compile(launch::SOURCE, arch, Output::Ptx)?;
    if ptx.last() == Some(&0) {
        ptx.pop();
    }
    String::from_utf8(ptx).map_err(|e| format!("NVRTC ({arch}): PTX is not UTF-8: {e}"))
}

/// The kernels as a cubin (an ELF file of SASS) for a real architecture, e.g. "sm_90".
pub fn compile_cubin(arch: &str) -> Result<Vec<u8>, String> {
    compile(launch::SOURCE, arch, Output::Cubin)
}

#[derive(Clone, Copy, PartialEq)]
enum Output {
    Ptx,
    Cubin,
}

/// Compiles `src` for `arch` and returns the requested output, or the error with NVRTC's log.
fn compile(src: &str, arch: &str, out: Output) -> Result<Vec<u8>, String> {
    if !available() {
        return Err("NVRTC (libnvrtc) not found; `make nvrtc` fetches it into target/nvrtc".into());
    }
    let what = match out {
        Output::Ptx => "PTX",
        Output::Cubin => "cubin",
    };
    let src = CString::new(src).map_err(|_| "kernel source holds a NUL byte".to_string())?;
    let mut opts: Vec<CString> = OPTIONS.iter().map(|o| CString::new(*o).expect("no NUL")).collect();
    opts.push(CString::new(format!("--gpu-architecture={arch}")).map_err(|_| "arch holds a NUL byte".to_string())?);
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let fail = |call: &str, r: sys::nvrtcResult| format!("NVRTC {what} for {arch}: {call} failed: {r:?}");

    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: the library is present; `src` and the name outlive the program; no headers.
    let r = unsafe {
        sys::nvrtcCreateProgram(&mut prog, src.as_ptr(), c"kernels.cu".as_ptr(), 0, std::ptr::null(), std::ptr::null())
    };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(fail("nvrtcCreateProgram", r));
    }
    // Destroys the program on every path out.
    struct Program(sys::nvrtcProgram);
    impl Drop for Program {
        fn drop(&mut self) {
            // SAFETY: created above and destroyed only here.
            unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        }
    }
    let prog = Program(prog);

    // SAFETY: a live program; `opt_ptrs` points at `opts`, alive for the call.
    let r = unsafe { sys::nvrtcCompileProgram(prog.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(prog.0).unwrap_or_else(|| "(no log)".into());
        return Err(format!("NVRTC {what} for {arch} ({}): {r:?}\n{}", opts_line(&opts), log.trim_end()));
    }
    let mut size = 0usize;
    // SAFETY: a compiled program; the buffer is `size` bytes, as NVRTC asked.
    unsafe {
        let r = match out {
            Output::Ptx => sys::nvrtcGetPTXSize(prog.0, &mut size),
            Output::Cubin => sys::nvrtcGetCUBINSize(prog.0, &mut size),
        };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(fail("getting the output size", r));
        }
        let mut buf = vec![0u8; size];
        let r = match out {
            Output::Ptx => sys::nvrtcGetPTX(prog.0, buf.as_mut_ptr().cast()),
            Output::Cubin => sys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr().cast()),
        };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(fail("getting the output", r));
        }
        if buf.is_empty() || (out == Output::Cubin && buf.iter().all(|&b| b == 0)) {
            return Err(format!("NVRTC {what} for {arch}: empty output (a virtual architecture has no cubin)"));
        }
        Ok(buf)
    }
}

fn opts_line(opts: &[CString]) -> String {
    opts.iter().map(|o| o.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// The program's compile log, without its trailing NUL.
fn program_log(prog: sys::nvrtcProgram) -> Option<String> {
    let mut size = 0usize;
    // SAFETY: a live program; the buffer is `size` bytes, as NVRTC asked.
    unsafe {
        if sys::nvrtcGetProgramLogSize(prog, &mut size) != sys::nvrtcResult::NVRTC_SUCCESS {
            return None;
        }
        let mut buf = vec![0u8; size];
        if sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr().cast()) != sys::nvrtcResult::NVRTC_SUCCESS {
            return None;
        }
        Some(String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether to run, or how to skip: `make test` sets HVTRAIN_REQUIRE_NVRTC=1, so there a
    /// missing NVRTC fails instead of skipping.
    fn nvrtc_or_skip() -> bool {
        if available() {
            return true;
        }
        if std::env::var("HVTRAIN_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
            panic!(
                "HVTRAIN_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded: run `make nvrtc` (fetches the \
                 nvidia-cuda-nvrtc-cu12 wheel into target/nvrtc) and put target/nvrtc/nvidia/cuda_nvrtc/lib \
                 on LD_LIBRARY_PATH, as `make test` does"
            );
        }
        eprintln!("skipped: no NVRTC (make nvrtc; make test sets HVTRAIN_REQUIRE_NVRTC=1)");
        false
    }

    /// Whether the ELF cubin names `kernel` in its string table (NUL-terminated, after a
    /// NUL or a section prefix such as ".text.").
    fn cubin_names(cubin: &[u8], kernel: &str) -> bool {
        let name: Vec<u8> = [kernel.as_bytes(), b"\0"].concat();
        cubin.windows(name.len() + 1).any(|w| &w[1..] == name.as_slice() && (w[0] == 0 || w[0] == b'.'))
    }

    #[test]
    fn every_kernel_compiles_with_real_nvrtc() {
        if !nvrtc_or_skip() {
            return;
        }
        let (major, minor) = version().expect("nvrtcVersion");
        let ptx = compile_ptx("compute_70").unwrap_or_else(|e| panic!("{e}"));
        assert!(ptx.contains(".target sm_70"), "PTX is not for sm_70");
        for k in launch::KERNELS {
            assert!(ptx.contains(&format!(".visible .entry {k}(")), "{k}: no `.entry {k}` in the compute_70 PTX");
        }
        let mut sizes = vec![format!("PTX compute_70 {} bytes", ptx.len())];
        for arch in ["sm_80", "sm_90"] {
            let cubin = compile_cubin(arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(cubin.starts_with(b"\x7fELF"), "{arch}: the cubin is not an ELF file");
            for k in launch::KERNELS {
                assert!(cubin_names(&cubin, k), "{arch}: the cubin has no kernel {k}");
            }
            sizes.push(format!("cubin {arch} {} bytes", cubin.len()));
        }
        eprintln!("NVRTC {major}.{minor}: {} kernels; {}", launch::KERNELS.len(), sizes.join(", "));
    }

    #[test]
    fn a_broken_kernel_is_an_error_with_the_log() {
        if !nvrtc_or_skip() {
            return;
        }
        let src = "extern \"C\" __global__ void hv_broken(float* v) { v[0] = 1.0f +; }\n";
        for (arch, out) in [("compute_70", Output::Ptx), ("sm_90", Output::Cubin)] {
            let e = compile(src, arch, out).expect_err("a syntax error must not compile");
            eprintln!("{e}");
            assert!(e.contains("NVRTC_ERROR_COMPILATION"), "{e}");
            assert!(e.contains("kernels.cu(1)") && e.contains("error"), "the log is missing from: {e}");
        }
        // An unknown architecture is an option error, not a panic.
        let e = compile(launch::SOURCE, "sm_1", Output::Cubin).expect_err("sm_1 is no architecture");
        assert!(e.contains("NVRTC_ERROR_INVALID_OPTION"), "{e}");
    }
}
