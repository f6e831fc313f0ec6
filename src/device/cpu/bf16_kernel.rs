//! Which kernel runs the CPU's bf16 products (`training.precision = "bf16"`), chosen once per
//! process and logged with the reason:
//!
//! - `Tiles`: AMX (`amx/`), where the CPU has AMX-BF16, Linux grants the tile data and the
//!   tiles pass their start-up check against the emulated unit (bit for bit on exact sums);
//! - `Avx512`: AVX512-BF16's `vdpbf16ps` (`bf16.rs`), where there are no tiles (or they failed);
//! - `Emulated`: the tile kernel on the emulated unit, on any CPU, only when asked: it is
//!   scalar and slow, there to run and test the tile kernel's blocking, packing and epilogue
//!   in training on machines without AMX.
//!
//! `HVTRAIN_CPU_BF16` = `auto` (default: tiles, else AVX512-BF16) | `tiles` | `avx512` |
//! `emulated` forces one (an error where the CPU cannot run it).
//!
//! Where the CPU runs bf16 products slower than float32 ones (AVX512-BF16 without AMX on
//! Intel), the choice logs both measured rates and says so: bf16 is then a memory saving at
//! best, not a speed-up.
//!
//! Must not: choose the tiles without their start-up check, or the emulated unit unless asked.

use crate::device::amx::{self, Unit};
use crate::device::backend::{Gemm, Trans};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bf16Kernel {
    Tiles,
    #[default]
    Avx512,
    Emulated,
}

impl Bf16Kernel {
    /// For the backend's name and the log.
    pub fn name(self) -> &'static str {
        match self {
            Bf16Kernel::Tiles => "AMX tiles",
            Bf16Kernel::Avx512 => "AVX512-BF16",
            Bf16Kernel::Emulated => "emulated AMX tiles",
        }
    }

    /// C = alpha · op(A) · op(B) + beta · C with bf16 operands and float32 sums.
    pub fn gemm(self, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
        match self {
            Bf16Kernel::Tiles => amx::gemm(Unit::Tiles, g, a, b, c),
            Bf16Kernel::Emulated => amx::gemm(Unit::Emulated, g, a, b, c),
            Bf16Kernel::Avx512 => crate::device::bf16::gemm(g, a, b, c),
        }
    }

    /// The tile unit, for the kernels that have one (the forward's fused epilogue).
    pub fn unit(self) -> Option<Unit> {
        match self {
            Bf16Kernel::Tiles => Some(Unit::Tiles),
            Bf16Kernel::Emulated => Some(Unit::Emulated),
            Bf16Kernel::Avx512 => None,
        }
    }
}

/// The kernel for this process (HVTRAIN_CPU_BF16, else the fastest this CPU can run), or why
/// bf16 cannot run here. Decided and logged once.
pub fn choose() -> Result<Bf16Kernel, String> {
    static CHOICE: std::sync::OnceLock<Result<Bf16Kernel, String>> = std::sync::OnceLock::new();
    CHOICE
        .get_or_init(|| {
            let asked = std::env::var("HVTRAIN_CPU_BF16").unwrap_or_else(|_| "auto".into());
            let k = decide(&asked, amx::ready().and_then(|()| amx::check_tiles()), crate::device::bf16::supported())?;
            log::info!("{}", describe(k, &asked));
            Ok(k)
        })
        .clone()
}

/// The choice from what was asked, whether the tiles are usable (and why not), and whether the
/// CPU has AVX512-BF16.
fn decide(asked: &str, tiles: Result<(), String>, avx512: bool) -> Result<Bf16Kernel, String> {
    let no_avx512 = || {
        format!(
            "this CPU ({}) lacks the vdpbf16ps instruction (no avx512_bf16 in /proc/cpuinfo: Intel Cooper Lake or \
             Sapphire Rapids and later, AMD Zen 4 and later have it)",
            crate::sys::cpu_model()
        )
    };
    match asked {
        "auto" | "" => match tiles {
            Ok(()) => Ok(Bf16Kernel::Tiles),
            Err(_) if avx512 => Ok(Bf16Kernel::Avx512),
            Err(_) => Err(no_avx512()),
        },
        "tiles" => tiles.map(|()| Bf16Kernel::Tiles).map_err(|why| format!("HVTRAIN_CPU_BF16=tiles but {why}")),
        "avx512" if avx512 => Ok(Bf16Kernel::Avx512),
        "avx512" => Err(format!("HVTRAIN_CPU_BF16=avx512 but {}", no_avx512())),
        "emulated" => Ok(Bf16Kernel::Emulated),
        other => Err(format!("HVTRAIN_CPU_BF16 = {other:?}: expected auto, tiles, avx512 or emulated")),
    }
}

/// The log line of the choice: the kernel, why not tiles, and, where it is measured, bf16's
/// rate beside float32's on one product of a wide layer's shape.
fn describe(k: Bf16Kernel, asked: &str) -> String {
    let mut s = format!("bf16 products on the CPU: {}", k.name());
    if asked != "auto" && !asked.is_empty() {
        s += &format!(" (HVTRAIN_CPU_BF16={asked})");
    } else if let (Bf16Kernel::Avx512, Err(why)) = (k, amx::ready()) {
        s += &format!(" (no AMX tiles: {why})");
    }
    if k != Bf16Kernel::Emulated && std::env::var("HVTRAIN_BF16_RATE_CHECK").map_or(true, |v| v != "0") {
        let (r16, r32) = (rate(|g, a, b, c| k.gemm(g, a, b, c)), rate(super::gemm));
        s += &format!("; one 256×1024×1024 product: bf16 {r16:.0} GFLOP/s, float32 {r32:.0} GFLOP/s");
        if r16 < r32 {
            s += &format!(
                ". On this CPU bf16 products are SLOWER than float32 ({:.2}×): training.precision = \"bf16\" \
                 saves nothing here; \"fp32\" is faster",
                r16 / r32
            );
        }
    }
    s
}

/// GFLOP/s of a 256 × 1024 × 1024 product (the best of three, after one to warm up).
fn rate(f: impl Fn(Gemm, &[f32], &[f32], &mut [f32])) -> f64 {
    let (m, k, n) = (256, 1024, 1024);
    let g = Gemm::new(m, k, n, Trans::N, Trans::N);
    let (a, b) = (vec![0.5f32; m * k], vec![0.25f32; k * n]);
    let mut c = vec![0f32; m * n];
    f(g, &a, &b, &mut c);
    let best = (0..3)
        .map(|_| {
            let t = std::time::Instant::now();
            f(g, &a, &b, &mut c);
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    2.0 * (m * k * n) as f64 / best / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_tiles_then_avx512_and_says_why_not() {
        let no = || Err::<(), String>("no AMX".into());
        assert_eq!(decide("auto", Ok(()), true), Ok(Bf16Kernel::Tiles));
        assert_eq!(decide("auto", no(), true), Ok(Bf16Kernel::Avx512));
        let e = decide("auto", no(), false).unwrap_err();
        assert!(e.contains("avx512_bf16"), "{e}");
        assert_eq!(decide("tiles", no(), true).unwrap_err(), "HVTRAIN_CPU_BF16=tiles but no AMX");
        assert_eq!(decide("avx512", Ok(()), true), Ok(Bf16Kernel::Avx512));
        assert!(decide("avx512", Ok(()), false).is_err());
        assert_eq!(decide("emulated", no(), false), Ok(Bf16Kernel::Emulated));
        assert!(decide("amx", Ok(()), true).unwrap_err().contains("expected auto, tiles, avx512 or emulated"));
    }
}
