//! The CPU backend's float32 matrix product: hvtrain's AVX-512 kernel (`sgemm.rs`) where the
//! CPU has AVX-512F, else matrixmultiply's, its products split over hvtrain's pool.
//!
//! Must not: differ from the reference's float32 semantics (C = alpha · op(A) · op(B) + beta · C).

use super::{Gemm, Trans};

/// Which float32 product the CPU backend runs: hvtrain's AVX-512 kernel (`sgemm`) where the
/// CPU has AVX-512F, else matrixmultiply. `HVTRAIN_CPU_GEMM=matrixmultiply` forces the latter
/// (for comparisons: `bench/cpu.sh`).
pub fn fp32_kernel() -> &'static str {
    static CHOICE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    CHOICE.get_or_init(|| {
        let forced = std::env::var("HVTRAIN_CPU_GEMM").is_ok_and(|v| v == "matrixmultiply");
        if super::super::sgemm::supported() && !forced {
            "hvtrain's AVX-512 kernel"
        } else {
            "matrixmultiply"
        }
    })
}

/// The product `g` (see `Gemm`) in float32: `sgemm`'s AVX-512 kernel or matrixmultiply's
/// (`fp32_kernel`).
pub fn gemm(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    if fp32_kernel() == "hvtrain's AVX-512 kernel" {
        return super::super::sgemm::gemm(g, a, b, c);
    }
    mm_gemm(g, a, b, c)
}

/// matrixmultiply's product: transposes are expressed through strides, nothing is copied.
/// With `training.threads` > 1 the pool's threads take column ranges of C (or row ranges, as
/// `tile::Split` cuts the AVX-512 kernel's products), each one single-threaded matrixmultiply
/// call: on a 2-vCPU AMD EPYC (Zen 3, AVX2) matrixmultiply's own threads reached 88-105
/// GFLOP/s on the step's products against 124-133 for two processes of one thread
/// (`bench/results/cpu-2026-11-27.md`). Every element is summed by the same call shape in
/// the same k order on any thread count.
pub(super) fn mm_gemm(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    g.check(a.len(), b.len(), c.len());
    if super::super::tile::trivial(g, c) {
        return;
    }
    let Gemm { m, k, n, ta, tb, alpha, beta } = g;
    let (rsa, csa) = match ta {
        Trans::N => (k as isize, 1),
        Trans::T => (1, m as isize),
    };
    let (rsb, csb) = match tb {
        Trans::N => (n as isize, 1),
        Trans::T => (1, k as isize),
    };
    let split = super::super::tile::Split::of(m, k, n);
    let cp = super::super::tile::CPtr(c.as_mut_ptr());
    let cp = &cp;
    super::super::pool::run(split.parts, &|i| {
        let (rows, cols) = split.block(i, m, n);
        // SAFETY: `check` above keeps every index these strides reach inside the slices; the
        // parts write disjoint blocks of C.
        unsafe {
            matrixmultiply::sgemm(
                rows.len(),
                k,
                cols.len(),
                alpha,
                a.as_ptr().offset(rows.start as isize * rsa),
                rsa,
                csa,
                b.as_ptr().offset(cols.start as isize * csb),
                rsb,
                csb,
                beta,
                cp.0.add(rows.start * n + cols.start),
                n as isize,
                1,
            );
        }
    });
}
