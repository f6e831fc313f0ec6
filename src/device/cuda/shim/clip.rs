//! Gradient clipping's kernels (`hv_sum_squares`, `hv_clamp`) through the host shim against
//! the CPU backend: the partial sums add up to its float64 sum, the clamp gives its values bit
//! for bit and its count, for the GPU's set count and for 1 and 7 sets, on every grid.
//!
//! Must not: be built into the binary (tests only).

use super::{body, grids, guarded, random, GUARD, SIZES};
use crate::rng::Rng;

extern "C" {
    fn hvshim_hv_sum_squares(g: u32, b: u32, v: *const f32, n: i64, partial: *mut f64, parts: i32);
    fn hvshim_hv_clamp(g: u32, b: u32, v: *mut f32, n: i64, bound: f32, changed: *mut i32, parts: i32);
}

/// The sum of squares' partials add up to the CPU backend's float64 sum (another order of
/// float64 additions of exact squares: within 1e-12 relative), for the GPU's set count and
/// for 1 and 7 sets; no partial is written past `parts`.
#[test]
fn sum_squares_matches_cpu() {
    let mut rng = Rng::new(41, 0);
    for &n in &SIZES {
        let v = random(&mut rng, n, 3.0);
        let want: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        for parts in [super::super::launch::reduce_parts(n), 1, 7.min(n)] {
            for (g, b) in grids(parts) {
                let mut partial = vec![-1.0f64; parts + GUARD];
                // SAFETY: v holds n floats; partial holds parts (+ guards) doubles.
                unsafe { hvshim_hv_sum_squares(g, b, v.as_ptr(), n as i64, partial.as_mut_ptr(), parts as i32) };
                assert!(partial[parts..].iter().all(|&x| x == -1.0), "n {n}: a partial past the end");
                let got: f64 = partial[..parts].iter().sum();
                assert!(
                    (got - want).abs() <= 1e-12 * want.max(1.0),
                    "n {n}, {parts} sets, grid {g}x{b}: {got} vs {want}"
                );
            }
        }
    }
}

/// The clamp gives `clamp_host`'s values bit for bit (NaN kept, ±bound itself unchanged)
/// and its count of changed values.
#[test]
fn clamp_matches_cpu() {
    let mut rng = Rng::new(43, 0);
    for &n in &SIZES {
        let mut v = random(&mut rng, n, 2.0);
        for (i, x) in [f32::NAN, 0.7, -0.7, f32::INFINITY, -0.0].into_iter().enumerate() {
            if i < n {
                v[i * n / 5] = x;
            }
        }
        let mut want = v.clone();
        let k_want = crate::device::backend::clamp_host(&mut want, &[(0..n, 0.7)]);
        for parts in [super::super::launch::reduce_parts(n), 1, 7.min(n)] {
            for (g, b) in grids(parts) {
                let mut got = guarded(v.clone());
                let mut changed = vec![-1i32; parts];
                // SAFETY: got holds n floats (+ guards); changed holds parts ints.
                unsafe { hvshim_hv_clamp(g, b, got.as_mut_ptr(), n as i64, 0.7, changed.as_mut_ptr(), parts as i32) };
                let got = body("clamp", &got);
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                assert!(same, "n {n}, {parts} sets, grid {g}x{b}: values differ from clamp_host");
                let k: i32 = changed.iter().sum();
                assert_eq!(k as usize, k_want, "n {n}, {parts} sets, grid {g}x{b}: changed count");
            }
        }
    }
}
