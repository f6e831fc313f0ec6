//! The model's starting weights: each layer's draws under `model.init` (Keras' initializers:
//! Glorot, He and LeCun, uniform or normal cut at 2σ), from the seed, one stream per layer, so
//! any piece of the arena is drawn without the rest (`init_pieces`, for a rank that keeps only
//! its shard). Biases start at zero.
//!
//! Must not: depend on the rank count or the split (the draws are the whole model's).

use super::Mlp;
use crate::config::Init;
use crate::rng::Rng;
use std::ops::Range;

/// How one layer `fan_in` → `fan_out` draws its weights under `init`, worked out once per
/// layer: a uniform init's ±limit·(2u − 1) (glorot_uniform's limit √(6 / (fan_in + fan_out))
/// computed as it always was, so its weights keep their bits), a normal init's value at quantile
/// u of a normal cut at ±2σ, σ widened by 1/0.8796 as Keras' `TruncatedNormal` in
/// `VarianceScaling`.
enum Draw {
    Uniform { limit: f64 },
    Normal { sd: f64 },
}

impl Draw {
    // Φ(−2): the share of a normal below −2σ, cut away on each side.
    const CUT: f64 = 0.022_750_131_948_179_195;
    // The standard deviation of a standard normal cut at ±2.
    const KEPT_STD: f64 = 0.879_625_661_034_239_8;

    fn new(init: Init, fan_in: usize, fan_out: usize) -> Draw {
        match init {
            Init::GlorotUniform => Draw::Uniform { limit: (6.0 / (fan_in + fan_out) as f64).sqrt() },
            _ if init.normal() => Draw::Normal { sd: init.variance(fan_in, fan_out).sqrt() },
            _ => Draw::Uniform { limit: (3.0 * init.variance(fan_in, fan_out)).sqrt() },
        }
    }

    /// The weight from `u`, uniform in [0, 1).
    fn at(&self, u: f64) -> f32 {
        match *self {
            Draw::Uniform { limit } => ((u * 2.0 - 1.0) * limit) as f32,
            Draw::Normal { sd } => {
                let z = crate::rng::normal_quantile(Draw::CUT + u * (1.0 - 2.0 * Draw::CUT));
                (z * sd / Draw::KEPT_STD) as f32
            }
        }
    }
}

impl Mlp {
    /// Weights drawn as `self.init` says (Glorot-uniform, Keras' default for Dense, unless
    /// `model.init` chose another), zero biases, from `seed`.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        self.init_pieces(seed, std::iter::once(0..self.n_params))
    }

    /// `init_params(seed)`'s values at arena ranges `pieces`, end to end, without the whole
    /// arena: what a rank of `shard = "parameters"` keeps. Layer l's weights are one stream of
    /// draws (`Rng::new(seed, 0x1A7E_0000 + l)`, in arena order), so a piece's values are its
    /// stream's draws at its offsets: the draws before it are made and dropped (the whole
    /// model's draws on every rank, but one piece's memory). Biases and the padding between
    /// tensors are zeros.
    pub fn init_pieces(&self, seed: u64, pieces: impl IntoIterator<Item = Range<usize>>) -> Vec<f32> {
        assert_eq!(self.tensor.1, 1, "initialize the whole model, then shard it");
        let pieces: Vec<Range<usize>> = pieces.into_iter().collect();
        let mut out = Vec::with_capacity(pieces.iter().map(|r| r.len()).sum());
        // Each layer's stream, where it stands: (draws made, the stream).
        let mut streams: Vec<Option<(usize, Rng)>> = vec![None; self.layers.len()];
        for piece in pieces {
            let mut at = piece.start;
            while at < piece.end {
                let Some((l, s)) = self.layers.iter().enumerate().find(|(_, s)| s.w.contains(&at)) else {
                    // A bias or padding: zeros up to the next weight.
                    let next = self.layers.iter().map(|s| s.w.start).filter(|&w| w > at).min();
                    let end = piece.end.min(next.unwrap_or(piece.end));
                    out.resize(out.len() + (end - at), 0.0);
                    at = end;
                    continue;
                };
                let end = piece.end.min(s.w.end);
                if streams[l].as_ref().is_some_and(|(made, _)| *made > at - s.w.start) {
                    streams[l] = None; // a piece before one drawn already: the stream again
                }
                let (made, rng) = streams[l].get_or_insert_with(|| (0, Rng::new(seed, 0x1A7E_0000 + l as u64)));
                while *made < at - s.w.start {
                    rng.uniform();
                    *made += 1;
                }
                let draw = Draw::new(self.init, s.inp, s.out);
                out.extend((at..end).map(|_| draw.at(rng.uniform())));
                *made = end - s.w.start;
                at = end;
            }
        }
        out
    }
}
