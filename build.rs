//! Builds the host shim (src/device/cuda/shim.cpp): kernels.cu compiled by the system C++
//! compiler, so that the tests run every GPU kernel's logic on the CPU. Only the tests call
//! it; the linker leaves the unreferenced archive out of the binary.

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
}
