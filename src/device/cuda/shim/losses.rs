//! The loss and dropout kernels through the shim (see `mod.rs` for the method and the
//! tolerances): softmax cross-entropy with and without class weights and label smoothing
//! (`hv_softmax_xent_smooth`), and a label out of range, the element-wise losses (binary
//! cross-entropy with label smoothing through `hv_binary_xent_smooth`)
//! (squared, absolute, Huber, binary cross-entropy, and log-cosh, MAPE, MSLE, pinball through
//! `hv_regression_loss`: per-row losses within (k + 2)·4·ε_f32,
//! correct counts exact, gradients within 4 ulps), and dropout bit for bit.
//!
//! Must not: be built into the binary (tests only).

use super::*;
use crate::device::{Mask, Pointwise};

#[test]
fn softmax_xent_matches_cpu() {
    let mut rng = Rng::new(13, 0);
    for rows in ROWS {
        for k in COLS {
            let logits = random(&mut rng, rows * k, 6.0);
            let labels: Vec<i32> = (0..rows).map(|_| rng.below(k) as i32).collect();
            let gs = 1.0 / rows as f32;
            // Class weights: none, and one per class from 0 to 3 (`model.class_weights`).
            let weights: Vec<f32> = (0..k).map(|c| (c % 4) as f32 * 0.75 + (c % 3) as f32 * 0.125).collect();
            // Label smoothing: none (hv_softmax_xent), and ε = 0.1 and 1 (hv_softmax_xent_smooth).
            for (cw, eps) in [None, Some(&weights[..])].into_iter().flat_map(|w| [(w, 0.0f32), (w, 0.1), (w, 1.0)]) {
                let mut want_d = vec![0.0; rows * k];
                let (want_sum, want_correct) =
                    cpu::softmax_xent(&logits, &labels, cw, None, k, eps, gs, Some(&mut want_d));
                // Per-row losses and hits from the CPU, one row at a time.
                let per_row: Vec<(f64, usize)> = (0..rows)
                    .map(|r| cpu::softmax_xent(&logits[r * k..][..k], &labels[r..][..1], cw, None, k, eps, gs, None))
                    .collect();
                for with_d in [false, true] {
                    for (g, b) in grids(rows) {
                        let what = format!(
                            "softmax_xent {rows}x{k} weights={} smoothing={eps} d={with_d} grid {g}x{b}",
                            cw.is_some()
                        );
                        let mut d = with_d.then(|| guarded(vec![0.0; rows * k]));
                        let mut loss = guarded(vec![0.0; rows]);
                        let mut correct = vec![-1i32; rows + GUARD];
                        // SAFETY: logits and d hold rows·k elements, labels, loss and correct rows.
                        unsafe {
                            let dp = ptr_or_null(&mut d);
                            let cwp = cw.map_or(std::ptr::null(), |w| w.as_ptr());
                            let (lp, cp) = (loss.as_mut_ptr(), correct.as_mut_ptr());
                            if eps > 0.0 {
                                let (x, y) = (logits.as_ptr(), labels.as_ptr());
                                hvshim_hv_softmax_xent_smooth(
                                    g,
                                    b,
                                    x,
                                    y,
                                    cwp,
                                    rows as i64,
                                    k as i32,
                                    eps,
                                    gs,
                                    dp,
                                    lp,
                                    cp,
                                );
                            } else {
                                let (x, y) = (logits.as_ptr(), labels.as_ptr());
                                hvshim_hv_softmax_xent(g, b, x, y, cwp, rows as i64, k as i32, gs, dp, lp, cp);
                            }
                        }
                        let loss = body(&what, &loss);
                        assert!(correct[rows..].iter().all(|&c| c == -1), "{what}: row_correct written past the end");
                        for (r, &(l, c)) in per_row.iter().enumerate() {
                            assert_close(&format!("{what} loss row {r}"), &[loss[r]], &[l as f32]);
                            assert_eq!(correct[r], c as i32, "{what}: correct, row {r}");
                        }
                        let sum: f64 = loss.iter().map(|&l| l as f64).sum();
                        let hits: i32 = correct[..rows].iter().sum();
                        let tol = ULPS as f64 * f32::EPSILON as f64 * want_sum.max(1.0);
                        assert!((sum - want_sum).abs() <= tol, "{what}: loss sum {sum:e} vs cpu {want_sum:e}");
                        assert_eq!(hits as usize, want_correct, "{what}: correct count");
                        if let Some(d) = &d {
                            assert_close(&format!("{what} d"), body(&what, d), &want_d);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn softmax_xent_with_a_label_out_of_range_is_nan() {
    let logits = [0.5f32, -1.0, 2.0, 0.0, 1.0, 3.0, 1.0, 1.0, 1.0];
    let labels = [-1i32, 3, 2];
    let (mut loss, mut correct) = ([0.0f32; 3], [7i32; 3]);
    // SAFETY: 3 rows of 3.
    unsafe {
        hvshim_hv_softmax_xent(
            1,
            32,
            logits.as_ptr(),
            labels.as_ptr(),
            std::ptr::null(),
            3,
            3,
            1.0,
            null_mut(),
            loss.as_mut_ptr(),
            correct.as_mut_ptr(),
        )
    };
    assert!(loss[0].is_nan() && loss[1].is_nan() && loss[2].is_finite(), "{loss:?}");
    assert_eq!(correct, [0, 0, 0]);
}

#[test]
fn pointwise_losses_match_cpu() {
    let mut rng = Rng::new(14, 0);
    for f in [
        Pointwise::Mse,
        Pointwise::Mae,
        Pointwise::Huber(0.7),
        Pointwise::BinaryXent(0.0),
        Pointwise::BinaryXent(0.2),
        Pointwise::LogCosh,
        Pointwise::Mape,
        Pointwise::Msle,
        Pointwise::Quantile(0.9),
    ] {
        for rows in ROWS {
            for k in COLS {
                let pred = random(&mut rng, rows * k, if matches!(f, Pointwise::BinaryXent(_)) { 12.0 } else { 2.0 });
                let mut target = random(&mut rng, rows * k, 2.0);
                match f {
                    Pointwise::BinaryXent(_) => target.iter_mut().for_each(|t| *t = if *t > 0.0 { 1.0 } else { 0.0 }),
                    // MSLE's targets and predictions mostly positive, some below its floor.
                    Pointwise::Msle => target.iter_mut().for_each(|t| *t = t.abs() * 3.0),
                    _ => {}
                }
                let gs = 1.0 / rows as f32;
                let mut want_d = vec![0.0; rows * k];
                cpu::pointwise_loss(f, &pred, &target, None, k, gs, Some(&mut want_d));
                let per_row: Vec<(f64, usize)> = (0..rows)
                    .map(|r| cpu::pointwise_loss(f, &pred[r * k..][..k], &target[r * k..][..k], None, k, gs, None))
                    .collect();
                // The kernel sums a row in f32, cpu.rs in f64 (see the module comment).
                let row_tol = (k as f64 + 2.0) * 4.0 * f32::EPSILON as f64;
                for with_d in [false, true] {
                    for (g, b) in grids(rows) {
                        let what = format!("{f:?} {rows}x{k} d={with_d} grid {g}x{b}");
                        let mut d = with_d.then(|| guarded(vec![0.0; rows * k]));
                        let mut loss = guarded(vec![0.0; rows]);
                        let mut correct = vec![-1i32; rows];
                        let (mode, delta) = f.mode();
                        // SAFETY: pred, target and d hold rows·k elements, loss and correct rows.
                        unsafe {
                            let dp = ptr_or_null(&mut d);
                            let (x, t, n, kk) = (pred.as_ptr(), target.as_ptr(), rows as i64, k as i32);
                            let (lp, cp) = (loss.as_mut_ptr(), correct.as_mut_ptr());
                            match f {
                                Pointwise::BinaryXent(eps) if eps > 0.0 => {
                                    hvshim_hv_binary_xent_smooth(g, b, x, t, n, kk, eps, gs, dp, lp, cp)
                                }
                                _ if mode >= 4 => {
                                    hvshim_hv_regression_loss(g, b, x, t, n, kk, mode, delta, gs, dp, lp, cp)
                                }
                                _ => hvshim_hv_pointwise_loss(g, b, x, t, n, kk, mode, delta, gs, dp, lp, cp),
                            }
                        }
                        for (r, (&got, &(want, c))) in body(&what, &loss).iter().zip(&per_row).enumerate() {
                            assert!(
                                (got as f64 - want).abs() <= row_tol * want + f32::MIN_POSITIVE as f64,
                                "{what}: row {r} loss {got:e} vs cpu {want:e}"
                            );
                            assert_eq!(correct[r] as usize, c, "{what}: row {r} correct elements");
                        }
                        if let Some(d) = &d {
                            assert_close(&format!("{what} d"), body(&what, d), &want_d);
                        }
                    }
                }
            }
        }
    }
}

/// Sample weights (`data.sample_weight`): each loss kernel, then `hv_weigh_rows` on its row
/// losses and gradient, against the CPU reference given the same weights (0 among them).
#[test]
fn weigh_rows_after_each_loss_matches_cpu() {
    let mut rng = Rng::new(15, 0);
    for rows in ROWS {
        for k in COLS {
            let rw: Vec<f32> = (0..rows).map(|r| [0.5, 2.0, 0.0, 1.0, 3.25][r % 5]).collect();
            let logits = random(&mut rng, rows * k, 4.0);
            let labels: Vec<i32> = (0..rows).map(|_| rng.below(k) as i32).collect();
            let target = random(&mut rng, rows * k, 2.0);
            let gs = 1.0 / rows as f32;
            for f in [None, Some(Pointwise::Mse), Some(Pointwise::Huber(0.7)), Some(Pointwise::BinaryXent(0.0))] {
                let t: Vec<f32> = match f {
                    Some(Pointwise::BinaryXent(_)) => target.iter().map(|&t| if t > 0.0 { 1.0 } else { 0.0 }).collect(),
                    _ => target.clone(),
                };
                let mut want_d = vec![0.0; rows * k];
                let (want_sum, _) = match f {
                    None => cpu::softmax_xent(&logits, &labels, None, Some(&rw), k, 0.0, gs, Some(&mut want_d)),
                    Some(f) => cpu::pointwise_loss(f, &logits, &t, Some(&rw), k, gs, Some(&mut want_d)),
                };
                for (g, b) in grids(rows) {
                    let what = format!("{f:?} {rows}x{k} with sample weights, grid {g}x{b}");
                    let mut d = guarded(vec![0.0; rows * k]);
                    let mut loss = guarded(vec![0.0; rows]);
                    let mut correct = vec![-1i32; rows];
                    // SAFETY: logits, t and d hold rows·k elements, labels, rw, loss and correct rows.
                    unsafe {
                        match f {
                            None => hvshim_hv_softmax_xent(
                                g,
                                b,
                                logits.as_ptr(),
                                labels.as_ptr(),
                                std::ptr::null(),
                                rows as i64,
                                k as i32,
                                gs,
                                d.as_mut_ptr(),
                                loss.as_mut_ptr(),
                                correct.as_mut_ptr(),
                            ),
                            Some(f) => {
                                let (mode, delta) = f.mode();
                                hvshim_hv_pointwise_loss(
                                    g,
                                    b,
                                    logits.as_ptr(),
                                    t.as_ptr(),
                                    rows as i64,
                                    k as i32,
                                    mode,
                                    delta,
                                    gs,
                                    d.as_mut_ptr(),
                                    loss.as_mut_ptr(),
                                    correct.as_mut_ptr(),
                                )
                            }
                        }
                        hvshim_hv_weigh_rows(
                            g,
                            b,
                            loss.as_mut_ptr(),
                            d.as_mut_ptr(),
                            rw.as_ptr(),
                            rows as i64,
                            k as i32,
                        );
                    }
                    let sum: f64 = body(&what, &loss).iter().map(|&l| l as f64).sum();
                    let tol = (k as f64 + 2.0) * 4.0 * f32::EPSILON as f64 * want_sum.max(1.0);
                    assert!((sum - want_sum).abs() <= tol, "{what}: loss sum {sum:e} vs cpu {want_sum:e}");
                    assert_close(&format!("{what} d"), body(&what, &d), &want_d);
                    let zero = (0..rows).filter(|r| rw[*r] == 0.0);
                    assert!(zero.clone().all(|r| loss[r] == 0.0), "{what}: a row of weight 0 kept its loss");
                }
            }
        }
    }
}

#[test]
fn dropout_matches_cpu_bit_for_bit() {
    let mut rng = Rng::new(17, 0);
    for rows in ROWS {
        for cols in COLS {
            let v = random(&mut rng, rows * cols, 3.0);
            let keys: Vec<i32> = (0..rows).map(|r| (r as i32 * 7919) ^ 0x5a5a).collect();
            for m in [Mask::new(5, 11, 1, 0.3).at_col(17), Mask::new(5, 12, 0, 0.9), Mask::scale_only(1.0 / 0.7)] {
                let mut want = v.clone();
                cpu::dropout(&mut want, cols, &keys, m);
                for (g, b) in grids(rows * cols) {
                    let what = format!("dropout {rows}x{cols} {m:?} grid {g}x{b}");
                    let mut got = guarded(v.clone());
                    // SAFETY: got holds rows·cols elements, keys rows.
                    unsafe {
                        hvshim_hv_dropout(
                            g,
                            b,
                            got.as_mut_ptr(),
                            rows as i64,
                            cols as i32,
                            keys.as_ptr(),
                            m.salt,
                            m.col0,
                            m.threshold,
                            m.scale,
                        )
                    };
                    let got = body(&what, &got);
                    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}");
                }
            }
        }
    }
}
