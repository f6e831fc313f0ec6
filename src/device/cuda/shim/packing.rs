//! The fp16/bf16 pack and unpack kernels through the shim (see `mod.rs` for the method),
//! bit-exact against the `half` crate, the CPU's compression path: specials, every rounding
//! tie of both formats and its neighbours, overflow and underflow edges, random bit patterns;
//! NaN only required to stay NaN.
//!
//! Must not: be built into the binary (tests only).

use super::*;

/// f32 inputs for the packers: specials, every rounding tie of both formats (and its
/// neighbours), overflow and underflow edges, random bit patterns over all of f32 and
/// random values within fp16's range.
fn pack_inputs() -> Vec<f32> {
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),           // the smallest f32 subnormal
        65504.0,                     // fp16 max
        65519.996,                   // just below the tie: 65504
        65520.0,                     // the tie between 65504 and 65536: to even, infinity
        65536.0,                     // overflow
        1e6,                         // overflow (fp16), fine (bf16)
        2f32.powi(-24),              // the smallest fp16 subnormal
        2f32.powi(-25),              // half of it: a tie, to even (zero)
        f32::from_bits(0x3300_0001), // just above that tie: the smallest subnormal
        2f32.powi(-26),              // underflow to zero
        1e-10,                       // underflow to zero
        f32::from_bits(0x7f7f_8000), // bf16 tie at the top: to even, infinity
        f32::from_bits(0x7f7f_7fff), // just below: bf16 max
        f32::from_bits(0x7fc0_0000), // NaNs: quiet, signalling, negative, payloads
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc0_0001),
        f32::from_bits(0x7fff_ffff),
        f32::from_bits(0x7f80_2000),
    ];
    // fp16 ties: the midpoint between every pair of adjacent finite fp16 values (65536 stands
    // in for the value after the largest), exact in f32, and its f32 neighbours.
    for h in 0u16..0x7c00 {
        let lo = half::f16::from_bits(h).to_f32() as f64;
        let hi = if h == 0x7bff { 65536.0 } else { half::f16::from_bits(h + 1).to_f32() as f64 };
        let mid = ((lo + hi) / 2.0) as f32;
        for x in [mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1)] {
            xs.extend([x, -x]);
        }
    }
    // bf16 ties and their neighbours, under every upper half (NaNs and infinities included).
    for hi in 0u32..=0xffff {
        for lo in [0x0000, 0x7fff, 0x8000, 0x8001] {
            xs.push(f32::from_bits(hi << 16 | lo));
        }
    }
    let mut rng = Rng::new(18, 0);
    for _ in 0..300_000 {
        xs.push(f32::from_bits(rng.next_u64() as u32));
        // Exponents from 2^-27 to 2^17: fp16's subnormals, normals and overflow.
        let bits = rng.next_u64();
        let exp = 100 + (bits >> 32) % 45;
        xs.push(f32::from_bits((bits as u32 & 0x807f_ffff) | (exp as u32) << 23));
    }
    xs
}

/// Runs a packer over `xs` with each grid and checks it against the `half` crate, bit for bit
/// (NaN: only that it stays NaN).
fn check_pack(
    what: &str,
    xs: &[f32],
    shim: unsafe extern "C" fn(u32, u32, *const f32, *mut u16, i64),
    scalar: impl Fn(f32) -> u16,
    slice: impl Fn(&[f32], &mut [u16]),
    is_nan: impl Fn(u16) -> bool,
) {
    let mut want = vec![0u16; xs.len()];
    slice(xs, &mut want);
    for (g, b) in [grid_1d(xs.len()), (3, 64)] {
        let mut got = vec![0xdeadu16; xs.len() + GUARD];
        // SAFETY: xs.len() elements in and out.
        unsafe { shim(g, b, xs.as_ptr(), got.as_mut_ptr(), xs.len() as i64) };
        assert!(got[xs.len()..].iter().all(|&x| x == 0xdead), "{what}: wrote past the end");
        for (i, &x) in xs.iter().enumerate() {
            if x.is_nan() {
                assert!(is_nan(got[i]), "{what}: NaN {:#010x} became {:#06x}", x.to_bits(), got[i]);
                continue;
            }
            assert_eq!(got[i], scalar(x), "{what}: {x:e} ({:#010x}) grid {g}x{b}", x.to_bits());
            assert_eq!(got[i], want[i], "{what}: {x:e} ({:#010x}), slice conversion", x.to_bits());
        }
    }
}

/// Runs an unpacker over every 16-bit pattern and checks it against the `half` crate.
fn check_unpack(
    what: &str,
    shim: unsafe extern "C" fn(u32, u32, *const u16, *mut f32, i64),
    scalar: impl Fn(u16) -> f32,
    slice: impl Fn(&[u16], &mut [f32]),
) {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let mut want = vec![0f32; all.len()];
    slice(&all, &mut want);
    for (g, b) in [grid_1d(all.len()), (1, 32)] {
        let mut got = guarded(vec![0f32; all.len()]);
        // SAFETY: 65536 elements in and out.
        unsafe { shim(g, b, all.as_ptr(), got.as_mut_ptr(), all.len() as i64) };
        let got = body(what, &got);
        for (&h, (&x, &w)) in all.iter().zip(got.iter().zip(&want)) {
            let s = scalar(h);
            if s.is_nan() {
                assert!(x.is_nan() && w.is_nan(), "{what}: {h:#06x} is NaN, shim gave {x:e}");
                continue;
            }
            assert_eq!(x.to_bits(), s.to_bits(), "{what}: {h:#06x}: shim {x:e} vs half {s:e}");
            assert_eq!(x.to_bits(), w.to_bits(), "{what}: {h:#06x}: shim {x:e} vs half slice {w:e}");
        }
    }
}

#[test]
fn fp16_and_bf16_pack_bit_exact_with_half() {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    use half::{bf16, f16};
    let xs = pack_inputs();
    check_pack(
        "pack_f16",
        &xs,
        hvshim_hv_pack_f16,
        |x| f16::from_f32(x).to_bits(),
        |x, o| o.reinterpret_cast_mut::<f16>().convert_from_f32_slice(x),
        |h| f16::from_bits(h).is_nan(),
    );
    check_pack(
        "pack_bf16",
        &xs,
        hvshim_hv_pack_bf16,
        |x| bf16::from_f32(x).to_bits(),
        |x, o| o.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(x),
        |h| bf16::from_bits(h).is_nan(),
    );
}

#[test]
fn fp16_and_bf16_unpack_bit_exact_with_half() {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    use half::{bf16, f16};
    check_unpack(
        "unpack_f16",
        hvshim_hv_unpack_f16,
        |h| f16::from_bits(h).to_f32(),
        |h, o| h.reinterpret_cast::<f16>().convert_to_f32_slice(o),
    );
    check_unpack(
        "unpack_bf16",
        hvshim_hv_unpack_bf16,
        |h| bf16::from_bits(h).to_f32(),
        |h, o| h.reinterpret_cast::<bf16>().convert_to_f32_slice(o),
    );
}

/// bf16 layer outputs' in-place rounding (`hv_round_bf16`, where no cublasLt bf16 epilogue
/// writes them): bit-exact with what the CPU's `bias_act` stores (`bf16::round`), on every
/// input the packers see, with both grids and guard elements untouched.
#[test]
fn bf16_round_in_place_bit_exact_with_the_cpu() {
    let xs = pack_inputs();
    for (g, b) in [grid_1d(xs.len()), (3, 64)] {
        let mut got = guarded(xs.clone());
        // SAFETY: xs.len() elements, rounded in place.
        unsafe { hvshim_hv_round_bf16(g, b, got.as_mut_ptr(), xs.len() as i64) };
        let got = body("round_bf16", &got);
        for (&x, &r) in xs.iter().zip(got) {
            let want = crate::device::bf16::round(x);
            if want.is_nan() {
                assert!(r.is_nan(), "round_bf16: NaN {:#010x} became {r:e}", x.to_bits());
                continue;
            }
            assert_eq!(r.to_bits(), want.to_bits(), "round_bf16: {x:e} ({:#010x}) grid {g}x{b}", x.to_bits());
        }
    }
}
