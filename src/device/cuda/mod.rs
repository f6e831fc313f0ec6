//! The only module that touches cudarc (CUDA is loaded at run time: the build needs no CUDA).
//! `probe` finds the driver before anything else is called (cudarc panics when it cannot
//! load a library); `kernels.cu` holds the element-wise kernels and `launch` their geometry.

pub mod launch;
pub mod nvrtc;
mod probe;
#[cfg(test)]
mod shim;

pub use probe::probe;
