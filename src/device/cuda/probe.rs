//! The only module that touches cudarc. CUDA is loaded at run time (cudarc's dynamic
//! loading), so the binary builds and runs with no CUDA installed; cudarc panics when it
//! cannot load libcuda, so we probe for the library before calling anything else.

/// Number of visible CUDA devices, or why there are none.
pub fn probe() -> Result<usize, String> {
    // SAFETY: only tries to dlopen libcuda; no CUDA call is made unless it loads.
    let present = std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err("no CUDA driver library (libcuda) found".into());
    }
    cudarc::driver::result::init().map_err(|e| format!("CUDA driver failed to initialize: {e}"))?;
    let n = cudarc::driver::result::device::get_count().map_err(|e| format!("cannot count CUDA devices: {e}"))?;
    if n <= 0 {
        return Err("the CUDA driver sees no GPU".into());
    }
    Ok(n as usize)
}
