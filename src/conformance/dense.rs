//! The dense layer's forward through `Backend::dense` (on a GPU one cublasLt call with the
//! bias and activation in its epilogue where one exists): every activation, widths that are
//! and are not multiples of 8, operands at offsets inside larger buffers (so at 4-byte
//! alignment as well as the allocation's), against act(x · W + b) in float64.
//!
//! Must not: use a backend's own code as the reference.

use super::act_ref;
use super::check::{close, host, random};
use crate::config::Activation;
use crate::device::backend::{Backend, Gemm, Trans};

pub(super) fn dense<B: Backend>(be: &B) {
    let acts = [Activation::Identity, Activation::Relu, Activation::Tanh, Activation::Gelu];
    for (seed, &(b, i, o)) in [(1, 1, 8), (5, 7, 16), (33, 65, 24), (17, 9, 31), (3, 129, 40)].iter().enumerate() {
        for off in [0usize, 3] {
            let (x, w, bias) = (random(off + b * i, seed as u64), random(off + i * o, 50 + seed as u64), random(o, 99));
            let z: Vec<f64> = (0..b * o)
                .map(|e| {
                    let (r, c) = (e / o, e % o);
                    (0..i).map(|p| x[off + r * i + p] as f64 * w[off + p * o + c] as f64).sum::<f64>() + bias[c] as f64
                })
                .collect();
            let (xd, wd, bd) = (be.upload(&x).unwrap(), be.upload(&w).unwrap(), be.upload(&bias).unwrap());
            for act in acts {
                let mut out = be.upload(&vec![f32::NAN; b * o]).unwrap();
                let mut keep = be.zeros(b * o).unwrap();
                let keep_z = (act == Activation::Gelu).then(|| be.view_mut(&mut keep, 0..b * o));
                let (xv, wv) = (be.view(&xd, off..off + b * i), be.view(&wd, off..off + i * o));
                let g = Gemm::new(b, i, o, Trans::N, Trans::N);
                be.dense(g, xv, wv, &mut out, b * o, be.view(&bd, 0..o), act, keep_z).unwrap();
                let what = format!("dense {b}x{i}x{o} at offset {off}, {act:?}");
                close(&host(be, &out, b * o), &z.iter().map(|&z| act_ref(act, z)).collect::<Vec<_>>(), 1e-5, &what);
                if act == Activation::Gelu {
                    close(&host(be, &keep, b * o), &z, 1e-5, &format!("{what}: the kept pre-activation"));
                }
            }
        }
    }
}
