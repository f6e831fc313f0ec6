//! Finding CUDA before touching it. CUDA is loaded at run time (cudarc's dynamic loading),
//! so the binary builds and runs with no CUDA installed; cudarc panics when it cannot load
//! a library, so every library is probed (inside `catch_unwind`) before its first use, and
//! its absence becomes one line that names the library files tried.
//!
//! Must not: create a context or allocate on a GPU.

use crate::error::{Error, Result};

/// The oldest driver API we accept: CUDA 12.0 (the kernels' PTX needs at least this).
const MIN_DRIVER: i32 = 12000;

fn present(f: unsafe fn() -> bool) -> bool {
    // SAFETY: only tries to dlopen a library; no CUDA call is made.
    std::panic::catch_unwind(|| unsafe { f() }).unwrap_or(false)
}

/// The file names cudarc tries for a library, as the user would look for them.
fn tried(lib: &str) -> String {
    let mut names: Vec<String> =
        cudarc::get_lib_name_candidates(lib).into_iter().filter(|n| !n.contains("64_")).collect();
    names.dedup();
    names.join(", ")
}

/// Number of visible CUDA devices, or why there are none (no driver, a driver too old for
/// CUDA 12, no GPU).
pub fn probe() -> std::result::Result<usize, String> {
    if !present(cudarc::driver::sys::is_culib_present) {
        return Err("no CUDA driver library (libcuda) found".into());
    }
    cudarc::driver::result::init().map_err(|e| format!("CUDA driver failed to initialize: {e}"))?;
    let mut v = 0i32;
    // SAFETY: the driver is loaded and initialized; v is a valid out pointer.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(|e| format!("cannot read the CUDA driver's version: {e}"))?;
    if v < MIN_DRIVER {
        return Err(format!(
            "the NVIDIA driver supports CUDA {}.{}, and hvtrain needs a driver for CUDA 12.0 or newer; update the driver",
            v / 1000,
            v % 1000 / 10
        ));
    }
    let n = cudarc::driver::result::device::get_count().map_err(|e| format!("cannot count CUDA devices: {e}"))?;
    if n <= 0 {
        return Err("the CUDA driver sees no GPU".into());
    }
    Ok(n as usize)
}

/// The user-space libraries the CUDA backend loads: cuBLAS and NVRTC, CUDA 12 or 13.
pub fn check_libraries() -> Result<()> {
    let mut missing = Vec::new();
    if !present(cudarc::cublas::sys::is_culib_present) {
        missing.push(format!("cuBLAS (tried {})", tried("cublas")));
    }
    if !present(cudarc::nvrtc::sys::is_culib_present) {
        missing.push(format!("NVRTC (tried {})", tried("nvrtc")));
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Cuda(format!(
        "the CUDA backend needs {}: none found on the library path; install the CUDA 12 or 13 runtime libraries (or `pip install nvidia-cublas-cu12 nvidia-cuda-nvrtc-cu12`) and add their lib folders to LD_LIBRARY_PATH",
        missing.join(" and ")
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_names_tried_include_cuda_12_and_13() {
        let t = super::tried("cublas");
        assert!(t.contains("libcublas.so.13") && t.contains("libcublas.so.12"), "{t}");
        let t = super::tried("nvrtc");
        assert!(t.contains("libnvrtc.so.13") && t.contains("libnvrtc.so.12"), "{t}");
    }
}
