//! The tile unit: a 32 × 32 block of C summed over k in four accumulator tiles, from two A
//! strips (rows 0–15, 16–31) and two B strips (columns 0–15, 16–31) of packed tiles
//! (`pack.rs`), stored row-major into 32 × 32 floats. Two implementations of one contract:
//!
//! - `Unit::Tiles`: the AMX instructions (`ldtilecfg`, `tilezero`, `tileloadd`, `tdpbf16ps`,
//!   `tilestored`) in one `asm!` block, so the accumulators live in tmm0–3 for the whole k loop
//!   (tile registers cannot be Rust values; the `_tile_*` intrinsics are unstable).
//! - `Unit::Emulated`: what `TDPBF16PS` computes, element by element, in plain Rust, on any
//!   CPU: for each row m and column n, for each pair p in order, c += a.lo·b.lo then
//!   c += a.hi·b.hi, each an FMA rounded to nearest even (a product of two bf16 is exact in
//!   float32, so an add), bf16 denormal inputs taken as zero and float32 denormal results
//!   flushed to zero (Intel SDM, TDPBF16PS). The reference the tiles are tested against and
//!   the unit every CPU can run the tile kernel's blocking, packing and epilogue on.
//!
//! Must not: run `Tiles` unless `super::ready()` (without Linux's permission the first tile
//! instruction faults).

use super::pack::TILE;

/// Which unit runs the tile products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Tiles,
    Emulated,
}

/// A thread's use of a unit: for tiles, the configuration loaded (`ldtilecfg`) when it is
/// made and the tile state released (`tilerelease`) when it is dropped, so that the blocks in
/// between load no configuration. The tile registers are touched by nothing else (Rust emits
/// no AMX code of its own), so they keep the configuration between `block` calls.
pub struct Configured(Unit);

impl Configured {
    pub fn new(unit: Unit) -> Configured {
        if unit == Unit::Tiles {
            // SAFETY: `Tiles` is only chosen after `ready()` (CPUID and Linux's permission).
            unsafe { configure() };
        }
        Configured(unit)
    }

    /// C (32 × 32, row-major, `out`) = Σ over `kt` k-tiles of [a0; a1] · [b0 b1]: a0, a1 the
    /// two A strips, b0, b1 the two B strips, each `kt` tiles in k order.
    pub fn block(&self, a0: &[u32], a1: &[u32], b0: &[u32], b1: &[u32], kt: usize, out: &mut [f32; 1024]) {
        assert!(kt > 0 && [a0, a1, b0, b1].iter().all(|s| s.len() >= kt * TILE));
        match self.0 {
            // SAFETY: the asserts above keep every tile load inside the strips; `new` loaded
            // the configuration on this thread.
            Unit::Tiles => unsafe { tiles(a0.as_ptr(), a1.as_ptr(), b0.as_ptr(), b1.as_ptr(), kt, out.as_mut_ptr()) },
            Unit::Emulated => emulated(a0, a1, b0, b1, kt, out),
        }
    }
}

impl Drop for Configured {
    fn drop(&mut self) {
        if self.0 == Unit::Tiles {
            // SAFETY: the configuration `new` loaded on this thread.
            unsafe { release() };
        }
    }
}

/// A bf16 (the high half of a float32's bits) as float32, a denormal as zero.
#[inline(always)]
fn daz(bits: u32) -> f32 {
    let x = f32::from_bits(bits);
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

/// One accumulation of `TDPBF16PS`: c + a·b rounded once, a float32 denormal flushed to zero.
#[inline(always)]
fn fma_ftz(c: f32, a: f32, b: f32) -> f32 {
    let r = a.mul_add(b, c);
    if r.is_subnormal() {
        0.0f32.copysign(r)
    } else {
        r
    }
}

/// `TDPBF16PS c, a, b` on 16 × 16 tiles: c[m][n] += Σ_p a[m][p] · b[p][n] over pairs, in order.
pub fn tdpbf16ps(c: &mut [f32], a: &[u32], b: &[u32]) {
    for m in 0..16 {
        for p in 0..16 {
            let av = a[m * 16 + p];
            let (alo, ahi) = (daz(av << 16), daz(av & 0xffff_0000));
            for n in 0..16 {
                let bv = b[p * 16 + n];
                let c = &mut c[m * 16 + n];
                *c = fma_ftz(*c, alo, daz(bv << 16));
                *c = fma_ftz(*c, ahi, daz(bv & 0xffff_0000));
            }
        }
    }
}

fn emulated(a0: &[u32], a1: &[u32], b0: &[u32], b1: &[u32], kt: usize, out: &mut [f32; 1024]) {
    let mut acc = [[0f32; TILE]; 4];
    for t in 0..kt {
        let tile = |s: &[u32]| -> [u32; TILE] { s[t * TILE..(t + 1) * TILE].try_into().expect("one tile") };
        let (a0, a1, b0, b1) = (tile(a0), tile(a1), tile(b0), tile(b1));
        tdpbf16ps(&mut acc[0], &a0, &b0);
        tdpbf16ps(&mut acc[1], &a0, &b1);
        tdpbf16ps(&mut acc[2], &a1, &b0);
        tdpbf16ps(&mut acc[3], &a1, &b1);
    }
    for (q, acc) in acc.iter().enumerate() {
        let (r0, c0) = (16 * (q / 2), 16 * (q % 2));
        for r in 0..16 {
            out[(r0 + r) * 32 + c0..(r0 + r) * 32 + c0 + 16].copy_from_slice(&acc[r * 16..r * 16 + 16]);
        }
    }
}

/// The tile configuration (palette 1): all eight tiles 16 rows × 64 bytes.
#[repr(C, align(64))]
struct Config([u8; 64]);

static CONFIG: Config = Config({
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64; // bytes per row (u16, little-endian)
        c[48 + t] = 16; // rows
        t += 1;
    }
    c
});

/// All eight tiles 16 × 64 bytes, on this thread.
///
/// # Safety
/// `ready()`.
#[cfg(target_arch = "x86_64")]
unsafe fn configure() {
    std::arch::asm!("ldtilecfg [{cfg}]", cfg = in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
}

/// The tile state back to its initial state (what the kernel then need not save).
///
/// # Safety
/// `ready()`.
#[cfg(target_arch = "x86_64")]
unsafe fn release() {
    std::arch::asm!("tilerelease", options(nostack, nomem));
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn configure() {
    unreachable!("ready() is false off x86_64")
}
#[cfg(not(target_arch = "x86_64"))]
unsafe fn release() {
    unreachable!("ready() is false off x86_64")
}

/// The unit on tiles: tmm0–3 the four accumulators (C00 C01 C10 C11), tmm4–5 the A tiles,
/// tmm6–7 the B tiles; every tile of a strip is 1 KiB, loaded with a 64-byte stride; the
/// accumulators are stored into `out` with its 128-byte rows.
///
/// # Safety
/// `configure()` on this thread; each strip holds `kt` tiles; `out` holds 32 × 32 floats.
#[cfg(target_arch = "x86_64")]
unsafe fn tiles(a0: *const u32, a1: *const u32, b0: *const u32, b1: *const u32, kt: usize, out: *mut f32) {
    std::arch::asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        "2:",
        "tileloadd tmm4, [{a0} + {s}]",
        "tileloadd tmm6, [{b0} + {s}]",
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tileloadd tmm7, [{b1} + {s}]",
        "tdpbf16ps tmm1, tmm4, tmm7",
        "tileloadd tmm5, [{a1} + {s}]",
        "tdpbf16ps tmm2, tmm5, tmm6",
        "tdpbf16ps tmm3, tmm5, tmm7",
        "add {a0}, 1024",
        "add {a1}, 1024",
        "add {b0}, 1024",
        "add {b1}, 1024",
        "dec {kt}",
        "jnz 2b",
        "tilestored [{o} + {so}], tmm0",
        "add {o}, 64",
        "tilestored [{o} + {so}], tmm1",
        "add {o}, 1984",
        "tilestored [{o} + {so}], tmm2",
        "add {o}, 64",
        "tilestored [{o} + {so}], tmm3",
        a0 = inout(reg) a0 => _,
        a1 = inout(reg) a1 => _,
        b0 = inout(reg) b0 => _,
        b1 = inout(reg) b1 => _,
        kt = inout(reg) kt => _,
        o = inout(reg) out => _,
        s = in(reg) 64usize,
        so = in(reg) 128usize,
        options(nostack),
    );
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tiles(_a0: *const u32, _a1: *const u32, _b0: *const u32, _b1: *const u32, _kt: usize, _out: *mut f32) {
    unreachable!("ready() is false off x86_64")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(lo: f32, hi: f32) -> u32 {
        (lo.to_bits() >> 16) | (hi.to_bits() & 0xffff_0000)
    }

    /// The emulated instruction against its definition in float64 on values whose sums are
    /// exact (small integers): every output; a swapped pair half, a transposed B or a dropped
    /// pair would be off by whole units.
    #[test]
    fn emulated_tdpbf16ps_is_the_definition() {
        let v = |i: usize, s: usize| ((i * 7 + s * 3) % 11) as f32 - 5.0;
        let a: Vec<u32> = (0..TILE).map(|i| pair(v(i, 1), v(i, 2))).collect();
        let b: Vec<u32> = (0..TILE).map(|i| pair(v(i, 3), v(i, 4))).collect();
        let mut c: Vec<f32> = (0..TILE).map(|i| v(i, 5)).collect();
        let c0 = c.clone();
        tdpbf16ps(&mut c, &a, &b);
        for m in 0..16 {
            for n in 0..16 {
                let mut want = c0[m * 16 + n] as f64;
                for p in 0..16 {
                    want += v(m * 16 + p, 1) as f64 * v(p * 16 + n, 3) as f64;
                    want += v(m * 16 + p, 2) as f64 * v(p * 16 + n, 4) as f64;
                }
                assert_eq!(c[m * 16 + n] as f64, want, "m {m} n {n}");
            }
        }
    }

    /// Denormal bf16 inputs count as zero and denormal float32 sums are flushed, as the SDM
    /// says of the instruction (a plain float32 FMA would keep both).
    #[test]
    fn emulated_tdpbf16ps_flushes_denormals() {
        let tiny = f32::from_bits(0x0001_0000); // a bf16 denormal
        let mut a = vec![0u32; TILE];
        let mut b = vec![0u32; TILE];
        a[0] = pair(tiny, 1e-20);
        b[0] = pair(1e30, 1e-20); // 1e-40 is a float32 denormal
        let mut c = vec![0f32; TILE];
        tdpbf16ps(&mut c, &a, &b);
        assert_eq!(c[0], 0.0);
        a[0] = pair(1.0, 0.0);
        b[0] = pair(2.0, 0.0);
        tdpbf16ps(&mut c, &a, &b);
        assert_eq!(c[0], 2.0);
    }
}
