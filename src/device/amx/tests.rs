//! The tile kernel's blocking, packing and epilogue on the emulated unit (every CPU), and the
//! tiles against it (CPUs with AMX: there the tests say they ran, or fail under
//! HVTRAIN_REQUIRE_AMX=1 when the tiles are not ready).
//!
//! Must not: pass where the tiles did not run on a CPU that has them (the counter is checked).

use super::*;
use crate::device::backend::Trans;
use crate::device::bf16::round;
use crate::device::tile::check::{self, data, reference_of};

fn emulated(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    gemm(Unit::Emulated, g, a, b, c)
}

/// Every transpose, edges on every side (m, n past a block, k odd and past a k-tile, several
/// blocks), alpha and beta (beta 0 must not read C): within float32 summation error of the
/// exact product of the bf16-rounded operands. A packing that drops a pair, swaps a pair's
/// halves on one side, mis-places an edge, or an epilogue that mis-applies beta is off by far
/// more.
#[test]
fn tile_kernel_equals_the_exact_product_of_the_rounded_operands() {
    check::exact_over_shapes(emulated, round);
}

/// Threads split C's block columns (or rows); each block is summed by one unit in k order, so
/// 1 and 3 threads give the same bits.
#[test]
fn threads_give_the_same_bits() {
    check::same_bits_on_threads(emulated, round);
}

/// The forward's epilogue where the blocks are stored: the caller's row function gets every
/// row's part of every block once, with the bias of those columns and the same part of
/// keep_z; here a function whose result on a whole row is known (z = x·W + bias kept, out = 2z),
/// on a shape with edge blocks on both sides. (`Cpu::dense` on the emulated unit against the
/// product and `bias_act`: the CPU backend's tests.)
#[test]
fn the_forward_epilogue_sees_each_row_part_once_with_its_bias() {
    let (m, k, n) = (45, 70, 37);
    let g = Gemm::new(m, k, n, Trans::N, Trans::N);
    let (a, b, bias) = (data(m * k, 1), data(k * n, 2), data(n, 3));
    let mut want = vec![0.0; m * n];
    emulated(g, &a, &b, &mut want);
    let want_z: Vec<f32> = want.iter().enumerate().map(|(i, v)| v + bias[i % n]).collect();
    let want: Vec<f32> = want_z.iter().map(|z| 2.0 * z).collect();
    let row = |o: &mut [f32], b: &[f32], mut z: Option<&mut [f32]>| {
        for (j, v) in o.iter_mut().enumerate() {
            *v += b[j];
            if let Some(z) = z.as_deref_mut() {
                z[j] = *v;
            }
            *v *= 2.0;
        }
    };
    let (mut got, mut got_z) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
    gemm_post(Unit::Emulated, g, &a, &b, &mut got, Post { bias: &bias, keep_z: Some(&mut got_z), row: &row });
    assert_eq!(got, want);
    assert_eq!(got_z, want_z, "kept pre-activation");
    let mut no_z = vec![f32::NAN; m * n];
    gemm_post(Unit::Emulated, g, &a, &b, &mut no_z, Post { bias: &bias, keep_z: None, row: &row });
    assert_eq!(no_z, want, "without keep_z");
}

/// On a CPU with AMX (and Linux's permission): the start-up check passes, the tiles agree with
/// the emulated unit on random operands (the same sums in the same order: bit for bit, or
/// within float32 summation error if the hardware orders a pair's two FMAs otherwise), and the
/// tile counter moved. Elsewhere it says why it did not run; HVTRAIN_REQUIRE_AMX=1 makes that
/// a failure (for a machine known to have AMX).
#[test]
fn tiles_agree_with_the_emulated_unit() {
    if let Err(why) = ready() {
        assert!(std::env::var("HVTRAIN_REQUIRE_AMX").is_err(), "HVTRAIN_REQUIRE_AMX=1 but {why}");
        eprintln!("skipped: {why}");
        return;
    }
    check_tiles().expect("the start-up check");
    let before = counts();
    let (mut bits, mut all) = (0usize, 0usize);
    for (m, k, n) in [(256, 784, 512), (100, 300, 10), (33, 1000, 65)] {
        for (ta, tb) in [(Trans::N, Trans::N), (Trans::T, Trans::N), (Trans::N, Trans::T)] {
            let g = Gemm { m, k, n, ta, tb, alpha: 1.0, beta: 0.0 };
            let (a, b) = (data(m * k, 11), data(k * n, 12));
            let (mut t, mut e) = (vec![0.0; m * n], vec![0.0; m * n]);
            gemm(Unit::Tiles, g, &a, &b, &mut t);
            gemm(Unit::Emulated, g, &a, &b, &mut e);
            let (_, scale) = reference_of(g, &a, &b, &e, |x| x);
            for ((x, y), s) in t.iter().zip(&e).zip(&scale) {
                assert!(((x - y).abs() as f64) / s < 1e-5, "{g:?}: tiles {x}, emulated {y}");
                bits += (x.to_bits() == y.to_bits()) as usize;
                all += 1;
            }
        }
    }
    let after = counts();
    assert!(after.0 > before.0 && after.1 > before.1, "the tile counter did not move: {before:?} → {after:?}");
    eprintln!(
        "AMX tiles ran ({} tile products); {bits} of {all} outputs bit-equal to the emulated unit",
        after.0 - before.0
    );
}

/// Without permission or AMX the tiles are refused with the reason, never run.
#[test]
fn ready_says_why_not() {
    match ready() {
        Ok(()) => assert!(cpu_has_amx()),
        Err(why) => assert!(why.contains("AMX") || why.contains("tile"), "{why}"),
    }
}
