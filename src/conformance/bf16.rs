//! The bf16 paths a GPU keeps opt-in until it has passed them (`hvtrain selftest` on a GPU):
//! bf16 copies of the products' operands, and bf16 layer outputs (`Bf16Keep`). The layer
//! check is written once against `Backend` and also runs on the CPU reference where the CPU
//! has AVX512-BF16.
//!
//! Must not: use a backend's own code as the reference for one layer (the reference is
//! written here; whole steps compare against the CPU backend or the plain bf16 path).

use super::act_ref;
use super::check::host;
use super::dense::{layer_inputs, LAYERS};
use super::{caught, hook_default};
use crate::config::{Activation, Precision};
use crate::device::backend::{Backend, Gemm, Trans};
use crate::device::bf16::round;

/// A dense layer of a backend storing bf16 outputs: every activation (GELU with and without
/// its kept pre-activation), widths that are and are not multiples of 8, operands at offsets
/// inside larger buffers, against round(act(round(x) · round(W) + round(b))) in float64. Every
/// output (and GELU's kept pre-activation) must be a bf16 value, within one bf16 step of the
/// reference (a float32 sum in another order, or another tanh, may flip a rounding).
pub(super) fn layer<B: Backend>(be: &B) {
    let acts =
        Activation::ALL.into_iter().map(|a| (a, false)).chain([(Activation::Gelu, true), (Activation::Silu, true)]);
    let acts: Vec<_> = acts.collect();
    for (seed, &(b, i, o)) in LAYERS.iter().enumerate() {
        for off in [0usize, 3] {
            let (x, w, bias, mut z) = layer_inputs(seed, off, (b, i, o), |v| round(v) as f64);
            // bf16 outputs add the bias rounded to bf16 (as cuBLAS's bf16 epilogue reads it).
            z.iter_mut().enumerate().for_each(|(e, z)| *z += f64::from(round(bias[e % o])) - f64::from(bias[e % o]));
            let (xd, wd, bd) = (be.upload(&x).unwrap(), be.upload(&w).unwrap(), be.upload(&bias).unwrap());
            for &(act, keep) in &acts {
                let mut out = be.upload(&vec![f32::NAN; b * o]).unwrap();
                let mut kept = be.zeros(b * o).unwrap();
                let keep_z = keep.then(|| be.view_mut(&mut kept, 0..b * o));
                let (xv, wv) = (be.view(&xd, off..off + b * i), be.view(&wd, off..off + i * o));
                let g = Gemm::new(b, i, o, Trans::N, Trans::N);
                be.dense(g, xv, wv, &mut out, b * o, be.view(&bd, 0..o), act, keep_z).unwrap();
                let what = format!("bf16 outputs: dense {b}x{i}x{o} at offset {off}, {act:?} (keep z: {keep})");
                let want: Vec<f64> = z.iter().map(|&z| act_ref(act, z)).collect();
                one_bf16_step(&host(be, &out, b * o), &want, &what);
                if keep {
                    one_bf16_step(&host(be, &kept, b * o), &z, &format!("{what}: the kept pre-activation"));
                }
            }
        }
    }
}

/// Each of `got` a bf16 value within one bf16 step of `want` rounded to bf16.
fn one_bf16_step(got: &[f32], want: &[f64], what: &str) {
    for (e, (&g, &w)) in got.iter().zip(want).enumerate() {
        let w = round(w as f32);
        assert!(g.to_bits() & 0xffff == 0, "{what}[{e}]: {g} is not a bf16 value");
        // One bf16 step is 2^-7 of the value's binade, between 2^-8 and 2^-7 of |w|: 2^-8 was
        // half a step near a binade's bottom (the H200 flipped a GELU output by one whole step,
        // -0.16602 for -0.16699, 2026-11-29: cuBLAS's GELU is not ours to the last bit).
        assert!((g - w).abs() <= 2f32.powi(-7) * w.abs() + 1e-6, "{what}[{e}]: got {g}, want {w}");
    }
}

/// Five training steps in bf16 on GPU `g` with the backend keeping bf16 copies
/// (`HVTRAIN_BF16_COPIES=1`) and without, side by side: the same bits go into every product,
/// so gradients and weights agree to summation order (1e-4 norm-wise; a stale copy is off by
/// a step's update), and the products must have read copies.
pub(super) fn copies(g: usize) -> std::result::Result<String, String> {
    use crate::device::cuda::{Bf16Keep, Cuda};
    let with =
        Cuda::with_bf16(g, Precision::Bf16, Bf16Keep { copies: true, outputs: false }).map_err(|e| e.to_string())?;
    let plain = Cuda::with_bf16(g, Precision::Bf16, Bf16Keep::default()).map_err(|e| e.to_string())?;
    let rel = agree(&with, &plain, 1e-4, "rounding every operand")?;
    let [copies, rounded] = with.bf16_copy_reads().unwrap_or_default();
    if copies == 0 {
        return Err(format!("no operand was read from a copy ({rounded} rounded)"));
    }
    Ok(format!("norm-wise {rel:.1e}, tolerance 1e-4; {copies} operands from copies, {rounded} rounded"))
}

/// bf16 layer outputs on GPU `g` (`HVTRAIN_BF16_OUTPUTS=1`): cublasLt's bf16 epilogues passed
/// their start-up check and ran; one layer of every kind against the reference above; five
/// steps with kept copies against five without (the same values: 1e-4 norm-wise; a stale
/// copy of an output is off by a step); and, on a CPU with AVX512-BF16, five steps against the
/// CPU reference storing bf16 outputs (1e-2 norm-wise: its products sum in another order,
/// which may flip an output's rounding, 2^-8 relative, on a few elements; a missing rounding
/// or a wrong epilogue is caught by the layer check, which is sharp).
pub(super) fn outputs(g: usize) -> std::result::Result<String, String> {
    use crate::device::cuda::{Bf16Keep, Cuda};
    let open = |copies| Cuda::with_bf16(g, Precision::Bf16, Bf16Keep { copies, outputs: true });
    let be = open(false).map_err(|e| e.to_string())?;
    if !be.bf16_epilogues() {
        return Err(format!("cublasLt's bf16 epilogues are off: {}", be.name()));
    }
    std::panic::set_hook(Box::new(|_| {}));
    let r = caught(|| layer(&be));
    std::panic::set_hook(hook_default());
    r?;
    let calls = be.bf16_epilogue_calls();
    if calls == 0 {
        return Err("no layer ran through cublasLt's bf16 epilogue".into());
    }
    let with = open(true).map_err(|e| e.to_string())?;
    let rel = agree(&with, &be, 1e-4, "bf16 outputs without copies")?;
    let mut how = format!("{calls} layers through cublasLt; with copies norm-wise {rel:.1e}, tolerance 1e-4");
    if crate::device::bf16::supported() {
        let cpu = crate::device::Cpu::new(Precision::Bf16).map_err(|e| e.to_string())?.with_outputs(true);
        let rel = agree(&be, &cpu, 1e-2, "the CPU reference with bf16 outputs")?;
        how += &format!("; against the CPU norm-wise {rel:.1e}, tolerance 1e-2");
    } else {
        how += "; no CPU reference (this CPU has no AVX512-BF16)";
    }
    Ok(how)
}

/// `steps_agree` of `a` and `b` over five steps within `tol`, or what differed.
fn agree<A: Backend, B: Backend>(a: &A, b: &B, tol: f64, against: &str) -> std::result::Result<f64, String> {
    std::panic::set_hook(Box::new(|_| {}));
    let rel = caught(|| {
        let rel = crate::model::gradcheck::steps_agree(a, b, 5);
        assert!(rel <= tol, "gradients or weights differ by {rel:.1e} (norm-wise) from {against}");
        rel
    });
    std::panic::set_hook(hook_default());
    rel
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Cpu;

    /// The CPU reference storing bf16 outputs passes the layer check; the same backend storing
    /// float32 outputs fails it (the check sees a missing rounding).
    #[test]
    fn cpu_reference_passes_the_bf16_output_layer_check() {
        if !crate::device::bf16::supported() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return;
        }
        let be = Cpu::new(Precision::Bf16).unwrap();
        layer(&be.with_outputs(true));
        let plain = std::panic::catch_unwind(|| layer(&be.with_outputs(false)));
        assert!(plain.is_err(), "float32 outputs passed the bf16 outputs check");
    }
}
