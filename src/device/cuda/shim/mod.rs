//! Every GPU kernel's logic, run on the CPU: `kernels.cu` compiled by the system C++ compiler
//! through `shim.cpp` (built by build.rs), where a launch is a loop over the grid. Each
//! kernel runs with the grid the GPU gets (`launch::grid_1d`) and with deliberately small
//! grids (1 block of 32 threads, 3 blocks of 64), so that every grid-stride loop goes round
//! more than once, on random shapes with odd sizes, and is checked against the CPU backend
//! (`device::cpu`), which is what the GPU must match. Every output buffer has guard
//! elements past its end that no kernel may touch.
//!
//! Tolerances:
//! - Element-wise outputs (bias+activation, activation backward, gradients of both losses,
//!   softmax, SGD, Adam): |shim - cpu| ≤ 4·ε_f32·max(|cpu|, 1), inputs being of order 1.
//!   The kernels follow cpu.rs operation by operation and the shim is built with
//!   -ffp-contract=off (Rust never fuses a multiply-add), so on one machine the two differ
//!   only where C's and Rust's math functions (tanhf, expf, logf) might; both call the same
//!   libm here and agree to the bit, and 4 ulps leave room for another libm. A logic error
//!   (a wrong constant, term or index) is far outside that.
//! - Per-row losses: cross-entropy as above (the same f32 operations); MSE within
//!   (k + 2)·ε_f32·cpu, because the kernel sums a row's k squares in f32 where cpu.rs sums
//!   them in f64 (k roundings of positive terms, plus the square and the division).
//! - Argmax counts: exact. fp16/bf16 pack and unpack: bit-exact against the `half` crate (the
//!   CPU's compression path), NaN only required to stay NaN.
//!
//! A real GPU differs more (NVCC/NVRTC fuse multiply-adds by default; CUDA's tanhf and expf
//! are within 2 ulps): that is for the CUDA backend's own conformance tests on a GPU.
//!
//! Must not: be built into the binary (tests only).

mod clip;
mod fused;
mod losses;
mod packing;

use super::launch::{act_code, grid_1d, BIAS_BF16};
use crate::config::Activation;
use crate::device::cpu;
use crate::device::{AdamHyper, SgdHyper};
use crate::rng::Rng;
use std::ptr::{null, null_mut};

extern "C" {
    fn hvshim_hv_fill(g: u32, b: u32, v: *mut f32, n: i64, value: f32);
    fn hvshim_hv_gather_rows(g: u32, b: u32, dst: *mut f32, src: *const f32, idx: *const i32, rows: i64, cols: i32);
    fn hvshim_hv_bias_act(
        g: u32,
        b: u32,
        out: *mut f32,
        bias: *const f32,
        keep_z: *mut f32,
        rows: i64,
        cols: i32,
        act: i32,
        low: *mut u16,
    );
    fn hvshim_hv_act_backward(
        g: u32,
        b: u32,
        d: *mut f32,
        a: *const f32,
        z: *const f32,
        n: i64,
        act: i32,
        low: *mut u16,
    );
    fn hvshim_hv_softmax_xent(
        g: u32,
        b: u32,
        logits: *const f32,
        labels: *const i32,
        cw: *const f32,
        rows: i64,
        k: i32,
        grad_scale: f32,
        d: *mut f32,
        row_loss: *mut f32,
        row_correct: *mut i32,
    );
    #[allow(clippy::too_many_arguments)]
    fn hvshim_hv_softmax_xent_smooth(
        g: u32,
        b: u32,
        logits: *const f32,
        labels: *const i32,
        cw: *const f32,
        rows: i64,
        k: i32,
        eps: f32,
        grad_scale: f32,
        d: *mut f32,
        row_loss: *mut f32,
        row_correct: *mut i32,
    );
    fn hvshim_hv_pointwise_loss(
        g: u32,
        b: u32,
        pred: *const f32,
        target: *const f32,
        rows: i64,
        k: i32,
        mode: i32,
        delta: f32,
        grad_scale: f32,
        d: *mut f32,
        row_loss: *mut f32,
        row_correct: *mut i32,
    );
    #[allow(clippy::too_many_arguments)]
    fn hvshim_hv_regression_loss(
        g: u32,
        b: u32,
        pred: *const f32,
        target: *const f32,
        rows: i64,
        k: i32,
        mode: i32,
        tau: f32,
        grad_scale: f32,
        d: *mut f32,
        row_loss: *mut f32,
        row_correct: *mut i32,
    );
    #[allow(clippy::too_many_arguments)]
    fn hvshim_hv_binary_xent_smooth(
        g: u32,
        b: u32,
        pred: *const f32,
        target: *const f32,
        rows: i64,
        k: i32,
        eps: f32,
        grad_scale: f32,
        d: *mut f32,
        row_loss: *mut f32,
        row_correct: *mut i32,
    );
    fn hvshim_hv_weigh_rows(g: u32, b: u32, row_loss: *mut f32, d: *mut f32, rw: *const f32, rows: i64, k: i32);
    fn hvshim_hv_softmax_rows(g: u32, b: u32, v: *mut f32, rows: i64, k: i32);
    fn hvshim_hv_dropout(
        g: u32,
        b: u32,
        v: *mut f32,
        rows: i64,
        cols: i32,
        keys: *const i32,
        salt: u64,
        col0: u32,
        threshold: u32,
        scale: f32,
    );
    fn hvshim_hv_sgd(
        g: u32,
        b: u32,
        p: *mut f32,
        grad: *const f32,
        m: *mut f32,
        n: i64,
        lr: f32,
        grad_scale: f32,
        wd: f32,
        mu: f32,
        nesterov: i32,
        low: *mut u16,
    );
    fn hvshim_hv_adam(
        g: u32,
        b: u32,
        p: *mut f32,
        grad: *const f32,
        m: *mut f32,
        v: *mut f32,
        n: i64,
        lr: f32,
        grad_scale: f32,
        b1: f32,
        b2: f32,
        eps: f32,
        bc1: f32,
        bc2_sqrt: f32,
        l2: f32,
        decay: f32,
        low: *mut u16,
    );
    fn hvshim_hv_pack_f16(g: u32, b: u32, x: *const f32, out: *mut u16, n: i64);
    fn hvshim_hv_unpack_f16(g: u32, b: u32, inp: *const u16, out: *mut f32, n: i64);
    fn hvshim_hv_pack_bf16(g: u32, b: u32, x: *const f32, out: *mut u16, n: i64);
    fn hvshim_hv_unpack_bf16(g: u32, b: u32, inp: *const u16, out: *mut f32, n: i64);
    fn hvshim_hv_round_bf16(g: u32, b: u32, x: *mut f32, n: i64);
}

const ACTS: [Activation; 10] = Activation::ALL;
/// Rows (or element counts) and columns, odd ones included.
const ROWS: [usize; 5] = [1, 3, 17, 129, 1000];
const COLS: [usize; 5] = [1, 3, 10, 17, 129];
/// Element counts for the element-wise kernels.
const SIZES: [usize; 8] = [1, 2, 3, 17, 129, 1000, 4099, 70_001];

/// The GPU's grid for `n` items, then grids small enough that every grid-stride loop loops.
fn grids(n: usize) -> [(u32, u32); 3] {
    [grid_1d(n), (1, 32), (3, 64)]
}

/// |got - want| ≤ 4·ε_f32·max(|want|, 1), element by element (see the module comment).
const ULPS: f32 = 4.0;

fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = ULPS * f32::EPSILON * w.abs().max(1.0);
        assert!((g - w).abs() <= tol, "{what}: [{i}] shim {g:e} vs cpu {w:e} (|diff| {:e} > {tol:e})", (g - w).abs());
    }
}

fn random(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| (rng.uniform() * 2.0 - 1.0) as f32 * scale).collect()
}

const GUARD: usize = 3;
const SENTINEL: f32 = -7777.25;

/// `v` with guard elements appended.
fn guarded(mut v: Vec<f32>) -> Vec<f32> {
    v.extend([SENTINEL; GUARD]);
    v
}

/// `v` without its guard elements, which must be untouched.
fn body<'a>(what: &str, v: &'a [f32]) -> &'a [f32] {
    let n = v.len() - GUARD;
    assert!(v[n..].iter().all(|&x| x == SENTINEL), "{what}: a kernel wrote past the end: {:?}", &v[n..]);
    &v[..n]
}

fn ptr_or_null(v: &mut Option<Vec<f32>>) -> *mut f32 {
    v.as_mut().map_or(null_mut(), |v| v.as_mut_ptr())
}

/// A bf16 copy for `n` values (with guard elements) when `on`: the kernels that keep one
/// (`HV_LOW`) write it only when handed one.
pub(super) fn low_copy(on: bool, n: usize) -> Option<Vec<u16>> {
    on.then(|| vec![0xdead; n + GUARD])
}

pub(super) fn low_ptr(v: &mut Option<Vec<u16>>) -> *mut u16 {
    v.as_mut().map_or(null_mut(), |v| v.as_mut_ptr())
}

/// The copy, when there is one, holds the bf16 rounding of `values` bit for bit (what a bf16
/// product would round them to: `bf16::to_bf16`), and its guard elements are untouched.
pub(super) fn check_low(what: &str, low: &Option<Vec<u16>>, values: &[f32]) {
    let Some(low) = low else { return };
    let n = values.len();
    assert!(low[n..].iter().all(|&x| x == 0xdead), "{what}: the bf16 copy was written past its end");
    for (i, (&h, &x)) in low[..n].iter().zip(values).enumerate() {
        assert_eq!(h, crate::device::bf16::to_bf16(x), "{what}: bf16 copy of element {i} ({x})");
    }
}

#[test]
fn fill_sets_every_element() {
    for n in SIZES {
        for (g, b) in grids(n) {
            let mut v = guarded(vec![0.0; n]);
            // SAFETY: `v` holds n elements (and the guard).
            unsafe { hvshim_hv_fill(g, b, v.as_mut_ptr(), n as i64, 2.5) };
            assert!(body("fill", &v).iter().all(|&x| x == 2.5), "fill n={n} grid {g}x{b}");
        }
    }
}

#[test]
fn gather_rows_matches_cpu() {
    let mut rng = Rng::new(5, 17);
    for (n, cols, rows) in [(1, 1, 1), (40, 7, 33), (300, 31, 129)] {
        let src = random(&mut rng, n * cols, 1.0);
        let idx: Vec<i32> = (0..rows).map(|_| (rng.uniform() * n as f64) as i32).collect();
        let mut want = vec![0.0; rows * cols];
        cpu::gather_rows(&src, cols, &idx, &mut want);
        for (g, b) in grids(rows * cols) {
            let mut dst = guarded(vec![0.0; rows * cols]);
            // SAFETY: dst holds rows·cols (and the guard), src n·cols, idx rows values < n.
            unsafe {
                hvshim_hv_gather_rows(g, b, dst.as_mut_ptr(), src.as_ptr(), idx.as_ptr(), rows as i64, cols as i32)
            };
            assert_eq!(body("gather", &dst), &want[..], "gather n={n} cols={cols} rows={rows} grid {g}x{b}");
        }
    }
}

#[test]
fn bias_act_matches_cpu() {
    let mut rng = Rng::new(11, 0);
    for rows in ROWS {
        for cols in COLS {
            let x = random(&mut rng, rows * cols, 3.0);
            let bias = random(&mut rng, cols, 1.0);
            // BIAS_BF16 (bf16 outputs): the bias rounded to bf16 before it is added.
            let rounded: Vec<f32> = bias.iter().map(|&b| crate::device::bf16::round(b)).collect();
            for (act, bias_bf16) in ACTS.into_iter().flat_map(|a| [(a, false), (a, true)]) {
                for keep in [false, true] {
                    let mut want = x.clone();
                    let mut want_z = vec![0.0; rows * cols];
                    let b = if bias_bf16 { &rounded } else { &bias };
                    cpu::bias_act_forward(&mut want, b, act, keep.then_some(&mut want_z[..]));
                    for (k, (g, b)) in grids(rows * cols).into_iter().enumerate() {
                        let mut low = low_copy(k % 2 == 1, rows * cols);
                        let what = format!(
                            "bias_act {rows}x{cols} {act:?} keep_z={keep} bias_bf16={bias_bf16} low={} grid {g}x{b}",
                            low.is_some()
                        );
                        let mut out = guarded(x.clone());
                        let mut z = keep.then(|| guarded(vec![0.0; rows * cols]));
                        // SAFETY: out and z hold rows·cols elements, bias cols.
                        unsafe {
                            let zp = ptr_or_null(&mut z);
                            hvshim_hv_bias_act(
                                g,
                                b,
                                out.as_mut_ptr(),
                                bias.as_ptr(),
                                zp,
                                rows as i64,
                                cols as i32,
                                act_code(act) | if bias_bf16 { BIAS_BF16 } else { 0 },
                                low_ptr(&mut low),
                            );
                        }
                        assert_close(&what, body(&what, &out), &want);
                        check_low(&what, &low, body(&what, &out));
                        if let Some(z) = &z {
                            assert_close(&format!("{what} z"), body(&what, z), &want_z);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn act_backward_matches_cpu() {
    let mut rng = Rng::new(12, 0);
    for n in SIZES {
        let z = random(&mut rng, n, 4.0);
        let d = random(&mut rng, n, 1.0);
        for act in ACTS {
            let mut a = z.clone();
            cpu::act_forward_inplace(&mut a, act);
            // gelu, silu, ... need z; the others must work with z absent (null) or present.
            let with_z: &[bool] = if act.needs_z() { &[true] } else { &[false, true] };
            for &pass_z in with_z {
                let mut want = d.clone();
                cpu::act_backward_inplace(&mut want, &a, pass_z.then_some(&z[..]), act);
                for (k, (g, b)) in grids(n).into_iter().enumerate() {
                    let mut low = low_copy(k % 2 == 0, n);
                    let what = format!("act_backward n={n} {act:?} z={pass_z} low={} grid {g}x{b}", low.is_some());
                    let mut got = guarded(d.clone());
                    let zp = if pass_z { z.as_ptr() } else { null() };
                    let lp = low_ptr(&mut low);
                    // SAFETY: d, a, z (when passed) and low (when passed) hold n elements.
                    unsafe {
                        hvshim_hv_act_backward(g, b, got.as_mut_ptr(), a.as_ptr(), zp, n as i64, act_code(act), lp)
                    };
                    assert_close(&what, body(&what, &got), &want);
                    check_low(&what, &low, body(&what, &got));
                }
            }
        }
    }
}

#[test]
fn softmax_rows_matches_cpu() {
    let mut rng = Rng::new(15, 0);
    for rows in ROWS {
        for k in COLS {
            let v = random(&mut rng, rows * k, 8.0);
            let mut want = v.clone();
            cpu::softmax_rows(&mut want, k);
            for (g, b) in grids(rows) {
                let what = format!("softmax_rows {rows}x{k} grid {g}x{b}");
                let mut got = guarded(v.clone());
                // SAFETY: rows·k elements.
                unsafe { hvshim_hv_softmax_rows(g, b, got.as_mut_ptr(), rows as i64, k as i32) };
                assert_close(&what, body(&what, &got), &want);
            }
        }
    }
}

#[test]
fn sgd_matches_cpu() {
    let mut rng = Rng::new(16, 0);
    for n in SIZES {
        let p0 = random(&mut rng, n, 1.0);
        let m0 = random(&mut rng, n, 0.1);
        let grads: Vec<Vec<f32>> = (0..3).map(|_| random(&mut rng, n, 5.0)).collect();
        for momentum in [false, true] {
            for nesterov in [false, true] {
                for wd in [0.0, 1e-3] {
                    let h = SgdHyper { lr: 0.05, grad_scale: 1.0 / 7.0, weight_decay: wd, momentum: 0.9, nesterov };
                    for (k, (g, b)) in grids(n).into_iter().enumerate() {
                        let mut low = low_copy(k % 2 == 1, n);
                        let what = format!("sgd n={n} momentum={momentum} nesterov={nesterov} wd={wd} grid {g}x{b}");
                        let (mut wp, mut wm) = (p0.clone(), m0.clone());
                        let mut p = guarded(p0.clone());
                        let mut m = momentum.then(|| guarded(m0.clone()));
                        // Three steps, so the momentum carries over.
                        for grad in &grads {
                            cpu::sgd(&mut wp, grad, momentum.then_some(&mut wm[..]), &h);
                            // SAFETY: p, grad and m hold n elements.
                            unsafe {
                                let mp = ptr_or_null(&mut m);
                                let (lr, gs, mu) = (h.lr, h.grad_scale, h.momentum);
                                hvshim_hv_sgd(
                                    g,
                                    b,
                                    p.as_mut_ptr(),
                                    grad.as_ptr(),
                                    mp,
                                    n as i64,
                                    lr,
                                    gs,
                                    wd,
                                    mu,
                                    nesterov as i32,
                                    low_ptr(&mut low),
                                );
                            }
                        }
                        assert_close(&what, body(&what, &p), &wp);
                        check_low(&what, &low, body(&what, &p));
                        if let Some(m) = &m {
                            assert_close(&format!("{what} m"), body(&what, m), &wm);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn adam_matches_cpu() {
    let mut rng = Rng::new(17, 0);
    let (b1, b2, lr) = (0.9f32, 0.999f32, 1e-3f32);
    for n in SIZES {
        let p0 = random(&mut rng, n, 1.0);
        let m0 = random(&mut rng, n, 0.01);
        let v0: Vec<f32> = random(&mut rng, n, 1e-3).iter().map(|x| x.abs()).collect();
        let grads: Vec<Vec<f32>> = (0..3).map(|_| random(&mut rng, n, 5.0)).collect();
        // Plain Adam, Adam with an L2 penalty, AdamW (decoupled decay).
        for (l2, decay) in [(0.0, 0.0), (0.01, 0.0), (0.0, lr * 0.05)] {
            for t0 in [0, 99] {
                for (k, (g, b)) in grids(n).into_iter().enumerate() {
                    let mut low = low_copy(k % 2 == 0, n);
                    let what = format!("adam n={n} l2={l2} decay={decay} t0={t0} grid {g}x{b}");
                    let (mut wp, mut wm, mut wv) = (p0.clone(), m0.clone(), v0.clone());
                    let (mut p, mut m, mut v) = (guarded(p0.clone()), guarded(m0.clone()), guarded(v0.clone()));
                    for (step, grad) in grads.iter().enumerate() {
                        let t = (t0 + step + 1) as i32;
                        let h = AdamHyper {
                            lr,
                            grad_scale: 1.0 / 3.0,
                            b1,
                            b2,
                            eps: 1e-8,
                            bc1: 1.0 - b1.powi(t),
                            bc2_sqrt: (1.0 - b2.powi(t)).sqrt(),
                            l2,
                            decay,
                        };
                        cpu::adam(&mut wp, grad, &mut wm, &mut wv, &h);
                        // SAFETY: p, grad, m and v hold n elements.
                        unsafe {
                            hvshim_hv_adam(
                                g,
                                b,
                                p.as_mut_ptr(),
                                grad.as_ptr(),
                                m.as_mut_ptr(),
                                v.as_mut_ptr(),
                                n as i64,
                                h.lr,
                                h.grad_scale,
                                h.b1,
                                h.b2,
                                h.eps,
                                h.bc1,
                                h.bc2_sqrt,
                                h.l2,
                                h.decay,
                                low_ptr(&mut low),
                            );
                        }
                    }
                    assert_close(&what, body(&what, &p), &wp);
                    check_low(&what, &low, body(&what, &p));
                    assert_close(&format!("{what} m"), body(&what, &m), &wm);
                    assert_close(&format!("{what} v"), body(&what, &v), &wv);
                }
            }
        }
    }
}

#[test]
fn every_kernel_has_a_shim() {
    let src = include_str!("../shim.cpp");
    for k in super::launch::KERNELS {
        assert!(src.contains(&format!("void hvshim_{k}(")), "{k} has no hvshim_{k} in shim.cpp");
    }
}
