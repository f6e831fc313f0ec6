//! The conformance checks' shared parts: seeded random inputs, a buffer read back to the
//! host, and the tolerance comparison against an f64 reference.
//!
//! Must not: hold a check (`mod.rs` and `losses.rs` do).

use crate::device::backend::Backend;
use crate::rng::Rng;

pub(super) fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed, 7);
    (0..n).map(|_| (r.uniform() * 2.0 - 1.0) as f32).collect()
}

pub(super) fn host<B: Backend>(be: &B, buf: &B::Buf, n: usize) -> Vec<f32> {
    let mut v = vec![0.0; n];
    be.download(buf, 0..n, &mut v).unwrap();
    v
}

pub(super) fn close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}
