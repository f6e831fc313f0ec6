//! The fused optimizer kernels (`hv_sgd_seg`, `hv_adam_seg`: a bucket's tensors in one
//! launch) through the host shim, against the per-tensor kernels (`hv_sgd`, `hv_adam`) run
//! segment by segment with each segment's weight decay: the same bits, which is what lets the
//! optimizer fuse without changing a weight. Segments of odd sizes (1 included), decay on
//! some and not others, every grid of `grids`; guard elements untouched.
//!
//! Must not: be built into the binary (tests only).

use super::super::launch::{grid_1d, Segs, MAX_SEGS};
use super::{body, check_low, guarded, low_copy, low_ptr, random};
use crate::device::Segment;
use crate::rng::Rng;

extern "C" {
    fn hvshim_hv_sgd_seg(
        g: u32,
        b: u32,
        p: *mut f32,
        grad: *const f32,
        m: *mut f32,
        n: i64,
        segs: Segs,
        lr: f32,
        grad_scale: f32,
        wd: f32,
        mu: f32,
        nesterov: i32,
        low: *mut u16,
    );
    fn hvshim_hv_adam_seg(
        g: u32,
        b: u32,
        p: *mut f32,
        grad: *const f32,
        m: *mut f32,
        v: *mut f32,
        n: i64,
        segs: Segs,
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
}

/// Segments of these sizes, every other one decayed (as weights and biases alternate).
fn segments(sizes: &[usize]) -> Vec<Segment> {
    let mut at = 0;
    sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            at += n;
            Segment { range: at - n..at, decayed: k % 2 == 0 }
        })
        .collect()
}

const LAYOUTS: [&[usize]; 3] = [&[17, 5, 129, 1, 300, 64], &[1000], &[3, 1, 1, 2, 70_001, 9]];

fn grids(n: usize) -> [(u32, u32); 3] {
    [grid_1d(n), (1, 32), (3, 64)]
}

fn same_bits(what: &str, a: &[f32], b: &[f32]) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}: [{i}] fused {x:e} vs per tensor {y:e}");
    }
}

#[test]
fn sgd_seg_equals_sgd_per_tensor() {
    let mut rng = Rng::new(51, 0);
    for sizes in LAYOUTS {
        let segs = segments(sizes);
        let n: usize = sizes.iter().sum();
        let table = Segs::of(&segs).expect("adjacent, few");
        let (p0, m0, g) = (random(&mut rng, n, 1.0), random(&mut rng, n, 0.1), random(&mut rng, n, 5.0));
        for (momentum, nesterov) in [(false, false), (true, false), (true, true)] {
            for (k, (gx, bx)) in grids(n).into_iter().enumerate() {
                let mut low = low_copy(k % 2 == 0, n);
                let what = format!("sgd {sizes:?} momentum={momentum} nesterov={nesterov} grid {gx}x{bx}");
                let (mut p, mut m) = (guarded(p0.clone()), guarded(m0.clone()));
                let (mut wp, mut wm) = (guarded(p0.clone()), guarded(m0.clone()));
                let mp = if momentum { m.as_mut_ptr() } else { std::ptr::null_mut() };
                // SAFETY: p, m and g hold n elements (p and m guards beyond); the per-segment
                // calls stay inside their segment.
                unsafe {
                    hvshim_hv_sgd_seg(
                        gx,
                        bx,
                        p.as_mut_ptr(),
                        g.as_ptr(),
                        mp,
                        n as i64,
                        table,
                        0.05,
                        0.25,
                        1e-2,
                        0.9,
                        nesterov as i32,
                        low_ptr(&mut low),
                    );
                    for s in &segs {
                        let (r, wd) = (s.range.clone(), if s.decayed { 1e-2 } else { 0.0 });
                        let wmp = if momentum { wm[r.start..].as_mut_ptr() } else { std::ptr::null_mut() };
                        let k = r.len() as i64;
                        let (gs, bs) = grid_1d(r.len());
                        super::hvshim_hv_sgd(
                            gs,
                            bs,
                            wp[r.start..].as_mut_ptr(),
                            g[r.start..].as_ptr(),
                            wmp,
                            k,
                            0.05,
                            0.25,
                            wd,
                            0.9,
                            nesterov as i32,
                            std::ptr::null_mut(),
                        );
                    }
                }
                same_bits(&what, body(&what, &p), body(&what, &wp));
                check_low(&what, &low, body(&what, &p));
                if momentum {
                    same_bits(&format!("{what} m"), body(&what, &m), body(&what, &wm));
                }
            }
        }
    }
}

#[test]
fn adam_seg_equals_adam_per_tensor() {
    let mut rng = Rng::new(53, 0);
    for sizes in LAYOUTS {
        let segs = segments(sizes);
        let n: usize = sizes.iter().sum();
        let table = Segs::of(&segs).expect("adjacent, few");
        let (p0, m0, g) = (random(&mut rng, n, 1.0), random(&mut rng, n, 0.1), random(&mut rng, n, 5.0));
        let v0: Vec<f32> = random(&mut rng, n, 0.1).iter().map(|x| x.abs()).collect();
        for (l2, decay) in [(0.05f32, 0.0f32), (0.0, 1e-3)] {
            for (k, (gx, bx)) in grids(n).into_iter().enumerate() {
                let mut low = low_copy(k % 2 == 1, n);
                let what = format!("adam {sizes:?} l2={l2} decay={decay} grid {gx}x{bx}");
                let (mut p, mut m, mut v) = (guarded(p0.clone()), guarded(m0.clone()), guarded(v0.clone()));
                let (mut wp, mut wm, mut wv) = (guarded(p0.clone()), guarded(m0.clone()), guarded(v0.clone()));
                let h = (1e-3f32, 0.5f32, 0.9f32, 0.999f32, 1e-7f32, 0.271f32, 0.0547f32);
                // SAFETY: as in sgd_seg_equals_sgd_per_tensor.
                unsafe {
                    hvshim_hv_adam_seg(
                        gx,
                        bx,
                        p.as_mut_ptr(),
                        g.as_ptr(),
                        m.as_mut_ptr(),
                        v.as_mut_ptr(),
                        n as i64,
                        table,
                        h.0,
                        h.1,
                        h.2,
                        h.3,
                        h.4,
                        h.5,
                        h.6,
                        l2,
                        decay,
                        low_ptr(&mut low),
                    );
                    for s in &segs {
                        let r = s.range.clone();
                        let (l2s, ds) = if s.decayed { (l2, decay) } else { (0.0, 0.0) };
                        let (gs, bs) = grid_1d(r.len());
                        super::hvshim_hv_adam(
                            gs,
                            bs,
                            wp[r.start..].as_mut_ptr(),
                            g[r.start..].as_ptr(),
                            wm[r.start..].as_mut_ptr(),
                            wv[r.start..].as_mut_ptr(),
                            r.len() as i64,
                            h.0,
                            h.1,
                            h.2,
                            h.3,
                            h.4,
                            h.5,
                            h.6,
                            l2s,
                            ds,
                            std::ptr::null_mut(),
                        );
                    }
                }
                same_bits(&what, body(&what, &p), body(&what, &wp));
                check_low(&what, &low, body(&what, &p));
                same_bits(&format!("{what} m"), body(&what, &m), body(&what, &wm));
                same_bits(&format!("{what} v"), body(&what, &v), body(&what, &wv));
            }
        }
    }
}

/// The table: offsets from the first segment's start; None past `MAX_SEGS` or with a gap.
#[test]
fn segment_tables() {
    let segs = vec![Segment { range: 10..15, decayed: true }, Segment { range: 15..16, decayed: false }];
    let t = Segs::of(&segs).unwrap();
    assert_eq!((t.n, &t.end[..2], &t.decayed[..2]), (2, &[5i64, 6][..], &[1, 0][..]));
    let gap = vec![Segment { range: 0..4, decayed: true }, Segment { range: 5..6, decayed: false }];
    assert!(Segs::of(&gap).is_none());
    let many: Vec<Segment> = (0..=MAX_SEGS).map(|k| Segment { range: k..k + 1, decayed: false }).collect();
    assert!(Segs::of(&many).is_none() && Segs::of(&many[..MAX_SEGS]).is_some());
    assert!(Segs::of(&[]).is_none());
}
